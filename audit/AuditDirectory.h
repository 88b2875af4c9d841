#pragma once
// The audit directory as the daemon holds it (audit/FORMAT.md "Directory"): opened once, checked
// like PostgreSQL checks its data directory (owned by the daemon's user, not writable by its
// group or others), and locked for the daemon's whole life with an open-file-description lock on
// `splicegate.lock` (holder pid written in it), taken BEFORE recovery so that a second daemon
// never changes a directory another one writes. Every audit file is opened relative to the
// directory fd without following symlinks (openInDirectory).
// Thread affinity: none; the object is shared read-only after open. Error contract: open()
// throws std::system_error naming the directory or file (AuditDirectoryHeld when another process
// holds the lock); checkAuditDirectory() never throws for what it finds, it lists it.
#include <dirent.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "common/UniqueFd.h"

namespace splicegate::audit {

constexpr const char* kLockFileName = "splicegate.lock";

// Opens `name` (no '/') in `dirFd` without following a symlink (openat2 RESOLVE_NO_SYMLINKS |
// RESOLVE_BENEATH where the kernel has it (5.6), else openat with O_NOFOLLOW). With O_CREAT the
// file gets mode `mode` whatever the umask, and the directory's group (--audit-group). Returns the fd or -errno (ELOOP for a symlink).
int openInDirectory(int dirFd, const std::string& name, int flags, mode_t mode = 0640) noexcept;
// What openInDirectory does to a file it created, for one created elsewhere (an openat2 on a
// ring): mode `mode` whatever the umask, and the group of the directory `dirFd`.
void adjustCreatedFile(int fd, int dirFd, mode_t mode = 0640) noexcept;
// Throwing form, naming dir/name.
UniqueFd openInDirectoryOrThrow(int dirFd, const std::string& dir, const std::string& name,
                                int flags, mode_t mode = 0640);
// Calls `visit` with every entry of the directory open as `dirFd` (`dir` names it in errors),
// "." and ".." included. Throws std::system_error naming the directory when it cannot be read.
void forEachDirectoryEntry(int dirFd, const std::string& dir,
                           const std::function<void(const dirent&)>& visit);
// fsync of the directory itself (entries created, renamed or removed in it).
int syncDirectory(int dirFd) noexcept;
// pwrite of all of `bytes` at `offset`, retried on EINTR and short writes. Returns 0 or -errno
// (-EIO for a write that wrote nothing); `written` is what reached the file either way.
int writeFullyAt(int fd, std::string_view bytes, std::uint64_t offset,
                 std::size_t& written) noexcept;

// Replaces `name` in `dirFd` (the directory `dir`, for messages) with `bytes` so that a reader
// and a crash see the old file or the new one, whole: written to `temporaryName`, fdatasynced,
// renamed over `name`, the directory fsynced. Returns the new file's fd; throws naming the file.
UniqueFd replaceFileDurably(int dirFd, const std::string& dir, const std::string& temporaryName,
                            const std::string& name, std::string_view bytes);

class AuditDirectoryHeld : public std::runtime_error {
  public:
    AuditDirectoryHeld(const std::string& what, long holderPid)
        : std::runtime_error(what), holderPid_(holderPid) {}
    long holderPid() const noexcept { return holderPid_; }  // 0 when the lock file names none

  private:
    long holderPid_;
};

class AuditDirectory {
  public:
    // Creates `path` when missing (mode 0750), checks it and locks it. `group`: --audit-group;
    // the directory's group is set to it, and files created by openInDirectory take the
    // directory's group. Throws AuditDirectoryHeld ("audit directory DIR is held by another splicegate
    // process (pid N)") when locked, std::system_error otherwise.
    // `handedLock`: an upgrade's running daemon's lock file fd (relay/Handoff.h); when it is this
    // directory's lock file, its open file description already holds the lock, which is then
    // held by both processes until the old one exits. Any other fd is closed and the directory
    // locked as usual (so another directory's lock cannot pass for this one's).
    static AuditDirectory open(const std::string& path, std::optional<gid_t> group = std::nullopt,
                               UniqueFd handedLock = {});

    AuditDirectory(AuditDirectory&&) noexcept = default;
    AuditDirectory& operator=(AuditDirectory&&) noexcept = default;

    int fd() const noexcept { return dir_.get(); }
    const std::string& path() const noexcept { return path_; }
    // The lock file, for an upgrade's hand-off.
    int lockFd() const noexcept { return lock_.get(); }
    // The lock came from the running daemon of an upgrade (open()'s `handedLock`).
    bool lockHandedOver() const noexcept { return lockHandedOver_; }

  private:
    AuditDirectory() = default;
    std::string path_;
    UniqueFd dir_;
    UniqueFd lock_;  // holds the lock while open
    bool lockHandedOver_ = false;
};

struct AuditDirectoryCheck {
    std::vector<std::string> problems;  // one line each, naming the directory
    // A running daemon holds it (not a problem in itself): its lock file is write-locked, which
    // needs it open for writing (the daemon's user; the file is 0640). A read lock, which
    // anyone who can read the log can take, does not count.
    std::optional<long> holderPid;
};

// For --check-config: the same checks as AuditDirectory::open, read-only (creates, changes and
// locks nothing, so it never disturbs a daemon that holds the directory or is starting).
AuditDirectoryCheck checkAuditDirectory(const std::string& path,
                                        std::optional<gid_t> group = std::nullopt);

}  // namespace splicegate::audit
