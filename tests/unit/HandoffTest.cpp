// The upgrade hand-off (relay/Handoff.h) in one process: sockets sent over a SOCK_SEQPACKET pair
// as the running daemon sends them arrive in InheritedSockets by kind and address; a connection
// queued on a listener before the hand-off is accepted from the received socket (the kernel's
// queue carries over: nothing is reset); unknown addresses get nothing; Ready reaches the sender.
// And ListenerSockets spreads handed-over sockets over the workers (i % workers).
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <cstdlib>
#include <string>

#include "common/UniqueFd.h"
#include "relay/Handoff.h"
#include "relay/ListenerSockets.h"
#include "relay/Relay.h"
#include "tests/support/Sockets.h"

namespace splicegate {
namespace {

using test::connectTcp;
using test::listenTcp;
using test::loopback;

struct Pair {
    UniqueFd old;  // the running daemon's end
    UniqueFd young;
};
Pair seqpacketPair() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds), 0);
    return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

void sendSocket(HandoffChannel& channel, handoff::SocketKind kind, const std::string& address,
                int fd) {
    handoff::Message message;
    message.mutable_socket()->set_kind(kind);
    message.mutable_socket()->set_address(address);
    ASSERT_EQ(channel.send(message, fd), 0);
}

TEST(HandoffTest, AQueuedConnectionIsAcceptedFromTheHandedOverListener) {
    std::uint16_t port = 0;
    UniqueFd listener = listenTcp(port);
    int error = 0;
    UniqueFd client = connectTcp(port, error);  // queued: nobody has accepted it
    ASSERT_TRUE(client) << error;
    std::uint16_t otherPort = 0;
    UniqueFd metrics = listenTcp(otherPort);

    auto pair = seqpacketPair();
    HandoffChannel old(std::move(pair.old));
    const std::string address = loopback(port);
    sendSocket(old, handoff::SOCKET_LISTENER, address, listener.get());
    sendSocket(old, handoff::SOCKET_METRICS, loopback(otherPort), metrics.get());
    handoff::Message end;
    end.mutable_end()->set_count(2);
    ASSERT_EQ(old.send(end), 0);
    listener.reset();  // the old process stops accepting: its copy goes
    metrics.reset();

    ::setenv(kUpgradeFdVariable, std::to_string(pair.young.release()).c_str(), 1);
    auto inherited = InheritedSockets::fromEnvironment();
    ASSERT_NE(inherited, nullptr);
    EXPECT_EQ(std::getenv(kUpgradeFdVariable), nullptr) << "not passed on to anything started";

    EXPECT_TRUE(inherited->takeListeners(test::numericAddress("127.0.0.1:1")).empty());
    EXPECT_FALSE(inherited->takeAdmin("/run/elsewhere.sock"));
    EXPECT_TRUE(inherited->takeMetrics(loopback(otherPort)));
    auto taken = inherited->takeListeners(test::numericAddress(address.c_str()));
    ASSERT_EQ(taken.size(), 1u);
    EXPECT_TRUE(inherited->takeListeners(test::numericAddress(address.c_str())).empty())
        << "taken once";

    UniqueFd accepted(::accept4(taken[0].get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    ASSERT_TRUE(accepted) << "the connection queued before the hand-off is still there";
    EXPECT_EQ(test::localPort(client.get()), [&] {
        sockaddr_storage peer{};
        socklen_t length = sizeof peer;
        ::getpeername(accepted.get(), reinterpret_cast<sockaddr*>(&peer), &length);
        return SocketAddress::fromSockaddr(reinterpret_cast<sockaddr*>(&peer), length).port();
    }());

    inherited->ready();
    std::string problem;
    auto answer = old.receive(std::chrono::milliseconds(1000), problem);
    ASSERT_TRUE(answer) << problem;
    EXPECT_TRUE(answer->message.has_ready());
    EXPECT_EQ(answer->message.ready().pid(), static_cast<std::uint32_t>(::getpid()));
}

TEST(HandoffTest, FailedReachesTheOldProcessOnceAndAClosedPairIsAnError) {
    auto pair = seqpacketPair();
    HandoffChannel old(std::move(pair.old));
    handoff::Message end;
    end.mutable_end();
    ASSERT_EQ(old.send(end), 0);
    ::setenv(kUpgradeFdVariable, std::to_string(pair.young.release()).c_str(), 1);
    auto inherited = InheritedSockets::fromEnvironment();
    ASSERT_NE(inherited, nullptr);
    inherited->failed("bad config: unknown key 'x'");
    inherited->failed("exited with status 2");  // the first reason wins
    inherited.reset();
    std::string problem;
    auto answer = old.receive(std::chrono::milliseconds(1000), problem);
    ASSERT_TRUE(answer) << problem;
    EXPECT_EQ(answer->message.failed().reason(), "bad config: unknown key 'x'");
    EXPECT_FALSE(old.receive(std::chrono::milliseconds(1000), problem));
    EXPECT_EQ(problem, "closed");
}

TEST(HandoffTest, NoVariableNoHandoffAndABadOneIsAnError) {
    ::unsetenv(kUpgradeFdVariable);
    EXPECT_EQ(InheritedSockets::fromEnvironment(), nullptr);
    ::setenv(kUpgradeFdVariable, "seven", 1);
    EXPECT_THROW(InheritedSockets::fromEnvironment(), std::runtime_error);
    ::unsetenv(kUpgradeFdVariable);
}

TEST(HandoffTest, HandedOverListenersAreSpreadOverTheWorkers) {
    Config config;
    RouteConfig route;
    route.name = "web";
    std::uint16_t port = 0;
    std::vector<UniqueFd> handed;
    handed.push_back(listenTcp(port));
    route.listen = test::numericAddress(loopback(port).c_str());
    for (int i = 0; i < 2; ++i) {
        UniqueFd extra(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
        handed.push_back(std::move(extra));
    }
    config.routes.push_back(route);
    RouteIndex index;
    auto table = buildRouteTable(config, index, config.relay);
    bool asked = false;
    auto sockets = ListenerSockets::bind(
        *table, 2, nullptr, AcceptedSocketOptions{false, {}},
        [&](const SocketAddress& address) {
            asked = true;
            EXPECT_EQ(address, route.listen);
            return std::move(handed);
        });
    EXPECT_TRUE(asked);
    EXPECT_EQ(sockets->socketCount(), 3u) << "adopted, none bound";
    EXPECT_EQ(sockets->duplicatesFor(0, route.listen).size(), 2u) << "sockets 0 and 2";
    EXPECT_EQ(sockets->duplicatesFor(1, route.listen).size(), 1u) << "socket 1";
    std::size_t visited = 0;
    sockets->forEach([&](const SocketAddress& address, int) {
        EXPECT_EQ(address, route.listen);
        ++visited;
    });
    EXPECT_EQ(visited, 3u);
}

}  // namespace
}  // namespace splicegate
