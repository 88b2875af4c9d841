// What the relay reads from a TCP socket's state to tell a peer that reset from one that closed
// in order (relay/SocketOptions.h), on real loopback sockets.
#include <gtest/gtest.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <chrono>
#include <thread>

#include "relay/SocketOptions.h"
#include "tests/support/Sockets.h"

namespace splicegate::test {
namespace {
using std::chrono::milliseconds;

struct ConnectedPair {
    UniqueFd near;  // connected
    UniqueFd far;   // accepted
};

ConnectedPair connectPair() {
    uint16_t port = 0;
    UniqueFd listener = listenTcp(port);
    int error = 0;
    ConnectedPair pair;
    pair.near = connectTcp(port, error);
    pair.far.reset(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    return pair;
}

// The near socket's state once it leaves `from` (bounded: 2 s).
int stateAfter(int fd, int from) {
    for (int i = 0; i < 400 && tcpStateOf(fd) == from; ++i)
        std::this_thread::sleep_for(milliseconds(5));
    return tcpStateOf(fd);
}

// The relay's half-closed check met this under load: it had sent its FIN, the upstream answered
// and closed, and the socket read TCP_CLOSE with the answer still unread. That is no reset.
TEST(SocketStateTest, AnOrderlyCloseAfterOurFinIsNoResetAndItsBytesWait) {
    auto pair = connectPair();
    ASSERT_TRUE(pair.near && pair.far);
    ASSERT_EQ(::shutdown(pair.near.get(), SHUT_WR), 0);
    char byte = 0;
    setIoTimeout(pair.far.get(), milliseconds(2000));
    ASSERT_EQ(::recv(pair.far.get(), &byte, 1, 0), 0) << "the far side reads our FIN";
    ASSERT_EQ(::send(pair.far.get(), "done", 4, MSG_NOSIGNAL), 4);
    pair.far.reset();

    int state = stateAfter(pair.near.get(), TCP_FIN_WAIT2);
    EXPECT_EQ(state, TCP_CLOSE) << "the kernel hands TIME_WAIT to a mini socket";
    EXPECT_FALSE(closedByReset(pair.near.get(), state));
    char reply[8] = {};
    EXPECT_EQ(::recv(pair.near.get(), reply, sizeof reply, 0), 4);
    EXPECT_EQ(std::string(reply, 4), "done");
}

TEST(SocketStateTest, AResetIsOneAndItsErrorIsTaken) {
    auto pair = connectPair();
    ASSERT_TRUE(pair.near && pair.far);
    resetClose(pair.far);
    int state = stateAfter(pair.near.get(), TCP_ESTABLISHED);
    EXPECT_EQ(state, TCP_CLOSE);
    EXPECT_TRUE(closedByReset(pair.near.get(), state));
    EXPECT_FALSE(closedByReset(pair.near.get(), state)) << "the pending error was taken";
    EXPECT_FALSE(closedByReset(pair.near.get(), TCP_ESTABLISHED));
}

}  // namespace
}  // namespace splicegate::test
