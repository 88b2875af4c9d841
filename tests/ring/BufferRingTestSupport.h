#pragma once
// Ring-tier helpers for the buffer ring and buffer lane tests: a ring of the test's own (a
// common/Ring, for the components that prepare through RingOps and register through its
// RingRegistration; the raw io_uring for the tests' own SQEs), non-blocking socket pairs, and
// bounded waits for completions. No root needed.
#include <gtest/gtest.h>
#include <liburing.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdint>
#include <optional>
#include <string>
#include <system_error>

#include "common/BufferRing.h"
#include "common/Error.h"
#include "common/Ring.h"
#include "common/UniqueFd.h"

namespace splicegate::test {

// What a test keeps of a completion (io_uring_cqe itself ends in a flexible array).
struct Completion {
    std::uint64_t user_data = 0;
    int res = 0;
    std::uint32_t flags = 0;
};

class TestRing {
  public:
    explicit TestRing(unsigned entries = 256) : ring_(entries, kIoWorkers, kIoWorkers, options()) {}
    TestRing(const TestRing&) = delete;
    TestRing& operator=(const TestRing&) = delete;

    io_uring& get() noexcept { return *ring_.raw(); }
    Ring& ops() noexcept { return ring_; }
    RingRegistration& registration() noexcept { return ring_.registration(); }
    io_uring_sqe* sqe() { return ring_.sqe(); }
    void submit() { checkNeg(ring_.submit(), "io_uring_submit"); }

    // Multishot recv on `fd` picking from `group`, tagged `userData` (any 64 bits: a tag's
    // fields cover them all).
    void armRecv(int fd, std::uint16_t group, std::uint64_t userData) {
        ring_.recvMultishot(fd, group, CompletionTag::decode(userData));
        submit();
    }

    // The next completion, waiting at most `timeoutMs`; nothing when none came.
    std::optional<Completion> next(unsigned timeoutMs = 5000) {
        __kernel_timespec timeout{};
        timeout.tv_sec = timeoutMs / 1000;
        timeout.tv_nsec = static_cast<long long>(timeoutMs % 1000) * 1000000;
        io_uring_cqe* cqe = nullptr;
        int rc = io_uring_wait_cqe_timeout(&get(), &cqe, &timeout);
        if (rc == -ETIME) return std::nullopt;
        checkNeg(rc, "io_uring_wait_cqe_timeout");
        Completion copy{cqe->user_data, cqe->res, cqe->flags};
        io_uring_cqe_seen(&get(), cqe);
        return copy;
    }
    // A completion that is already there, without waiting.
    std::optional<Completion> ready() {
        io_uring_cqe* cqe = nullptr;
        if (io_uring_peek_cqe(&get(), &cqe) != 0) return std::nullopt;
        Completion copy{cqe->user_data, cqe->res, cqe->flags};
        io_uring_cqe_seen(&get(), cqe);
        return copy;
    }

  private:
    static constexpr unsigned kIoWorkers = 8;
    // Without DEFER_TASKRUN: ready() peeks without entering the kernel, so completions must be
    // posted as they happen.
    static RingOptions options() {
        RingOptions options;
        options.deferTaskrun = false;
        return options;
    }

    Ring ring_;
};

// A connected AF_UNIX stream pair, both ends non-blocking.
struct SocketPair {
    UniqueFd a;
    UniqueFd b;
    SocketPair() {
        int fds[2];
        checkSys(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds),
                 "socketpair");
        a.reset(fds[0]);
        b.reset(fds[1]);
    }
};

// A buffer ring, or a skip when the kernel has no provided buffer rings (before 5.19).
inline std::optional<BufferRing> makeBufferRing(TestRing& ring, std::uint16_t group,
                                                unsigned entries, std::size_t size,
                                                std::string& skipWhy) {
    try {
        return BufferRing(ring.registration(), group, entries, size);
    } catch (const std::system_error& error) {
        if (error.code().value() != EINVAL && error.code().value() != ENOSYS) throw;
        skipWhy = std::string("no provided buffer rings here: ") + error.what();
        return std::nullopt;
    }
}

}  // namespace splicegate::test
