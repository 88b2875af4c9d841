// `splicegatectl upgrade` end to end: the real daemon starts its binary again, hands over its
// listeners, admin socket and metrics listener, and only then drains. A load client at 300
// connections/s through the upgrade sees no refused or reset connection and every byte echoed;
// a connection opened before keeps flowing until the old process's drain timeout ends it; the
// service manager is told the new main PID; a new process that fails (an invalid config file)
// leaves the old one serving and the command exits 1 with the reason; a setting a reload only
// names (workers) applies through an upgrade, an upstream in maintenance stays disabled. With
// the audit log on: AuditUpgradeTest.cpp; with the XDP edge filter: XdpUpgradeTest.cpp.
// The test process is a child subreaper: the new daemon, orphaned when the old one exits, is
// reparented here and reaped by the test (tests/support/Upgrade.h).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/AdminTestSupport.h"  // runCtl
#include "tests/support/AuditSupport.h"      // ScopedEnv
#include "tests/support/Daemon.h"
#include "tests/support/HttpFetch.h"
#include "tests/support/NotifyListener.h"
#include "tests/support/Sockets.h"
#include "tests/support/TestServer.h"
#include "tests/support/Traffic.h"
#include "tests/support/Upgrade.h"

namespace splicegate::test {
namespace {

using std::chrono::steady_clock;

class UpgradeTest : public ::testing::Test {
  protected:
    static void SetUpTestSuite() { ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0); }

    std::string writeConfig(const std::string& extra = "", unsigned workers = 2) {
        return dir_.write("splicegate.conf", "listen = " + loopback(port_) + "\nupstream = " +
                                                 upstream_.address() + "\nworkers = " +
                                                 std::to_string(workers) + "\n" + extra);
    }
    std::vector<std::string> daemonArgs(std::vector<std::string> extra = {}) {
        std::vector<std::string> args = {"--config",        writeConfig(),
                                         "--admin-socket",  adminSocket(),
                                         "--admin-group",   "root",
                                         "--metrics-listen", "127.0.0.1:" + std::to_string(metricsPort_),
                                         "--audit-dir",     ""};
        args.insert(args.end(), extra.begin(), extra.end());
        return args;
    }
    std::string adminSocket() const { return dir_.file("admin.sock"); }

    TempDir dir_;
    TestServer upstream_{echoUpstream(milliseconds(20000))};
    uint16_t port_ = pickFreePort();
    uint16_t metricsPort_ = pickFreePort();
};

TEST_F(UpgradeTest, LoadThroughUpgradeNothingRefusedLongConnectionDrains) {
    constexpr int kDrainMs = 3000;
    NotifyListener manager;
    std::unique_ptr<Daemon> daemon;
    {
        ScopedEnv notifySocket("NOTIFY_SOCKET", manager.name());
        daemon = std::make_unique<Daemon>(
            daemonArgs({"--drain-timeout-ms", std::to_string(kDrainMs)}));
    }
    ASSERT_TRUE(daemon->waitReady(port_)) << daemon->why();
    auto ready = manager.receive();
    ASSERT_TRUE(ready) << "no READY=1" << daemon->why();
    ASSERT_EQ(ready->rfind("READY=1", 0), 0u) << *ready;

    // The long connection: round trips every 20 ms until it fails.
    int error = 0;
    UniqueFd longLived = connectTcp(port_, error);
    ASSERT_TRUE(longLived) << std::strerror(error);
    ASSERT_TRUE(echoRoundTrip(longLived.get(), 7, 4096, milliseconds(5000)));
    std::atomic<bool> stopLong{false};
    std::atomic<std::int64_t> longLastOkMs{0};
    std::atomic<std::uint64_t> longRoundTrips{0};
    const auto t0 = steady_clock::now();
    auto sinceStart = [t0] {
        return std::chrono::duration_cast<milliseconds>(steady_clock::now() - t0).count();
    };
    std::thread longFlow([&] {
        for (std::uint64_t seed = 100; !stopLong.load(); ++seed) {
            if (!echoRoundTrip(longLived.get(), seed, 4096, milliseconds(2000))) return;
            longLastOkMs.store(sinceStart());
            longRoundTrips.fetch_add(1);
            std::this_thread::sleep_for(milliseconds(20));
        }
    });

    // 300 connections/s for 6 s; the upgrade at 1.5 s.
    LoadCounts counts;
    std::thread load([&] { runLoad(port_, 300, milliseconds(6000), counts); });
    std::this_thread::sleep_for(milliseconds(1500));
    auto upgrade = runCtl(adminSocket(), {"upgrade"}, milliseconds(70000));
    const auto upgradedAtMs = sinceStart();
    pid_t newPid = newPidOf(upgrade.out);
    Successor successor(newPid);
    ASSERT_TRUE(upgrade.status && upgrade.status->isExit(0))
        << "out: " << upgrade.out << "err: " << upgrade.err << daemon->why();
    ASSERT_GT(newPid, 0) << upgrade.out;
    EXPECT_NE(newPid, daemon->pid());
    EXPECT_NE(upgrade.out.find("PID " + std::to_string(daemon->pid()) + " stopped accepting"),
              std::string::npos)
        << upgrade.out;

    // The service manager learns the new main PID; the old process says nothing of stopping.
    auto mainPid = manager.receive(milliseconds(2000));
    ASSERT_TRUE(mainPid) << "no MAINPID= after the upgrade" << daemon->why();
    EXPECT_EQ(mainPid->rfind("MAINPID=" + std::to_string(newPid) + "\nREADY=1\n", 0), 0u)
        << *mainPid;

    // The old process drains: alive while the long connection holds it, for its drain timeout.
    std::this_thread::sleep_for(milliseconds(kDrainMs - 800));
    EXPECT_TRUE(daemon->running()) << "the old process left before its drain timeout"
                                   << daemon->why();
    EXPECT_TRUE(successor.running());
    auto status = runCtl(adminSocket(), {"status"});
    EXPECT_TRUE(status.status && status.status->isExit(0)) << status.err;
    auto readyNow = httpGet(metricsPort_, "/-/ready");
    EXPECT_EQ(readyNow.status, 200) << readyNow.error << readyNow.body;

    auto oldExit = daemon->waitExit(milliseconds(kDrainMs + 5000));
    ASSERT_TRUE(oldExit) << "the old process did not exit after its drain" << daemon->why();
    EXPECT_TRUE(oldExit->isExit(0)) << oldExit->describe();
    const auto oldExitedAtMs = sinceStart();
    load.join();
    stopLong.store(true);
    longFlow.join();

    EXPECT_EQ(counts.refused.load(), 0u) << counts.firstProblem;
    EXPECT_EQ(counts.reset.load(), 0u) << counts.firstProblem;
    EXPECT_EQ(counts.otherFailures.load(), 0u) << counts.firstProblem;
    EXPECT_EQ(counts.mismatched.load(), 0u) << counts.firstProblem;
    EXPECT_EQ(counts.done.load(), 1800u) << counts.firstProblem;
    // The long connection flowed through the upgrade until (nearly) the end of the drain.
    EXPECT_GE(longLastOkMs.load(), upgradedAtMs + kDrainMs - 500)
        << "upgrade at " << upgradedAtMs << " ms, old exit at " << oldExitedAtMs << " ms, "
        << longRoundTrips.load() << " round trips";
    EXPECT_GE(oldExitedAtMs, upgradedAtMs + kDrainMs - 200);

    // The new process serves on: a connection and the admin socket, then a clean stop.
    UniqueFd after = connectTcp(port_, error);
    ASSERT_TRUE(after) << std::strerror(error);
    EXPECT_TRUE(echoRoundTrip(after.get(), 9, 65536, milliseconds(5000)));
    after.reset();
    EXPECT_TRUE(isListening(port_));
    auto newExit = successor.terminate(milliseconds(10000));
    ASSERT_TRUE(newExit) << "the new process did not stop on SIGTERM";
    EXPECT_EQ(*newExit, 0);
    EXPECT_FALSE(isListening(port_));
    EXPECT_NE(::access(adminSocket().c_str(), F_OK), 0) << "the last process leaves no socket file";
}

TEST_F(UpgradeTest, FailedNewProcessLeavesTheOldOneServing) {
    Daemon daemon(daemonArgs());
    ASSERT_TRUE(daemon.waitReady(port_)) << daemon.why();
    writeConfig("bogus-upgrade-key = 1\n");  // the new process's start fails on it

    auto upgrade = runCtl(adminSocket(), {"upgrade"}, milliseconds(70000));
    ASSERT_TRUE(upgrade.status) << "splicegatectl upgrade hung";
    EXPECT_TRUE(upgrade.status->isExit(1)) << upgrade.status->describe() << "\n" << upgrade.out;
    EXPECT_NE(upgrade.err.find("bogus-upgrade-key"), std::string::npos) << upgrade.err;
    EXPECT_NE(upgrade.err.find("exit status 2"), std::string::npos) << upgrade.err;

    // The old process goes on: relaying, listening, answering on its admin socket.
    EXPECT_TRUE(daemon.running()) << daemon.why();
    int error = 0;
    UniqueFd fd = connectTcp(port_, error);
    ASSERT_TRUE(fd) << std::strerror(error);
    EXPECT_TRUE(echoRoundTrip(fd.get(), 3, 65536, milliseconds(5000)));
    auto status = runCtl(adminSocket(), {"status"});
    EXPECT_TRUE(status.status && status.status->isExit(0)) << status.err;
    EXPECT_EQ(httpGet(metricsPort_, "/-/ready").status, 200);
    fd.reset();  // nothing left to drain: the old process exits right after the next upgrade

    // Fixed, the next upgrade goes through.
    writeConfig();
    auto again = runCtl(adminSocket(), {"upgrade"}, milliseconds(70000));
    Successor successor(newPidOf(again.out));
    ASSERT_TRUE(again.status && again.status->isExit(0)) << again.err << daemon.why();
    auto oldExit = daemon.waitExit(milliseconds(10000));
    ASSERT_TRUE(oldExit) << daemon.why();
    EXPECT_TRUE(oldExit->isExit(0));
    UniqueFd next = connectTcp(port_, error);
    ASSERT_TRUE(next) << std::strerror(error);
    EXPECT_TRUE(echoRoundTrip(next.get(), 4, 4096, milliseconds(5000)));
    next.reset();
    EXPECT_EQ(successor.terminate(milliseconds(10000)), std::optional<int>(0));
}

// A setting a reload only names ("takes effect at the next start": workers) applies through an
// upgrade, which reads the file again in a new process; an open connection goes on meanwhile.
TEST_F(UpgradeTest, RestartOnlySettingAppliesThroughUpgrade) {
    Daemon daemon(daemonArgs({"--drain-timeout-ms", "2000"}));
    ASSERT_TRUE(daemon.waitReady(port_)) << daemon.why();
    static const std::regex twoWorkers("\nworkers +2\n"), threeWorkers("\nworkers +3\n");
    auto before = runCtl(adminSocket(), {"status"});
    ASSERT_TRUE(before.status && before.status->isExit(0)) << before.err;
    EXPECT_TRUE(std::regex_search("\n" + before.out, twoWorkers)) << before.out;
    int error = 0;
    UniqueFd open = connectTcp(port_, error);
    ASSERT_TRUE(open) << std::strerror(error);
    ASSERT_TRUE(echoRoundTrip(open.get(), 1, 4096, milliseconds(5000)));

    writeConfig("", 3);
    auto reload = runCtl(adminSocket(), {"reload"});
    ASSERT_TRUE(reload.status && reload.status->isExit(0)) << reload.out << reload.err;
    EXPECT_NE(reload.out.find("takes effect at the next start: workers"), std::string::npos)
        << reload.out;
    auto still = runCtl(adminSocket(), {"status"});
    EXPECT_TRUE(std::regex_search("\n" + still.out, twoWorkers)) << still.out;

    auto upgrade = runCtl(adminSocket(), {"upgrade"}, milliseconds(70000));
    Successor successor(newPidOf(upgrade.out));
    ASSERT_TRUE(upgrade.status && upgrade.status->isExit(0))
        << upgrade.out << upgrade.err << daemon.why();
    auto after = runCtl(adminSocket(), {"status"});
    ASSERT_TRUE(after.status && after.status->isExit(0)) << after.err;
    EXPECT_TRUE(std::regex_search("\n" + after.out, threeWorkers)) << after.out;
    // The connection opened before is the old process's: it flows while that one drains.
    EXPECT_TRUE(echoRoundTrip(open.get(), 2, 4096, milliseconds(5000)));
    open.reset();
    auto oldExit = daemon.waitExit(milliseconds(10000));
    ASSERT_TRUE(oldExit) << daemon.why();
    EXPECT_TRUE(oldExit->isExit(0)) << oldExit->describe();
    UniqueFd next = connectTcp(port_, error);
    ASSERT_TRUE(next) << std::strerror(error);
    EXPECT_TRUE(echoRoundTrip(next.get(), 3, 4096, milliseconds(5000)));
    next.reset();
    EXPECT_EQ(successor.terminate(milliseconds(10000)), std::optional<int>(0));
}

// An upstream in maintenance (splicegatectl upstream disable) stays disabled in the new process:
// the packaged unit's systemctl reload is an upgrade and must not put it back in the rotation.
TEST_F(UpgradeTest, UpstreamInMaintenanceStaysDisabled) {
    TestServer other(echoUpstream(milliseconds(20000)));
    auto args = daemonArgs();
    dir_.write("splicegate.conf", "listen = " + loopback(port_) + "\nupstream = " +
                                      upstream_.address() + "\nupstream = " + other.address() +
                                      "\nworkers = 2\n");
    Daemon daemon(args);
    ASSERT_TRUE(daemon.waitReady(port_)) << daemon.why();
    auto disable = runCtl(adminSocket(), {"upstream", "disable", "default", upstream_.address()});
    ASSERT_TRUE(disable.status && disable.status->isExit(0)) << disable.err;

    auto upgrade = runCtl(adminSocket(), {"upgrade"}, milliseconds(70000));
    Successor successor(newPidOf(upgrade.out));
    ASSERT_TRUE(upgrade.status && upgrade.status->isExit(0))
        << upgrade.out << upgrade.err << daemon.why();
    auto oldExit = daemon.waitExit(milliseconds(10000));
    ASSERT_TRUE(oldExit) << daemon.why();

    auto upstreams = runCtl(adminSocket(), {"upstreams"});
    ASSERT_TRUE(upstreams.status && upstreams.status->isExit(0)) << upstreams.err;
    auto row = grepLines(upstreams.out, upstream_.address());
    ASSERT_EQ(row.size(), 1u) << upstreams.out;
    EXPECT_NE(row[0].find("disabled"), std::string::npos) << upstreams.out;
    const auto before = upstream_.acceptedCount();
    int error = 0;
    for (int i = 0; i < 4; ++i) {
        UniqueFd client = connectTcp(port_, error);
        ASSERT_TRUE(client) << std::strerror(error);
        EXPECT_TRUE(echoRoundTrip(client.get(), 20 + i, 1024, milliseconds(5000)));
    }
    EXPECT_EQ(upstream_.acceptedCount(), before) << "a disabled upstream got connections";
    EXPECT_GE(other.acceptedCount(), 4u);
    EXPECT_EQ(successor.terminate(milliseconds(10000)), std::optional<int>(0));
}

}  // namespace
}  // namespace splicegate::test
