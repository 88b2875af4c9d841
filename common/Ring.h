#pragma once
// One io_uring instance, owned by exactly one thread (a worker). RAII: the ring is torn down in
// the destructor. Set-up errors throw std::system_error naming the call; submission on the data
// path never throws: sqe() flushes the submission queue when it is full.
#include <liburing.h>

#include <cstdint>
#include <string>
#include <vector>

namespace splicegate {

class Ring {
public:
    // `maxUnboundWorkers` caps io-wq's threads for socket work (docs/kernel-notes.md §1): a blocked splice
    // must not be able to spawn a thread per connection.
    Ring(unsigned entries, unsigned maxBoundWorkers, unsigned maxUnboundWorkers);
    ~Ring();
    Ring(const Ring&) = delete;
    Ring& operator=(const Ring&) = delete;

    // A fresh SQE, never null: submits pending ones first when the queue is full.
    io_uring_sqe* sqe() noexcept;
    // Submits pending SQEs and waits for at least one completion or until `timeoutMs`.
    // Returns -errno (-ETIME and -EINTR are normal).
    int submitAndWait(unsigned timeoutMs) noexcept;
    int submit() noexcept;

    // Calls `handle(const io_uring_cqe&)` for every ready completion and marks them seen.
    template <typename Handler>
    unsigned drainCompletions(Handler&& handle) {
        unsigned head;
        unsigned count = 0;
        io_uring_cqe* cqe;
        io_uring_for_each_cqe(&ring_, head, cqe) {
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
