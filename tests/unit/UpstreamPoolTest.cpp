// UpstreamPool's decisions: round robin over healthy upstreams, down after N failures in a row,
// a probe after the backoff, doubling backoff, unresolved names, re-resolution and carried state.
// Time is passed in: no test waits.
#include <gtest/gtest.h>

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
    EXPECT_EQ(pickIndex(pool, later), 0u);
    EXPECT_EQ(pickIndex(pool, later), 1u);
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

}  // namespace
}  // namespace splicegate
