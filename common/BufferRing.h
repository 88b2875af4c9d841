#pragma once
// A provided buffer ring (kernel 5.19): `entries` buffers of `bufferSize` bytes registered with
// one io_uring as buffer group `groupId`. A recv submitted with IOSQE_BUFFER_SELECT and that group
// lets the kernel pick a buffer only when bytes arrive, so a socket waiting for data holds none
// (docs/kernel-notes.md §6). The completion names the buffer it filled
// (cqe->flags >> IORING_CQE_BUFFER_SHIFT); the buffer is the caller's until giveBack().
//
// liburing 2.3 has no io_uring_setup_buf_ring: the ring array and the buffers live in page-aligned
// anonymous mappings owned here, registered with io_uring_register_buf_ring. The buffers' pages
// are only touched (made resident) by the recvs that use them.
//
// The kernel takes buffers from the ring in order, so a ring holding every free buffer would
// cycle through all of them and make each one resident, however few are in use at a time (8,000
// idle connections each echoing one byte touched 8,192 buffers: 4 KiB per connection). Only a
// window of free buffers is in the ring; the others wait on a stack, and the ring is topped up
// from its top, with the buffers given back last (still resident, still in cache). The window
// starts at 128 and doubles, up to every buffer, each time a recv found the ring empty: memory
// follows the peak of buffers in use, not the ring's size. trim(), every few seconds, lets it
// follow the peak back down: the window halves while the recent peak stays under a quarter of
// it, buffers given back while the ring holds more than the window wait on the stack, and the
// stack's cold end gives its pages back to the kernel (MADV_DONTNEED).
//
// It is registered through a RingRegistration (common/RingRegistration.h): a Ring's, or
// tests/support/FakeRing.h's FakeRegistration, which hands the buffers out as the kernel would.
//
// Ownership: one per worker ring, move-only; the io_uring must outlive it. Destroy it only when no
// recv naming the group is armed any more (the destructor unregisters the group, then unmaps).
// Thread affinity: the ring's thread. Error contract: the constructor throws (UsageError for bad
// sizes naming the option, std::system_error naming the call); everything else is noexcept.
#include <liburing.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "common/RingRegistration.h"

namespace splicegate {

class BufferRing {
  public:
    // Largest ring the kernel accepts (ring_entries < 65536, a power of two): buffer ids are
    // 16-bit.
    static constexpr unsigned kMaxEntries = 32768;

    BufferRing(RingRegistration& registration, std::uint16_t groupId, unsigned entries,
               std::size_t bufferSize);
    ~BufferRing();
    BufferRing(BufferRing&& other) noexcept;
    BufferRing& operator=(BufferRing&&) = delete;
    BufferRing(const BufferRing&) = delete;
    BufferRing& operator=(const BufferRing&) = delete;

    std::uint16_t groupId() const noexcept { return groupId_; }
    unsigned entries() const noexcept { return entries_; }
    std::size_t bufferSize() const noexcept { return bufferSize_; }
    // Buffers the kernel handed out in completions that were not given back yet.
    unsigned inUse() const noexcept { return inUse_; }

    // The buffer a completion filled, from its cqe->flags, or nothing when it carries none (an
    // error, or a recv that ended without taking one). A buffer named here is the caller's: it
    // must be given back.
    static std::optional<std::uint16_t> bufferOf(std::uint32_t cqeFlags) noexcept;
    // Takes the buffer a completion named and returns its first `length` bytes.
    std::span<std::byte> take(std::uint16_t id, std::size_t length) noexcept;
    // The whole of buffer `id` (a taken one, for its holder to read).
    std::span<std::byte> memory(std::uint16_t id) const noexcept {
        return {bufferAt(id), bufferSize_};
    }
    // Takes a buffer back: into the ring at once while the window has room, else on the stack.
    void giveBack(std::uint16_t id) noexcept;
    // A recv found the ring empty (-ENOBUFS): the window doubles, up to every buffer.
    void widen() noexcept;
    unsigned window() const noexcept { return window_; }
    // Called every few seconds by the owner. When the most buffers in use since the last call
    // were at most a quarter of the window, the window halves (not below its start); then the
    // free buffers on the stack below its warm top (the larger of the window and that peak)
    // release their pages. Returns how many buffers released pages.
    unsigned trim() noexcept;

  private:
    // A private anonymous mapping, unmapped on destruction.
    class Mapping {
      public:
        Mapping() noexcept = default;
        explicit Mapping(std::size_t bytes, const char* what);
        ~Mapping();
        Mapping(Mapping&& other) noexcept;
        Mapping& operator=(Mapping&&) = delete;
        Mapping(const Mapping&) = delete;
        Mapping& operator=(const Mapping&) = delete;
        std::byte* data() const noexcept { return data_; }

      private:
        std::byte* data_ = nullptr;
        std::size_t bytes_ = 0;
    };

    static unsigned checkedEntries(unsigned entries);
    static std::size_t checkedSize(std::size_t bufferSize);
    std::byte* bufferAt(std::uint16_t id) const noexcept {
        return buffers_.data() + static_cast<std::size_t>(id) * bufferSize_;
    }
    void topUp() noexcept;
    bool releasePages(std::uint16_t id) noexcept;  // false: madvise refused

    RingRegistration* registration_;
    std::uint16_t groupId_;
    unsigned entries_;
    std::size_t bufferSize_;
    Mapping ringMemory_;  // the io_uring_buf array the kernel reads from
    Mapping buffers_;
    io_uring_buf_ring* shared_ = nullptr;
    std::vector<std::uint16_t> spare_;  // free buffers outside the ring, the warmest on top
    unsigned inRing_ = 0;               // free buffers in the ring, the kernel's to take
    unsigned window_ = 0;               // at most this many in the ring
    unsigned inUse_ = 0;
    unsigned peakInUse_ = 0;      // since the last trim()
    std::vector<bool> resident_;  // a recv may have written into the buffer since its release
    bool registered_ = false;
};

}  // namespace splicegate
