#include "pipes/PipePool.h"

#include <unistd.h>

#include <fstream>

namespace splicegate {
namespace {
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

void PipeBudget::release(std::uint64_t bytes) noexcept {
    used_.fetch_sub(bytes, std::memory_order_relaxed);
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
    if (!idle_.empty()) {
        out = std::move(idle_.back());
        idle_.pop_back();
        --stats_.idle;
        ++stats_.inUse;
        return 0;
    }
    bool fullSize = budget_.tryReserve(pipeSize_);
    int rc = Pipe::create(fullSize ? pipeSize_ : kOverflowPipeSize, out);
    if (rc < 0) {
        if (fullSize) budget_.release(pipeSize_);
        ++stats_.createFailures;
        return rc;
    }
    if (fullSize && out.capacity() < pipeSize_) {
        // The kernel gave less (per-user allowance reached): it is an overflow pipe, unbudgeted.
        budget_.release(pipeSize_);
        fullSize = false;
    }
    out.setBudgeted(fullSize);
    ++stats_.created;
    ++stats_.inUse;
    if (isOverflow(out)) ++stats_.overflowInUse;
    return 0;
}

void PipePool::release(Pipe&& pipe, std::size_t bufferedBytes) noexcept {
    if (!pipe.valid()) return;
    --stats_.inUse;
    if (isOverflow(pipe)) --stats_.overflowInUse;
    if (bufferedBytes != 0) {
        ++stats_.discardedNonEmpty;
        discard(std::move(pipe));
        return;
    }
    if (isOverflow(pipe) || idle_.size() >= maxIdle_) {
        discard(std::move(pipe));
        return;
    }
    idle_.push_back(std::move(pipe));
    ++stats_.idle;
}

void PipePool::discard(Pipe&& pipe) noexcept {
    if (!isOverflow(pipe)) budget_.release(pipe.capacity());
    Pipe closing = std::move(pipe);
}

}  // namespace splicegate
