// The ring's fixed file table for connection sockets (datapath/SocketTable.h) on a real ring:
// operations on table entries reach the sockets; the table keeps a closed fd's socket open until
// the entries are emptied, which is why a released connection must empty them; a slot past the
// table's end stays on plain fds.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <span>
#include <string>

#include "datapath/SocketTable.h"
#include "tests/ring/BufferRingTestSupport.h"

namespace splicegate::test {
namespace {

CompletionTag tagOf(std::uint8_t op) {
    return CompletionTag::of(RingOwner::Test, op);
}

// The result of the next completion, which must carry `tag`.
int resultOf(TestRing& ring, CompletionTag tag) {
    auto cqe = ring.next();
    EXPECT_TRUE(cqe) << "no completion for tag op " << int{tag.op};
    if (!cqe) return -ETIME;
    EXPECT_EQ(CompletionTag::decode(cqe->user_data), tag);
    return cqe->res;
}

// True when `fd`'s peer has closed: a read returns 0 within `timeoutMs`.
bool peerClosed(int fd, int timeoutMs) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, timeoutMs) <= 0) return false;
    char byte;
    return ::read(fd, &byte, 1) == 0;
}

TEST(SocketTable, EntriesCarryRecvAndSendAndKeepAClosedFdsSocketUntilEmptied) {
    TestRing ring;
    SocketTable table(ring.ops(), ring.registration(), 4);
    if (!table.enabled()) GTEST_SKIP() << "this kernel refused a sparse fixed file table";
    SocketPair client, upstream;
    int sockets[2] = {client.a.get(), upstream.a.get()};
    ASSERT_TRUE(table.install(1, sockets, tagOf(100)));
    ring.submit();
    ASSERT_EQ(resultOf(ring, tagOf(100)), 2);

    const std::string request = "hello";
    SocketRef upstreamEntry{SocketTable::entry(1, 1), true};
    ring.ops().send(upstreamEntry.index, std::as_bytes(std::span(request)), MSG_NOSIGNAL, tagOf(1),
                    upstreamEntry.flags());
    ring.submit();
    ASSERT_EQ(resultOf(ring, tagOf(1)), static_cast<int>(request.size()));
    char got[16] = {};
    ASSERT_EQ(::read(upstream.b.get(), got, sizeof got), static_cast<ssize_t>(request.size()));
    EXPECT_EQ(std::string(got, request.size()), request);

    ASSERT_EQ(::write(client.b.get(), "ping", 4), 4);
    SocketRef clientEntry{SocketTable::entry(1, 0), true};
    char received[16] = {};
    // A plain recv into the test's memory: no RingOps operation (the lanes' is multishot).
    auto* recv = ring.sqe();
    io_uring_prep_recv(recv, clientEntry.index, received, sizeof received, 0);
    recv->flags |= clientEntry.flags().bits();
    io_uring_sqe_set_data64(recv, tagOf(2).encode());
    ring.submit();
    ASSERT_EQ(resultOf(ring, tagOf(2)), 4);
    EXPECT_EQ(std::string(received, 4), "ping");

    // Closing the fd alone does not end the socket: the table still holds it.
    client.a.reset();
    EXPECT_FALSE(peerClosed(client.b.get(), 100));
    table.remove(1, tagOf(101));
    ring.submit();
    EXPECT_GE(resultOf(ring, tagOf(101)), 0);
    EXPECT_TRUE(peerClosed(client.b.get(), 2000)) << "the emptied entry still held the socket";
}

TEST(SocketTable, ASlotPastTheTableQueuesNothingAndStaysOnPlainFds) {
    TestRing ring;
    SocketTable table(ring.ops(), ring.registration(), 2);
    if (!table.enabled()) GTEST_SKIP() << "this kernel refused a sparse fixed file table";
    SocketPair pair;
    int sockets[2] = {pair.a.get(), pair.b.get()};
    EXPECT_TRUE(table.covers(1));
    EXPECT_FALSE(table.covers(2));
    EXPECT_FALSE(table.install(2, sockets, tagOf(7)));
    table.remove(2, tagOf(8));
    EXPECT_EQ(io_uring_sq_ready(&ring.get()), 0u);
}

// The kernel refuses a table larger than RLIMIT_NOFILE; the table shrinks to fit instead.
TEST(SocketTable, ATableLargerThanTheFdLimitShrinksToFit) {
    rlimit saved{};
    ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
    rlimit low = saved;
    low.rlim_cur = 256;
    if (saved.rlim_max < low.rlim_cur) GTEST_SKIP() << "hard fd limit under 256";
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
    TestRing ring;
    SocketTable table(ring.ops(), ring.registration(), 1000);
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
    if (!table.enabled()) GTEST_SKIP() << "this kernel refused a sparse fixed file table";
    EXPECT_TRUE(table.covers(127));
    EXPECT_FALSE(table.covers(128));
}

}  // namespace
}  // namespace splicegate::test
