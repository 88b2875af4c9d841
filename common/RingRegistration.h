#pragma once
// What a component registers with a ring besides the SQEs it prepares (common/RingOps.h): a
// provided buffer ring (common/BufferRing.h), the sparse fixed file table
// (datapath/SocketTable.h) and the fixed buffers writeFixed() writes from (the audit's log
// buffer, audit/LogBuffer.h). A narrow interface of its own, so that the code that owns such a
// registration can run over tests/support/FakeRing.h's FakeRegistration, which keeps a
// registered buffer ring and hands its buffers out as the kernel would, without a kernel ring.
//
// Every call returns 0 or -errno, as liburing does; none throws. The io_uring must outlive what
// was registered with it.
#include <liburing.h>
#include <sys/uio.h>

#include <cstdint>

namespace splicegate {

class RingRegistration {
  public:
    // The ring array `registration.ring_addr` (page aligned) of `ring_entries` buffers, as buffer
    // group `bgid` (kernel 5.19).
    virtual int registerBufferRing(const io_uring_buf_reg& registration) noexcept = 0;
    virtual int unregisterBufferRing(std::uint16_t group) noexcept = 0;
    // A fixed file table of `entries`, all empty (kernel 5.19).
    virtual int registerSparseFiles(unsigned entries) noexcept = 0;
    virtual int unregisterFiles() noexcept = 0;
    // `count` buffers as the ring's fixed buffers (buffer i is index i of RingOps::writeFixed()).
    // -EBUSY: it has some already; -ENOMEM: RLIMIT_MEMLOCK is below them.
    virtual int registerBuffers(const iovec* buffers, unsigned count) noexcept = 0;
    virtual int unregisterBuffers() noexcept = 0;

  protected:
    RingRegistration() = default;
    ~RingRegistration() = default;
    RingRegistration(const RingRegistration&) = default;
    RingRegistration& operator=(const RingRegistration&) = default;
};

// The registrations of one io_uring, over liburing (Ring::registration() gives its ring's).
class IoUringRegistration final : public RingRegistration {
  public:
    explicit IoUringRegistration(io_uring& ring) noexcept : ring_(&ring) {}

    int registerBufferRing(const io_uring_buf_reg& registration) noexcept override {
        // liburing 2.3 takes the registration by non-const pointer; the kernel only reads it.
        io_uring_buf_reg copy = registration;
        return io_uring_register_buf_ring(ring_, &copy, 0);
    }
    int unregisterBufferRing(std::uint16_t group) noexcept override {
        return io_uring_unregister_buf_ring(ring_, group);
    }
    int registerSparseFiles(unsigned entries) noexcept override {
        return io_uring_register_files_sparse(ring_, entries);
    }
    int unregisterFiles() noexcept override { return io_uring_unregister_files(ring_); }
    int registerBuffers(const iovec* buffers, unsigned count) noexcept override {
        return io_uring_register_buffers(ring_, buffers, count);
    }
    int unregisterBuffers() noexcept override { return io_uring_unregister_buffers(ring_); }

  private:
    io_uring* ring_;
};

}  // namespace splicegate
