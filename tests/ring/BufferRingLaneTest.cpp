// The buffer lane's operations (datapath/BufferLane.h) on a real ring over socket pairs: a
// received buffer stays held through partial sends and goes back only once fully sent; a dry
// ring parks the direction and re-arms it when buffers return; a closing flow gives back all.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "common/Error.h"
#include "datapath/BufferLane.h"
#include "tests/ring/BufferRingTestSupport.h"

namespace splicegate::test {
namespace {

CompletionTag tagOf(std::uint8_t op) {
    return CompletionTag::of(RingOwner::Test, op);
}

std::optional<BufferLane> makeLane(TestRing& ring, unsigned entries, std::size_t size,
                                   std::string& skipWhy) {
    try {
        return std::optional<BufferLane>(std::in_place, ring.ops(), ring.registration(), entries,
                                         size);
    } catch (const std::system_error& error) {
        if (error.code().value() != EINVAL && error.code().value() != ENOSYS) throw;
        skipWhy = std::string("no provided buffer rings here: ") + error.what();
        return std::nullopt;
    }
}

// Feeds recv completions of `tag` into `flow` until `bytes` are held (or the recv fails).
void receive(TestRing& ring, BufferLane& lane, BufferLaneFlow& flow, std::size_t bytes) {
    for (int i = 0; i < 1000 && flow.bytesHeld() < bytes; ++i) {
        auto cqe = ring.next();
        ASSERT_TRUE(cqe) << "no recv completion; held " << flow.bytesHeld();
        if (cqe->res == -EINVAL) GTEST_SKIP() << "no multishot IORING_OP_RECV here (kernel 6.0)";
        auto outcome = lane.onRecv(flow, cqe->res, cqe->flags);
        ASSERT_EQ(outcome, RecvOutcome::Data) << errnoText(-cqe->res);
    }
}

TEST(BufferLane, ABufferGoesBackOnlyOnceFullySentThroughPartialSends) {
    TestRing ring;
    std::string why;
    auto lane = makeLane(ring, 4, 64 * 1024, why);
    if (!lane) GTEST_SKIP() << why;
    SocketPair source, sink;
    int small = 4096;
    ::setsockopt(sink.a.get(), SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
    BufferLaneFlow flow;
    lane->armRecv(flow, SocketRef{source.a.get()}, tagOf(1));
    ring.submit();
    std::string payload(48 * 1024, '\0');
    for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>('a' + i % 26);
    ASSERT_EQ(::write(source.b.get(), payload.data(), payload.size()),
              static_cast<ssize_t>(payload.size()));
    ASSERT_NO_FATAL_FAILURE(receive(ring, *lane, flow, payload.size()));
    if (IsSkipped()) return;
    EXPECT_EQ(lane->buffersInUse(), flow.heldChunks());

    std::string delivered;
    int partial = 0;
    for (int round = 0; round < 10000 && flow.bytesHeld() > 0; ++round) {
        if (flow.next() == LaneStep::WaitWritable) {
            // The sink's peer reads: room again. Buffers are still held until now.
            EXPECT_GT(lane->buffersInUse(), 0u);
            char chunk[65536];
            auto got = ::read(sink.b.get(), chunk, sizeof chunk);
            ASSERT_GT(got, 0);
            delivered.append(chunk, static_cast<std::size_t>(got));
            flow.recordSinkWritable();
            continue;
        }
        ASSERT_EQ(flow.next(), LaneStep::Send);
        auto slice = flow.sendSlice();
        lane->submitSend(SocketRef{sink.a.get()}, slice, slice.length, tagOf(7));
        flow.recordSendStarted(slice.length);
        ring.submit();
        EXPECT_EQ(flow.next(), LaneStep::WaitSend);
        // A sink with no room keeps the send in flight (io_uring polls it) and its buffer held,
        // until the peer reads.
        auto done = ring.next(50);
        for (int wait = 0; !done && wait < 100; ++wait) {
            EXPECT_GT(lane->buffersInUse(), 0u);
            char chunk[65536];
            auto got = ::read(sink.b.get(), chunk, sizeof chunk);
            if (got > 0) delivered.append(chunk, static_cast<std::size_t>(got));
            done = ring.next(50);
        }
        ASSERT_TRUE(done) << "the send never completed";
        ASSERT_EQ(CompletionTag::decode(done->user_data), tagOf(7));
        long sent = done->res;
        if (sent > 0 && static_cast<std::size_t>(sent) < slice.length) ++partial;
        ASSERT_TRUE(flow.recordSend(sent, slice.length)) << errnoText(static_cast<int>(-sent));
        auto before = lane->buffersInUse();
        auto returning = flow.sentBuffers().size();
        lane->giveBackSent(flow);
        EXPECT_EQ(lane->buffersInUse(), before - returning);
    }
    EXPECT_GT(partial, 0) << "a 4 KiB send buffer took 48 KiB without a partial send";
    char chunk[65536];
    for (int i = 0; i < 1000 && delivered.size() < payload.size(); ++i) {
        auto got = ::read(sink.b.get(), chunk, sizeof chunk);
        if (got <= 0) break;
        delivered.append(chunk, static_cast<std::size_t>(got));
    }
    EXPECT_EQ(delivered, payload);
    EXPECT_EQ(lane->buffersInUse(), 0u);
    EXPECT_EQ(flow.bytesForwarded(), payload.size());
}

TEST(BufferLane, ADryRingParksTheDirectionUntilBuffersReturn) {
    TestRing ring;
    std::string why;
    auto lane = makeLane(ring, 1, 16, why);
    if (!lane) GTEST_SKIP() << why;
    SocketPair source;
    BufferLaneFlow flow;
    lane->armRecv(flow, SocketRef{source.a.get()}, tagOf(5));
    ring.submit();
    ASSERT_EQ(::write(source.b.get(), "0123456789abcdefXYZ", 19), 19);
    auto first = ring.next();
    ASSERT_TRUE(first);
    if (first->res == -EINVAL) GTEST_SKIP() << "no multishot IORING_OP_RECV here (kernel 6.0)";
    ASSERT_EQ(lane->onRecv(flow, first->res, first->flags), RecvOutcome::Data);
    auto dry = ring.next();
    ASSERT_TRUE(dry);
    ASSERT_EQ(lane->onRecv(flow, dry->res, dry->flags), RecvOutcome::NoBuffers);
    EXPECT_EQ(lane->dryEvents(), 1u);
    lane->park(tagOf(5));
    int rearmed = 0;
    lane->rearmParked([&](CompletionTag) { ++rearmed; });
    EXPECT_EQ(rearmed, 0) << "re-armed while no buffer is free";
    EXPECT_TRUE(lane->anyParked());
    auto sent = flow.sendSlice();
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(lane->bytes(sent).data()), sent.length),
              "0123456789abcdef");
    flow.recordSendStarted(sent.length);
    flow.recordSend(sent.length, sent.length);  // as if sent
    lane->giveBackSent(flow);
    lane->rearmParked([&](CompletionTag tag) {
        EXPECT_EQ(tag, tagOf(5));
        ++rearmed;
        lane->armRecv(flow, SocketRef{source.a.get()}, tag);
        ring.submit();
    });
    EXPECT_EQ(rearmed, 1);
    auto rest = ring.next();
    ASSERT_TRUE(rest);
    ASSERT_EQ(lane->onRecv(flow, rest->res, rest->flags), RecvOutcome::Data);
    auto slice = flow.sendSlice();
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(lane->bytes(slice).data()), slice.length),
              "XYZ");
    lane->release(flow);
    EXPECT_EQ(lane->buffersInUse(), 0u);
}

}  // namespace
}  // namespace splicegate::test
