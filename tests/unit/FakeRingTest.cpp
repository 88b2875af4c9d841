// The scriptable ring tests drive components with: what it records, and completions delivered
// in the order the test picks.
#include <gtest/gtest.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "common/BufferRing.h"
#include "tests/support/FakeRing.h"

namespace splicegate::test {
namespace {

CompletionTag tagOf(std::uint8_t op, std::uint32_t slot = 0) {
    return CompletionTag::of(RingOwner::Test, op, slot);
}

std::vector<CompletionTag> drainTags(FakeRing& ring, std::vector<int>* results = nullptr) {
    std::vector<CompletionTag> tags;
    ring.drainCompletions([&](const io_uring_cqe& cqe) {
        tags.push_back(CompletionTag::decode(cqe.user_data));
        if (results != nullptr) results->push_back(cqe.res);
    });
    return tags;
}

TEST(FakeRing, RecordsWhatEachOperationNamed) {
    FakeRing ring;
    std::array<std::byte, 100> bytes{};
    ring.send(7, bytes, MSG_NOSIGNAL, tagOf(1), SqeFlag::FixedFile);
    ring.write(9, std::span(bytes).first(64), 4096, RWF_DSYNC, tagOf(2), SqeFlag::Link);
    ring.recvMultishot(3, 5, tagOf(3));
    ring.splice(4, -1, 6, 8192, 1000, SPLICE_F_MOVE, tagOf(4), SqeFlag::Link | SqeFlag::FixedFile);
    ring.cancel(tagOf(3), tagOf(5));

    const auto& ops = ring.ops();
    ASSERT_EQ(ops.size(), 5u);
    EXPECT_EQ(ops[0].op, RingOp::Send);
    EXPECT_EQ(ops[0].fd, 7);
    EXPECT_EQ(ops[0].length, 100u);
    EXPECT_EQ(ops[0].opFlags, MSG_NOSIGNAL);
    EXPECT_TRUE(ops[0].flags.has(SqeFlag::FixedFile));
    EXPECT_FALSE(ops[0].flags.has(SqeFlag::Link));
    EXPECT_EQ(ops[1].op, RingOp::Write);
    EXPECT_EQ(ops[1].length, 64u);
    EXPECT_EQ(ops[1].offset, 4096u);
    EXPECT_EQ(ops[1].opFlags, RWF_DSYNC);
    EXPECT_EQ(ops[1].flags, SqeFlags(SqeFlag::Link));
    EXPECT_EQ(ops[2].op, RingOp::RecvMultishot);
    EXPECT_EQ(ops[2].bufferGroup, 5);
    EXPECT_EQ(ops[3].op, RingOp::Splice);
    EXPECT_EQ(ops[3].fd, 4);
    EXPECT_EQ(ops[3].toFd, 6);
    EXPECT_EQ(ops[3].offset, 8192u);
    EXPECT_EQ(ops[3].flags, SqeFlag::Link | SqeFlag::FixedFile);
    EXPECT_EQ(ops[4].op, RingOp::Cancel);
    EXPECT_EQ(ops[4].target, tagOf(3));
    EXPECT_EQ(ops[4].tag, tagOf(5));
}

TEST(FakeRing, DeliversCompletionsInTheOrderTheTestChooses) {
    FakeRing ring;
    for (std::uint32_t slot = 0; slot < 3; ++slot) ring.nop(tagOf(1, slot));
    EXPECT_TRUE(ring.complete(tagOf(1, 2), 20));
    EXPECT_TRUE(ring.complete(tagOf(1, 0), 0));
    EXPECT_FALSE(ring.complete(tagOf(1, 2), 20)) << "completed once already";
    EXPECT_FALSE(ring.complete(tagOf(9), 0)) << "nothing carries that tag";

    std::vector<int> results;
    auto tags = drainTags(ring, &results);
    EXPECT_EQ(tags, (std::vector{tagOf(1, 2), tagOf(1, 0)}));
    EXPECT_EQ(results, (std::vector{20, 0}));
    auto open = ring.pending();
    ASSERT_EQ(open.size(), 1u);
    EXPECT_EQ(open[0].tag, tagOf(1, 1));
}

TEST(FakeRing, MultishotStaysPendingWhileMore) {
    FakeRing ring;
    ring.recvMultishot(3, 1, tagOf(1));
    EXPECT_TRUE(ring.complete(tagOf(1), 512, IORING_CQE_F_MORE | IORING_CQE_F_BUFFER));
    EXPECT_TRUE(ring.complete(tagOf(1), 100, IORING_CQE_F_MORE));
    ASSERT_NE(ring.findPending(tagOf(1)), nullptr);
    EXPECT_TRUE(ring.complete(tagOf(1), -ENOBUFS));
    EXPECT_EQ(ring.findPending(tagOf(1)), nullptr);
    EXPECT_EQ(drainTags(ring).size(), 3u);
}

TEST(FakeRing, DrainHandsOnlyWhatWasQueuedOnEntry) {
    FakeRing ring;
    ring.nop(tagOf(1));
    ring.nop(tagOf(2));
    ring.complete(tagOf(1), 0);
    unsigned handled = ring.drainCompletions([&](const io_uring_cqe&) {
        ring.complete(tagOf(2), 0);  // a handler's own work posts another completion
    });
    EXPECT_EQ(handled, 1u);
    EXPECT_EQ(ring.completionsQueued(), 1u);
}

TEST(FakeRing, ConnectIsALinkedPairInOneSubmission) {
    FakeRing ring;
    __kernel_timespec timeout{};
    sockaddr_storage address{};
    ring.connect(5, reinterpret_cast<sockaddr*>(&address), sizeof address, &timeout, tagOf(1),
                 tagOf(2));
    ASSERT_EQ(ring.ops().size(), 2u);
    EXPECT_EQ(ring.ops()[0].op, RingOp::Connect);
    EXPECT_TRUE(ring.ops()[0].flags.has(SqeFlag::Link));
    EXPECT_EQ(ring.ops()[1].op, RingOp::LinkTimeout);
    EXPECT_EQ(ring.ops()[1].tag, tagOf(2));
    EXPECT_EQ(ring.roomRequests(), std::vector<unsigned>{2});
}

TEST(FakeRing, StaleCompletionsCanBeDeliveredForAnythingGone) {
    FakeRing ring;
    ring.deliverRaw(tagOf(4, 1), -ECANCELED);
    std::vector<int> results;
    EXPECT_EQ(drainTags(ring, &results), std::vector{tagOf(4, 1)});
    EXPECT_EQ(results, std::vector{-ECANCELED});
}

TEST(FakeRing, ClearRecordKeepsPendingOperations) {
    FakeRing ring;
    ring.nop(tagOf(1));
    ring.clearRecord();
    ring.nop(tagOf(2));
    auto since = ring.preparedSinceClear();
    ASSERT_EQ(since.size(), 1u);
    EXPECT_EQ(since[0].tag, tagOf(2));
    EXPECT_TRUE(ring.complete(tagOf(1), 0));
}

TEST(FakeRing, SubmitsAreCountedWithWhatWasPreparedBefore) {
    FakeRing ring;
    ring.nop(tagOf(1));
    ring.nop(tagOf(2));
    EXPECT_EQ(ring.submit(), 0);
    ring.nop(tagOf(3));
    EXPECT_EQ(ring.submits(), 1u);
    EXPECT_EQ(ring.preparedAtLastSubmit(), 2u);
}

// The ring a BufferRing (common/BufferRing.h) publishes, taken from as the kernel would.
TEST(FakeRegistration, HandsOutPublishedBuffersInRingOrderAndNothingWhenEmpty) {
    FakeRegistration registration;
    BufferRing buffers(registration, 3, 4, 64);
    EXPECT_TRUE(registration.hasBufferRing(3));
    EXPECT_EQ(registration.available(3), 4u);

    const std::string text = "bytes";
    auto flags = registration.fill(3, std::as_bytes(std::span(text)), true);
    ASSERT_TRUE(flags);
    EXPECT_TRUE(*flags & IORING_CQE_F_MORE);
    auto first = BufferRing::bufferOf(*flags);
    ASSERT_TRUE(first);
    EXPECT_EQ(*flags, FakeRegistration::bufferFlags(*first, true));
    auto received = buffers.take(*first, text.size());
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(received.data()), received.size()), text);

    std::vector<std::uint16_t> taken{*first};
    while (auto next = registration.pick(3)) {
        EXPECT_EQ(next->memory.data(), buffers.memory(next->id).data());
        EXPECT_EQ(next->memory.size(), 64u);
        buffers.take(next->id, 0);
        taken.push_back(next->id);
    }
    EXPECT_EQ(taken.size(), 4u) << "each buffer once, then the ring ran dry (-ENOBUFS)";
    EXPECT_EQ(buffers.inUse(), 4u);

    buffers.giveBack(taken[1]);
    const std::string tooLong(65, 'x');
    EXPECT_FALSE(registration.fill(3, std::as_bytes(std::span(tooLong))));
    EXPECT_EQ(registration.available(3), 1u) << "a refused fill takes no buffer";
    auto again = registration.pick(3);
    ASSERT_TRUE(again);
    EXPECT_EQ(again->id, taken[1]) << "the buffer given back is published again";
}

TEST(FakeRegistration, RefusesWhatItWasToldToAndOneRingPerGroup) {
    FakeRegistration registration;
    {
        BufferRing buffers(registration, 1, 4, 64);
        EXPECT_THROW(BufferRing(registration, 1, 4, 64), std::system_error) << "one per group";
    }
    EXPECT_FALSE(registration.hasBufferRing(1)) << "unregistered when destroyed";
    registration.refuseBufferRings(-EINVAL);
    EXPECT_THROW(BufferRing(registration, 2, 4, 64), std::system_error);

    EXPECT_EQ(registration.registerSparseFiles(64), 0);
    EXPECT_EQ(registration.fileEntries(), 64u);
    EXPECT_EQ(registration.unregisterFiles(), 0);
    EXPECT_EQ(registration.fileEntries(), 0u);
    registration.refuseFiles(-ENOMEM);
    EXPECT_EQ(registration.registerSparseFiles(64), -ENOMEM);
}

TEST(FakeRing, WaitsForNothingAndDrainsThroughTheInterface) {
    FakeRing ring;
    RingOps& ops = ring;
    EXPECT_EQ(ops.submitAndWait(1000), -ETIME) << "nothing queued: no wait, a timeout";
    ops.nop(tagOf(5));
    ASSERT_TRUE(ring.complete(tagOf(5), 0));
    EXPECT_EQ(ops.submitAndWait(1000), 0);
    std::vector<CompletionTag> seen;
    EXPECT_EQ(ops.drainCompletions([&](const io_uring_cqe& cqe) {
        seen.push_back(CompletionTag::decode(cqe.user_data));
    }),
              1u);
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_EQ(seen[0], tagOf(5));
    EXPECT_EQ(ring.waits(), 2u);
    EXPECT_EQ(ring.submits(), 2u) << "a wait submits first";
}

TEST(FakeRegistration, RegistersFixedBuffersOnce) {
    FakeRegistration registration;
    std::array<std::byte, 64> memory{};
    iovec vector{memory.data(), memory.size()};
    EXPECT_EQ(registration.registerBuffers(&vector, 1), 0);
    EXPECT_EQ(registration.registeredBuffers(), 1u);
    EXPECT_EQ(registration.registerBuffers(&vector, 1), -EBUSY);
    EXPECT_EQ(registration.unregisterBuffers(), 0);
    EXPECT_EQ(registration.unregisterBuffers(), -ENXIO);
    registration.refuseBuffers(-ENOMEM);
    EXPECT_EQ(registration.registerBuffers(&vector, 1), -ENOMEM);
    EXPECT_EQ(registration.registeredBuffers(), 0u);
}

}  // namespace
}  // namespace splicegate::test
