// A real Prometheus server (Debian package "prometheus") scrapes a MetricsExposer on loopback
// every second, with packaging/prometheus/splicegate.rules.yml loaded; the test queries
// splicegate_bytes_total through Prometheus' HTTP API and checks the growing value arrives, and
// that the rules load and evaluate without errors. Prometheus runs as a child process in a temp
// directory and is stopped by its pid.
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
#include "tests/support/ControlPlaneDaemon.h"
#include "tests/support/Daemon.h"
#include "tests/support/HttpFetch.h"
#include "tests/support/Sockets.h"

namespace splicegate {
namespace {

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

// A child process with stdout+stderr in `logPath`, killed (SIGKILL) if the test process dies.
// stop() sends SIGTERM to its pid and reaps it, SIGKILL after a bound.
class ChildProcess {
  public:
    ChildProcess(const std::vector<std::string>& argv, const std::string& logPath) {
        std::vector<char*> cargv;
        for (const auto& arg : argv) cargv.push_back(const_cast<char*>(arg.c_str()));
        cargv.push_back(nullptr);
        int devNull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        int log = ::open(logPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (devNull < 0 || log < 0) {
            int saved = errno;
            if (devNull >= 0) ::close(devNull);
            if (log >= 0) ::close(log);
            throwErrno(saved, "open " + logPath);
        }
        pid_t parent = ::getpid();
        sigset_t empty;
        sigemptyset(&empty);
        pid_ = ::fork();
        if (pid_ == 0) {
            ::prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (::getppid() != parent) ::_exit(127);
            ::dup2(devNull, 0);
            ::dup2(log, 1);
            ::dup2(log, 2);
            ::close_range(3, ~0U, 0);
            ::sigprocmask(SIG_SETMASK, &empty, nullptr);
            ::execv(cargv[0], cargv.data());
            ::_exit(127);
        }
        int saved = errno;
        ::close(devNull);
        ::close(log);
        if (pid_ < 0) throwErrno(saved, "fork");
    }
    ChildProcess(const ChildProcess&) = delete;
    ChildProcess& operator=(const ChildProcess&) = delete;
    ~ChildProcess() { stop(); }

    bool running() {
        if (pid_ <= 0) return false;
        int status = 0;
        if (::waitpid(pid_, &status, WNOHANG) == pid_) {
            pid_ = -1;
            return false;
        }
        return true;
    }

    // SIGTERM, wait up to 10 s, then SIGKILL. True when it exited after SIGTERM.
    bool stop() {
        if (!running()) return true;
        ::kill(pid_, SIGTERM);
        Deadline deadline = deadlineIn(milliseconds(10000));
        while (Clock::now() < deadline) {
            int status = 0;
            if (::waitpid(pid_, &status, WNOHANG) == pid_) {
                pid_ = -1;
                return true;
            }
            std::this_thread::sleep_for(milliseconds(20));
        }
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
        pid_ = -1;
        return false;
    }

  private:
    pid_t pid_ = -1;
};

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

}  // namespace
}  // namespace splicegate
