#include "audit/ReaderSupport.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "audit/AuditDirectory.h"
#include "audit/Crc32c.h"
#include "common/Error.h"

namespace splicegate::audit {

std::string baseName(const std::string& path) {
    auto slash = path.rfind('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::uint64_t fileSize(int fd, const std::string& path) {
    struct stat st {};
    checkSys(::fstat(fd, &st), "fstat " + path);
    return static_cast<std::uint64_t>(st.st_size);
}

UniqueFd openDirectory(const std::string& dir) {
    UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd) throwErrno(errno, "cannot open audit directory " + dir);
    return fd;
}

UniqueFd openIn(int dirFd, const SegmentFiles& files, bool index) {
    auto dir = files.indexPath.substr(0, files.indexPath.size() - files.indexName.size());
    UniqueFd fd =
        openInDirectoryOrThrow(dirFd, dir, index ? files.indexName : files.dataName, O_RDONLY);
    if (!index) holdDataFile(dirFd, fd.get(), files);
    return fd;
}

// A data file read under a shared lock is one retention does not recycle (it unlinks it, which
// leaves the reader its bytes: FORMAT.md "Recycled data files"). One recycled between the open
// and the lock no longer has its name: that reads as deleted (ENOENT), as for an unlinked one.
void holdDataFile(int dirFd, int fd, const SegmentFiles& files) {
    while (::flock(fd, LOCK_SH) != 0)
        if (errno != EINTR) throwErrno(errno, "lock " + files.dataPath);
    struct stat opened {};
    struct stat named {};
    checkSys(::fstat(fd, &opened), "fstat " + files.dataPath);
    if (::fstatat(dirFd, files.dataName.c_str(), &named, AT_SYMLINK_NOFOLLOW) != 0 ||
        named.st_ino != opened.st_ino || named.st_dev != opened.st_dev)
        throwErrno(ENOENT, "open " + files.dataPath + " (retention took it as it was opened)");
}

bool payloadCrc(int fd, std::uint64_t offset, std::uint64_t length, std::uint32_t& crc,
                const std::string& what) {
    static thread_local std::vector<std::uint8_t> buffer(1 << 20);
    std::uint32_t value = 0;
    while (length > 0) {
        auto piece = static_cast<std::size_t>(std::min<std::uint64_t>(length, buffer.size()));
        ssize_t n = ::pread(fd, buffer.data(), piece, static_cast<off_t>(offset));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throwErrno(errno, "read " + what);
        if (n == 0) return false;
        value = crc32c(value, buffer.data(), static_cast<std::size_t>(n));
        offset += static_cast<std::uint64_t>(n);
        length -= static_cast<std::uint64_t>(n);
    }
    crc = value;
    return true;
}

std::string hex32(std::uint32_t value) {
    char text[16];
    std::snprintf(text, sizeof text, "0x%08x", value);
    return text;
}

std::string chunkText(const Record& record) {
    return std::string("Chunk of connection ") + std::to_string(record.id) + " (" +
           directionName(record.direction) + ", " + std::to_string(record.length) +
           " bytes at data offset " + std::to_string(record.offset) + ")";
}

bool recordsDeletion(const std::vector<RetentionLogEntry>& entries, const SegmentFiles& files) {
    return std::any_of(entries.begin(), entries.end(), [&](const RetentionLogEntry& entry) {
        return entry.worker == files.worker && entry.first <= files.segment &&
               files.segment <= entry.last;
    });
}

}  // namespace splicegate::audit
