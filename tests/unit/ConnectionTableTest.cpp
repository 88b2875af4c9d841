// A worker's connection table: slots, generations, lookups by completion tag, deadlines
// (relay/ConnectionTable.h), and the timeouts that set those deadlines
// (relay/ConnectionTimeouts.h).
#include <gtest/gtest.h>

#include <chrono>

#include "relay/ConnectionTable.h"
#include "relay/ConnectionTimeouts.h"

namespace splicegate {
namespace {

using namespace std::chrono_literals;
using Clock = ConnectionTable::Clock;

const Clock::time_point kStart = Clock::time_point() + 1000h;

TEST(ConnectionTable, AReusedSlotMovesItsGenerationOn) {
    ConnectionTable table(10ms, kStart);
    auto& first = table.allocate(1);
    const auto slot = first.io.slot;
    const auto generation = first.io.generation;
    EXPECT_EQ(table.live(), 1u);
    table.release(first);
    EXPECT_EQ(table.live(), 0u);
    auto& second = table.allocate(2);
    EXPECT_EQ(second.io.slot, slot) << "a freed slot is used again";
    EXPECT_EQ(second.io.generation, static_cast<std::uint16_t>(generation + 1));
    EXPECT_EQ(second.id(), 2u);
}

TEST(ConnectionTable, AStaleTagFindsNothing) {
    ConnectionTable table(10ms, kStart);
    auto& first = table.allocate(1);
    const auto stale = first.io.tag(Direction::ClientToUpstream);
    EXPECT_EQ(table.find(stale), &first);
    table.release(first);
    EXPECT_EQ(table.find(stale), nullptr) << "released";
    auto& second = table.allocate(2);
    EXPECT_EQ(table.find(stale), nullptr) << "the slot holds the next generation";
    EXPECT_EQ(table.find(second.io.tag(Direction::UpstreamToClient)), &second);
    EXPECT_EQ(table.find(second.io.slot + 1, second.io.generation), nullptr) << "no such slot";
}

TEST(ConnectionTable, FindsByIdAndVisitsOnlyLiveConnections) {
    ConnectionTable table(10ms, kStart);
    auto& a = table.allocate(10);
    auto& b = table.allocate(11);
    table.allocate(12);
    table.release(b);
    EXPECT_EQ(table.findById(10), &a);
    EXPECT_EQ(table.findById(11), nullptr);
    EXPECT_EQ(table.findById(0), nullptr);
    std::uint64_t sum = 0;
    table.forEach([&](Connection& c) { sum += c.id(); });
    EXPECT_EQ(sum, 22u);
}

TEST(ConnectionTable, ReleasingAConnectionDropsItsDeadline) {
    ConnectionTable table(10ms, kStart);
    auto& a = table.allocate(1);
    auto& b = table.allocate(2);
    table.setDeadline(a, kStart + 50ms);
    table.setDeadline(b, kStart + 30ms);
    table.release(a);
    auto& c = table.allocate(3);  // a's slot, no deadline of its own
    EXPECT_FALSE(table.hasDeadline(c));
    auto due = table.due(kStart + 100ms);
    ASSERT_EQ(due.size(), 1u);
    EXPECT_EQ(due[0], &b);
    EXPECT_FALSE(table.hasDeadline(b)) << "a due deadline is cleared";
}

Connection& relaying(ConnectionTable& table, std::uint64_t id, Clock::time_point lastActivity) {
    auto& c = table.allocate(id);
    c.state = ConnectionState::Relaying;
    c.io.lastActivity = lastActivity;
    return c;
}

TEST(ConnectionTimeouts, IdleIsMeasuredFromTheLastActivity) {
    ConnectionTable table(10ms, kStart);
    ConnectionTimeouts timeouts(1000, 0);
    auto& c = relaying(table, 1, kStart);
    EXPECT_EQ(timeouts.nextDeadline(c), kStart + 1000ms);
    c.io.lastActivity = kStart + 600ms;  // traffic moved it; the deadline in the wheel did not
    auto verdict = timeouts.check(c, kStart + 1000ms);
    EXPECT_FALSE(verdict.close);
    ASSERT_TRUE(verdict.rearm);
    EXPECT_EQ(verdict.next, kStart + 1600ms);
    verdict = timeouts.check(c, kStart + 1600ms);
    EXPECT_TRUE(verdict.close);
    EXPECT_EQ(verdict.reason, CloseReason::IdleTimeout);
    EXPECT_FALSE(verdict.resetPeers);
}

TEST(ConnectionTimeouts, NoTimeoutNoDeadline) {
    ConnectionTable table(10ms, kStart);
    ConnectionTimeouts timeouts(0, 0);
    EXPECT_FALSE(timeouts.any());
    auto& c = relaying(table, 1, kStart);
    EXPECT_EQ(timeouts.nextDeadline(c), Clock::time_point::max());
}

TEST(ConnectionTimeouts, TheHalfClosedDeadlineComesFirstAndTheIdleOneStays) {
    ConnectionTable table(10ms, kStart);
    ConnectionTimeouts timeouts(5000, 200);
    auto& c = relaying(table, 1, kStart);
    EXPECT_EQ(timeouts.nextDeadline(c), kStart + 200ms);
    c.stallCheckAfter = kStart + 400ms;  // looked at once already
    EXPECT_EQ(timeouts.nextDeadline(c), kStart + 400ms);
    c.stallCheckAfter = kStart + 6000ms;
    EXPECT_EQ(timeouts.nextDeadline(c), kStart + 5000ms);
}

TEST(ConnectionTable, ADeadlineArmedFromTheTimeoutsFiresThroughTheTable) {
    ConnectionTable table(10ms, kStart);
    ConnectionTimeouts timeouts(300, 0);
    auto& a = relaying(table, 1, kStart);
    auto& b = relaying(table, 2, kStart + 100ms);
    table.setDeadline(a, timeouts.nextDeadline(a));
    table.setDeadline(b, timeouts.nextDeadline(b));
    EXPECT_TRUE(table.due(kStart + 299ms).empty());
    auto due = table.due(kStart + 350ms);
    ASSERT_EQ(due.size(), 1u);
    EXPECT_EQ(due[0], &a);
    due = table.due(kStart + 400ms);
    ASSERT_EQ(due.size(), 1u);
    EXPECT_EQ(due[0], &b);
}

}  // namespace
}  // namespace splicegate
