#pragma once
// The memory of one worker's audit log buffer: `count()` equal buffers, each aligned for O_DIRECT
// and together registered as the ring's fixed buffers (buffer i is fixed buffer i), so a write
// from them costs no page pinning per request (IORING_OP_WRITE_FIXED).
//
// Ownership: one mapping, unmapped in the destructor; move-only. A registered LogBuffer must be
// destroyed before its ring is torn down (the destructor unregisters). Thread affinity: the ring's
// thread. Errors: the constructor throws (std::invalid_argument for sizes, std::system_error
// naming mmap); registerWith() returns -errno and leaves the buffers usable unregistered.
#include <cstddef>
#include <cstdint>

#include "common/RingRegistration.h"

namespace splicegate::audit {

class LogBuffer {
  public:
    // O_DIRECT needs offsets, lengths and memory aligned to the device's logical block; 4096
    // covers 512-byte and 4 KiB devices alike.
    static constexpr std::size_t kAlignment = 4096;
    // Fewer buffers than this would leave no room to fill one while others are being written.
    static constexpr unsigned kMinBuffers = 4;

    // `limitBytes` (--audit-buffer-bytes) is split into buffers of at most `maxBufferBytes`
    // (a multiple of kAlignment), and at least kMinBuffers of them; the total is rounded down to
    // whole buffers. Throws std::invalid_argument when that leaves buffers under kAlignment.
    LogBuffer(std::size_t limitBytes, std::size_t maxBufferBytes);
    ~LogBuffer();
    LogBuffer(LogBuffer&& other) noexcept;
    LogBuffer& operator=(LogBuffer&&) = delete;
    LogBuffer(const LogBuffer&) = delete;
    LogBuffer& operator=(const LogBuffer&) = delete;

    unsigned count() const noexcept { return count_; }
    std::size_t bufferBytes() const noexcept { return bufferBytes_; }
    std::size_t totalBytes() const noexcept { return bufferBytes_ * count_; }
    std::byte* buffer(unsigned index) const noexcept { return base_ + index * bufferBytes_; }

    // Registers all buffers with `ring`. -EBUSY: the ring already has fixed buffers; -ENOMEM:
    // RLIMIT_MEMLOCK is below totalBytes() (registered pages count against it unless the
    // process has CAP_IPC_LOCK). The caller then writes from the same memory unregistered.
    int registerWith(RingRegistration& ring) noexcept;
    bool registered() const noexcept { return ring_ != nullptr; }

  private:
    std::byte* base_ = nullptr;
    std::size_t bufferBytes_ = 0;
    unsigned count_ = 0;
    RingRegistration* ring_ = nullptr;
};

}  // namespace splicegate::audit
