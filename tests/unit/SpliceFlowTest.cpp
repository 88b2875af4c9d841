#include <gtest/gtest.h>

#include <cerrno>

#include "datapath/SpliceFlow.h"
#include "pipes/PipePool.h"

namespace splicegate {
namespace {

class SpliceFlowTest : public ::testing::Test {
  protected:
    void SetUp() override { ASSERT_EQ(Pipe::create(65536, flow.pipe), 0); }
    SpliceFlow flow;
};

TEST_F(SpliceFlowTest, StartsByFillingTheWholePipe) {
    EXPECT_EQ(flow.next(), FlowStep::Fill);
    EXPECT_EQ(flow.fillRequest(), 65536u);
}

TEST_F(SpliceFlowTest, ForwardsExactlyWhatWasFilled) {
    EXPECT_EQ(flow.recordFill(65536, 65536), MoveOutcome::Moved);
    EXPECT_EQ(flow.next(), FlowStep::Forward);
    EXPECT_EQ(flow.forwardRequest(), 65536u);
    EXPECT_EQ(flow.recordForward(65536), MoveOutcome::Moved);
    EXPECT_TRUE(flow.pipeReturnable());
    EXPECT_EQ(flow.next(), FlowStep::Fill);  // a full read: more may be waiting
}

TEST_F(SpliceFlowTest, ShortFillMeansTheSourceIsDrained) {
    flow.recordFill(100, 65536);
    EXPECT_EQ(flow.next(), FlowStep::Forward);
    flow.recordForward(100);
    EXPECT_EQ(flow.next(), FlowStep::WaitReadable);
    flow.recordSourceReadable();
    EXPECT_EQ(flow.next(), FlowStep::Fill);
}

// The inline engine's setting: a small short fill waits for readiness, a large one tries again.
TEST_F(SpliceFlowTest, OnlyAShortFillBelowTheThresholdMeansDrained) {
    flow.setDrainedBelow(16384);
    flow.recordFill(20000, 65536);
    flow.recordForward(20000);
    EXPECT_EQ(flow.next(), FlowStep::Fill) << "a large short fill: more may be there already";
    flow.recordFill(64, 65536);
    flow.recordForward(64);
    EXPECT_EQ(flow.next(), FlowStep::WaitReadable) << "a small short fill: drained";
    flow.recordSourceReadable();
    flow.recordFill(16384, 65536);
    flow.recordForward(16384);
    EXPECT_EQ(flow.next(), FlowStep::Fill) << "the threshold itself is not below it";
}

TEST_F(SpliceFlowTest, ShortForwardKeepsTheRestAndAsksForIt) {
    flow.recordFill(1000, 65536);
    EXPECT_EQ(flow.recordForward(300), MoveOutcome::Moved);
    EXPECT_EQ(flow.bytesInPipe(), 700u);
    EXPECT_FALSE(flow.pipeReturnable());
    EXPECT_EQ(flow.next(), FlowStep::Forward);
    EXPECT_EQ(flow.forwardRequest(), 700u);
    EXPECT_EQ(flow.recordForward(-EAGAIN), MoveOutcome::WouldBlock);
    EXPECT_EQ(flow.next(), FlowStep::WaitWritable);
    flow.recordSinkWritable();
    EXPECT_EQ(flow.recordForward(700), MoveOutcome::Moved);
    EXPECT_EQ(flow.bytesForwarded(), 1000u);
    EXPECT_TRUE(flow.pipeReturnable());
}

TEST_F(SpliceFlowTest, FillTakesOnlyTheRoomLeft) {
    flow.recordFill(60000, 60000);
    flow.recordForward(10000);
    EXPECT_EQ(flow.fillRequest(), 65536u - 50000u);
}

TEST_F(SpliceFlowTest, EndOfStreamWaitsForThePipeToDrainBeforeShutdown) {
    flow.recordFill(500, 65536);
    EXPECT_EQ(flow.recordFill(0, 65536), MoveOutcome::EndOfStream);
    EXPECT_EQ(flow.next(), FlowStep::Forward);
    flow.recordForward(-EAGAIN);
    EXPECT_EQ(flow.next(), FlowStep::WaitWritable);
    flow.recordSinkWritable();
    flow.recordForward(500);
    EXPECT_EQ(flow.next(), FlowStep::ShutdownSink);
    flow.recordSinkShutdown();
    EXPECT_EQ(flow.next(), FlowStep::Finished);
    EXPECT_TRUE(flow.finished());
}

TEST_F(SpliceFlowTest, WouldBlockFillWaitsForReadiness) {
    EXPECT_EQ(flow.recordFill(-EAGAIN, 65536), MoveOutcome::WouldBlock);
    EXPECT_EQ(flow.next(), FlowStep::WaitReadable);
}

TEST(MoveOutcome, ClassifiesResults) {
    EXPECT_EQ(classifyFill(10), MoveOutcome::Moved);
    EXPECT_EQ(classifyFill(0), MoveOutcome::EndOfStream);
    EXPECT_EQ(classifyFill(-EAGAIN), MoveOutcome::WouldBlock);
    EXPECT_EQ(classifyFill(-ECONNRESET), MoveOutcome::Failed);
    EXPECT_EQ(classifyForward(0), MoveOutcome::WouldBlock);
    EXPECT_EQ(classifyForward(-EPIPE), MoveOutcome::Failed);
}

}  // namespace
// ---- audit stages: the rules that make the audit fail-closed --------------------------------

class AuditedSpliceFlowTest : public SpliceFlowTest {
  protected:
    void SetUp() override {
        SpliceFlowTest::SetUp();
        flow.configureAudit(true, false);
    }
};

TEST_F(AuditedSpliceFlowTest, NothingIsForwardedBeforeItIsTeedAndWritten) {
    flow.recordFill(1000, 65536);
    EXPECT_EQ(flow.next(), FlowStep::Tee);
    EXPECT_EQ(flow.forwardRequest(), 0u);
    EXPECT_EQ(flow.teeRequest(), 1000u);
    EXPECT_TRUE(flow.recordTee(1000));
    EXPECT_EQ(flow.next(), FlowStep::AuditWrite);
    EXPECT_EQ(flow.auditWriteRequest(), 1000u);
    EXPECT_EQ(flow.forwardRequest(), 0u) << "teed but not written: nothing released";
    EXPECT_TRUE(flow.recordAuditWrite(1000));
    EXPECT_EQ(flow.next(), FlowStep::Forward);
    EXPECT_EQ(flow.forwardRequest(), 1000u);
    EXPECT_EQ(flow.recordForward(1000), MoveOutcome::Moved);
    EXPECT_TRUE(flow.pipeReturnable());
    EXPECT_TRUE(flow.auditPipeReturnable());
}

TEST_F(AuditedSpliceFlowTest, ShortTeeWritesWhatWasCopiedAndTeesTheRestOnlyAfterItIsForwarded) {
    flow.recordFill(1000, 65536);
    EXPECT_TRUE(flow.recordTee(400));
    EXPECT_EQ(flow.auditWriteRequest(), 400u);
    EXPECT_TRUE(flow.recordAuditWrite(400));
    EXPECT_EQ(flow.forwardRequest(), 400u) << "only the audited front is released";
    flow.recordForward(400);
    // tee copies from the pipe's front: the rest is teed once the teed front has gone.
    EXPECT_EQ(flow.next(), FlowStep::Tee);
    EXPECT_EQ(flow.teeRequest(), 600u);
    EXPECT_TRUE(flow.recordTee(600));
    EXPECT_TRUE(flow.recordAuditWrite(600));
    EXPECT_EQ(flow.forwardRequest(), 600u);
}

TEST_F(AuditedSpliceFlowTest, ShortAuditWriteReleasesOnlyWhatReachedTheLog) {
    flow.recordFill(1000, 65536);
    flow.recordTee(1000);
    EXPECT_TRUE(flow.recordAuditWrite(300));
    EXPECT_EQ(flow.forwardRequest(), 300u);
    EXPECT_EQ(flow.bytesInAuditPipe(), 700u);
    // What was released goes first; the rest of the audit pipe is written before more is teed.
    EXPECT_EQ(flow.next(), FlowStep::Forward);
    flow.recordForward(300);
    EXPECT_EQ(flow.next(), FlowStep::AuditWrite);
    EXPECT_EQ(flow.auditWriteRequest(), 700u);
}

TEST_F(AuditedSpliceFlowTest, CancelledOrInterruptedStagesChangeNothingAndAreRetried) {
    flow.recordFill(1000, 65536);
    EXPECT_TRUE(flow.recordTee(-ECANCELED));
    EXPECT_TRUE(flow.recordTee(-EAGAIN));
    EXPECT_EQ(flow.next(), FlowStep::Tee);
    EXPECT_TRUE(flow.recordTee(1000));
    EXPECT_TRUE(flow.recordAuditWrite(-ECANCELED));
    EXPECT_TRUE(flow.recordAuditWrite(-EINTR));
    EXPECT_EQ(flow.next(), FlowStep::AuditWrite);
    EXPECT_EQ(flow.forwardRequest(), 0u);
}

TEST_F(AuditedSpliceFlowTest, FailedStagesAreAuditFailures) {
    flow.recordFill(1000, 65536);
    EXPECT_FALSE(flow.recordTee(-EIO));
    EXPECT_TRUE(flow.recordTee(1000));
    EXPECT_FALSE(flow.recordAuditWrite(-EIO));
    EXPECT_FALSE(flow.recordAuditWrite(-ENOSPC));
    EXPECT_FALSE(flow.recordAuditWrite(0)) << "a log file that takes nothing is full";
    EXPECT_EQ(flow.forwardRequest(), 0u) << "a failed write releases nothing";
}

TEST_F(AuditedSpliceFlowTest, StrictReleasesOnlyWhenDurable) {
    flow.configureAudit(true, true);
    flow.recordFill(1000, 65536);
    flow.recordTee(1000);
    flow.recordAuditWrite(1000);
    EXPECT_EQ(flow.next(), FlowStep::WaitDurable);
    EXPECT_EQ(flow.forwardRequest(), 0u);
    flow.recordDurable();
    EXPECT_EQ(flow.next(), FlowStep::Forward);
    EXPECT_EQ(flow.forwardRequest(), 1000u);
    flow.recordDurable();  // nothing more written: nothing more released
    EXPECT_EQ(flow.forwardRequest(), 1000u);
}

TEST_F(AuditedSpliceFlowTest, AbandonAuditReleasesEverythingAndCountsWhatWasNotAudited) {
    flow.recordFill(1000, 65536);
    flow.recordTee(600);
    flow.recordAuditWrite(200);  // 200 audited and released, 400 teed unwritten, 400 unteed
    EXPECT_EQ(flow.abandonAudit(), 800u);
    EXPECT_EQ(flow.forwardRequest(), 1000u);
    EXPECT_EQ(flow.bytesInAuditPipe(), 0u);
    EXPECT_TRUE(flow.auditPipeReturnable());
    flow.recordForward(1000);
    EXPECT_TRUE(flow.pipeReturnable());
}

TEST_F(AuditedSpliceFlowTest, AbandonAuditInStrictModeCountsWrittenButNotDurableBytesAsAudited) {
    flow.configureAudit(true, true);
    flow.recordFill(1000, 65536);
    flow.recordTee(1000);
    flow.recordAuditWrite(700);  // written, waiting for durability
    EXPECT_EQ(flow.abandonAudit(), 300u) << "the written 700 are in the log";
    EXPECT_EQ(flow.forwardRequest(), 1000u);
    EXPECT_EQ(flow.next(), FlowStep::Forward);
}

}  // namespace splicegate
