#pragma once
// A kernel pipe (read end, write end) with its capacity. Move-only; both ends close on destruction.
#include <cstddef>

#include "common/UniqueFd.h"

namespace splicegate {

class Pipe {
  public:
    Pipe() noexcept = default;
    // Creates a non-blocking, close-on-exec pipe and asks for `capacity` bytes (F_SETPIPE_SZ).
    // The kernel may refuse (EPERM over the per-user limit, docs/kernel-notes.md §4): then the pipe
    // keeps the size it got. Returns -errno when even pipe2() fails.
    static int create(std::size_t capacity, Pipe& out) noexcept;

    int readFd() const noexcept { return read_.get(); }
    int writeFd() const noexcept { return write_.get(); }
    std::size_t capacity() const noexcept { return capacity_; }
    bool valid() const noexcept { return read_.valid(); }
    // Whether this pipe's capacity is counted in a PipeBudget (set by the pool that made it).
    bool budgeted() const noexcept { return budgeted_; }
    void setBudgeted(bool budgeted) noexcept { budgeted_ = budgeted; }
    // Bytes currently buffered (FIONREAD); -errno on failure. A system call: not for hot paths.
    long bufferedBytes() const noexcept;

  private:
    UniqueFd read_;
    UniqueFd write_;
    std::size_t capacity_ = 0;
    bool budgeted_ = false;
};

}  // namespace splicegate
