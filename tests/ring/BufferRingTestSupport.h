#pragma once
// Ring-tier helpers for the buffer ring and buffer lane tests: an io_uring of the test's own,
// non-blocking socket pairs, and bounded waits for completions. No root needed.
#include <gtest/gtest.h>
#include <liburing.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdint>
#include <optional>
#include <string>
#include <system_error>

#include "common/Error.h"
#include "common/UniqueFd.h"
#include "common/BufferRing.h"

namespace splicegate::test {

// What a test keeps of a completion (io_uring_cqe itself ends in a flexible array).
struct Completion {
    std::uint64_t user_data = 0;
    int res = 0;
    std::uint32_t flags = 0;
};

class TestRing {
  public:
    explicit TestRing(unsigned entries = 256) {
        io_uring_params params{};
        params.flags = IORING_SETUP_CQSIZE | IORING_SETUP_SINGLE_ISSUER;
        params.cq_entries = entries * 8;
        checkNeg(io_uring_queue_init_params(entries, &ring_, &params), "io_uring_queue_init");
    }
    ~TestRing() { io_uring_queue_exit(&ring_); }
    TestRing(const TestRing&) = delete;
    TestRing& operator=(const TestRing&) = delete;

    io_uring& get() noexcept { return ring_; }
    io_uring_sqe* sqe() {
        auto* entry = io_uring_get_sqe(&ring_);
        if (entry == nullptr) {
            io_uring_submit(&ring_);
            entry = io_uring_get_sqe(&ring_);
        }
        return entry;
    }
    void submit() { checkNeg(io_uring_submit(&ring_), "io_uring_submit"); }

    // Multishot recv on `fd` picking from `group`, tagged `userData`.
    void armRecv(int fd, std::uint16_t group, std::uint64_t userData) {
        auto* entry = sqe();
        io_uring_prep_recv_multishot(entry, fd, nullptr, 0, 0);
        entry->flags |= IOSQE_BUFFER_SELECT;
        entry->buf_group = group;
        io_uring_sqe_set_data64(entry, userData);
        submit();
    }

    // The next completion, waiting at most `timeoutMs`; nothing when none came.
    std::optional<Completion> next(unsigned timeoutMs = 5000) {
        __kernel_timespec timeout{};
        timeout.tv_sec = timeoutMs / 1000;
        timeout.tv_nsec = static_cast<long long>(timeoutMs % 1000) * 1000000;
        io_uring_cqe* cqe = nullptr;
        int rc = io_uring_wait_cqe_timeout(&ring_, &cqe, &timeout);
        if (rc == -ETIME) return std::nullopt;
        checkNeg(rc, "io_uring_wait_cqe_timeout");
        Completion copy{cqe->user_data, cqe->res, cqe->flags};
        io_uring_cqe_seen(&ring_, cqe);
        return copy;
    }
    // A completion that is already there, without waiting.
    std::optional<Completion> ready() {
        io_uring_cqe* cqe = nullptr;
        if (io_uring_peek_cqe(&ring_, &cqe) != 0) return std::nullopt;
        Completion copy{cqe->user_data, cqe->res, cqe->flags};
        io_uring_cqe_seen(&ring_, cqe);
        return copy;
    }

  private:
    io_uring ring_{};
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
        return BufferRing(ring.get(), group, entries, size);
    } catch (const std::system_error& error) {
        if (error.code().value() != EINVAL && error.code().value() != ENOSYS) throw;
        skipWhy = std::string("no provided buffer rings here: ") + error.what();
        return std::nullopt;
    }
}

}  // namespace splicegate::test
