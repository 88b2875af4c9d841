// The flow driver and the chain's result gathering, without a kernel: a scripted mover submits
// nothing, the test delivers the chain's completions in any order (as io_uring may), and checks
// what the driver makes of them — the fail-closed rules of the audit chain; and that without a
// pipe the splice lane hands a direction to the buffer lane (--lane auto) or closes it.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <deque>
#include <memory>
#include <vector>

#include "datapath/FlowDriver.h"
#include "datapath/LaneSwitch.h"
#include "datapath/MoverOps.h"

namespace splicegate {
namespace {

constexpr std::size_t kPipeSize = 65536;

// Records what the driver started and answers with scripted reports; a report left empty makes
// the step pending the way the chain mover's is (its completions are gathered by stage).
class ScriptedMover final : public Mover {
  public:
    const char* name() const noexcept override { return "scripted"; }
    std::size_t drainedBelow() const noexcept override { return SIZE_MAX; }
    MoveReport start(const MoveEnds&, const MovePlan& plan, MoveInFlight& state) noexcept override {
        started.push_back(plan);
        if (!replies.empty()) {
            auto report = replies.front();
            replies.pop_front();
            return report;
        }
        state.begin();
        state.expect(plan.first);
        if (plan.thenAuditWrite) state.expect(MoveStage::AuditWrite);
        if (plan.thenForward) state.expect(MoveStage::Forward);
        return MoveReport::inFlight();
    }
    MoveReport complete(CompletionTag tag, MoveCompletion completion,
                        MoveInFlight& state) noexcept override {
        return moverops::gather(tag, completion, state);
    }

    std::vector<MovePlan> started;
    std::deque<MoveReport> replies;
};

// A log that keeps what it was told.
class RecordingLog final : public AuditLog {
  public:
    int reserve(std::uint32_t length, AuditSlot& out) noexcept override {
        if (reserveError != 0) return reserveError;
        out.destination.fd = 1000;
        out.destination.offset = next;
        out.length = std::min(length, maxSlot);
        length = out.length;
        out.owner = std::make_shared<int>(0);
        next += length;
        ++reserved;
        return 0;
    }
    int recordChunk(AuditSlot& slot, std::uint64_t, std::uint8_t, std::uint32_t written,
                    bool) noexcept override {
        chunks.push_back(written);
        slot = AuditSlot{};
        return 0;
    }
    void abandon(AuditSlot& slot) noexcept override {
        if (slot.reserved()) ++abandoned;
        slot = AuditSlot{};
    }
    int recordOpen(std::uint64_t, std::string_view, std::string_view, std::string_view,
                   std::string_view, std::string_view) noexcept override {
        return 0;
    }
    int recordClose(std::uint64_t, std::uint64_t, std::uint64_t,
                    std::string_view) noexcept override {
        return 0;
    }
    int startSync(CompletionTag) noexcept override { return 0; }
    std::optional<int> syncCompleted(CompletionTag, int result) noexcept override { return result; }
    bool lastSyncFailedInWrite() const noexcept override { return false; }
    void syncNow() noexcept override {}
    bool dirty() const noexcept override { return false; }
    bool syncInFlight() const noexcept override { return false; }
    std::uint64_t nextSyncSequence() const noexcept override { return 1; }
    std::uint64_t durableSequence() const noexcept override { return 0; }
    int flush() noexcept override { return 0; }
    int rotate() noexcept override { return 0; }
    std::size_t room() const noexcept override { return roomBytes; }
    std::vector<AuditLoss> takeLosses() noexcept override { return {}; }

    int reserveError = 0;
    std::uint32_t maxSlot = UINT32_MAX;  // a writer with buffers of its own may give less
    std::size_t roomBytes = SIZE_MAX;
    std::uint64_t next = 0;
    int reserved = 0;
    int abandoned = 0;
    std::vector<std::uint32_t> chunks;
};

// The splice lane as the worker drives it under --lane splice.
class SpliceOnly {
  public:
    SpliceOnly(Mover& mover, PipePool& pool, AuditTap* tap, WorkerStats& stats)
        : lanes_(LaneKind::Splice, 16384) {
        lanes_.own(LaneKind::Splice, std::make_unique<FlowDriver>(mover, pool, tap, stats, lanes_));
    }
    Verdict drive(ConnectionIo& io, Direction d) { return lanes_.drive(io, d).verdict; }
    Verdict complete(ConnectionIo& io, CompletionTag tag, MoveCompletion completion) {
        return lanes_.complete(io, tag, completion).verdict;
    }
    void release(ConnectionIo& io) { lanes_.release(io); }

  private:
    LaneSwitch lanes_;
};

struct ChainCase {
    const char* name;
    bool failClosed;
    std::array<int, 3> results;  // tee, write, forward
};

class FlowDriverTest : public ::testing::Test {
  protected:
    void makeDriver(bool failClosed, bool strict = false) {
        auto owned = std::make_unique<RecordingLog>();
        log = owned.get();
        AuditPolicy policy;
        policy.failClosed = failClosed;
        policy.strict = strict;
        tap = std::make_unique<AuditTap>(std::move(owned), policy, stats);
        driver = std::make_unique<SpliceOnly>(mover, pool, tap.get(), stats);
        io.id = 7;
        io.slot = 3;
        io.generation = 9;
        io.relaying = true;
        io.counters = &counters;
        ASSERT_EQ(tap->open(io, "route", "client", "upstream"), AuditAction::Proceed);
    }
    CompletionTag tagOf(MoveStage stage) const {
        return io.tag(Direction::ClientToUpstream, RingOwner::Mover).withOp(stage);
    }
    // A fill of `bytes` answered at once, then the audit chain the driver starts behind it.
    Verdict fillAndStartChain(std::size_t bytes) {
        MoveReport fill;
        fill.add(MoveStage::Fill, static_cast<int>(bytes));
        mover.replies.push_back(fill);
        return driver->drive(io, Direction::ClientToUpstream);
    }
    Verdict deliver(MoveStage stage, int result) {
        return driver->complete(io, tagOf(stage), MoveCompletion{result, 0});
    }
    SpliceFlow& flow() { return io.flow(Direction::ClientToUpstream); }

    PipeBudget budget{16 * kPipeSize};
    PipePool pool{budget, kPipeSize, 4};
    WorkerStats stats;
    RouteCounters counters;
    ScriptedMover mover;
    RecordingLog* log = nullptr;
    std::unique_ptr<AuditTap> tap;
    std::unique_ptr<SpliceOnly> driver;
    ConnectionIo io;
};

TEST_F(FlowDriverTest, StartsTheAuditChainBehindAFill) {
    makeDriver(true);
    auto verdict = fillAndStartChain(1000);
    EXPECT_EQ(verdict.action, Verdict::Action::Wait);
    ASSERT_EQ(mover.started.size(), 2u);
    const auto& chain = mover.started[1];
    EXPECT_EQ(chain.first, MoveStage::Tee);
    EXPECT_EQ(chain.length, 1000u);
    EXPECT_TRUE(chain.thenAuditWrite);
    EXPECT_TRUE(chain.thenForward);
    EXPECT_EQ(chain.audit.fd, 1000) << "the audit write goes to the reserved destination";
    EXPECT_EQ(chain.flow.slot, 3u);
    EXPECT_EQ(chain.flow.generation, 9u);
    EXPECT_EQ(chain.flow.owner, RingOwner::Mover) << "the splice lane names itself the owner";
    EXPECT_EQ(chain.flow.direction, static_cast<std::uint8_t>(Direction::ClientToUpstream));
    EXPECT_TRUE(io.at(Direction::ClientToUpstream).move().busy());
}

TEST_F(FlowDriverTest, StrictChainsStopBeforeTheForward) {
    makeDriver(true, true);
    fillAndStartChain(1000);
    ASSERT_EQ(mover.started.size(), 2u);
    EXPECT_FALSE(mover.started[1].thenForward);
}

TEST_F(FlowDriverTest, FullLogBufferMakesTheFlowWaitForRoomNotFail) {
    makeDriver(true);
    log->reserveError = -ENOBUFS;
    log->roomBytes = 0;
    auto verdict = fillAndStartChain(1000);
    EXPECT_EQ(verdict.action, Verdict::Action::Wait) << "back-pressure, not an audit failure";
    EXPECT_EQ(mover.started.size(), 1u) << "no chain without log space";
    EXPECT_EQ(stats.auditWriteErrors.get(), 0u);

    // A completion that frees no room resumes nobody; one that does resumes the flow.
    auto none = tap->complete(CompletionTag::of(RingOwner::AuditTap, AuditTapOp::GroupCommit), 0);
    EXPECT_TRUE(!none || none->roomFreed.empty());
    log->reserveError = 0;
    log->roomBytes = 1 << 20;
    auto outcome =
        tap->complete(CompletionTag::of(RingOwner::AuditTap, AuditTapOp::GroupCommit), 0);
    ASSERT_TRUE(outcome);
    ASSERT_EQ(outcome->roomFreed.size(), 1u);
    EXPECT_EQ(outcome->roomFreed[0].slot, 3u);
    driver->drive(io, Direction::ClientToUpstream);
    ASSERT_EQ(mover.started.size(), 2u);
    EXPECT_EQ(mover.started[1].first, MoveStage::Tee);
}

TEST_F(FlowDriverTest, ShorterLogSpaceShortensTheChain) {
    makeDriver(true);
    log->maxSlot = 300;
    fillAndStartChain(1000);
    ASSERT_EQ(mover.started.size(), 2u);
    EXPECT_EQ(mover.started[1].length, 300u) << "tee, write and forward only what the log took";
}

// Every order of the three completions gives the same outcome: results are applied in chain
// order once the last one is in.
class ChainOrderTest : public FlowDriverTest, public ::testing::WithParamInterface<ChainCase> {};

TEST_P(ChainOrderTest, SameOutcomeInEveryCompletionOrder) {
    const auto& param = GetParam();
    std::array<MoveStage, 3> order{MoveStage::Tee, MoveStage::AuditWrite, MoveStage::Forward};
    std::array<int, 3> results = param.results;
    std::sort(order.begin(), order.end());
    do {
        SCOPED_TRACE(std::string(toString(order[0])) + ", " + toString(order[1]) + ", " +
                     toString(order[2]));
        if (driver) driver->release(io);
        io = ConnectionIo{};
        mover.started.clear();
        makeDriver(param.failClosed);
        fillAndStartChain(1000);
        ASSERT_EQ(mover.started.size(), 2u);
        Verdict verdict;
        for (std::size_t i = 0; i < order.size(); ++i) {
            int result = results[static_cast<std::size_t>(order[i]) - 1];
            // The step is reported only by its last completion.
            verdict = deliver(order[i], result);
            if (i + 1 < order.size()) {
                EXPECT_EQ(verdict.action, Verdict::Action::Wait);
                EXPECT_EQ(mover.started.size(), 2u) << "nothing started before the chain ends";
            }
        }
        int tee = results[0], write = results[1], forward = results[2];
        bool auditFailed = tee < 0 && tee != -ECANCELED && tee != -EAGAIN;
        auditFailed = auditFailed || (tee == 1000 && write != -ECANCELED && write <= 0);
        if (auditFailed && param.failClosed) {
            EXPECT_EQ(verdict.action, Verdict::Action::Close);
            EXPECT_EQ(verdict.reason, CloseReason::AuditError);
            EXPECT_TRUE(verdict.resetPeers);
        } else {
            EXPECT_NE(verdict.action, Verdict::Action::Close);
        }
        std::uint64_t forwarded = forward > 0 ? static_cast<std::uint64_t>(forward) : 0;
        EXPECT_EQ(counters.bytesC2u.get(), forwarded);
        EXPECT_EQ(flow().bytesForwarded(), forwarded);
        if (write > 0) {
            EXPECT_EQ(log->chunks, std::vector<std::uint32_t>{static_cast<std::uint32_t>(write)});
        } else {
            EXPECT_TRUE(log->chunks.empty());
            EXPECT_EQ(log->abandoned, 1) << "the reservation of a write that failed goes back";
        }
        if (auditFailed && !param.failClosed) {
            EXPECT_EQ(stats.auditLostBytes.get(), 1000u - (write > 0 ? write : 0));
        }
        stats.auditLostBytes.set(0);
        counters.bytesC2u.set(0);
    } while (std::next_permutation(order.begin(), order.end()));
}

INSTANTIATE_TEST_SUITE_P(
    Chains, ChainOrderTest,
    ::testing::Values(ChainCase{"WholeChain", true, {1000, 1000, 1000}},
                      ChainCase{"ShortForward", true, {1000, 1000, 400}},
                      ChainCase{"WriteEioFailClosed", true, {1000, -EIO, -ECANCELED}},
                      ChainCase{"WriteEioFailOpen", false, {1000, -EIO, -ECANCELED}},
                      ChainCase{"WriteFullFailClosed", true, {1000, 0, -ECANCELED}},
                      ChainCase{"ShortWrite", true, {1000, 300, -ECANCELED}},
                      ChainCase{"TeeEioFailClosed", true, {-EIO, -ECANCELED, -ECANCELED}},
                      ChainCase{"ShortTee", true, {600, -ECANCELED, -ECANCELED}},
                      ChainCase{"TeeWouldBlock", true, {-EAGAIN, -ECANCELED, -ECANCELED}}),
    [](const auto& param) { return std::string(param.param.name); });

TEST_F(FlowDriverTest, ShortWriteForwardsOnlyWhatReachedTheLog) {
    makeDriver(true);
    fillAndStartChain(1000);
    deliver(MoveStage::Forward, -ECANCELED);
    deliver(MoveStage::AuditWrite, 300);
    mover.replies.push_back([] {
        MoveReport forward;
        forward.add(MoveStage::Forward, 300);
        return forward;
    }());
    deliver(MoveStage::Tee, 1000);
    ASSERT_GE(mover.started.size(), 3u);
    EXPECT_EQ(mover.started[2].first, MoveStage::Forward);
    EXPECT_EQ(mover.started[2].length, 300u) << "released: the written front, no more";
    EXPECT_EQ(flow().bytesForwarded(), 300u);
}

TEST_F(FlowDriverTest, ReservationFailureIsAnAuditFailure) {
    makeDriver(true);
    log->reserveError = -ENOSPC;
    auto verdict = fillAndStartChain(1000);
    EXPECT_EQ(verdict.action, Verdict::Action::Close);
    EXPECT_EQ(verdict.reason, CloseReason::AuditError);
    EXPECT_EQ(mover.started.size(), 1u) << "no tee without log space";
    EXPECT_EQ(stats.auditWriteErrors.get(), 1u);
}

TEST_F(FlowDriverTest, FailOpenReservationFailureForwardsUnaudited) {
    makeDriver(false);
    log->reserveError = -ENOSPC;
    MoveReport forward;
    forward.add(MoveStage::Forward, 1000);
    mover.replies.push_back([] {
        MoveReport fill;
        fill.add(MoveStage::Fill, 1000);
        return fill;
    }());
    mover.replies.push_back(forward);
    driver->drive(io, Direction::ClientToUpstream);
    ASSERT_GE(mover.started.size(), 2u);
    EXPECT_EQ(mover.started[1].first, MoveStage::Forward);
    EXPECT_EQ(stats.auditLostBytes.get(), 1000u);
    EXPECT_EQ(flow().bytesForwarded(), 1000u);
}

TEST_F(FlowDriverTest, ResultsAfterTheCloseOnlyBookTheAuditWrite) {
    makeDriver(true);
    fillAndStartChain(1000);
    io.relaying = false;  // the connection layer closed it meanwhile
    deliver(MoveStage::Tee, 1000);
    deliver(MoveStage::Forward, 1000);
    auto verdict = deliver(MoveStage::AuditWrite, 1000);
    EXPECT_EQ(verdict.action, Verdict::Action::Wait);
    EXPECT_EQ(log->chunks, std::vector<std::uint32_t>{1000}) << "the bytes are in the log";
    EXPECT_EQ(io.at(Direction::ClientToUpstream).auditedBytes, 1000u);
    EXPECT_EQ(flow().bytesForwarded(), 0u) << "nothing applied to a closed connection";
    EXPECT_FALSE(io.at(Direction::ClientToUpstream).move().busy());
}

TEST_F(FlowDriverTest, FailedFillClosesWithTheSourcesReset) {
    makeDriver(true);
    MoveReport fill;
    fill.add(MoveStage::Fill, -ECONNRESET);
    mover.replies.push_back(fill);
    auto verdict = driver->drive(io, Direction::ClientToUpstream);
    EXPECT_EQ(verdict.action, Verdict::Action::Close);
    EXPECT_EQ(verdict.reason, CloseReason::ClientReset);
}

TEST_F(FlowDriverTest, ABusyFlowYieldsAfterItsBudget) {
    makeDriver(false);
    io.audited = false;
    for (int i = 0; i < FlowDriver::kStepBudget; ++i) {
        MoveReport step;
        step.add(i % 2 == 0 ? MoveStage::Fill : MoveStage::Forward, static_cast<int>(kPipeSize));
        mover.replies.push_back(step);
    }
    auto verdict = driver->drive(io, Direction::ClientToUpstream);
    EXPECT_EQ(verdict.action, Verdict::Action::Yield);
    EXPECT_EQ(flow().bytesForwarded(), FlowDriver::kStepBudget / 2 * kPipeSize);
}

// ---- the splice lane's hand-back when no pipe is to be had ---------------------------------

// A buffer lane that takes every direction it is given.
class TakingLane final : public Lane {
  public:
    void setNow(std::chrono::steady_clock::time_point) noexcept override {}
    bool start(ConnectionIo&) noexcept override { return true; }
    StepResult enter(ConnectionIo&, Direction) noexcept override {
        ++entered;
        return {Next::Wait};
    }
    StepResult drive(ConnectionIo&, Direction) noexcept override { return {Next::Wait}; }
    bool owns(RingOwner owner) const noexcept override { return owner == RingOwner::BufferLane; }
    StepResult complete(ConnectionIo&, CompletionTag, MoveCompletion) noexcept override {
        return {Next::Wait};
    }
    StepResult durable(ConnectionIo&, Direction) noexcept override { return {Next::Wait}; }
    void release(ConnectionIo&) noexcept override {}
    void dropCompletion(CompletionTag, MoveCompletion) noexcept override {}
    void afterTurn(const ConnectionFinder&) noexcept override {}
    void trim() noexcept override {}
    int entered = 0;
};

class NoPipeTest : public ::testing::Test {
  protected:
    // A splice-lane direction whose next step is a fill, with a pool that has no pipe to lend.
    StepResult driveWithoutPipe(LaneKind mode) {
        lanes = std::make_unique<LaneSwitch>(mode, 16384);
        lanes->own(LaneKind::Splice,
                   std::make_unique<FlowDriver>(mover, pool, nullptr, stats, *lanes));
        if (mode == LaneKind::Auto) {
            auto owned = std::make_unique<TakingLane>();
            buffer = owned.get();
            lanes->own(LaneKind::Buffer, std::move(owned));
        }
        EXPECT_EQ(pool.acquire(taken), 0);
        io.relaying = true;
        io.counters = &counters;
        io.at(Direction::ClientToUpstream).lane = LaneKind::Splice;
        return lanes->drive(io, Direction::ClientToUpstream);
    }

    void TearDown() override {
        if (lanes) lanes->release(io);
        pool.release(std::move(taken), 0);
    }

    PipeBudget budget{16 * kPipeSize, 1};  // one pipe at most, held by `taken`
    PipePool pool{budget, kPipeSize, 4};
    WorkerStats stats;
    RouteCounters counters;
    Pipe taken;
    ScriptedMover mover;
    std::unique_ptr<LaneSwitch> lanes;
    TakingLane* buffer = nullptr;
    ConnectionIo io;
};

TEST_F(NoPipeTest, AutoHandsTheDirectionToTheBufferLane) {
    auto result = driveWithoutPipe(LaneKind::Auto);
    EXPECT_EQ(result.next, Next::Wait);
    EXPECT_EQ(buffer->entered, 1);
    EXPECT_EQ(io.at(Direction::ClientToUpstream).lane, LaneKind::Buffer);
    EXPECT_EQ(counters.laneSwitches[static_cast<int>(LaneKind::Buffer)].get(), 1u);
    EXPECT_TRUE(mover.started.empty()) << "no fill without a pipe";
}

TEST_F(NoPipeTest, SpliceOnlyClosesTheConnection) {
    auto result = driveWithoutPipe(LaneKind::Splice);
    EXPECT_EQ(result.next, Next::Close);
    EXPECT_EQ(result.verdict.reason, CloseReason::PipeError);
}

// ---- MoveInFlight: the chain mover's gathering ---------------------------------------------

TEST(MoveInFlightTest, InjectedErrorsReplaceTheKernelsResult) {
    MoveInFlight state;
    state.begin();
    state.expect(MoveStage::Tee);
    state.expect(MoveStage::AuditWrite, EIO);
    state.expect(MoveStage::Forward);
    EXPECT_FALSE(state.gather(MoveStage::AuditWrite, -EBADF));
    EXPECT_FALSE(state.gather(MoveStage::Forward, -ECANCELED));
    EXPECT_TRUE(state.gather(MoveStage::Tee, 1000));
    auto report = state.report();
    ASSERT_EQ(report.count, 3u);
    EXPECT_EQ(report.results[0].stage, MoveStage::Tee);
    EXPECT_EQ(report.results[0].result, 1000);
    EXPECT_EQ(report.results[1].result, -EIO);
    EXPECT_EQ(report.results[2].result, -ECANCELED);
}

TEST(MoveInFlightTest, ACompletionOfAStageNotExpectedIsIgnored) {
    MoveInFlight state;
    state.begin();
    state.expect(MoveStage::Fill);
    EXPECT_FALSE(state.gather(MoveStage::Forward, 10));
    EXPECT_TRUE(state.busy());
    EXPECT_TRUE(state.gather(MoveStage::Fill, 10));
    EXPECT_FALSE(state.busy());
}

}  // namespace
}  // namespace splicegate
