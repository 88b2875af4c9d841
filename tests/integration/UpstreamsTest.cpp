// Upstreams through the real daemon: weighted round robin and backups, per-route settings (idle,
// connect and half-closed timeouts, connection limits, lane) and reloads that apply them all or
// none, and maintenance with splicegatectl upstream disable|enable and upstreams.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <iterator>
#include <map>
#include <sstream>
#include <thread>

#include "tests/support/ControlPlaneDaemon.h"
#include "tests/support/SilentUpstream.h"
#include "tests/support/TestServer.h"
#include "tests/support/Traffic.h"

namespace splicegate::test {
namespace {

using namespace std::chrono_literals;

// One connection through the relay that echoes one small message; false when it did not.
bool oneEcho(uint16_t port, uint64_t seed) {
    int error = 0;
    auto fd = connectTcp(port, error);
    if (!fd) return false;
    return static_cast<bool>(echoRoundTrip(fd.get(), seed, 64, 5000ms));
}

// True when the peer closed `fd` (EOF or reset) within `timeout`.
bool closedWithin(int fd, milliseconds timeout) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) != 1) return false;
    char byte;
    return ::recv(fd, &byte, 1, MSG_DONTWAIT) <= 0;
}

ControlPlaneOptions withUpstreams(std::vector<std::string> upstreams) {
    ControlPlaneOptions options;
    options.upstreams = std::move(upstreams);
    return options;
}

TEST(UpstreamsTest, WeightsThreeToOneSplitConnectionsAndTheBackupStaysIdle) {
    TestServer heavy(echoUpstream(10000ms)), light(echoUpstream(10000ms)),
        spare(echoUpstream(10000ms));
    ControlPlaneDaemon d(withUpstreams(
        {heavy.address() + " weight=3", light.address(), spare.address() + " backup"}));
    ASSERT_TRUE(d.start()) << d.why();
    constexpr int kConnections = 40;
    for (int i = 0; i < kConnections; ++i) ASSERT_TRUE(oneEcho(d.listenPort(), i)) << i;
    ASSERT_TRUE(heavy.waitAccepted(1, deadlineIn(1s)));
    // One pool for all workers: the smooth weighted round robin gives exactly 3:1.
    EXPECT_EQ(heavy.acceptedCount(), 30u);
    EXPECT_EQ(light.acceptedCount(), 10u);
    EXPECT_EQ(spare.acceptedCount(), 0u);

    // Per upstream on /metrics: handshakes, bytes of the closed connections, state.
    auto page = httpGet(d.metricsPort(), "/metrics");
    ASSERT_EQ(page.status, 200);
    auto samples = parseMetrics(page.body);
    std::map<std::string, std::string> heavyLabels{{"route", "default"},
                                                   {"upstream", heavy.address()}};
    EXPECT_EQ(sampleValue(samples, "splicegate_upstream_connect_seconds_count", heavyLabels), 30);
    auto u2c = heavyLabels;
    u2c["direction"] = "u2c";
    // The access line is written after the close is counted: every connection has closed then.
    ASSERT_EQ(d.daemon().waitLogLines("access route=default", kConnections, 5000ms),
              static_cast<std::size_t>(kConnections));
    page = httpGet(d.metricsPort(), "/metrics");
    samples = parseMetrics(page.body);
    EXPECT_EQ(sampleValue(samples, "splicegate_upstream_bytes_total", u2c), 30 * 64);
    auto up = heavyLabels;
    up["state"] = "up";
    EXPECT_EQ(sampleValue(samples, "splicegate_upstream_state", up), 1);
    EXPECT_EQ(sampleValue(samples, "splicegate_upstream_connections_active", heavyLabels), 0);
}

TEST(UpstreamsTest, TheBackupTakesOverOnlyWhileThePrimariesAreDown) {
    TestServer spare(echoUpstream(10000ms));
    // Nothing listens on the primaries: refused at once.
    std::string deadA = loopback(pickFreePort()), deadB = loopback(pickFreePort());
    ControlPlaneDaemon d(withUpstreams({deadA, deadB, spare.address() + " backup"}));
    ASSERT_TRUE(d.start()) << d.why();
    int served = 0;
    for (int i = 0; i < 12; ++i) served += oneEcho(d.listenPort(), i) ? 1 : 0;
    // The first connections spend their attempts on the primaries until those count as down
    // (3 failed connects each); from then on every connection goes to the backup.
    EXPECT_GE(served, 9);
    EXPECT_EQ(spare.acceptedCount(), static_cast<std::size_t>(served));
    auto listing = d.ctl({"upstreams"});
    ASSERT_TRUE(listing.status && listing.status->isExit(0)) << listing.err;
    EXPECT_NE(listing.out.find(deadA), std::string::npos) << listing.out;
    EXPECT_NE(grepLines(listing.out, deadA).at(0).find("down"), std::string::npos) << listing.out;
    EXPECT_NE(grepLines(listing.out, spare.address()).at(0).find("up"), std::string::npos)
        << listing.out;
    // The CONNECT_FAILURES column: the primaries' failed connects, none of the backup's.
    auto connectFailures = [&](const std::string& upstream) {
        std::istringstream row(grepLines(listing.out, upstream).at(0));
        std::vector<std::string> cells{std::istream_iterator<std::string>(row), {}};
        return cells.size() == 8 ? std::stoi(cells[6]) : -1;
    };
    EXPECT_GE(connectFailures(deadA), 3) << listing.out;
    EXPECT_GE(connectFailures(deadB), 3) << listing.out;
    EXPECT_EQ(connectFailures(spare.address()), 0) << listing.out;
    // The same on /metrics: state, health and the failed connects of each upstream.
    auto samples = parseMetrics(httpGet(d.metricsPort(), "/metrics").body);
    for (const auto& [upstream, down] : {std::pair{deadA, true}, std::pair{deadB, true},
                                         std::pair{spare.address(), false}}) {
        std::map<std::string, std::string> labels{{"route", "default"}, {"upstream", upstream}};
        auto inState = labels;
        inState["state"] = "down";
        EXPECT_EQ(sampleValue(samples, "splicegate_upstream_state", inState), down ? 1 : 0)
            << upstream;
        inState["state"] = "up";
        EXPECT_EQ(sampleValue(samples, "splicegate_upstream_state", inState), down ? 0 : 1)
            << upstream;
        EXPECT_EQ(sampleValue(samples, "splicegate_upstream_up", labels), down ? 0 : 1)
            << upstream;
        EXPECT_EQ(sampleValue(samples, "splicegate_upstream_connect_failures_total", labels)
                          .value_or(-1) >= 3,
                  down)
            << upstream;
    }
}

TEST(UpstreamsTest, DisableStopsNewConnectionsWhileAnEstablishedOneFlows) {
    TestServer a(echoUpstream(20000ms)), b(echoUpstream(20000ms));
    ControlPlaneDaemon d(withUpstreams({a.address(), b.address()}));
    ASSERT_TRUE(d.start()) << d.why();
    int error = 0;
    auto held = connectTcp(d.listenPort(), error);
    ASSERT_TRUE(held) << error;
    ASSERT_TRUE(echoRoundTrip(held.get(), 1, 64, 5000ms));
    ASSERT_EQ(a.acceptedCount(), 1u);  // the first pick of two equal weights

    auto disable = d.ctl({"upstream", "disable", "default", a.address()});
    ASSERT_TRUE(disable.status && disable.status->isExit(0)) << disable.err;
    EXPECT_NE(disable.out.find("disabled"), std::string::npos) << disable.out;
    for (int i = 0; i < 6; ++i) ASSERT_TRUE(oneEcho(d.listenPort(), 10 + i)) << i;
    EXPECT_EQ(a.acceptedCount(), 1u);
    EXPECT_EQ(b.acceptedCount(), 6u);
    EXPECT_TRUE(echoRoundTrip(held.get(), 2, 4096, 5000ms)) << "the established one goes on";

    // A reload that keeps the upstream keeps its disable.
    auto reload = d.ctl({"reload"});
    ASSERT_TRUE(reload.status && reload.status->isExit(0)) << reload.err;
    ASSERT_TRUE(oneEcho(d.listenPort(), 99));
    EXPECT_EQ(a.acceptedCount(), 1u);
    EXPECT_EQ(b.acceptedCount(), 7u);

    auto human = d.ctl({"upstreams"});
    ASSERT_TRUE(human.status && human.status->isExit(0)) << human.err;
    EXPECT_NE(human.out.find("STATE"), std::string::npos) << human.out;
    auto row = grepLines(human.out, a.address());
    ASSERT_EQ(row.size(), 1u) << human.out;
    EXPECT_NE(row[0].find("disabled"), std::string::npos) << human.out;
    auto json = d.ctl({"--json", "upstreams"});
    ASSERT_TRUE(json.status && json.status->isExit(0)) << json.err;
    EXPECT_NE(json.out.find("\"state\": \"disabled\""), std::string::npos) << json.out;
    EXPECT_NE(json.out.find("\"active\": 1"), std::string::npos) << json.out;
    // On /metrics: the disabled state, its health kept apart, and the connection it still has.
    auto samples = parseMetrics(httpGet(d.metricsPort(), "/metrics").body);
    std::map<std::string, std::string> aLabels{{"route", "default"}, {"upstream", a.address()}};
    auto inState = [&](const char* state) {
        auto labels = aLabels;
        labels["state"] = state;
        return sampleValue(samples, "splicegate_upstream_state", labels);
    };
    EXPECT_EQ(inState("disabled"), 1);
    EXPECT_EQ(inState("up"), 0);
    EXPECT_EQ(sampleValue(samples, "splicegate_upstream_up", aLabels), 1);
    EXPECT_EQ(sampleValue(samples, "splicegate_upstream_connections_active", aLabels), 1);

    for (const auto& bad : std::vector<std::vector<std::string>>{
             {"upstream", "disable", "nosuch", a.address()},
             {"upstream", "disable", "default", "127.0.0.1:1"}}) {
        auto result = d.ctl(bad);
        ASSERT_TRUE(result.status) << bad[2];
        EXPECT_TRUE(result.status->isExit(1)) << result.status->describe() << result.err;
        EXPECT_EQ(textLines(result.err).size(), 1u) << result.err;
        EXPECT_NE(result.err.find(bad[3] == a.address() ? "nosuch" : "127.0.0.1:1"),
                  std::string::npos)
            << result.err;
    }

    auto enable = d.ctl({"upstream", "enable", "default", a.address()});
    ASSERT_TRUE(enable.status && enable.status->isExit(0)) << enable.err;
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(oneEcho(d.listenPort(), 20 + i)) << i;
    EXPECT_EQ(a.acceptedCount(), 3u);
    EXPECT_EQ(b.acceptedCount(), 9u);
}

std::string twoRoutes(uint16_t fastPort, uint16_t slowPort, const std::string& upstream,
                      const std::string& fastIdle, const std::string& extra = {}) {
    return "[route.fast]\nlisten = " + loopback(fastPort) + "\nupstream = " + upstream +
           "\nidle-timeout-ms = " + fastIdle + "\nconnect-timeout-ms = 2000\n" +
           "max-connections = 50\n\n[route.slow]\nlisten = " + loopback(slowPort) +
           "\nupstream = " + upstream + "\n" + extra;
}

TEST(UpstreamsTest, PerRouteIdleTimeoutAndAReloadWithOneBadValueChangesNothing) {
    TestServer echo(echoUpstream(30000ms));
    uint16_t fastPort = pickFreePort(), slowPort = pickFreePort(), newPort = pickFreePort();
    ControlPlaneOptions options{{echo.address()}, 2, twoRoutes(fastPort, slowPort, echo.address(),
                                                               "1000"),
                                {"--idle-timeout-ms", "60000"}};
    ControlPlaneDaemon d(options);
    ASSERT_TRUE(d.start()) << d.why();
    ASSERT_TRUE(waitListening(fastPort, true, deadlineIn(5s)));
    int error = 0;
    auto fast = connectTcp(fastPort, error);
    auto slow = connectTcp(slowPort, error);
    ASSERT_TRUE(fast && slow);
    ASSERT_TRUE(echoRoundTrip(fast.get(), 1, 64, 5000ms));
    ASSERT_TRUE(echoRoundTrip(slow.get(), 2, 64, 5000ms));
    auto start = std::chrono::steady_clock::now();
    EXPECT_TRUE(closedWithin(fast.get(), 4000ms)) << "route fast: idle-timeout-ms 1000";
    auto took = std::chrono::steady_clock::now() - start;
    EXPECT_GE(took, 900ms);
    EXPECT_TRUE(echoRoundTrip(slow.get(), 3, 64, 5000ms)) << "route slow: the global 60 s";
    EXPECT_EQ(d.daemon().waitLogLines("reason=idle-timeout", 1, 2000ms), 1u);

    // A new route and a bad value in another: nothing of it applies.
    d.writeConfig(twoRoutes(fastPort, slowPort, echo.address(), "soon",
                            "\n[route.extra]\nlisten = " + loopback(newPort) +
                                "\nupstream = " + echo.address() + "\n"));
    auto reload = d.ctl({"reload"});
    ASSERT_TRUE(reload.status);
    EXPECT_TRUE(reload.status->isExit(1)) << reload.out << reload.err;
    EXPECT_NE(reload.err.find("idle-timeout-ms"), std::string::npos) << reload.err;
    EXPECT_FALSE(isListening(newPort));
    auto again = connectTcp(fastPort, error);
    ASSERT_TRUE(again);
    ASSERT_TRUE(echoRoundTrip(again.get(), 4, 64, 5000ms));
    EXPECT_TRUE(closedWithin(again.get(), 4000ms)) << "the running idle timeout stays";

    // A good reload applies a route's new value.
    d.writeConfig(twoRoutes(fastPort, slowPort, echo.address(), "0"));
    auto good = d.ctl({"reload"});
    ASSERT_TRUE(good.status && good.status->isExit(0)) << good.err;
    auto kept = connectTcp(fastPort, error);
    ASSERT_TRUE(kept);
    ASSERT_TRUE(echoRoundTrip(kept.get(), 5, 64, 5000ms));
    EXPECT_FALSE(closedWithin(kept.get(), 2500ms)) << "idle-timeout-ms 0 after the reload";
}

// Two routes with their own timeouts over global ones of a minute: `dial` (connect-timeout-ms,
// its upstream never answers a SYN) and `stall` (half-closed-timeout-ms, its upstream never
// reads a client that sent more than it takes and left). A reload that changes both routes and
// the dial route's upstream but has one bad value elsewhere applies none of it; a good one
// applies all of it.
std::string timeoutRoutes(uint16_t dialPort, uint16_t stallPort, const std::string& dialUpstream,
                          const std::string& connectTimeout, const std::string& stallUpstream,
                          const std::string& halfClosedTimeout, const std::string& extra = {}) {
    return "[route.dial]\nlisten = " + loopback(dialPort) + "\nupstream = " + dialUpstream +
           "\nconnect-timeout-ms = " + connectTimeout + "\n\n[route.stall]\nlisten = " +
           loopback(stallPort) + "\nupstream = " + stallUpstream +
           "\nhalf-closed-timeout-ms = " + halfClosedTimeout + "\n" + extra;
}

// A client of `port` that sent more than the never-reading upstream takes, then its FIN.
UniqueFd uploadAndLeave(uint16_t port) {
    int error = 0;
    auto fd = connectTcp(port, error);
    if (!fd) return fd;
    std::vector<char> request(12 * 1024, 'q');
    if (!sendAll(fd.get(), request.data(), request.size(), deadlineIn(2000ms), error))
        return UniqueFd();
    ::shutdown(fd.get(), SHUT_WR);
    return fd;
}

TEST(UpstreamsTest, ARouteOwnTimeoutsApplyAndAReloadChangesThemAllOrNone) {
    SilentUpstream silentA, silentB;  // each counts its own failed connects
    if (!silentA.silent) GTEST_SKIP() << silentA.why;
    TestServer neverReads(nullptr), echo(echoUpstream(20000ms));
    neverReads.setReceiveBuffer(4096);
    const std::string dialA = loopback(silentA.port), dialB = loopback(silentB.port);
    uint16_t dialPort = pickFreePort(), stallPort = pickFreePort(), newPort = pickFreePort();
    ControlPlaneOptions options{
        {echo.address()},
        2,
        timeoutRoutes(dialPort, stallPort, dialA, "300", neverReads.address(), "500"),
        {"--connect-timeout-ms", "60000", "--half-closed-timeout-ms", "60000",
         "--idle-timeout-ms", "60000"}};
    ControlPlaneDaemon d(options);
    ASSERT_TRUE(d.start()) << d.why();
    ASSERT_TRUE(waitListening(stallPort, true, deadlineIn(5s)));
    int error = 0;
    // The running values: closed after 300 ms and 500 ms, not after a minute.
    auto expectRunningValues = [&](const char* when) {
        auto dial = connectTcp(dialPort, error);
        auto stall = uploadAndLeave(stallPort);
        ASSERT_TRUE(dial && stall) << when;
        auto start = std::chrono::steady_clock::now();
        EXPECT_TRUE(closedWithin(dial.get(), 3000ms)) << when << ": connect-timeout-ms 300";
        EXPECT_GE(std::chrono::steady_clock::now() - start, 250ms) << when;
        EXPECT_TRUE(closedWithin(stall.get(), 3000ms)) << when << ": half-closed-timeout-ms 500";
    };
    expectRunningValues("at start");
    EXPECT_FALSE(grepLines(d.daemon().log(), std::to_string(silentA.port)).empty())
        << "the log does not name the upstream that timed out" << d.why();
    EXPECT_EQ(d.daemon().waitLogLines("reason=idle-timeout", 1, 2000ms), 1u) << d.why();

    // Longer timeouts, another upstream, a new route, and one bad value: none of it applies.
    d.writeConfig(timeoutRoutes(dialPort, stallPort, dialB, "3000", neverReads.address(), "5000",
                                "\n[route.extra]\nlisten = " + loopback(newPort) +
                                    "\nupstream = " + echo.address() +
                                    "\nmax-connections = lots\n"));
    auto bad = d.ctl({"reload"});
    ASSERT_TRUE(bad.status);
    EXPECT_TRUE(bad.status->isExit(1)) << bad.out << bad.err;
    EXPECT_NE(bad.err.find("max-connections"), std::string::npos) << bad.err;
    EXPECT_FALSE(isListening(newPort));
    expectRunningValues("after the bad reload");

    // The same without the bad value: all of it applies.
    d.writeConfig(timeoutRoutes(dialPort, stallPort, dialB, "3000", neverReads.address(), "5000"));
    auto good = d.ctl({"reload"});
    ASSERT_TRUE(good.status && good.status->isExit(0)) << good.out << good.err;
    auto dial = connectTcp(dialPort, error);
    auto stall = uploadAndLeave(stallPort);
    ASSERT_TRUE(dial && stall);
    auto start = std::chrono::steady_clock::now();
    EXPECT_FALSE(closedWithin(dial.get(), 1500ms)) << "connect-timeout-ms 3000 after the reload";
    EXPECT_FALSE(closedWithin(stall.get(), 200ms)) << "half-closed-timeout-ms 5000 after it";
    EXPECT_TRUE(closedWithin(dial.get(), 4000ms)) << "but not the global minute either";
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5000ms);
    EXPECT_EQ(d.daemon().waitLogLines("reason=upstream-unreachable", 3, 2000ms), 3u) << d.why();
    EXPECT_FALSE(grepLines(d.daemon().log(), std::to_string(silentB.port)).empty())
        << "the new upstream of route dial was not the one tried" << d.why();
}

TEST(UpstreamsTest, ARouteOwnConnectionLimitsRefuseBeyondThem) {
    TestServer echo(echoUpstream(20000ms));
    uint16_t cappedPort = pickFreePort(), perSourcePort = pickFreePort();
    ControlPlaneOptions options;
    options.upstreams = {echo.address()};
    options.configText = "[route.capped]\nlisten = " + loopback(cappedPort) +
                         "\nupstream = " + echo.address() + "\nmax-connections = 2\n\n" +
                         "[route.persource]\nlisten = " + loopback(perSourcePort) +
                         "\nupstream = " + echo.address() +
                         "\nmax-connections-per-source = 1\n";
    ControlPlaneDaemon d(options);
    ASSERT_TRUE(d.start()) << d.why();
    ASSERT_TRUE(waitListening(perSourcePort, true, deadlineIn(5s)));
    int error = 0;
    std::vector<UniqueFd> held;
    for (int i = 0; i < 2; ++i) {
        held.push_back(connectTcp(cappedPort, error));
        ASSERT_TRUE(held.back() && echoRoundTrip(held.back().get(), i, 64, 5000ms)) << i;
    }
    auto third = connectTcp(cappedPort, error);
    ASSERT_TRUE(third);  // the kernel accepts; the daemon closes it at once
    EXPECT_TRUE(closedWithin(third.get(), 3000ms)) << "route capped: max-connections 2";
    auto onePerSource = connectTcp(perSourcePort, error);
    ASSERT_TRUE(onePerSource && echoRoundTrip(onePerSource.get(), 7, 64, 5000ms));
    auto second = connectTcp(perSourcePort, error);
    ASSERT_TRUE(second);
    EXPECT_TRUE(closedWithin(second.get(), 3000ms)) << "route persource: 1 per source";
    // The default route has neither limit.
    std::vector<UniqueFd> free;
    for (int i = 0; i < 3; ++i) {
        free.push_back(connectTcp(d.listenPort(), error));
        ASSERT_TRUE(free.back() && echoRoundTrip(free.back().get(), 20 + i, 64, 5000ms)) << i;
    }
    auto page = httpGet(d.metricsPort(), "/metrics");
    auto samples = parseMetrics(page.body);
    EXPECT_EQ(sampleValue(samples, "splicegate_connections_refused_total",
                          {{"route", "capped"}, {"reason", "max-connections"}}),
              1);
    EXPECT_EQ(sampleValue(samples, "splicegate_connections_refused_total",
                          {{"route", "persource"}, {"reason", "max-connections-per-source"}}),
              1);
}

TEST(UpstreamsTest, ARouteOwnLaneMovesItsBytesThere) {
    TestServer echo(echoUpstream(20000ms));
    uint16_t splicePort = pickFreePort(), bufferPort = pickFreePort();
    ControlPlaneOptions options;
    options.upstreams = {echo.address()};
    options.configText = "lane = auto\n[route.spliced]\nlisten = " + loopback(splicePort) +
                         "\nupstream = " + echo.address() + "\nlane = splice\n\n" +
                         "[route.buffered]\nlisten = " + loopback(bufferPort) +
                         "\nupstream = " + echo.address() + "\nlane = buffer\n";
    ControlPlaneDaemon d(options);
    ASSERT_TRUE(d.start()) << d.why();
    ASSERT_TRUE(waitListening(bufferPort, true, deadlineIn(5s)));
    int error = 0;
    for (uint16_t port : {splicePort, bufferPort}) {
        auto fd = connectTcp(port, error);
        ASSERT_TRUE(fd && echoRoundTrip(fd.get(), port, 4 << 20, 20000ms)) << port;
    }
    auto samples = parseMetrics(httpGet(d.metricsPort(), "/metrics").body);
    auto laneBytes = [&](const char* route, const char* lane) {
        return sampleValue(samples, "splicegate_lane_bytes_total", {{"route", route}, {"lane", lane}})
            .value_or(-1);
    };
    EXPECT_GE(laneBytes("spliced", "splice"), 2.0 * (4 << 20));
    EXPECT_EQ(laneBytes("spliced", "buffer"), 0);
    EXPECT_GE(laneBytes("buffered", "buffer"), 2.0 * (4 << 20));
    EXPECT_EQ(laneBytes("buffered", "splice"), 0);
}

}  // namespace
}  // namespace splicegate::test
