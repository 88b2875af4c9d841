// The switching rule and the routing between the two lanes, against fake lanes: which lane a
// direction starts in, when it moves (both ways, and the splice lane's hand-back when it has no
// pipe), that --lane splice and --lane buffer never move it, and which lane a completion goes to
// (by its owner alone: the lanes' op codes may be the same).
#include <gtest/gtest.h>

#include <deque>
#include <memory>
#include <vector>

#include "datapath/LaneSwitch.h"

namespace splicegate {
namespace {

constexpr std::size_t kBufferSize = 16384;
constexpr std::size_t kLarge = kBufferSize;
constexpr std::size_t kSmall = 100;
constexpr auto kC2u = Direction::ClientToUpstream;

// Records what it was asked and answers with scripted results (Wait when none is left).
class FakeLane final : public Lane {
  public:
    explicit FakeLane(RingOwner owner) : owner_(owner) {}

    void setNow(std::chrono::steady_clock::time_point) noexcept override {}
    bool start(ConnectionIo&) noexcept override {
        ++starts;
        return startOk;
    }
    StepResult enter(ConnectionIo&, Direction d) noexcept override {
        entered.push_back(d);
        return next(enterResults);
    }
    StepResult drive(ConnectionIo&, Direction d) noexcept override {
        driven.push_back(d);
        return next(driveResults);
    }
    bool owns(RingOwner owner) const noexcept override { return owner == owner_; }
    StepResult complete(ConnectionIo&, CompletionTag tag, MoveCompletion) noexcept override {
        completed.push_back(tag.op);
        return next(completeResults);
    }
    StepResult durable(ConnectionIo&, Direction) noexcept override {
        ++durables;
        return {Next::Continue};
    }
    void release(ConnectionIo&) noexcept override { ++releases; }
    void dropCompletion(CompletionTag tag, MoveCompletion) noexcept override {
        dropped.push_back(tag.op);
    }
    void afterTurn(const ConnectionFinder&) noexcept override { ++turns; }
    void trim() noexcept override { ++trims; }

    bool startOk = true;
    int starts = 0, durables = 0, releases = 0, turns = 0, trims = 0;
    std::vector<Direction> entered, driven;
    std::vector<std::uint8_t> completed, dropped;
    std::deque<StepResult> enterResults, driveResults, completeResults;

  private:
    static StepResult next(std::deque<StepResult>& results) {
        if (results.empty()) return {Next::Wait};
        auto result = results.front();
        results.pop_front();
        return result;
    }
    RingOwner owner_;
};

// Both lanes' first op code: which lane a completion is for is its owner's business only.
constexpr std::uint8_t kBufferOp = 0;
constexpr std::uint8_t kSpliceOp = 0;

class LaneSwitchTest : public ::testing::Test {
  protected:
    void make(LaneKind mode) {
        lanes = std::make_unique<LaneSwitch>(mode, kBufferSize);
        if (mode != LaneKind::Buffer) {
            auto owned = std::make_unique<FakeLane>(RingOwner::Mover);
            splice = owned.get();
            lanes->own(LaneKind::Splice, std::move(owned));
        }
        if (mode != LaneKind::Splice) {
            auto owned = std::make_unique<FakeLane>(RingOwner::BufferLane);
            buffer = owned.get();
            lanes->own(LaneKind::Buffer, std::move(owned));
        }
        io.counters = &counters;
        ASSERT_TRUE(lanes->start(io));
    }
    // `count` reads of `bytes` in the direction's lane: whether the last asked to leave it.
    bool reads(std::size_t bytes, int count = LanePolicy::kRun) {
        bool leave = false;
        for (int i = 0; i < count; ++i) leave = lanes->recordRead(io, kC2u, bytes);
        return leave;
    }
    CompletionTag bufferTag(std::uint8_t op) const {
        return io.tag(kC2u, RingOwner::BufferLane).withOp(op);
    }
    CompletionTag spliceTag(std::uint8_t op) const {
        return io.tag(kC2u, RingOwner::Mover).withOp(op);
    }
    LaneKind laneOf() const { return io.flows[0].lane; }
    std::uint64_t switchesTo(LaneKind lane) const {
        return counters.laneSwitches[static_cast<int>(lane)].get();
    }

    RouteCounters counters;
    ConnectionIo io;
    std::unique_ptr<LaneSwitch> lanes;
    FakeLane* splice = nullptr;
    FakeLane* buffer = nullptr;
};

TEST_F(LaneSwitchTest, AutoStartsBothDirectionsInTheBufferLane) {
    make(LaneKind::Auto);
    EXPECT_EQ(buffer->starts, 1);
    EXPECT_EQ(splice->starts, 0);
    EXPECT_EQ(io.flows[0].lane, LaneKind::Buffer);
    EXPECT_EQ(io.flows[1].lane, LaneKind::Buffer);
}

TEST_F(LaneSwitchTest, AStartThatFailsIsReported) {
    lanes = std::make_unique<LaneSwitch>(LaneKind::Splice, kBufferSize);
    auto owned = std::make_unique<FakeLane>(RingOwner::Mover);
    owned->startOk = false;
    lanes->own(LaneKind::Splice, std::move(owned));
    EXPECT_FALSE(lanes->start(io));
}

TEST_F(LaneSwitchTest, AutoMovesARunOfLargeReadsToSpliceWhereTheBufferLaneLetsGo) {
    make(LaneKind::Auto);
    EXPECT_FALSE(reads(kLarge, LanePolicy::kRun - 1));
    EXPECT_TRUE(reads(kLarge, 1)) << "the run is complete";
    buffer->driveResults.push_back({Next::Switch});
    splice->enterResults.push_back({Next::Wait, Verdict::yield()});
    auto result = lanes->drive(io, kC2u);
    EXPECT_EQ(result.next, Next::Wait);
    EXPECT_EQ(result.verdict.action, Verdict::Action::Yield) << "the entered lane's result";
    EXPECT_EQ(laneOf(), LaneKind::Splice);
    EXPECT_EQ(splice->entered, std::vector<Direction>{kC2u});
    EXPECT_EQ(switchesTo(LaneKind::Splice), 1u);
    EXPECT_FALSE(lanes->leaveNow(io, kC2u)) << "the run starts again in the new lane";
}

TEST_F(LaneSwitchTest, AutoMovesARunOfSmallSpliceReadsBackToTheBufferLane) {
    make(LaneKind::Auto);
    io.flows[0].lane = LaneKind::Splice;
    EXPECT_FALSE(lanes->leaveNow(io, kC2u));
    reads(kSmall, LanePolicy::kRun - 1);
    EXPECT_FALSE(lanes->leaveNow(io, kC2u));
    reads(kSmall, 1);
    EXPECT_TRUE(lanes->leaveNow(io, kC2u));
    splice->driveResults.push_back({Next::Switch});
    EXPECT_EQ(lanes->drive(io, kC2u).next, Next::Wait);
    EXPECT_EQ(laneOf(), LaneKind::Buffer);
    EXPECT_EQ(buffer->entered, std::vector<Direction>{kC2u});
    EXPECT_EQ(switchesTo(LaneKind::Buffer), 1u);
    EXPECT_FALSE(lanes->leaveNow(io, kC2u));
}

TEST_F(LaneSwitchTest, ALargeReadBreaksTheRunOfSmallOnes) {
    make(LaneKind::Auto);
    io.flows[0].lane = LaneKind::Splice;
    reads(kSmall, LanePolicy::kRun - 1);
    reads(kLarge, 1);
    reads(kSmall, 1);
    EXPECT_FALSE(lanes->leaveNow(io, kC2u));
}

TEST_F(LaneSwitchTest, TheSpliceLaneWithoutAPipeHandsTheDirectionBack) {
    make(LaneKind::Auto);
    io.flows[0].lane = LaneKind::Splice;
    EXPECT_TRUE(lanes->canLeave(io, kC2u)) << "whatever its reads look like";
    splice->driveResults.push_back({Next::Switch});
    EXPECT_EQ(lanes->drive(io, kC2u).next, Next::Wait);
    EXPECT_EQ(laneOf(), LaneKind::Buffer);
    EXPECT_EQ(buffer->entered.size(), 1u);
}

TEST_F(LaneSwitchTest, ASpliceLaneThatCannotTakeTheDirectionGivesItBack) {
    make(LaneKind::Auto);
    buffer->driveResults.push_back({Next::Switch});
    splice->enterResults.push_back({Next::Switch});  // no memory for its half
    EXPECT_EQ(lanes->drive(io, kC2u).next, Next::Wait);
    EXPECT_EQ(laneOf(), LaneKind::Buffer);
    EXPECT_EQ(buffer->entered.size(), 1u);
    EXPECT_EQ(switchesTo(LaneKind::Splice), 1u);
    EXPECT_EQ(switchesTo(LaneKind::Buffer), 1u);
}

TEST_F(LaneSwitchTest, SpliceIsFixed) {
    make(LaneKind::Splice);
    EXPECT_EQ(splice->starts, 1);
    EXPECT_EQ(laneOf(), LaneKind::Splice);
    EXPECT_FALSE(reads(kSmall, 2 * LanePolicy::kRun));
    EXPECT_FALSE(lanes->leaveNow(io, kC2u));
    EXPECT_FALSE(lanes->canLeave(io, kC2u)) << "no pipe closes the connection";
}

TEST_F(LaneSwitchTest, BufferIsFixed) {
    make(LaneKind::Buffer);
    EXPECT_EQ(buffer->starts, 1);
    EXPECT_EQ(laneOf(), LaneKind::Buffer);
    EXPECT_FALSE(reads(kLarge, 2 * LanePolicy::kRun));
    EXPECT_FALSE(lanes->canLeave(io, kC2u));
}

TEST_F(LaneSwitchTest, ACompletionGoesToTheLaneOfItsOwnerAndDrivesTheDirection) {
    make(LaneKind::Auto);
    EXPECT_TRUE(lanes->owns(RingOwner::Mover));
    EXPECT_TRUE(lanes->owns(RingOwner::BufferLane));
    EXPECT_FALSE(lanes->owns(RingOwner::Worker));
    buffer->completeResults.push_back({Next::Continue});
    buffer->driveResults.push_back({Next::Close, Verdict::close(CloseReason::Closed, false)});
    auto result = lanes->complete(io, bufferTag(kBufferOp), MoveCompletion{10, 0});
    EXPECT_EQ(buffer->completed, std::vector<std::uint8_t>{kBufferOp});
    EXPECT_TRUE(splice->completed.empty());
    EXPECT_EQ(buffer->driven.size(), 1u);
    EXPECT_EQ(result.next, Next::Close);

    io.flows[0].lane = LaneKind::Splice;
    splice->completeResults.push_back({Next::Continue});
    lanes->complete(io, spliceTag(kSpliceOp), MoveCompletion{10, 0});
    EXPECT_EQ(splice->completed, std::vector<std::uint8_t>{kSpliceOp});
    EXPECT_EQ(splice->driven.size(), 1u);
    EXPECT_EQ(buffer->completed.size(), 1u) << "the splice lane's completion went to it alone";
}

TEST_F(LaneSwitchTest, ACompletionOfAnotherOwnerReachesNoLane) {
    make(LaneKind::Auto);
    auto workers = io.tag(kC2u).withOp(kBufferOp);
    EXPECT_EQ(lanes->complete(io, workers, MoveCompletion{10, 0}).next, Next::Wait);
    lanes->dropCompletion(workers, MoveCompletion{});
    EXPECT_TRUE(buffer->completed.empty());
    EXPECT_TRUE(splice->completed.empty());
    EXPECT_TRUE(buffer->dropped.empty());
    EXPECT_TRUE(splice->dropped.empty());
}

TEST_F(LaneSwitchTest, ALateCompletionOfTheLaneLeftDrivesNothing) {
    make(LaneKind::Auto);
    io.flows[0].lane = LaneKind::Splice;  // its recv's cancel completes after the switch
    buffer->completeResults.push_back({Next::Continue});
    EXPECT_EQ(lanes->complete(io, bufferTag(kBufferOp), MoveCompletion{-2, 0}).next, Next::Wait);
    EXPECT_TRUE(buffer->driven.empty());
    EXPECT_TRUE(splice->driven.empty());
}

TEST_F(LaneSwitchTest, DurabilityAndReleaseReachTheLanes) {
    make(LaneKind::Auto);
    lanes->durable(io, kC2u);
    EXPECT_EQ(buffer->durables, 1);
    EXPECT_EQ(buffer->driven.size(), 1u) << "durable chunks can be sent";
    lanes->dropCompletion(bufferTag(kBufferOp), MoveCompletion{});
    lanes->dropCompletion(spliceTag(kSpliceOp), MoveCompletion{});
    EXPECT_EQ(buffer->dropped, std::vector<std::uint8_t>{kBufferOp});
    EXPECT_EQ(splice->dropped, std::vector<std::uint8_t>{kSpliceOp});
    lanes->release(io);
    EXPECT_EQ(buffer->releases, 1);
    EXPECT_EQ(splice->releases, 1);
}

}  // namespace
}  // namespace splicegate
