#include "metrics/AuditDiskUsage.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>

#include "common/Log.h"
#include "common/UniqueFd.h"

namespace splicegate {

namespace {

// Sum of the sizes of the regular files directly in `directory` (the audit log is flat; a
// symlink is not followed, as the audit writer never opens one), or the errno that stopped it.
std::optional<std::uint64_t> sumFileSizes(const std::string& directory, int& err) {
    UniqueFd fd(::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd) {
        err = errno;
        return std::nullopt;
    }
    DIR* dir = ::fdopendir(fd.get());
    if (dir == nullptr) {
        err = errno;
        return std::nullopt;
    }
    (void)fd.release();  // closedir closes it
    std::uint64_t total = 0;
    while (const dirent* entry = ::readdir(dir)) {
        struct stat st {};
        // A file retention deletes between readdir and fstatat is simply not counted.
        if (::fstatat(::dirfd(dir), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISREG(st.st_mode))
            total += static_cast<std::uint64_t>(st.st_size);
    }
    ::closedir(dir);
    return total;
}

}  // namespace

AuditDiskUsage::AuditDiskUsage(std::string directory, std::chrono::steady_clock::duration refresh)
    : directory_(std::move(directory)), refresh_(refresh) {}

AuditDiskSample AuditDiskUsage::sample() noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    AuditDiskSample out;
    struct statvfs fs {};
    int err = 0;
    if (::statvfs(directory_.c_str(), &fs) == 0) {
        out.sizeBytes = static_cast<std::uint64_t>(fs.f_blocks) * fs.f_frsize;
        out.freeBytes = static_cast<std::uint64_t>(fs.f_bavail) * fs.f_frsize;
    } else {
        err = errno;
    }
    int storedErr = 0;
    out.storedBytes = storedBytes(std::chrono::steady_clock::now(), storedErr);
    if (err == 0) err = storedErr;
    if (!out.freeBytes || !out.storedBytes) {
        if (!failing_)
            logWarn("metrics: cannot measure the audit directory ", directory_, ": ",
                    std::strerror(err != 0 ? err : ENOENT));
        failing_ = true;
    } else {
        failing_ = false;
    }
    return out;
}

std::optional<std::uint64_t> AuditDiskUsage::storedBytes(std::chrono::steady_clock::time_point now,
                                                         int& err) noexcept {
    if (stored_ && now - storedAt_ < refresh_) return stored_;
    try {
        stored_ = sumFileSizes(directory_, err);
    } catch (...) {
        err = ENOMEM;
        stored_.reset();
    }
    storedAt_ = now;
    return stored_;
}

}  // namespace splicegate
