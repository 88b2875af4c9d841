#pragma once
// A hashed wheel of deadlines, one per id (a connection's slot): arming, re-arming and
// cancelling cost O(1), and an expiry visits only the buckets of the ticks that passed since the
// last one, so its cost follows what is due (plus the entries of later revolutions that share
// those buckets), not the number of entries.
//
// Time is cut into ticks of `tick` since `start`; a deadline goes into the bucket of its tick,
// modulo the bucket count. A deadline further away than one revolution shares a bucket with
// nearer ones and is passed over until its own turn. Nothing fires early: an entry is due when
// its deadline is not after the `now` given to expire(), whatever its bucket.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace splicegate {

class TimerWheel {
  public:
    using Clock = std::chrono::steady_clock;

    TimerWheel(Clock::duration tick, std::uint32_t buckets, Clock::time_point start);

    // Sets (or moves) the deadline of `id`.
    void arm(std::uint32_t id, Clock::time_point deadline);
    void cancel(std::uint32_t id) noexcept;
    bool armed(std::uint32_t id) const noexcept {
        return id < entries_.size() && entries_[id].armed;
    }
    std::size_t size() const noexcept { return armedCount_; }

    // Appends to `due` the ids whose deadline is not after `now`, earliest deadline first, and
    // disarms them. `now` must not go back.
    void expire(Clock::time_point now, std::vector<std::uint32_t>& due);

  private:
    static constexpr std::uint32_t kNone = UINT32_MAX;
    struct Entry {
        Clock::time_point deadline;
        std::uint32_t previous = kNone;
        std::uint32_t next = kNone;
        std::uint32_t bucket = 0;
        bool armed = false;
    };

    std::uint64_t tickOf(Clock::time_point t) const noexcept;
    void unlink(std::uint32_t id) noexcept;

    const Clock::duration tick_;
    const Clock::time_point start_;
    std::vector<std::uint32_t> heads_;  // per bucket: its first entry
    std::vector<Entry> entries_;        // by id
    std::uint64_t cursor_ = 0;          // the tick of the last expiry (its bucket may hold more)
    std::size_t armedCount_ = 0;
};

}  // namespace splicegate
