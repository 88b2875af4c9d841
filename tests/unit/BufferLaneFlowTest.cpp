// The buffer lane's bookkeeping without a kernel: what may be sent when, which buffers go back
// after a send, partial sends, EOF, -ENOBUFS, the strict-mode gate, pausing and the lane policy.
#include <gtest/gtest.h>

#include <cerrno>
#include <vector>

#include "datapath/BufferLaneFlow.h"
#include "datapath/LanePolicy.h"

namespace splicegate {
namespace {

constexpr bool kMore = true;

BufferLaneFlow armedFlow(bool audited = false, bool strict = false) {
    BufferLaneFlow flow;
    flow.configureAudit(audited, strict);
    flow.recordArmed();
    return flow;
}

TEST(BufferLaneFlow, UnauditedBytesAreSentAtOnceAndTheBufferGoesBackWhenFullySent) {
    auto flow = armedFlow();
    EXPECT_EQ(flow.next(), LaneStep::Receive);
    ASSERT_EQ(flow.recordRecv(100, true, 3, kMore), RecvOutcome::Data);
    ASSERT_EQ(flow.next(), LaneStep::Send);
    auto slice = flow.sendSlice();
    EXPECT_EQ(slice.buffer, 3u);
    EXPECT_EQ(slice.offset, 0u);
    EXPECT_EQ(slice.length, 100u);
    // Partial: the buffer stays held, the sink counts as full.
    ASSERT_TRUE(flow.recordSend(60, 100));
    EXPECT_TRUE(flow.sentBuffers().empty());
    EXPECT_EQ(flow.next(), LaneStep::WaitWritable);
    flow.recordSinkWritable();
    slice = flow.sendSlice();
    EXPECT_EQ(slice.offset, 60u);
    EXPECT_EQ(slice.length, 40u);
    ASSERT_TRUE(flow.recordSend(40, 40));
    EXPECT_EQ(flow.sentBuffers(), std::vector<std::uint16_t>{3});
    EXPECT_EQ(flow.bytesHeld(), 0u);
    EXPECT_EQ(flow.heldChunks(), 0u);
    EXPECT_EQ(flow.bytesForwarded(), 100u);
    EXPECT_EQ(flow.next(), LaneStep::Receive);
}

TEST(BufferLaneFlow, ASendInFlightHoldsTheNextSendAndEOFUntilItCompletes) {
    auto flow = armedFlow();
    flow.recordRecv(10, true, 7, kMore);
    flow.recordRecv(20, true, 2, kMore);
    flow.recordRecv(0, false, 0, false);  // EOF behind the bytes
    ASSERT_EQ(flow.next(), LaneStep::Send);
    flow.recordSendStarted(10);
    EXPECT_EQ(flow.sendInFlight(), 10u);
    // One send at a time keeps the order; the EOF waits behind the bytes in flight.
    EXPECT_EQ(flow.next(), LaneStep::WaitSend);
    ASSERT_TRUE(flow.recordSend(10, 10));
    EXPECT_EQ(flow.sendInFlight(), 0u);
    EXPECT_EQ(flow.sentBuffers(), std::vector<std::uint16_t>{7});
    ASSERT_EQ(flow.next(), LaneStep::Send);
    EXPECT_EQ(flow.sendSlice().buffer, 2u);
    flow.recordSendStarted(20);
    EXPECT_EQ(flow.next(), LaneStep::WaitSend);
    ASSERT_TRUE(flow.recordSend(20, 20));
    EXPECT_EQ(flow.next(), LaneStep::ShutdownSink);
}

TEST(BufferLaneFlow, ChunksGoOutInArrivalOrderOneBufferAtATime) {
    auto flow = armedFlow();
    flow.recordRecv(10, true, 7, kMore);
    flow.recordRecv(20, true, 2, kMore);
    auto first = flow.sendSlice();
    EXPECT_EQ(first.buffer, 7u);
    EXPECT_EQ(first.length, 10u);
    ASSERT_TRUE(flow.recordSend(10, 10));
    auto second = flow.sendSlice();
    EXPECT_EQ(second.buffer, 2u);
    EXPECT_EQ(second.length, 20u);
    ASSERT_TRUE(flow.recordSend(20, 20));
    EXPECT_EQ(flow.sentBuffers(), (std::vector<std::uint16_t>{7, 2}));
}

TEST(BufferLaneFlow, WouldBlockWaitsForWritableAndAResetFails) {
    auto flow = armedFlow();
    flow.recordRecv(10, true, 1, kMore);
    ASSERT_TRUE(flow.recordSend(-EAGAIN, 10));
    EXPECT_EQ(flow.next(), LaneStep::WaitWritable);
    EXPECT_FALSE(flow.writableWaitArmed());
    flow.recordWritableWaitArmed();
    EXPECT_TRUE(flow.writableWaitArmed());
    flow.recordSinkWritable();
    EXPECT_EQ(flow.next(), LaneStep::Send);
    EXPECT_FALSE(flow.recordSend(-ECONNRESET, 10));
    EXPECT_EQ(flow.bytesHeld(), 10u) << "a failed send moves nothing";
}

TEST(BufferLaneFlow, EndOfStreamShutsTheSinkOnlyAfterEverythingWasSent) {
    auto flow = armedFlow();
    flow.recordRecv(5, true, 0, kMore);
    EXPECT_EQ(flow.recordRecv(0, false, 0, false), RecvOutcome::EndOfStream);
    EXPECT_FALSE(flow.recvArmed());
    EXPECT_EQ(flow.next(), LaneStep::Send);
    ASSERT_TRUE(flow.recordSend(5, 5));
    EXPECT_EQ(flow.next(), LaneStep::ShutdownSink);
    flow.recordSinkShutdown();
    EXPECT_EQ(flow.next(), LaneStep::Finished);
    EXPECT_TRUE(flow.finished());
}

TEST(BufferLaneFlow, NoBuffersEndsTheRecvAndWaitsWithoutRearming) {
    auto flow = armedFlow();
    EXPECT_EQ(flow.recordRecv(-ENOBUFS, false, 0, false), RecvOutcome::NoBuffers);
    EXPECT_FALSE(flow.recvArmed());
    EXPECT_TRUE(flow.starved());
    EXPECT_EQ(flow.next(), LaneStep::Receive);  // the worker re-arms once buffers return
    flow.recordArmed();
    EXPECT_FALSE(flow.starved());
    EXPECT_EQ(flow.recordRecv(-ECONNRESET, false, 0, false), RecvOutcome::Failed);
    EXPECT_EQ(flow.recordRecv(-ECANCELED, false, 0, false), RecvOutcome::Cancelled);
}

TEST(BufferLaneFlow, AuditedBytesWaitForTheirWriteAndAShortWriteLeavesTheRest) {
    auto flow = armedFlow(true);
    flow.recordRecv(100, true, 4, kMore);
    ASSERT_EQ(flow.next(), LaneStep::AuditWrite);
    auto slice = flow.auditSlice();
    EXPECT_EQ(slice.buffer, 4u);
    EXPECT_EQ(slice.length, 100u);
    flow.recordAuditStarted(100);
    EXPECT_EQ(flow.next(), LaneStep::WaitAudit);
    ASSERT_TRUE(flow.recordAuditWrite(30));
    ASSERT_EQ(flow.next(), LaneStep::Send);
    EXPECT_EQ(flow.sendSlice().length, 30u) << "only the written part may go out";
    ASSERT_TRUE(flow.recordSend(30, 30));
    ASSERT_EQ(flow.next(), LaneStep::AuditWrite);
    slice = flow.auditSlice();
    EXPECT_EQ(slice.offset, 30u);
    EXPECT_EQ(slice.length, 70u);
    flow.recordAuditStarted(70);
    EXPECT_FALSE(flow.recordAuditWrite(-EIO));
    EXPECT_EQ(flow.next(), LaneStep::AuditWrite) << "nothing released by a failed write";
}

TEST(BufferLaneFlow, StrictReleasesOnlyWhenDurableAndWritesNothingMeanwhile) {
    auto flow = armedFlow(true, true);
    flow.recordRecv(10, true, 1, kMore);
    flow.recordAuditStarted(flow.auditSlice().length);
    ASSERT_TRUE(flow.recordAuditWrite(10));
    EXPECT_EQ(flow.next(), LaneStep::WaitDurable);
    flow.recordRecv(20, true, 2, kMore);
    EXPECT_EQ(flow.next(), LaneStep::WaitDurable)
        << "a write started now would be released by a sync that does not cover it";
    flow.recordDurableWaitAsked();
    flow.recordDurable();
    EXPECT_FALSE(flow.durableWaitAsked());
    ASSERT_EQ(flow.next(), LaneStep::Send);
    EXPECT_EQ(flow.sendSlice().length, 10u);
    ASSERT_TRUE(flow.recordSend(10, 10));
    EXPECT_EQ(flow.next(), LaneStep::AuditWrite);
}

TEST(BufferLaneFlow, FailOpenSendsWhatTheAuditLacksAndCountsIt) {
    auto flow = armedFlow(true);
    flow.recordRecv(10, true, 1, kMore);
    flow.recordRecv(15, true, 2, kMore);
    EXPECT_EQ(flow.abandonAudit(), 25u);
    EXPECT_EQ(flow.next(), LaneStep::Send);
}

TEST(BufferLaneFlow, ABlockedSinkPausesTheRecvAfterEnoughBuffers) {
    auto flow = armedFlow();
    for (std::uint16_t i = 0; i < BufferLaneFlow::kMaxHeldChunks; ++i) {
        EXPECT_FALSE(flow.recvCancelWanted());
        flow.recordRecv(100, true, i, kMore);
        if (i == 0) flow.recordSend(-EAGAIN, 100);
    }
    EXPECT_TRUE(flow.recvCancelWanted());
    flow.recordCancelAsked();
    EXPECT_FALSE(flow.recvCancelWanted()) << "one cancel is enough";
    EXPECT_EQ(flow.recordRecv(-ECANCELED, false, 0, false), RecvOutcome::Cancelled);
    flow.recordSinkWritable();
    for (std::size_t i = 0; i < BufferLaneFlow::kMaxHeldChunks; ++i) flow.recordSend(100, 100);
    EXPECT_EQ(flow.sentBuffers().size(), BufferLaneFlow::kMaxHeldChunks);
    EXPECT_EQ(flow.next(), LaneStep::Receive);
    EXPECT_FALSE(flow.recvArmed());
}

TEST(BufferLaneFlow, ALaneSwitchWaitsForTheRecvsEndAndAnEmptyQueue) {
    auto flow = armedFlow();
    flow.recordRecv(100, true, 1, kMore);
    flow.requestLaneSwitch();
    EXPECT_TRUE(flow.recvCancelWanted());
    flow.recordCancelAsked();
    // The recv's last bytes before the cancel took effect still count, in order.
    flow.recordRecv(50, true, 2, kMore);
    EXPECT_EQ(flow.next(), LaneStep::Send);
    flow.recordSend(100, 100);
    flow.recordSend(50, 50);
    EXPECT_EQ(flow.next(), LaneStep::Receive) << "the recv has not ended yet";
    flow.recordRecv(-ECANCELED, false, 0, false);
    EXPECT_EQ(flow.next(), LaneStep::SwitchLane);
    flow.recordLaneSwitched();
    EXPECT_FALSE(flow.laneSwitchAsked());
}

TEST(BufferLaneFlow, ReleaseAllGivesBackEveryHeldBuffer) {
    auto flow = armedFlow(true);
    flow.recordRecv(10, true, 5, kMore);
    flow.recordRecv(10, true, 6, kMore);
    std::vector<std::uint16_t> back;
    flow.releaseAll([&](std::uint16_t id) { back.push_back(id); });
    EXPECT_EQ(back, (std::vector<std::uint16_t>{5, 6}));
    EXPECT_EQ(flow.bytesHeld(), 0u);
    EXPECT_EQ(flow.heldChunks(), 0u);
}

TEST(LanePolicy, FullBuffersInARowMoveToSpliceSmallReadsInARowMoveBack) {
    LanePolicy policy(true);
    for (int i = 0; i + 1 < LanePolicy::kRun; ++i)
        EXPECT_FALSE(policy.recordBufferRead(16384, 16384));
    EXPECT_FALSE(policy.recordBufferRead(100, 16384)) << "a small read breaks the run";
    for (int i = 0; i + 1 < LanePolicy::kRun; ++i)
        EXPECT_FALSE(policy.recordBufferRead(16384, 16384));
    EXPECT_TRUE(policy.recordBufferRead(16384, 16384));
    policy.recordSwitched();
    EXPECT_FALSE(policy.wantsSwitch());
    for (int i = 0; i + 1 < LanePolicy::kRun; ++i) EXPECT_FALSE(policy.recordSpliceRead(64, 16384));
    EXPECT_FALSE(policy.recordSpliceRead(1 << 20, 16384)) << "a large read breaks the run";
    for (int i = 0; i + 1 < LanePolicy::kRun; ++i) EXPECT_FALSE(policy.recordSpliceRead(64, 16384));
    EXPECT_TRUE(policy.recordSpliceRead(64, 16384));
    for (int i = 0; i < 1000; ++i) policy.recordSpliceRead(64, 16384);  // saturates, no wrap
    EXPECT_TRUE(policy.wantsSwitch());
}

TEST(LanePolicy, HalfABufferCountsAsLarge) {
    LanePolicy policy(true);
    for (int i = 0; i + 1 < LanePolicy::kRun; ++i) policy.recordBufferRead(8192, 16384);
    EXPECT_TRUE(policy.recordBufferRead(8192, 16384));
    policy.recordSwitched();
    for (int i = 0; i + 1 < LanePolicy::kRun; ++i) policy.recordSpliceRead(8191, 16384);
    EXPECT_TRUE(policy.recordSpliceRead(8191, 16384));
}

TEST(LanePolicy, AForcedLaneNeverSwitches) {
    LanePolicy policy(false);
    for (int i = 0; i < 100; ++i) EXPECT_FALSE(policy.recordBufferRead(16384, 16384));
    for (int i = 0; i < 100; ++i) EXPECT_FALSE(policy.recordSpliceRead(1, 16384));
}

}  // namespace
}  // namespace splicegate
