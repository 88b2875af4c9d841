#include "relay/TimerWheel.h"

#include <algorithm>
#include <stdexcept>

namespace splicegate {

TimerWheel::TimerWheel(Clock::duration tick, std::uint32_t buckets, Clock::time_point start)
    : tick_(tick), start_(start), heads_(buckets, kNone) {
    if (tick <= Clock::duration::zero() || buckets == 0)
        throw std::invalid_argument("timer wheel: tick and bucket count must be positive");
}

std::uint64_t TimerWheel::tickOf(Clock::time_point t) const noexcept {
    if (t <= start_) return 0;
    return static_cast<std::uint64_t>((t - start_) / tick_);
}

void TimerWheel::arm(std::uint32_t id, Clock::time_point deadline) {
    if (id >= entries_.size()) entries_.resize(static_cast<std::size_t>(id) + 1);
    if (entries_[id].armed) unlink(id);
    // A deadline already past goes where the next expiry looks first.
    auto bucket = static_cast<std::uint32_t>(std::max(tickOf(deadline), cursor_) % heads_.size());
    auto& entry = entries_[id];
    entry.deadline = deadline;
    entry.bucket = bucket;
    entry.previous = kNone;
    entry.next = heads_[bucket];
    if (entry.next != kNone) entries_[entry.next].previous = id;
    heads_[bucket] = id;
    entry.armed = true;
    ++armedCount_;
}

void TimerWheel::cancel(std::uint32_t id) noexcept {
    if (armed(id)) unlink(id);
}

void TimerWheel::unlink(std::uint32_t id) noexcept {
    auto& entry = entries_[id];
    if (entry.previous != kNone)
        entries_[entry.previous].next = entry.next;
    else
        heads_[entry.bucket] = entry.next;
    if (entry.next != kNone) entries_[entry.next].previous = entry.previous;
    entry.previous = entry.next = kNone;
    entry.armed = false;
    --armedCount_;
}

void TimerWheel::expire(Clock::time_point now, std::vector<std::uint32_t>& due) {
    const auto first = due.size();
    const std::uint64_t nowTick = std::max(tickOf(now), cursor_);
    // After a pause longer than a revolution every bucket is looked at once.
    const std::uint64_t span = std::min<std::uint64_t>(nowTick - cursor_ + 1, heads_.size());
    for (std::uint64_t t = cursor_; t < cursor_ + span; ++t) {
        for (auto id = heads_[t % heads_.size()]; id != kNone;) {
            auto next = entries_[id].next;
            if (entries_[id].deadline <= now) {
                unlink(id);
                due.push_back(id);
            }
            id = next;
        }
    }
    // The current tick's bucket stays to be looked at again: its later deadlines are not due.
    cursor_ = nowTick;
    std::sort(due.begin() + static_cast<std::ptrdiff_t>(first), due.end(),
              [this](std::uint32_t a, std::uint32_t b) {
                  return entries_[a].deadline != entries_[b].deadline
                             ? entries_[a].deadline < entries_[b].deadline
                             : a < b;
              });
}

}  // namespace splicegate
