// The hashed wheel of deadlines behind the idle and half-closed timeouts (relay/TimerWheel.h).
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "relay/TimerWheel.h"

namespace splicegate {
namespace {

using namespace std::chrono_literals;
using Clock = TimerWheel::Clock;

const Clock::time_point kStart = Clock::time_point() + 1000h;

std::vector<std::uint32_t> expireAt(TimerWheel& wheel, Clock::duration sinceStart) {
    std::vector<std::uint32_t> due;
    wheel.expire(kStart + sinceStart, due);
    return due;
}

TEST(TimerWheel, NothingFiresBeforeItsDeadline) {
    TimerWheel wheel(10ms, 64, kStart);
    wheel.arm(7, kStart + 105ms);
    EXPECT_TRUE(expireAt(wheel, 100ms).empty());
    EXPECT_TRUE(expireAt(wheel, 104ms).empty()) << "same tick as the deadline, but before it";
    EXPECT_EQ(expireAt(wheel, 105ms), std::vector<std::uint32_t>{7});
    EXPECT_FALSE(wheel.armed(7));
    EXPECT_EQ(wheel.size(), 0u);
    EXPECT_TRUE(expireAt(wheel, 500ms).empty()) << "an expired entry fires once";
}

TEST(TimerWheel, ReArmingMovesTheDeadline) {
    TimerWheel wheel(10ms, 64, kStart);
    wheel.arm(1, kStart + 50ms);
    wheel.arm(1, kStart + 300ms);
    EXPECT_EQ(wheel.size(), 1u);
    EXPECT_TRUE(expireAt(wheel, 100ms).empty());
    wheel.arm(1, kStart + 120ms);  // earlier again
    EXPECT_EQ(expireAt(wheel, 130ms), std::vector<std::uint32_t>{1});
}

TEST(TimerWheel, ACancelledEntryNeverFires) {
    TimerWheel wheel(10ms, 64, kStart);
    wheel.arm(1, kStart + 50ms);
    wheel.arm(2, kStart + 50ms);
    wheel.arm(3, kStart + 50ms);
    wheel.cancel(2);
    wheel.cancel(2);   // twice is harmless
    wheel.cancel(99);  // never armed
    EXPECT_FALSE(wheel.armed(2));
    EXPECT_EQ(wheel.size(), 2u);
    EXPECT_EQ(expireAt(wheel, 60ms), (std::vector<std::uint32_t>{1, 3}));
}

TEST(TimerWheel, ExpiresEarliestDeadlineFirst) {
    TimerWheel wheel(10ms, 64, kStart);
    wheel.arm(4, kStart + 95ms);
    wheel.arm(2, kStart + 31ms);
    wheel.arm(9, kStart + 12ms);
    wheel.arm(5, kStart + 31ms);
    wheel.arm(1, kStart + 400ms);
    EXPECT_EQ(expireAt(wheel, 100ms), (std::vector<std::uint32_t>{9, 2, 5, 4}));
    EXPECT_TRUE(wheel.armed(1));
}

TEST(TimerWheel, WrapsAroundTheBuckets) {
    // 8 buckets of 10 ms: one revolution is 80 ms; deadlines in the third revolution reuse the
    // buckets of the first.
    TimerWheel wheel(10ms, 8, kStart);
    std::vector<std::uint32_t> fired;
    for (std::uint32_t round = 0; round < 5; ++round) {
        wheel.arm(round, kStart + (round + 1) * 45ms);
        auto due = expireAt(wheel, (round + 1) * 45ms);
        fired.insert(fired.end(), due.begin(), due.end());
    }
    EXPECT_EQ(fired, (std::vector<std::uint32_t>{0, 1, 2, 3, 4}));
}

TEST(TimerWheel, ADeadlineBeyondOneRevolutionWaitsForItsTurn) {
    // One revolution is 80 ms; the deadline is 5.3 revolutions away and shares its bucket with
    // the ticks of every revolution before it.
    TimerWheel wheel(10ms, 8, kStart);
    wheel.arm(3, kStart + 425ms);
    wheel.arm(4, kStart + 25ms);
    for (auto t = 0ms; t < 425ms; t += 5ms) {
        auto due = expireAt(wheel, t);
        if (t < 25ms) {
            EXPECT_TRUE(due.empty()) << t.count();
        } else if (t == 25ms) {
            EXPECT_EQ(due, std::vector<std::uint32_t>{4});
        } else {
            EXPECT_TRUE(due.empty()) << t.count();
        }
    }
    EXPECT_TRUE(wheel.armed(3));
    EXPECT_EQ(expireAt(wheel, 425ms), std::vector<std::uint32_t>{3});
}

TEST(TimerWheel, APauseLongerThanARevolutionFindsEverythingDue) {
    TimerWheel wheel(10ms, 8, kStart);
    for (std::uint32_t id = 0; id < 20; ++id) wheel.arm(id, kStart + (id + 1) * 13ms);
    auto due = expireAt(wheel, 200ms);  // 2.5 revolutions in one step: ids 0..14 are due
    ASSERT_EQ(due.size(), 15u);
    for (std::uint32_t id = 0; id < 15; ++id) EXPECT_EQ(due[id], id);
    EXPECT_EQ(wheel.size(), 5u);
    EXPECT_EQ(expireAt(wheel, 1000ms).size(), 5u);
}

TEST(TimerWheel, APastDeadlineFiresAtTheNextExpiry) {
    TimerWheel wheel(10ms, 8, kStart);
    EXPECT_TRUE(expireAt(wheel, 500ms).empty());
    wheel.arm(6, kStart + 20ms);  // long past
    EXPECT_EQ(expireAt(wheel, 500ms), std::vector<std::uint32_t>{6});
}

TEST(TimerWheel, RefusesAZeroTick) {
    EXPECT_THROW(TimerWheel(Clock::duration::zero(), 8, kStart), std::invalid_argument);
    EXPECT_THROW(TimerWheel(10ms, 0, kStart), std::invalid_argument);
}

}  // namespace
}  // namespace splicegate
