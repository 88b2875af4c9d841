// The package's postinst on an upgrade of a running daemon (packaging/debian/splicegate.postinst,
// upgrade_running_daemon): it runs `splicegatectl upgrade` and restarts the service only where an
// upgrade is not possible (the admin socket unreachable: exit 3; an older daemon's "upgrade not
// possible"); a new process that failed leaves the old one serving, reported and not restarted.
// The function is taken from the packaged script as it is, with systemctl, splicegatectl and
// deb-systemd-invoke replaced by recording stand-ins on PATH (the machine's systemd, if any, is
// never touched; PackageTest installs the package where no systemd runs, so it never gets here).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/support/Daemon.h"
#include "tests/support/StandInCommands.h"

namespace splicegate::test {
namespace {

const std::string kPostinst = std::string(SPLICEGATE_SOURCE_DIR) +
                              "/packaging/debian/splicegate.postinst";

struct Scenario {
    const char* what;
    int active;        // systemctl is-active's exit status
    int ctlStatus;     // splicegatectl upgrade's
    const char* ctlAnswer;
    bool upgraded;     // splicegatectl upgrade ran
    bool restarted;    // deb-systemd-invoke restart splicegate.service ran
    const char* reported;  // on stderr ("" nothing)
};

class Stand {
  public:
    Stand() {
        commands_.add("systemctl", "exit \"$FAKE_ACTIVE\"");
        commands_.add("splicegatectl", "echo \"$FAKE_ANSWER\"; exit \"$FAKE_CTL_STATUS\"");
        commands_.add("deb-systemd-invoke", "exit 0");
    }
    std::string log(const std::string& name) const { return commands_.log(name); }
    ProcessResult run(const Scenario& s) const {
        // The function as packaged; only the absolute path of splicegatectl is made the stand-in's.
        const std::string script =
            "set -e\n"
            "eval \"$(sed -n '/^upgrade_running_daemon() {$/,/^}$/p' '" + kPostinst +
            "' | sed 's|/usr/bin/splicegatectl|splicegatectl|')\"\n"
            "type upgrade_running_daemon >/dev/null\n"
            "upgrade_running_daemon\n";
        return runProcess({"/usr/bin/env", "PATH=" + commands_.path() + ":/usr/bin:/bin",
                           "FAKE_ACTIVE=" + std::to_string(s.active),
                           "FAKE_CTL_STATUS=" + std::to_string(s.ctlStatus),
                           std::string("FAKE_ANSWER=") + s.ctlAnswer, "/bin/sh", "-c", script},
                          milliseconds(10000));
    }

  private:
    StandInCommands commands_;
};

TEST(MaintainerScriptsTest, PostinstUpgradesTheRunningDaemonAndRestartsOnlyWhereItCannot) {
    const Scenario scenarios[] = {
        {"upgraded", 0, 0, "upgraded: PID 2 serves; PID 1 stopped accepting", true, false, ""},
        {"not running", 3, 0, "", false, false, ""},
        {"admin socket unreachable", 0, 3, "splicegatectl: cannot connect", true, true, ""},
        {"older daemon", 0, 1, "splicegatectl: upgrade not possible with the audit log on", true,
         true, ""},
        {"new process failed", 0, 1, "splicegatectl: PID 2 failed: bogus-key (exit status 2)",
         true, false, "bogus-key (exit status 2)"},
    };
    for (const auto& s : scenarios) {
        SCOPED_TRACE(s.what);
        Stand stand;
        auto result = stand.run(s);
        ASSERT_TRUE(result.status && result.status->isExit(0))
            << (result.status ? result.status->describe() : "hung") << "\n" << result.err;
        EXPECT_EQ(stand.log("systemctl"), "--quiet is-active splicegate.service\n");
        EXPECT_EQ(stand.log("splicegatectl"), s.upgraded ? "upgrade\n" : "");
        EXPECT_EQ(stand.log("deb-systemd-invoke"), s.restarted ? "restart splicegate.service\n" : "");
        if (*s.reported == '\0') {
            EXPECT_EQ(result.err, "");
        } else {
            EXPECT_NE(result.err.find("did not take over; the running daemon goes on"),
                      std::string::npos)
                << result.err;
            EXPECT_NE(result.err.find(s.reported), std::string::npos) << result.err;
        }
    }
}

}  // namespace
}  // namespace splicegate::test
