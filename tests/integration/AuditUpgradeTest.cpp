// `splicegatectl upgrade` with the audit log on (ctest runs it with both writers: the default
// direct one and, as splice-writer.*, the splice one). The old process hands the audit
// directory's lock over, goes on writing its chains for its draining connections while the new
// one writes other chains, and the log verifies whole afterwards:
// - 300 connections/s through an upgrade: none refused or reset, a long connection flows until
//   the old process's drain ends, every byte of every connection on both sides is in the log
//   (`list` has them all with their bytes), `verify` exits 0 while the new one runs and after;
// - two upgrades, the second while the first's old process still drains (the third process takes
//   chains neither holds), then a third: the chains of the first continue after their last
//   seals, `status` shows them, `verify` exits 0;
// - the old process killed with SIGKILL during its drain: the new one serves on, a restart
//   recovers the chains it left unsealed, `verify` exits 0, its open connection is truncated;
// - a new process that fails before it serves (a config error; a listener it cannot bind, after
//   it leased connection ids) leaves the old one serving with its audit intact, and the old
//   one's ids go on past what the failed one leased.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/AdminTestSupport.h"  // runCtl
#include "tests/support/AuditSupport.h"
#include "tests/support/Daemon.h"
#include "tests/support/Sockets.h"
#include "tests/support/TestServer.h"
#include "tests/support/Traffic.h"
#include "tests/support/Upgrade.h"

namespace splicegate::test {
namespace {

using std::chrono::steady_clock;

// Ids a process leases past the lease end it found: the first process's ids are below one
// block (2^20), the next one's at or above it.
constexpr std::uint64_t kLeaseBlock = std::uint64_t{1} << 20;

// A connection doing 4 KiB round trips every 20 ms on its own thread until it fails or is told
// to stop; how many round trips went through.
class LongConnection {
  public:
    explicit LongConnection(uint16_t port) {
        int error = 0;
        fd_ = connectTcp(port, error);
        if (!fd_ || !echoRoundTrip(fd_.get(), 7, 4096, milliseconds(5000))) return;
        roundTrips_.store(1);
        thread_ = std::thread([this] {
            for (std::uint64_t seed = 100; !stop_.load(); ++seed) {
                if (!echoRoundTrip(fd_.get(), seed, 4096, milliseconds(2000))) return;
                lastOk_.store(steady_clock::now().time_since_epoch().count());
                roundTrips_.fetch_add(1);
                std::this_thread::sleep_for(milliseconds(20));
            }
        });
    }
    ~LongConnection() { finish(); }
    bool started() const { return roundTrips_.load() > 0; }
    void finish() {
        stop_.store(true);
        if (thread_.joinable()) thread_.join();
    }
    std::uint64_t roundTrips() const { return roundTrips_.load(); }
    steady_clock::time_point lastOk() const {
        return steady_clock::time_point(steady_clock::duration(lastOk_.load()));
    }

  private:
    UniqueFd fd_;
    std::thread thread_;
    std::atomic<bool> stop_{false};
    std::atomic<std::uint64_t> roundTrips_{0};
    std::atomic<steady_clock::rep> lastOk_{0};
};

class AuditUpgradeTest : public ::testing::Test {
  protected:
    static void SetUpTestSuite() { ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0); }

    std::string writeConfig(const std::string& extra = "") {
        return dir_.write("splicegate.conf", "listen = " + loopback(port_) + "\nupstream = " +
                                                 upstream_.address() + "\nworkers = 2\n" + extra);
    }
    std::vector<std::string> daemonArgs(int drainMs) {
        return {"--config",         writeConfig(),
                "--admin-socket",   adminSocket(),
                "--admin-group",    "root",
                "--metrics-listen", "",
                "--audit-dir",      audit_.path(),
                "--drain-timeout-ms", std::to_string(drainMs),
                "--log-level",      "info"};
    }
    std::string adminSocket() const { return dir_.file("admin.sock"); }
    ProcessResult upgrade() { return runCtl(adminSocket(), {"upgrade"}, milliseconds(70000)); }
    static std::string describe(const ProcessResult& result) {
        return "out: " + result.out + "err: " + result.err;
    }
    // One connection with `bytes` each way through the relay.
    bool echoOnce(std::uint64_t seed, std::size_t bytes) {
        int error = 0;
        UniqueFd fd = connectTcp(port_, error);
        return fd && echoRoundTrip(fd.get(), seed, bytes, milliseconds(5000));
    }

    TempDir dir_;
    TempDir audit_;
    TestServer upstream_{echoUpstream(milliseconds(20000))};
    uint16_t port_ = pickFreePort();
};

TEST_F(AuditUpgradeTest, LoadThroughUpgradeEveryByteAuditedOnBothSides) {
    constexpr int kDrainMs = 3000;
    Daemon daemon(daemonArgs(kDrainMs));
    ASSERT_TRUE(daemon.waitReady(port_)) << daemon.why();
    LongConnection longLived(port_);
    ASSERT_TRUE(longLived.started()) << daemon.why();

    LoadCounts counts;
    std::thread load([&] { runLoad(port_, 300, milliseconds(6000), counts); });
    std::this_thread::sleep_for(milliseconds(1500));
    auto upgraded = upgrade();
    const auto upgradedAt = steady_clock::now();
    Successor successor(newPidOf(upgraded.out));
    ASSERT_TRUE(upgraded.status && upgraded.status->isExit(0)) << describe(upgraded)
                                                               << daemon.why();
    // The new process writes chains of its own while the old one drains.
    EXPECT_EQ(daemon.waitLogLines("this one writes w2, w3", 1, milliseconds(5000)), 1u)
        << daemon.why();
    auto live = auditVerify(audit_.path());
    EXPECT_TRUE(live.status && live.status->isExit(0))
        << "verify while both processes write: " << describeProcess(live);

    auto oldExit = daemon.waitExit(milliseconds(kDrainMs + 5000));
    ASSERT_TRUE(oldExit) << "the old process did not exit after its drain" << daemon.why();
    EXPECT_TRUE(oldExit->isExit(0)) << oldExit->describe();
    load.join();
    longLived.finish();
    EXPECT_EQ(counts.refused.load(), 0u) << counts.firstProblem;
    EXPECT_EQ(counts.reset.load(), 0u) << counts.firstProblem;
    EXPECT_EQ(counts.otherFailures.load(), 0u) << counts.firstProblem;
    EXPECT_EQ(counts.mismatched.load(), 0u) << counts.firstProblem;
    EXPECT_EQ(counts.done.load(), 1800u) << counts.firstProblem;
    EXPECT_GE(longLived.lastOk(), upgradedAt + milliseconds(kDrainMs - 500))
        << longLived.roundTrips() << " round trips";
    ASSERT_TRUE(echoOnce(9, 65536));
    ASSERT_EQ(successor.terminate(milliseconds(10000)), std::optional<int>(0));

    ASSERT_TRUE(auditVerifies(audit_.path()));
    auto listing = auditList(audit_.path());
    ASSERT_TRUE(listing.ok()) << listing.describe();
    std::uint64_t shortOnes = 0, oldSide = 0, newSide = 0;
    const AuditRow* longRow = nullptr;
    std::set<std::uint64_t> ids;
    for (const auto& row : listing.rows) {
        EXPECT_TRUE(ids.insert(row.id).second) << "id " << row.id << " twice";
        EXPECT_EQ(row.state, "closed") << "connection " << row.id;
        (row.id < kLeaseBlock ? oldSide : newSide) += 1;
        if (row.c2u == 1024 && row.u2c == 1024) ++shortOnes;
        if (row.id == 1) longRow = &row;
    }
    // Every load connection, each with its 1 KiB each way, on whichever side accepted it.
    EXPECT_EQ(shortOnes, 1800u) << listing.rows.size() << " rows";
    EXPECT_GT(oldSide, 1u);
    EXPECT_GT(newSide, 1u);
    ASSERT_NE(longRow, nullptr) << "the long connection is not in the log";
    EXPECT_GE(longRow->c2u, 4096 * longLived.roundTrips());
    EXPECT_GE(longRow->u2c, 4096 * longLived.roundTrips());
    EXPECT_EQ(listing.rows.size(), 1800u + 2u);  // the load, the long one, the one after
}

TEST_F(AuditUpgradeTest, UpgradesInARowContinueTheChains) {
    constexpr int kDrainMs = 4000;
    Daemon daemon(daemonArgs(kDrainMs));
    ASSERT_TRUE(daemon.waitReady(port_)) << daemon.why();
    ASSERT_TRUE(echoOnce(1, 100000));
    LongConnection heldByFirst(port_);
    ASSERT_TRUE(heldByFirst.started());

    // The second upgrade comes while the first process still drains: the third takes chains
    // neither of the others holds.
    auto first = upgrade();
    Successor second(newPidOf(first.out));
    ASSERT_TRUE(first.status && first.status->isExit(0)) << describe(first) << daemon.why();
    ASSERT_TRUE(echoOnce(2, 100000));
    auto again = upgrade();
    Successor third(newPidOf(again.out));
    ASSERT_TRUE(again.status && again.status->isExit(0)) << describe(again) << daemon.why();
    EXPECT_TRUE(daemon.running()) << "the first process should still drain its connection";
    EXPECT_EQ(daemon.waitLogLines("this one writes w4, w5", 1, milliseconds(5000)), 1u)
        << daemon.why();
    ASSERT_TRUE(echoOnce(3, 100000));
    ASSERT_TRUE(daemon.waitExit(milliseconds(kDrainMs + 5000))) << daemon.why();
    ASSERT_EQ(second.waitExit(milliseconds(kDrainMs + 5000)), std::optional<int>(0));
    heldByFirst.finish();

    // Now nobody else holds a chain: the next process takes w0 and w1 again and continues them
    // after their last seals, which `status` shows.
    auto third2fourth = upgrade();
    Successor fourth(newPidOf(third2fourth.out));
    ASSERT_TRUE(third2fourth.status && third2fourth.status->isExit(0))
        << describe(third2fourth) << daemon.why();
    ASSERT_EQ(third.waitExit(milliseconds(kDrainMs + 5000)), std::optional<int>(0));
    auto status = runCtl(adminSocket(), {"status"});
    EXPECT_NE(status.out.find("audit head w0"), std::string::npos) << status.out;
    EXPECT_NE(status.out.find("audit head w1"), std::string::npos) << status.out;
    ASSERT_TRUE(echoOnce(4, 100000));
    ASSERT_EQ(fourth.terminate(milliseconds(10000)), std::optional<int>(0));

    ASSERT_TRUE(auditVerifies(audit_.path()));
    auto listing = auditList(audit_.path());
    ASSERT_TRUE(listing.ok()) << listing.describe();
    ASSERT_EQ(listing.rows.size(), 5u) << listing.describe();
    std::uint64_t echoed = 0;
    for (const auto& row : listing.rows) {
        EXPECT_EQ(row.state, "closed") << "connection " << row.id;
        if (row.c2u == 100000 && row.u2c == 100000) ++echoed;
        else EXPECT_GE(row.c2u, 4096 * heldByFirst.roundTrips()) << "connection " << row.id;
    }
    EXPECT_EQ(echoed, 4u) << listing.describe();
    // w0's second segment is the fourth process's, chained to the first process's seal.
    EXPECT_EQ(::access(audit_.file("w00-0000000002.index").c_str(), F_OK), 0);
}

TEST_F(AuditUpgradeTest, OldProcessKilledDuringItsDrainIsRecoveredAtTheRestart) {
    constexpr int kDrainMs = 20000;
    Daemon daemon(daemonArgs(kDrainMs));
    ASSERT_TRUE(daemon.waitReady(port_)) << daemon.why();
    ASSERT_TRUE(echoOnce(1, 100000));
    LongConnection draining(port_);
    ASSERT_TRUE(draining.started());
    auto upgraded = upgrade();
    Successor successor(newPidOf(upgraded.out));
    ASSERT_TRUE(upgraded.status && upgraded.status->isExit(0)) << describe(upgraded);
    ASSERT_TRUE(echoOnce(2, 100000));
    std::this_thread::sleep_for(milliseconds(500));
    daemon.signal(SIGKILL);
    ASSERT_TRUE(daemon.waitExit(milliseconds(5000)));
    draining.finish();
    // The new process goes on, and while it holds the directory the killed one's unsealed
    // newest segments are what a live directory may have.
    ASSERT_TRUE(echoOnce(3, 100000));
    auto live = auditVerify(audit_.path());
    EXPECT_TRUE(live.status && live.status->isExit(0)) << describeProcess(live);
    ASSERT_EQ(successor.terminate(milliseconds(10000)), std::optional<int>(0));

    // The restart recovers the killed process's chains.
    Daemon restarted(daemonArgs(kDrainMs));
    ASSERT_TRUE(restarted.waitReady(port_)) << restarted.why();
    ASSERT_TRUE(echoOnce(4, 100000));
    ASSERT_TRUE(terminatesCleanly(restarted));
    ASSERT_TRUE(auditVerifies(audit_.path()));
    auto listing = auditList(audit_.path());
    ASSERT_TRUE(listing.ok()) << listing.describe();
    ASSERT_EQ(listing.rows.size(), 5u) << listing.describe();
    std::uint64_t truncated = 0;
    for (const auto& row : listing.rows) {
        if (row.state == "truncated") {
            ++truncated;
            // What the log held durably when the process was killed (batch durability: up to
            // the last group commit), never more than went through.
            EXPECT_GT(row.c2u, 0u) << "connection " << row.id;
            EXPECT_LE(row.c2u, 4096 * (draining.roundTrips() + 1)) << "connection " << row.id;
        } else {
            EXPECT_EQ(row.state, "closed") << "connection " << row.id;
            EXPECT_EQ(row.c2u, 100000u) << "connection " << row.id;
            EXPECT_EQ(row.u2c, 100000u) << "connection " << row.id;
        }
    }
    EXPECT_EQ(truncated, 1u) << "the connection the killed process drained";
}

TEST_F(AuditUpgradeTest, FailedNewProcessLeavesTheOldOneServingItsAuditIntact) {
    Daemon daemon(daemonArgs(3000));
    ASSERT_TRUE(daemon.waitReady(port_)) << daemon.why();
    ASSERT_TRUE(echoOnce(1, 100000));

    // Fails on its configuration, before it opens the audit directory.
    writeConfig("bogus-upgrade-key = 1\n");
    auto bad = upgrade();
    ASSERT_TRUE(bad.status);
    EXPECT_TRUE(bad.status->isExit(1)) << describe(bad);
    EXPECT_NE(bad.err.find("bogus-upgrade-key"), std::string::npos) << bad.err;
    ASSERT_TRUE(echoOnce(2, 100000)) << daemon.why();

    // Fails after it recovered the directory and leased ids: a new route's address is taken
    // (a socket of this test, without SO_REUSEPORT).
    uint16_t takenPort = 0;
    UniqueFd taken = listenTcp(takenPort);
    ASSERT_TRUE(taken);
    writeConfig(routeSection("taken", loopback(takenPort), {upstream_.address()}));
    auto late = upgrade();
    ASSERT_TRUE(late.status);
    EXPECT_TRUE(late.status->isExit(1)) << describe(late);
    EXPECT_NE(late.err.find(loopback(takenPort)), std::string::npos) << late.err;
    EXPECT_TRUE(daemon.running()) << daemon.why();
    EXPECT_EQ(daemon.waitLogLines("had leased connection ids", 1, milliseconds(2000)), 1u)
        << daemon.why();
    ASSERT_TRUE(echoOnce(3, 100000)) << daemon.why();

    writeConfig();
    ASSERT_TRUE(terminatesCleanly(daemon));
    ASSERT_TRUE(auditVerifies(audit_.path()));
    auto listing = auditList(audit_.path());
    ASSERT_TRUE(listing.ok()) << listing.describe();
    ASSERT_EQ(listing.rows.size(), 3u) << listing.describe();
    for (const auto& row : listing.rows) {
        EXPECT_EQ(row.state, "closed");
        EXPECT_EQ(row.c2u, 100000u);
        EXPECT_EQ(row.u2c, 100000u);
    }
    // The first failure leased nothing: ids went on; the connection after the second has an id
    // past the lease the failed process took.
    std::set<std::uint64_t> ids;
    for (const auto& row : listing.rows) ids.insert(row.id);
    EXPECT_EQ(*ids.begin(), 1u);
    EXPECT_EQ(*std::next(ids.begin()), 2u);
    EXPECT_GE(*ids.rbegin(), 2 * kLeaseBlock) << listing.describe();
}

}  // namespace
}  // namespace splicegate::test
