// The operator's Prometheus files in packaging/prometheus/: the alerting rules pass
// `promtool check rules` and their unit tests (`promtool test rules`); the Grafana dashboard is
// valid JSON whose every query is valid PromQL; and every splicegate_* name the rules and the
// dashboard use is one the exposer really serves.
#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <string>

#include "archive/ArchiveService.h"
#include "metrics/MetricsExposer.h"
#include "tests/support/ControlPlaneDaemon.h"
#include "tests/support/Daemon.h"
#include "tests/support/HttpFetch.h"

namespace splicegate {
namespace {

using test::milliseconds;

const std::string kDir = std::string(SPLICEGATE_SOURCE_DIR) + "/packaging/prometheus";
const std::string kRules = kDir + "/splicegate.rules.yml";
const std::string kRuleTests = kDir + "/splicegate.rules.test.yml";
const std::string kDashboard = kDir + "/splicegate-dashboard.json";

#define REQUIRE_TOOL(tool)                                                          \
    if (test::findOnPath(tool).empty())                                             \
    GTEST_SKIP() << tool                                                            \
                 << " is not installed (Debian package 'prometheus' for promtool; " \
                    "tools/install-deps.sh installs it)"

std::string run(const std::vector<std::string>& argv, bool& ok) {
    auto result = test::runProcess(argv, milliseconds(60000));
    ok = result.status && result.status->isExit(0);
    return (result.status ? result.status->describe() : std::string("timed out")) + "\n" +
           result.out + result.err;
}

TEST(MetricsRulesTest, PromtoolChecksTheRules) {
    REQUIRE_TOOL("promtool");
    bool ok = false;
    auto output = run({"/bin/sh", "-c", "exec promtool check rules '" + kRules + "'"}, ok);
    EXPECT_TRUE(ok) << output;
    EXPECT_NE(output.find("SUCCESS"), std::string::npos) << output;
}

TEST(MetricsRulesTest, PromtoolRuleUnitTestsPass) {
    REQUIRE_TOOL("promtool");
    bool ok = false;
    auto output = run({"/bin/sh", "-c", "exec promtool test rules '" + kRuleTests + "'"}, ok);
    EXPECT_TRUE(ok) << output;
    EXPECT_NE(output.find("SUCCESS"), std::string::npos) << output;
}

TEST(MetricsRulesTest, DashboardIsValidJsonWithValidQueries) {
    REQUIRE_TOOL("promtool");
    REQUIRE_TOOL("python3");
    // Every panel target's expr, with Grafana's variables substituted, as a recording rule that
    // promtool parses.
    test::TempDir dir;
    auto script = dir.write("extract.py", R"py(
import json, sys
dashboard = json.load(open(sys.argv[1]))
assert dashboard.get("title") and dashboard.get("uid"), "title and uid"
panels = [p for p in dashboard["panels"] if p.get("type") != "row"]
assert len(panels) >= 10, "panels"
out = ["groups:", "  - name: dashboard", "    rules:"]
n = 0
for panel in panels:
    targets = panel.get("targets") or []
    assert targets, "panel without query: " + panel.get("title", "?")
    for target in targets:
        expr = target["expr"]
        for var, value in (("$__rate_interval", "5m"), ("$job", ".*"), ("$instance", ".*"),
                           ("$route", ".*")):
            expr = expr.replace(var, value)
        assert "$" not in expr, "unknown variable in " + expr
        out.append("      - record: dashboard:query%d" % n)
        out.append("        expr: " + json.dumps(expr))
        n += 1
open(sys.argv[2], "w").write("\n".join(out) + "\n")
print(n, "queries")
)py");
    auto rules = dir.path() + "/dashboard.rules.yml";
    bool ok = false;
    auto output =
        run({"/bin/sh", "-c", "exec python3 '" + script + "' '" + kDashboard + "' '" + rules + "'"},
            ok);
    ASSERT_TRUE(ok) << output;
    output = run({"/bin/sh", "-c", "exec promtool check rules '" + rules + "'"}, ok);
    EXPECT_TRUE(ok) << output;
}

// Every splicegate_* and process_* metric name in `text` (recording rule names use ':' and do
// not match).
std::set<std::string> namesIn(const std::string& text) {
    static const std::regex name(R"((splicegate|process)_[a-z0-9_]+)");
    std::set<std::string> names;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), name);
         it != std::sregex_iterator(); ++it)
        names.insert(it->str());
    return names;
}

TEST(MetricsRulesTest, RulesAndDashboardUseOnlyServedNames) {
    // A snapshot with every kind of series, so every family is present on the page, served by a
    // real exposer with an audit directory and the daemon's gauges set.
    StatsSnapshot s;
    RouteSnapshot route;
    route.name = "r";
    route.closed["closed"] = 1;
    route.refused["max-connections"] = 1;
    s.routes.push_back(route);
    s.auditErrors = {{"write", 0}};
    s.xdpPackets = {{{"drop", "deny"}, 1}};
    s.adminRequests = {{{"status", "ok"}, 1}};
    UpstreamSnapshot upstream;
    upstream.route = "r";
    upstream.upstream = "127.0.0.1:1";
    s.upstreams.push_back(upstream);
    test::TempDir auditDir;
    MetricsExposer exposer(
        "127.0.0.1:0", [&] { return s; }, auditDir.path());
    exposer.setConnectionsMax(100);
    exposer.setAuditUnsealedSegments(0);
    exposer.setAuditRetentionLimit(1000);
    exposer.recordAuditArchiveBacklog(10, 0);
    auto page = test::httpGet(exposer.port(), "/metrics");
    ASSERT_EQ(page.status, 200) << page.error;
    std::set<std::string> served = namesIn(page.body);
    ASSERT_TRUE(served.count("splicegate_audit_fsync_seconds_bucket"));
    ASSERT_TRUE(served.count("splicegate_audit_disk_free_bytes")) << page.body;
    // The archiver's page (the rules' splicegate-archive job), every family with a series.
    archive::ArchiveMetrics archiveMetrics;
    archiveMetrics.counted(archive::ShipOutcome::Kind::Shipped, 1, 0.5);
    archiveMetrics.backlog(1, 1, 1);
    served.merge(namesIn(archiveMetrics.exposition()));
    ASSERT_TRUE(served.count("splicegate_archive_backlog_bytes"));
    for (const auto& file : {kRules, kDashboard}) {
        auto used = namesIn(test::readFile(file));
        EXPECT_FALSE(used.empty()) << file;
        for (const auto& name : used)
            EXPECT_TRUE(served.count(name))
                << file << " uses " << name << ", which the exposer does not serve";
    }
}

}  // namespace
}  // namespace splicegate
