#include "relay/UpstreamPool.h"

#include <algorithm>

#include "common/Log.h"

namespace splicegate {

UpstreamPool::UpstreamPool(std::string route, const std::vector<UpstreamConfig>& upstreams,
                           UpstreamHealthPolicy policy, const UpstreamPool* previous,
                           Clock::time_point now)
    : route_(std::move(route)), policy_(policy) {
    entries_.reserve(upstreams.size());
    for (const auto& upstream : upstreams) {
        Entry entry;
        entry.text = upstream.text;
        entry.numeric = SocketAddress::parseNumeric(upstream.text).has_value();
        entry.addresses = upstream.addresses;
        entry.resolveAt = entry.addresses.empty() ? now : now + policy_.reresolveInterval;
        entry.checkAt = now;
        entry.weight = upstream.weight;
        entry.backup = upstream.backup;
        if (previous != nullptr) {
            std::lock_guard lock(previous->mutex_);
            for (const auto& old : previous->entries_) {
                if (old.text != entry.text) continue;
                auto fresh = std::move(entry.addresses);
                // Health, counters and the operator's disable carry on; the balancing options
                // are the new config's.
                entry.addresses.clear();
                auto weight = entry.weight;
                auto backup = entry.backup;
                entry = old;
                entry.weight = weight;
                entry.backup = backup;
                entry.currentWeight = 0;
                entry.probing = false;
                entry.resolving = false;
                // The config was just resolved again: its answer is the newer one.
                if (!fresh.empty()) entry.addresses = std::move(fresh);
                break;
            }
        }
        entries_.push_back(std::move(entry));
    }
}

bool UpstreamPool::eligible(const Entry& entry, Clock::time_point now) const {
    if (entry.addresses.empty()) return false;
    if (!entry.down) return true;
    if (entry.probing) return now - entry.probeStarted >= policy_.probeTimeout;
    return now >= entry.retryAt;
}

UpstreamPool::Pick UpstreamPool::take(std::uint32_t index, Clock::time_point now) {
    auto& entry = entries_[index];
    if (entry.down) {
        entry.probing = true;
        entry.probeStarted = now;
    }
    Pick pick{index, entry.addresses[entry.nextAddress % entry.addresses.size()]};
    entry.nextAddress = (entry.nextAddress + 1) % entry.addresses.size();
    return pick;
}

template <typename Admit>
std::optional<std::uint32_t> UpstreamPool::weightedPick(Admit admit) {
    std::int64_t total = 0;
    std::optional<std::uint32_t> best;
    for (std::uint32_t i = 0; i < entries_.size(); ++i) {
        auto& entry = entries_[i];
        if (!admit(entry)) continue;
        entry.currentWeight += entry.weight;
        total += entry.weight;
        if (!best || entry.currentWeight > entries_[*best].currentWeight) best = i;
    }
    if (best) entries_[*best].currentWeight -= total;
    return best;
}

std::optional<UpstreamPool::Pick> UpstreamPool::pick(Clock::time_point now) {
    std::lock_guard lock(mutex_);
    auto usable = [&](bool backup) {
        return [this, now, backup](const Entry& entry) {
            return entry.backup == backup && !entry.disabled && eligible(entry, now);
        };
    };
    // A primary due for its probe goes first: one connection decides whether it is back, and
    // its running weight (frozen while it was down) must not hold the probe back.
    for (std::uint32_t i = 0; i < entries_.size(); ++i) {
        const auto& entry = entries_[i];
        if (entry.down && !entry.backup && !entry.disabled && eligible(entry, now))
            return take(i, now);
    }
    auto index = weightedPick(usable(false));
    if (!index) index = weightedPick(usable(true));
    if (!index)
        index = weightedPick(
            [](const Entry& entry) { return !entry.disabled && !entry.addresses.empty(); });
    if (!index) return std::nullopt;
    return take(*index, now);
}

void UpstreamPool::markDown(Entry& entry, Clock::time_point now) {
    entry.backoff = entry.backoff.count() == 0
                        ? policy_.downBackoffInitial
                        : std::min(entry.backoff * 2, policy_.downBackoffMax);
    entry.retryAt = now + entry.backoff;
    if (!entry.down) {
        logWarn("route ", route_, ": upstream ", entry.text, " is down after ",
                entry.failuresInARow, " failed connects in a row; next try in ",
                entry.backoff.count(), " ms");
        entry.counters->wentDown.fetch_add(1, std::memory_order_relaxed);
    }
    entry.down = true;
}

void UpstreamPool::report(std::uint32_t upstream, bool connected, Clock::time_point now) {
    std::lock_guard lock(mutex_);
    if (upstream >= entries_.size()) return;
    auto& entry = entries_[upstream];
    if (!connected) entry.counters->connectFailures.fetch_add(1, std::memory_order_relaxed);
    recordOutcome(entry, connected, now);
}

void UpstreamPool::reportCheck(std::uint32_t upstream, bool connected, Clock::time_point now) {
    std::lock_guard lock(mutex_);
    if (upstream >= entries_.size()) return;
    auto& entry = entries_[upstream];
    if (!connected) entry.counters->healthCheckFailures.fetch_add(1, std::memory_order_relaxed);
    recordOutcome(entry, connected, now);
}

void UpstreamPool::connectionOpened(std::uint32_t upstream,
                                    std::chrono::nanoseconds connectTime) noexcept {
    std::lock_guard lock(mutex_);
    if (upstream >= entries_.size()) return;
    auto& c = *entries_[upstream].counters;
    c.active.fetch_add(1, std::memory_order_relaxed);
    auto seconds = std::chrono::duration<double>(connectTime).count();
    std::size_t bucket = 0;
    while (bucket < kUpstreamConnectBucketBounds.size() &&
           seconds > kUpstreamConnectBucketBounds[bucket])
        ++bucket;
    c.connectBuckets[bucket].fetch_add(1, std::memory_order_relaxed);
    c.connectNanos.fetch_add(static_cast<std::uint64_t>(std::max<std::int64_t>(0, connectTime.count())),
                             std::memory_order_relaxed);
}

void UpstreamPool::connectionClosed(std::uint32_t upstream, std::uint64_t bytesC2u,
                                    std::uint64_t bytesU2c) noexcept {
    std::lock_guard lock(mutex_);
    if (upstream >= entries_.size()) return;
    auto& c = *entries_[upstream].counters;
    c.active.fetch_sub(1, std::memory_order_relaxed);
    c.bytesC2u.fetch_add(bytesC2u, std::memory_order_relaxed);
    c.bytesU2c.fetch_add(bytesU2c, std::memory_order_relaxed);
}

bool UpstreamPool::setDisabled(const std::string& text, bool disabled) {
    std::lock_guard lock(mutex_);
    for (auto& entry : entries_) {
        if (entry.text != text) continue;
        if (entry.disabled != disabled)
            logInfo("route ", route_, ": upstream ", entry.text,
                    disabled ? " disabled (maintenance): no new connections, established ones go on"
                             : " enabled again");
        entry.disabled = disabled;
        entry.currentWeight = 0;
        return true;
    }
    return false;
}

void UpstreamPool::recordOutcome(Entry& entry, bool connected, Clock::time_point now) {
    entry.probing = false;
    if (connected) {
        if (entry.down) {
            logInfo("route ", route_, ": upstream ", entry.text, " is up again");
            entry.counters->cameUp.fetch_add(1, std::memory_order_relaxed);
        }
        entry.down = false;
        entry.failuresInARow = 0;
        entry.backoff = std::chrono::milliseconds{0};
        return;
    }
    ++entry.failuresInARow;
    // A failed probe (or a failure while down) waits longer; otherwise the threshold decides.
    if (entry.down || entry.failuresInARow >= policy_.failuresToDown) markDown(entry, now);
}

std::vector<UpstreamPool::DueResolution> UpstreamPool::dueResolutions(Clock::time_point now) {
    std::lock_guard lock(mutex_);
    std::vector<DueResolution> due;
    for (std::uint32_t i = 0; i < entries_.size(); ++i) {
        auto& entry = entries_[i];
        if (entry.numeric || entry.resolving || now < entry.resolveAt) continue;
        entry.resolving = true;
        due.push_back({i, entry.text});
    }
    return due;
}

void UpstreamPool::setResolved(std::uint32_t upstream, std::vector<SocketAddress> addresses,
                               const std::string& error, Clock::time_point now) {
    std::lock_guard lock(mutex_);
    if (upstream >= entries_.size()) return;
    auto& entry = entries_[upstream];
    entry.resolving = false;
    if (addresses.empty()) {
        entry.resolveBackoff = entry.resolveBackoff.count() == 0
                                   ? policy_.resolveRetryInitial
                                   : std::min(entry.resolveBackoff * 2, policy_.resolveRetryMax);
        entry.resolveAt = now + entry.resolveBackoff;
        // A name that resolved before keeps its last addresses: a DNS outage is not an upstream
        // outage.
        logWarnLimited("upstream resolution on route " + route_, "route ", route_,
                       ": cannot resolve upstream ", entry.text, " (", error, "); ",
                       entry.addresses.empty() ? "it counts as down; " : "keeping its addresses; ",
                       "retry in ", entry.resolveBackoff.count(), " ms");
        return;
    }
    if (entry.addresses.empty())
        logInfo("route ", route_, ": upstream ", entry.text, " resolved to ", addresses.size(),
                " addresses");
    entry.resolveBackoff = std::chrono::milliseconds{0};
    entry.resolveAt = now + policy_.reresolveInterval;
    if (entry.addresses != addresses) {
        entry.addresses = std::move(addresses);
        entry.nextAddress = 0;
    }
}

std::vector<UpstreamPool::DueCheck> UpstreamPool::dueChecks(Clock::time_point now) {
    std::vector<DueCheck> due;
    if (policy_.activeCheckInterval.count() == 0) return due;
    std::lock_guard lock(mutex_);
    for (std::uint32_t i = 0; i < entries_.size(); ++i) {
        auto& entry = entries_[i];
        if (entry.addresses.empty() || now < entry.checkAt) continue;
        entry.checkAt = now + policy_.activeCheckInterval;
        due.push_back({i, entry.addresses[entry.nextAddress % entry.addresses.size()]});
    }
    return due;
}

std::size_t UpstreamPool::addressCount() const {
    std::lock_guard lock(mutex_);
    std::size_t count = 0;
    for (const auto& entry : entries_) count += entry.addresses.size();
    return count;
}

std::vector<UpstreamSnapshot> UpstreamPool::snapshot() const {
    std::lock_guard lock(mutex_);
    std::vector<UpstreamSnapshot> out;
    out.reserve(entries_.size());
    for (const auto& entry : entries_) {
        UpstreamSnapshot state;
        state.route = route_;
        state.upstream = entry.text;
        state.up = !entry.addresses.empty() && !entry.down;
        state.disabled = entry.disabled;
        state.backup = entry.backup;
        state.weight = entry.weight;
        const auto& c = *entry.counters;
        state.active = c.active.load(std::memory_order_relaxed);
        state.connectFailures = c.connectFailures.load(std::memory_order_relaxed);
        state.healthCheckFailures = c.healthCheckFailures.load(std::memory_order_relaxed);
        state.wentDown = c.wentDown.load(std::memory_order_relaxed);
        state.cameUp = c.cameUp.load(std::memory_order_relaxed);
        state.bytesC2u = c.bytesC2u.load(std::memory_order_relaxed);
        state.bytesU2c = c.bytesU2c.load(std::memory_order_relaxed);
        std::uint64_t cumulative = 0;
        for (const auto& bucket : c.connectBuckets)
            state.connectBucketCounts.push_back(cumulative +=
                                                bucket.load(std::memory_order_relaxed));
        state.connectSumSeconds =
            static_cast<double>(c.connectNanos.load(std::memory_order_relaxed)) / 1e9;
        out.push_back(std::move(state));
    }
    return out;
}

}  // namespace splicegate
