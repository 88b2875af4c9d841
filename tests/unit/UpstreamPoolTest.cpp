// UpstreamPool's decisions: round robin over healthy upstreams, down after N failures in a row,
// a probe after the backoff, doubling backoff, unresolved names, re-resolution and carried state.
// Time is passed in: no test waits.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "relay/UpstreamPool.h"
#include "tests/support/Sockets.h"

namespace splicegate {
namespace {

using Clock = UpstreamPool::Clock;
using std::chrono::milliseconds;

using test::numericAddress;

UpstreamConfig upstream(const char* text) {
    return UpstreamConfig{text, {numericAddress(text)}, {}, 1, false};
}

UpstreamConfig unresolved(const char* text) {
    return UpstreamConfig{text, {}, "Name or service not known", 1, false};
}

UpstreamHealthPolicy policy() {
    UpstreamHealthPolicy p;
    p.failuresToDown = 3;
    p.downBackoffInitial = milliseconds(1000);
    p.downBackoffMax = milliseconds(4000);
    return p;
}

std::uint32_t pickIndex(UpstreamPool& pool, Clock::time_point now) {
    auto pick = pool.pick(now);
    EXPECT_TRUE(pick.has_value());
    return pick ? pick->upstream : 999;
}

TEST(UpstreamPoolTest, RoundRobinOverHealthyUpstreams) {
    auto now = Clock::now();
    UpstreamPool pool("web", {upstream("127.0.0.1:1"), upstream("127.0.0.1:2")}, policy(), nullptr,
                      now);
    EXPECT_EQ(pickIndex(pool, now), 0u);
    EXPECT_EQ(pickIndex(pool, now), 1u);
    EXPECT_EQ(pickIndex(pool, now), 0u);
    auto pick = pool.pick(now);
    ASSERT_TRUE(pick);
    EXPECT_EQ(pick->address, numericAddress("127.0.0.1:2"));
}

TEST(UpstreamPoolTest, FailingUpstreamIsSkippedThenProbedAndComesBack) {
    auto now = Clock::now();
    UpstreamPool pool("web", {upstream("127.0.0.1:1"), upstream("127.0.0.1:2")}, policy(), nullptr,
                      now);
    for (int i = 0; i < 2; ++i) pool.report(0, false, now);
    EXPECT_TRUE(pool.snapshot()[0].up);  // two failures: not yet
    pool.report(0, false, now);
    auto states = pool.snapshot();
    EXPECT_FALSE(states[0].up);
    EXPECT_EQ(states[0].connectFailures, 3u);
    EXPECT_TRUE(states[1].up);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(pickIndex(pool, now + milliseconds(500)), 1u);
    // After the backoff one connection probes it; others keep skipping it meanwhile.
    auto later = now + milliseconds(1000);
    std::vector<std::uint32_t> picks{pickIndex(pool, later), pickIndex(pool, later),
                                     pickIndex(pool, later)};
    EXPECT_EQ(std::count(picks.begin(), picks.end(), 0u), 1);
    pool.report(0, true, later);
    EXPECT_TRUE(pool.snapshot()[0].up);
    std::vector<std::uint32_t> next{pickIndex(pool, later), pickIndex(pool, later)};
    EXPECT_EQ(std::count(next.begin(), next.end(), 0u), 1);  // in the rotation again
}

TEST(UpstreamPoolTest, FailedProbesDoubleTheBackoffUpToTheCap) {
    auto now = Clock::now();
    UpstreamPool pool("web", {upstream("127.0.0.1:1"), upstream("127.0.0.1:2")}, policy(), nullptr,
                      now);
    for (int i = 0; i < 3; ++i) pool.report(0, false, now);  // down, retry in 1 s
    auto t = now;
    for (auto backoff : {1000, 2000, 4000, 4000}) {
        EXPECT_EQ(pickIndex(pool, t + milliseconds(backoff - 1)), 1u) << backoff;
        t += milliseconds(backoff);
        ASSERT_EQ(pickIndex(pool, t), 0u) << backoff;  // the probe
        pool.report(0, false, t);
    }
}

TEST(UpstreamPoolTest, EveryUpstreamDownStillTriesOne) {
    auto now = Clock::now();
    UpstreamPool pool("web", {upstream("127.0.0.1:1")}, policy(), nullptr, now);
    for (int i = 0; i < 3; ++i) pool.report(0, false, now);
    EXPECT_FALSE(pool.snapshot()[0].up);
    EXPECT_EQ(pickIndex(pool, now), 0u);
}

TEST(UpstreamPoolTest, UnresolvedNameIsDownUntilResolved) {
    auto now = Clock::now();
    UpstreamPool pool("web", {unresolved("backend.invalid:80")}, policy(), nullptr, now);
    EXPECT_FALSE(pool.pick(now).has_value());
    EXPECT_FALSE(pool.snapshot()[0].up);
    EXPECT_EQ(pool.addressCount(), 0u);
    auto due = pool.dueResolutions(now);
    ASSERT_EQ(due.size(), 1u);
    EXPECT_EQ(due[0].text, "backend.invalid:80");
    EXPECT_TRUE(pool.dueResolutions(now).empty());  // already being resolved
    pool.setResolved(0, {}, "no such name", now);
    EXPECT_TRUE(pool.dueResolutions(now + milliseconds(999)).empty());
    ASSERT_EQ(pool.dueResolutions(now + milliseconds(1000)).size(), 1u);
    pool.setResolved(0, {}, "no such name", now + milliseconds(1000));  // backoff now 2 s
    EXPECT_TRUE(pool.dueResolutions(now + milliseconds(2999)).empty());
    ASSERT_EQ(pool.dueResolutions(now + milliseconds(3000)).size(), 1u);
    pool.setResolved(0, {numericAddress("127.0.0.1:80")}, "", now + milliseconds(3000));
    EXPECT_TRUE(pool.snapshot()[0].up);
    auto pick = pool.pick(now);
    ASSERT_TRUE(pick);
    EXPECT_EQ(pick->address, numericAddress("127.0.0.1:80"));
}

TEST(UpstreamPoolTest, NamesAreReResolvedAndKeepAddressesWhenDnsFails) {
    auto now = Clock::now();
    UpstreamHealthPolicy p = policy();
    p.reresolveInterval = milliseconds(30000);
    UpstreamPool pool("web", {UpstreamConfig{"backend:80", {numericAddress("127.0.0.1:80")}, {}, 1, false}}, p,
                      nullptr, now);
    EXPECT_TRUE(pool.dueResolutions(now + milliseconds(29999)).empty());
    ASSERT_EQ(pool.dueResolutions(now + milliseconds(30000)).size(), 1u);
    pool.setResolved(0, {}, "timeout", now + milliseconds(30000));
    EXPECT_TRUE(pool.snapshot()[0].up);  // a DNS outage is not an upstream outage
    ASSERT_EQ(pool.dueResolutions(now + milliseconds(31000)).size(), 1u);
    pool.setResolved(0, {numericAddress("127.0.0.2:80")}, "", now + milliseconds(31000));
    EXPECT_EQ(pool.pick(now)->address, numericAddress("127.0.0.2:80"));
}

TEST(UpstreamPoolTest, NumericUpstreamsAreNeverResolved) {
    auto now = Clock::now();
    UpstreamPool pool("web", {upstream("127.0.0.1:1")}, policy(), nullptr, now);
    EXPECT_TRUE(pool.dueResolutions(now + std::chrono::hours(1)).empty());
}

TEST(UpstreamPoolTest, ActiveChecksAreDueAtTheirInterval) {
    auto now = Clock::now();
    UpstreamHealthPolicy p = policy();
    EXPECT_TRUE(UpstreamPool("web", {upstream("127.0.0.1:1")}, p, nullptr, now)
                    .dueChecks(now + std::chrono::hours(1))
                    .empty());
    p.activeCheckInterval = milliseconds(2000);
    UpstreamPool pool("web", {upstream("127.0.0.1:1")}, p, nullptr, now);
    ASSERT_EQ(pool.dueChecks(now).size(), 1u);
    EXPECT_TRUE(pool.dueChecks(now + milliseconds(1999)).empty());
    EXPECT_EQ(pool.dueChecks(now + milliseconds(2000)).size(), 1u);
}

TEST(UpstreamPoolTest, AReplacementPoolKeepsTheStateOfUpstreamsItKeeps) {
    auto now = Clock::now();
    UpstreamPool old("web", {upstream("127.0.0.1:1"), upstream("127.0.0.1:2")}, policy(), nullptr,
                     now);
    for (int i = 0; i < 3; ++i) old.report(1, false, now);
    UpstreamPool next("web", {upstream("127.0.0.1:2"), upstream("127.0.0.1:3")}, policy(), &old,
                      now);
    auto states = next.snapshot();
    ASSERT_EQ(states.size(), 2u);
    EXPECT_EQ(states[0].upstream, "127.0.0.1:2");
    EXPECT_FALSE(states[0].up);
    EXPECT_EQ(states[0].connectFailures, 3u);
    EXPECT_TRUE(states[1].up);
    EXPECT_EQ(states[1].connectFailures, 0u);
}

UpstreamConfig weighted(const char* text, unsigned weight, bool backup = false) {
    auto config = upstream(text);
    config.weight = weight;
    config.backup = backup;
    return config;
}

std::vector<std::uint32_t> picks(UpstreamPool& pool, int count, Clock::time_point now) {
    std::vector<std::uint32_t> out;
    for (int i = 0; i < count; ++i) out.push_back(pickIndex(pool, now));
    return out;
}

// nginx's smooth weighted round robin: 5:1:1 gives a a b a c a a, not a a a a a b c.
TEST(UpstreamPoolTest, SmoothWeightedRoundRobinSpreadsTheHeavyOne) {
    auto now = Clock::now();
    UpstreamPool pool("web",
                      {weighted("127.0.0.1:1", 5), weighted("127.0.0.1:2", 1),
                       weighted("127.0.0.1:3", 1)},
                      policy(), nullptr, now);
    EXPECT_EQ(picks(pool, 7, now), (std::vector<std::uint32_t>{0, 0, 1, 0, 2, 0, 0}));
    EXPECT_EQ(picks(pool, 7, now), (std::vector<std::uint32_t>{0, 0, 1, 0, 2, 0, 0}));
}

TEST(UpstreamPoolTest, WeightsThreeToOneGiveExactSharesOverWholeCycles) {
    auto now = Clock::now();
    UpstreamPool pool("web", {weighted("127.0.0.1:1", 3), weighted("127.0.0.1:2", 1)}, policy(),
                      nullptr, now);
    std::map<std::uint32_t, int> counts;
    for (auto index : picks(pool, 400, now)) ++counts[index];
    EXPECT_EQ(counts[0], 300);
    EXPECT_EQ(counts[1], 100);
}

TEST(UpstreamPoolTest, BackupsOnlyWhileNoPrimaryIsUp) {
    auto now = Clock::now();
    UpstreamPool pool("web",
                      {weighted("127.0.0.1:1", 1), weighted("127.0.0.1:2", 1),
                       weighted("127.0.0.1:9", 1, true)},
                      policy(), nullptr, now);
    for (auto index : picks(pool, 10, now)) EXPECT_NE(index, 2u);
    for (int i = 0; i < 3; ++i) pool.report(0, false, now);
    for (auto index : picks(pool, 10, now)) EXPECT_EQ(index, 1u);  // one primary left
    for (int i = 0; i < 3; ++i) pool.report(1, false, now);
    for (auto index : picks(pool, 10, now)) EXPECT_EQ(index, 2u);  // none: the backup
    pool.report(0, true, now);                                      // a primary is back
    for (auto index : picks(pool, 10, now)) EXPECT_EQ(index, 0u);
}

TEST(UpstreamPoolTest, DisabledUpstreamGetsNothingAndSurvivesAReplacement) {
    auto now = Clock::now();
    UpstreamPool pool("web", {upstream("127.0.0.1:1"), upstream("127.0.0.1:2")}, policy(), nullptr,
                      now);
    EXPECT_FALSE(pool.setDisabled("127.0.0.1:7", true));
    ASSERT_TRUE(pool.setDisabled("127.0.0.1:1", true));
    for (auto index : picks(pool, 6, now)) EXPECT_EQ(index, 1u);
    EXPECT_STREQ(pool.snapshot()[0].state(), "disabled");
    pool.connectionOpened(1, std::chrono::microseconds(700));
    UpstreamPool next("web", {weighted("127.0.0.1:1", 2), upstream("127.0.0.1:2")}, policy(), &pool,
                      now);
    EXPECT_TRUE(next.snapshot()[0].disabled);
    EXPECT_EQ(next.snapshot()[0].weight, 2u);
    EXPECT_EQ(next.snapshot()[1].active, 1u);
    pool.connectionClosed(1, 100, 200);  // a connection opened under the old pool closes
    auto carried = next.snapshot()[1];
    EXPECT_EQ(carried.active, 0u);
    EXPECT_EQ(carried.bytesC2u, 100u);
    EXPECT_EQ(carried.bytesU2c, 200u);
    // 0.7 ms: in the 1 ms bucket, not the 0.5 ms one (cumulative counts).
    EXPECT_EQ(carried.connectBucketCounts.at(0), 0u);
    EXPECT_EQ(carried.connectBucketCounts.at(1), 1u);
    EXPECT_EQ(carried.connectBucketCounts.back(), 1u);
    ASSERT_TRUE(next.setDisabled("127.0.0.1:1", false));
    std::map<std::uint32_t, int> counts;
    for (auto index : picks(next, 30, now)) ++counts[index];
    EXPECT_EQ(counts[0], 20);
    // Every upstream disabled: nothing to pick, not even in panic mode.
    next.setDisabled("127.0.0.1:1", true);
    next.setDisabled("127.0.0.1:2", true);
    EXPECT_FALSE(next.pick(now).has_value());
}

TEST(UpstreamPoolTest, HealthChecksAreCountedApartFromConnectFailures) {
    auto now = Clock::now();
    UpstreamPool pool("web", {upstream("127.0.0.1:1")}, policy(), nullptr, now);
    for (int i = 0; i < 3; ++i) pool.reportCheck(0, false, now);
    auto state = pool.snapshot()[0];
    EXPECT_FALSE(state.up);
    EXPECT_EQ(state.healthCheckFailures, 3u);
    EXPECT_EQ(state.connectFailures, 0u);
    EXPECT_EQ(state.wentDown, 1u);
    pool.report(0, true, now);
    EXPECT_EQ(pool.snapshot()[0].cameUp, 1u);
}

}  // namespace
}  // namespace splicegate
