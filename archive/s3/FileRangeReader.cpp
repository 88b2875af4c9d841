#include "archive/s3/FileRangeReader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

namespace splicegate::s3 {
namespace {

constexpr std::size_t kAlignment = 4096;      // the largest logical block size we expect
constexpr std::size_t kBlock = 2u << 20;      // matches curl's largest upload buffer

ssize_t preadFully(int fd, char* out, std::size_t size, std::uint64_t offset) noexcept {
    ssize_t n;
    do {
        n = ::pread(fd, out, size, static_cast<off_t>(offset));
    } while (n < 0 && errno == EINTR);
    return n < 0 ? -errno : n;
}

}  // namespace

void FileRangeReader::FreeDeleter::operator()(char* p) const noexcept {
    std::free(p);
}

FileRangeReader::FileRangeReader(const FileRange& range) : range_(range) {
    std::string self = "/proc/self/fd/" + std::to_string(range.fd);
    direct_ = UniqueFd(::open(self.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC));
    // One transparent huge page where the kernel has one to give: an O_DIRECT read pins its
    // buffer's pages, one 2 MiB page instead of 512 small ones.
    if (direct_) buffer_.reset(static_cast<char*>(std::aligned_alloc(kBlock, kBlock)));
    if (buffer_) ::madvise(buffer_.get(), kBlock, MADV_HUGEPAGE);
    if (!buffer_) direct_.reset();
}

void FileRangeReader::seek(std::uint64_t position) noexcept {
    position_ = std::min(position, range_.length);
}

ssize_t FileRangeReader::fill(std::size_t size) noexcept {
    std::uint64_t at = range_.offset + position_;
    bufferStart_ = at & ~static_cast<std::uint64_t>(kAlignment - 1);
    bufferBytes_ = 0;
    ssize_t n = preadFully(direct_.get(), buffer_.get(), size, bufferStart_);
    if (n == -EINVAL) {  // the file system or device refuses this alignment: read buffered
        direct_.reset();
        return 0;
    }
    if (n < 0) return n;
    bufferBytes_ = static_cast<std::size_t>(n);
    return n;
}

std::optional<ssize_t> FileRangeReader::readInto(char* out, std::size_t max,
                                                 std::size_t want) noexcept {
    std::uint64_t at = range_.offset + position_;
    std::size_t blocks = (want + kAlignment - 1) & ~(kAlignment - 1);
    if (intoRefused_ || at % kAlignment != 0 || reinterpret_cast<std::uintptr_t>(out) % kAlignment != 0 ||
        blocks > max)
        return std::nullopt;
    ssize_t n = preadFully(direct_.get(), out, blocks, at);
    if (n == -EINVAL) {  // the device's alignment is stricter than ours: go through buffer_
        intoRefused_ = true;
        return std::nullopt;
    }
    if (n < 0) return n;
    if (n == 0) return -ENODATA;  // the file is shorter
    ssize_t got = static_cast<ssize_t>(std::min(want, static_cast<std::size_t>(n)));
    position_ += static_cast<std::uint64_t>(got);
    return got;
}

ssize_t FileRangeReader::read(char* out, std::size_t max) noexcept {
    std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(max, range_.length - position_));
    if (want == 0) return 0;
    std::uint64_t at = range_.offset + position_;
    std::size_t fillSize = kBlock;
    if (direct_) {
        if (auto got = readInto(out, max, want)) return *got;
        // An aligned buffer at an unaligned position (a multipart upload's part starts where a
        // chunk does): copy only up to the next block boundary, so that every read after this
        // one lands in `out` itself.
        if (!intoRefused_ && reinterpret_cast<std::uintptr_t>(out) % kAlignment == 0 && at % kAlignment != 0) {
            want = std::min(want, static_cast<std::size_t>(kAlignment - at % kAlignment));
            fillSize = kAlignment;
        }
    }
    if (direct_ && (at < bufferStart_ || at >= bufferStart_ + bufferBytes_)) {
        ssize_t n = fill(fillSize);
        if (n < 0) return n;
    }
    ssize_t got;
    if (direct_) {
        if (at >= bufferStart_ + bufferBytes_) return -ENODATA;  // the file is shorter
        std::size_t inBuffer = static_cast<std::size_t>(bufferStart_ + bufferBytes_ - at);
        got = static_cast<ssize_t>(std::min(want, inBuffer));
        std::memcpy(out, buffer_.get() + (at - bufferStart_), static_cast<std::size_t>(got));
    } else {
        got = preadFully(range_.fd, out, want, at);
        if (got == 0) return -ENODATA;
        if (got < 0) return got;
    }
    position_ += static_cast<std::uint64_t>(got);
    return got;
}

}  // namespace splicegate::s3
