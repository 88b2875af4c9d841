// The daemon under a `Type=notify` service manager: READY=1 only once the routes listen,
// RELOADING=1 then READY=1 around every SIGHUP (applied or refused), STOPPING=1 when the drain
// begins. The manager's socket is this test's; $NOTIFY_SOCKET is set for the daemon's fork only.
#include <gtest/gtest.h>
#include <signal.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/AuditSupport.h"  // ScopedEnv
#include "tests/support/Daemon.h"
#include "tests/support/NotifyListener.h"
#include "tests/support/Sockets.h"
#include "tests/support/TestServer.h"

namespace splicegate::test {
namespace {

class ServiceNotifyTest : public ::testing::Test {
  protected:
    std::string writeConfig(const std::string& extra = "") {
        return configDir_.write(
            "splicegate.conf",
            routeSection("main", loopback(port_), {upstream_.address()}) + extra);
    }

    // The daemon with $NOTIFY_SOCKET naming this test's manager socket.
    std::unique_ptr<Daemon> startNotifying(std::vector<std::string> args) {
        ScopedEnv notifySocket("NOTIFY_SOCKET", manager_.name());
        return std::make_unique<Daemon>(std::move(args));
    }

    // Expects RELOADING=1 with its monotonic time, then returns the READY=1 that ends the reload.
    std::string reloadAndWaitReady(Daemon& daemon) {
        daemon.signal(SIGHUP);
        auto reloading = manager_.receive();
        EXPECT_TRUE(reloading) << "no RELOADING=1 after SIGHUP" << daemon.why();
        EXPECT_EQ(reloading.value_or("").rfind("RELOADING=1\nMONOTONIC_USEC=", 0), 0u)
            << reloading.value_or("");
        auto ready = manager_.receive();
        EXPECT_TRUE(ready) << "no READY=1 after the reload" << daemon.why();
        return ready.value_or("");
    }

    TempDir configDir_;
    TestServer upstream_{nullptr};  // hold mode: accepts and keeps
    uint16_t port_ = pickFreePort();
    NotifyListener manager_;
};

TEST_F(ServiceNotifyTest, ReadyOnceListeningThenReloadsAndStopping) {
    auto daemon = startNotifying({"--config", writeConfig(), "--workers", "2"});
    auto ready = manager_.receive();
    ASSERT_TRUE(ready) << "no READY=1 within 10 s" << daemon->why();
    EXPECT_EQ(*ready, "READY=1\nSTATUS=serving 1 routes with 2 workers");
    EXPECT_TRUE(isListening(port_)) << "READY=1 came before the route listened";

    EXPECT_EQ(reloadAndWaitReady(*daemon), "READY=1\nSTATUS=reloaded: 1 routes");

    writeConfig("bogus_reload_key = 1\n");
    std::string refused = reloadAndWaitReady(*daemon);
    EXPECT_EQ(
        refused.rfind("READY=1\nSTATUS=reload failed, running the previous configuration: ", 0), 0u)
        << refused;
    EXPECT_NE(refused.find("bogus_reload_key"), std::string::npos) << refused;
    EXPECT_TRUE(isListening(port_)) << "a refused reload dropped the route";

    daemon->signal(SIGTERM);
    EXPECT_EQ(manager_.receive(), "STOPPING=1");
    auto status = daemon->waitExit(milliseconds(10000));
    ASSERT_TRUE(status) << daemon->why();
    EXPECT_TRUE(status->isExit(0)) << status->describe();
    EXPECT_EQ(manager_.receive(milliseconds(200)), std::nullopt) << "a message after STOPPING=1";
}

// Recovery of a large audit log can take a while before READY=1: `systemctl status` says so.
TEST_F(ServiceNotifyTest, SaysItRecoversTheAuditLogBeforeReady) {
    TempDir auditDir;
    auto daemon = startNotifying(
        {"--config", writeConfig(), "--workers", "1", "--audit-dir", auditDir.path()});
    EXPECT_EQ(manager_.receive(), "STATUS=recovering the audit log") << daemon->why();
    auto ready = manager_.receive();
    ASSERT_TRUE(ready) << daemon->why();
    EXPECT_EQ(*ready, "READY=1\nSTATUS=serving 1 routes with 1 workers");
    EXPECT_TRUE(daemon->terminate()->isExit(0)) << daemon->why();
}

// A start that fails sends no READY=1: the service manager sees the exit instead.
TEST_F(ServiceNotifyTest, AFailedStartIsNeverReady) {
    uint16_t taken = 0;
    UniqueFd occupant = listenTcp(taken);
    auto daemon = startNotifying(
        {"--listen", loopback(taken), "--upstream", upstream_.address(), "--workers", "1"});
    auto status = daemon->waitExit(milliseconds(10000));
    ASSERT_TRUE(status) << daemon->why();
    EXPECT_FALSE(status->isExit(0)) << status->describe();
    EXPECT_EQ(manager_.receive(milliseconds(200)), std::nullopt);
}

}  // namespace
}  // namespace splicegate::test
