#include "audit/AuditDirectory.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "common/Error.h"
#include "common/Log.h"

namespace splicegate::audit {
namespace {

std::string octal(mode_t mode) {
    char text[16];
    std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
    return text;
}

// What makes a directory unsafe to hold the audit log, or empty.
std::string looseness(const std::string& path, const struct stat& st) {
    if (!S_ISDIR(st.st_mode)) return "audit directory " + path + " is not a directory";
    if (st.st_uid != ::geteuid())
        return "audit directory " + path + " is owned by uid " + std::to_string(st.st_uid) +
               ", not by the daemon's user (uid " + std::to_string(::geteuid()) +
               "): refusing it, its owner could replace the audit files";
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
        return "audit directory " + path + " is writable by its group or others (mode " +
               octal(st.st_mode) + "): refusing it; chmod 0750 " + path;
    return {};
}

// The pid written in the lock file (0 when none can be read).
long lockHolder(int lockFd) {
    char text[32] = {};
    ssize_t n = ::pread(lockFd, text, sizeof text - 1, 0);
    if (n <= 0) return 0;
    return std::strtol(text, nullptr, 10);
}

std::string heldText(const std::string& path, long pid) {
    return "audit directory " + path + " is held by another splicegate process" +
           (pid > 0 ? " (pid " + std::to_string(pid) + ")" : std::string()) +
           "; only one daemon may write an audit directory";
}

void makeParents(const std::string& path) {
    for (std::size_t slash = path.find('/', 1); slash != std::string::npos;
         slash = path.find('/', slash + 1)) {
        std::string part = path.substr(0, slash);
        if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST)
            throwErrno(errno, "cannot create directory " + part);
    }
}

}  // namespace

int openInDirectory(int dirFd, const std::string& name, int flags, mode_t mode) noexcept {
    if (name.empty() || name.find('/') != std::string::npos) return -EINVAL;
    flags |= O_CLOEXEC | O_NOFOLLOW;
    // Workers create segments concurrently; either value leads to a correct open.
    static std::atomic<bool> haveOpenat2{true};
    int fd = -1;
    if (haveOpenat2.load(std::memory_order_relaxed)) {
        open_how how{};
        how.flags = static_cast<std::uint64_t>(flags);
        how.mode = (flags & O_CREAT) ? mode : 0;
        how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH;
        fd = static_cast<int>(::syscall(SYS_openat2, dirFd, name.c_str(), &how, sizeof how));
        if (fd < 0 && errno == ENOSYS) haveOpenat2.store(false, std::memory_order_relaxed);
    }
    if (!haveOpenat2.load(std::memory_order_relaxed))
        fd = ::openat(dirFd, name.c_str(), flags, mode);
    if (fd < 0) return -errno;
    if ((flags & O_CREAT) != 0) adjustCreatedFile(fd, dirFd, mode);
    return fd;
}

void adjustCreatedFile(int fd, int dirFd, mode_t mode) noexcept {
    // The umask must not narrow what --audit-group may read, and the file takes the directory's
    // group (--audit-group). Only our own regular file is changed.
    struct stat st {};
    struct stat dirSt {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) return;
    if ((st.st_mode & 07777) != mode) ::fchmod(fd, mode);
    // Failing that, the file keeps the daemon's group: still written, but the audit group's
    // readers cannot open it, which they must be told about.
    if (::fstat(dirFd, &dirSt) == 0 && dirSt.st_gid != st.st_gid &&
        ::fchown(fd, static_cast<uid_t>(-1), dirSt.st_gid) != 0)
        logWarnLimited("audit file group", "audit file (fd ", fd, "): cannot give it the directory's group ", dirSt.st_gid,
                " (--audit-group): ", errnoText(errno), "; that group cannot read it");
}

UniqueFd openInDirectoryOrThrow(int dirFd, const std::string& dir, const std::string& name,
                                int flags, mode_t mode) {
    int fd = openInDirectory(dirFd, name, flags, mode);
    if (fd < 0) {
        std::string path = (dir.empty() || dir.back() == '/' ? dir : dir + "/") + name;
        if (fd == -ELOOP)
            throwErrno(ELOOP, "refusing to open " + path + ": it is a symlink (not followed)");
        throwErrno(-fd, "cannot open " + path);
    }
    return UniqueFd(fd);
}

void forEachDirectoryEntry(int dirFd, const std::string& dir,
                           const std::function<void(const dirent&)>& visit) {
    // fdopendir takes the fd over and rewinds it: read a duplicate opened afresh at the start.
    UniqueFd listFd(::openat(dirFd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!listFd) throwErrno(errno, "cannot open audit directory " + dir);
    DIR* stream = ::fdopendir(listFd.get());
    if (stream == nullptr) throwErrno(errno, "cannot read audit directory " + dir);
    (void)listFd.release();  // the stream owns it now
    std::unique_ptr<DIR, int (*)(DIR*)> owner(stream, ::closedir);
    for (;;) {
        errno = 0;
        const dirent* entry = ::readdir(stream);
        if (entry == nullptr) break;
        visit(*entry);
    }
    if (errno != 0) throwErrno(errno, "cannot read audit directory " + dir);
}

int syncDirectory(int dirFd) noexcept {
    return ::fsync(dirFd) == 0 ? 0 : -errno;
}

UniqueFd replaceFileDurably(int dirFd, const std::string& dir, const std::string& temporaryName,
                            const std::string& name, std::string_view bytes) {
    const std::string temporaryPath = dir + "/" + temporaryName;
    UniqueFd fd =
        openInDirectoryOrThrow(dirFd, dir, temporaryName, O_WRONLY | O_CREAT | O_TRUNC, 0640);
    std::size_t written = 0;
    if (int rc = writeFullyAt(fd.get(), bytes, 0, written); rc < 0)
        throwErrno(-rc, "write " + temporaryPath);
    checkSys(::fdatasync(fd.get()), "fdatasync " + temporaryPath);
    checkSys(::renameat(dirFd, temporaryName.c_str(), dirFd, name.c_str()),
             "rename " + temporaryPath + " to " + name);
    checkSys(::fsync(dirFd), "fsync " + dir);
    return fd;
}

int writeFullyAt(int fd, std::string_view bytes, std::uint64_t offset,
                 std::size_t& written) noexcept {
    written = 0;
    while (written < bytes.size()) {
        ssize_t n = ::pwrite(fd, bytes.data() + written, bytes.size() - written,
                             static_cast<off_t>(offset + written));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return n < 0 ? -errno : -EIO;
        written += static_cast<std::size_t>(n);
    }
    return 0;
}

AuditDirectory AuditDirectory::open(const std::string& path, std::optional<gid_t> group,
                                    UniqueFd handedLock) {
    if (path.empty())
        throw std::system_error(ENOENT, std::system_category(), "empty audit directory");
    makeParents(path);
    bool created = ::mkdir(path.c_str(), 0750) == 0;
    if (!created && errno != EEXIST) throwErrno(errno, "cannot create audit directory " + path);
    AuditDirectory dir;
    dir.path_ = path;
    // The directory itself is not followed through a symlink either: whoever can replace the
    // link could point the daemon's writes anywhere.
    dir.dir_.reset(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    // With O_DIRECTORY the kernel says ENOTDIR for a symlink, whatever it points to.
    struct stat link {};
    if (!dir.dir_ && (errno == ELOOP || errno == ENOTDIR) && ::lstat(path.c_str(), &link) == 0 &&
        S_ISLNK(link.st_mode))
        throwErrno(ELOOP, "audit directory " + path + " is a symlink (never followed)");
    if (!dir.dir_) throwErrno(errno, "cannot open audit directory " + path);
    struct stat st {};
    checkSys(::fstat(dir.fd(), &st), "fstat " + path);
    if (auto problem = looseness(path, st); !problem.empty())
        throw std::system_error(EPERM, std::system_category(), problem);

    // Lock before anything is changed: a second daemon must leave the holder's files alone.
    dir.lock_ = openInDirectoryOrThrow(dir.fd(), path, kLockFileName, O_RDWR | O_CREAT, 0640);
    struct stat ours {};
    struct stat handed {};
    if (handedLock && ::fstat(dir.lock_.get(), &ours) == 0 &&
        ::fstat(handedLock.get(), &handed) == 0 && ours.st_dev == handed.st_dev &&
        ours.st_ino == handed.st_ino && (::fcntl(handedLock.get(), F_GETFL) & O_ACCMODE) == O_RDWR) {
        // The same file: the lock below is taken on the handed description, which holds it
        // already (a lock is the description's, so asking again succeeds), or fails as any
        // second daemon's would when it was not the holder's.
        dir.lock_ = std::move(handedLock);
        dir.lockHandedOver_ = true;
    }
    handedLock.reset();
    struct flock lock {};
    lock.l_type = F_WRLCK;
    lock.l_whence = SEEK_SET;
    if (::fcntl(dir.lock_.get(), F_OFD_SETLK, &lock) != 0) {
        int err = errno;
        if (err == EAGAIN || err == EACCES) {
            long pid = lockHolder(dir.lock_.get());
            throw AuditDirectoryHeld(heldText(path, pid), pid);
        }
        throwErrno(err, "cannot lock " + path + "/" + kLockFileName);
    }
    std::string pid = std::to_string(::getpid()) + "\n";
    checkSys(::ftruncate(dir.lock_.get(), 0), "truncate " + path + "/" + kLockFileName);
    if (::pwrite(dir.lock_.get(), pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size()))
        throwErrno(errno, "write " + path + "/" + kLockFileName);

    if (group && st.st_gid != *group)
        checkSys(::fchown(dir.fd(), static_cast<uid_t>(-1), *group),
                 "--audit-group: cannot give " + path + " to group " + std::to_string(*group));
    // Whatever the umask; and a directory made before --audit-group was set opens to the group.
    if (created || (group && (st.st_mode & 0050) != 0050))
        checkSys(::fchmod(dir.fd(), (created ? 0750 : st.st_mode & 07777) | 0050), "chmod " + path);
    return dir;
}

AuditDirectoryCheck checkAuditDirectory(const std::string& path, std::optional<gid_t> group) {
    AuditDirectoryCheck check;
    if (path.empty()) {
        check.problems.push_back("--audit-dir is empty");
        return check;
    }
    UniqueFd dirFd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!dirFd) {
        if (errno == ELOOP)
            check.problems.push_back("audit directory " + path + " is a symlink (never followed)");
        else if (errno != ENOENT)
            check.problems.push_back("cannot open audit directory " + path + ": " +
                                     errnoText(errno));
        return check;  // a missing directory is created at start
    }
    struct stat st {};
    if (::fstat(dirFd.get(), &st) != 0) {
        check.problems.push_back("fstat " + path + ": " + errnoText(errno));
        return check;
    }
    if (auto problem = looseness(path, st); !problem.empty()) check.problems.push_back(problem);
    if (group && st.st_gid != *group && st.st_uid != ::geteuid())
        check.problems.push_back("--audit-group: " + path + " belongs to group " +
                                 std::to_string(st.st_gid) + " and cannot be changed");
    int lockFd = openInDirectory(dirFd.get(), kLockFileName, O_RDONLY);
    if (lockFd == -ELOOP) {
        check.problems.push_back(path + "/" + kLockFileName + " is a symlink");
    } else if (lockFd >= 0) {
        UniqueFd lockFile(lockFd);
        struct flock query {};
        // Asking about a read lock finds only a write lock, which needs the file open for
        // writing: the daemon's (AuditDirectory::open). A reader of the log (the audit group) can
        // take a read lock but must not pass for the daemon, since verify lets a running
        // daemon's newest segments be incomplete.
        query.l_type = F_RDLCK;
        query.l_whence = SEEK_SET;
        // F_OFD_GETLK only asks: it takes nothing, so a daemon starting now is not disturbed.
        struct stat lockSt {};
        if (::fcntl(lockFile.get(), F_OFD_GETLK, &query) == 0 && query.l_type == F_WRLCK) {
            // That holds only while nobody else can open the file for writing.
            if (::fstat(lockFile.get(), &lockSt) == 0 && S_ISREG(lockSt.st_mode) &&
                lockSt.st_uid == st.st_uid && (lockSt.st_mode & (S_IWGRP | S_IWOTH)) == 0)
                check.holderPid = lockHolder(lockFile.get());
            else
                check.problems.push_back(
                    path + "/" + kLockFileName + " is locked, but it is writable by its group or "
                    "others or not owned by the directory's owner (mode " + octal(lockSt.st_mode) +
                    ", uid " + std::to_string(lockSt.st_uid) +
                    "): its lock does not tell that the daemon holds the directory");
        }
    }
    return check;
}

}  // namespace splicegate::audit
