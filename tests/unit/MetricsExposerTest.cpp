// MetricsExposer: the /metrics page served over real loopback HTTP from a fake StatsSource with
// known values: every documented name with its labels and values, the fsync histogram, the page
// accepted by `promtool check metrics`, the process and daemon gauges, /-/healthy and /-/ready,
// IPv4 and IPv6 served alike (GET and HEAD, bad requests, stalled clients), and the exposer's
// error and lifetime contracts.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "common/Error.h"
#include "metrics/AuditDiskUsage.h"
#include "metrics/MetricsExposer.h"
#include "tests/support/ControlPlaneDaemon.h"
#include "tests/support/Daemon.h"
#include "tests/support/HttpFetch.h"
#include "tests/support/Sockets.h"

namespace splicegate {
namespace {

using test::deadlineIn;
using test::httpExchange;
using test::httpGet;
using test::milliseconds;

// Sample lines of a text exposition: "name{labels}" -> value text. Comments are skipped.
std::map<std::string, std::string> samples(const std::string& body) {
    std::map<std::string, std::string> result;
    std::istringstream in(body);
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#') continue;
        auto space = line.rfind(' ');
        result[line.substr(0, space)] = line.substr(space + 1);
    }
    return result;
}

// "# TYPE name kind" -> kind.
std::map<std::string, std::string> types(const std::string& body) {
    std::map<std::string, std::string> result;
    std::istringstream in(body);
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("# TYPE ", 0) != 0) continue;
        std::istringstream fields(line.substr(7));
        std::string name, kind;
        fields >> name >> kind;
        result[name] = kind;
    }
    return result;
}

bool hasHelp(const std::string& body, const std::string& name) {
    return body.find("# HELP " + name + " ") != std::string::npos;
}

double valueOf(const std::map<std::string, std::string>& s, const std::string& series) {
    auto found = s.find(series);
    if (found == s.end()) return std::nan("");
    return std::strtod(found->second.c_str(), nullptr);
}

StatsSnapshot knownSnapshot() {
    StatsSnapshot s;
    s.version = "9.8.7-test";
    RouteSnapshot web;
    web.name = "web";
    web.accepted = 1001;
    web.active = 7;
    web.connectFailures = 3;
    web.bytesC2u = 123456789012ULL;
    web.bytesU2c = 987654321;
    for (int i = 0; i < static_cast<int>(CloseReason::Count); ++i)
        web.closed[toString(static_cast<CloseReason>(i))] = static_cast<std::uint64_t>(10 + i);
    web.refused[toString(RefuseReason::MaxConnections)] = 42;
    RouteSnapshot def;
    def.name = "default";
    def.accepted = 5;
    def.active = 0;
    def.bytesC2u = 11;
    def.bytesU2c = 22;
    def.closed["closed"] = 5;
    def.refused["max-connections"] = 0;
    s.routes = {web, def};
    s.auditBytes = 555555;
    s.auditErrors = {{"write", 2}, {"sync", 1}};
    s.auditLostBytes = 4096;
    // Raw per-bucket counts 1..13, made cumulative the way sumWorkerStats() does.
    std::uint64_t cumulative = 0;
    for (std::uint64_t i = 1; i <= fsyncBucketBounds().size() + 1; ++i)
        s.fsyncBucketCounts.push_back(cumulative += i);
    s.fsyncCount = cumulative;  // 91
    s.fsyncSumSeconds = 1.25;
    s.pipesInUse = 12;
    s.pipesIdle = 4;
    s.pipesOverflowInUse = 1;
    s.pipeCapRefusals = 3;
    s.pipeBudgetBytes = 1u << 30;
    s.pipeBudgetUsedBytes = 1u << 29;
    s.xdpPackets = {{{"drop", "deny"}, 100}, {{"drop", "syn-rate"}, 50}, {{"pass", "allow"}, 7}};
    s.adminRequests = {{{"status", "ok"}, 9}, {{"kill", "error"}, 1}};
    UpstreamSnapshot a;
    a.route = "web";
    a.upstream = "10.0.0.1:443";
    a.up = true;
    a.active = 4;
    a.connectFailures = 3;
    a.healthCheckFailures = 8;
    a.wentDown = 2;
    a.cameUp = 2;
    a.bytesC2u = 1000;
    a.bytesU2c = 2000;
    a.connectBucketCounts.assign(kUpstreamConnectBucketBounds.size() + 1, 3);
    a.connectSumSeconds = 0.003;
    UpstreamSnapshot b;
    b.route = "web";
    b.upstream = "10.0.0.2:443";
    b.up = true;
    b.disabled = true;
    s.upstreams = {a, b};
    return s;
}

TEST(MetricsExposerTest, ServesEverySpecNameWithLabelsAndValues) {
    std::atomic<int> calls{0};
    MetricsExposer exposer("127.0.0.1:0", [&] {
        ++calls;
        return knownSnapshot();
    });
    ASSERT_NE(exposer.port(), 0u);
    auto response = httpGet(exposer.port(), "/metrics");
    ASSERT_TRUE(response.error.empty()) << response.error;
    ASSERT_EQ(response.status, 200) << response.headers;
    EXPECT_NE(response.headers.find("text/plain"), std::string::npos) << response.headers;
    EXPECT_EQ(calls.load(), 1) << "one StatsSource call per scrape";
    EXPECT_EQ(exposer.scrapes(), 1u);

    const auto& body = response.body;
    auto s = samples(body);
    auto t = types(body);

    const std::vector<std::pair<std::string, std::string>> families = {
        {"splicegate_connections_accepted_total", "counter"},
        {"splicegate_connections_active", "gauge"},
        {"splicegate_connections_closed_total", "counter"},
        {"splicegate_connections_refused_total", "counter"},
        {"splicegate_upstream_connect_failures_total", "counter"},
        {"splicegate_upstream_health_check_failures_total", "counter"},
        {"splicegate_upstream_connections_active", "gauge"},
        {"splicegate_upstream_state", "gauge"},
        {"splicegate_upstream_state_changes_total", "counter"},
        {"splicegate_upstream_bytes_total", "counter"},
        {"splicegate_upstream_connect_seconds", "histogram"},
        {"splicegate_bytes_total", "counter"},
        {"splicegate_audit_bytes_total", "counter"},
        {"splicegate_audit_fsync_seconds", "histogram"},
        {"splicegate_audit_errors_total", "counter"},
        {"splicegate_audit_lost_bytes_total", "counter"},
        {"splicegate_pipes", "gauge"},
        {"splicegate_pipe_cap_refusals_total", "counter"},
        {"splicegate_pipe_budget_bytes", "gauge"},
        {"splicegate_pipe_budget_used_bytes", "gauge"},
        {"splicegate_xdp_packets_total", "counter"},
        {"splicegate_admin_requests_total", "counter"},
        {"splicegate_build_info", "gauge"},
    };
    for (const auto& [name, kind] : families) {
        EXPECT_EQ(t[name], kind) << name << " in\n" << body;
        EXPECT_TRUE(hasHelp(body, name)) << "no HELP for " << name;
    }

    const std::map<std::string, double> expected = {
        {R"(splicegate_build_info{version="9.8.7-test"})", 1},
        {R"(splicegate_connections_accepted_total{route="web"})", 1001},
        {R"(splicegate_connections_accepted_total{route="default"})", 5},
        {R"(splicegate_connections_active{route="web"})", 7},
        {R"(splicegate_connections_active{route="default"})", 0},
        {R"(splicegate_connections_closed_total{reason="closed",route="web"})", 10},
        {R"(splicegate_connections_closed_total{reason="client-reset",route="web"})", 11},
        {R"(splicegate_connections_closed_total{reason="upstream-unreachable",route="web"})", 13},
        {R"(splicegate_connections_closed_total{reason="error",route="web"})",
         10 + static_cast<int>(CloseReason::Error)},
        {R"(splicegate_connections_closed_total{reason="closed",route="default"})", 5},
        {R"(splicegate_connections_refused_total{reason="max-connections",route="web"})", 42},
        {R"(splicegate_connections_refused_total{reason="max-connections",route="default"})", 0},
        {R"(splicegate_upstream_connect_failures_total{route="web",upstream="10.0.0.1:443"})", 3},
        {R"(splicegate_upstream_connect_failures_total{route="web",upstream="10.0.0.2:443"})", 0},
        {R"(splicegate_upstream_health_check_failures_total{route="web",upstream="10.0.0.1:443"})",
         8},
        {R"(splicegate_upstream_connections_active{route="web",upstream="10.0.0.1:443"})", 4},
        {R"(splicegate_upstream_state{route="web",upstream="10.0.0.1:443",state="up"})", 1},
        {R"(splicegate_upstream_state{route="web",upstream="10.0.0.1:443",state="down"})", 0},
        {R"(splicegate_upstream_state{route="web",upstream="10.0.0.2:443",state="disabled"})", 1},
        {R"(splicegate_upstream_state{route="web",upstream="10.0.0.2:443",state="up"})", 0},
        {R"(splicegate_upstream_up{route="web",upstream="10.0.0.2:443"})", 1},
        {R"(splicegate_upstream_state_changes_total{route="web",upstream="10.0.0.1:443",to="down"})",
         2},
        {R"(splicegate_upstream_bytes_total{route="web",upstream="10.0.0.1:443",direction="u2c"})",
         2000},
        {R"(splicegate_upstream_connect_seconds_count{route="web",upstream="10.0.0.1:443"})", 3},
        {R"(splicegate_bytes_total{direction="c2u",route="web"})", 123456789012.0},
        {R"(splicegate_bytes_total{direction="u2c",route="web"})", 987654321},
        {R"(splicegate_bytes_total{direction="c2u",route="default"})", 11},
        {R"(splicegate_bytes_total{direction="u2c",route="default"})", 22},
        {R"(splicegate_audit_bytes_total)", 555555},
        {R"(splicegate_audit_errors_total{kind="write"})", 2},
        {R"(splicegate_audit_errors_total{kind="sync"})", 1},
        {R"(splicegate_audit_lost_bytes_total)", 4096},
        {R"(splicegate_pipes{state="in_use"})", 12},
        {R"(splicegate_pipes{state="idle"})", 4},
        {R"(splicegate_pipes{state="overflow_in_use"})", 1},
        {R"(splicegate_pipe_cap_refusals_total)", 3},
        {R"(splicegate_pipe_budget_bytes)", 1073741824},
        {R"(splicegate_pipe_budget_used_bytes)", 536870912},
        {R"(splicegate_xdp_packets_total{action="drop",reason="deny"})", 100},
        {R"(splicegate_xdp_packets_total{action="drop",reason="syn-rate"})", 50},
        {R"(splicegate_xdp_packets_total{action="pass",reason="allow"})", 7},
        {R"(splicegate_admin_requests_total{command="status",result="ok"})", 9},
        {R"(splicegate_admin_requests_total{command="kill",result="error"})", 1},
    };
    for (const auto& [series, value] : expected)
        EXPECT_EQ(valueOf(s, series), value) << series << " in\n" << body;

    // Every close reason of every route is present (so rate() has a series from the start).
    for (int i = 0; i < static_cast<int>(CloseReason::Count); ++i) {
        std::string series = std::string(R"(splicegate_connections_closed_total{reason=")") +
                             toString(static_cast<CloseReason>(i)) + R"(",route="web"})";
        EXPECT_EQ(valueOf(s, series), 10 + i) << series;
    }
    // Bounded labels: nothing but the fixed label names appears on splicegate_ series.
    for (const auto& [series, value] : s) {
        if (series.rfind("splicegate_", 0) != 0) continue;
        auto open = series.find('{');
        if (open == std::string::npos) continue;
        std::string labels = series.substr(open + 1, series.size() - open - 2);
        std::istringstream in(labels);
        std::string pair;
        while (std::getline(in, pair, ',')) {
            auto name = pair.substr(0, pair.find('='));
            static const std::vector<std::string> allowed = {
                "route",  "reason",  "direction", "kind",    "state",
                "action", "command", "result",    "version", "le",
                "upstream", "to"};
            EXPECT_NE(std::find(allowed.begin(), allowed.end(), name), allowed.end())
                << "unexpected label " << name << " on " << series;
        }
    }
}

// A name whose series carry different label sets breaks every sum by (...) over it: each name
// has one label set (histogram buckets add only `le`).
TEST(MetricsExposerTest, EveryNameHasOneLabelSet) {
    auto body = renderMetricsText(knownSnapshot());
    std::map<std::string, std::set<std::string>> labelSets;
    for (const auto& [series, value] : samples(body)) {
        auto brace = series.find('{');
        std::string name = series.substr(0, brace);
        std::string keys;
        if (brace != std::string::npos) {
            std::string labels = series.substr(brace + 1);
            for (std::size_t at = 0; at < labels.size();) {
                auto eq = labels.find('=', at);
                if (eq == std::string::npos) break;
                keys += labels.substr(at, eq - at) + ",";
                auto close = labels.find('"', labels.find('"', eq) + 1);
                at = close + 2;  // past '",'
            }
        }
        labelSets[name].insert(keys);
    }
    ASSERT_TRUE(labelSets.count("splicegate_upstream_connect_failures_total"));
    for (const auto& [name, sets] : labelSets)
        EXPECT_EQ(sets.size(), 1u) << name << " has series with " << sets.size()
                                   << " different label sets";
}

TEST(MetricsExposerTest, FsyncHistogramIsCumulativeWithSumAndCount) {
    MetricsExposer exposer("127.0.0.1:0", [] { return knownSnapshot(); });
    auto response = httpGet(exposer.port(), "/metrics");
    ASSERT_TRUE(response.error.empty()) << response.error;
    auto s = samples(response.body);
    const auto& bounds = fsyncBucketBounds();
    auto snapshot = knownSnapshot();
    // Buckets in order, values exactly the cumulative counts given, `le` parsing back to bound.
    std::vector<std::pair<double, double>> buckets;  // le, count
    for (const auto& [series, value] : s) {
        const std::string prefix = R"(splicegate_audit_fsync_seconds_bucket{le=")";
        if (series.rfind(prefix, 0) != 0) continue;
        std::string le = series.substr(prefix.size(), series.size() - prefix.size() - 2);
        double bound = le == "+Inf" ? INFINITY : std::strtod(le.c_str(), nullptr);
        buckets.emplace_back(bound, std::strtod(value.c_str(), nullptr));
    }
    std::sort(buckets.begin(), buckets.end());
    ASSERT_EQ(buckets.size(), bounds.size() + 1) << response.body;
    for (std::size_t i = 0; i < bounds.size(); ++i) {
        EXPECT_DOUBLE_EQ(buckets[i].first, bounds[i]);
        EXPECT_EQ(buckets[i].second, static_cast<double>(snapshot.fsyncBucketCounts[i]))
            << "le=" << bounds[i];
    }
    EXPECT_TRUE(std::isinf(buckets.back().first));
    EXPECT_EQ(buckets.back().second, 91);
    EXPECT_EQ(valueOf(s, "splicegate_audit_fsync_seconds_count"), 91);
    EXPECT_DOUBLE_EQ(valueOf(s, "splicegate_audit_fsync_seconds_sum"), 1.25);
    EXPECT_NE(response.body.find(R"(splicegate_audit_fsync_seconds_bucket{le="+Inf"} 91)"),
              std::string::npos)
        << response.body;
}

TEST(MetricsExposerTest, HistogramFromRealWorkerCountersStaysConsistent) {
    // Through the real data-path structures: observeFsync() on two workers, sumWorkerStats().
    auto a = std::make_unique<WorkerStats>();
    auto b = std::make_unique<WorkerStats>();
    RouteIndex routes;
    auto index = routes.indexOf("default");
    a->routes[index].bytesC2u.add(100);
    b->routes[index].bytesC2u.add(23);
    a->observeFsync(200'000);        // 0.2 ms -> le 0.0005
    a->observeFsync(3'000'000);      // 3 ms -> le 0.005
    b->observeFsync(3'000'000'000);  // 3 s -> +Inf only
    StatsSnapshot snapshot;
    sumWorkerStats({a.get(), b.get()}, routes, snapshot);
    auto s = samples(renderMetricsText(snapshot));
    EXPECT_EQ(valueOf(s, R"(splicegate_bytes_total{direction="c2u",route="default"})"), 123);
    EXPECT_EQ(valueOf(s, R"(splicegate_audit_fsync_seconds_bucket{le="0.0005"})"), 1);
    EXPECT_EQ(valueOf(s, R"(splicegate_audit_fsync_seconds_bucket{le="0.0025"})"), 1);
    EXPECT_EQ(valueOf(s, R"(splicegate_audit_fsync_seconds_bucket{le="0.005"})"), 2);
    EXPECT_EQ(valueOf(s, R"(splicegate_audit_fsync_seconds_bucket{le="2.5"})"), 2);
    EXPECT_EQ(valueOf(s, R"(splicegate_audit_fsync_seconds_bucket{le="+Inf"})"), 3);
    EXPECT_EQ(valueOf(s, "splicegate_audit_fsync_seconds_count"), 3);
    EXPECT_NEAR(valueOf(s, "splicegate_audit_fsync_seconds_sum"), 3.0032, 1e-9);

    // A torn read (a later bucket lagging an earlier one) is clamped, never non-monotonic.
    snapshot.fsyncBucketCounts[5] = 0;
    snapshot.fsyncBucketCounts.back() = 1;
    auto torn = samples(renderMetricsText(snapshot));
    double previous = 0;
    for (double bound : fsyncBucketBounds()) {
        std::ostringstream series;
        series << R"(splicegate_audit_fsync_seconds_bucket{le=")" << bound << R"("})";
        double value = valueOf(torn, series.str());
        ASSERT_FALSE(std::isnan(value)) << series.str();
        EXPECT_GE(value, previous) << series.str();
        previous = value;
    }
    EXPECT_GE(valueOf(torn, R"(splicegate_audit_fsync_seconds_bucket{le="+Inf"})"), previous);
    EXPECT_EQ(valueOf(torn, "splicegate_audit_fsync_seconds_count"),
              valueOf(torn, R"(splicegate_audit_fsync_seconds_bucket{le="+Inf"})"));
}

TEST(MetricsExposerTest, EmptySnapshotStillValid) {
    // A daemon without routes, XDP or admin traffic yet: no empty families, build_info present.
    StatsSnapshot empty;
    auto text = renderMetricsText(empty);
    auto s = samples(text);
    EXPECT_EQ(valueOf(s, std::string(R"(splicegate_build_info{version=")") + SPLICEGATE_VERSION +
                             R"("})"),
              1)
        << text;
    EXPECT_EQ(valueOf(s, R"(splicegate_audit_fsync_seconds_bucket{le="+Inf"})"), 0);
    EXPECT_EQ(valueOf(s, "splicegate_audit_fsync_seconds_count"), 0);
    EXPECT_EQ(text.find("splicegate_xdp_packets_total"), std::string::npos) << text;
}

// promtool reads the page from stdin; returns its exit status and output.
test::ProcessResult promtoolCheckMetrics(const test::TempDir& dir, const std::string& body) {
    auto file = dir.write("metrics.txt", body);
    return test::runProcess({"/bin/sh", "-c", "exec promtool check metrics < '" + file + "'"},
                            milliseconds(30000));
}

bool havePromtool() {
    return !test::findOnPath("promtool").empty();
}

TEST(MetricsExposerTest, PromtoolAcceptsThePage) {
    if (!havePromtool())
        GTEST_SKIP() << "promtool not installed (Debian package 'prometheus'; "
                        "tools/install-deps.sh installs it)";
    MetricsExposer exposer("127.0.0.1:0", [] { return knownSnapshot(); });
    auto response = httpGet(exposer.port(), "/metrics");
    ASSERT_TRUE(response.error.empty()) << response.error;
    test::TempDir dir;
    auto served = promtoolCheckMetrics(dir, response.body);
    ASSERT_TRUE(served.status) << "promtool timed out";
    EXPECT_TRUE(served.status->isExit(0)) << served.status->describe() << "\n"
                                          << served.out << served.err << "\n--- page:\n"
                                          << response.body;
    // Our families alone, with no lint findings at all (promtool prints nothing then).
    auto ours = promtoolCheckMetrics(dir, renderMetricsText(knownSnapshot()));
    ASSERT_TRUE(ours.status);
    EXPECT_TRUE(ours.status->isExit(0)) << ours.out << ours.err;
    EXPECT_EQ(ours.out + ours.err, "") << "lint findings";
}

TEST(MetricsExposerTest, SourceRunsOncePerScrapeAndSeesGrowth) {
    std::atomic<std::uint64_t> bytes{0};
    MetricsExposer exposer("127.0.0.1:0", [&] {
        StatsSnapshot s;
        RouteSnapshot route;
        route.name = "default";
        route.bytesC2u = bytes += 1000;
        s.routes.push_back(route);
        return s;
    });
    for (int i = 1; i <= 3; ++i) {
        auto response = httpGet(exposer.port(), "/metrics");
        ASSERT_TRUE(response.error.empty()) << response.error;
        EXPECT_EQ(valueOf(samples(response.body),
                          R"(splicegate_bytes_total{direction="c2u",route="default"})"),
                  1000.0 * i);
    }
    EXPECT_EQ(exposer.scrapes(), 3u);
}

TEST(MetricsExposerTest, ConcurrentScrapesNeverRunTheSourceConcurrently) {
    std::atomic<int> inside{0};
    std::atomic<bool> overlapped{false};
    MetricsExposer exposer("127.0.0.1:0", [&] {
        if (inside.fetch_add(1) != 0) overlapped = true;
        std::this_thread::sleep_for(milliseconds(5));
        inside.fetch_sub(1);
        return knownSnapshot();
    });
    std::vector<std::thread> threads;
    std::atomic<int> ok{0};
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&] {
            for (int i = 0; i < 5; ++i)
                if (httpGet(exposer.port(), "/metrics").status == 200) ++ok;
        });
    }
    for (auto& thread : threads) thread.join();
    EXPECT_EQ(ok.load(), 20);
    EXPECT_FALSE(overlapped.load());
}

TEST(MetricsExposerTest, ThrowingSourceGivesAnEmptyPageAndTheExposerSurvives) {
    std::atomic<bool> fail{true};
    MetricsExposer exposer("127.0.0.1:0", [&]() -> StatsSnapshot {
        if (fail) throw std::runtime_error("stats not ready");
        return knownSnapshot();
    });
    auto bad = httpGet(exposer.port(), "/metrics");
    ASSERT_TRUE(bad.error.empty()) << bad.error;
    EXPECT_EQ(bad.status, 200);
    EXPECT_EQ(bad.body.find("splicegate_bytes_total"), std::string::npos) << bad.body;
    EXPECT_NE(bad.body.find("process_open_fds"), std::string::npos) << "the rest is served";
    fail = false;
    auto good = httpGet(exposer.port(), "/metrics");
    EXPECT_NE(good.body.find("splicegate_bytes_total"), std::string::npos) << good.body;
}

TEST(MetricsExposerTest, RejectsANonNumericAddressNamingIt) {
    for (const std::string listen : {"localhost:9464", "127.0.0.1", "::1:9464", "1.2.3.4:99999"}) {
        try {
            MetricsExposer exposer(listen, [] { return StatsSnapshot{}; });
            ADD_FAILURE() << listen << " accepted";
        } catch (const UsageError& e) {
            EXPECT_NE(std::string(e.what()).find(listen), std::string::npos) << e.what();
        }
    }
}

TEST(MetricsExposerTest, WildcardAddressServesOnLoopback) {
    MetricsExposer exposer("0.0.0.0:0", [] { return knownSnapshot(); });
    EXPECT_EQ(httpGet(exposer.port(), "/metrics").status, 200);
}

TEST(MetricsExposerTest, DestructorStopsServingAndTheSource) {
    std::atomic<int> calls{0};
    unsigned port = 0;
    {
        MetricsExposer exposer("127.0.0.1:0", [&] {
            ++calls;
            return StatsSnapshot{};
        });
        port = exposer.port();
        ASSERT_EQ(httpGet(port, "/metrics").status, 200);
    }
    int before = calls.load();
    auto after = httpGet(port, "/metrics");
    EXPECT_FALSE(after.error.empty()) << "still serving after destruction";
    EXPECT_EQ(calls.load(), before);
    // The port is free again: a new exposer can take it.
    MetricsExposer again(test::loopback(static_cast<uint16_t>(port)),
                         [] { return StatsSnapshot{}; });
    EXPECT_EQ(again.port(), port);
}

TEST(MetricsExposerTest, UnknownPathIsNotFound) {
    MetricsExposer exposer("127.0.0.1:0", [] { return StatsSnapshot{}; });
    auto response = httpGet(exposer.port(), "/nope");
    ASSERT_TRUE(response.error.empty()) << response.error;
    EXPECT_EQ(response.status, 404);
}

TEST(MetricsExposerTest, ProcessGaugesComeFromThisProcess) {
    MetricsExposer exposer("127.0.0.1:0");
    auto response = httpGet(exposer.port(), "/metrics");
    ASSERT_EQ(response.status, 200) << response.error;
    auto s = samples(response.body);
    auto t = types(response.body);
    for (const char* name : {"process_start_time_seconds", "process_open_fds", "process_max_fds",
                             "process_resident_memory_bytes"})
        EXPECT_EQ(t[name], "gauge") << name << " in\n" << response.body;
    rlimit limit{};
    ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &limit), 0);
    EXPECT_EQ(valueOf(s, "process_max_fds"), static_cast<double>(limit.rlim_cur));
    EXPECT_GE(valueOf(s, "process_open_fds"), 3);  // stdio at least
    EXPECT_GT(valueOf(s, "process_resident_memory_bytes"), 0);
    double now = static_cast<double>(::time(nullptr));
    double started = valueOf(s, "process_start_time_seconds");
    EXPECT_LE(started, now + 1);
    EXPECT_GT(started, now - 24 * 3600) << "this test process started today";
    // More open fds are seen by the next scrape.
    std::vector<UniqueFd> extra;
    for (int i = 0; i < 20; ++i) extra.emplace_back(::dup(0));
    auto more = samples(httpGet(exposer.port(), "/metrics").body);
    EXPECT_GE(valueOf(more, "process_open_fds"), valueOf(s, "process_open_fds") + 20);
}

TEST(MetricsExposerTest, DaemonGaugesFollowTheSetters) {
    MetricsExposer exposer("127.0.0.1:0", [] { return StatsSnapshot{}; });
    auto before = samples(httpGet(exposer.port(), "/metrics").body);
    EXPECT_TRUE(std::isnan(valueOf(before, "splicegate_connections_max"))) << "not set yet";
    EXPECT_EQ(valueOf(before, "splicegate_config_last_reload_successful"), 1) << "start load";
    double startLoad = valueOf(before, "splicegate_config_last_reload_success_timestamp_seconds");
    EXPECT_GT(startLoad, 0);

    exposer.setConnectionsMax(65536);
    exposer.recordReload(false);
    auto failed = samples(httpGet(exposer.port(), "/metrics").body);
    EXPECT_EQ(valueOf(failed, "splicegate_connections_max"), 65536);
    EXPECT_EQ(valueOf(failed, "splicegate_config_last_reload_successful"), 0);
    EXPECT_EQ(valueOf(failed, "splicegate_config_last_reload_success_timestamp_seconds"), startLoad)
        << "a failed reload leaves the last success time";

    exposer.recordReload(true);
    auto ok = samples(httpGet(exposer.port(), "/metrics").body);
    EXPECT_EQ(valueOf(ok, "splicegate_config_last_reload_successful"), 1);
    EXPECT_GE(valueOf(ok, "splicegate_config_last_reload_success_timestamp_seconds"), startLoad);
}

TEST(MetricsExposerTest, AuditDirectoryGauges) {
    test::TempDir dir;
    dir.write("w00-0000000001.data", std::string(3000, 'x'));
    dir.write("w00-0000000001.index", std::string(100, 'y'));
    ASSERT_EQ(::mkdir((dir.path() + "/sub").c_str(), 0700), 0);  // not a file: not counted
    ASSERT_EQ(::symlink("/etc/passwd", (dir.path() + "/link").c_str()), 0);  // not followed
    MetricsExposer exposer(
        "127.0.0.1:0", [] { return StatsSnapshot{}; }, dir.path());
    auto response = httpGet(exposer.port(), "/metrics");
    auto s = samples(response.body);
    EXPECT_EQ(types(response.body)["splicegate_audit_stored_bytes"], "gauge");
    EXPECT_EQ(valueOf(s, "splicegate_audit_stored_bytes"), 3100) << response.body;
    struct statvfs fs {};
    ASSERT_EQ(::statvfs(dir.path().c_str(), &fs), 0);
    double free = valueOf(s, "splicegate_audit_disk_free_bytes");
    EXPECT_GT(free, 0);
    double size = static_cast<double>(fs.f_blocks) * static_cast<double>(fs.f_frsize);
    EXPECT_EQ(valueOf(s, "splicegate_audit_disk_size_bytes"), size);
    EXPECT_LE(free, size);

    // Without caching every sample sees the directory as it is now.
    AuditDiskUsage usage(dir.path(), std::chrono::seconds(0));
    EXPECT_EQ(usage.sample().storedBytes, 3100u);
    dir.write("w01-0000000001.data", std::string(900, 'z'));
    EXPECT_EQ(usage.sample().storedBytes, 4000u);
    // A missing directory is reported as unknown, never as 0 bytes free.
    AuditDiskUsage missing(dir.path() + "/nope");
    EXPECT_FALSE(missing.sample().freeBytes);
    EXPECT_FALSE(missing.sample().storedBytes);
}

TEST(MetricsExposerTest, StatsBindingStopsTheSource) {
    MetricsExposer exposer("127.0.0.1:0");
    std::atomic<int> calls{0};
    {
        auto binding = exposer.bindStatsSource([&] {
            ++calls;
            return knownSnapshot();
        });
        auto bound = httpGet(exposer.port(), "/metrics");
        EXPECT_NE(bound.body.find("splicegate_bytes_total"), std::string::npos) << bound.body;
        EXPECT_EQ(calls.load(), 1);
    }
    auto unbound = httpGet(exposer.port(), "/metrics");
    EXPECT_EQ(unbound.status, 200);
    EXPECT_EQ(unbound.body.find("splicegate_bytes_total"), std::string::npos) << unbound.body;
    EXPECT_NE(unbound.body.find("process_open_fds"), std::string::npos) << unbound.body;
    EXPECT_EQ(calls.load(), 1);
}

bool haveIpv6Loopback(std::string& why) {
    uint16_t probe = 0;
    try {
        auto fd = test::listenTcp(probe, true);
        return true;
    } catch (const std::system_error& e) {
        why = e.what();
        return false;
    }
}

// Every listener test runs on 127.0.0.1 and on [::1]: one server, the same behaviour.
class MetricsListenerTest : public testing::TestWithParam<bool> {
  protected:
    void SetUp() override {
        std::string why;
        if (ipv6() && !haveIpv6Loopback(why)) GTEST_SKIP() << "no IPv6 loopback: " << why;
    }
    bool ipv6() const { return GetParam(); }
    std::string anyPort() const { return ipv6() ? "[::1]:0" : "127.0.0.1:0"; }
    test::HttpReply get(unsigned port, const std::string& target) const {
        return httpGet(port, target, ipv6());
    }
    test::HttpReply exchange(unsigned port, const std::string& request) const {
        return httpExchange(port, request, ipv6());
    }
};

TEST_P(MetricsListenerTest, ServesThePageWithGetAndHead) {
    std::atomic<int> calls{0};
    MetricsExposer exposer(anyPort(), [&] {
        ++calls;
        return knownSnapshot();
    });
    auto response = get(exposer.port(), "/metrics");
    ASSERT_TRUE(response.error.empty()) << response.error;
    EXPECT_EQ(response.status, 200);
    EXPECT_NE(response.headers.find("text/plain; version=0.0.4"), std::string::npos)
        << response.headers;
    auto s = samples(response.body);
    EXPECT_EQ(valueOf(s, R"(splicegate_bytes_total{direction="c2u",route="web"})"), 123456789012.0);
    EXPECT_EQ(get(exposer.port(), "/metrics?x=1").status, 200) << "a query string is ignored";

    auto head = exchange(exposer.port(), "HEAD /metrics HTTP/1.0\r\n\r\n");
    ASSERT_TRUE(head.error.empty()) << head.error;
    EXPECT_EQ(head.status, 200) << head.headers;
    EXPECT_EQ(head.body, "");
    EXPECT_NE(head.headers.find("text/plain; version=0.0.4"), std::string::npos) << head.headers;
    for (const char* path : {"/-/healthy", "/-/ready"}) {
        auto probe = exchange(exposer.port(), std::string("HEAD ") + path + " HTTP/1.0\r\n\r\n");
        EXPECT_NE(probe.status, 0) << path << ": " << probe.error;
        EXPECT_EQ(probe.body, "") << path;
    }
    EXPECT_EQ(calls.load(), 3);
    if (havePromtool()) {
        test::TempDir dir;
        auto checked = promtoolCheckMetrics(dir, response.body);
        ASSERT_TRUE(checked.status);
        EXPECT_TRUE(checked.status->isExit(0)) << checked.out << checked.err;
    }
}

TEST_P(MetricsListenerTest, HealthyAlwaysReadyOnlyWhileServing) {
    MetricsExposer exposer(anyPort());
    EXPECT_EQ(get(exposer.port(), "/-/healthy").status, 200);
    EXPECT_EQ(get(exposer.port(), "/-/ready").status, 503) << "starting";
    exposer.setReady(true);
    EXPECT_EQ(get(exposer.port(), "/-/healthy").status, 200);
    EXPECT_EQ(get(exposer.port(), "/-/ready").status, 200);
    exposer.setReady(false);
    EXPECT_EQ(get(exposer.port(), "/-/healthy").status, 200);
    auto draining = get(exposer.port(), "/-/ready");
    EXPECT_EQ(draining.status, 503);
    EXPECT_NE(draining.body.find("not ready"), std::string::npos) << draining.body;
}

TEST_P(MetricsListenerTest, AnswersBadRequestsAndKeepsServing) {
    MetricsExposer exposer(anyPort(), [] { return knownSnapshot(); });
    auto port = exposer.port();
    EXPECT_EQ(get(port, "/nope").status, 404);
    auto post = exchange(port, "POST /metrics HTTP/1.0\r\nContent-Length: 0\r\n\r\n");
    EXPECT_EQ(post.status, 405);
    EXPECT_NE(post.headers.find("Allow: GET, HEAD"), std::string::npos) << post.headers;
    EXPECT_EQ(exchange(port, "GET /metrics HTTP/1.0\r\nNoColon\r\n\r\n").status, 400);
    EXPECT_EQ(exchange(port, "GET /metrics HTTP/7.0\r\n\r\n").status, 505);
    // A line that is no request at all is closed without an answer.
    auto garbage = exchange(port, "garbage\r\n\r\n");
    EXPECT_EQ(garbage.status, 0) << garbage.headers;
    // A peer that sends half a request and closes needs no answer.
    {
        int error = 0;
        auto half =
            test::connectTcp(static_cast<uint16_t>(port), error, milliseconds(2000), ipv6());
        ASSERT_TRUE(half);
        test::sendAll(half.get(), "GET /met", 8, deadlineIn(milliseconds(1000)), error);
    }
    auto good = get(port, "/metrics");
    EXPECT_EQ(good.status, 200) << good.error;
    EXPECT_EQ(exposer.scrapes(), 1u);
}

TEST_P(MetricsListenerTest, ScrapesAreAnsweredWhileTenClientsStall) {
    MetricsExposer exposer(anyPort(), [] { return knownSnapshot(); });
    auto port = static_cast<uint16_t>(exposer.port());
    std::vector<UniqueFd> stalled;
    for (int i = 0; i < 10; ++i) {
        int error = 0;
        auto fd = test::connectTcp(port, error, milliseconds(2000), ipv6());
        ASSERT_TRUE(fd) << "client " << i << ": " << error;
        if (i % 2 == 1) {  // half of them stop in the middle of a request
            ASSERT_TRUE(test::sendAll(fd.get(), "GET /metrics HTTP/1.1\r\n", 23,
                                      deadlineIn(milliseconds(1000)), error));
        }
        stalled.push_back(std::move(fd));
    }
    std::vector<std::thread> scrapers;
    std::atomic<int> answered{0};
    for (int t = 0; t < 4; ++t)
        scrapers.emplace_back([&] {
            for (int i = 0; i < 3; ++i)
                if (get(port, "/metrics").status == 200) ++answered;
        });
    for (auto& thread : scrapers) thread.join();
    EXPECT_EQ(answered.load(), 12);
    EXPECT_EQ(get(port, "/-/healthy").status, 200);
}

TEST_P(MetricsListenerTest, BusyPortThrowsSystemErrorNamingTheAddress) {
    uint16_t port = 0;
    auto listener = test::listenTcp(port, ipv6());
    std::string listen = test::loopback(port, ipv6());
    try {
        MetricsExposer exposer(listen, [] { return StatsSnapshot{}; });
        ADD_FAILURE() << "bound a busy port " << listen;
    } catch (const std::system_error& e) {
        EXPECT_EQ(e.code().value(), EADDRINUSE) << e.what();
        EXPECT_NE(std::string(e.what()).find(listen), std::string::npos) << e.what();
    }
}

TEST_P(MetricsListenerTest, StalledPeerDoesNotKeepTheServerAlive) {
    std::atomic<int> calls{0};
    auto exposer = std::make_unique<MetricsExposer>(anyPort(), [&] {
        ++calls;
        return StatsSnapshot{};
    });
    int error = 0;
    auto stalled =
        test::connectTcp(static_cast<uint16_t>(exposer->port()), error, milliseconds(2000), ipv6());
    ASSERT_TRUE(stalled);
    ASSERT_TRUE(test::sendAll(stalled.get(), "GET /metrics HTTP/1.0\r\n", 23,
                              deadlineIn(milliseconds(1000)), error));
    exposer.reset();  // returns although a request is half-read
    // The server closed the stalled connection: reading it ends (EOF or reset), never data.
    char byte = 0;
    auto got = ::recv(stalled.get(), &byte, 1, 0);
    int err = errno;
    EXPECT_TRUE(got == 0 || (got < 0 && err != EAGAIN && err != EWOULDBLOCK))
        << "recv " << got << " errno " << err << ": the connection is still open";
    EXPECT_EQ(calls.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Family, MetricsListenerTest, testing::Values(false, true),
                         [](const testing::TestParamInfo<bool>& param) {
                             return param.param ? "Ipv6" : "Ipv4";
                         });

}  // namespace
}  // namespace splicegate
