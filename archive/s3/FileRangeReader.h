#pragma once
// Reads a FileRange front to back, bypassing the page cache where the file system allows it.
// The relay writes its segments with O_DIRECT, so they are never in the page cache when the
// archiver comes: a buffered read of such a file cost 1.7 CPU-s per GiB in the kernel's copy
// on this kind of VM, an O_DIRECT read 0.05 (docs/kernel-notes.md, "Reading sealed segments").
// The reader reopens the caller's fd with O_DIRECT (through /proc/self/fd, same file) and reads
// 4 KiB-aligned 2 MiB blocks into its own aligned buffer, or straight into the caller's buffer
// when that is aligned too (curl's upload buffer, archive/s3/Http.cpp): no copy then. Where
// O_DIRECT is refused (tmpfs, an unaligned device) it reads the caller's fd as it is.
// Thread affinity: one thread at a time. Error contract: read returns -errno, never throws.
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "archive/s3/S3Client.h"
#include "common/UniqueFd.h"

namespace splicegate::s3 {

class FileRangeReader {
  public:
    explicit FileRangeReader(const FileRange& range);

    // Up to `max` of the range's next bytes into `out`: their count, 0 at the range's end,
    // -ENODATA when the file ends before the range does, or another -errno. `out` has room for
    // `max` bytes; a direct read into it fills whole blocks, so bytes after the count (past the
    // range's end) may be written too.
    ssize_t read(char* out, std::size_t max) noexcept;
    // The next read starts `position` bytes into the range (curl rewinds a body it must resend).
    void seek(std::uint64_t position) noexcept;
    std::uint64_t position() const noexcept { return position_; }
    bool direct() const noexcept { return direct_.valid(); }

  private:
    // `size` bytes from the block boundary at or before position_ into buffer_ (at most kBlock).
    ssize_t fill(std::size_t size) noexcept;
    // Aligned `out` and position: the blocks read into `out` itself; nullopt when they are not.
    std::optional<ssize_t> readInto(char* out, std::size_t max, std::size_t want) noexcept;

    struct FreeDeleter {
        void operator()(char* p) const noexcept;
    };

    FileRange range_;
    UniqueFd direct_;
    std::unique_ptr<char, FreeDeleter> buffer_;
    std::uint64_t bufferStart_ = 0;  // file offset of buffer_[0]
    std::size_t bufferBytes_ = 0;
    std::uint64_t position_ = 0;     // within the range
    bool intoRefused_ = false;       // the device wants more alignment than kAlignment
};

}  // namespace splicegate::s3
