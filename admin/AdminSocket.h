#pragma once
// The admin socket's listening end (mode 0660, owner root, group
// --admin-group; members of --admin-readonly-group get rw through a POSIX ACL entry).
//
// The socket file appears at its path already carrying its final mode, owner and ACL: it is
// bound inside a fresh private directory (mode 0700, next to the path), given its permissions
// there relative to that directory's fd, and renamed into place with RENAME_NOREPLACE. Nothing
// is ever chmod/chown'ed by the public path, so a symlink or another file swapped in at the path
// is never followed (a racer gets EEXIST, not our permissions on its target). Linux honours a
// socket fd's fchmod for the file bind() creates but not fchown, hence the private directory.
//
// A socket file left by a dead daemon is removed (nothing accepts on it); a live one, or anything
// that is not a socket, is left alone and reported.
//
// Thread affinity: construct and destroy on one thread; fd() from any.
// Error contract: the constructor throws UsageError (unusable path, non-socket in the way) or
// std::system_error (a failed call), naming the path. The destructor removes the socket file
// only if the path still names the file this object bound.
#include <sys/types.h>

#include <optional>
#include <string>

#include "common/UniqueFd.h"

namespace splicegate {

struct AdminSocketAccess {
    gid_t group = 0;                     // the file's group: full access
    std::optional<gid_t> readonlyGroup;  // an ACL entry granting connect (rw) to this group
    std::string groupName;               // for messages ("--admin-group 'splicegate'")
    std::string readonlyGroupName;
};

class AdminSocket {
  public:
    AdminSocket(std::string path, const AdminSocketAccess& access, int backlog);
    // An upgrade: the previous process's listening socket, already at `path` with its mode,
    // owner and ACL. Throws UsageError when `path` no longer names a socket.
    AdminSocket(std::string path, UniqueFd adopted);
    ~AdminSocket();
    AdminSocket(const AdminSocket&) = delete;
    AdminSocket& operator=(const AdminSocket&) = delete;

    int fd() const noexcept { return listenFd_.get(); }
    const std::string& path() const noexcept { return path_; }
    // The socket now belongs to the process it was handed to: the destructor leaves the file.
    void keepFile() noexcept { placed_ = false; }

  private:
    std::string path_;
    UniqueFd listenFd_;
    dev_t device_ = 0;
    ino_t inode_ = 0;
    bool placed_ = false;
};

}  // namespace splicegate
