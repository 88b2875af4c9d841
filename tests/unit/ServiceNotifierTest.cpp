// The sd_notify side of the daemon: what each state change sends, and that a service manager
// socket it cannot use costs one warning and nothing else.
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <string>

#include "common/ServiceNotifier.h"
#include "tests/support/AuditSupport.h"  // ScopedEnv
#include "tests/support/NotifyListener.h"

namespace splicegate::test {
namespace {

using Namespace = NotifyListener::Namespace;

TEST(ServiceNotifierTest, ReadyReachesAPathSocketWithItsStatus) {
    NotifyListener manager(Namespace::Path);
    ServiceNotifier notifier(manager.name());
    ASSERT_TRUE(notifier.active());
    notifier.ready("serving 2 routes");
    EXPECT_EQ(manager.receive(), "READY=1\nSTATUS=serving 2 routes");
}

TEST(ServiceNotifierTest, AbstractSocketGetsReloadingAndStopping) {
    NotifyListener manager(Namespace::Abstract);
    ServiceNotifier notifier(manager.name());
    ASSERT_TRUE(notifier.active());
    notifier.reloading();
    auto reloading = manager.receive();
    ASSERT_TRUE(reloading);
    // RELOADING=1 and a numeric CLOCK_MONOTONIC time in microseconds, as notify-reload wants.
    EXPECT_TRUE(std::regex_match(*reloading, std::regex("RELOADING=1\nMONOTONIC_USEC=[0-9]+")))
        << *reloading;
    notifier.stopping();
    EXPECT_EQ(manager.receive(), "STOPPING=1");
}

TEST(ServiceNotifierTest, StatusTextStaysOnOneLine) {
    NotifyListener manager;
    ServiceNotifier notifier(manager.name());
    notifier.status("reload failed:\nWATCHDOG=1");
    EXPECT_EQ(manager.receive(), "STATUS=reload failed: WATCHDOG=1");
}

TEST(ServiceNotifierTest, WithoutNotifySocketNothingIsSent) {
    ServiceNotifier notifier("");
    EXPECT_FALSE(notifier.active());
    ::testing::internal::CaptureStderr();
    notifier.ready("x");
    notifier.stopping();
    EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

TEST(ServiceNotifierTest, FromEnvironmentReadsNotifySocket) {
    NotifyListener manager;
    ScopedEnv environment("NOTIFY_SOCKET", manager.name());
    auto notifier = ServiceNotifier::fromEnvironment();
    notifier.stopping();
    EXPECT_EQ(manager.receive(), "STOPPING=1");
}

struct UnusableName {
    const char* label;
    std::string name;
    const char* warning;
};

class ServiceNotifierRefusesTest : public ::testing::TestWithParam<UnusableName> {};

TEST_P(ServiceNotifierRefusesTest, WithOneWarningNamingTheSocket) {
    ::testing::internal::CaptureStderr();
    ServiceNotifier notifier(GetParam().name);
    notifier.ready("x");
    std::string log = ::testing::internal::GetCapturedStderr();
    EXPECT_FALSE(notifier.active());
    EXPECT_NE(log.find(GetParam().warning), std::string::npos) << log;
    EXPECT_NE(log.find("NOTIFY_SOCKET '" + GetParam().name.substr(0, 20)), std::string::npos)
        << log;
    EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << log;
}

INSTANTIATE_TEST_SUITE_P(
    Names, ServiceNotifierRefusesTest,
    ::testing::Values(UnusableName{"relative", "run/notify", "neither an absolute path"},
                      UnusableName{"tooLong", "/" + std::string(200, 'n'), "longer than"}),
    [](const auto& param) { return std::string(param.param.label); });

TEST(ServiceNotifierTest, AManagerThatIsGoneCostsOneWarningAndNoMore) {
    std::string name;
    {
        NotifyListener manager;
        name = manager.name();
    }  // its directory and socket are gone
    ServiceNotifier notifier(name);
    ASSERT_TRUE(notifier.active());
    ::testing::internal::CaptureStderr();
    notifier.ready("a");
    notifier.reloading();
    notifier.stopping();
    std::string log = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(
        log.find("notifying the service manager through NOTIFY_SOCKET '" + name + "' failed: "),
        std::string::npos)
        << log;
    EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << log;
}

}  // namespace
}  // namespace splicegate::test
