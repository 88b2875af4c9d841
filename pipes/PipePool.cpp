#include "pipes/PipePool.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>

namespace splicegate {
namespace {
constexpr std::size_t kMinBudgetedPipeSize = 64 * 1024;
constexpr std::size_t kOverflowPipeSize = 4096;

std::uint64_t readProcNumber(const char* path) noexcept {
    std::ifstream in(path);
    std::uint64_t value = 0;
    if (!(in >> value)) return 0;
    return value;
}

// The kernel rounds a pipe's capacity up to a power-of-two number of pages (fs/pipe.c).
std::size_t roundPipeSize(std::size_t bytes) noexcept {
    auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    std::size_t rounded = page;
    while (rounded < bytes) rounded *= 2;
    return rounded;
}
}  // namespace

bool PipeBudget::tryReserve(std::uint64_t bytes) noexcept {
    if (limit_ == 0) {
        used_.fetch_add(bytes, std::memory_order_relaxed);
        return true;
    }
    auto current = used_.load(std::memory_order_relaxed);
    do {
        if (current + bytes > limit_) return false;
    } while (!used_.compare_exchange_weak(current, current + bytes, std::memory_order_relaxed));
    return true;
}

bool PipeBudget::tryCountPipe() noexcept {
    auto before = pipes_.fetch_add(1, std::memory_order_relaxed);
    if (maxPipes_ == 0 || before < maxPipes_) return true;
    pipes_.fetch_sub(1, std::memory_order_relaxed);
    return false;
}

void PipeBudget::release(std::uint64_t bytes) noexcept {
    used_.fetch_sub(bytes, std::memory_order_relaxed);
}

std::size_t PipeBudget::fairShare(std::size_t maxSize) const noexcept {
    if (limit_ == 0) return maxSize;
    const std::uint64_t lent = std::max<std::uint64_t>(1, lent_.load(std::memory_order_relaxed));
    const std::uint64_t share = limit_ / lent;
    const std::size_t floor = std::min(kMinBudgetedPipeSize, maxSize);
    std::size_t size = maxSize;
    while (size > floor && size > share) size /= 2;
    return std::max(size, floor);
}

std::uint64_t PipeBudget::systemLimitBytes() noexcept {
    auto pages = readProcNumber("/proc/sys/fs/pipe-user-pages-soft");
    if (pages == 0) return 0;
    auto bytes = pages * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
    return bytes / 4 * 3;
}

std::uint64_t PipeBudget::systemMaxPipeSize() noexcept {
    auto size = readProcNumber("/proc/sys/fs/pipe-max-size");
    return size == 0 ? 1048576 : size;
}

PipePool::PipePool(PipeBudget& budget, std::size_t pipeSize, std::size_t maxIdle) noexcept
    : budget_(budget), pipeSize_(roundPipeSize(pipeSize)), maxIdle_(maxIdle) {}

PipePool::~PipePool() {
    while (!idle_.empty()) {
        discard(std::move(idle_.back()));
        idle_.pop_back();
    }
}

int PipePool::acquire(Pipe& out) noexcept {
    budget_.countLent();
    const std::size_t fair = budget_.fairShare(pipeSize_);
    while (!idle_.empty()) {
        Pipe pipe = std::move(idle_.back());
        idle_.pop_back();
        --stats_.idle;
        if (pipe.capacity() > fair) {  // too large for a crowded budget: free it for a smaller one
            discard(std::move(pipe));
            continue;
        }
        out = std::move(pipe);
        ++stats_.inUse;
        return 0;
    }
    if (!budget_.tryCountPipe()) {
        budget_.countReturned();
        ++stats_.capRefusals;
        return -EMFILE;
    }
    // Halving below the fair share while the budget has no room for it, down to
    // kMinBudgetedPipeSize, before falling to a one-page pipe.
    std::size_t size = fair;
    while (!budget_.tryReserve(size)) {
        size = size / 2 >= kMinBudgetedPipeSize ? size / 2 : 0;
        if (size == 0) break;
    }
    bool budgeted = size != 0;
    int rc = Pipe::create(budgeted ? size : kOverflowPipeSize, out);
    if (rc < 0) {
        if (budgeted) budget_.release(size);
        budget_.pipeClosed();
        budget_.countReturned();
        ++stats_.createFailures;
        return rc;
    }
    if (budgeted && out.capacity() < size) {
        // The kernel gave less (per-user allowance reached): it is an overflow pipe, unbudgeted.
        budget_.release(size);
        budgeted = false;
    }
    out.setBudgeted(budgeted);
    ++stats_.created;
    ++stats_.inUse;
    if (isOverflow(out)) ++stats_.overflowInUse;
    return 0;
}

bool PipePool::wrongSize(const Pipe& pipe) const noexcept {
    const std::size_t fair = budget_.fairShare(pipeSize_);
    if (pipe.budgeted()) return pipe.capacity() > fair;
    const std::uint64_t limit = budget_.limit();
    return !idle_.empty() || limit == 0 || budget_.used() + fair <= limit;
}

void PipePool::release(Pipe&& pipe, std::size_t bufferedBytes) noexcept {
    if (!pipe.valid()) return;
    budget_.countReturned();
    --stats_.inUse;
    if (isOverflow(pipe)) --stats_.overflowInUse;
    if (bufferedBytes != 0) {
        ++stats_.discardedNonEmpty;
        discard(std::move(pipe));
        return;
    }
    // Only full-size pipes are kept: a smaller one was lent while the budget ran low.
    if (isOverflow(pipe) || pipe.capacity() < pipeSize_ ||
        pipe.capacity() > budget_.fairShare(pipeSize_) || idle_.size() >= maxIdle_) {
        discard(std::move(pipe));
        return;
    }
    idle_.push_back(std::move(pipe));
    ++stats_.idle;
}

void PipePool::discard(Pipe&& pipe) noexcept {
    if (!isOverflow(pipe)) budget_.release(pipe.capacity());
    budget_.pipeClosed();
    Pipe closing = std::move(pipe);
}

}  // namespace splicegate
