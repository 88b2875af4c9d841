// The metrics listener of the real daemon and a real Prometheus server:
// - /-/healthy and /-/ready while the daemon starts, serves and drains (SIGTERM with a connection
//   open and a drain timeout);
// - IPv4 and IPv6 listeners (127.0.0.1, [::1], [::]) answer GET and HEAD alike;
// - scrapes are answered while ten clients are connected and stalled;
// - the daemon's page passes `promtool check metrics` and carries the process, audit disk and
//   reload gauges, the reload gauge following a failed and a good reload;
// - a real Prometheus server (Debian package "prometheus") scrapes a MetricsExposer every second
//   with packaging/prometheus/splicegate.rules.yml loaded: splicegate_bytes_total arrives through
//   its HTTP API and the rules evaluate without errors. Prometheus runs as a child process in a
//   temp directory and is stopped by its pid.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "common/Error.h"
#include "metrics/MetricsExposer.h"
#include "tests/support/ChildProcess.h"
#include "tests/support/ControlPlaneDaemon.h"
#include "tests/support/Daemon.h"
#include "tests/support/HttpFetch.h"
#include "tests/support/Sockets.h"
#include "tests/support/TestServer.h"

namespace splicegate {
namespace {

using test::ChildProcess;
using test::Clock;
using test::Deadline;
using test::deadlineIn;
using test::httpGet;
using test::milliseconds;

std::string urlEncode(const std::string& text) {
    static const char* hex = "0123456789ABCDEF";
    std::string out;
    for (unsigned char c : text) {
        if (std::isalnum(c) || c == '_' || c == '-' || c == '.' || c == '~') {
            out += static_cast<char>(c);
        } else {
            out += '%';
            out += hex[c >> 4];
            out += hex[c & 15];
        }
    }
    return out;
}


// The number in the first sample of a Prometheus instant-vector query answer, if any.
std::optional<double> firstValue(const std::string& json) {
    static const std::regex value(R"re("value":\[[0-9.e+]+,"([^"]+)"\])re");
    std::smatch match;
    if (!std::regex_search(json, match, value)) return std::nullopt;
    return std::strtod(match[1].str().c_str(), nullptr);
}

std::string tail(const std::string& text, std::size_t lines = 30) {
    std::size_t pos = text.size();
    for (std::size_t i = 0; i <= lines && pos != std::string::npos && pos > 0; ++i)
        pos = text.rfind('\n', pos - 1);
    return pos == std::string::npos ? text : text.substr(pos + 1);
}

TEST(MetricsPrometheusTest, RealPrometheusScrapesBytesTotalAndEvaluatesTheRules) {
    std::string prometheus = test::findOnPath("prometheus");
    if (prometheus.empty())
        GTEST_SKIP() << "the Prometheus server is not installed (Debian package 'prometheus'; "
                        "tools/install-deps.sh installs it)";

    // The data path's counter, growing between scrapes.
    std::atomic<std::uint64_t> bytes{0};
    std::atomic<std::uint64_t> fsyncs{0};
    MetricsExposer exposer("127.0.0.1:0", [&] {
        StatsSnapshot s;
        s.version = "it-test";
        RouteSnapshot route;
        route.name = "default";
        route.accepted = 1;
        route.active = 1;
        route.bytesC2u = bytes += 65536;
        route.bytesU2c = 2 * route.bytesC2u;
        route.closed["closed"] = 0;
        route.refused["max-connections"] = 0;
        s.routes.push_back(route);
        s.auditErrors = {{"write", 0}, {"sync", 0}};
        auto n = fsyncs += 10;
        s.fsyncBucketCounts.assign(fsyncBucketBounds().size() + 1, n);  // all under 0.5 ms
        s.fsyncCount = n;
        s.fsyncSumSeconds = static_cast<double>(n) * 0.0001;
        s.pipeBudgetBytes = 1 << 20;
        return s;
    });

    test::TempDir dir;
    const std::string rules =
        std::string(SPLICEGATE_SOURCE_DIR) + "/packaging/prometheus/splicegate.rules.yml";
    auto config = dir.write("prometheus.yml",
                            "global:\n"
                            "  scrape_interval: 1s\n"
                            "  scrape_timeout: 1s\n"
                            "  evaluation_interval: 1s\n"
                            "rule_files:\n"
                            "  - " +
                                rules +
                                "\n"
                                "scrape_configs:\n"
                                "  - job_name: splicegate\n"
                                "    static_configs:\n"
                                "      - targets: ['127.0.0.1:" +
                                std::to_string(exposer.port()) + "']\n");
    const std::string logPath = dir.path() + "/prometheus.log";

    // Start Prometheus on a free port; a port taken between pick and bind means another try.
    std::unique_ptr<ChildProcess> server;
    uint16_t webPort = 0;
    for (int attempt = 0; attempt < 3 && !server; ++attempt) {
        webPort = test::pickFreePort();
        auto child = std::make_unique<ChildProcess>(
            std::vector<std::string>{prometheus, "--config.file=" + config,
                                     "--storage.tsdb.path=" + dir.path() + "/data",
                                     "--web.listen-address=127.0.0.1:" + std::to_string(webPort),
                                     "--log.level=info"},
            logPath);
        Deadline ready = deadlineIn(milliseconds(20000));
        while (Clock::now() < ready && child->running()) {
            if (httpGet(webPort, "/-/ready").status == 200) {
                server = std::move(child);
                break;
            }
            std::this_thread::sleep_for(milliseconds(100));
        }
    }
    ASSERT_TRUE(server) << "Prometheus did not become ready; its log:\n"
                        << tail(test::readFile(logPath));

    // splicegate_bytes_total arrives through the query API and grows from scrape to scrape.
    const std::string query =
        "/api/v1/query?query=" +
        urlEncode(R"(splicegate_bytes_total{job="splicegate",route="default",direction="c2u"})");
    std::optional<double> first;
    std::optional<double> later;
    std::string lastAnswer;
    Deadline deadline = deadlineIn(milliseconds(20000));
    while (Clock::now() < deadline && !later) {
        auto answer = httpGet(webPort, query);
        lastAnswer = answer.error.empty() ? answer.body : answer.error;
        if (answer.status == 200) {
            if (auto value = firstValue(answer.body)) {
                if (!first)
                    first = value;
                else if (*value > *first)
                    later = value;
            }
        }
        if (!later) std::this_thread::sleep_for(milliseconds(250));
    }
    ASSERT_TRUE(first) << "splicegate_bytes_total never arrived; last answer: " << lastAnswer
                       << "\nPrometheus log:\n"
                       << tail(test::readFile(logPath));
    EXPECT_GT(*first, 0);
    EXPECT_EQ(static_cast<std::uint64_t>(*first) % 65536, 0u) << *first;
    ASSERT_TRUE(later) << "splicegate_bytes_total did not grow past " << *first
                       << "; last answer: " << lastAnswer;
    EXPECT_GE(exposer.scrapes(), 2u);

    // The target is healthy, and the packaged rules loaded and evaluate without errors.
    auto up = httpGet(webPort, "/api/v1/query?query=" + urlEncode(R"(up{job="splicegate"})"));
    ASSERT_EQ(up.status, 200) << up.error << up.body;
    auto upValue = firstValue(up.body);
    ASSERT_TRUE(upValue) << up.body;
    EXPECT_EQ(*upValue, 1) << up.body;

    // Wait until every rule has been evaluated at least once (evaluation_interval is 1 s).
    std::string rulesAnswer;
    Deadline rulesDeadline = deadlineIn(milliseconds(10000));
    for (;;) {
        auto answer = httpGet(webPort, "/api/v1/rules");
        rulesAnswer = answer.body;
        if (answer.status == 200 &&
            rulesAnswer.find(R"("health":"unknown")") == std::string::npos &&
            rulesAnswer.find("SplicegateDown") != std::string::npos)
            break;
        if (Clock::now() >= rulesDeadline) break;
        std::this_thread::sleep_for(milliseconds(250));
    }
    for (const char* name :
         {"SplicegateDown", "SplicegateAuditErrors", "SplicegateAuditFsyncSlow",
          "SplicegatePipeBudgetExhausted", "SplicegateXdpDropsSpiking", "splicegate:bytes:rate5m"})
        EXPECT_NE(rulesAnswer.find(name), std::string::npos) << name << " not loaded";
    EXPECT_EQ(rulesAnswer.find(R"("health":"err")"), std::string::npos) << rulesAnswer;
    EXPECT_EQ(rulesAnswer.find(R"("health":"unknown")"), std::string::npos) << rulesAnswer;
    // Nothing is wrong with this healthy fake daemon: no alert fires.
    auto alerts = httpGet(webPort, "/api/v1/alerts");
    EXPECT_EQ(alerts.body.find(R"("state":"firing")"), std::string::npos) << alerts.body;

    // The recording rule over the real scrapes gives the c2u throughput.
    auto recorded = httpGet(
        webPort, "/api/v1/query?query=" + urlEncode(R"(splicegate:bytes:rate5m{direction="c2u"})"));
    EXPECT_EQ(recorded.status, 200) << recorded.error;

    EXPECT_TRUE(server->stop()) << "Prometheus ignored SIGTERM for 10 s";
}

bool haveIpv6Loopback() {
    uint16_t probe = 0;
    try {
        auto fd = test::listenTcp(probe, true);
        return true;
    } catch (const std::system_error&) {
        return false;
    }
}

// Polls `target` on the metrics port until it answers `wanted` (or the deadline passes); returns
// the last status (0: no answer).
int waitStatus(unsigned port, const std::string& target, int wanted, milliseconds timeout,
               bool ipv6 = false) {
    int status = 0;
    Deadline deadline = deadlineIn(timeout);
    while (Clock::now() < deadline) {
        status = httpGet(port, target, ipv6).status;
        if (status == wanted) break;
        std::this_thread::sleep_for(milliseconds(20));
    }
    return status;
}

TEST(MetricsPrometheusTest, HealthAndReadinessWhileStartingServingAndDraining) {
    test::TestServer upstream(nullptr);  // holds connections open
    uint16_t listenPort = test::pickFreePort();
    uint16_t metricsPort = test::pickFreePort();
    test::Daemon daemon(test::relayArgs(
        listenPort, {upstream.address()},
        {"--metrics-listen", test::loopback(metricsPort), "--drain-timeout-ms", "5000"}));

    // Starting: from the first answer on, /-/ready says 503 until the routes listen, then 200.
    std::vector<int> readiness;
    Deadline started = deadlineIn(milliseconds(15000));
    while (Clock::now() < started && daemon.running()) {
        auto ready = httpGet(metricsPort, "/-/ready");
        if (ready.status != 0) readiness.push_back(ready.status);
        if (ready.status == 200) break;
        std::this_thread::sleep_for(milliseconds(2));
    }
    ASSERT_FALSE(readiness.empty()) << "the metrics listener never answered" << daemon.why();
    ASSERT_EQ(readiness.back(), 200) << daemon.why();
    for (std::size_t i = 0; i + 1 < readiness.size(); ++i)
        EXPECT_EQ(readiness[i], 503) << "answer " << i << " before the daemon was ready";
    EXPECT_TRUE(test::isListening(listenPort)) << "ready before the route listens";
    EXPECT_EQ(httpGet(metricsPort, "/-/healthy").status, 200);

    // Serving, with a connection open that the drain has to wait for.
    int error = 0;
    auto client = test::connectTcp(listenPort, error);
    ASSERT_TRUE(client) << error;
    ASSERT_TRUE(upstream.waitAccepted(1, deadlineIn(milliseconds(5000))));
    EXPECT_EQ(httpGet(metricsPort, "/-/ready").status, 200);

    // Draining: not ready, still healthy, until the drain timeout closes the connection.
    daemon.signal(SIGTERM);
    EXPECT_EQ(waitStatus(metricsPort, "/-/ready", 503, milliseconds(5000)), 503) << daemon.why();
    EXPECT_TRUE(daemon.running()) << "the drain did not wait for the open connection";
    EXPECT_EQ(httpGet(metricsPort, "/-/healthy").status, 200);
    auto page = httpGet(metricsPort, "/metrics");
    EXPECT_EQ(page.status, 200) << "scrapes go on while draining";
    auto exit = daemon.waitExit(milliseconds(15000));
    ASSERT_TRUE(exit) << "no exit after the drain timeout" << daemon.why();
    EXPECT_TRUE(exit->isExit(0)) << exit->describe();
    EXPECT_EQ(httpGet(metricsPort, "/-/healthy").status, 0) << "listener gone with the process";
}

// What a client sees of one listener: status and content type of each probe.
std::vector<std::string> listenerBehaviour(unsigned port, bool ipv6) {
    std::vector<std::string> seen;
    auto record = [&](const std::string& request) {
        auto reply = test::httpExchange(port, request, ipv6);
        auto type = reply.headers.find("Content-Type: ");
        std::string contentType =
            type == std::string::npos
                ? "-"
                : reply.headers.substr(type + 14, reply.headers.find('\r', type) - type - 14);
        seen.push_back(request.substr(0, request.find(" HTTP/")) + " -> " +
                       std::to_string(reply.status) + " " + contentType + " body " +
                       (reply.body.empty() ? "empty" : "present"));
    };
    for (const char* method : {"GET", "HEAD"})
        for (const char* path : {"/metrics", "/-/healthy", "/-/ready", "/nope"})
            record(std::string(method) + " " + path + " HTTP/1.0\r\n\r\n");
    record("POST /metrics HTTP/1.0\r\nContent-Length: 0\r\n\r\n");
    return seen;
}

TEST(MetricsPrometheusTest, Ipv4AndIpv6ListenersBehaveTheSame) {
    if (!haveIpv6Loopback()) GTEST_SKIP() << "no IPv6 loopback on this machine";
    test::TestServer upstream(nullptr);
    std::vector<std::pair<std::string, bool>> listeners = {
        {"127.0.0.1", false}, {"[::1]", true}, {"[::]", true}};
    std::vector<std::vector<std::string>> behaviours;
    for (const auto& [host, ipv6] : listeners) {
        uint16_t listenPort = test::pickFreePort();
        uint16_t metricsPort = test::pickFreePort();
        std::string listen = host + ":" + std::to_string(metricsPort);
        test::Daemon daemon(
            test::relayArgs(listenPort, {upstream.address()}, {"--metrics-listen", listen}));
        ASSERT_TRUE(daemon.waitReady(listenPort)) << daemon.why();
        ASSERT_EQ(waitStatus(metricsPort, "/-/ready", 200, milliseconds(5000), ipv6), 200)
            << listen << daemon.why();
        behaviours.push_back(listenerBehaviour(metricsPort, ipv6));
        auto page = httpGet(metricsPort, "/metrics", ipv6);
        EXPECT_NE(page.body.find("splicegate_build_info"), std::string::npos) << listen;
        auto exit = daemon.terminate();
        ASSERT_TRUE(exit && exit->isExit(0)) << daemon.why();
    }
    const std::vector<std::string> expected = {
        "GET /metrics -> 200 text/plain; version=0.0.4; charset=utf-8 body present",
        "GET /-/healthy -> 200 text/plain; charset=utf-8 body present",
        "GET /-/ready -> 200 text/plain; charset=utf-8 body present",
        "GET /nope -> 404 text/plain; charset=utf-8 body present",
        "HEAD /metrics -> 200 text/plain; version=0.0.4; charset=utf-8 body empty",
        "HEAD /-/healthy -> 200 text/plain; charset=utf-8 body empty",
        "HEAD /-/ready -> 200 text/plain; charset=utf-8 body empty",
        "HEAD /nope -> 404 text/plain; charset=utf-8 body empty",
        "POST /metrics -> 405 text/plain; charset=utf-8 body present",
    };
    for (std::size_t i = 0; i < behaviours.size(); ++i)
        EXPECT_EQ(behaviours[i], expected) << listeners[i].first;
}

TEST(MetricsPrometheusTest, ScrapesAreAnsweredWhileTenClientsStall) {
    test::TestServer upstream(nullptr);
    uint16_t listenPort = test::pickFreePort();
    uint16_t metricsPort = test::pickFreePort();
    test::Daemon daemon(test::relayArgs(listenPort, {upstream.address()},
                                        {"--metrics-listen", test::loopback(metricsPort)}));
    ASSERT_TRUE(daemon.waitReady(listenPort)) << daemon.why();
    ASSERT_EQ(waitStatus(metricsPort, "/-/ready", 200, milliseconds(5000)), 200) << daemon.why();
    std::vector<UniqueFd> stalled;
    for (int i = 0; i < 10; ++i) {
        int error = 0;
        auto fd = test::connectTcp(metricsPort, error);
        ASSERT_TRUE(fd) << "stalled client " << i << ": " << error;
        if (i % 2 == 0) {  // half stop inside the request
            ASSERT_TRUE(test::sendAll(fd.get(), "GET /metrics HTTP/1.1\r\nHost: x\r\n", 32,
                                      deadlineIn(milliseconds(1000)), error));
        }
        stalled.push_back(std::move(fd));
    }
    std::atomic<int> answered{0};
    std::vector<std::thread> scrapers;
    for (int t = 0; t < 3; ++t)
        scrapers.emplace_back([&] {
            for (int i = 0; i < 3; ++i)
                if (httpGet(metricsPort, "/metrics").status == 200) ++answered;
        });
    for (auto& thread : scrapers) thread.join();
    EXPECT_EQ(answered.load(), 9) << daemon.why();
    EXPECT_EQ(httpGet(metricsPort, "/-/ready").status, 200);
}

TEST(MetricsPrometheusTest, DaemonPagePassesPromtoolAndFollowsReloads) {
    std::string promtool = test::findOnPath("promtool");
    if (promtool.empty())
        GTEST_SKIP() << "promtool not installed (Debian package 'prometheus'; "
                        "tools/install-deps.sh installs it)";
    test::TestServer upstream([](int fd, std::size_t) {  // echoes one message
        char buffer[256];
        auto n = ::recv(fd, buffer, sizeof buffer, 0);
        if (n > 0) ::send(fd, buffer, static_cast<std::size_t>(n), MSG_NOSIGNAL);
    });
    const std::string config = "log-level = info\n";
    test::ControlPlaneOptions options;
    options.upstreams = {upstream.address()};
    options.configText = config;
    test::ControlPlaneDaemon cp(options);
    ASSERT_TRUE(cp.start()) << cp.why();
    auto port = cp.metricsPort();
    ASSERT_EQ(waitStatus(port, "/-/ready", 200, milliseconds(5000)), 200) << cp.why();
    {
        int error = 0;
        auto client = test::connectTcp(cp.listenPort(), error);
        ASSERT_TRUE(client) << error;
        ASSERT_TRUE(test::sendAll(client.get(), "hello", 5, deadlineIn(milliseconds(2000)), error));
        char echo[5];
        ASSERT_EQ(::recv(client.get(), echo, sizeof echo, MSG_WAITALL), 5);
    }

    auto page = httpGet(port, "/metrics");
    ASSERT_EQ(page.status, 200) << page.error;
    auto samples = test::parseMetrics(page.body);
    for (const char* name : {"process_start_time_seconds", "process_open_fds", "process_max_fds",
                             "process_resident_memory_bytes", "splicegate_connections_max",
                             "splicegate_audit_disk_free_bytes", "splicegate_audit_stored_bytes",
                             "splicegate_config_last_reload_successful",
                             "splicegate_config_last_reload_success_timestamp_seconds"})
        EXPECT_TRUE(test::sampleValue(samples, name, {})) << name << " missing:\n" << page.body;
    EXPECT_GT(test::sampleValue(samples, "splicegate_connections_max", {}).value_or(0), 0);
    EXPECT_GT(test::sampleValue(samples, "splicegate_audit_stored_bytes", {}).value_or(0), 0)
        << "the audit log holds the connection";
    EXPECT_EQ(page.body.find("exposer_"), std::string::npos) << "no HTTP server internals";

    test::TempDir dir;
    auto file = dir.write("page.txt", page.body);
    auto checked = test::runProcess(
        {"/bin/sh", "-c", "exec '" + promtool + "' check metrics < '" + file + "'"},
        milliseconds(30000));
    ASSERT_TRUE(checked.status);
    EXPECT_TRUE(checked.status->isExit(0)) << checked.out << checked.err << "\n" << page.body;

    // A failed reload sets the gauge to 0 and keeps the last success time; a good one restores it.
    auto successAt =
        test::sampleValue(samples, "splicegate_config_last_reload_success_timestamp_seconds", {});
    cp.writeConfig(config + "[route.broken]\nlisten = not-an-address\n");
    cp.daemon().signal(SIGHUP);
    auto gauge = [&] {
        return test::sampleValue(test::parseMetrics(httpGet(port, "/metrics").body),
                                 "splicegate_config_last_reload_successful", {});
    };
    Deadline deadline = deadlineIn(milliseconds(10000));
    while (Clock::now() < deadline && gauge() != 0.0) std::this_thread::sleep_for(milliseconds(50));
    EXPECT_EQ(gauge(), 0.0) << cp.why();
    auto failedPage = test::parseMetrics(httpGet(port, "/metrics").body);
    EXPECT_EQ(test::sampleValue(failedPage,
                                "splicegate_config_last_reload_success_timestamp_seconds", {}),
              successAt);
    cp.writeConfig(config);
    cp.daemon().signal(SIGHUP);
    deadline = deadlineIn(milliseconds(10000));
    while (Clock::now() < deadline && gauge() != 1.0) std::this_thread::sleep_for(milliseconds(50));
    EXPECT_EQ(gauge(), 1.0) << cp.why();
}

// splicegate_connection_duration_seconds{route}: each closed connection lands in the bucket of
// its lifetime; a connection held 700 ms is above the 0.5 s bound, a quick one below it.
TEST(MetricsPrometheusTest, ConnectionDurationHistogramPerRoute) {
    test::TestServer upstream([](int fd, std::size_t) {  // echoes until the client closes
        char buffer[256];
        for (;;) {
            auto n = ::recv(fd, buffer, sizeof buffer, 0);
            if (n <= 0) return;
            ::send(fd, buffer, static_cast<std::size_t>(n), MSG_NOSIGNAL);
        }
    });
    test::ControlPlaneOptions options;
    options.upstreams = {upstream.address()};
    options.configText = "log-level = info\n";
    test::ControlPlaneDaemon cp(options);
    ASSERT_TRUE(cp.start()) << cp.why();
    auto port = cp.metricsPort();
    ASSERT_EQ(waitStatus(port, "/-/ready", 200, milliseconds(5000)), 200) << cp.why();
    for (auto hold : {milliseconds(0), milliseconds(700)}) {
        int error = 0;
        auto client = test::connectTcp(cp.listenPort(), error);
        ASSERT_TRUE(client) << error;
        ASSERT_TRUE(test::sendAll(client.get(), "hello", 5, deadlineIn(milliseconds(2000)), error));
        char echo[5];
        ASSERT_EQ(::recv(client.get(), echo, sizeof echo, MSG_WAITALL), 5);
        std::this_thread::sleep_for(hold);
    }
    const std::map<std::string, std::string> route{{"route", "default"}};
    std::vector<test::MetricSample> samples;
    Deadline deadline = deadlineIn(milliseconds(10000));
    while (Clock::now() < deadline) {
        samples = test::parseMetrics(httpGet(port, "/metrics").body);
        if (test::sampleValue(samples, "splicegate_connection_duration_seconds_count", route) ==
            2.0)
            break;
        std::this_thread::sleep_for(milliseconds(50));
    }
    ASSERT_EQ(test::sampleValue(samples, "splicegate_connection_duration_seconds_count", route),
              2.0)
        << cp.why();
    auto bucket = [&](const char* le) {
        return test::sampleValue(samples, "splicegate_connection_duration_seconds_bucket",
                                 {{"route", "default"}, {"le", le}});
    };
    EXPECT_EQ(bucket("0.5"), 1.0);
    EXPECT_EQ(bucket("5"), 2.0);
    EXPECT_EQ(bucket("+Inf"), 2.0);
    auto sum = test::sampleValue(samples, "splicegate_connection_duration_seconds_sum", route);
    ASSERT_TRUE(sum);
    EXPECT_GE(*sum, 0.7);
    EXPECT_LT(*sum, 5.0);
}

}  // namespace
}  // namespace splicegate
