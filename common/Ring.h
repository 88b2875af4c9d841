#pragma once
// One io_uring instance, owned by exactly one thread (a worker). RAII: the ring is torn down in
// the destructor. Set-up errors throw std::system_error naming the call; submission on the data
// path never throws: sqe() flushes the submission queue when it is full.
#include <liburing.h>

#include <cstdint>
#include <string>
#include <vector>

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

// A fresh SQE of `ring`, never null: submits pending ones first when the queue is full. For code
// that holds the raw io_uring (Ring::sqe() is the same for a Ring).
io_uring_sqe* nextSqe(io_uring& ring) noexcept;

class Ring {
  public:
    // `maxUnboundWorkers` caps io-wq's threads for socket work (docs/kernel-notes.md §1): a blocked
    // splice must not be able to spawn a thread per connection.
    Ring(unsigned entries, unsigned maxBoundWorkers, unsigned maxUnboundWorkers,
         RingOptions options = {});
    ~Ring();
    Ring(const Ring&) = delete;
    Ring& operator=(const Ring&) = delete;

    // A fresh SQE, never null: submits pending ones first when the queue is full.
    io_uring_sqe* sqe() noexcept;
    // Submits pending SQEs unless `entries` more fit, so that a linked chain of that many goes
    // into one submission (a chain cut by a submit would run its tail unordered).
    void makeRoom(unsigned entries) noexcept;
    // Submits pending SQEs and waits for at least one completion or until `timeoutMs`.
    // Returns -errno (-ETIME and -EINTR are normal).
    int submitAndWait(unsigned timeoutMs) noexcept;
    int submit() noexcept;
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

    io_uring* raw() noexcept { return &ring_; }

  private:
    io_uring ring_{};
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
