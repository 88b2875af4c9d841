#pragma once
// Every SQE splicegate prepares, typed: one method per operation, each taking the CompletionTag
// its completion will carry and the SQE flags as SqeFlags (never a raw user_data or flag word).
//
// Why a thin virtual interface with one final implementation (common/Ring.h) rather than a
// template parameter everywhere: Ring is `final` and defines every operation inline over
// liburing, so code that holds a `Ring&` (the splice lane's movers, the worker's own timers and
// control) gets the liburing calls inlined, with no indirect call per SQE. Code that holds a
// `RingOps&` (the seams tests drive with tests/support/FakeRing.h: the buffer lane and its socket
// table, the acceptor, the upstream connector, the audit writers, the admin server) pays one
// indirect call per SQE: a few per chunk, connection, commit or request, next to the system call
// each submission costs anyway. What is registered with a ring rather than submitted (a provided
// buffer ring, the fixed file table) goes through common/RingRegistration.h.
//
// No operation allocates; none fails: when the submission queue is full the pending SQEs are
// submitted first. A linked chain must not be cut by such a submit: call makeRoom(n) before
// preparing a chain of n.
//
// Besides the SQEs, a blocking wait and its reaping, for the shutdown paths of a seam (the audit
// writers') that must see their own work end after the worker's loop is gone.
#include <liburing.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "common/CompletionTag.h"

namespace splicegate {

enum class SqeFlag : std::uint8_t {
    Link = IOSQE_IO_LINK,          // the next SQE runs after this one, and only if it succeeded
    HardLink = IOSQE_IO_HARDLINK,  // the next SQE runs after this one, whatever its result
    FixedFile = IOSQE_FIXED_FILE,  // the fd is an index into the ring's registered file table
};

class SqeFlags {
  public:
    constexpr SqeFlags() noexcept = default;
    constexpr SqeFlags(SqeFlag flag) noexcept : bits_(static_cast<std::uint8_t>(flag)) {}
    // `flag` when `when`, else none: `SqeFlags::when(link, SqeFlag::Link)`.
    static constexpr SqeFlags when(bool when, SqeFlag flag) noexcept {
        return when ? SqeFlags(flag) : SqeFlags();
    }
    constexpr bool has(SqeFlag flag) const noexcept {
        return (bits_ & static_cast<std::uint8_t>(flag)) != 0;
    }
    constexpr std::uint8_t bits() const noexcept { return bits_; }
    friend constexpr SqeFlags operator|(SqeFlags a, SqeFlags b) noexcept {
        SqeFlags both;
        both.bits_ = static_cast<std::uint8_t>(a.bits_ | b.bits_);
        return both;
    }
    friend constexpr bool operator==(SqeFlags, SqeFlags) = default;

  private:
    std::uint8_t bits_ = 0;
};
constexpr SqeFlags operator|(SqeFlag a, SqeFlag b) noexcept {
    return SqeFlags(a) | SqeFlags(b);
}

enum class SyncMode : std::uint8_t { Full, DataOnly };  // fsync, fdatasync

// Every operation the project submits; names a recorded operation in tests/support/FakeRing.h.
enum class RingOp : std::uint8_t {
    RecvMultishot,
    Send,
    Splice,
    Tee,
    Read,
    Write,
    WriteFixed,
    Fsync,
    Accept,
    AcceptMultishot,
    Connect,
    LinkTimeout,
    PollAdd,
    PollRemove,
    Timeout,
    Cancel,
    CancelFd,
    FilesUpdate,
    Openat2,
    Renameat,
    Fallocate,
    Nop,
};

class RingOps {
  public:
    // A multishot recv (kernel 6.0) into buffers of provided-buffer group `bufferGroup`
    // (IOSQE_BUFFER_SELECT): one completion per chunk, IORING_CQE_F_MORE while it stays armed.
    virtual void recvMultishot(int fd, std::uint16_t bufferGroup, CompletionTag tag,
                               SqeFlags flags = {}) noexcept = 0;
    virtual void send(int fd, std::span<const std::byte> data, int msgFlags, CompletionTag tag,
                      SqeFlags flags = {}) noexcept = 0;
    // Offset -1: the fd's current position (a pipe or socket has no other).
    virtual void splice(int from, std::int64_t fromOffset, int to, std::int64_t toOffset,
                        unsigned length, unsigned spliceFlags, CompletionTag tag,
                        SqeFlags flags = {}) noexcept = 0;
    virtual void tee(int from, int to, unsigned length, unsigned spliceFlags, CompletionTag tag,
                     SqeFlags flags = {}) noexcept = 0;
    // Offset UINT64_MAX (-1): the fd's current position.
    virtual void read(int fd, std::span<std::byte> into, std::uint64_t offset, CompletionTag tag,
                      SqeFlags flags = {}) noexcept = 0;
    // `rwFlags`: RWF_* (RWF_DSYNC).
    virtual void write(int fd, std::span<const std::byte> data, std::uint64_t offset, int rwFlags,
                       CompletionTag tag, SqeFlags flags = {}) noexcept = 0;
    // From registered buffer `bufferIndex`, which `data` lies in.
    virtual void writeFixed(int fd, std::span<const std::byte> data, std::uint64_t offset,
                            int bufferIndex, int rwFlags, CompletionTag tag,
                            SqeFlags flags = {}) noexcept = 0;
    virtual void fsync(int fd, SyncMode mode, CompletionTag tag, SqeFlags flags = {}) noexcept = 0;
    // The peer's address is written to `address` / `length` (which must outlive the accept).
    virtual void accept(int fd, sockaddr* address, socklen_t* length, int acceptFlags,
                        CompletionTag tag, SqeFlags flags = {}) noexcept = 0;
    // One completion per connection, IORING_CQE_F_MORE while it stays armed.
    virtual void acceptMultishot(int fd, int acceptFlags, CompletionTag tag,
                                 SqeFlags flags = {}) noexcept = 0;
    // A connect cut short after `*timeout` (a linked IORING_OP_LINK_TIMEOUT carrying
    // `timeoutTag`); both go into one submission. `timeout` must outlive the pair.
    virtual void connect(int fd, const sockaddr* address, socklen_t length,
                         __kernel_timespec* timeout, CompletionTag tag,
                         CompletionTag timeoutTag) noexcept = 0;
    virtual void pollAdd(int fd, unsigned events, CompletionTag tag,
                         SqeFlags flags = {}) noexcept = 0;
    virtual void pollRemove(CompletionTag target, CompletionTag tag) noexcept = 0;
    // Completes after `*timeout` (-ETIME) or after `count` other completions (0: time only).
    virtual void timeout(__kernel_timespec* timeout, unsigned count, unsigned timeoutFlags,
                         CompletionTag tag, SqeFlags flags = {}) noexcept = 0;
    // Cancels the operation that carries `target`.
    virtual void cancel(CompletionTag target, CompletionTag tag) noexcept = 0;
    // Cancels operations on `fd` (`cancelFlags`: IORING_ASYNC_CANCEL_ALL for every one).
    virtual void cancelFd(int fd, unsigned cancelFlags, CompletionTag tag) noexcept = 0;
    // Sets `count` entries of the registered file table from `firstEntry` to `fds` (-1: empty).
    // The array must outlive the operation.
    virtual void filesUpdate(const int* fds, unsigned count, int firstEntry,
                             CompletionTag tag) noexcept = 0;
    virtual void openat2(int directoryFd, const char* path, open_how* how, CompletionTag tag,
                         SqeFlags flags = {}) noexcept = 0;
    virtual void renameat(int fromDirectory, const char* from, int toDirectory, const char* to,
                          unsigned renameFlags, CompletionTag tag,
                          SqeFlags flags = {}) noexcept = 0;
    virtual void fallocate(int fd, int mode, std::uint64_t offset, std::uint64_t length,
                           CompletionTag tag, SqeFlags flags = {}) noexcept = 0;
    // Does nothing: keeps a tag's place in a chain whose step is not needed.
    virtual void nop(CompletionTag tag, SqeFlags flags = {}) noexcept = 0;

    // Submits pending SQEs unless `entries` more fit, so that a linked chain of that many goes
    // into one submission (a chain cut by a submit would run its tail unordered).
    virtual void makeRoom(unsigned entries) noexcept = 0;
    // Hands the pending SQEs to the kernel now; returns how many, or -errno. For an SQE naming
    // an fd that is about to be closed: the kernel resolves the number when it takes the SQE,
    // and once closed the number may name another file.
    virtual int submit() noexcept = 0;

    // Submits pending SQEs and waits for at least one completion or until `timeoutMs`.
    // Returns -errno (-ETIME and -EINTR are normal).
    virtual int submitAndWait(unsigned timeoutMs) noexcept = 0;

    // Where drainCompletions() through a RingOps& hands each completion.
    struct CompletionSink {
        void* target;
        void (*handle)(void* target, const io_uring_cqe& cqe);
    };
    // Hands the completions ready on entry to `sink` and marks them seen.
    virtual unsigned drainCompletionsTo(CompletionSink sink) = 0;
    // The same with any callable `handle(const io_uring_cqe&)`, for code that holds a RingOps&
    // (Ring and FakeRing have their own, inline, for code that holds them).
    template <typename Handler>
    unsigned drainCompletions(Handler&& handle) {
        using Callable = std::remove_reference_t<Handler>;
        return drainCompletionsTo(CompletionSink{
            const_cast<void*>(static_cast<const void*>(&handle)),
            [](void* target, const io_uring_cqe& cqe) { (*static_cast<Callable*>(target))(cqe); }});
    }

  protected:
    RingOps() = default;
    ~RingOps() = default;
    RingOps(const RingOps&) = default;
    RingOps& operator=(const RingOps&) = default;
};

}  // namespace splicegate
