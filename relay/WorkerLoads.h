#pragma once
// How many connections each worker owns, for spreading new connections evenly. SO_REUSEPORT
// hashes each new connection to one worker's listener: 64 connections split 37/27 as often as
// not, and since every worker thread gets an equal share of the CPU, the busier worker's
// connections each get less of it (their latency sets the tail). A worker that accepts a
// connection while it owns `slack` or more connections than the least busy worker hands the
// connection over to that worker (relay/Acceptor.cpp decides, the Worker posts it).
//
// Counts are booked for the worker that will own the connection at the moment of the decision,
// so a burst of accepts does not hand every connection to the same worker before it has
// adopted the first. Thread-safe: relaxed atomics; a slightly stale count only makes the
// spread a little less even.
#include <atomic>
#include <cstddef>
#include <memory>
#include <optional>

namespace splicegate {

class WorkerLoads {
  public:
    explicit WorkerLoads(unsigned workers)
        : count_(workers), loads_(std::make_unique<std::atomic<long>[]>(workers)) {}

    unsigned workers() const noexcept { return count_; }
    long load(unsigned worker) const noexcept {
        return loads_[worker].load(std::memory_order_relaxed);
    }
    void add(unsigned worker, long delta) noexcept {
        loads_[worker].fetch_add(delta, std::memory_order_relaxed);
    }
    // The least busy worker when `self` owns at least `slack` more connections than it; nothing
    // when `self` should keep a new connection.
    std::optional<unsigned> lighterThan(unsigned self, long slack) const noexcept {
        unsigned lightest = self;
        for (unsigned w = 0; w < count_; ++w)
            if (load(w) < load(lightest)) lightest = w;
        if (lightest == self || load(self) - load(lightest) < slack) return std::nullopt;
        return lightest;
    }

  private:
    unsigned count_;
    std::unique_ptr<std::atomic<long>[]> loads_;
};

}  // namespace splicegate
