// The buffer lane and the adaptive lanes through the real daemon (issue 13): byte-exact duplex
// transfers in each lane, one connection that goes interactive -> bulk -> interactive in both
// directions at once (switching lanes both ways), thousands of connections sending at once on a
// ring of 64 buffers (-ENOBUFS all the time), and idle connections that hold no buffer. Every
// transfer is checked end to end (SHA-256 or the pattern itself), and the lane metrics say
// which lane moved the bytes.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/Daemon.h"
#include "tests/support/HttpFetch.h"
#include "tests/support/PatternStream.h"
#include "tests/support/Sockets.h"
#include "tests/support/TestServer.h"
#include "tests/support/Traffic.h"

namespace splicegate::test {
namespace {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;

// Sum of the samples of `name` whose labels contain every one of `labels` (`key="value"`);
// -1 when the page could not be fetched.
double metricSum(uint16_t port, const std::string& name, const std::vector<std::string>& labels) {
    HttpReply page = httpGet(port, "/metrics");
    if (!page.error.empty() || page.status != 200) return -1;
    double sum = 0;
    std::istringstream lines(page.body);
    std::string line;
    while (std::getline(lines, line)) {
        if (line.rfind(name, 0) != 0) continue;
        auto rest = line.substr(name.size());
        if (!rest.empty() && rest[0] != '{' && rest[0] != ' ') continue;  // a longer name
        bool all = true;
        for (const auto& label : labels) all = all && rest.find(label) != std::string::npos;
        if (!all) continue;
        sum += std::stod(rest.substr(rest.rfind(' ') + 1));
    }
    return sum;
}

// Polls metricSum until `done(value)` or the deadline; returns the last value.
template <typename Done>
double waitMetric(uint16_t port, const std::string& name, const std::vector<std::string>& labels,
                  Done done, milliseconds timeout = milliseconds(5000)) {
    Deadline deadline = deadlineIn(timeout);
    double value = metricSum(port, name, labels);
    while (!done(value) && Clock::now() < deadline) {
        std::this_thread::sleep_for(milliseconds(50));
        value = metricSum(port, name, labels);
    }
    return value;
}

// The daemon in front of `upstream`, with metrics on a port of its own.
struct Relay {
    uint16_t port = pickFreePort();
    uint16_t metrics = pickFreePort();
    std::unique_ptr<Daemon> daemon;

    Relay(const std::string& upstream, std::vector<std::string> extra, unsigned workers = 2) {
        extra.insert(extra.end(), {"--metrics-listen", loopback(metrics)});
        daemon = std::make_unique<Daemon>(relayArgs(port, {upstream}, extra, workers));
    }
};

// ---- byte-exact in each lane -----------------------------------------------------------------

class LaneDuplexTest : public ::testing::TestWithParam<std::string> {};

// Bulk and small connections at once, full duplex, in one lane (or both, with auto).
TEST_P(LaneDuplexTest, BulkAndSmallConnectionsAtOnceAreByteExact) {
    const std::string lane = GetParam();
    raiseFdLimit();
    auto board = std::make_shared<DuplexBoard>();
    TestServer upstream(duplexUpstream(board, milliseconds(60000)));
    Relay relay(upstream.address(), {"--lane", lane});
    ASSERT_TRUE(relay.daemon->waitReady(relay.port)) << relay.daemon->why();

    std::vector<ClientRun> bulk, small;
    std::thread bulkThread([&] {
        bulk = duplexClients(relay.port, 8, 100, 8 * kMiB + 17, 8 * kMiB + 5, milliseconds(60000));
    });
    small = duplexClients(relay.port, 48, 1000, 3 * kKiB + 1, 700, milliseconds(60000));
    bulkThread.join();
    board->waitSize(56, deadlineIn(milliseconds(5000)));
    EXPECT_TRUE(duplexMatches(bulk, *board, 8 * kMiB + 17, 8 * kMiB + 5)) << relay.daemon->why(20);
    EXPECT_TRUE(duplexMatches(small, *board, 3 * kKiB + 1, 700)) << relay.daemon->why(20);

    auto bytesIn = [&](const char* which) {
        return metricSum(relay.metrics, "splicegate_lane_bytes_total",
                         {std::string("lane=\"") + which + "\""});
    };
    double total = 2 * 8 * (8 * kMiB) + 48 * (3 * kKiB + 700);
    double buffer = bytesIn("buffer"), splice = bytesIn("splice");
    ASSERT_GE(buffer, 0) << "no metrics page";
    EXPECT_GE(buffer + splice, total) << "lane bytes do not add up to what was relayed";
    if (lane == "buffer") {
        EXPECT_EQ(splice, 0) << "--lane buffer moved bytes by splice";
    }
    if (lane == "splice") {
        EXPECT_EQ(buffer, 0) << "--lane splice moved bytes through buffers";
    }
    if (lane == "auto") {
        // Whether a bulk direction gets to switch depends on timing: on loopback the kernel can
        // receive all 8 MiB into the ring's 64 MiB of buffers within one loop turn, before the
        // switch applies. LaneSwitchTest checks the switches themselves.
        EXPECT_GT(buffer, 0) << "auto: nothing went through the buffer lane";
    }
}

INSTANTIATE_TEST_SUITE_P(Lanes, LaneDuplexTest,
                         ::testing::Values(std::string("buffer"), std::string("splice"),
                                           std::string("auto")),
                         [](const auto& param) { return param.param; });

// ---- switches on one connection ----------------------------------------------------------------

// Interactive exchanges, then bulk, then interactive again, on each of several connections to an
// echo upstream (so both directions carry the same traffic at once): every round trip must come
// back byte-exact, and the directions must have moved to splice and back.
TEST(LaneSwitchTest, InteractiveBulkInteractiveOnOneConnectionSwitchesBothWaysLosingNothing) {
    constexpr int kConnections = 4;
    constexpr int kInteractive = 24;
    TestServer upstream(echoUpstream(milliseconds(60000)));
    Relay relay(upstream.address(), {"--lane", "auto"});
    ASSERT_TRUE(relay.daemon->waitReady(relay.port)) << relay.daemon->why();

    std::vector<std::string> failures(kConnections);
    std::vector<std::thread> threads;
    for (int i = 0; i < kConnections; ++i) {
        threads.emplace_back([&, i] {
            int error = 0;
            UniqueFd fd = connectTcp(relay.port, error);
            if (!fd) {
                failures[i] = std::string("connect: ") + std::strerror(error);
                return;
            }
            uint64_t seed = 7000 + static_cast<uint64_t>(i) * 100;
            auto phase = [&](const char* what, uint64_t size, int rounds) {
                for (int r = 0; r < rounds && failures[i].empty(); ++r) {
                    auto ok = echoRoundTrip(fd.get(), seed++, size, milliseconds(30000));
                    if (!ok)
                        failures[i] =
                            std::string(what) + " round " + std::to_string(r) + ": " + ok.message();
                }
            };
            phase("interactive", 64, kInteractive);
            phase("bulk", 16 * kMiB + 3, 1);
            phase("interactive after bulk", 100, kInteractive);
            phase("bulk again", 4 * kMiB, 1);
            phase("interactive at the end", 1, kInteractive);
        });
    }
    for (auto& thread : threads) thread.join();
    for (int i = 0; i < kConnections; ++i)
        EXPECT_TRUE(failures[i].empty())
            << "connection " << i << ": " << failures[i] << relay.daemon->why(20);

    auto toSplice = metricSum(relay.metrics, "splicegate_lane_switches_total", {"to=\"splice\""});
    auto toBuffer = metricSum(relay.metrics, "splicegate_lane_switches_total", {"to=\"buffer\""});
    // Each connection, both directions: two bulk phases each preceded by interactive traffic.
    EXPECT_GE(toSplice, 2 * kConnections) << "directions that moved to splice";
    EXPECT_GE(toBuffer, 2 * kConnections) << "directions that came back to the buffer lane";
    std::cout << "[ info ] lane switches: to splice " << toSplice << ", to buffer " << toBuffer
              << "\n";
}

// ---- many connections on a tiny ring
// -------------------------------------------------------------

// A single-threaded epoll echo server in a child process of its own (so its fds do not count
// against the test's RLIMIT_NOFILE): everything read is written back; EOF is passed on once all
// was written. Killed by pid in the destructor.
class EchoProcess {
  public:
    EchoProcess() {
        listener_ = listenTcp(port_, false, 16384);
        pid_ = ::fork();
        if (pid_ < 0) throw std::system_error(errno, std::generic_category(), "fork");
        if (pid_ == 0) {
            ::prctl(PR_SET_PDEATHSIG, SIGKILL);
            serve();
            ::_exit(0);
        }
        listener_.reset();
    }
    ~EchoProcess() {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
    }
    EchoProcess(const EchoProcess&) = delete;
    EchoProcess& operator=(const EchoProcess&) = delete;
    std::string address() const { return loopback(port_); }

  private:
    struct Peer {
        std::string pending;
        bool eof = false;
    };

    void serve() {
        int epoll = ::epoll_create1(0);
        ::fcntl(listener_.get(), F_SETFL, O_NONBLOCK);
        epoll_event event{};
        event.events = EPOLLIN;
        event.data.fd = listener_.get();
        ::epoll_ctl(epoll, EPOLL_CTL_ADD, listener_.get(), &event);
        std::map<int, Peer> peers;
        std::vector<epoll_event> events(1024);
        char buffer[65536];
        auto update = [&](int fd, Peer& peer) {
            epoll_event e{};
            e.data.fd = fd;
            e.events = (peer.pending.size() < 1 * kMiB && !peer.eof ? EPOLLIN : 0u) |
                       (peer.pending.empty() ? 0u : EPOLLOUT);
            ::epoll_ctl(epoll, EPOLL_CTL_MOD, fd, &e);
        };
        for (;;) {
            int n = ::epoll_wait(epoll, events.data(), static_cast<int>(events.size()), 1000);
            for (int i = 0; i < n; ++i) {
                int fd = events[i].data.fd;
                if (fd == listener_.get()) {
                    for (;;) {
                        int client = ::accept4(fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
                        if (client < 0) break;
                        peers[client];
                        epoll_event e{};
                        e.data.fd = client;
                        e.events = EPOLLIN;
                        ::epoll_ctl(epoll, EPOLL_CTL_ADD, client, &e);
                    }
                    continue;
                }
                auto& peer = peers[fd];
                if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR) && !peer.eof) {
                    auto got = ::read(fd, buffer, sizeof buffer);
                    if (got > 0) peer.pending.append(buffer, static_cast<std::size_t>(got));
                    if (got == 0) peer.eof = true;
                    if (got < 0 && errno != EAGAIN) {
                        ::close(fd);
                        peers.erase(fd);
                        continue;
                    }
                }
                if (!peer.pending.empty()) {
                    auto sent = ::send(fd, peer.pending.data(), peer.pending.size(), MSG_NOSIGNAL);
                    if (sent > 0) peer.pending.erase(0, static_cast<std::size_t>(sent));
                    if (sent < 0 && errno != EAGAIN) {
                        ::close(fd);
                        peers.erase(fd);
                        continue;
                    }
                }
                if (peer.eof && peer.pending.empty()) {
                    ::close(fd);
                    peers.erase(fd);
                    continue;
                }
                update(fd, peer);
            }
        }
    }

    uint16_t port_ = 0;
    UniqueFd listener_;
    pid_t pid_ = -1;
};

// `count` connections to `port`, all connected first, then all sending `size` bytes of their own
// pattern at once and reading the echo back; returns how many got exactly their bytes back.
// Single-threaded (epoll), bounded by `timeout`; `why` collects the first failures.
std::size_t echoSwarm(uint16_t port, std::size_t count, std::size_t size, milliseconds timeout,
                      std::string& why) {
    struct Conn {
        UniqueFd fd;
        PatternStream send{0};
        PatternStream expect{0};
        std::size_t sent = 0, received = 0;
        bool connected = false, failed = false, done = false;
    };
    Deadline deadline = deadlineIn(timeout);
    UniqueFd epoll(::epoll_create1(EPOLL_CLOEXEC));
    std::vector<Conn> conns(count);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    auto fail = [&](std::size_t i, const std::string& what) {
        if (!conns[i].failed && why.size() < 2000)
            why += "connection " + std::to_string(i) + ": " + what + "; ";
        conns[i].failed = true;
    };
    for (std::size_t i = 0; i < count; ++i) {
        auto& c = conns[i];
        c.send = PatternStream(90000 + i);
        c.expect = PatternStream(90000 + i);
        c.fd.reset(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
        if (!c.fd) {
            fail(i, std::string("socket: ") + std::strerror(errno));
            continue;
        }
        int rc = ::connect(c.fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address);
        if (rc < 0 && errno != EINPROGRESS) {
            fail(i, std::string("connect: ") + std::strerror(errno));
            continue;
        }
        epoll_event e{};
        e.events = EPOLLOUT;
        e.data.u64 = i;
        ::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, c.fd.get(), &e);
    }
    // Phase 1: every connection established before any sends.
    std::size_t connected = 0, settled = 0;
    std::vector<epoll_event> events(4096);
    for (std::size_t i = 0; i < count; ++i) settled += conns[i].failed;
    while (settled < count && Clock::now() < deadline) {
        int n = ::epoll_wait(epoll.get(), events.data(), static_cast<int>(events.size()), 200);
        for (int k = 0; k < n; ++k) {
            auto i = events[k].data.u64;
            auto& c = conns[i];
            if (c.connected || c.failed) continue;
            int error = 0;
            socklen_t length = sizeof error;
            ::getsockopt(c.fd.get(), SOL_SOCKET, SO_ERROR, &error, &length);
            if (error != 0) {
                fail(i, std::string("connect: ") + std::strerror(error));
            } else {
                c.connected = true;
                ++connected;
            }
            ++settled;
            epoll_event e{};
            e.events = 0;
            e.data.u64 = i;
            ::epoll_ctl(epoll.get(), EPOLL_CTL_MOD, c.fd.get(), &e);
        }
    }
    // Phase 2: all send at once, and read the echo.
    for (std::size_t i = 0; i < count; ++i) {
        if (!conns[i].connected) continue;
        epoll_event e{};
        e.events = EPOLLIN | EPOLLOUT;
        e.data.u64 = i;
        ::epoll_ctl(epoll.get(), EPOLL_CTL_MOD, conns[i].fd.get(), &e);
    }
    std::size_t done = 0;
    std::vector<uint8_t> out(16384), in(16384), want(16384);
    while (done < connected && Clock::now() < deadline) {
        int n = ::epoll_wait(epoll.get(), events.data(), static_cast<int>(events.size()), 200);
        for (int k = 0; k < n; ++k) {
            auto i = events[k].data.u64;
            auto& c = conns[i];
            if (c.done || c.failed) continue;
            if (events[k].events & EPOLLOUT && c.sent < size) {
                auto chunk = std::min(out.size(), size - c.sent);
                c.send.fill(out.data(), chunk);
                auto sent = ::send(c.fd.get(), out.data(), chunk, MSG_NOSIGNAL);
                if (sent < 0 && errno != EAGAIN)
                    fail(i, std::string("send: ") + std::strerror(errno));
                // A short send: the stream restarts from where it stopped.
                std::size_t accepted = sent > 0 ? static_cast<std::size_t>(sent) : 0;
                if (accepted < chunk) {
                    c.send = PatternStream(90000 + i);
                    std::vector<uint8_t> skip(c.sent + accepted);
                    c.send.fill(skip.data(), skip.size());
                }
                c.sent += accepted;
                if (c.sent == size) {
                    epoll_event e{};
                    e.events = EPOLLIN;
                    e.data.u64 = i;
                    ::epoll_ctl(epoll.get(), EPOLL_CTL_MOD, c.fd.get(), &e);
                }
            }
            if (events[k].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
                auto got = ::recv(c.fd.get(), in.data(), in.size(), 0);
                if (got == 0) {
                    fail(i, "EOF after " + std::to_string(c.received) + " of " +
                                std::to_string(size) + " B");
                } else if (got < 0 && errno != EAGAIN) {
                    fail(i, std::string("recv: ") + std::strerror(errno));
                } else if (got > 0) {
                    auto length = static_cast<std::size_t>(got);
                    c.expect.fill(want.data(), length);
                    if (c.received + length > size ||
                        std::memcmp(in.data(), want.data(), length) != 0) {
                        fail(i, "echo differs from what was sent at byte " +
                                    std::to_string(c.received));
                    }
                    c.received += length;
                    if (c.received == size && !c.failed) {
                        c.done = true;
                        ++done;
                        ::epoll_ctl(epoll.get(), EPOLL_CTL_DEL, c.fd.get(), nullptr);
                    }
                }
            }
            if (c.failed) ::epoll_ctl(epoll.get(), EPOLL_CTL_DEL, c.fd.get(), nullptr);
        }
    }
    if (done < connected && why.size() < 2000) {
        why += std::to_string(connected - done) + " connections unfinished at the deadline; ";
    }
    return done;
}

// Thousands of connections all sending at once through a ring of 64 buffers: the ring is dry
// nearly all the time (-ENOBUFS), and still every byte comes back. Two fds per connection in
// the daemon (--lane buffer holds no pipe, relay/FdBudget.h), besides what it reserves for
// itself, its admin peers and metrics connections: the count is what this machine's
// RLIMIT_NOFILE hard limit allows, up to 10,000.
TEST(BufferLaneScaleTest, ThousandsOfConnectionsAtOnceOnSixtyFourBuffersDeliverEverything) {
    auto limit = raiseFdLimit();
    std::size_t connections = std::min<std::size_t>(10000, (limit - 2000) / 2);
    ASSERT_GE(connections, 1000u) << "RLIMIT_NOFILE " << limit << " is too low for this test";
    constexpr std::size_t kBytes = 8 * kKiB;
    EchoProcess upstream;
    Relay relay(upstream.address(),
                {"--lane", "buffer", "--buffer-ring-entries", "64", "--buffer-size", "4096"}, 2);
    ASSERT_TRUE(relay.daemon->waitReady(relay.port)) << relay.daemon->why();
    std::string why;
    auto started = Clock::now();
    auto done = echoSwarm(relay.port, connections, kBytes, milliseconds(240000), why);
    auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - started).count();
    EXPECT_EQ(done, connections) << why << relay.daemon->why(20);
    auto dry = metricSum(relay.metrics, "splicegate_buffer_ring_empty_total", {});
    EXPECT_GT(dry, 0) << "the 64-buffer ring never ran dry: the test did not test back-pressure";
    std::cout << "[ info ] " << done << " of " << connections << " connections echoed " << kBytes
              << " B each in " << took << " ms; the ring ran dry " << dry << " times\n";
    EXPECT_TRUE(relay.daemon->running()) << relay.daemon->why();
}

// Connections that exchanged a message and went quiet hold no provided buffer and no pipe.
TEST(BufferLaneIdleTest, IdleConnectionsHoldNoBufferAndNoPipe) {
    constexpr std::size_t kIdle = 400;
    raiseFdLimit();
    EchoProcess upstream;
    Relay relay(upstream.address(), {"--lane", "auto"}, 2);
    ASSERT_TRUE(relay.daemon->waitReady(relay.port)) << relay.daemon->why();
    std::vector<UniqueFd> clients;
    for (std::size_t i = 0; i < kIdle; ++i) {
        int error = 0;
        UniqueFd fd = connectTcp(relay.port, error);
        ASSERT_TRUE(fd) << "connect " << i << ": " << std::strerror(error);
        ASSERT_TRUE(echoRoundTrip(fd.get(), 500 + i, 300, milliseconds(10000)))
            << "connection " << i;
        clients.push_back(std::move(fd));
    }
    auto active = waitMetric(relay.metrics, "splicegate_connections_active", {},
                             [&](double v) { return v >= kIdle; });
    EXPECT_EQ(active, kIdle) << "the idle connections are not all open";
    // Gauges are refreshed by each worker's timer: wait for a refresh, then it must read zero.
    auto buffers = waitMetric(relay.metrics, "splicegate_buffers", {"state=\"in_use\""},
                              [](double v) { return v == 0; });
    EXPECT_EQ(buffers, 0) << "idle connections hold provided buffers";
    auto pipes = metricSum(relay.metrics, "splicegate_pipes", {"state=\"in_use\""});
    EXPECT_EQ(pipes, 0) << "idle connections hold pipes";
    // And they still work.
    for (std::size_t i = 0; i < kIdle; i += 97)
        EXPECT_TRUE(echoRoundTrip(clients[i].get(), 9000 + i, 5000, milliseconds(10000)))
            << "idle connection " << i << " after the pause";
}

}  // namespace
}  // namespace splicegate::test
