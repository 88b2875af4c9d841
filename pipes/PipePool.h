#pragma once
// Pipes are lent only while bytes are in flight (docs/kernel-notes.md §4): an idle connection holds
// none.
//
// PipeBudget is shared by all workers (atomic, lock-free): it caps the total capacity of the
// full-size pipes in existence, because the kernel's per-user pipe allowance is a cliff — past it
// every new pipe silently shrinks to a page or two. PipePool is per worker (not thread-safe):
// it keeps a few idle full-size pipes for reuse and creates more while the budget allows. With
// many pipes lent, each new one is sized to a fair share of the budget (limit / pipes lent, down
// to 64 KiB), and borrowers give back pipes that became too large (wrongSize), so busy
// connections that never run dry cannot keep the budget from the others. When the budget is
// spent it lends a one-page "overflow" pipe instead of making the flow wait, so a connection
// can always make progress (waiting could deadlock two directions that depend on each other).
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "pipes/Pipe.h"

namespace splicegate {

class PipeBudget {
  public:
    // `maxPipes`: pipes that may exist at once, lent or idle (their fds are counted in the fd
    // budget, relay/FdBudget.h); 0 = no cap.
    explicit PipeBudget(std::uint64_t limitBytes, std::uint64_t maxPipes = 0) noexcept
        : limit_(limitBytes), maxPipes_(maxPipes) {}
    bool tryReserve(std::uint64_t bytes) noexcept;
    void release(std::uint64_t bytes) noexcept;
    // A new pipe may be made (false: the cap is reached); each true is matched by pipeClosed().
    bool tryCountPipe() noexcept;
    void pipeClosed() noexcept { pipes_.fetch_sub(1, std::memory_order_relaxed); }
    std::uint64_t maxPipes() const noexcept { return maxPipes_; }
    std::uint64_t limit() const noexcept { return limit_; }
    std::uint64_t used() const noexcept { return used_.load(std::memory_order_relaxed); }

    // Pipes lent out by all pools (budgeted or not), for the fair share.
    void countLent() noexcept { lent_.fetch_add(1, std::memory_order_relaxed); }
    void countReturned() noexcept { lent_.fetch_sub(1, std::memory_order_relaxed); }
    // The capacity each lent pipe may have so that all of them fit in the budget: the limit
    // divided by the pipes lent, rounded down to a power of two, between min(64 KiB, maxSize)
    // and maxSize. Without a limit, maxSize.
    std::size_t fairShare(std::size_t maxSize) const noexcept;

    // What this process may spend on pipes: a share of fs.pipe-user-pages-soft (the rest is left
    // for the audit pipes and anything else the service user runs). 0 when unlimited.
    static std::uint64_t systemLimitBytes() noexcept;
    // fs.pipe-max-size: the largest capacity an unprivileged F_SETPIPE_SZ may ask for.
    static std::uint64_t systemMaxPipeSize() noexcept;

  private:
    const std::uint64_t limit_;
    const std::uint64_t maxPipes_;
    std::atomic<std::uint64_t> used_{0};
    std::atomic<std::uint64_t> pipes_{0};
    std::atomic<std::uint64_t> lent_{0};
};

struct PipePoolStats {
    std::uint64_t inUse = 0;          // lent out now
    std::uint64_t idle = 0;           // kept for reuse
    std::uint64_t overflowInUse = 0;  // one-page pipes lent because the budget was spent
    std::uint64_t created = 0;
    std::uint64_t discardedNonEmpty = 0;  // returned with bytes in them: a bookkeeping bug
    std::uint64_t createFailures = 0;
    std::uint64_t capRefusals = 0;  // the budget's pipe cap was reached
};

class PipePool {
  public:
    PipePool(PipeBudget& budget, std::size_t pipeSize, std::size_t maxIdle) noexcept;
    ~PipePool();
    PipePool(const PipePool&) = delete;
    PipePool& operator=(const PipePool&) = delete;

    // Lends a pipe into `out`. Returns 0, or -errno when no pipe at all could be made: -EMFILE
    // also when the budget's pipe cap is reached (the caller may go on without a pipe).
    int acquire(Pipe& out) noexcept;
    // Takes a pipe back. `bufferedBytes` is the caller's count of bytes still in it: a pipe that
    // is not empty is closed, never lent again, so stale bytes can't leak into another stream.
    void release(Pipe&& pipe, std::size_t bufferedBytes) noexcept;
    // An empty pipe its borrower should give back and borrow anew: larger than the fair share
    // (others are starved of budget), or an overflow pipe while the budget has room again.
    bool wrongSize(const Pipe& pipe) const noexcept;

    const PipePoolStats& stats() const noexcept { return stats_; }
    std::size_t pipeSize() const noexcept { return pipeSize_; }

  private:
    static bool isOverflow(const Pipe& pipe) noexcept { return !pipe.budgeted(); }
    void discard(Pipe&& pipe) noexcept;

    PipeBudget& budget_;
    const std::size_t pipeSize_;
    const std::size_t maxIdle_;
    std::vector<Pipe> idle_;
    PipePoolStats stats_;
};

}  // namespace splicegate
