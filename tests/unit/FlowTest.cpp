#include "datapath/Flow.h"

#include <gtest/gtest.h>

#include <cerrno>

#include "pipes/PipePool.h"

namespace splicegate {
namespace {

class FlowTest : public ::testing::Test {
protected:
    void SetUp() override { ASSERT_EQ(Pipe::create(65536, flow.pipe), 0); }
    Flow flow;
};

TEST_F(FlowTest, StartsByFillingTheWholePipe) {
    EXPECT_EQ(flow.next(), FlowStep::Fill);
    EXPECT_EQ(flow.fillRequest(), 65536u);
}

TEST_F(FlowTest, ForwardsExactlyWhatWasFilled) {
    EXPECT_EQ(flow.recordFill(65536, 65536), MoveOutcome::Moved);
    EXPECT_EQ(flow.next(), FlowStep::Forward);
    EXPECT_EQ(flow.forwardRequest(), 65536u);
    EXPECT_EQ(flow.recordForward(65536), MoveOutcome::Moved);
    EXPECT_TRUE(flow.pipeReturnable());
    EXPECT_EQ(flow.next(), FlowStep::Fill);  // a full read: more may be waiting
}

TEST_F(FlowTest, ShortFillMeansTheSourceIsDrained) {
    flow.recordFill(100, 65536);
    EXPECT_EQ(flow.next(), FlowStep::Forward);
    flow.recordForward(100);
    EXPECT_EQ(flow.next(), FlowStep::WaitReadable);
    flow.recordSourceReadable();
    EXPECT_EQ(flow.next(), FlowStep::Fill);
}

// The inline engine's setting: a small short fill waits for readiness, a large one tries again.
TEST_F(FlowTest, OnlyAShortFillBelowTheThresholdMeansDrained) {
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

TEST_F(FlowTest, ShortForwardKeepsTheRestAndAsksForIt) {
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

TEST_F(FlowTest, FillTakesOnlyTheRoomLeft) {
    flow.recordFill(60000, 60000);
    flow.recordForward(10000);
    EXPECT_EQ(flow.fillRequest(), 65536u - 50000u);
}

TEST_F(FlowTest, EndOfStreamWaitsForThePipeToDrainBeforeShutdown) {
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

TEST_F(FlowTest, WouldBlockFillWaitsForReadiness) {
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
}  // namespace splicegate
