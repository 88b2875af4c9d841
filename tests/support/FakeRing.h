#pragma once
// A scriptable stand-in for the ring (common/RingOps.h), for tests that drive a component
// without a kernel: it records every operation prepared (what, on which fd, how long, with
// which flags and tag) and the test delivers completions, with the results it chooses, in any
// order it chooses. Nothing runs: a "write" reads no memory, a "recv" fills no buffer (the test
// fills a provided buffer itself, through FakeRegistration below).
#include <liburing.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <vector>

#include "common/CompletionTag.h"
#include "common/RingOps.h"
#include "common/RingRegistration.h"

namespace splicegate::test {

struct PreparedOp {
    RingOp op = RingOp::Nop;
    int fd = -1;               // the fd (or fixed-file index) it names; -1 when none
    int toFd = -1;             // splice and tee: the fd written to
    std::size_t length = 0;    // bytes asked for (a count for filesUpdate and timeout)
    std::uint64_t offset = 0;  // file offset (first entry for filesUpdate, mode of fallocate)
    SqeFlags flags;
    CompletionTag tag;
    CompletionTag target;  // what a cancel or pollRemove names
    int opFlags = 0;       // the op's own flags: msg, splice, rw, accept, poll events...
    std::uint16_t bufferGroup = 0;
    const void* address = nullptr;  // the memory it reads or fills (send, read, write...)
    __kernel_timespec timeout{};    // timeout and the connect's link timeout: when it fires
    // accept: where the kernel writes the peer's address (the test plays the kernel).
    sockaddr* peerAddress = nullptr;
    socklen_t* peerLength = nullptr;
    bool completed = false;  // a final completion was delivered (multishot: without F_MORE)
};

const char* toString(RingOp op) noexcept;

class FakeRing final : public RingOps {
  public:
    void recvMultishot(int fd, std::uint16_t bufferGroup, CompletionTag tag,
                       SqeFlags flags = {}) noexcept override;
    void send(int fd, std::span<const std::byte> data, int msgFlags, CompletionTag tag,
              SqeFlags flags = {}) noexcept override;
    void splice(int from, std::int64_t fromOffset, int to, std::int64_t toOffset, unsigned length,
                unsigned spliceFlags, CompletionTag tag, SqeFlags flags = {}) noexcept override;
    void tee(int from, int to, unsigned length, unsigned spliceFlags, CompletionTag tag,
             SqeFlags flags = {}) noexcept override;
    void read(int fd, std::span<std::byte> into, std::uint64_t offset, CompletionTag tag,
              SqeFlags flags = {}) noexcept override;
    void write(int fd, std::span<const std::byte> data, std::uint64_t offset, int rwFlags,
               CompletionTag tag, SqeFlags flags = {}) noexcept override;
    void writeFixed(int fd, std::span<const std::byte> data, std::uint64_t offset, int bufferIndex,
                    int rwFlags, CompletionTag tag, SqeFlags flags = {}) noexcept override;
    void fsync(int fd, SyncMode mode, CompletionTag tag, SqeFlags flags = {}) noexcept override;
    void accept(int fd, sockaddr* address, socklen_t* length, int acceptFlags, CompletionTag tag,
                SqeFlags flags = {}) noexcept override;
    void acceptMultishot(int fd, int acceptFlags, CompletionTag tag,
                         SqeFlags flags = {}) noexcept override;
    void connect(int fd, const sockaddr* address, socklen_t length, __kernel_timespec* timeout,
                 CompletionTag tag, CompletionTag timeoutTag) noexcept override;
    void pollAdd(int fd, unsigned events, CompletionTag tag, SqeFlags flags = {}) noexcept override;
    void pollRemove(CompletionTag target, CompletionTag tag) noexcept override;
    void timeout(__kernel_timespec* timeout, unsigned count, unsigned timeoutFlags,
                 CompletionTag tag, SqeFlags flags = {}) noexcept override;
    void cancel(CompletionTag target, CompletionTag tag) noexcept override;
    void cancelFd(int fd, unsigned cancelFlags, CompletionTag tag) noexcept override;
    void filesUpdate(const int* fds, unsigned count, int firstEntry,
                     CompletionTag tag) noexcept override;
    void openat2(int directoryFd, const char* path, open_how* how, CompletionTag tag,
                 SqeFlags flags = {}) noexcept override;
    void renameat(int fromDirectory, const char* from, int toDirectory, const char* to,
                  unsigned renameFlags, CompletionTag tag, SqeFlags flags = {}) noexcept override;
    void fallocate(int fd, int mode, std::uint64_t offset, std::uint64_t length, CompletionTag tag,
                   SqeFlags flags = {}) noexcept override;
    void nop(CompletionTag tag, SqeFlags flags = {}) noexcept override;
    void makeRoom(unsigned entries) noexcept override;
    // Counted (submits()); nothing leaves the fake.
    int submit() noexcept override;
    // Nothing runs and nothing waits: 0 when completions are queued, else -ETIME at once
    // (counted: waits()).
    int submitAndWait(unsigned timeoutMs) noexcept override;
    unsigned drainCompletionsTo(CompletionSink sink) override {
        return drainCompletions([sink](const io_uring_cqe& cqe) { sink.handle(sink.target, cqe); });
    }
    unsigned waits() const noexcept { return waits_; }

    // ---- what was prepared ----------------------------------------------------------------
    const std::vector<PreparedOp>& ops() const noexcept { return ops_; }
    // Operations without a final completion yet, oldest first.
    std::vector<PreparedOp> pending() const;
    // The oldest pending operation carrying `tag`, if any.
    const PreparedOp* findPending(CompletionTag tag) const noexcept;
    // The sizes makeRoom() was asked for, in order (a linked chain asks before it is prepared).
    const std::vector<unsigned>& roomRequests() const noexcept { return roomRequests_; }
    // How often submit() was called, and how many operations had been prepared at the last one.
    unsigned submits() const noexcept { return submits_; }
    std::size_t preparedAtLastSubmit() const noexcept { return preparedAtLastSubmit_; }
    // Forgets what was prepared so far (pending operations stay completable).
    void clearRecord() noexcept { firstUnread_ = ops_.size(); }
    std::vector<PreparedOp> preparedSinceClear() const;

    // ---- what completes -------------------------------------------------------------------
    // Queues a completion of the oldest pending operation carrying `tag`, with `result` and
    // CQE flags `cqeFlags` (IORING_CQE_F_MORE keeps a multishot pending). Returns false, and
    // queues nothing, when no pending operation carries that tag.
    bool complete(CompletionTag tag, int result, std::uint32_t cqeFlags = 0);
    // Queues a completion for `tag` whether or not anything pending carries it: a stale or
    // foreign completion, as a kernel may post one for an operation long gone.
    void deliverRaw(CompletionTag tag, int result, std::uint32_t cqeFlags = 0);
    std::size_t completionsQueued() const noexcept { return queued_.size(); }
    bool completionsReady() const noexcept { return !queued_.empty(); }

    // Hands the queued completions to `handle(const io_uring_cqe&)`, in the order queued; only
    // those queued on entry (as Ring::drainCompletions).
    template <typename Handler>
    unsigned drainCompletions(Handler&& handle) {
        std::size_t ready = queued_.size();
        unsigned count = 0;
        for (; count < ready; ++count) {
            io_uring_cqe cqe = queued_.front();
            queued_.pop_front();
            handle(cqe);
        }
        return count;
    }

  private:
    PreparedOp& record(RingOp op, int fd, std::size_t length, CompletionTag tag, SqeFlags flags);
    PreparedOp* pendingWith(CompletionTag tag) noexcept;

    std::vector<PreparedOp> ops_;
    std::size_t firstUnread_ = 0;
    std::vector<unsigned> roomRequests_;
    unsigned submits_ = 0;
    unsigned waits_ = 0;
    std::size_t preparedAtLastSubmit_ = 0;
    std::deque<io_uring_cqe> queued_;
};

// The registration side of a ring (common/RingRegistration.h) without a kernel: it keeps the
// provided buffer rings registered with it, and a test takes buffers from one as the kernel's
// recv would (in ring order from its head, only what the owner published up to its tail), fills
// them with the bytes that "arrived" and names them in the recv completion it delivers.
class FakeRegistration final : public RingRegistration {
  public:
    int registerBufferRing(const io_uring_buf_reg& registration) noexcept override;
    int unregisterBufferRing(std::uint16_t group) noexcept override;
    int registerSparseFiles(unsigned entries) noexcept override;
    int unregisterFiles() noexcept override;
    // Accepted (the writes after it may be writeFixed) unless refuseBuffers() said.
    int registerBuffers(const iovec* buffers, unsigned count) noexcept override;
    int unregisterBuffers() noexcept override;

    // Later registrations of that kind fail with `error` (-errno), as a kernel without them.
    void refuseBufferRings(int error) noexcept { bufferRingError_ = error; }
    void refuseFiles(int error) noexcept { filesError_ = error; }
    void refuseBuffers(int error) noexcept { buffersError_ = error; }

    bool hasBufferRing(std::uint16_t group) const noexcept;
    unsigned fileEntries() const noexcept { return fileEntries_; }
    unsigned registeredBuffers() const noexcept { return registeredBuffers_; }

    struct PickedBuffer {
        std::uint16_t id = 0;
        std::span<std::byte> memory;  // the whole buffer
    };
    // The next buffer of `group` the kernel would fill; nothing when the ring is empty (the
    // recv's -ENOBUFS) or the group is not registered.
    std::optional<PickedBuffer> pick(std::uint16_t group) noexcept;
    // Picks a buffer of `group`, copies `bytes` into it and returns the CQE flags of the recv
    // completion that names it (with IORING_CQE_F_MORE when `more`); nothing when the ring is
    // empty or the buffer too small.
    std::optional<std::uint32_t> fill(std::uint16_t group, std::span<const std::byte> bytes,
                                      bool more = true) noexcept;
    // Buffers of `group` the owner has published and the "kernel" has not taken yet.
    unsigned available(std::uint16_t group) const noexcept;
    static std::uint32_t bufferFlags(std::uint16_t id, bool more) noexcept {
        return IORING_CQE_F_BUFFER | static_cast<std::uint32_t>(id) << IORING_CQE_BUFFER_SHIFT |
               (more ? IORING_CQE_F_MORE : 0u);
    }

  private:
    struct Group {
        std::uint16_t id = 0;
        io_uring_buf_ring* ring = nullptr;
        unsigned entries = 0;
        std::uint16_t head = 0;  // the kernel's: next entry to take
    };
    const Group* groupOf(std::uint16_t group) const noexcept;

    std::vector<Group> groups_;
    unsigned fileEntries_ = 0;
    int bufferRingError_ = 0;
    int filesError_ = 0;
    unsigned registeredBuffers_ = 0;
    int buffersError_ = 0;
};

}  // namespace splicegate::test
