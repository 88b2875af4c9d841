// Failures at either end: refused upstreams (fail over, or close the client), resets in the
// middle of a transfer in both directions, and the daemon carrying on afterwards.
#include <gtest/gtest.h>
#include <linux/sockios.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/Daemon.h"
#include "tests/support/PatternStream.h"
#include "tests/support/SilentUpstream.h"
#include "tests/support/Sockets.h"
#include "tests/support/TestServer.h"
#include "tests/support/Traffic.h"

namespace splicegate::test {
namespace {

constexpr uint64_t kMiB = 1024 * 1024;

// A fresh connection through the relay still forwards byte-exact.
::testing::AssertionResult relayStillWorks(uint16_t port, uint64_t seed) {
    int error = 0;
    UniqueFd fd = connectTcp(port, error);
    if (!fd) {
        return ::testing::AssertionFailure()
               << "new connection to the relay failed: " << std::strerror(error);
    }
    return echoRoundTrip(fd.get(), seed, 1 * kMiB, milliseconds(10000));
}

// IPv4 sockets in TCP state `state` (TcpTableRow) whose local (or remote) port is `port`.
std::size_t tcpSockets(uint16_t port, int state, bool local) {
    std::size_t count = 0;
    for (const auto& row : tcpTable(false))
        if (row.state == state && (local ? row.localPort : row.remotePort) == port) ++count;
    return count;
}

// Sockets of this network namespace in SYN-SENT towards 127.0.0.1:`port`.
std::size_t synSentTo(uint16_t port) {
    return tcpSockets(port, 0x02, false);
}

// rx_queue of the IPv4 socket from `localPort` to `remotePort` (bytes it holds unread); -1 when
// there is none.
long receiveQueue(uint16_t localPort, uint16_t remotePort) {
    for (const auto& row : tcpTable(false))
        if (row.localPort == localPort && row.remotePort == remotePort) return row.rxQueue;
    return -1;
}

// Waits up to `timeout` for a socket in `state` with `port`; true when one is there.
bool waitTcpSocket(uint16_t port, int state, bool local, milliseconds timeout) {
    Deadline deadline = deadlineIn(timeout);
    while (tcpSockets(port, state, local) == 0) {
        if (Clock::now() >= deadline) return false;
        std::this_thread::sleep_for(milliseconds(20));
    }
    return true;
}

// The client's connection ended (EOF or a reset) within `timeout`.
bool connectionEnds(int fd, milliseconds timeout) {
    setIoTimeout(fd, timeout);
    char sink[4096];
    for (;;) {
        ssize_t got = ::recv(fd, sink, sizeof sink, 0);
        if (got == 0) return true;
        if (got < 0) return errno == ECONNRESET || errno == EPIPE;
    }
}

// First upstream refuses (nothing listens there), second is live: every connection must get
// through, whichever upstream the round robin starts with.
TEST(RelayUpstreamFailureTest, RefusedUpstreamFallsOverToTheNext) {
    constexpr std::size_t kConnections = 6;
    constexpr uint64_t kSize = 1 * kMiB;
    auto board = std::make_shared<DuplexBoard>();
    TestServer live(duplexUpstream(board, milliseconds(30000)));
    uint16_t closed = pickFreePort();
    uint16_t port = pickFreePort();
    Daemon daemon(
        relayArgs(port, {loopback(closed), live.address()}, {"--connect-timeout-ms", "1000"}));
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();

    std::vector<ClientRun> runs;
    for (std::size_t i = 0; i < kConnections; ++i) {  // one after another: round robin moves on
        runs.push_back(duplexClient(port, 200 + i, kSize, kSize, milliseconds(15000)));
    }
    board->waitSize(kConnections, deadlineIn(milliseconds(3000)));
    EXPECT_TRUE(duplexMatches(runs, *board, kSize, kSize)) << daemon.why(20);
    EXPECT_EQ(live.acceptedCount(), kConnections);
}

// All upstreams refuse: the client is closed promptly, the log says why, and the daemon goes on
// serving (a second, healthy route from the config file; and the failing route again).
TEST(RelayUpstreamFailureTest, AllUpstreamsRefusedClosesClientAndDaemonCarriesOn) {
    TestServer echo(echoUpstream(milliseconds(20000)));
    uint16_t closedA = pickFreePort();
    uint16_t closedB = pickFreePort();
    uint16_t port = pickFreePort();
    uint16_t goodPort = pickFreePort();
    TempDir configDir;
    std::string config = configDir.write(
        "splicegate.conf", routeSection("good", loopback(goodPort), {echo.address()}));
    Daemon daemon(relayArgs(port, {loopback(closedA), loopback(closedB)},
                            {"--connect-timeout-ms", "500", "--config", config}));
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
    ASSERT_TRUE(daemon.waitReady(goodPort))
        << "route.good from the config not listening" << daemon.why();

    for (int attempt = 0; attempt < 3; ++attempt) {
        int error = 0;
        UniqueFd client = connectTcp(port, error);
        ASSERT_TRUE(client) << "the listener itself must accept: " << std::strerror(error)
                            << daemon.why();
        auto started = Clock::now();
        int closeError = 0;
        PeerClose end =
            waitPeerClose(client.get(), deadlineIn(milliseconds(4000)), nullptr, &closeError);
        auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - started).count();
        EXPECT_TRUE(end == PeerClose::Eof || end == PeerClose::Reset)
            << "attempt " << attempt << ": with every upstream refusing, the client saw "
            << toString(end) << " after " << took << " ms (expected EOF or RST within 4 s)"
            << daemon.why(20);
    }
    // The failure is in the log: it names the connect failure or the refused upstream.
    std::string log = daemon.log();
    bool mentioned = !grepLines(log, "refused").empty() ||
                     !grepLines(log, std::to_string(closedA)).empty() ||
                     !grepLines(log, std::to_string(closedB)).empty();
    EXPECT_TRUE(mentioned)
        << "daemon log does not mention the failed upstream connects (looked for "
           "'refused', ports "
        << closedA << " and " << closedB << ")" << daemon.why();
    ASSERT_TRUE(daemon.running()) << daemon.why();
    EXPECT_TRUE(relayStillWorks(goodPort, 41)) << daemon.why(20);
}

// The client resets (SO_LINGER 0) in the middle of an upload, and again on an idle connection:
// the upstream side must be closed within a bound (EOF or ECONNRESET).
TEST(RelayResetTest, ClientResetClosesUpstream) {
    struct Seen {
        StreamResult result;
        Clock::time_point at;
    };
    auto board = std::make_shared<ResultBoard<std::size_t, Seen>>();
    auto progress = std::make_shared<std::atomic<uint64_t>>(0);
    TestServer upstream([board, progress](int fd, std::size_t index) {
        StreamResult result =
            receiveAll(fd, deadlineIn(milliseconds(20000)), UINT64_MAX, progress.get());
        board->put(index, Seen{result, Clock::now()});
    });
    uint16_t port = pickFreePort();
    Daemon daemon(relayArgs(port, {upstream.address()}));
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();

    // 1. Mid-transfer: a paced upload, reset once the upstream has seen >= 2 MiB.
    {
        int error = 0;
        UniqueFd client = connectTcp(port, error);
        ASSERT_TRUE(client) << std::strerror(error) << daemon.why();
        std::atomic<bool> stop{false};
        std::atomic<bool> done{false};
        std::jthread uploader([&] {
            SendOptions options;
            options.chunk = 64 * 1024;
            options.pauseEveryChunk = std::chrono::microseconds(2000);
            options.shutdownWrite = false;
            options.cancel = &stop;
            // Bounded: until cancelled, or 10 s.
            sendPattern(client.get(), 51, 512 * kMiB, deadlineIn(milliseconds(10000)), options);
            done = true;
        });
        Deadline until = deadlineIn(milliseconds(10000));
        while (progress->load() < 2 * kMiB && Clock::now() < until && !done) {
            std::this_thread::sleep_for(milliseconds(5));
        }
        stop = true;
        uploader.join();
        ASSERT_GE(progress->load(), 2 * kMiB)
            << "upload never reached the upstream" << daemon.why();
        ASSERT_FALSE(board->waitSize(1, deadlineIn(milliseconds(0))))
            << "upstream connection ended before the reset";
        auto resetAt = Clock::now();
        resetClose(client);
        ASSERT_TRUE(board->waitSize(1, deadlineIn(milliseconds(3000))))
            << "upstream still open 3 s after the client reset mid-transfer" << daemon.why(20);
        const Seen seen = board->snapshot().back().second;
        EXPECT_TRUE(seen.result.eof || seen.result.error == ECONNRESET)
            << "upstream's connection ended oddly: " << seen.result.describe();
        EXPECT_LT(std::chrono::duration_cast<milliseconds>(seen.at - resetAt).count(), 3000);
    }
    // 2. Idle: nothing sent either way, then RST.
    {
        int error = 0;
        UniqueFd client = connectTcp(port, error);
        ASSERT_TRUE(client) << std::strerror(error) << daemon.why();
        ASSERT_TRUE(upstream.waitAccepted(2, deadlineIn(milliseconds(3000))))
            << "relay never connected upstream" << daemon.why();
        resetClose(client);
        ASSERT_TRUE(board->waitSize(2, deadlineIn(milliseconds(3000))))
            << "upstream still open 3 s after an idle client reset" << daemon.why(20);
        const Seen seen = board->snapshot().back().second;
        EXPECT_TRUE(seen.result.eof || seen.result.error == ECONNRESET) << seen.result.describe();
        EXPECT_EQ(seen.result.bytes, 0u);
    }
    ASSERT_TRUE(daemon.running()) << daemon.why();
    // The daemon carries on: a sink connection with a full upload still arrives byte-exact.
    int error = 0;
    UniqueFd client = connectTcp(port, error);
    ASSERT_TRUE(client) << std::strerror(error) << daemon.why();
    StreamResult sent = sendPattern(client.get(), 52, 3 * kMiB, deadlineIn(milliseconds(10000)));
    ASSERT_TRUE(board->waitSize(3, deadlineIn(milliseconds(10000)))) << daemon.why(20);
    const Seen seen = board->snapshot().back().second;
    EXPECT_TRUE(seen.result.eof) << seen.result.describe();
    EXPECT_EQ(seen.result.bytes, 3 * kMiB);
    EXPECT_EQ(seen.result.sha256, patternSha256(52, 3 * kMiB));
    EXPECT_EQ(seen.result.sha256, sent.sha256);
}

// The upstream resets in the middle of a download (and on an idle connection): the client side
// must be closed within a bound, and the daemon carries on.
TEST(RelayResetTest, UpstreamResetClosesClient) {
    std::atomic<int> mode{0};  // 0: stream then reset, 1: reset at once (idle), 2: echo
    auto pushed = std::make_shared<std::atomic<uint64_t>>(0);
    TestServer upstream([&mode, pushed](int fd, std::size_t) {
        int m = mode.load();
        if (m == 2) {
            echoUpstream(milliseconds(10000))(fd, 0);
            return;
        }
        if (m == 0) {
            SendOptions options;
            options.progress = pushed.get();
            options.shutdownWrite = false;
            sendPattern(fd, 61, 4 * kMiB, deadlineIn(milliseconds(10000)), options);
        } else {
            std::this_thread::sleep_for(milliseconds(200));
        }
        armReset(fd);  // the server closes the fd on return: RST
    });
    uint16_t port = pickFreePort();
    Daemon daemon(relayArgs(port, {upstream.address()}));
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();

    for (int m : {0, 1}) {
        mode = m;
        int error = 0;
        UniqueFd client = connectTcp(port, error);
        ASSERT_TRUE(client) << std::strerror(error) << daemon.why();
        uint64_t got = 0;
        int closeError = 0;
        PeerClose end =
            waitPeerClose(client.get(), deadlineIn(milliseconds(5000)), &got, &closeError);
        EXPECT_TRUE(end == PeerClose::Eof || end == PeerClose::Reset)
            << (m == 0 ? "mid-transfer" : "idle") << " upstream reset: the client saw "
            << toString(end) << " after " << got << " bytes (expected EOF or RST within 5 s)"
            << daemon.why(20);
        EXPECT_LE(got, 4 * kMiB);
    }
    ASSERT_TRUE(daemon.running()) << daemon.why();
    mode = 2;
    EXPECT_TRUE(relayStillWorks(port, 62)) << daemon.why(20);
}

// An upstream that never completes the handshake (its accept queue is full, so the kernel drops
// the SYNs): --connect-timeout-ms bounds the wait, then the next upstream is tried; with none
// left the client is closed.
TEST(RelayUpstreamFailureTest, ConnectTimeoutMovesOnOrClosesClient) {
    SilentUpstream blackhole;
    if (!blackhole.silent) GTEST_SKIP() << blackhole.why;
    const uint16_t blackholePort = blackhole.port;
    auto board = std::make_shared<DuplexBoard>();
    TestServer live(duplexUpstream(board, milliseconds(20000)));
    uint16_t port = pickFreePort();
    uint16_t lonePort = pickFreePort();
    TempDir configDir;
    std::string config = configDir.write(
        "splicegate.conf", routeSection("lone", loopback(lonePort), {loopback(blackholePort)}));
    Daemon daemon(relayArgs(port, {loopback(blackholePort), live.address()},
                            {"--connect-timeout-ms", "300", "--config", config}));
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
    ASSERT_TRUE(daemon.waitReady(lonePort)) << daemon.why();

    // Two connections: the round robin starts one of them on the silent upstream.
    std::vector<ClientRun> runs;
    for (uint64_t id : {300, 301}) {
        auto started = Clock::now();
        runs.push_back(duplexClient(port, id, 256 * 1024, 256 * 1024, milliseconds(10000)));
        auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - started).count();
        EXPECT_LT(took, 3000) << "connection " << id << " took " << took << " ms";
    }
    EXPECT_TRUE(duplexMatches(runs, *board, 256 * 1024, 256 * 1024)) << daemon.why(20);

    int error = 0;
    UniqueFd client = connectTcp(lonePort, error);
    ASSERT_TRUE(client) << std::strerror(error) << daemon.why();
    auto started = Clock::now();
    PeerClose end = waitPeerClose(client.get(), deadlineIn(milliseconds(3000)));
    auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - started).count();
    EXPECT_TRUE(end == PeerClose::Eof || end == PeerClose::Reset)
        << "with its only upstream silent and --connect-timeout-ms 300 the client saw "
        << toString(end) << " after " << took << " ms" << daemon.why(20);
    EXPECT_FALSE(grepLines(daemon.log(), std::to_string(blackholePort)).empty())
        << "the log does not name the upstream that timed out" << daemon.why();
    EXPECT_TRUE(daemon.running()) << daemon.why();
}

// --max-connections 4: the 5th concurrent client is closed without reaching the upstream; once
// one closes, a new client gets through again.
TEST(RelayLimitTest, MaxConnectionsRefusesBeyondTheLimit) {
    constexpr std::size_t kLimit = 4;
    TestServer upstream(echoUpstream(milliseconds(20000)));
    uint16_t port = pickFreePort();
    Daemon daemon(relayArgs(port, {upstream.address()}, {"--max-connections", "4"}));
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
    std::vector<UniqueFd> held;
    for (std::size_t i = 0; i < kLimit; ++i) {
        int error = 0;
        held.push_back(connectTcp(port, error));
        ASSERT_TRUE(held.back()) << std::strerror(error) << daemon.why();
        ASSERT_TRUE(echoRoundTrip(held.back().get(), 400 + i, 4096, milliseconds(5000)))
            << "connection " << i << " of " << kLimit << " allowed" << daemon.why(20);
    }
    ASSERT_TRUE(upstream.waitAccepted(kLimit, deadlineIn(milliseconds(2000))));
    {
        int error = 0;
        UniqueFd extra = connectTcp(port, error);
        if (extra) {  // the kernel may complete the handshake; the daemon must then close it
            PeerClose end = waitPeerClose(extra.get(), deadlineIn(milliseconds(3000)));
            EXPECT_TRUE(end == PeerClose::Eof || end == PeerClose::Reset)
                << "connection beyond --max-connections: " << toString(end) << daemon.why(20);
        }
        std::this_thread::sleep_for(milliseconds(100));
        EXPECT_EQ(upstream.acceptedCount(), kLimit)
            << "the connection beyond the limit reached the upstream";
    }
    held.front().reset();  // orderly close frees a place
    std::this_thread::sleep_for(milliseconds(200));
    Deadline deadline = deadlineIn(milliseconds(3000));
    bool servedAgain = false;
    while (!servedAgain && Clock::now() < deadline) {
        int error = 0;
        UniqueFd again = connectTcp(port, error);
        servedAgain = again && echoRoundTrip(again.get(), 410, 4096, milliseconds(2000));
        if (!servedAgain) std::this_thread::sleep_for(milliseconds(100));
    }
    EXPECT_TRUE(servedAgain) << "no new connection served after one of the " << kLimit << " closed"
                             << daemon.why(20);
}

// --idle-timeout-ms 400: a silent connection is closed at both ends; one that keeps talking is
// not.
TEST(RelayLimitTest, IdleTimeoutClosesOnlySilentConnections) {
    TestServer upstream(echoUpstream(milliseconds(20000)));
    uint16_t port = pickFreePort();
    Daemon daemon(relayArgs(port, {upstream.address()}, {"--idle-timeout-ms", "400"}));
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
    int error = 0;
    UniqueFd silent = connectTcp(port, error);
    ASSERT_TRUE(silent) << std::strerror(error);
    UniqueFd busy = connectTcp(port, error);
    ASSERT_TRUE(busy) << std::strerror(error);
    auto started = Clock::now();
    for (int i = 0; i < 15; ++i) {  // 1.5 s of traffic every 100 ms
        ASSERT_TRUE(
            echoRoundTrip(busy.get(), 500 + static_cast<uint64_t>(i), 1000, milliseconds(2000)))
            << "busy connection broken after " << i * 100 << " ms" << daemon.why(20);
        std::this_thread::sleep_for(milliseconds(100));
    }
    PeerClose end = waitPeerClose(silent.get(), deadlineIn(milliseconds(500)));
    auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - started).count();
    EXPECT_TRUE(end == PeerClose::Eof || end == PeerClose::Reset)
        << "silent connection still open " << took
        << " ms after it went idle (--idle-timeout-ms "
           "400)"
        << daemon.why(20);
}

// An RST storm against a silent upstream: each client resets while its upstream connect is
// still running. The daemon cancels those connects at once instead of holding a slot and a
// SYN-SENT socket each for the whole connect timeout (20 s here).
TEST(RelayResetTest, ClientResetDuringConnectCancelsTheUpstreamConnect) {
    constexpr std::size_t kClients = 40;
    SilentUpstream blackhole;
    if (!blackhole.silent) GTEST_SKIP() << blackhole.why;
    uint16_t port = pickFreePort();
    Daemon daemon(relayArgs(port, {loopback(blackhole.port)},
                            {"--connect-timeout-ms", "20000", "--max-connections", "64",
                             "--log-level", "debug"}));
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
    std::vector<UniqueFd> clients;
    for (std::size_t i = 0; i < kClients; ++i) {
        int error = 0;
        clients.push_back(connectTcp(port, error));
        ASSERT_TRUE(clients.back()) << std::strerror(error) << daemon.why();
    }
    Deadline deadline = deadlineIn(milliseconds(3000));
    while (synSentTo(blackhole.port) < kClients && Clock::now() < deadline)
        std::this_thread::sleep_for(milliseconds(20));
    ASSERT_EQ(synSentTo(blackhole.port), kClients)
        << "the daemon did not start an upstream connect per client" << daemon.why(20);

    for (auto& client : clients) resetClose(client);
    deadline = deadlineIn(milliseconds(3000));
    while (synSentTo(blackhole.port) > 0 && Clock::now() < deadline)
        std::this_thread::sleep_for(milliseconds(20));
    EXPECT_EQ(synSentTo(blackhole.port), 0u)
        << "upstream connects left behind by clients that reset" << daemon.why(20);
    EXPECT_EQ(daemon.waitLogLines("connect cancelled", kClients, milliseconds(2000)), kClients)
        << daemon.why(20);
    // Their slots are free again: each connection was released, as a client reset.
    EXPECT_EQ(daemon.waitLogLines("closed (client-reset)", kClients, milliseconds(2000)), kClients)
        << daemon.why(20);
    EXPECT_TRUE(daemon.running()) << daemon.why();
}

// A client uploads more than an upstream that never reads can take, then leaves (a reset: its
// FIN could never get past the bytes still queued): nothing polls its socket while both flows
// wait on the upstream, so only the timer can see it. The connection closes after
// --half-closed-timeout-ms without progress, not after the idle timeout. A half-closed
// connection whose bytes were all delivered (the upstream is thinking) stays open.
TEST(RelayLimitTest, HalfClosedTimeoutClosesOnlyConnectionsWhoseReceiverTakesNothing) {
    auto answered = std::make_shared<std::atomic<bool>>(false);
    TestServer thinking([answered](int fd, std::size_t) {
        uint64_t received = 0;
        waitPeerClose(fd, deadlineIn(milliseconds(5000)), &received);  // reads to the FIN
        std::this_thread::sleep_for(milliseconds(1500));  // longer than the timeout below
        const char reply[] = "done";
        int error = 0;
        answered->store(sendAll(fd, reply, 4, deadlineIn(milliseconds(2000)), error));
    });
    TestServer neverReads(nullptr);
    uint16_t port = pickFreePort();
    uint16_t thinkingPort = pickFreePort();
    TempDir configDir;
    std::string config = configDir.write(
        "splicegate.conf", routeSection("thinking", loopback(thinkingPort), {thinking.address()}));
    Daemon daemon(relayArgs(port, {neverReads.address()},
                            {"--half-closed-timeout-ms", "500", "--config", config,
                             "--log-level", "debug"}));
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
    ASSERT_TRUE(daemon.waitReady(thinkingPort)) << daemon.why();

    int error = 0;
    UniqueFd stuck = connectTcp(port, error);
    ASSERT_TRUE(stuck) << std::strerror(error);
    // More than the upstream's receive buffer, the relay's pipe and our send buffer take: part of
    // it stays unsent here; sent until nothing moves for 300 ms.
    std::vector<char> block(256 * 1024, 'x');
    uint64_t sent = 0;
    while (sent < 64 * kMiB) {
        int sendError = 0;
        if (!sendAll(stuck.get(), block.data(), block.size(), deadlineIn(milliseconds(300)),
                     sendError))
            break;
        sent += block.size();
    }
    ASSERT_LT(sent, 64 * kMiB) << "an upstream that never reads took 64 MiB";
    resetClose(stuck);

    UniqueFd patient = connectTcp(thinkingPort, error);
    ASSERT_TRUE(patient) << std::strerror(error);
    ASSERT_TRUE(sendAll(patient.get(), "question", 8, deadlineIn(milliseconds(2000)), error));
    ::shutdown(patient.get(), SHUT_WR);

    ASSERT_TRUE(neverReads.waitAccepted(1, deadlineIn(milliseconds(2000))));
    // Polled, not read: a read would be the progress the relay waits for.
    pollfd upstreamSide{neverReads.heldFds().front(), POLLRDHUP, 0};
    int ready = ::poll(&upstreamSide, 1, 4000);
    EXPECT_TRUE(ready == 1 && (upstreamSide.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0)
        << "a client that left with " << sent << " B sent to an upstream that never reads "
        << "still has its connection 4 s later" << daemon.why(20);
    EXPECT_EQ(daemon.waitLogLines("reason=client-reset", 1, milliseconds(2000)), 1u)
        << daemon.why(20);

    setIoTimeout(patient.get(), milliseconds(4000));
    char reply[8] = {};
    ssize_t got = ::recv(patient.get(), reply, sizeof reply, MSG_WAITALL);
    EXPECT_EQ(std::string(reply, got > 0 ? static_cast<std::size_t>(got) : 0), "done")
        << "a half-closed connection whose upstream was thinking was closed" << daemon.why(20);
    EXPECT_TRUE(answered->load());
}


// The half-closed check's send-queue branch: a client sends a little more than a never-reading
// upstream's small receive buffer, then its FIN. The relay passes every byte and the FIN into
// its socket to the upstream (FIN_WAIT1: the flow is finished), where the bytes wait
// (SIOCOUTQ) for a receiver that takes nothing. Without the check the connection would stay
// half-closed until the idle timeout.
TEST(RelayLimitTest, HalfClosedTimeoutSeesBytesWaitingInTheSendQueue) {
    TestServer neverReads(nullptr);
    neverReads.setReceiveBuffer(4096);
    uint16_t port = pickFreePort();
    Daemon daemon(relayArgs(port, {neverReads.address()},
                            {"--half-closed-timeout-ms", "500", "--log-level", "debug"}));
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
    int error = 0;
    UniqueFd client = connectTcp(port, error);
    ASSERT_TRUE(client) << std::strerror(error);
    std::vector<char> request(12 * 1024, 'q');
    ASSERT_TRUE(sendAll(client.get(), request.data(), request.size(),
                        deadlineIn(milliseconds(2000)), error))
        << std::strerror(error);
    ::shutdown(client.get(), SHUT_WR);
    ASSERT_TRUE(waitTcpSocket(neverReads.port(), 0x04, false, milliseconds(3000)))
        << "the relay never passed the FIN on behind its bytes" << daemon.why(20);
    EXPECT_TRUE(connectionEnds(client.get(), milliseconds(4000)))
        << "bytes waiting in the relay's send queue kept a half-closed connection open"
        << daemon.why(20);
    EXPECT_EQ(daemon.waitLogLines("reason=idle-timeout", 1, milliseconds(2000)), 1u)
        << daemon.why(20);
}

// The half-closed check's CLOSE_WAIT branch: the client's FIN waits in the relay's socket behind
// bytes the relay has not read (its flow paused: the upstream never reads), so no flow has seen
// it; only the socket's state says the client is gone. (A FIN still in the client's own send
// queue, behind bytes the relay's closed window refused, is not visible at the relay at all:
// that one is left to the idle timeout.)
TEST(RelayLimitTest, HalfClosedTimeoutSeesAFinQueuedBehindUnreadBytes) {
    TestServer neverReads(nullptr);
    neverReads.setReceiveBuffer(4096);
    uint16_t port = pickFreePort();
    Daemon daemon(relayArgs(port, {neverReads.address()},
                            {"--half-closed-timeout-ms", "500", "--lane", "buffer",
                             "--log-level", "debug"}));
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
    int error = 0;
    UniqueFd client = connectTcp(port, error);
    ASSERT_TRUE(client) << std::strerror(error);
    const uint16_t clientPort = localPort(client.get());
    // Steps until the relay stops reading (its send queue to the upstream grows to a few MiB
    // first): bytes then wait in its receive queue while none is left in ours, so the FIN sent
    // next reaches it. Paused = the same bytes still unread 200 ms later. The steps are smaller
    // than the relay's receive window, so the step that finds it paused still fits in it.
    std::vector<char> block(16 * 1024, 'x');
    bool paused = false;
    for (int step = 0; step < 1024 && !paused; ++step) {
        ASSERT_TRUE(sendAll(client.get(), block.data(), block.size(),
                            deadlineIn(milliseconds(1000)), error))
            << std::strerror(error);
        // Our bytes must all reach the relay before the next step: the next FIN must not wait
        // behind them here.
        int unsent = -1;
        Deadline drained = deadlineIn(milliseconds(500));
        while ((::ioctl(client.get(), SIOCOUTQ, &unsent) != 0 || unsent != 0) &&
               Clock::now() < drained)
            std::this_thread::sleep_for(milliseconds(2));
        ASSERT_EQ(unsent, 0) << "the relay's receive window closed on a step of "
                             << block.size() << " B" << daemon.why(20);
        long unread = receiveQueue(port, clientPort);
        if (unread <= 0) continue;
        std::this_thread::sleep_for(milliseconds(200));
        paused = receiveQueue(port, clientPort) == unread;
    }
    ASSERT_TRUE(paused) << "the relay never left bytes unread with our send queue empty"
                        << daemon.why(20);
    ::shutdown(client.get(), SHUT_WR);  // a FIN, not a reset
    ASSERT_TRUE(waitTcpSocket(port, 0x08, true, milliseconds(3000)))
        << "the relay's socket of the client is not in CLOSE_WAIT" << daemon.why(20);
    EXPECT_TRUE(connectionEnds(client.get(), milliseconds(4000)))
        << "a FIN queued behind unread bytes kept the connection open" << daemon.why(20);
    EXPECT_EQ(daemon.waitLogLines("reason=idle-timeout", 1, milliseconds(2000)), 1u)
        << daemon.why(20);
}

}  // namespace
}  // namespace splicegate::test
