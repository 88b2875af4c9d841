// Byte-exact forwarding through the real daemon: full duplex under load, half-close in both
// orders, back-pressure from a slow reader, a tiny pipe budget, IPv6. Every transfer is checked
// by SHA-256 at both ends against an independently computed digest (docs/kernel-notes.md §10).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "relay/SocketOptions.h"
#include "tests/support/Daemon.h"
#include "tests/support/PatternStream.h"
#include "tests/support/Sha256.h"
#include "tests/support/Sockets.h"
#include "tests/support/Sysctl.h"
#include "tests/support/TestServer.h"
#include "tests/support/Traffic.h"

namespace splicegate::test {
namespace {

constexpr uint64_t kMiB = 1024 * 1024;

std::vector<std::string> engineArgs(const std::string& engine) {
    if (engine == "default") return {};
    return {"--splice-engine", engine};
}

// After a batch, one more connection must still be accepted and relayed byte-exact.
::testing::AssertionResult stillServes(uint16_t port, const DuplexBoard& board) {
    constexpr uint64_t kSize = 1024 * 1024;
    std::vector<ClientRun> again{duplexClient(port, 999999, kSize, kSize, milliseconds(20000))};
    board.waitSize(board.snapshot().size() + 1, deadlineIn(milliseconds(3000)));
    auto result = duplexMatches(again, board, kSize, kSize);
    if (!result) result << "\n  (a connection opened after the batch had finished)";
    return result;
}

// The failure names the connect error and what the daemon was doing.
::testing::AssertionResult connectToRelay(uint16_t port, Daemon& daemon, UniqueFd& client) {
    int error = 0;
    client = connectTcp(port, error);
    if (client) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << "connect to the relay: " << std::strerror(error) << daemon.why();
}

std::string engineName(const ::testing::TestParamInfo<std::string>& info) {
    return info.param;
}

class RelayDuplexTest : public ::testing::TestWithParam<std::string> {
  protected:
    // `connections` duplex clients (ids from `firstId`) moving `size` bytes each way at once
    // through a daemon with this engine and `extraArgs`: byte-exact at both ends, and the daemon
    // still serves afterwards.
    void expectBatchRelayedExactly(std::size_t connections, uint64_t firstId, uint64_t size,
                                   const std::vector<std::string>& extraArgs = {}) {
        auto board = std::make_shared<DuplexBoard>();
        TestServer upstream(duplexUpstream(board, milliseconds(90000)));
        uint16_t port = pickFreePort();
        auto args = engineArgs(GetParam());
        args.insert(args.end(), extraArgs.begin(), extraArgs.end());
        Daemon daemon(relayArgs(port, {upstream.address()}, args));
        ASSERT_TRUE(daemon.waitReady(port)) << "daemon not listening on " << port << daemon.why();

        auto runs = duplexClients(port, connections, firstId, size, size, milliseconds(90000));
        board->waitSize(connections, deadlineIn(milliseconds(5000)));
        EXPECT_TRUE(duplexMatches(runs, *board, size, size)) << daemon.why(20);
        EXPECT_TRUE(stillServes(port, *board)) << daemon.why(20);
    }
};

// 8 connections x 64 MiB each way at the same time; SHA-256 equal at both ends both ways.
TEST_P(RelayDuplexTest, EightConnections64MiBEachWayAtOnce) {
    expectBatchRelayedExactly(8, 100, 64 * kMiB);
}

// --pipe-size 4096 --pipe-budget 16384: 4 small pipes shared by 32 busy connections.
TEST_P(RelayDuplexTest, TinyPipeBudgetSharedBy32Connections) {
    expectBatchRelayedExactly(32, 1000, 4 * kMiB,
                              {"--pipe-size", "4096", "--pipe-budget", "16384"});
}

// 96 busy connections with 1 MiB pipes and a pipe budget far above what the kernel lets this
// user hold (fs.pipe-user-pages-soft, shared with every other process of the user): pipes may
// be refused or silently shrunk (docs/kernel-notes.md §4), and every byte must still arrive intact.
TEST_P(RelayDuplexTest, NinetySixConnectionsBeyondTheUserPipeLimit) {
    ASSERT_GE(raiseFdLimit(), 1024u);
    expectBatchRelayedExactly(96, 20000, 2 * kMiB,
                              {"--pipe-size", "1048576", "--pipe-budget", "1073741824"});
}

INSTANTIATE_TEST_SUITE_P(Engines, RelayDuplexTest,
                         ::testing::Values(std::string("default"), std::string("chain"),
                                           std::string("inline")),
                         engineName);

// Each test: the daemon in front of an upstream of its own, and one client connected through it.
class RelayHalfCloseTest : public ::testing::Test {
  protected:
    void connectThroughRelayTo(TestServer::Handler upstream) {
        upstream_.emplace(std::move(upstream));
        uint16_t port = pickFreePort();
        daemon_.emplace(relayArgs(port, {upstream_->address()}));
        ASSERT_TRUE(daemon_->waitReady(port)) << daemon_->why();
        ASSERT_TRUE(connectToRelay(port, *daemon_, client_));
    }

    std::optional<TestServer> upstream_;
    std::optional<Daemon> daemon_;
    UniqueFd client_;
};

// Client sends, then SHUT_WR; the upstream must see every byte then EOF, and only then replies
// and closes; the client must get the whole reply, then EOF.
TEST_F(RelayHalfCloseTest, ClientHalfClosesThenUpstreamReplies) {
    constexpr uint64_t kRequest = 4 * kMiB + 123;
    constexpr uint64_t kReply = 3 * kMiB + 7;
    constexpr uint64_t kRequestSeed = 11, kReplySeed = 12;
    auto board = std::make_shared<SinkBoard>();
    auto replies = std::make_shared<SinkBoard>();
    TestServer::Handler upstream = [board, replies](int fd, std::size_t index) {
        Deadline deadline = deadlineIn(milliseconds(20000));
        StreamResult request = receiveAll(fd, deadline);
        board->put(index, request);
        if (!request.eof || request.bytes == 0) return;  // only reply after a full request + EOF
        replies->put(index, sendPattern(fd, kReplySeed, kReply, deadline));
    };
    ASSERT_NO_FATAL_FAILURE(connectThroughRelayTo(std::move(upstream)));
    Deadline deadline = deadlineIn(milliseconds(20000));
    StreamResult sent = sendPattern(client_.get(), kRequestSeed, kRequest, deadline);
    ASSERT_TRUE(sent.ok() && sent.bytes == kRequest) << "client send: " << sent.describe();
    StreamResult reply = receiveAll(client_.get(), deadline);

    ASSERT_TRUE(board->waitSize(1, deadlineIn(milliseconds(2000))))
        << "upstream never saw EOF after the client's SHUT_WR" << daemon_->why();
    StreamResult request = board->snapshot().front().second;
    EXPECT_TRUE(request.eof) << "upstream's read ended without EOF: " << request.describe();
    EXPECT_EQ(request.bytes, kRequest) << "upstream got " << request.describe();
    EXPECT_EQ(request.sha256, patternSha256(kRequestSeed, kRequest)) << "request corrupted";
    EXPECT_EQ(request.sha256, sent.sha256);

    EXPECT_TRUE(reply.eof) << "client's read of the reply ended without EOF: " << reply.describe();
    EXPECT_EQ(reply.bytes, kReply) << "client got " << reply.describe();
    EXPECT_EQ(reply.sha256, patternSha256(kReplySeed, kReply)) << "reply corrupted";
    EXPECT_TRUE(daemon_->running()) << daemon_->why();
}

// The mirror image: the upstream sends and half-closes first; the client reads to EOF, then its
// own direction must still flow.
TEST_F(RelayHalfCloseTest, UpstreamHalfClosesThenClientStillSends) {
    constexpr uint64_t kGreeting = 2 * kMiB + 5;
    constexpr uint64_t kUpload = 5 * kMiB + 9;
    constexpr uint64_t kGreetingSeed = 21, kUploadSeed = 22;
    auto uploads = std::make_shared<SinkBoard>();
    TestServer::Handler upstream = [uploads](int fd, std::size_t index) {
        Deadline deadline = deadlineIn(milliseconds(20000));
        StreamResult greeting = sendPattern(fd, kGreetingSeed, kGreeting, deadline);  // + SHUT_WR
        if (!greeting.ok()) return;
        uploads->put(index, receiveAll(fd, deadline));
    };
    ASSERT_NO_FATAL_FAILURE(connectThroughRelayTo(std::move(upstream)));
    Deadline deadline = deadlineIn(milliseconds(20000));
    StreamResult greeting = receiveAll(client_.get(), deadline);
    EXPECT_TRUE(greeting.eof) << "no EOF after the upstream's SHUT_WR: " << greeting.describe();
    EXPECT_EQ(greeting.bytes, kGreeting);
    EXPECT_EQ(greeting.sha256, patternSha256(kGreetingSeed, kGreeting)) << "greeting corrupted";

    StreamResult sent = sendPattern(client_.get(), kUploadSeed, kUpload, deadline);
    EXPECT_TRUE(sent.ok() && sent.bytes == kUpload)
        << "client could not send after the upstream half-closed: " << sent.describe()
        << daemon_->why(20);
    ASSERT_TRUE(uploads->waitSize(1, deadlineIn(milliseconds(10000))))
        << "upstream never got EOF of the upload" << daemon_->why();
    StreamResult upload = uploads->snapshot().front().second;
    EXPECT_TRUE(upload.eof) << upload.describe();
    EXPECT_EQ(upload.bytes, kUpload) << "upload at upstream: " << upload.describe();
    EXPECT_EQ(upload.sha256, patternSha256(kUploadSeed, kUpload)) << "upload corrupted";
    // The connection ends once both directions are done: the client sees EOF (or at worst RST).
    PeerClose end = waitPeerClose(client_.get(), deadlineIn(milliseconds(5000)));
    EXPECT_NE(end, PeerClose::Timeout) << "connection not closed after both halves ended";
}

// Upstream pushes 256 MiB as fast as it can; the client reads ~1 KiB/10 ms for 3 s. The daemon
// must hold back (bounded RSS, upstream blocked), then deliver all of it byte-exact.
class RelayBackPressureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RelayBackPressureTest, SlowReaderKeepsDaemonMemoryBounded) {
    constexpr uint64_t kSize = 256 * kMiB;
    constexpr uint64_t kSeed = 31;
    constexpr long kRssBoundKiB = 64 * 1024;
    constexpr uint64_t kBufferedBound = 128 * kMiB;
    auto sent = std::make_shared<SinkBoard>();
    auto pushed = std::make_shared<std::atomic<uint64_t>>(0);
    TestServer upstream([sent, pushed](int fd, std::size_t index) {
        SendOptions options;
        options.progress = pushed.get();
        sent->put(index, sendPattern(fd, kSeed, kSize, deadlineIn(milliseconds(60000)), options));
    });
    uint16_t port = pickFreePort();
    Daemon daemon(relayArgs(port, {upstream.address()}, engineArgs(GetParam())));
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
    long rssBefore = daemon.rssKiB();

    UniqueFd client;
    ASSERT_TRUE(connectToRelay(port, daemon, client));
    Sha256 sha;
    uint64_t received = 0;
    std::vector<uint8_t> buffer(256 * 1024);
    long maxRss = rssBefore;
    Deadline slowUntil = deadlineIn(milliseconds(3000));
    while (Clock::now() < slowUntil) {
        ssize_t got = ::recv(client.get(), buffer.data(), 1024, 0);
        if (got > 0) {
            sha.update(buffer.data(), static_cast<std::size_t>(got));
            received += static_cast<uint64_t>(got);
        } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
            FAIL() << "connection ended during the slow phase after " << received << " bytes"
                   << daemon.why();
        }
        maxRss = std::max(maxRss, daemon.rssKiB());
        std::this_thread::sleep_for(milliseconds(10));
    }
    uint64_t pushedWhileSlow = pushed->load();
    RecordProperty("daemon_max_rss_kib", static_cast<int>(maxRss));
    RecordProperty("upstream_pushed_while_slow", static_cast<int>(pushedWhileSlow));
    EXPECT_LT(maxRss, kRssBoundKiB)
        << "daemon RSS peaked at " << maxRss << " KiB while back-pressured (at start " << rssBefore
        << " KiB); bound " << kRssBoundKiB << " KiB";
    EXPECT_LT(pushedWhileSlow, kBufferedBound)
        << "upstream pushed " << pushedWhileSlow << " bytes while the client had read only "
        << received << ": the relay is not back-pressuring the upstream";

    Deadline deadline = deadlineIn(milliseconds(30000));
    for (;;) {
        ssize_t got = ::recv(client.get(), buffer.data(), buffer.size(), 0);
        if (got > 0) {
            sha.update(buffer.data(), static_cast<std::size_t>(got));
            received += static_cast<uint64_t>(got);
            continue;
        }
        if (got == 0) break;
        if ((errno == EAGAIN || errno == EINTR) && Clock::now() < deadline) continue;
        ADD_FAILURE() << "fast phase ended without EOF: " << std::strerror(errno);
        break;
    }
    EXPECT_EQ(received, kSize) << "client got " << received << " of " << kSize << " bytes"
                               << daemon.why(20);
    EXPECT_EQ(sha.finishHex(), patternSha256(kSeed, kSize)) << "stream corrupted";
    ASSERT_TRUE(sent->waitSize(1, deadlineIn(milliseconds(2000))));
    EXPECT_EQ(sent->snapshot().front().second.bytes, kSize);
}

INSTANTIATE_TEST_SUITE_P(Engines, RelayBackPressureTest,
                         ::testing::Values(std::string("chain"), std::string("inline")),
                         engineName);

// Listener and upstream on ::1.
TEST(RelayIpv6Test, ListenAndUpstreamOnIpv6Loopback) {
    constexpr uint64_t kSize = 4 * kMiB;
    auto board = std::make_shared<DuplexBoard>();
    TestServer upstream(duplexUpstream(board, milliseconds(30000)), /*ipv6=*/true);
    uint16_t port = pickFreePort();
    Daemon daemon(
        {"--listen", loopback(port, true), "--upstream", upstream.address(), "--workers", "2"});
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
    std::vector<ClientRun> runs{duplexClient(port, 7, kSize, kSize, milliseconds(30000), true)};
    board->waitSize(1, deadlineIn(milliseconds(5000)));
    EXPECT_TRUE(duplexMatches(runs, *board, kSize, kSize)) << daemon.why(20);
}

// --delayed-ack: both of the relay's sockets of a connection are in the kernel's delayed-ACK
// mode (getsockopt TCP_QUICKACK reads 0) before they have received anything, so the ACK of a
// request rides on the reply; with `off` they keep the kernel's quick ACKs. Each socket is read
// before data arrives on it: the first delayed-ACK timeout would end the mode by itself.
class RelayDelayedAckTest : public ::testing::TestWithParam<bool> {};

int quickAckOf(int fd) {
    int value = -1;
    socklen_t length = sizeof value;
    if (::getsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &value, &length) != 0) return -errno;
    return value;
}

// An upstream that notes the port the relay connected from once the relay's first byte arrives.
TestServer portNotingUpstream(std::shared_ptr<std::atomic<int>> relayPort) {
    return TestServer([relayPort](int fd, std::size_t) {
        char byte = 0;
        if (::recv(fd, &byte, 1, 0) != 1) return;  // the relay has connected and relayed
        sockaddr_storage peer{};
        socklen_t length = sizeof peer;
        ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &length);
        relayPort->store(ntohs(reinterpret_cast<sockaddr_in*>(&peer)->sin_port));
        receiveAll(fd, deadlineIn(milliseconds(10000)));
    });
}

// The daemon's socket of `client`'s connection.
UniqueFd borrowClientSide(const Daemon& daemon, uint16_t port, const UniqueFd& client) {
    return borrowSocket(daemon.pid(), port, localPort(client.get()),
                        deadlineIn(milliseconds(5000)));
}

// Sends one byte through `client` and returns the daemon's socket connected to `upstream` for
// it; invalid (with errno) when the byte never arrives or the socket is not found.
UniqueFd borrowUpstreamSide(const Daemon& daemon, const UniqueFd& client,
                            const TestServer& upstream, const std::atomic<int>& relayPort) {
    if (::send(client.get(), "x", 1, MSG_NOSIGNAL) != 1) return {};
    Deadline deadline = deadlineIn(milliseconds(5000));
    while (relayPort.load() == 0 && Clock::now() < deadline)
        std::this_thread::sleep_for(milliseconds(5));
    if (relayPort.load() == 0) {
        errno = ETIMEDOUT;
        return {};
    }
    return borrowSocket(daemon.pid(), static_cast<uint16_t>(relayPort.load()), upstream.port(),
                        deadlineIn(milliseconds(5000)));
}

TEST_P(RelayDelayedAckTest, BothSocketsOfAConnectionFollowTheOption) {
    const bool delayedAck = GetParam();
    auto relayPort = std::make_shared<std::atomic<int>>(0);
    TestServer upstream = portNotingUpstream(relayPort);
    uint16_t port = pickFreePort();
    std::vector<std::string> options;
    if (!delayedAck) options = {"--delayed-ack", "off"};
    Daemon daemon(relayArgs(port, {upstream.address()}, options));
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
    UniqueFd client;
    ASSERT_TRUE(connectToRelay(port, daemon, client));
    const int expected = delayedAck ? 0 : 1;

    UniqueFd clientSide = borrowClientSide(daemon, port, client);
    ASSERT_TRUE(clientSide) << "the daemon's socket of the client connection: "
                            << std::strerror(errno) << daemon.why();
    EXPECT_EQ(quickAckOf(clientSide.get()), expected) << "socket accepted from the client";

    UniqueFd upstreamSide = borrowUpstreamSide(daemon, client, upstream, *relayPort);
    ASSERT_TRUE(upstreamSide) << "the daemon's socket of the upstream connection: "
                              << std::strerror(errno) << daemon.why();
    EXPECT_EQ(quickAckOf(upstreamSide.get()), expected) << "socket connected to the upstream";
}

// --client-tcp-congestion and --upstream-tcp-congestion: each of the relay's sockets of a
// connection runs the algorithm its option names, and the system's default without them. The
// algorithms come from what this machine lets the daemon set without CAP_NET_ADMIN (the
// allowed list; a new machine allows only `reno` and its default), so a host where someone set
// a congestion control by hand passes the same way as a new one. The refused case is
// OperatorStartCheckTest's.
// The algorithms other than the system's default this machine lets the daemon set (`widened`
// adds cubic to the allowed list on a host that allows nothing else: reno is always allowed).
std::vector<std::string> congestionChoices(const std::string& systemDefault,
                                           std::optional<SysctlOverride>& widened) {
    std::vector<std::string> choices;
    for (const auto& allowed : sysctlWords(kAllowedCongestion))
        if (allowed != systemDefault) choices.push_back(allowed);
    if (choices.empty()) {
        widened.emplace(kAllowedCongestion, "reno cubic");
        if (widened->ok()) choices = {"cubic"};
    }
    return choices;
}

TEST(RelayCongestionControlTest, EachSocketOfAConnectionRunsItsOption) {
    const std::string systemDefault = sysctlValue(kDefaultCongestion);
    std::optional<SysctlOverride> widened;
    auto choices = congestionChoices(systemDefault, widened);
    ASSERT_FALSE(choices.empty()) << (widened ? widened->why() : std::string());
    const std::string clientChoice = choices.front();
    const std::string upstreamChoice = choices.back();
    for (bool configured : {true, false}) {
        auto relayPort = std::make_shared<std::atomic<int>>(0);
        TestServer upstream = portNotingUpstream(relayPort);
        uint16_t port = pickFreePort();
        std::vector<std::string> options;
        if (configured)
            options = {"--client-tcp-congestion", clientChoice, "--upstream-tcp-congestion",
                       upstreamChoice};
        Daemon daemon(relayArgs(port, {upstream.address()}, options));
        ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
        UniqueFd client;
        ASSERT_TRUE(connectToRelay(port, daemon, client));
        UniqueFd clientSide = borrowClientSide(daemon, port, client);
        ASSERT_TRUE(clientSide) << std::strerror(errno) << daemon.why();
        UniqueFd upstreamSide = borrowUpstreamSide(daemon, client, upstream, *relayPort);
        ASSERT_TRUE(upstreamSide) << std::strerror(errno) << daemon.why();
        EXPECT_EQ(congestionControlOf(clientSide.get()), configured ? clientChoice : systemDefault);
        EXPECT_EQ(congestionControlOf(upstreamSide.get()),
                  configured ? upstreamChoice : systemDefault);
    }
}

// The route key upstream-tcp-congestion: a route's upstream sockets run its own algorithm, over
// --upstream-tcp-congestion's; the route without the key runs the global one.
TEST(RelayCongestionControlTest, ARouteOwnUpstreamCongestionControlOverridesTheOption) {
    const std::string systemDefault = sysctlValue(kDefaultCongestion);
    std::optional<SysctlOverride> widened;
    auto choices = congestionChoices(systemDefault, widened);
    ASSERT_FALSE(choices.empty()) << (widened ? widened->why() : std::string());
    const std::string routeChoice = choices.front();
    const std::string globalChoice = "reno" == routeChoice ? systemDefault : "reno";
    auto globalPort = std::make_shared<std::atomic<int>>(0),
         routePort = std::make_shared<std::atomic<int>>(0);
    TestServer globalUpstream = portNotingUpstream(globalPort),
               routeUpstream = portNotingUpstream(routePort);
    uint16_t port = pickFreePort(), ownPort = pickFreePort();
    TempDir dir;
    std::string config = dir.write(
        "splicegate.conf", routeSection("own", loopback(ownPort), {routeUpstream.address()}) +
                               "upstream-tcp-congestion = " + routeChoice + "\n");
    Daemon daemon(relayArgs(port, {globalUpstream.address()},
                            {"--upstream-tcp-congestion", globalChoice, "--config", config}));
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
    ASSERT_TRUE(daemon.waitReady(ownPort)) << daemon.why();
    for (auto [listen, upstream, relayPort, expected] :
         {std::tuple{port, &globalUpstream, globalPort, globalChoice},
          std::tuple{ownPort, &routeUpstream, routePort, routeChoice}}) {
        UniqueFd client;
        ASSERT_TRUE(connectToRelay(listen, daemon, client));
        UniqueFd upstreamSide = borrowUpstreamSide(daemon, client, *upstream, *relayPort);
        ASSERT_TRUE(upstreamSide) << std::strerror(errno) << daemon.why();
        EXPECT_EQ(congestionControlOf(upstreamSide.get()), expected) << "listener " << listen;
    }
}

// The upstream socket enters delayed-ACK mode before its connect only when the client has spoken
// already (its bytes then carry the handshake's last ACK). A client that waits for a server
// that speaks first must not make that server wait: the handshake's ACK would be held up to
// 200 ms, and the server's accept() with it. The fastest of three greetings shows it (one slow
// run on a loaded machine is not the delay).
TEST(RelayDelayedAckTest, AServerThatSpeaksFirstIsNotKeptWaiting) {
    constexpr char kGreeting[] = "220 ready\r\n";
    TestServer upstream([&kGreeting](int fd, std::size_t) {
        ::send(fd, kGreeting, sizeof kGreeting - 1, MSG_NOSIGNAL);
        receiveAll(fd, deadlineIn(milliseconds(10000)));
    });
    uint16_t port = pickFreePort();
    Daemon daemon(relayArgs(port, {upstream.address()}));
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
    auto fastest = milliseconds::max();
    for (int attempt = 0; attempt < 3; ++attempt) {
        auto started = Clock::now();
        UniqueFd client;
        ASSERT_TRUE(connectToRelay(port, daemon, client));
        char first = 0;
        ASSERT_EQ(::recv(client.get(), &first, 1, 0), 1) << "no greeting" << daemon.why();
        EXPECT_EQ(first, '2');
        fastest =
            std::min(fastest, std::chrono::duration_cast<milliseconds>(Clock::now() - started));
    }
    EXPECT_LT(fastest.count(), 150) << "the greeting of a server that speaks first was held";
}

std::string delayedAckName(const ::testing::TestParamInfo<bool>& mode) {
    return mode.param ? "On" : "Off";
}

INSTANTIATE_TEST_SUITE_P(Modes, RelayDelayedAckTest, ::testing::Bool(), delayedAckName);

}  // namespace
}  // namespace splicegate::test
