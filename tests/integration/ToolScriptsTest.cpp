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

}  // namespace
}  // namespace splicegate::test
