// The daemon as an operator sees it: thousands of idle connections at a fixed thread cost,
// SIGTERM drain, SIGHUP route reloads, and start-up errors with the documented exit codes.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/Daemon.h"
#include "tests/support/PatternStream.h"
#include "tests/support/Sockets.h"
#include "tests/support/TestServer.h"
#include "tests/support/Traffic.h"

namespace splicegate::test {
namespace {

constexpr uint64_t kMiB = 1024 * 1024;

std::string engineName(const ::testing::TestParamInfo<std::string>& param) {
    return param.param;
}

long elapsedMs(Clock::time_point since) {
    return static_cast<long>(
        std::chrono::duration_cast<milliseconds>(Clock::now() - since).count());
}

// Thousands of idle connections (client connected, upstream accepted, no data) with --workers 2:
// the daemon's threads stay within workers + 8, memory stays modest, idle connections hold no
// pipes; they still forward when used; closing them all is clean (EOF upstream, fds released).
class RelayIdleTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RelayIdleTest, ThousandsOfIdleConnectionsCostNoThreads) {
    // With --lane auto (the default) the daemon budgets 2 fds per connection and its pipes as a
    // capped pool of their own (FdBudget, PipeFds::Shared), so idle connections are limited by
    // their sockets only: 8,000 where RLIMIT_NOFILE allows (this process holds both ends of
    // each, the daemon an eighth of its limit for pipes), never fewer than 1,500.
    const auto fdLimit = raiseFdLimit();
    const std::size_t kConnections =
        fdLimit > 1000 ? std::min<std::size_t>(8000, (fdLimit - fdLimit / 8 - 1000) / 2) : 0;
    ASSERT_GE(kConnections, 1500u) << "RLIMIT_NOFILE too low for this test";
    constexpr unsigned kWorkers = 2;
    constexpr long kThreadBound = kWorkers + 8;
    constexpr long kRssBoundKiB = 256 * 1024;
    constexpr long kPipeFdBound = 256;  // a few pooled pipes, never 2 per connection

    TestServer upstream(nullptr);  // hold mode: accept and keep, no thread per connection
    uint16_t port = pickFreePort();
    std::vector<std::string> extra;
    if (GetParam() != "default") extra = {"--splice-engine", GetParam()};
    Daemon daemon(relayArgs(port, {upstream.address()}, extra, kWorkers));
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
    long threadsAtStart = daemon.threadCount();
    long socketsAtStart = daemon.fdCounts().sockets;

    std::vector<UniqueFd> clients;
    clients.reserve(kConnections);
    long maxThreads = threadsAtStart;
    for (std::size_t i = 0; i < kConnections; ++i) {
        int error = 0;
        UniqueFd fd = connectTcp(port, error);
        ASSERT_TRUE(fd) << "connect #" << i << " failed: " << std::strerror(error) << daemon.why();
        clients.push_back(std::move(fd));
        if (i % 250 == 0) maxThreads = std::max(maxThreads, daemon.threadCount());
    }
    ASSERT_TRUE(upstream.waitAccepted(kConnections, deadlineIn(milliseconds(30000))))
        << "upstream accepted only " << upstream.acceptedCount() << " of " << kConnections
        << daemon.why();
    // Let any lazily started helper threads appear, sampling all the while.
    for (int i = 0; i < 20; ++i) {
        maxThreads = std::max(maxThreads, daemon.threadCount());
        std::this_thread::sleep_for(milliseconds(25));
    }
    long rss = daemon.rssKiB();
    Daemon::FdCounts fds = daemon.fdCounts();
    RecordProperty("daemon_max_threads", static_cast<int>(maxThreads));
    RecordProperty("daemon_rss_kib", static_cast<int>(rss));
    RecordProperty("daemon_pipe_fds", static_cast<int>(fds.pipes));
    EXPECT_LE(maxThreads, kThreadBound)
        << "daemon threads peaked at " << maxThreads << " with " << kConnections
        << " idle connections (at start " << threadsAtStart
        << ", bound workers + 8 = " << kThreadBound
        << "): idle connections must not park threads (docs/kernel-notes.md §1)";
    EXPECT_LT(rss, kRssBoundKiB) << "daemon RSS " << rss << " KiB with " << kConnections
                                 << " idle connections";
    EXPECT_LE(fds.pipes, kPipeFdBound)
        << "daemon holds " << fds.pipes << " pipe fds with " << kConnections
        << " idle connections (an idle connection must cost no pipe)";
    EXPECT_GE(fds.total, static_cast<long>(2 * kConnections)) << "daemon fd count " << fds.total;

    // Idle connections still forward: send a tag on three of them, each must arrive upstream.
    std::vector<int> held = upstream.heldFds();
    ASSERT_EQ(held.size(), kConnections);
    std::set<uint32_t> sentTags, gotTags;
    for (std::size_t i : {std::size_t{0}, kConnections / 2, kConnections - 1}) {
        uint32_t tag = static_cast<uint32_t>(0xab000000u + i);
        int error = 0;
        ASSERT_TRUE(
            sendAll(clients[i].get(), &tag, sizeof tag, deadlineIn(milliseconds(2000)), error));
        sentTags.insert(tag);
    }
    std::vector<pollfd> polls;
    for (int fd : held) polls.push_back({fd, POLLIN, 0});
    Deadline deadline = deadlineIn(milliseconds(5000));
    while (gotTags.size() < sentTags.size() && Clock::now() < deadline) {
        if (::poll(polls.data(), polls.size(), 100) <= 0) continue;
        for (auto& p : polls) {
            if ((p.revents & POLLIN) == 0) continue;
            uint32_t tag = 0;
            int error = 0;
            if (recvExact(p.fd, &tag, sizeof tag, deadlineIn(milliseconds(1000)), error)) {
                gotTags.insert(tag);
            }
            p.events = 0;
        }
    }
    EXPECT_EQ(gotTags, sentTags) << "tags sent on idle connections did not all arrive upstream";

    // Close every client: every upstream connection must see EOF.
    auto closeStart = Clock::now();
    clients.clear();
    std::size_t eofs = 0, resets = 0;
    for (auto& p : polls) p.events = POLLIN;
    deadline = deadlineIn(milliseconds(15000));
    while (eofs + resets < kConnections && Clock::now() < deadline) {
        if (::poll(polls.data(), polls.size(), 100) <= 0) continue;
        for (auto& p : polls) {
            if (p.revents == 0 || p.events == 0) continue;
            char byte = 0;
            ssize_t n = ::recv(p.fd, &byte, 1, MSG_DONTWAIT);
            if (n == 0) {
                ++eofs;
            } else if (n < 0 && errno == ECONNRESET) {
                ++resets;
            } else {
                continue;
            }
            p.events = 0;
            p.fd = -1;  // poll ignores negative fds
        }
    }
    EXPECT_EQ(eofs + resets, kConnections)
        << "after closing all clients, " << eofs << " upstream connections saw EOF and " << resets
        << " RST within " << elapsedMs(closeStart) << " ms; expected all " << kConnections
        << daemon.why(20);
    EXPECT_EQ(resets, 0u) << "a client's orderly close reached the upstream as RST";
    // Finish the upstream halves; the daemon must release its sockets.
    upstream.stop();
    deadline = deadlineIn(milliseconds(10000));
    Daemon::FdCounts after = daemon.fdCounts();
    while (after.sockets > socketsAtStart && Clock::now() < deadline) {
        std::this_thread::sleep_for(milliseconds(50));
        after = daemon.fdCounts();
    }
    EXPECT_LE(after.sockets, socketsAtStart)
        << "daemon still holds " << after.sockets << " sockets after every connection closed (had "
        << socketsAtStart << " before any connection): connections leaked";
    EXPECT_LE(daemon.threadCount(), kThreadBound);
    EXPECT_TRUE(daemon.running()) << daemon.why();
}

INSTANTIATE_TEST_SUITE_P(Engines, RelayIdleTest,
                         ::testing::Values(std::string("default"), std::string("chain"),
                                           std::string("inline")),
                         engineName);

// 120 connections one after another, closing in different ways (orderly after a duplex
// exchange, client RST, no data at all): every one is served, nothing leaks, and SIGTERM then
// exits 0 at once.
TEST(RelayChurnTest, SequentialConnectionsAreServedAndReleased) {
    constexpr std::size_t kConnections = 120;
    constexpr uint64_t kSize = 64 * 1024;
    auto board = std::make_shared<DuplexBoard>();
    TestServer upstream(duplexUpstream(board, milliseconds(20000)));
    uint16_t port = pickFreePort();
    Daemon daemon(relayArgs(port, {upstream.address()}));
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
    long socketsAtStart = daemon.fdCounts().sockets;

    std::vector<ClientRun> orderly;
    for (std::size_t i = 0; i < kConnections; ++i) {
        uint64_t id = 5000 + i;
        switch (i % 3) {
            case 0:
                orderly.push_back(duplexClient(port, id, kSize, kSize, milliseconds(10000)));
                break;
            case 1: {  // header, then RST
                int error = 0;
                UniqueFd fd = connectTcp(port, error);
                ASSERT_TRUE(fd) << "connection #" << i << ": " << std::strerror(error)
                                << daemon.why(20);
                sendHeader(fd.get(), StreamHeader{id, kSize}, deadlineIn(milliseconds(2000)),
                           error);
                resetClose(fd);
                break;
            }
            default: {  // connect and close, no data
                int error = 0;
                UniqueFd fd = connectTcp(port, error);
                ASSERT_TRUE(fd) << "connection #" << i << ": " << std::strerror(error)
                                << daemon.why(20);
                break;
            }
        }
        const ClientRun* last = orderly.empty() ? nullptr : &orderly.back();
        if (i % 3 == 0 && last != nullptr &&
            (last->connectError != 0 || !last->result.received.eof ||
             last->result.received.bytes != kSize)) {
            ADD_FAILURE() << "orderly connection #" << i << " (id " << id << ") was not served: "
                          << (last->connectError != 0 ? std::strerror(last->connectError)
                                                      : last->result.received.describe())
                          << "; earlier connections had closed normally" << daemon.why(20);
            break;
        }
    }
    board->waitSize(orderly.size(), deadlineIn(milliseconds(3000)));
    EXPECT_TRUE(duplexMatches(orderly, *board, kSize, kSize)) << daemon.why(20);

    Deadline deadline = deadlineIn(milliseconds(5000));
    long sockets = daemon.fdCounts().sockets;
    while (sockets > socketsAtStart && Clock::now() < deadline) {
        std::this_thread::sleep_for(milliseconds(20));
        sockets = daemon.fdCounts().sockets;
    }
    EXPECT_LE(sockets, socketsAtStart)
        << "after " << kConnections << " connections all closed, the daemon holds " << sockets
        << " sockets (had " << socketsAtStart << " at start)";
    auto termAt = Clock::now();
    auto status = daemon.terminate(milliseconds(3000));
    ASSERT_TRUE(status) << "no exit 3 s after SIGTERM with no connection open" << daemon.why(20);
    EXPECT_TRUE(status->isExit(0)) << status->describe() << daemon.why(20);
    EXPECT_LT(elapsedMs(termAt), 1000) << "an idle daemon should exit at once on SIGTERM";
}

// SIGTERM with an upload in flight: new connects are refused soon after, the in-flight transfer
// completes byte-exact (including the reply after it), and the daemon exits 0.
TEST(RelayDrainTest, SigtermLetsInFlightTransferFinish) {
    constexpr uint64_t kUpload = 24 * kMiB;
    constexpr uint64_t kReply = 1 * kMiB;
    constexpr uint64_t kId = 77;
    auto uploads = std::make_shared<SinkBoard>();
    auto progress = std::make_shared<std::atomic<uint64_t>>(0);
    TestServer upstream([uploads, progress](int fd, std::size_t) {
        Deadline deadline = deadlineIn(milliseconds(30000));
        StreamHeader header;
        int error = 0;
        if (!recvHeader(fd, header, deadline, error) || header.id != kId) return;  // probes
        StreamResult upload = receiveAll(fd, deadline, UINT64_MAX, progress.get());
        uploads->put(0, upload);
        if (upload.eof) sendPattern(fd, u2cSeed(kId), header.size, deadline);
    });
    uint16_t port = pickFreePort();
    Daemon daemon(relayArgs(port, {upstream.address()}, {"--drain-timeout-ms", "20000"}));
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();

    int error = 0;
    UniqueFd client = connectTcp(port, error);
    ASSERT_TRUE(client) << std::strerror(error) << daemon.why();
    Deadline deadline = deadlineIn(milliseconds(30000));
    ASSERT_TRUE(sendHeader(client.get(), StreamHeader{kId, kReply}, deadline, error));
    StreamResult sent, reply;
    std::jthread transfer([&] {  // joins on every exit path (bounded by `deadline`)
        SendOptions paced;       // ~1.5 s in all
        paced.chunk = 128 * 1024;
        paced.pauseEveryChunk = std::chrono::microseconds(8000);
        sent = sendPattern(client.get(), c2uSeed(kId), kUpload, deadline, paced);
        reply = receiveAll(client.get(), deadline);
    });
    Deadline until = deadlineIn(milliseconds(10000));
    while (progress->load() < 2 * kMiB && Clock::now() < until) {
        std::this_thread::sleep_for(milliseconds(5));
    }
    ASSERT_GE(progress->load(), 2 * kMiB) << "transfer never started" << daemon.why();
    daemon.signal(SIGTERM);
    auto termAt = Clock::now();

    // New connects must be refused soon.
    bool refused = false;
    int lastError = 0;
    while (elapsedMs(termAt) < 2000) {
        UniqueFd probe = connectTcp(port, lastError, milliseconds(500));
        if (!probe && lastError == ECONNREFUSED) {
            refused = true;
            break;
        }
        std::this_thread::sleep_for(milliseconds(20));
    }
    EXPECT_TRUE(refused) << "2 s after SIGTERM a new connect still "
                         << (lastError == 0 ? "succeeded" : std::strerror(lastError))
                         << " (expected ECONNREFUSED: the listener should be closed)";

    transfer.join();
    EXPECT_TRUE(sent.ok() && sent.bytes == kUpload)
        << "upload during drain: " << sent.describe() << daemon.why(20);
    ASSERT_TRUE(uploads->waitSize(1, deadlineIn(milliseconds(2000))))
        << "upstream never saw the end of the upload" << daemon.why(20);
    StreamResult upload = uploads->snapshot().front().second;
    EXPECT_TRUE(upload.eof) << upload.describe();
    EXPECT_EQ(upload.bytes, kUpload) << "upload at upstream: " << upload.describe();
    EXPECT_EQ(upload.sha256, patternSha256(c2uSeed(kId), kUpload)) << "upload corrupted";
    EXPECT_TRUE(reply.eof) << reply.describe();
    EXPECT_EQ(reply.bytes, kReply) << "reply at client: " << reply.describe();
    EXPECT_EQ(reply.sha256, patternSha256(u2cSeed(kId), kReply)) << "reply corrupted";

    auto status = daemon.waitExit(milliseconds(5000));
    ASSERT_TRUE(status) << "daemon still running 5 s after its last connection ended"
                        << daemon.why();
    EXPECT_TRUE(status->isExit(0))
        << "SIGTERM drain ended with " << status->describe() << daemon.why();
}

// SIGTERM with an idle connection and --drain-timeout-ms 500: exit 0 within ~2 s, and the idle
// connection is closed at both ends.
TEST(RelayDrainTest, DrainTimeoutClosesIdleConnection) {
    TestServer upstream(nullptr);
    uint16_t port = pickFreePort();
    Daemon daemon(relayArgs(port, {upstream.address()}, {"--drain-timeout-ms", "500"}));
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
    int error = 0;
    UniqueFd client = connectTcp(port, error);
    ASSERT_TRUE(client) << std::strerror(error) << daemon.why();
    ASSERT_TRUE(upstream.waitAccepted(1, deadlineIn(milliseconds(3000)))) << daemon.why();

    daemon.signal(SIGTERM);
    auto termAt = Clock::now();
    auto status = daemon.waitExit(milliseconds(2500));
    long took = elapsedMs(termAt);
    ASSERT_TRUE(status) << "daemon still running 2.5 s after SIGTERM with --drain-timeout-ms 500"
                        << daemon.why();
    EXPECT_TRUE(status->isExit(0)) << status->describe() << daemon.why();
    EXPECT_LE(took, 2000) << "exit took " << took << " ms";
    PeerClose clientEnd = waitPeerClose(client.get(), deadlineIn(milliseconds(1000)));
    EXPECT_NE(clientEnd, PeerClose::Timeout) << "client connection not closed by the drain";
    std::vector<int> held = upstream.heldFds();
    ASSERT_EQ(held.size(), 1u);
    PeerClose upstreamEnd = waitPeerClose(held[0], deadlineIn(milliseconds(1000)));
    EXPECT_NE(upstreamEnd, PeerClose::Timeout) << "upstream connection not closed by the drain";
}

// SIGINT drains like SIGTERM.
TEST(RelayDrainTest, SigintAlsoDrainsAndExitsZero) {
    TestServer upstream(echoUpstream(milliseconds(20000)));
    uint16_t port = pickFreePort();
    Daemon daemon(relayArgs(port, {upstream.address()}, {"--drain-timeout-ms", "300"}));
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
    int error = 0;
    UniqueFd client = connectTcp(port, error);
    ASSERT_TRUE(client) << std::strerror(error);
    ASSERT_TRUE(echoRoundTrip(client.get(), 95, 64 * 1024, milliseconds(5000))) << daemon.why();
    daemon.signal(SIGINT);
    auto status = daemon.waitExit(milliseconds(2500));
    ASSERT_TRUE(status) << "daemon still running 2.5 s after SIGINT (--drain-timeout-ms 300)"
                        << daemon.why();
    EXPECT_TRUE(status->isExit(0)) << status->describe() << daemon.why();
    EXPECT_NE(waitPeerClose(client.get(), deadlineIn(milliseconds(1000))), PeerClose::Timeout);
}

// Config-file reloads on SIGHUP. The established connection is an echo round trip each time.
class RelayReloadTest : public ::testing::Test {
  protected:
    TestServer echoA_{echoUpstream(milliseconds(30000))};
    TestServer echoB_{echoUpstream(milliseconds(30000))};
    TempDir configDir_;
    uint16_t portFirst_ = pickFreePort();
    uint16_t portSecond_ = pickFreePort();

    std::string writeConfig(const std::string& content) {
        return configDir_.write("splicegate.conf", content);
    }
    std::string first(const TestServer& upstream) {
        return routeSection("first", loopback(portFirst_), {upstream.address()});
    }
    std::string second() {
        return routeSection("second", loopback(portSecond_), {echoB_.address()});
    }

    static UniqueFd open(uint16_t port, Daemon& daemon) {
        int error = 0;
        UniqueFd fd = connectTcp(port, error);
        EXPECT_TRUE(fd) << "connect to " << port << ": " << std::strerror(error) << daemon.why();
        return fd;
    }
};

TEST_F(RelayReloadTest, SighupAddsRouteAndKeepsEstablishedConnections) {
    std::string config = writeConfig(first(echoA_));
    Daemon daemon({"--config", config, "--workers", "2"});
    ASSERT_TRUE(daemon.waitReady(portFirst_)) << daemon.why();
    UniqueFd established = open(portFirst_, daemon);
    ASSERT_TRUE(established);
    ASSERT_TRUE(echoRoundTrip(established.get(), 71, 256 * 1024, milliseconds(10000)));
    EXPECT_FALSE(isListening(portSecond_));

    writeConfig(first(echoA_) + second());
    daemon.signal(SIGHUP);
    ASSERT_TRUE(waitListening(portSecond_, true, deadlineIn(milliseconds(5000))))
        << "route.second (port " << portSecond_ << ") not listening 5 s after SIGHUP"
        << daemon.why(20);
    UniqueFd onSecond = open(portSecond_, daemon);
    ASSERT_TRUE(onSecond);
    EXPECT_TRUE(echoRoundTrip(onSecond.get(), 72, 2 * kMiB, milliseconds(10000))) << daemon.why(20);
    EXPECT_EQ(echoB_.acceptedCount(), 1u) << "route.second did not reach its own upstream";
    EXPECT_TRUE(echoRoundTrip(established.get(), 73, 2 * kMiB, milliseconds(10000)))
        << "the connection established before SIGHUP stopped relaying" << daemon.why(20);
    // The unchanged route still takes new connections.
    UniqueFd again = open(portFirst_, daemon);
    ASSERT_TRUE(again);
    EXPECT_TRUE(echoRoundTrip(again.get(), 74, 1 * kMiB, milliseconds(10000))) << daemon.why(20);
    EXPECT_TRUE(daemon.running()) << daemon.why();
}

TEST_F(RelayReloadTest, SighupRemovesRouteButEstablishedConnectionContinues) {
    std::string config = writeConfig(first(echoA_) + second());
    Daemon daemon({"--config", config, "--workers", "2"});
    ASSERT_TRUE(daemon.waitReady(portFirst_)) << daemon.why();
    ASSERT_TRUE(daemon.waitReady(portSecond_)) << daemon.why();
    UniqueFd established = open(portFirst_, daemon);
    ASSERT_TRUE(established);
    ASSERT_TRUE(echoRoundTrip(established.get(), 81, 256 * 1024, milliseconds(10000)));

    writeConfig(second());
    daemon.signal(SIGHUP);
    EXPECT_TRUE(waitListening(portFirst_, false, deadlineIn(milliseconds(5000))))
        << "removed route.first (port " << portFirst_ << ") still listening 5 s after SIGHUP"
        << daemon.why(20);
    int error = 0;
    UniqueFd late = connectTcp(portFirst_, error, milliseconds(1000));
    EXPECT_FALSE(late) << "a new connection to the removed route was accepted";
    EXPECT_EQ(error, ECONNREFUSED) << std::strerror(error);
    EXPECT_TRUE(echoRoundTrip(established.get(), 82, 2 * kMiB, milliseconds(10000)))
        << "the connection on the removed route was cut" << daemon.why(20);
    UniqueFd onSecond = open(portSecond_, daemon);
    ASSERT_TRUE(onSecond);
    EXPECT_TRUE(echoRoundTrip(onSecond.get(), 83, 1 * kMiB, milliseconds(10000))) << daemon.why(20);
    // Closing the surviving connection is clean: the echo upstream's EOF comes back as EOF.
    ::shutdown(established.get(), SHUT_WR);
    EXPECT_EQ(waitPeerClose(established.get(), deadlineIn(milliseconds(3000))), PeerClose::Eof);
    EXPECT_TRUE(daemon.running()) << daemon.why();
}

TEST_F(RelayReloadTest, SighupChangesUpstreamForNewConnectionsOnly) {
    std::string config = writeConfig(first(echoA_));
    Daemon daemon({"--config", config, "--workers", "2"});
    ASSERT_TRUE(daemon.waitReady(portFirst_)) << daemon.why();
    UniqueFd established = open(portFirst_, daemon);
    ASSERT_TRUE(established);
    ASSERT_TRUE(echoRoundTrip(established.get(), 91, 256 * 1024, milliseconds(10000)));
    ASSERT_EQ(echoA_.acceptedCount(), 1u);

    writeConfig(first(echoB_));
    daemon.signal(SIGHUP);
    // The reload is asynchronous: new connections must reach B within 5 s.
    bool reachedB = false;
    Deadline deadline = deadlineIn(milliseconds(5000));
    while (!reachedB && Clock::now() < deadline) {
        UniqueFd probe = open(portFirst_, daemon);
        ASSERT_TRUE(probe);
        ASSERT_TRUE(echoRoundTrip(probe.get(), 92, 64 * 1024, milliseconds(5000))) << daemon.why();
        reachedB = echoB_.acceptedCount() > 0;
        if (!reachedB) std::this_thread::sleep_for(milliseconds(50));
    }
    EXPECT_TRUE(reachedB) << "after changing route.first's upstream and SIGHUP, new connections "
                             "still went to the old upstream"
                          << daemon.why(20);
    EXPECT_TRUE(echoRoundTrip(established.get(), 93, 2 * kMiB, milliseconds(10000)))
        << "the connection established before the change stopped relaying" << daemon.why(20);
}

// A config file that no longer parses: SIGHUP must keep the running configuration (and say why
// in the log) instead of dying or dropping routes.
TEST_F(RelayReloadTest, SighupWithBrokenConfigKeepsRunningConfig) {
    std::string config = writeConfig(first(echoA_));
    Daemon daemon({"--config", config, "--workers", "2"});
    ASSERT_TRUE(daemon.waitReady(portFirst_)) << daemon.why();
    UniqueFd established = open(portFirst_, daemon);
    ASSERT_TRUE(established);
    ASSERT_TRUE(echoRoundTrip(established.get(), 96, 64 * 1024, milliseconds(5000)));

    writeConfig(first(echoA_) + "bogus_reload_key = 1\n");
    daemon.signal(SIGHUP);
    EXPECT_EQ(daemon.waitLogLines("bogus_reload_key", 1, milliseconds(3000)), 1u)
        << "the log does not name the bad key after SIGHUP" << daemon.why();
    ASSERT_TRUE(daemon.running()) << "a bad config on SIGHUP killed the daemon" << daemon.why();
    EXPECT_TRUE(isListening(portFirst_)) << "a bad config on SIGHUP dropped the running routes";
    UniqueFd fresh = open(portFirst_, daemon);
    ASSERT_TRUE(fresh);
    EXPECT_TRUE(echoRoundTrip(fresh.get(), 97, 256 * 1024, milliseconds(5000))) << daemon.why(20);
    EXPECT_TRUE(echoRoundTrip(established.get(), 98, 256 * 1024, milliseconds(5000)))
        << daemon.why(20);
}

// Reloads while data is flowing: busy connections on an unchanged route are not disturbed.
TEST_F(RelayReloadTest, RepeatedSighupDuringBusyTransfers) {
    constexpr std::size_t kConnections = 4;
    constexpr uint64_t kSize = 32 * kMiB;
    auto board = std::make_shared<DuplexBoard>();
    TestServer busy(duplexUpstream(board, milliseconds(60000)));
    std::string config = writeConfig(first(busy));
    Daemon daemon({"--config", config, "--workers", "2"});
    ASSERT_TRUE(daemon.waitReady(portFirst_)) << daemon.why();

    std::vector<ClientRun> runs;
    std::jthread clients([&] {
        runs = duplexClients(portFirst_, kConnections, 7000, kSize, kSize, milliseconds(60000));
    });
    for (int i = 0; i < 6; ++i) {
        std::this_thread::sleep_for(milliseconds(150));
        writeConfig(first(busy) + (i % 2 == 0 ? second() : std::string()));
        daemon.signal(SIGHUP);
    }
    clients.join();
    EXPECT_TRUE(duplexMatches(runs, *board, kSize, kSize)) << daemon.why(20);
    EXPECT_TRUE(daemon.running()) << daemon.why();
}

// --- Start-up input ---

std::vector<std::string> nonEmptyLines(const std::string& text) {
    std::vector<std::string> lines;
    std::size_t start = 0;
    while (start < text.size()) {
        std::size_t end = text.find('\n', start);
        if (end == std::string::npos) end = text.size();
        std::string line = text.substr(start, end - start);
        if (line.find_first_not_of(" \t\r") != std::string::npos) lines.push_back(line);
        start = end + 1;
    }
    return lines;
}

::testing::AssertionResult usageError(const std::vector<std::string>& args,
                                      const std::string& named, int wantedCode = 2) {
    std::vector<std::string> argv{daemonBinary()};
    argv.insert(argv.end(), args.begin(), args.end());
    ProcessResult result = runProcess(argv, milliseconds(10000));
    std::string command;
    for (const auto& a : args) command += " '" + a + "'";
    if (!result.status) {
        return ::testing::AssertionFailure() << "splicegate" << command << " did not exit in 10 s";
    }
    auto lines = nonEmptyLines(result.err);
    if (!result.status->isExit(wantedCode) || lines.size() != 1 ||
        lines[0].find(named) == std::string::npos) {
        return ::testing::AssertionFailure()
               << "splicegate" << command << ": expected exit code " << wantedCode
               << " and exactly one stderr line naming '" << named << "'; got "
               << result.status->describe() << " and " << lines.size() << " stderr lines:\n"
               << result.err << "(stdout: " << result.out << ")";
    }
    return ::testing::AssertionSuccess();
}

TEST(RelayStartupTest, UnknownOptionIsAUsageErrorNamingIt) {
    EXPECT_TRUE(usageError({"--no-such-option"}, "no-such-option"));
    EXPECT_TRUE(
        usageError({"--listen", "127.0.0.1:1", "--upstream", "127.0.0.1:2", "--frobnicate", "3"},
                   "frobnicate"));
}

TEST(RelayStartupTest, BadValuesAreUsageErrorsNamingThem) {
    EXPECT_TRUE(usageError(
        {"--listen", "127.0.0.1:1", "--upstream", "127.0.0.1:2", "--workers", "many"}, "workers"));
    EXPECT_TRUE(usageError(
        {"--listen", "127.0.0.1:1", "--upstream", "127.0.0.1:2", "--splice-engine", "warp"},
        "splice-engine"));
    EXPECT_TRUE(
        usageError({"--listen", "not-an-address", "--upstream", "127.0.0.1:2"}, "not-an-address"));
}

TEST(RelayStartupTest, ConfigFileErrorsNameTheKeyOrFile) {
    TempDir dir;
    // A route, so that the unknown key is the file's only problem (each one is a line).
    std::string config = dir.write(
        "bad.conf", "workers = 2\nlisten = 127.0.0.1:1\nupstream = 127.0.0.1:2\nbogus_key = 1\n");
    EXPECT_TRUE(usageError({"--config", config}, "bogus_key"));
    EXPECT_TRUE(usageError({"--config", dir.path() + "/missing.conf"}, "missing.conf"));
}

TEST(RelayStartupTest, HelpAndVersionExitZero) {
    ProcessResult help = runProcess({daemonBinary(), "--help"});
    ASSERT_TRUE(help.status);
    EXPECT_TRUE(help.status->isExit(0)) << help.status->describe() << "\n" << help.err;
    EXPECT_NE(help.out.find("--listen"), std::string::npos) << "--help output:\n" << help.out;
    EXPECT_NE(help.out.find("--upstream"), std::string::npos);

    ProcessResult version = runProcess({daemonBinary(), "--version"});
    ASSERT_TRUE(version.status);
    EXPECT_TRUE(version.status->isExit(0)) << version.status->describe() << "\n" << version.err;
    EXPECT_NE(version.out.find(SPLICEGATE_VERSION), std::string::npos)
        << "--version should print " << SPLICEGATE_VERSION << "; printed: " << version.out;
}

// A listen address already taken is a runtime failure: exit 1, one line naming the address.
TEST(RelayStartupTest, ListenAddressInUseExitsOne) {
    uint16_t busy = 0;
    UniqueFd holder = listenTcp(busy);
    uint16_t upstream = pickFreePort();
    ProcessResult result = runProcess(
        {daemonBinary(), "--listen", loopback(busy), "--upstream", loopback(upstream), "--workers",
         "1", "--admin-socket", "", "--metrics-listen", "", "--audit-dir", ""},
        milliseconds(10000));
    ASSERT_TRUE(result.status) << "daemon kept running although its listen port was taken";
    EXPECT_TRUE(result.status->isExit(1)) << result.status->describe() << "\n" << result.err;
    EXPECT_FALSE(grepLines(result.err, std::to_string(busy)).empty())
        << "stderr does not name the busy address:\n"
        << result.err;
}

}  // namespace
}  // namespace splicegate::test
