// What an operator meets around the relay: --check-config, all-or-nothing reloads, journald
// priorities, the access line, upstream health and DNS at start, rate-limited warnings, the
// per-source limit, upstreams that loop back, and the fd budget under a small RLIMIT_NOFILE.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/ControlPlaneDaemon.h"
#include "tests/support/Daemon.h"
#include "tests/support/Sockets.h"
#include "tests/support/TestServer.h"
#include "tests/support/Traffic.h"

namespace splicegate::test {
namespace {

// Polls the daemon's log until `needle` appears `count` times (bounded by `timeout`).
bool waitLogged(Daemon& daemon, const std::string& needle, std::size_t count = 1,
                milliseconds timeout = milliseconds(10000)) {
    auto deadline = deadlineIn(timeout);
    while (Clock::now() < deadline) {
        if (grepLines(daemon.log(), needle).size() >= count) return true;
        std::this_thread::sleep_for(milliseconds(50));
    }
    return false;
}

// True when the daemon closed this accepted connection (EOF or reset) within `timeout`.
bool closedByDaemon(int fd, milliseconds timeout) {
    auto deadline = deadlineIn(timeout);
    char byte = 0;
    while (Clock::now() < deadline) {
        ssize_t n = ::recv(fd, &byte, 1, 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            return true;
    }
    return false;
}

ProcessResult runDaemonCommand(const std::vector<std::string>& args) {
    std::vector<std::string> argv{daemonBinary()};
    argv.insert(argv.end(), args.begin(), args.end());
    return runProcess(argv);
}

// ---- --check-config ------------------------------------------------------------------------

TEST(OperatorCheckConfigTest, ValidConfigExitsZeroAndBindsNothing) {
    // The listen port is held by a plain listener (no SO_REUSEPORT): a check that bound it would
    // fail with EADDRINUSE.
    uint16_t port = 0;
    UniqueFd holder = listenTcp(port);
    TempDir dir;
    auto audit = dir.path() + "/audit";  // missing: the check must not create it
    auto result =
        runDaemonCommand({"--check-config", "--listen", loopback(port), "--upstream", "127.0.0.1:9",
                          "--audit-dir", audit, "--admin-socket", "", "--metrics-listen", ""});
    ASSERT_TRUE(result.status && result.status->isExit(0))
        << (result.status ? result.status->describe() : "timeout") << ": " << result.err;
    EXPECT_NE(result.out.find("configuration OK"), std::string::npos) << result.out;
    EXPECT_NE(::access(audit.c_str(), F_OK), 0) << "--check-config created " << audit;
}

TEST(OperatorCheckConfigTest, ProblemsExitTwoWithOneLineEach) {
    TempDir dir;
    auto notADir = dir.write("file", "x");
    auto result = runDaemonCommand({"--check-config", "--listen", "127.0.0.1:8443", "--upstream",
                                    "127.0.0.1:9", "--audit-dir", notADir, "--audit-hmac-key-file",
                                    dir.path() + "/missing.key", "--admin-socket", "",
                                    "--metrics-listen", ""});
    ASSERT_TRUE(result.status && result.status->isExit(2))
        << (result.status ? result.status->describe() : "timeout") << ": " << result.err;
    auto lines = textLines(result.err);
    ASSERT_EQ(lines.size(), 2u) << result.err;
    EXPECT_NE(result.err.find(notADir + ": not a directory"), std::string::npos) << result.err;
    EXPECT_NE(result.err.find("missing.key"), std::string::npos) << result.err;
}

// A congestion control the kernel lacks is a configuration error, named with what it has, both
// for --check-config and at start (before anything is bound).
TEST(OperatorCheckConfigTest, UnknownCongestionControlExitsTwoNamingTheOption) {
    for (bool check : {true, false}) {
        std::vector<std::string> args{"--listen",
                                      "127.0.0.1:8443",
                                      "--upstream",
                                      "127.0.0.1:9",
                                      "--upstream-tcp-congestion",
                                      "no_such_cc",
                                      "--audit-dir",
                                      "",
                                      "--admin-socket",
                                      "",
                                      "--metrics-listen",
                                      ""};
        if (check) args.insert(args.begin(), "--check-config");
        auto result = runDaemonCommand(args);
        ASSERT_TRUE(result.status && result.status->isExit(2))
            << (result.status ? result.status->describe() : "timeout") << ": " << result.err;
        auto lines = textLines(result.err);
        auto problems = std::count_if(lines.begin(), lines.end(), [](const std::string& line) {
            return line.find(" info ") == std::string::npos;  // the start's capability note
        });
        EXPECT_EQ(problems, 1) << result.err;
        EXPECT_NE(result.err.find("--upstream-tcp-congestion no_such_cc: this kernel has no such "
                                  "congestion control (available: "),
                  std::string::npos)
            << result.err;
    }
}

TEST(OperatorCheckConfigTest, ParseErrorExitsTwo) {
    TempDir dir;
    auto config =
        dir.write("bad.conf", "listen = 127.0.0.1:8443\nupstream = 127.0.0.1:9\nbogus = 1\n");
    auto result = runDaemonCommand({"--check-config", "--config", config});
    ASSERT_TRUE(result.status && result.status->isExit(2)) << result.err;
    EXPECT_EQ(textLines(result.err).size(), 1u) << result.err;
    EXPECT_NE(result.err.find("bogus"), std::string::npos) << result.err;
}

TEST(OperatorCheckConfigTest, UnresolvableNameIsAWarningNotAFailure) {
    auto result = runDaemonCommand({"--check-config", "--listen", "127.0.0.1:8443", "--upstream",
                                    "backend.invalid:80", "--audit-dir", "", "--admin-socket", "",
                                    "--metrics-listen", ""});
    ASSERT_TRUE(result.status && result.status->isExit(0)) << result.err;
    EXPECT_NE(result.err.find("warning"), std::string::npos) << result.err;
    EXPECT_NE(result.err.find("backend.invalid:80"), std::string::npos) << result.err;
}

TEST(OperatorCheckConfigTest, WorldWritableConfigFileIsWarnedAbout) {
    TempDir dir;
    auto config = dir.write("loose.conf",
                            "listen = 127.0.0.1:8443\nupstream = 127.0.0.1:9\n"
                            "audit-dir =\nadmin-socket =\nmetrics-listen =\n");
    ASSERT_EQ(::chmod(config.c_str(), 0666), 0);
    auto result = runDaemonCommand({"--check-config", "--config", config});
    ASSERT_TRUE(result.status && result.status->isExit(0)) << result.err;
    EXPECT_NE(result.err.find("writable by every user"), std::string::npos) << result.err;
}

TEST(OperatorCheckConfigTest, UpstreamThatIsAnOwnListenerIsRefused) {
    uint16_t port = pickFreePort();
    for (const auto& listen : {loopback(port), "0.0.0.0:" + std::to_string(port)}) {
        Daemon daemon({"--listen", listen, "--upstream", loopback(port)});
        auto status = daemon.waitExit(milliseconds(10000));
        ASSERT_TRUE(status && status->isExit(2)) << daemon.why();
        auto lines = grepLines(daemon.log(), "own listener");
        ASSERT_EQ(lines.size(), 1u) << daemon.why();
        EXPECT_NE(lines[0].find(loopback(port)), std::string::npos) << lines[0];
        EXPECT_FALSE(isListening(port));
    }
}

// ---- all-or-nothing reload -----------------------------------------------------------------

TEST(OperatorReloadTest, ReloadOntoATakenPortKeepsTheRunningRoutes) {
    TestServer echo(echoUpstream(milliseconds(30000)));
    uint16_t first = pickFreePort();
    uint16_t third = pickFreePort();
    uint16_t taken = 0;
    UniqueFd holder = listenTcp(taken);
    // The harness adds a `default` route on its own port.
    ControlPlaneDaemon cp(
        {{echo.address()}, 2, routeSection("first", loopback(first), {echo.address()}), {}});
    ASSERT_TRUE(cp.start()) << cp.why();
    ASSERT_TRUE(waitListening(first, true, deadlineIn(milliseconds(10000)))) << cp.why();

    // "first" moves onto the taken port, "third" is new: neither may happen.
    cp.writeConfig(routeSection("first", loopback(taken), {echo.address()}) +
                   routeSection("third", loopback(third), {echo.address()}));
    auto reload = cp.ctl({"reload"});
    ASSERT_TRUE(reload.status) << "splicegatectl reload did not finish";
    EXPECT_TRUE(reload.status->isExit(1))
        << reload.status->describe() << ": " << reload.out << reload.err;
    EXPECT_NE(reload.err.find(loopback(taken)), std::string::npos) << reload.err;
    EXPECT_TRUE(isListening(first)) << "the running route's listener was closed" << cp.why();
    EXPECT_FALSE(isListening(third)) << "half of a failed reload was applied" << cp.why();
    int error = 0;
    UniqueFd client = connectTcp(first, error);
    ASSERT_TRUE(client) << std::strerror(error);
    EXPECT_TRUE(echoRoundTrip(client.get(), 5, 64 * 1024, milliseconds(10000)));
    EXPECT_TRUE(waitLogged(cp.daemon(), "failed, keeping the running configuration")) << cp.why();
    auto samples = parseMetrics(httpGet(cp.metricsPort(), "/metrics").body);
    EXPECT_EQ(sampleValue(samples, "splicegate_config_last_reload_successful"), 0.0);
    EXPECT_EQ(sampleValue(samples, "splicegate_upstream_up",
                          {{"route", "first"}, {"upstream", echo.address()}}),
              1.0);

    // Once the port is free the same file applies in full, naming nothing to restart.
    holder.reset();
    reload = cp.ctl({"reload"});
    ASSERT_TRUE(reload.status && reload.status->isExit(0)) << reload.out << reload.err;
    EXPECT_TRUE(waitListening(taken, true, deadlineIn(milliseconds(5000)))) << cp.why();
    EXPECT_TRUE(waitListening(third, true, deadlineIn(milliseconds(5000)))) << cp.why();
    EXPECT_TRUE(waitListening(first, false, deadlineIn(milliseconds(5000)))) << cp.why();
    samples = parseMetrics(httpGet(cp.metricsPort(), "/metrics").body);
    EXPECT_EQ(sampleValue(samples, "splicegate_config_last_reload_successful"), 1.0);
}

TEST(OperatorReloadTest, SettingsThatNeedARestartAreNamed) {
    TestServer echo(echoUpstream(milliseconds(30000)));
    uint16_t port = pickFreePort();
    ControlPlaneDaemon cp(
        {{echo.address()}, 2, routeSection("web", loopback(port), {echo.address()}), {}});
    ASSERT_TRUE(cp.start()) << cp.why();
    // Top-level keys come before the sections.
    cp.writeConfig("idle-timeout-ms = 1234\n" +
                   routeSection("web", loopback(port), {echo.address()}));
    auto reload = cp.ctl({"reload"});
    ASSERT_TRUE(reload.status && reload.status->isExit(0)) << reload.out << reload.err;
    EXPECT_NE(reload.out.find("idle-timeout-ms"), std::string::npos) << reload.out;
    EXPECT_TRUE(waitLogged(cp.daemon(), "takes effect at the next start: idle-timeout-ms"))
        << cp.why();
}

// ---- logs ----------------------------------------------------------------------------------

TEST(OperatorLogTest, JournalStreamGivesPrioritiesWithoutTimestamps) {
    // systemd sets JOURNAL_STREAM to stderr's "DEV:INODE"; the shell does the same for the pipe
    // runProcess() gives the daemon as stderr. The start fails on a taken port after logging.
    uint16_t taken = 0;
    UniqueFd holder = listenTcp(taken);
    std::string command = "JOURNAL_STREAM=$(stat -L -c %d:%i /proc/self/fd/2) exec " +
                          daemonBinary() + " --listen " + loopback(taken) +
                          " --upstream 127.0.0.1:9 --admin-socket '' "
                          "--metrics-listen '' --audit-dir '' --pipe-size 1073741824 --workers 1";
    auto result = runProcess({"/bin/sh", "-c", "export JOURNAL_STREAM; " + command});
    ASSERT_TRUE(result.status && result.status->isExit(1)) << result.err;
    auto lines = textLines(result.err);
    ASSERT_FALSE(lines.empty());
    bool info = false, warn = false, error = false;
    for (const auto& line : lines) {
        EXPECT_TRUE(std::regex_match(line, std::regex("<[3467]>(error|warn|info|debug) .*")))
            << line;
        info = info || line.starts_with("<6>info ");
        warn = warn || line.starts_with("<4>warn ");
        error = error || line.starts_with("<3>error ");
    }
    EXPECT_TRUE(info && warn && error) << result.err;
}

TEST(OperatorLogTest, AccessLineForEveryClosedConnection) {
    TestServer echo(echoUpstream(milliseconds(30000)));
    uint16_t port = pickFreePort();
    Daemon daemon(relayArgs(port, {echo.address()}));
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
    int error = 0;
    UniqueFd client = connectTcp(port, error);
    ASSERT_TRUE(client) << std::strerror(error);
    ASSERT_TRUE(echoRoundTrip(client.get(), 9, 12345, milliseconds(10000)));
    client.reset();
    ASSERT_TRUE(waitLogged(daemon, "access route=default")) << daemon.why();
    auto line = grepLines(daemon.log(), "access route=default").front();
    std::regex format(
        "(.* )?access route=default id=[0-9]+ client=127\\.0\\.0\\.1:[0-9]+ upstream=" +
        std::regex_replace(echo.address(), std::regex("\\."), "\\.") +
        " c2u=12345 u2c=12345 duration_ms=[0-9]+ reason=[a-z-]+"
        " accepted=20[0-9]{2}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z"
        " connect_ms=[0-9]+ retries=0 tried=" +
        std::regex_replace(echo.address(), std::regex("\\."), "\\.") + " active=1");
    EXPECT_TRUE(std::regex_match(line, format)) << line;
}

// A refused first attempt shows in the access line (retries, the upstreams tried with the
// error), as text and as JSON (--access-log-format json).
TEST(OperatorLogTest, AccessLineNamesEveryUpstreamTried) {
    TestServer echo(echoUpstream(milliseconds(30000)));
    uint16_t refusing = pickFreePort();
    for (const char* format : {"text", "json"}) {
        SCOPED_TRACE(format);
        uint16_t port = pickFreePort();
        Daemon daemon(relayArgs(port, {loopback(refusing), echo.address()},
                                {"--access-log-format", format}, 1));
        ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
        int error = 0;
        UniqueFd client = connectTcp(port, error);
        ASSERT_TRUE(client) << std::strerror(error);
        ASSERT_TRUE(echoRoundTrip(client.get(), 3, 100, milliseconds(10000)));
        client.reset();
        const std::string marker =
            std::string(format) == "json" ? "{\"event\": \"access\"" : "access route=default";
        ASSERT_TRUE(waitLogged(daemon, marker)) << daemon.why();
        auto line = grepLines(daemon.log(), marker).front();
        const std::string refused = loopback(refusing);
        if (std::string(format) == "text") {
            EXPECT_NE(line.find(" retries=1 tried=" + refused + "(ECONNREFUSED)," + echo.address() +
                                " active=1"),
                      std::string::npos)
                << line;
            EXPECT_TRUE(std::regex_search(line, std::regex(" connect_ms=[0-9]+ "))) << line;
        } else {
            auto json = line.substr(line.find('{'));
            EXPECT_NE(json.find("\"route\": \"default\""), std::string::npos) << json;
            EXPECT_NE(json.find("\"c2u\": 100, \"u2c\": 100"), std::string::npos) << json;
            EXPECT_NE(json.find("\"retries\": 1, \"tried\": [{\"upstream\": \"" + refused +
                                "\", \"error\": \"ECONNREFUSED\"}, {\"upstream\": \"" +
                                echo.address() + "\"}], \"active\": 1}"),
                      std::string::npos)
                << json;
            EXPECT_EQ(json.back(), '}') << json;
        }
    }
}

TEST(OperatorLogTest, AccessLogOffLogsNoAccessLine) {
    TestServer echo(echoUpstream(milliseconds(30000)));
    uint16_t port = pickFreePort();
    Daemon daemon(relayArgs(port, {echo.address()}, {"--access-log", "off"}));
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
    int error = 0;
    UniqueFd client = connectTcp(port, error);
    ASSERT_TRUE(client) << std::strerror(error);
    ASSERT_TRUE(echoRoundTrip(client.get(), 9, 100, milliseconds(10000)));
    client.reset();
    ASSERT_TRUE(echo.waitFinished(1, deadlineIn(milliseconds(10000))));
    // The drain's "stopped" line comes after every connection was released.
    ASSERT_TRUE(daemon.terminate()) << daemon.why();
    EXPECT_TRUE(grepLines(daemon.log(), "access route=").empty()) << daemon.log();
}

TEST(OperatorLogTest, RepeatedConnectWarningsAreRateLimited) {
    uint16_t refusing = pickFreePort();
    uint16_t port = pickFreePort();
    Daemon daemon(relayArgs(port, {loopback(refusing)}, {"--access-log", "off"}));
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
    constexpr int kConnections = 200;
    for (int i = 0; i < kConnections; ++i) {
        int error = 0;
        UniqueFd client = connectTcp(port, error);
        if (client) closedByDaemon(client.get(), milliseconds(5000));
    }
    auto warnings = grepLines(daemon.log(), "connect to upstream");
    EXPECT_GE(warnings.size(), 1u) << daemon.why();
    EXPECT_LT(warnings.size(), 20u)
        << "200 refused connects gave " << warnings.size() << " warning lines";
    EXPECT_TRUE(waitLogged(daemon, "similar warnings suppressed", 1, milliseconds(15000)))
        << daemon.why();
}

// ---- upstreams ---------------------------------------------------------------------------

TEST(OperatorUpstreamTest, RefusingUpstreamIsSkippedAndComesBack) {
    TestServer echo(echoUpstream(milliseconds(30000)));
    uint16_t refusing = pickFreePort();
    uint16_t port = pickFreePort();
    Daemon daemon(relayArgs(port, {loopback(refusing), echo.address()}, {}, 1));
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
    auto roundTrip = [&] {
        int error = 0;
        UniqueFd client = connectTcp(port, error);
        return client && echoRoundTrip(client.get(), 3, 1000, milliseconds(10000));
    };
    // Every connection is served (the next upstream after a refusal) until the refusing one is
    // marked down.
    for (int i = 0; i < 8; ++i) EXPECT_TRUE(roundTrip()) << i << daemon.why();
    ASSERT_TRUE(waitLogged(daemon, "upstream " + loopback(refusing) + " is down")) << daemon.why();
    auto acceptedBefore = echo.acceptedCount();
    for (int i = 0; i < 5; ++i) EXPECT_TRUE(roundTrip()) << daemon.why();
    EXPECT_EQ(echo.acceptedCount(), acceptedBefore + 5);

    // It listens again: a probe after the backoff finds it and it is used again.
    uint16_t back = refusing;
    UniqueFd revived = listenTcp(back);
    ASSERT_EQ(back, refusing);
    auto deadline = deadlineIn(milliseconds(15000));
    while (grepLines(daemon.log(), "is up again").empty() && Clock::now() < deadline) {
        int error = 0;
        UniqueFd client = connectTcp(port, error);
        std::this_thread::sleep_for(milliseconds(200));
    }
    EXPECT_FALSE(grepLines(daemon.log(), "upstream " + loopback(refusing) + " is up again").empty())
        << daemon.why();
}

TEST(OperatorUpstreamTest, ActiveChecksFindADownUpstreamWithoutClients) {
    TestServer echo(echoUpstream(milliseconds(30000)));
    uint16_t refusing = pickFreePort();
    uint16_t port = pickFreePort();
    TempDir dir;
    auto config = dir.write("checks.conf", "[route.checked]\nlisten = " + loopback(port) +
                                               "\nupstream = " + loopback(refusing) +
                                               "\nupstream = " + echo.address() +
                                               "\nhealth-check-interval-ms = 100\n");
    uint16_t metricsPort = pickFreePort();
    Daemon daemon({"--config", config, "--workers", "1", "--metrics-listen",
                   loopback(metricsPort)});
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
    EXPECT_TRUE(waitLogged(daemon, "upstream " + loopback(refusing) + " is down")) << daemon.why();
    // Failed checks are counted apart from client connections' failed connects (of which there
    // were none): one label set per name, so a dashboard's sum by (route) counts each once.
    const std::map<std::string, std::string> down = {{"route", "checked"},
                                                     {"upstream", loopback(refusing)}};
    auto samples = parseMetrics(httpGet(metricsPort, "/metrics").body);
    EXPECT_GE(sampleValue(samples, "splicegate_upstream_health_check_failures_total", down)
                  .value_or(0),
              1.0);
    EXPECT_EQ(sampleValue(samples, "splicegate_upstream_connect_failures_total", down),
              std::optional<double>(0.0));
    for (const auto& sample : findSamples(samples, "splicegate_upstream_connect_failures_total"))
        EXPECT_EQ(sample.labels.size(), 2u) << sample.line;
    EXPECT_EQ(sampleValue(samples, "splicegate_upstream_state",
                          {{"route", "checked"}, {"upstream", loopback(refusing)}, {"state", "down"}}),
              std::optional<double>(1.0));
    auto changedTo = [&](const char* state) {
        auto labels = down;
        labels["to"] = state;
        return sampleValue(parseMetrics(httpGet(metricsPort, "/metrics").body),
                           "splicegate_upstream_state_changes_total", labels)
            .value_or(0);
    };
    EXPECT_EQ(changedTo("down"), 1.0);
    EXPECT_EQ(changedTo("up"), 0.0);
    uint16_t back = refusing;
    UniqueFd revived = listenTcp(back);
    ASSERT_EQ(back, refusing);
    EXPECT_TRUE(waitLogged(daemon, "upstream " + loopback(refusing) + " is up again", 1,
                           milliseconds(15000)))
        << daemon.why();
    EXPECT_EQ(changedTo("up"), 1.0);
    EXPECT_TRUE(grepLines(daemon.log(), "access route=").empty())
        << "no client connected, yet a connection was relayed";
}

TEST(OperatorUpstreamTest, UnresolvableNameAtStartKeepsTheDaemonUp) {
    TestServer echo(echoUpstream(milliseconds(30000)));
    uint16_t port = pickFreePort();
    Daemon daemon(relayArgs(port, {"backend.invalid:80", echo.address()}));
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
    EXPECT_TRUE(waitLogged(daemon, "cannot resolve upstream backend.invalid:80")) << daemon.why();
    for (int i = 0; i < 3; ++i) {
        int error = 0;
        UniqueFd client = connectTcp(port, error);
        ASSERT_TRUE(client) << std::strerror(error);
        EXPECT_TRUE(echoRoundTrip(client.get(), 4, 1000, milliseconds(10000))) << daemon.why();
    }
    EXPECT_TRUE(daemon.running());
}

// ---- capabilities --------------------------------------------------------------------------

// The content of /proc/PID/task/TID/`file` for every thread of `pid`.
std::vector<std::string> perThread(pid_t pid, const std::string& file) {
    std::vector<std::string> contents;
    std::error_code ignored;
    for (const auto& task :
         std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ignored))
        contents.push_back(readFile(task.path().string() + "/" + file));
    return contents;
}

// The capability sets of every thread of `pid`: "CapEff"/"CapPrm" values, one per thread.
std::vector<std::uint64_t> threadCapabilities(pid_t pid, const std::string& field) {
    std::vector<std::uint64_t> sets;
    for (const auto& status : perThread(pid, "status"))
        for (const auto& line : textLines(status))
            if (line.starts_with(field + ":"))
                sets.push_back(std::stoull(line.substr(field.size() + 1), nullptr, 16));
    return sets;
}

constexpr std::uint64_t bit(unsigned capability) {
    return std::uint64_t{1} << capability;
}

TEST(OperatorCapabilitiesTest, WithoutXdpTheEdgeFilterCapabilitiesAreDropped) {
    // CAP_NET_ADMIN 12, CAP_PERFMON 38, CAP_BPF 39; CAP_NET_BIND_SERVICE 10 stays.
    const std::uint64_t edge = bit(12) | bit(38) | bit(39);
    auto ours = threadCapabilities(::getpid(), "CapEff");
    ASSERT_FALSE(ours.empty());
    if ((ours.front() & edge) != edge)
        GTEST_SKIP() << "the test does not hold CAP_NET_ADMIN, CAP_BPF and CAP_PERFMON itself";
    TestServer echo(echoUpstream(milliseconds(30000)));
    uint16_t port = pickFreePort();
    Daemon daemon(relayArgs(port, {echo.address()}));
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
    for (const char* field : {"CapEff", "CapPrm"}) {
        auto sets = threadCapabilities(daemon.pid(), field);
        ASSERT_GE(sets.size(), 3u) << "main thread and two workers";
        for (auto set : sets) {
            EXPECT_EQ(set & edge, 0u) << field << " " << std::hex << set;
            EXPECT_NE(set & bit(10), 0u) << field << " lost CAP_NET_BIND_SERVICE";
        }
    }
    EXPECT_TRUE(waitLogged(daemon, "dropped CAP_NET_ADMIN")) << daemon.why();
}

// ---- threads -------------------------------------------------------------------------------

// `top -H` and `ps -L` show which thread is busy: each worker, the admin server and the health
// checker have names.
TEST(OperatorThreadsTest, WorkersAdminAndHealthThreadsAreNamed) {
    TestServer echo(echoUpstream(milliseconds(30000)));
    uint16_t port = pickFreePort();
    auto admin = std::filesystem::temp_directory_path() /
                 ("splicegate-names-" + std::to_string(::getpid()) + ".sock");
    Daemon daemon(relayArgs(port, {echo.address()},
                            {"--admin-socket", admin.string(), "--admin-group", "root"}, 3));
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
    std::vector<std::string> names;
    for (const auto& comm : perThread(daemon.pid(), "comm")) names.push_back(textLines(comm).at(0));
    for (const char* expected :
         {"sg-worker-0", "sg-worker-1", "sg-worker-2", "sg-admin", "sg-health"})
        EXPECT_NE(std::find(names.begin(), names.end(), expected), names.end())
            << expected << " missing among " << ::testing::PrintToString(names);
}

// ---- limits --------------------------------------------------------------------------------

TEST(OperatorLimitsTest, PerSourceLimitCountsEachClientAddress) {
    TestServer echo(echoUpstream(milliseconds(30000)));
    uint16_t port = pickFreePort();
    Daemon daemon(relayArgs(port, {echo.address()}, {"--max-connections-per-source", "2"}));
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
    std::vector<UniqueFd> held;
    for (int i = 0; i < 2; ++i) {
        int error = 0;
        held.push_back(connectFrom("127.0.0.2", port, error));
        ASSERT_TRUE(held.back()) << std::strerror(error);
        ASSERT_TRUE(echoRoundTrip(held.back().get(), 6, 100, milliseconds(10000)));
    }
    int error = 0;
    UniqueFd third = connectFrom("127.0.0.2", port, error);
    ASSERT_TRUE(third) << std::strerror(error);  // the kernel accepts; the daemon closes it
    EXPECT_TRUE(closedByDaemon(third.get(), milliseconds(10000))) << daemon.why();
    UniqueFd other = connectFrom("127.0.0.3", port, error);
    ASSERT_TRUE(other) << std::strerror(error);
    EXPECT_TRUE(echoRoundTrip(other.get(), 7, 100, milliseconds(10000))) << daemon.why();
    EXPECT_FALSE(grepLines(daemon.log(), "max-connections-per-source").empty()) << daemon.why();
    // One of the source's connections goes: it may connect again.
    held.front().reset();
    auto deadline = deadlineIn(milliseconds(10000));
    bool served = false;
    while (!served && Clock::now() < deadline) {
        UniqueFd again = connectFrom("127.0.0.2", port, error);
        served = again && echoRoundTrip(again.get(), 8, 100, milliseconds(2000));
    }
    EXPECT_TRUE(served) << daemon.why();
}

// The daemon binary behind a shell that lowers RLIMIT_NOFILE (soft and hard) first, so the test
// process keeps its own limit. Daemon reads SPLICEGATE_BIN when it is constructed.
class LimitedDaemonBinary {
  public:
    LimitedDaemonBinary(const TempDir& dir, unsigned fdLimit) : real_(daemonBinary()) {
        auto script =
            dir.write("splicegate-limited", "#!/bin/sh\nulimit -n " + std::to_string(fdLimit) +
                                                "\nexec " + real_ + " \"$@\"\n");
        ::chmod(script.c_str(), 0755);
        ::setenv("SPLICEGATE_BIN", script.c_str(), 1);
    }
    ~LimitedDaemonBinary() { ::unsetenv("SPLICEGATE_BIN"); }
    LimitedDaemonBinary(const LimitedDaemonBinary&) = delete;
    LimitedDaemonBinary& operator=(const LimitedDaemonBinary&) = delete;

  private:
    std::string real_;
};

TEST(OperatorLimitsTest, SmallFdLimitGivesRefusalsNotAuditErrors) {
    TestServer echo(echoUpstream(milliseconds(60000)));
    uint16_t port = pickFreePort();
    TempDir state;
    std::unique_ptr<Daemon> daemon;
    {
        LimitedDaemonBinary limited(state, 200);
        daemon = std::make_unique<Daemon>(
            relayArgs(port, {echo.address()}, {"--audit-dir", state.path() + "/audit"}, 1));
    }
    ASSERT_TRUE(daemon->waitReady(port)) << daemon->why();
    auto budgetLine = grepLines(daemon->log(), "connections will be accepted");
    ASSERT_EQ(budgetLine.size(), 1u) << daemon->why();
    std::smatch match;
    ASSERT_TRUE(
        std::regex_search(budgetLine[0], match, std::regex("at most ([0-9]+) connections")));
    auto fitting = std::stoul(match[1]);
    ASSERT_GT(fitting, 0u);

    // More busy connections than fit, all at once: the extra ones are refused at accept, the
    // admitted ones relay in full.
    const std::size_t total = fitting + 10;
    std::vector<UniqueFd> clients;
    for (std::size_t i = 0; i < total; ++i) {
        int error = 0;
        clients.push_back(connectTcp(port, error));
    }
    std::atomic<std::size_t> served{0}, refused{0};
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < clients.size(); ++i) {
        threads.emplace_back([&, i] {
            if (!clients[i]) return;
            if (echoRoundTrip(clients[i].get(), i, 1024 * 1024, milliseconds(20000)))
                ++served;
            else
                ++refused;
        });
    }
    for (auto& thread : threads) thread.join();
    EXPECT_EQ(served.load(), fitting) << daemon->why();
    EXPECT_EQ(refused.load(), total - fitting) << daemon->why();
    clients.clear();
    ASSERT_TRUE(daemon->terminate()) << daemon->why();
    auto log = daemon->log();
    EXPECT_TRUE(grepLines(log, "reason=audit-error").empty()) << daemon->why();
    EXPECT_TRUE(grepLines(log, "reason=pipe-error").empty()) << daemon->why();
    EXPECT_TRUE(grepLines(log, "Too many open files").empty()) << daemon->why();
}

}  // namespace
}  // namespace splicegate::test
