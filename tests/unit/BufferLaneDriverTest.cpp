// The buffer lane (datapath/BufferLaneDriver.h behind a LaneSwitch, as the worker drives it)
// over tests/support/FakeRing.h, no kernel ring: the SQEs it prepares (owner, op, fds, buffer
// group, flags, the bytes a send names), and what it makes of recv and send completions the test
// delivers in the order it picks. The test plays the kernel's part of the provided buffer ring:
// it takes the next buffer the lane published (FakeRegistration::fill), puts the "received"
// bytes in it and names it in the recv completion. The sockets are real (socket pairs), so the
// EOF passed on by shutdown() can be seen; no byte moves through them.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <vector>

#include "common/Error.h"
#include "datapath/BufferLaneDriver.h"
#include "datapath/LaneSwitch.h"
#include "tests/support/FakeRing.h"

namespace splicegate {
namespace {

using test::FakeRegistration;
using test::FakeRing;
using test::PreparedOp;

constexpr unsigned kEntries = 8;
constexpr std::size_t kBufferSize = 4096;
constexpr unsigned kConnectionSlots = 16;
constexpr auto kC2u = Direction::ClientToUpstream;
constexpr auto kU2c = Direction::UpstreamToClient;

std::span<const std::byte> bytesOf(std::string_view text) {
    return std::as_bytes(std::span(text.data(), text.size()));
}

std::string textAt(const void* address, std::size_t length) {
    return std::string(static_cast<const char*>(address), length);
}

struct SocketPair {
    UniqueFd ours;    // the relay's end
    UniqueFd theirs;  // the peer's
    SocketPair() {
        int fds[2];
        checkSys(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds),
                 "socketpair");
        ours.reset(fds[0]);
        theirs.reset(fds[1]);
    }
};

// The peer's end saw the relay's FIN: a read returns 0 (without a FIN it would block).
bool sawEof(const SocketPair& pair) {
    char byte;
    return ::recv(pair.theirs.get(), &byte, 1, MSG_DONTWAIT) == 0;
}

class BufferLaneDriverTest : public ::testing::Test {
  protected:
    // `socketTable`: whether the ring's fixed file table can be registered.
    void make(bool socketTable = true) {
        if (!socketTable) registration.refuseFiles(-EINVAL);
        lanes = std::make_unique<LaneSwitch>(LaneKind::Buffer, kBufferSize);
        lanes->own(LaneKind::Buffer,
                   std::make_unique<BufferLaneDriver>(ring, registration, kEntries, kBufferSize,
                                                      nullptr, *stats, kConnectionSlots, *lanes));
        io.id = 42;
        io.slot = 3;
        io.generation = 9;
        io.relaying = true;
        io.counters = &counters;
        io.client = std::move(client.ours);
        io.upstream = std::move(upstream.ours);
        ASSERT_TRUE(lanes->start(io));
    }

    static CompletionTag tagOf(const ConnectionIo& io, Direction d, BufferLaneOp op) {
        return io.tag(d, RingOwner::BufferLane).withOp(op);
    }
    CompletionTag tagOf(Direction d, BufferLaneOp op) const { return tagOf(io, d, op); }

    // Hands every queued completion to the lanes, as the worker does for the owners Mover and
    // BufferLane; the last one's result.
    StepResult drain() {
        StepResult last{Next::Wait};
        ring.drainCompletions([&](const io_uring_cqe& cqe) {
            auto tag = CompletionTag::decode(cqe.user_data);
            EXPECT_EQ(tag.owner, RingOwner::BufferLane);
            EXPECT_TRUE(lanes->owns(tag.owner));
            last = lanes->complete(io, tag, MoveCompletion{cqe.res, cqe.flags});
        });
        return last;
    }
    // Completes the pending operation tagged `tag` and hands the completion over.
    StepResult deliver(CompletionTag tag, int result, std::uint32_t cqeFlags = 0) {
        EXPECT_TRUE(ring.complete(tag, result, cqeFlags))
            << "nothing pending with op " << int{tag.op} << " direction " << int{tag.direction};
        return drain();
    }
    // `text` arrives for direction `d`'s multishot recv, in the buffer the kernel would pick.
    StepResult arrive(Direction d, std::string_view text, bool more = true) {
        auto flags = registration.fill(BufferLane::kBufferGroup, bytesOf(text), more);
        EXPECT_TRUE(flags) << "the buffer ring has no buffer to fill";
        return deliver(tagOf(d, BufferLaneOp::Recv), static_cast<int>(text.size()),
                       flags.value_or(0));
    }
    const PreparedOp* pending(Direction d, BufferLaneOp op) const {
        return ring.findPending(tagOf(d, op));
    }
    std::size_t preparedSinceClear(RingOp kind) const {
        std::size_t count = 0;
        for (const auto& op : ring.preparedSinceClear())
            if (op.op == kind) ++count;
        return count;
    }
    // Buffers back in the ring, free for the kernel to fill.
    unsigned freeBuffers() const { return registration.available(BufferLane::kBufferGroup); }

    static int entry(unsigned side) { return SocketTable::entry(3, side); }

    FakeRing ring;
    FakeRegistration registration;
    std::unique_ptr<WorkerStats> stats = std::make_unique<WorkerStats>();
    RouteCounters counters;
    SocketPair client, upstream;
    ConnectionIo io;
    std::unique_ptr<LaneSwitch> lanes;
};

TEST_F(BufferLaneDriverTest, StartArmsARecvPerDirectionOnTheSocketTableEntries) {
    make();
    EXPECT_TRUE(registration.hasBufferRing(BufferLane::kBufferGroup));
    EXPECT_EQ(registration.fileEntries(), 2 * kConnectionSlots);
    EXPECT_EQ(freeBuffers(), kEntries) << "every buffer published, none taken";

    const auto& ops = ring.ops();
    ASSERT_EQ(ops.size(), 3u);
    // The table update goes first: the kernel issues SQEs in order, so the recvs find it.
    EXPECT_EQ(ops[0].op, RingOp::FilesUpdate);
    EXPECT_EQ(ops[0].tag, tagOf(kC2u, BufferLaneOp::SocketTable));
    EXPECT_EQ(ops[0].length, 2u);
    EXPECT_EQ(ops[0].offset, static_cast<std::uint64_t>(entry(0)));
    EXPECT_TRUE(io.inSocketTable);
    EXPECT_EQ(io.tableFds[0], io.client.get());
    EXPECT_EQ(io.tableFds[1], io.upstream.get());

    for (auto [index, d, side] : {std::tuple{1u, kC2u, 0u}, std::tuple{2u, kU2c, 1u}}) {
        const auto& recv = ops[index];
        EXPECT_EQ(recv.op, RingOp::RecvMultishot);
        EXPECT_EQ(recv.tag.owner, RingOwner::BufferLane);
        EXPECT_EQ(recv.tag, tagOf(d, BufferLaneOp::Recv));
        EXPECT_EQ(recv.tag.slot, 3u);
        EXPECT_EQ(recv.tag.generation, 9u);
        EXPECT_EQ(recv.fd, entry(side)) << "the direction's source, as a table entry";
        EXPECT_TRUE(recv.flags.has(SqeFlag::FixedFile));
        EXPECT_EQ(recv.bufferGroup, BufferLane::kBufferGroup);
    }
    EXPECT_EQ(io.movesInFlight(), 2u) << "the two recvs; the table update is not counted";
}

TEST_F(BufferLaneDriverTest, WithoutASocketTableTheOperationsNamePlainFds) {
    make(false);
    const auto& ops = ring.ops();
    ASSERT_EQ(ops.size(), 2u) << "no table update";
    EXPECT_FALSE(io.inSocketTable);
    EXPECT_EQ(ops[0].op, RingOp::RecvMultishot);
    EXPECT_EQ(ops[0].fd, io.client.get());
    EXPECT_FALSE(ops[0].flags.has(SqeFlag::FixedFile));
    EXPECT_EQ(ops[1].fd, io.upstream.get());

    arrive(kC2u, "plain");
    const auto* send = pending(kC2u, BufferLaneOp::Send);
    ASSERT_NE(send, nullptr);
    EXPECT_EQ(send->fd, io.upstream.get());
    EXPECT_FALSE(send->flags.has(SqeFlag::FixedFile));
}

TEST_F(BufferLaneDriverTest, ReceivedBytesAreSentFromTheBufferTheyArrivedIn) {
    make();
    EXPECT_EQ(arrive(kC2u, "hello").next, Next::Wait) << "waits for its send";
    EXPECT_EQ(freeBuffers(), kEntries - 1) << "the buffer is held";
    EXPECT_EQ(stats->buffersInUse.get(), 1u);

    const auto* send = pending(kC2u, BufferLaneOp::Send);
    ASSERT_NE(send, nullptr);
    EXPECT_EQ(send->op, RingOp::Send);
    EXPECT_EQ(send->tag.owner, RingOwner::BufferLane);
    EXPECT_EQ(send->fd, entry(1)) << "to the upstream's socket";
    EXPECT_TRUE(send->flags.has(SqeFlag::FixedFile));
    EXPECT_EQ(send->opFlags, MSG_NOSIGNAL);
    ASSERT_EQ(send->length, 5u);
    EXPECT_EQ(textAt(send->address, send->length), "hello") << "no copy: the provided buffer";
    EXPECT_NE(pending(kC2u, BufferLaneOp::Recv), nullptr) << "the multishot stays armed";

    EXPECT_EQ(deliver(tagOf(kC2u, BufferLaneOp::Send), 5).next, Next::Wait);
    EXPECT_EQ(freeBuffers(), kEntries) << "fully sent: back in the ring";
    EXPECT_EQ(stats->buffersInUse.get(), 0u);
    EXPECT_EQ(counters.bytesC2u.get(), 5u);
    EXPECT_EQ(counters.laneBytes[static_cast<int>(LaneKind::Buffer)].get(), 5u);
    EXPECT_EQ(io.movesInFlight(), 2u);
}

TEST_F(BufferLaneDriverTest, AShortSendWaitsForTheSinkThenSendsTheRest) {
    make();
    arrive(kU2c, "0123456789");
    const auto* send = pending(kU2c, BufferLaneOp::Send);
    ASSERT_NE(send, nullptr);
    EXPECT_EQ(send->fd, entry(0)) << "to the client's socket";
    const void* start = send->address;

    ring.clearRecord();
    EXPECT_EQ(deliver(tagOf(kU2c, BufferLaneOp::Send), 4).next, Next::Wait);
    EXPECT_EQ(freeBuffers(), kEntries - 1) << "six bytes of it are still to go";
    const auto* writable = pending(kU2c, BufferLaneOp::Writable);
    ASSERT_NE(writable, nullptr) << "a full sink is waited for, not sent to in a loop";
    EXPECT_EQ(writable->op, RingOp::PollAdd);
    EXPECT_EQ(writable->fd, entry(0));
    EXPECT_TRUE(writable->flags.has(SqeFlag::FixedFile));
    EXPECT_EQ(writable->opFlags, POLLOUT);
    EXPECT_EQ(preparedSinceClear(RingOp::Send), 0u);

    deliver(tagOf(kU2c, BufferLaneOp::Writable), POLLOUT);
    send = pending(kU2c, BufferLaneOp::Send);
    ASSERT_NE(send, nullptr);
    ASSERT_EQ(send->length, 6u);
    EXPECT_EQ(send->address, static_cast<const std::byte*>(start) + 4);
    EXPECT_EQ(textAt(send->address, send->length), "456789");
    deliver(tagOf(kU2c, BufferLaneOp::Send), 6);
    EXPECT_EQ(counters.bytesU2c.get(), 10u);
    EXPECT_EQ(freeBuffers(), kEntries);
}

TEST_F(BufferLaneDriverTest, AResetSourceClosesAsTheSourcesReset) {
    make();
    auto result = deliver(tagOf(kC2u, BufferLaneOp::Recv), -ECONNRESET);
    EXPECT_EQ(result.next, Next::Close);
    EXPECT_EQ(result.verdict.reason, CloseReason::ClientReset);
    EXPECT_TRUE(result.verdict.resetPeers);
}

TEST_F(BufferLaneDriverTest, AResetSinkClosesAsTheSinksReset) {
    make();
    arrive(kC2u, "request");
    auto result = deliver(tagOf(kC2u, BufferLaneOp::Send), -ECONNRESET);
    EXPECT_EQ(result.next, Next::Close);
    EXPECT_EQ(result.verdict.reason, CloseReason::UpstreamReset);
    EXPECT_TRUE(result.verdict.resetPeers);
    EXPECT_EQ(counters.bytesC2u.get(), 0u);
}

TEST_F(BufferLaneDriverTest, AMultishotThatEndsWithoutMoreIsArmedAgainOnceItsBytesAreSent) {
    make();
    ring.clearRecord();
    arrive(kC2u, "abc", false);
    EXPECT_EQ(pending(kC2u, BufferLaneOp::Recv), nullptr) << "the kernel ended it";
    EXPECT_EQ(preparedSinceClear(RingOp::RecvMultishot), 0u) << "not while bytes are held";
    ASSERT_NE(pending(kC2u, BufferLaneOp::Send), nullptr);

    deliver(tagOf(kC2u, BufferLaneOp::Send), 3);
    EXPECT_EQ(preparedSinceClear(RingOp::RecvMultishot), 1u);
    const auto* recv = pending(kC2u, BufferLaneOp::Recv);
    ASSERT_NE(recv, nullptr);
    EXPECT_EQ(recv->fd, entry(0));
    EXPECT_EQ(recv->bufferGroup, BufferLane::kBufferGroup);
    EXPECT_EQ(io.movesInFlight(), 2u);
}

TEST_F(BufferLaneDriverTest, EndOfStreamIsPassedOnOnceEverythingWasSentAndBothEndsClose) {
    make();
    arrive(kC2u, "tail");
    // The EOF completes before the send submitted ahead of it.
    EXPECT_EQ(deliver(tagOf(kC2u, BufferLaneOp::Recv), 0).next, Next::Wait);
    EXPECT_FALSE(sawEof(upstream)) << "four bytes are still being sent";
    EXPECT_EQ(deliver(tagOf(kC2u, BufferLaneOp::Send), 4).next, Next::Wait);
    EXPECT_TRUE(sawEof(upstream)) << "shutdown(SHUT_WR) after the last byte";
    EXPECT_FALSE(sawEof(client));
    EXPECT_TRUE(io.at(kC2u).finished());

    auto result = deliver(tagOf(kU2c, BufferLaneOp::Recv), 0);
    EXPECT_TRUE(sawEof(client));
    EXPECT_EQ(result.next, Next::Close);
    EXPECT_EQ(result.verdict.reason, CloseReason::Closed);
    EXPECT_FALSE(result.verdict.resetPeers);
    EXPECT_EQ(io.movesInFlight(), 0u);
}

TEST_F(BufferLaneDriverTest, CompletionsInAnotherOrderThanSubmittedKeepEachDirectionsOrder) {
    make();
    arrive(kC2u, "first");
    arrive(kU2c, "reply");
    // The c2u send is in flight; more bytes arrive for it: held, not sent beside it.
    arrive(kC2u, "second");
    EXPECT_EQ(freeBuffers(), kEntries - 3);
    std::size_t sendsPending = 0;
    for (const auto& op : ring.pending())
        if (op.tag == tagOf(kC2u, BufferLaneOp::Send)) ++sendsPending;
    EXPECT_EQ(sendsPending, 1u) << "one send in flight per direction keeps the order";

    // The later direction's send completes first.
    deliver(tagOf(kU2c, BufferLaneOp::Send), 5);
    EXPECT_EQ(counters.bytesU2c.get(), 5u);
    const auto* send = pending(kC2u, BufferLaneOp::Send);
    ASSERT_NE(send, nullptr);
    EXPECT_EQ(textAt(send->address, send->length), "first");
    deliver(tagOf(kC2u, BufferLaneOp::Send), 5);
    send = pending(kC2u, BufferLaneOp::Send);
    ASSERT_NE(send, nullptr);
    EXPECT_EQ(textAt(send->address, send->length), "second");
    deliver(tagOf(kC2u, BufferLaneOp::Send), 6);
    EXPECT_EQ(counters.bytesC2u.get(), 11u);
    EXPECT_EQ(freeBuffers(), kEntries);
}

TEST_F(BufferLaneDriverTest, ADryRingParksTheDirectionUntilTheTurnEnds) {
    make();
    ring.clearRecord();
    deliver(tagOf(kC2u, BufferLaneOp::Recv), -ENOBUFS);
    EXPECT_EQ(stats->bufferRingDry.get(), 1u);
    EXPECT_EQ(preparedSinceClear(RingOp::RecvMultishot), 0u) << "not re-armed in a tight loop";
    lanes->afterTurn(FinderOf([this](CompletionTag tag) noexcept -> ConnectionIo* {
        return tag.slot == io.slot && tag.generation == io.generation ? &io : nullptr;
    }));
    EXPECT_EQ(preparedSinceClear(RingOp::RecvMultishot), 1u);
    EXPECT_NE(pending(kC2u, BufferLaneOp::Recv), nullptr);
}

TEST_F(BufferLaneDriverTest, AConnectionClosedMidFlightGivesEveryBufferBackOnRelease) {
    make();
    arrive(kC2u, "in flight");
    arrive(kC2u, "held");
    arrive(kU2c, "other way");
    EXPECT_EQ(freeBuffers(), kEntries - 3);

    // The worker closes it: its fds' operations are cancelled; what completes is only booked.
    io.relaying = false;
    ring.clearRecord();
    EXPECT_EQ(deliver(tagOf(kC2u, BufferLaneOp::Send), -ECANCELED).next, Next::Wait);
    EXPECT_EQ(deliver(tagOf(kU2c, BufferLaneOp::Recv), -ECANCELED).next, Next::Wait);
    EXPECT_EQ(deliver(tagOf(kU2c, BufferLaneOp::Send), 9).next, Next::Wait);
    EXPECT_EQ(deliver(tagOf(kC2u, BufferLaneOp::Recv), -ECANCELED).next, Next::Wait);
    EXPECT_TRUE(ring.preparedSinceClear().empty()) << "nothing new once closing";
    EXPECT_EQ(io.movesInFlight(), 0u);
    EXPECT_EQ(freeBuffers(), kEntries - 2) << "held until release (an audit write may read them)";

    lanes->release(io);
    EXPECT_EQ(freeBuffers(), kEntries);
    EXPECT_EQ(stats->buffersInUse.get(), 0u);
    auto emptied = ring.preparedSinceClear();
    ASSERT_EQ(emptied.size(), 1u);
    EXPECT_EQ(emptied[0].op, RingOp::FilesUpdate) << "the table's references kept the sockets";
    EXPECT_EQ(emptied[0].tag, tagOf(kC2u, BufferLaneOp::SocketTable));
    EXPECT_EQ(emptied[0].offset, static_cast<std::uint64_t>(entry(0)));
    EXPECT_FALSE(io.inSocketTable);

    // A recv completion that comes after the connection is gone still names a buffer.
    auto flags = registration.fill(BufferLane::kBufferGroup, bytesOf("late"), false);
    ASSERT_TRUE(flags);
    EXPECT_EQ(freeBuffers(), kEntries - 1);
    lanes->dropCompletion(tagOf(kC2u, BufferLaneOp::Recv), MoveCompletion{4, *flags});
    EXPECT_EQ(freeBuffers(), kEntries);
}

TEST_F(BufferLaneDriverTest, ARefusedBufferRingFailsTheSetUpNamingTheCall) {
    registration.refuseBufferRings(-EINVAL);
    LaneSwitch rule(LaneKind::Buffer, kBufferSize);
    try {
        BufferLaneDriver driver(ring, registration, kEntries, kBufferSize, nullptr, *stats,
                                kConnectionSlots, rule);
        ADD_FAILURE() << "no exception";
    } catch (const std::system_error& error) {
        EXPECT_EQ(error.code().value(), EINVAL);
        EXPECT_NE(std::string(error.what()).find("io_uring_register_buf_ring"), std::string::npos)
            << error.what();
    }
    EXPECT_EQ(registration.fileEntries(), 0u) << "nothing left registered";
}

TEST_F(BufferLaneDriverTest, ItsRegistrationsEndWithIt) {
    make();
    lanes.reset();
    EXPECT_FALSE(registration.hasBufferRing(BufferLane::kBufferGroup));
    EXPECT_EQ(registration.fileEntries(), 0u);
}

}  // namespace
}  // namespace splicegate
