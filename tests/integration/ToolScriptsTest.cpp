// tools/install-deps.sh and tools/demo.sh as a user runs them, with dpkg-query, apt-get and
// cmake replaced by recording stand-ins on PATH (nothing is installed or built): a package in
// triggers-pending (or -awaited) counts as installed, the demo builds only the binaries it
// runs, and a demo upstream port that is taken stops the demo with one line saying so.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/support/Daemon.h"
#include "tests/support/StandInCommands.h"
#include "tests/support/Sockets.h"

namespace splicegate::test {
namespace {

const std::string kSource = SPLICEGATE_SOURCE_DIR;

// apt-get, cmake and dpkg-query stood in for; dpkg-query answers FAKE_DPKG_STATUS.
class FakeCommands {
  public:
    FakeCommands() {
        for (const char* name : {"apt-get", "cmake"}) commands_.add(name, "exit 0");
        commands_.add("dpkg-query", "printf '%s' \"$FAKE_DPKG_STATUS\"");
    }
    std::string log(const std::string& name) const { return commands_.log(name); }
    // argv run with the stand-ins first on PATH and `status` as every package's dpkg status.
    std::vector<std::string> run(const std::string& status, std::vector<std::string> argv) const {
        std::vector<std::string> full = {"/usr/bin/env",
                                         "PATH=" + commands_.path() + ":" + std::getenv("PATH"),
                                         "FAKE_DPKG_STATUS=" + status};
        full.insert(full.end(), argv.begin(), argv.end());
        return full;
    }

  private:
    StandInCommands commands_;
};

TEST(ToolScriptsTest, InstallDepsCountsPendingTriggersAsInstalled) {
    for (const char* status : {"install ok installed", "install ok triggers-pending",
                               "install ok triggers-awaited"}) {
        FakeCommands fakes;
        auto result = runProcess(fakes.run(status, {"/bin/sh", kSource + "/tools/install-deps.sh"}),
                                 milliseconds(30000));
        ASSERT_TRUE(result.status && result.status->isExit(0)) << status << result.err;
        EXPECT_EQ(fakes.log("apt-get"), "") << status << ": apt-get ran for installed packages";
    }
    FakeCommands fakes;
    auto result = runProcess(
        fakes.run("deinstall ok config-files", {"/bin/sh", kSource + "/tools/install-deps.sh"}),
        milliseconds(30000));
    ASSERT_TRUE(result.status && result.status->isExit(0)) << result.err;
    EXPECT_NE(fakes.log("apt-get").find("install -y"), std::string::npos) << fakes.log("apt-get");
}

TEST(ToolScriptsTest, DemoBuildsWhatItRunsAndStopsWhenPort8080IsTaken) {
    uint16_t port = 8080;
    UniqueFd holder = listenTcp(port);  // taken by someone else already: just as good
    FakeCommands fakes;
    auto result = runProcess(fakes.run("install ok installed", {"/bin/sh", kSource + "/tools/demo.sh"}),
                             milliseconds(30000));
    ASSERT_TRUE(result.status) << "demo.sh hung with 127.0.0.1:8080 taken";
    EXPECT_TRUE(result.status->isExit(1)) << result.status->describe() << result.err;
    EXPECT_NE(result.err.find("127.0.0.1:8080 is taken"), std::string::npos) << result.err;
    EXPECT_EQ(result.out.find("demo upstream on"), std::string::npos) << result.out;
    EXPECT_NE(fakes.log("cmake").find("--build build --target splicegate splicegatectl "
                                      "splicegate-audit\n"),
              std::string::npos)
        << fakes.log("cmake");
}

// The benchmark scripts run the churn and bulk clients without --first-bytes (only sni.sh gives
// it): leaving it out must not be a usage error (exit 2). A closed port: churn counts the
// refusals in its result line, bulk fails to connect; both exit 1 for that.
TEST(ToolScriptsTest, BenchClientsRunWithoutTheOptionalFirstBytes) {
    const std::string bench = std::string(SPLICEGATE_BIN_DIR) + "/splicegate-bench";
    const std::string closed = "127.0.0.1:" + std::to_string(pickFreePort());
    auto churn = runProcess({bench, "churn", "--connect", closed, "--duration", "0.2"}, milliseconds(10000));
    ASSERT_TRUE(churn.status);
    EXPECT_TRUE(churn.status->isExit(1)) << churn.status->describe() << churn.err;
    EXPECT_NE(churn.out.find("result=churn"), std::string::npos) << churn.out << churn.err;
    EXPECT_NE(churn.out.find(" connect_errors="), std::string::npos) << churn.out;
    auto bulk = runProcess({bench, "bulk", "--connect", closed, "--duration", "0.2", "--warmup", "0"},
                           milliseconds(10000));
    ASSERT_TRUE(bulk.status);
    EXPECT_TRUE(bulk.status->isExit(1)) << bulk.status->describe() << bulk.err;
    EXPECT_NE(bulk.err.find("Connection refused"), std::string::npos) << bulk.err;
}

}  // namespace
}  // namespace splicegate::test
