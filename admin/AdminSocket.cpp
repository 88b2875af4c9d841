#include "admin/AdminSocket.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/acl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "common/Error.h"
#include "common/Log.h"

namespace splicegate {

namespace {

constexpr mode_t kSocketMode = 0660;
constexpr const char* kEntryName = "s";

sockaddr_un unixAddress(const std::string& path, const std::string& what) {
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    if (path.empty()) throw UsageError(what + " path is empty");
    if (path.size() >= sizeof(address.sun_path)) {
        throw UsageError(what + " path '" + path + "' is longer than " +
                         std::to_string(sizeof(address.sun_path) - 1) + " bytes");
    }
    if (path.find('\0') != std::string::npos) throw UsageError(what + " path contains a NUL byte");
    std::memcpy(address.sun_path, path.data(), path.size());
    return address;
}

// A socket file left behind by a dead daemon is removed; one somebody listens on, or anything
// that is not a socket (a symlink included), is left alone and reported.
void removeStaleSocket(int parentFd, const std::string& name, const std::string& path) {
    struct stat st {};
    if (::fstatat(parentFd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) return;
        throwErrno(errno, "admin socket " + path + ": fstatat");
    }
    if (!S_ISSOCK(st.st_mode)) {
        throw UsageError("admin socket " + path +
                         " exists and is not a socket; refusing to replace it");
    }
    const sockaddr_un address = unixAddress(path, "admin socket");
    UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    checkSys(probe.get(), "admin socket " + path + ": socket");
    if (::connect(probe.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0 ||
        errno == EAGAIN || errno == EINPROGRESS) {
        throwErrno(EADDRINUSE, "admin socket " + path +
                                   ": another process is listening on it (is splicegate "
                                   "already running?)");
    }
    if (errno != ECONNREFUSED) throwErrno(errno, "admin socket " + path + ": probing it");
    if (::unlinkat(parentFd, name.c_str(), 0) != 0 && errno != ENOENT) {
        throwErrno(errno, "admin socket " + path + ": removing the stale socket file");
    }
    logInfo("admin socket ", path, ": removed a stale socket file");
}

// The private directory the socket is bound in; removed with whatever is left in it.
class PrivateDirectory {
  public:
    PrivateDirectory(int parentFd, const std::string& parent, const std::string& path)
        : parentFd_(parentFd) {
        std::string pattern = parent + "/.splicegate-admin.XXXXXX";
        // mkdtemp creates the directory with mode 0700.
        if (::mkdtemp(pattern.data()) == nullptr) {
            throwErrno(errno, "admin socket " + path + ": mkdtemp " + pattern);
        }
        name_ = pattern.substr(parent.size() + 1);
        fd_.reset(::openat(parentFd, name_.c_str(), O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!fd_) {
            const int error = errno;
            ::unlinkat(parentFd_, name_.c_str(), AT_REMOVEDIR);
            throwErrno(error, "admin socket " + path + ": open " + pattern);
        }
        struct stat st {};
        checkSys(::fstat(fd_.get(), &st), "admin socket " + path + ": fstat " + pattern);
        if ((st.st_mode & 077) != 0 || st.st_uid != ::geteuid()) {
            throw UsageError("admin socket " + path + ": " + pattern +
                             " is not a private directory (mode or owner changed)");
        }
    }
    ~PrivateDirectory() {
        ::unlinkat(fd_.get(), kEntryName, 0);
        ::unlinkat(parentFd_, name_.c_str(), AT_REMOVEDIR);
    }
    PrivateDirectory(const PrivateDirectory&) = delete;
    PrivateDirectory& operator=(const PrivateDirectory&) = delete;

    int fd() const noexcept { return fd_.get(); }
    // The entry reached through the directory's fd, never through its name: a rename of the
    // directory by someone with write access to the parent does not redirect us.
    std::string entryPath() const {
        return "/proc/self/fd/" + std::to_string(fd_.get()) + "/" + kEntryName;
    }

  private:
    int parentFd_;
    std::string name_;
    UniqueFd fd_;
};

struct AclDeleter {
    void operator()(void* acl) const noexcept { ::acl_free(acl); }
};

// rw for the owner, the file's group and `readonlyGroup`; nothing for others.
void grantReadonlyGroup(const std::string& entryPath, gid_t readonlyGroup,
                        const std::string& groupName, const std::string& path) {
    const std::string text =
        "u::rw-,g::rw-,g:" + std::to_string(readonlyGroup) + ":rw-,m::rw-,o::---";
    std::unique_ptr<void, AclDeleter> acl(::acl_from_text(text.c_str()));
    if (!acl) throwErrno(errno, "admin socket " + path + ": acl_from_text");
    if (::acl_set_file(entryPath.c_str(), ACL_TYPE_ACCESS, static_cast<acl_t>(acl.get())) != 0) {
        const int error = errno;
        throwErrno(error, "admin socket " + path + ": granting --admin-readonly-group '" +
                              groupName + "' access with a POSIX ACL" +
                              (error == EOPNOTSUPP ? " (the file system has no ACL support)" : ""));
    }
}

// The socket's directory must let `readonlyGroup` through too: the packaged unit's runtime
// directory is 0750 with the daemon's group, so an ACL on the socket alone leaves that group at
// the directory's door (connect: EACCES). Search (x) only, added to the directory's ACL; nothing
// changes when the group or every user may pass already.
void grantReadonlyTraverse(int parentFd, const std::string& parent, gid_t readonlyGroup,
                           const std::string& groupName, const std::string& path) {
    struct stat st {};
    checkSys(::fstat(parentFd, &st), "admin socket " + path + ": stat " + parent);
    if ((st.st_mode & S_IXOTH) != 0 || st.st_gid == readonlyGroup) return;
    const std::string dirPath = "/proc/self/fd/" + std::to_string(parentFd);
    const std::string what = "admin socket " + path + ": letting --admin-readonly-group '" +
                             groupName + "' search its directory " + parent + " (POSIX ACL)";
    std::unique_ptr<void, AclDeleter> acl(::acl_get_file(dirPath.c_str(), ACL_TYPE_ACCESS));
    if (!acl) throwErrno(errno, what);
    auto list = static_cast<acl_t>(acl.get());
    acl_entry_t groupEntry = nullptr;
    acl_entry_t maskEntry = nullptr;
    acl_entry_t entry = nullptr;
    for (int which = ACL_FIRST_ENTRY; ::acl_get_entry(list, which, &entry) == 1;
         which = ACL_NEXT_ENTRY) {
        acl_tag_t tag{};
        ::acl_get_tag_type(entry, &tag);
        if (tag == ACL_MASK) maskEntry = entry;
        if (tag != ACL_GROUP) continue;
        std::unique_ptr<void, AclDeleter> qualifier(::acl_get_qualifier(entry));
        if (qualifier && *static_cast<gid_t*>(qualifier.get()) == readonlyGroup)
            groupEntry = entry;
    }
    if (groupEntry == nullptr) {
        if (::acl_create_entry(&list, &groupEntry) != 0) throwErrno(errno, what);
        acl.release();
        acl.reset(list);
        ::acl_set_tag_type(groupEntry, ACL_GROUP);
        ::acl_set_qualifier(groupEntry, &readonlyGroup);
    }
    auto addSearch = [&](acl_entry_t target) {
        acl_permset_t permissions = nullptr;
        if (::acl_get_permset(target, &permissions) != 0 ||
            ::acl_add_perm(permissions, ACL_EXECUTE) != 0 ||
            ::acl_set_permset(target, permissions) != 0)
            throwErrno(errno, what);
    };
    addSearch(groupEntry);
    // An existing mask only gains search (a wider recomputed one would widen other entries).
    if (maskEntry != nullptr) {
        addSearch(maskEntry);
    } else if (::acl_calc_mask(&list) != 0) {
        throwErrno(errno, what);
    }
    acl.release();
    acl.reset(list);
    if (::acl_set_file(dirPath.c_str(), ACL_TYPE_ACCESS, list) != 0) {
        const int error = errno;
        throwErrno(error, what + (error == EPERM ? " (the daemon's user must own the directory)"
                                                 : error == EOPNOTSUPP
                                                     ? " (the file system has no ACL support)"
                                                     : ""));
    }
}

}  // namespace

AdminSocket::AdminSocket(std::string path, const AdminSocketAccess& access, int backlog)
    : path_(std::move(path)) {
    unixAddress(path_, "admin socket");
    const auto slash = path_.rfind('/');
    const std::string parent =
        slash == std::string::npos ? "." : (slash == 0 ? "/" : path_.substr(0, slash));
    const std::string name = slash == std::string::npos ? path_ : path_.substr(slash + 1);
    if (name.empty() || name == "." || name == "..") {
        throw UsageError("admin socket path '" + path_ + "' does not name a file");
    }
    UniqueFd parentFd(::open(parent.c_str(), O_DIRECTORY | O_PATH | O_CLOEXEC));
    if (!parentFd) throwErrno(errno, "admin socket " + path_ + ": open directory " + parent);

    removeStaleSocket(parentFd.get(), name, path_);
    PrivateDirectory directory(parentFd.get(), parent, path_);

    listenFd_.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    checkSys(listenFd_.get(), "admin socket " + path_ + ": socket");
    // bind() creates the file with the socket inode's mode minus the umask (net/unix/af_unix.c):
    // never wider than the final mode, even inside the private directory.
    checkSys(::fchmod(listenFd_.get(), kSocketMode), "admin socket " + path_ + ": fchmod");
    const sockaddr_un bindAddress = unixAddress(directory.entryPath(), "admin socket (private)");
    checkSys(::bind(listenFd_.get(), reinterpret_cast<const sockaddr*>(&bindAddress),
                    sizeof(bindAddress)),
             "admin socket " + path_ + ": bind");
    // As root: root:group. As an unprivileged daemon user: keep the owner, set the group (the
    // user must be a member of it).
    const uid_t owner = ::geteuid() == 0 ? 0 : static_cast<uid_t>(-1);
    if (::fchownat(directory.fd(), kEntryName, owner, access.group, AT_SYMLINK_NOFOLLOW) != 0) {
        throwErrno(errno, "admin socket " + path_ + ": chown to group '" + access.groupName +
                              "' (--admin-group)");
    }
    // The umask may have taken group bits away: set the final mode exactly.
    checkSys(::fchmodat(directory.fd(), kEntryName, kSocketMode, 0),
             "admin socket " + path_ + ": chmod 0660");
    if (access.readonlyGroup) {
        grantReadonlyGroup(directory.entryPath(), *access.readonlyGroup, access.readonlyGroupName,
                           path_);
        grantReadonlyTraverse(parentFd.get(), parent, *access.readonlyGroup,
                              access.readonlyGroupName, path_);
    }
    checkSys(::listen(listenFd_.get(), backlog), "admin socket " + path_ + ": listen");

    struct stat st {};
    checkSys(::fstatat(directory.fd(), kEntryName, &st, AT_SYMLINK_NOFOLLOW),
             "admin socket " + path_ + ": fstatat");
    // A file that appeared at the path since the stale check is somebody else's: not replaced.
    if (::renameat2(directory.fd(), kEntryName, parentFd.get(), name.c_str(), RENAME_NOREPLACE) !=
        0) {
        const int error = errno;
        if (error == EEXIST) {
            throw UsageError("admin socket " + path_ +
                             ": a file appeared at the path while the socket was being set up; "
                             "refusing to replace it");
        }
        throwErrno(error, "admin socket " + path_ + ": renameat2 into place");
    }
    device_ = st.st_dev;
    inode_ = st.st_ino;
    placed_ = true;
}

AdminSocket::AdminSocket(std::string path, UniqueFd adopted)
    : path_(std::move(path)), listenFd_(std::move(adopted)) {
    struct stat st {};
    if (::lstat(path_.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode))
        throw UsageError("admin socket " + path_ +
                         ": handed over by the running daemon, but the path no longer names a "
                         "socket");
    device_ = st.st_dev;
    inode_ = st.st_ino;
    placed_ = true;
}

AdminSocket::~AdminSocket() {
    struct stat st {};
    if (placed_ && ::lstat(path_.c_str(), &st) == 0 && st.st_dev == device_ &&
        st.st_ino == inode_) {
        ::unlink(path_.c_str());
    }
}

}  // namespace splicegate
