// `--check-config` and a real start agree: each case runs both with the same arguments and the
// same privileges (root, as CI and the packaged unit's ExecStartPre have them), and both must
// give the same verdict, a refused configuration being exit 2 with its one line in both. The
// start must refuse before any side effect: the listen port stays free and the audit directory
// is not created.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/ControlPlaneDaemon.h"
#include "tests/support/Daemon.h"
#include "tests/support/Sockets.h"
#include "tests/support/Sysctl.h"
#include "tests/support/TestServer.h"

namespace splicegate::test {
namespace {

struct Verdicts {
    ProcessResult check;
    ProcessResult start;
};

// Runs `prefix` + the daemon + `args` twice: with --check-config, then as a real start.
Verdicts checkAndStart(const std::vector<std::string>& args,
                       const std::vector<std::string>& prefix = {}) {
    auto run = [&](bool check) {
        std::vector<std::string> argv(prefix);
        argv.push_back(daemonBinary());
        if (check) argv.push_back("--check-config");
        argv.insert(argv.end(), args.begin(), args.end());
        return runProcess(argv);
    };
    Verdicts verdicts;
    verdicts.check = run(true);
    verdicts.start = run(false);
    return verdicts;
}

// A one-route configuration on `port` with two workers, then `extra`; no audit, admin socket or
// metrics listener unless `extra` names them.
std::vector<std::string> baseArgs(uint16_t port, std::vector<std::string> extra) {
    std::vector<std::string> args{"--listen",    loopback(port), "--upstream",
                                  "127.0.0.1:9", "--workers",    "2"};
    for (const char* option : {"--audit-dir", "--admin-socket", "--metrics-listen"})
        if (std::find(extra.begin(), extra.end(), option) == extra.end())
            args.insert(args.end(), {option, ""});
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
}

// The lines of a result's stderr that say a problem (not the start's info lines).
std::vector<std::string> problemLines(const ProcessResult& result) {
    std::vector<std::string> problems;
    for (const auto& line : textLines(result.err))
        if (line.find(" info ") == std::string::npos && line.find("<6>") == std::string::npos)
            problems.push_back(line);
    return problems;
}

// Both refuse with exit 2 and exactly one line, which contains `expected`; the start bound
// nothing on `port`.
void expectBothRefuse(const Verdicts& verdicts, const std::string& expected, uint16_t port) {
    for (const auto* result : {&verdicts.check, &verdicts.start}) {
        const char* which = result == &verdicts.check ? "--check-config" : "start";
        ASSERT_TRUE(result->status && result->status->isExit(2))
            << which << ": " << (result->status ? result->status->describe() : "timeout") << ": "
            << result->err;
        auto problems = problemLines(*result);
        ASSERT_EQ(problems.size(), 1u) << which << ": " << result->err;
        EXPECT_NE(problems.front().find(expected), std::string::npos)
            << which << ": " << problems.front();
    }
    uint16_t stillFree = port;
    EXPECT_TRUE(listenTcp(stillFree)) << "the refused start left port " << port << " bound";
}

// An algorithm this kernel has but does not let a process without CAP_NET_ADMIN set. A new
// machine has one (cubic, with bbr the default and `reno bbr` allowed); on a host that allows
// everything the list is narrowed for the test's lifetime.
std::string refusedAlgorithm(std::optional<SysctlOverride>& narrowed) {
    auto allowed = sysctlWords(kAllowedCongestion);
    for (const auto& available : sysctlWords(kAvailableCongestion))
        if (std::find(allowed.begin(), allowed.end(), available) == allowed.end()) return available;
    const std::string keep = sysctlValue(kDefaultCongestion);
    narrowed.emplace(kAllowedCongestion, keep);
    if (!narrowed->ok()) return "";
    for (const auto& available : sysctlWords(kAvailableCongestion))
        if (available != keep) return available;
    return "";
}

TEST(OperatorStartCheckTest, CongestionControlOutsideTheAllowedListIsRefusedByBoth) {
    std::optional<SysctlOverride> narrowed;
    const std::string algorithm = refusedAlgorithm(narrowed);
    ASSERT_FALSE(algorithm.empty()) << (narrowed ? narrowed->why() : "no second algorithm");
    uint16_t port = pickFreePort();
    auto verdicts = checkAndStart(baseArgs(port, {"--upstream-tcp-congestion", algorithm}));
    expectBothRefuse(verdicts,
                     "--upstream-tcp-congestion " + algorithm +
                         ": not in net.ipv4.tcp_allowed_congestion_control",
                     port);
}

TEST(OperatorStartCheckTest, AllowedCongestionControlIsAcceptedByBoth) {
    // reno is on every allowed list.
    uint16_t port = pickFreePort();
    auto args =
        baseArgs(port, {"--client-tcp-congestion", "reno", "--upstream-tcp-congestion", "reno"});
    std::vector<std::string> checkArgs{daemonBinary(), "--check-config"};
    checkArgs.insert(checkArgs.end(), args.begin(), args.end());
    auto check = runProcess(checkArgs);
    ASSERT_TRUE(check.status && check.status->isExit(0)) << check.err;
    Daemon daemon(args, false);
    EXPECT_TRUE(daemon.waitReady(port)) << daemon.why();
}

TEST(OperatorStartCheckTest, MissingAdminGroupIsRefusedByBoth) {
    TempDir dir;
    uint16_t port = pickFreePort();
    auto verdicts = checkAndStart(baseArgs(port, {"--admin-socket", dir.path() + "/admin.sock",
                                                  "--admin-group", "splicegate-no-such-group"}));
    expectBothRefuse(verdicts, "--admin-group splicegate-no-such-group: no such group", port);
    EXPECT_NE(::access((dir.path() + "/admin.sock").c_str(), F_OK), 0);
}

TEST(OperatorStartCheckTest, AdminSocketInAMissingDirectoryIsRefusedByBoth) {
    TempDir dir;
    const std::string socket = dir.path() + "/missing/admin.sock";
    uint16_t port = pickFreePort();
    auto verdicts =
        checkAndStart(baseArgs(port, {"--admin-socket", socket, "--admin-group", "root"}));
    expectBothRefuse(verdicts,
                     "--admin-socket " + socket + ": directory " + dir.path() +
                         "/missing: No such file or directory",
                     port);
}

TEST(OperatorStartCheckTest, AuditBufferThatCannotBeMappedIsRefusedByBoth) {
    TempDir dir;
    const std::string audit = dir.path() + "/audit";
    // 256 TiB per worker: more than a process's address space, whatever the overcommit policy.
    const std::string bytes = std::to_string(std::uint64_t{1} << 48);
    uint16_t port = pickFreePort();
    auto verdicts = checkAndStart(baseArgs(
        port, {"--audit-dir", audit, "--audit-writer", "direct", "--audit-buffer-bytes", bytes}));
    expectBothRefuse(
        verdicts, "--audit-buffer-bytes " + bytes + ": cannot map the buffers of 2 workers", port);
    EXPECT_NE(::access(audit.c_str(), F_OK), 0) << "the refused start created " << audit;
}

TEST(OperatorStartCheckTest, PrivilegedPortWithoutTheCapabilityIsRefusedByBoth) {
    // The port is below ip_unprivileged_port_start, which the test sets to the kernel's default
    // (a host may have lowered it), and the daemon runs without CAP_NET_BIND_SERVICE in its
    // bounding set, as a hand-made unit without AmbientCapabilities would run it.
    SysctlOverride firstFree("/proc/sys/net/ipv4/ip_unprivileged_port_start", "1024");
    ASSERT_TRUE(firstFree.ok()) << firstFree.why();
    const uint16_t port = 1023;
    auto verdicts = checkAndStart(baseArgs(port, {}),
                                  {"/usr/bin/setpriv", "--bounding-set", "-net_bind_service"});
    expectBothRefuse(verdicts,
                     "listen " + loopback(port) +
                         ": port below net.ipv4.ip_unprivileged_port_start (1024) and this "
                         "process lacks CAP_NET_BIND_SERVICE",
                     port);
}

// Each key file the rules refuse (a key of 32 bytes or more; a regular file owned by root or the
// daemon's user, mode 0600 or 0400) is exit 2 with one line from both; the start creates no
// audit directory. A good key is accepted by both.
TEST(OperatorStartCheckTest, KeyFilesOutsideTheRulesAreRefusedByBoth) {
    TempDir dir;
    const std::string key(32, 'k');
    auto keyFile = [&](const std::string& name, const std::string& bytes, mode_t mode) {
        std::string path = dir.write(name, bytes);
        EXPECT_EQ(::chmod(path.c_str(), mode), 0) << path;
        return path;
    };
    const std::string good = keyFile("good.key", key, 0600);
    const std::string fifo = dir.path() + "/fifo.key";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    const std::string link = dir.path() + "/link.key";
    ASSERT_EQ(::symlink(good.c_str(), link.c_str()), 0);
    const std::string foreign = keyFile("foreign.key", key, 0600);
    ASSERT_EQ(::chown(foreign.c_str(), 12345, 12345), 0);
    const std::vector<std::pair<std::string, std::string>> cases = {
        {keyFile("short.key", std::string(31, 'k'), 0600), "holds 31 bytes"},
        {keyFile("group.key", key, 0640), "has mode 0640; it must be 0600 or 0400"},
        {keyFile("world.key", key, 0644), "has mode 0644"},
        {dir.path() + "/missing.key", "No such file or directory"},
        {link, "cannot open"},
        {dir.path(), "is not a regular file"},
        {fifo, "is not a regular file"},
        {foreign, "is owned by uid 12345"},
    };
    for (const auto& [path, expected] : cases) {
        SCOPED_TRACE(path);
        const std::string audit = dir.path() + "/audit";
        uint16_t port = pickFreePort();
        auto verdicts =
            checkAndStart(baseArgs(port, {"--audit-dir", audit, "--audit-hmac-key-file", path}));
        expectBothRefuse(verdicts, "--audit-hmac-key-file " + path, port);
        expectBothRefuse(verdicts, expected, port);
        EXPECT_NE(::access(audit.c_str(), F_OK), 0) << "the refused start created " << audit;
    }
    const std::string readOnly = keyFile("readonly.key", key, 0400);
    for (const auto& path : {good, readOnly}) {
        uint16_t port = pickFreePort();
        auto args = baseArgs(port, {"--audit-dir", dir.path() + "/audit-" + std::to_string(port),
                                    "--audit-hmac-key-file", path});
        std::vector<std::string> checkArgs{daemonBinary(), "--check-config"};
        checkArgs.insert(checkArgs.end(), args.begin(), args.end());
        auto check = runProcess(checkArgs);
        EXPECT_TRUE(check.status && check.status->isExit(0)) << path << ": " << check.err;
        Daemon daemon(args, false);
        EXPECT_TRUE(daemon.waitReady(port)) << daemon.why();
    }
}

// A symlinked --audit-dir is named as one (never followed), not "Not a directory".
TEST(OperatorStartCheckTest, SymlinkedAuditDirectoryIsNamedAsOneByBoth) {
    TempDir dir;
    const std::string real = dir.path() + "/real";
    ASSERT_EQ(::mkdir(real.c_str(), 0750), 0);
    const std::string link = dir.path() + "/audit";
    ASSERT_EQ(::symlink(real.c_str(), link.c_str()), 0);
    uint16_t port = pickFreePort();
    auto verdicts = checkAndStart(baseArgs(port, {"--audit-dir", link}));
    expectBothRefuse(verdicts, "--audit-dir " + link + ": is a symbolic link", port);
}

// A --config that is not a regular file (a FIFO would block the start, a reload and SIGTERM
// behind it; /dev/zero would grow memory without end) or is huge: one line, exit 2, at once.
TEST(OperatorStartCheckTest, ConfigThatIsNotASmallRegularFileIsRefusedByBoth) {
    TempDir dir;
    const std::string fifo = dir.path() + "/splicegate.conf";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    const std::string huge = dir.write("huge.conf", std::string(2 << 20, '#'));
    const std::vector<std::pair<std::string, std::string>> cases = {
        {fifo, "is not a regular file"},
        {"/dev/zero", "is not a regular file"},
        {huge, "is larger than 1048576 bytes"},
    };
    for (const auto& [path, expected] : cases) {
        SCOPED_TRACE(path);
        uint16_t port = pickFreePort();
        auto verdicts = checkAndStart(baseArgs(port, {"--config", path}));
        expectBothRefuse(verdicts, "config file '" + path + "' " + expected, port);
    }
}

// A file with several problems: --check-config and the start both exit 2 with the same lines,
// one per problem, each naming file, line and key; the start binds nothing.
TEST(OperatorStartCheckTest, EveryProblemOfAFileIsOneLineInBoth) {
    TempDir dir;
    uint16_t port = pickFreePort();
    const std::string file = dir.write(
        "splicegate.conf", "workers = many\ncolour = red\n[route.web]\nlisten = " + loopback(port) +
                               "\nupstream = 127.0.0.1:9\nshape = round\n[route.web]\n");
    auto verdicts = checkAndStart({"--config", file, "--audit-dir", "", "--admin-socket", "",
                                   "--metrics-listen", ""});
    const std::vector<std::string> expected = {
        "splicegate: " + file + ":1: workers: invalid value 'many'",
        "splicegate: " + file + ":2: unknown key 'colour'",
        "splicegate: " + file + ":6: route 'web': unknown key 'shape'",
        "splicegate: " + file + ":7: section [route.web] given twice (first at line 3)",
    };
    for (const auto* result : {&verdicts.check, &verdicts.start}) {
        const char* which = result == &verdicts.check ? "--check-config" : "start";
        ASSERT_TRUE(result->status && result->status->isExit(2)) << which << ": " << result->err;
        auto problems = problemLines(*result);
        ASSERT_EQ(problems.size(), expected.size()) << which << ": " << result->err;
        for (std::size_t i = 0; i < expected.size(); ++i)
            EXPECT_EQ(problems[i].rfind(expected[i], 0), 0u) << which << ": " << problems[i];
    }
    uint16_t stillFree = port;
    EXPECT_TRUE(listenTcp(stillFree)) << "the refused start left port " << port << " bound";
}

}  // namespace
}  // namespace splicegate::test
