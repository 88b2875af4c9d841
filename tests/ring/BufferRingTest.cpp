// The provided buffer ring against a real io_uring over socket pairs: which buffer a multishot
// recv picked, when it stays armed, back-pressure when the ring runs dry, end of stream,
// cancellation, and that a socket with nothing to read holds no buffer.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/Error.h"
#include "tests/ring/BufferRingTestSupport.h"
#include "tests/support/Sockets.h"

namespace splicegate::test {
namespace {

constexpr std::uint16_t kGroup = 7;

std::string_view text(std::span<const std::byte> bytes) {
    return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

void writeAll(int fd, std::string_view data) {
    ASSERT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
}

#define MAKE_RING_OR_SKIP(name, ring, entries, size)                         \
    std::string skipWhy_##name;                                              \
    auto name = makeBufferRing(ring, kGroup, entries, size, skipWhy_##name); \
    if (!name) GTEST_SKIP() << skipWhy_##name

// A first completion of -EINVAL means the kernel has no multishot recv (6.0).
#define SKIP_IF_NO_MULTISHOT(cqe) \
    if ((cqe).res == -EINVAL) GTEST_SKIP() << "no multishot IORING_OP_RECV here (kernel 6.0)"

TEST(BufferRing, RefusesSizesTheKernelCannotTakeNamingTheOption) {
    TestRing ring;
    try {
        BufferRing bad(ring.registration(), kGroup, 1000, 4096);
        FAIL() << "1000 entries accepted";
    } catch (const UsageError& error) {
        EXPECT_NE(std::string(error.what()).find("--buffer-ring-entries 1000"), std::string::npos)
            << error.what();
    }
    EXPECT_THROW(BufferRing(ring.registration(), kGroup, 0, 4096), UsageError);
    EXPECT_THROW(BufferRing(ring.registration(), kGroup, 65536, 4096), UsageError);
    try {
        BufferRing bad(ring.registration(), kGroup, 16, 0);
        FAIL() << "buffer size 0 accepted";
    } catch (const UsageError& error) {
        EXPECT_NE(std::string(error.what()).find("--buffer-size 0"), std::string::npos)
            << error.what();
    }
}

TEST(BufferRing, MultishotRecvFillsAPickedBufferAndStaysArmed) {
    TestRing ring;
    MAKE_RING_OR_SKIP(buffers, ring, 8, 4096);
    SocketPair pair;
    ring.armRecv(pair.a.get(), kGroup, 42);

    writeAll(pair.b.get(), "hello");
    auto first = ring.next();
    ASSERT_TRUE(first);
    SKIP_IF_NO_MULTISHOT(*first);
    EXPECT_EQ(first->user_data, 42u);
    ASSERT_EQ(first->res, 5);
    EXPECT_TRUE(first->flags & IORING_CQE_F_MORE);
    auto id = BufferRing::bufferOf(first->flags);
    ASSERT_TRUE(id);
    auto bytes = buffers->take(*id, static_cast<std::size_t>(first->res));
    EXPECT_EQ(text(bytes), "hello");
    EXPECT_EQ(buffers->inUse(), 1u);

    // Still armed: the next message needs no new SQE, and lands in another buffer while the
    // first is still held.
    writeAll(pair.b.get(), "world!");
    auto second = ring.next();
    ASSERT_TRUE(second);
    ASSERT_EQ(second->res, 6);
    EXPECT_TRUE(second->flags & IORING_CQE_F_MORE);
    auto secondId = BufferRing::bufferOf(second->flags);
    ASSERT_TRUE(secondId);
    EXPECT_NE(*secondId, *id);
    EXPECT_EQ(text(buffers->take(*secondId, 6)), "world!");
    EXPECT_EQ(text(bytes), "hello");  // untouched while held
    buffers->giveBack(*id);
    buffers->giveBack(*secondId);
    EXPECT_EQ(buffers->inUse(), 0u);
}

TEST(BufferRing, HeldBuffersAreDistinctAndComeBackAfterGiveBack) {
    TestRing ring;
    MAKE_RING_OR_SKIP(buffers, ring, 4, 64);
    SocketPair pair;
    ring.armRecv(pair.a.get(), kGroup, 1);
    std::set<std::uint16_t> held;
    for (int round = 0; round < 3; ++round) {
        // Four messages fill all four buffers; giving them back lets the next round use them.
        for (int i = 0; i < 4; ++i) {
            std::string message = "r" + std::to_string(round) + "m" + std::to_string(i);
            writeAll(pair.b.get(), message);
            auto cqe = ring.next();
            ASSERT_TRUE(cqe);
            SKIP_IF_NO_MULTISHOT(*cqe);
            ASSERT_EQ(cqe->res, static_cast<int>(message.size()));
            auto id = BufferRing::bufferOf(cqe->flags);
            ASSERT_TRUE(id);
            EXPECT_LT(*id, 4u);
            EXPECT_TRUE(held.insert(*id).second) << "buffer " << *id << " handed out twice";
            EXPECT_EQ(text(buffers->take(*id, message.size())), message);
        }
        EXPECT_EQ(buffers->inUse(), 4u);
        for (auto id : held) buffers->giveBack(id);
        held.clear();
        EXPECT_EQ(buffers->inUse(), 0u);
    }
}

// A dry ring ends the multishot with -ENOBUFS (no IORING_CQE_F_MORE); the bytes stay in the
// socket, and once buffers are back a re-armed recv delivers them, in order, none lost.
TEST(BufferRing, DryRingIsBackPressureThenReplenishAndRearmDeliversEverything) {
    TestRing ring;
    MAKE_RING_OR_SKIP(buffers, ring, 2, 64);
    SocketPair pair;
    std::string sent;
    for (int i = 0; sent.size() < 1000; ++i) sent += "<" + std::to_string(i) + ">";
    writeAll(pair.b.get(), sent);
    ::shutdown(pair.b.get(), SHUT_WR);

    std::string received;
    std::vector<std::uint16_t> held;
    int dry = 0;
    bool armed = false;
    bool eof = false;
    for (int turn = 0; turn < 1000 && !eof; ++turn) {
        if (!armed) {
            ring.armRecv(pair.a.get(), kGroup, 9);
            armed = true;
        }
        auto cqe = ring.next();
        ASSERT_TRUE(cqe) << "no completion after " << received.size() << " bytes";
        SKIP_IF_NO_MULTISHOT(*cqe);
        if (!(cqe->flags & IORING_CQE_F_MORE)) armed = false;
        if (cqe->res == -ENOBUFS) {
            EXPECT_FALSE(cqe->flags & IORING_CQE_F_MORE) << "-ENOBUFS must end the multishot";
            EXPECT_FALSE(BufferRing::bufferOf(cqe->flags));
            EXPECT_EQ(buffers->inUse(), 2u) << "dry only while every buffer is held";
            ++dry;
            for (auto id : held) buffers->giveBack(id);  // the sender caught up
            held.clear();
            continue;
        }
        ASSERT_GE(cqe->res, 0) << errnoText(-cqe->res);
        if (cqe->res == 0) {
            eof = true;
            break;
        }
        auto id = BufferRing::bufferOf(cqe->flags);
        ASSERT_TRUE(id);
        received += text(buffers->take(*id, static_cast<std::size_t>(cqe->res)));
        held.push_back(*id);
    }
    EXPECT_TRUE(eof);
    EXPECT_GT(dry, 0) << "a ring of two 64-byte buffers never ran dry on 1000 bytes";
    EXPECT_EQ(received, sent);
    for (auto id : held) buffers->giveBack(id);
    EXPECT_EQ(buffers->inUse(), 0u);
}

// Only a window of free buffers is in the ring, topped up with the buffers given back last: a
// light load keeps reusing a few hundred buffers of a large ring instead of cycling through
// (and making resident) all of them. A dry ring widens the window.
TEST(BufferRing, LightLoadReusesAWindowOfBuffersAndADryRingWidensIt) {
    TestRing ring;
    MAKE_RING_OR_SKIP(buffers, ring, 4096, 64);
    EXPECT_EQ(buffers->window(), 128u);
    SocketPair pair;
    ring.armRecv(pair.a.get(), kGroup, 5);
    std::set<std::uint16_t> seen;
    for (int i = 0; i < 3000; ++i) {
        writeAll(pair.b.get(), "x");
        auto cqe = ring.next();
        ASSERT_TRUE(cqe);
        SKIP_IF_NO_MULTISHOT(*cqe);
        ASSERT_EQ(cqe->res, 1) << errnoText(-cqe->res);
        if (!(cqe->flags & IORING_CQE_F_MORE)) ring.armRecv(pair.a.get(), kGroup, 5);
        auto id = BufferRing::bufferOf(cqe->flags);
        ASSERT_TRUE(id);
        buffers->take(*id, 1);
        seen.insert(*id);
        buffers->giveBack(*id);
    }
    EXPECT_LE(seen.size(), 129u) << "3,000 one-at-a-time recvs went round the whole ring";
    buffers->widen();
    EXPECT_EQ(buffers->window(), 256u);
    for (int i = 0; i < 6; ++i) buffers->widen();
    EXPECT_EQ(buffers->window(), 4096u) << "never more than the ring holds";
}

// Pages of the buffers' mapping that are resident (mincore).
std::size_t residentPages(BufferRing& buffers) {
    const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    const std::size_t bytes = buffers.entries() * buffers.bufferSize();
    std::vector<unsigned char> present((bytes + page - 1) / page);
    if (::mincore(buffers.memory(0).data(), bytes, present.data()) != 0) return SIZE_MAX;
    std::size_t count = 0;
    for (auto flag : present) count += flag & 1;
    return count;
}

// Receives `count` one-byte messages one at a time and holds every buffer they filled; nothing
// when the kernel has no multishot recv.
std::optional<std::vector<std::uint16_t>> holdBuffers(TestRing& ring, BufferRing& buffers,
                                                      SocketPair& pair, std::size_t count) {
    std::vector<std::uint16_t> held;
    ring.armRecv(pair.a.get(), kGroup, 9);
    for (std::size_t i = 0; i < count; ++i) {
        writeAll(pair.b.get(), "x");
        auto cqe = ring.next();
        if (i == 0 && cqe && cqe->res == -EINVAL) return std::nullopt;
        if (!cqe || cqe->res != 1) {
            ADD_FAILURE() << "recv " << i << ": " << (cqe ? errnoText(-cqe->res) : "none");
            break;
        }
        auto id = BufferRing::bufferOf(cqe->flags);
        if (!id) break;
        buffers.take(*id, 1);
        held.push_back(*id);
        if (!(cqe->flags & IORING_CQE_F_MORE)) ring.armRecv(pair.a.get(), kGroup, 9);
    }
    ::shutdown(pair.b.get(), SHUT_WR);  // ends the multishot recv
    for (int i = 0; i < 10; ++i) {
        auto cqe = ring.next(1000);
        if (!cqe || !(cqe->flags & IORING_CQE_F_MORE)) break;
    }
    return held;
}

TEST(BufferRing, AfterABurstTrimGivesTheColdBuffersPagesBack) {
    TestRing ring;
    MAKE_RING_OR_SKIP(buffers, ring, 1024, 4096);
    SocketPair pair;
    auto burst = holdBuffers(ring, *buffers, pair, 600);
    if (!burst) GTEST_SKIP() << "no multishot IORING_OP_RECV here (kernel 6.0)";
    auto& held = *burst;
    ASSERT_EQ(held.size(), 600u);
    const auto afterBurst = residentPages(*buffers);
    EXPECT_GE(afterBurst, 600u);
    for (auto id : held) buffers->giveBack(id);

    EXPECT_EQ(buffers->trim(), 0u) << "the burst's peak was within the last interval";
    EXPECT_GE(buffers->trim(), 400u) << "the stack's cold end kept its pages";
    const auto afterTrim = residentPages(*buffers);
    // What stays: the ring's window and the stack's warm top (128 buffers each).
    EXPECT_LE(afterTrim, 2u * 128u + 8u) << "after the burst: " << afterBurst;
    EXPECT_EQ(buffers->trim(), 0u) << "released pages are not released twice";
}

TEST(BufferRing, TheWindowHalvesWhileThePeakStaysUnderAQuarterOfIt) {
    TestRing ring;
    MAKE_RING_OR_SKIP(buffers, ring, 1024, 4096);
    for (int i = 0; i < 3; ++i) buffers->widen();  // three dry rings
    ASSERT_EQ(buffers->window(), 1024u);
    for (unsigned expected : {512u, 256u}) {
        buffers->trim();
        EXPECT_EQ(buffers->window(), expected);
    }
    SocketPair pair;
    auto load = holdBuffers(ring, *buffers, pair, 100);
    if (!load) GTEST_SKIP() << "no multishot IORING_OP_RECV here (kernel 6.0)";
    auto& held = *load;
    ASSERT_EQ(held.size(), 100u);
    for (auto id : held) buffers->giveBack(id);
    buffers->trim();
    EXPECT_EQ(buffers->window(), 256u) << "100 in use is more than a quarter of 256";
    buffers->trim();
    EXPECT_EQ(buffers->window(), 128u);
    buffers->trim();
    EXPECT_EQ(buffers->window(), 128u) << "never below where it started";
}

TEST(BufferRing, EndOfStreamCompletesWithZeroEndsTheMultishotAndHoldsNoBuffer) {
    TestRing ring;
    MAKE_RING_OR_SKIP(buffers, ring, 4, 256);
    SocketPair pair;
    ring.armRecv(pair.a.get(), kGroup, 3);
    writeAll(pair.b.get(), "last words");
    ::shutdown(pair.b.get(), SHUT_WR);
    auto data = ring.next();
    ASSERT_TRUE(data);
    SKIP_IF_NO_MULTISHOT(*data);
    ASSERT_EQ(data->res, 10);
    auto id = BufferRing::bufferOf(data->flags);
    ASSERT_TRUE(id);
    buffers->take(*id, 10);
    buffers->giveBack(*id);
    auto end = ring.next();
    ASSERT_TRUE(end);
    EXPECT_EQ(end->res, 0);
    EXPECT_FALSE(end->flags & IORING_CQE_F_MORE);
    EXPECT_FALSE(BufferRing::bufferOf(end->flags)) << "an empty read must not take a buffer";
    EXPECT_EQ(buffers->inUse(), 0u);
}

// How a lane switch stops the buffer lane: cancelling the armed recv yields its final completion
// (-ECANCELED, no IORING_CQE_F_MORE); bytes that arrive afterwards stay in the socket.
TEST(BufferRing, CancelledRecvEndsWithAFinalCompletionAndLeavesLaterBytesInTheSocket) {
    TestRing ring;
    MAKE_RING_OR_SKIP(buffers, ring, 4, 256);
    SocketPair pair;
    ring.armRecv(pair.a.get(), kGroup, 77);
    writeAll(pair.b.get(), "before");
    auto before = ring.next();
    ASSERT_TRUE(before);
    SKIP_IF_NO_MULTISHOT(*before);
    ASSERT_EQ(before->res, 6);
    auto id = BufferRing::bufferOf(before->flags);
    ASSERT_TRUE(id);
    buffers->take(*id, 6);
    buffers->giveBack(*id);

    ring.ops().cancel(CompletionTag::decode(77), CompletionTag::decode(78));
    ring.submit();
    bool sawFinal = false;
    bool sawCancelResult = false;
    for (int i = 0; i < 2; ++i) {
        auto cqe = ring.next();
        ASSERT_TRUE(cqe);
        if (cqe->user_data == 78) {
            EXPECT_EQ(cqe->res, 0) << errnoText(-cqe->res);
            sawCancelResult = true;
        } else {
            EXPECT_EQ(cqe->user_data, 77u);
            EXPECT_EQ(cqe->res, -ECANCELED);
            EXPECT_FALSE(cqe->flags & IORING_CQE_F_MORE);
            EXPECT_FALSE(BufferRing::bufferOf(cqe->flags));
            sawFinal = true;
        }
    }
    EXPECT_TRUE(sawFinal && sawCancelResult);
    writeAll(pair.b.get(), "after");
    char rest[16];
    ASSERT_EQ(::read(pair.a.get(), rest, sizeof rest), 5);
    EXPECT_EQ(std::string_view(rest, 5), "after");
    EXPECT_FALSE(ring.ready()) << "a cancelled recv delivered more";
    EXPECT_EQ(buffers->inUse(), 0u);
}

// An armed recv takes a buffer only when bytes arrive: 64 idle sockets armed on a ring of four
// buffers leave all four for the sockets that do receive.
TEST(BufferRing, ArmedRecvOnAnIdleSocketHoldsNoBuffer) {
    TestRing ring;
    MAKE_RING_OR_SKIP(buffers, ring, 4, 128);
    std::vector<SocketPair> idle(64);
    for (std::size_t i = 0; i < idle.size(); ++i) ring.armRecv(idle[i].a.get(), kGroup, 1000 + i);
    std::vector<SocketPair> busy(4);
    for (std::size_t i = 0; i < busy.size(); ++i) ring.armRecv(busy[i].a.get(), kGroup, 2000 + i);
    EXPECT_FALSE(ring.ready());
    EXPECT_EQ(buffers->inUse(), 0u);
    for (auto& pair : busy) writeAll(pair.b.get(), "ping");
    std::set<std::uint64_t> answered;
    for (std::size_t i = 0; i < busy.size(); ++i) {
        auto cqe = ring.next();
        ASSERT_TRUE(cqe);
        SKIP_IF_NO_MULTISHOT(*cqe);
        ASSERT_EQ(cqe->res, 4) << "socket " << cqe->user_data << ": " << errnoText(-cqe->res);
        EXPECT_TRUE(cqe->flags & IORING_CQE_F_MORE);
        auto id = BufferRing::bufferOf(cqe->flags);
        ASSERT_TRUE(id);
        EXPECT_EQ(text(buffers->take(*id, 4)), "ping");
        answered.insert(cqe->user_data);
    }
    EXPECT_EQ(answered, (std::set<std::uint64_t>{2000, 2001, 2002, 2003}));
    EXPECT_EQ(buffers->inUse(), 4u);
    EXPECT_FALSE(ring.ready()) << "an idle socket completed";
}

TEST(BufferRing, MovedRingKeepsItsBuffersAndUnregistersOnce) {
    TestRing ring;
    MAKE_RING_OR_SKIP(buffers, ring, 2, 64);
    BufferRing moved(std::move(*buffers));
    buffers.reset();  // the moved-from owner unregisters nothing
    EXPECT_EQ(moved.groupId(), kGroup);
    SocketPair pair;
    ring.armRecv(pair.a.get(), kGroup, 5);
    writeAll(pair.b.get(), "still registered");
    auto cqe = ring.next();
    ASSERT_TRUE(cqe);
    SKIP_IF_NO_MULTISHOT(*cqe);
    ASSERT_EQ(cqe->res, 16) << errnoText(-cqe->res);
    auto id = BufferRing::bufferOf(cqe->flags);
    ASSERT_TRUE(id);
    EXPECT_EQ(text(moved.take(*id, 16)), "still registered");
    moved.giveBack(*id);
}

}  // namespace
}  // namespace splicegate::test

namespace splicegate::test {
namespace {

// A lane switch cancels a recv that keeps finding data (bulk): the cancel must still end it
// promptly, not once the sender stops.
TEST(BufferRing, CancelEndsARecvThatKeepsFindingData) {
    TestRing ring;
    MAKE_RING_OR_SKIP(buffers, ring, 64, 16384);
    SocketPair pair;
    std::atomic<bool> stop{false};
    std::thread writer([&] {
        std::string chunk(65536, 'x');
        auto until = Clock::now() + std::chrono::seconds(10);
        while (!stop && Clock::now() < until) {
            auto n = ::write(pair.b.get(), chunk.data(), chunk.size());
            if (n < 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
    });
    ring.armRecv(pair.a.get(), kGroup, 11);
    int before = 0, after = 0;
    bool cancelled = false, ended = false;
    for (int i = 0; i < 200000 && !ended; ++i) {
        auto cqe = ring.next();
        ASSERT_TRUE(cqe);
        if (cqe->user_data == 12) continue;  // the cancel's own result
        SKIP_IF_NO_MULTISHOT(*cqe);
        if (auto id = BufferRing::bufferOf(cqe->flags)) {
            buffers->take(*id, 0);
            buffers->giveBack(*id);
        }
        if (!(cqe->flags & IORING_CQE_F_MORE)) ended = true;
        (cancelled ? after : before)++;
        if (!cancelled && before == 100) {
            ring.ops().cancel(CompletionTag::decode(11), CompletionTag::decode(12));
            ring.submit();
            cancelled = true;
        }
    }
    stop = true;
    writer.join();
    EXPECT_TRUE(ended);
    EXPECT_LT(after, 1000) << "the recv went on for " << after << " completions after its cancel";
    std::cout << "[ info ] completions after the cancel: " << after << "\n";
}

}  // namespace
}  // namespace splicegate::test
