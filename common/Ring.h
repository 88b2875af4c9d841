#pragma once
// One io_uring instance, owned by exactly one thread (a worker). RAII: the ring is torn down in
// the destructor. Set-up errors throw std::system_error naming the call; submission on the data
// path never throws: a full submission queue is submitted first.
// The one implementation of RingOps (common/RingOps.h): `final`, every operation inline, so a
// call through a Ring& compiles to the liburing prep call itself.
#include <liburing.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/RingOps.h"
#include "common/RingRegistration.h"

namespace splicegate {

// How a ring is set up. The defaults suit a worker: one thread submits and reaps.
struct RingOptions {
    // IORING_SETUP_DEFER_TASKRUN (6.1+, with SINGLE_ISSUER): completion work runs only when the
    // owner enters the kernel to reap, in one batch, instead of interrupting it at any time.
    // Kernels without it fall back to SINGLE_ISSUER alone, then to neither.
    bool deferTaskrun = true;
    // IORING_SETUP_SQPOLL: a kernel thread polls the submission queue, so submitting costs no
    // system call while it is awake (it sleeps after `sqThreadIdleMs` without work). One more
    // thread per ring, busy while traffic flows; excludes deferTaskrun.
    bool sqpoll = false;
    unsigned sqThreadIdleMs = 50;
};

class Ring final : public RingOps {
  public:
    // `maxUnboundWorkers` caps io-wq's threads for socket work (docs/kernel-notes.md §1): a blocked
    // splice must not be able to spawn a thread per connection.
    Ring(unsigned entries, unsigned maxBoundWorkers, unsigned maxUnboundWorkers,
         RingOptions options = {});
    ~Ring();
    Ring(const Ring&) = delete;
    Ring& operator=(const Ring&) = delete;

    // A fresh SQE, never null: submits pending ones first when the queue is full.
    io_uring_sqe* sqe() noexcept {
        io_uring_sqe* entry = io_uring_get_sqe(&ring_);
        while (entry == nullptr) {
            io_uring_submit(&ring_);
            entry = io_uring_get_sqe(&ring_);
        }
        return entry;
    }
    void makeRoom(unsigned entries) noexcept override {
        if (io_uring_sq_space_left(&ring_) < entries) io_uring_submit(&ring_);
    }

    // ---- RingOps: every operation over liburing --------------------------------------------
    void recvMultishot(int fd, std::uint16_t bufferGroup, CompletionTag tag,
                       SqeFlags flags = {}) noexcept override {
        io_uring_sqe* entry = sqe();
        io_uring_prep_recv_multishot(entry, fd, nullptr, 0, 0);
        entry->buf_group = bufferGroup;
        finish(entry, tag, flags.bits() | IOSQE_BUFFER_SELECT);
    }
    void send(int fd, std::span<const std::byte> data, int msgFlags, CompletionTag tag,
              SqeFlags flags = {}) noexcept override {
        io_uring_sqe* entry = sqe();
        io_uring_prep_send(entry, fd, data.data(), data.size(), msgFlags);
        finish(entry, tag, flags.bits());
    }
    void splice(int from, std::int64_t fromOffset, int to, std::int64_t toOffset, unsigned length,
                unsigned spliceFlags, CompletionTag tag, SqeFlags flags = {}) noexcept override {
        io_uring_sqe* entry = sqe();
        io_uring_prep_splice(entry, from, fromOffset, to, toOffset, length, spliceFlags);
        finish(entry, tag, flags.bits());
    }
    void tee(int from, int to, unsigned length, unsigned spliceFlags, CompletionTag tag,
             SqeFlags flags = {}) noexcept override {
        io_uring_sqe* entry = sqe();
        io_uring_prep_tee(entry, from, to, length, spliceFlags);
        finish(entry, tag, flags.bits());
    }
    void read(int fd, std::span<std::byte> into, std::uint64_t offset, CompletionTag tag,
              SqeFlags flags = {}) noexcept override {
        io_uring_sqe* entry = sqe();
        io_uring_prep_read(entry, fd, into.data(), static_cast<unsigned>(into.size()), offset);
        finish(entry, tag, flags.bits());
    }
    void write(int fd, std::span<const std::byte> data, std::uint64_t offset, int rwFlags,
               CompletionTag tag, SqeFlags flags = {}) noexcept override {
        io_uring_sqe* entry = sqe();
        io_uring_prep_write(entry, fd, data.data(), static_cast<unsigned>(data.size()), offset);
        entry->rw_flags = rwFlags;
        finish(entry, tag, flags.bits());
    }
    void writeFixed(int fd, std::span<const std::byte> data, std::uint64_t offset, int bufferIndex,
                    int rwFlags, CompletionTag tag, SqeFlags flags = {}) noexcept override {
        io_uring_sqe* entry = sqe();
        io_uring_prep_write_fixed(entry, fd, data.data(), static_cast<unsigned>(data.size()),
                                  offset, bufferIndex);
        entry->rw_flags = rwFlags;
        finish(entry, tag, flags.bits());
    }
    void fsync(int fd, SyncMode mode, CompletionTag tag, SqeFlags flags = {}) noexcept override {
        io_uring_sqe* entry = sqe();
        io_uring_prep_fsync(entry, fd, mode == SyncMode::DataOnly ? IORING_FSYNC_DATASYNC : 0);
        finish(entry, tag, flags.bits());
    }
    void accept(int fd, sockaddr* address, socklen_t* length, int acceptFlags, CompletionTag tag,
                SqeFlags flags = {}) noexcept override {
        io_uring_sqe* entry = sqe();
        io_uring_prep_accept(entry, fd, address, length, acceptFlags);
        finish(entry, tag, flags.bits());
    }
    void acceptMultishot(int fd, int acceptFlags, CompletionTag tag,
                         SqeFlags flags = {}) noexcept override {
        io_uring_sqe* entry = sqe();
        io_uring_prep_multishot_accept(entry, fd, nullptr, nullptr, acceptFlags);
        finish(entry, tag, flags.bits());
    }
    void connect(int fd, const sockaddr* address, socklen_t length, __kernel_timespec* timeout,
                 CompletionTag tag, CompletionTag timeoutTag) noexcept override {
        makeRoom(2);
        io_uring_sqe* entry = sqe();
        io_uring_prep_connect(entry, fd, address, length);
        finish(entry, tag, IOSQE_IO_LINK);
        entry = sqe();
        io_uring_prep_link_timeout(entry, timeout, 0);
        finish(entry, timeoutTag, 0);
    }
    void pollAdd(int fd, unsigned events, CompletionTag tag,
                 SqeFlags flags = {}) noexcept override {
        io_uring_sqe* entry = sqe();
        io_uring_prep_poll_add(entry, fd, events);
        finish(entry, tag, flags.bits());
    }
    void pollRemove(CompletionTag target, CompletionTag tag) noexcept override {
        io_uring_sqe* entry = sqe();
        io_uring_prep_poll_remove(entry, target.encode());
        finish(entry, tag, 0);
    }
    void timeout(__kernel_timespec* timeout, unsigned count, unsigned timeoutFlags,
                 CompletionTag tag, SqeFlags flags = {}) noexcept override {
        io_uring_sqe* entry = sqe();
        io_uring_prep_timeout(entry, timeout, count, timeoutFlags);
        finish(entry, tag, flags.bits());
    }
    void cancel(CompletionTag target, CompletionTag tag) noexcept override {
        io_uring_sqe* entry = sqe();
        io_uring_prep_cancel64(entry, target.encode(), 0);
        finish(entry, tag, 0);
    }
    void cancelFd(int fd, unsigned cancelFlags, CompletionTag tag) noexcept override {
        io_uring_sqe* entry = sqe();
        io_uring_prep_cancel_fd(entry, fd, cancelFlags);
        finish(entry, tag, 0);
    }
    void filesUpdate(const int* fds, unsigned count, int firstEntry,
                     CompletionTag tag) noexcept override {
        io_uring_sqe* entry = sqe();
        // The kernel's argument is not const, but it only reads the array.
        io_uring_prep_files_update(entry, const_cast<int*>(fds), count, firstEntry);
        finish(entry, tag, 0);
    }
    void openat2(int directoryFd, const char* path, open_how* how, CompletionTag tag,
                 SqeFlags flags = {}) noexcept override {
        io_uring_sqe* entry = sqe();
        io_uring_prep_openat2(entry, directoryFd, path, how);
        finish(entry, tag, flags.bits());
    }
    void renameat(int fromDirectory, const char* from, int toDirectory, const char* to,
                  unsigned renameFlags, CompletionTag tag, SqeFlags flags = {}) noexcept override {
        io_uring_sqe* entry = sqe();
        io_uring_prep_renameat(entry, fromDirectory, from, toDirectory, to, renameFlags);
        finish(entry, tag, flags.bits());
    }
    void fallocate(int fd, int mode, std::uint64_t offset, std::uint64_t length, CompletionTag tag,
                   SqeFlags flags = {}) noexcept override {
        io_uring_sqe* entry = sqe();
        io_uring_prep_fallocate(entry, fd, mode, offset, length);
        finish(entry, tag, flags.bits());
    }
    void nop(CompletionTag tag, SqeFlags flags = {}) noexcept override {
        io_uring_sqe* entry = sqe();
        io_uring_prep_nop(entry);
        finish(entry, tag, flags.bits());
    }
    // Submits pending SQEs and waits for at least one completion or until `timeoutMs`.
    // Returns -errno (-ETIME and -EINTR are normal).
    int submitAndWait(unsigned timeoutMs) noexcept override;
    int submit() noexcept override;
    // Submits pending SQEs and reaps what completed without waiting (with DEFER_TASKRUN a plain
    // submit would leave finished work unposted).
    int submitAndPeek() noexcept;
    bool completionsReady() noexcept { return io_uring_cq_ready(&ring_) > 0; }
    // The setup flags the kernel accepted (IORING_SETUP_*).
    unsigned flags() const noexcept { return ring_.flags; }

    // Calls `handle(const io_uring_cqe&)` for the completions ready on entry and marks them
    // seen. Only those: a handler's own system calls let the kernel post more (task work runs on
    // each return to user space), and chasing the tail would keep the loop from submitting for
    // as long as a multishot recv keeps finding data.
    template <typename Handler>
    unsigned drainCompletions(Handler&& handle) {
        unsigned head;
        unsigned count = 0;
        const unsigned ready = io_uring_cq_ready(&ring_);
        io_uring_cqe* cqe;
        io_uring_for_each_cqe(&ring_, head, cqe) {
            if (count == ready) break;
            handle(*cqe);
            ++count;
        }
        io_uring_cq_advance(&ring_, count);
        return count;
    }
    unsigned drainCompletionsTo(CompletionSink sink) override {
        return drainCompletions([sink](const io_uring_cqe& cqe) { sink.handle(sink.target, cqe); });
    }

    io_uring* raw() noexcept { return &ring_; }
    // Registers provided buffer rings and the fixed file table with this ring.
    RingRegistration& registration() noexcept { return registration_; }

  private:
    // After the io_uring_prep_* call: liburing's prep helpers reset the SQE's flags and data.
    static void finish(io_uring_sqe* entry, CompletionTag tag, unsigned flags) noexcept {
        io_uring_sqe_set_data64(entry, tag.encode());
        entry->flags |= static_cast<std::uint8_t>(flags);
    }

    io_uring ring_{};
    IoUringRegistration registration_{ring_};
};

// The io_uring opcodes splicegate relies on, with the feature each serves.
struct RequiredOpcode {
    int opcode;
    const char* name;
};
const std::vector<RequiredOpcode>& requiredOpcodes();

// Names of required opcodes the running kernel lacks; throws when io_uring itself is unavailable.
std::vector<std::string> missingOpcodes();

}  // namespace splicegate
