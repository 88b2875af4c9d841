// One daemon per audit directory and durable segment creation, with the real daemon: a second
// daemon on the held directory (another port, and the same port, which SO_REUSEPORT would let it
// share) exits 1 naming the holder's pid and leaves every byte of the live log as it was; the
// directory fsync after a new segment's files are created is seen with strace.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/AuditSegmentBuilder.h"
#include "tests/support/AuditSupport.h"
#include "tests/support/Daemon.h"
#include "tests/support/Sockets.h"

namespace splicegate::test {
namespace {

std::map<std::string, std::string> snapshot(const std::string& dir) {
    std::map<std::string, std::string> files;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
        std::ifstream in(entry.path(), std::ios::binary);
        files[entry.path().filename()] = std::string(std::istreambuf_iterator<char>(in), {});
    }
    return files;
}

// A daemon that has just reported ready may still write its first sync tick (the splice
// writer's segment header, say): the directory has settled once two looks 100 ms apart agree.
std::map<std::string, std::string> settledSnapshot(const std::string& dir) {
    auto last = snapshot(dir);
    for (int look = 0; look < 30; ++look) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        auto now = snapshot(dir);
        if (now == last) break;
        last = std::move(now);
    }
    return last;
}

TEST(AuditIntegrityDaemonTest, SecondDaemonOnAHeldDirectoryChangesNothingAndNamesTheHolder) {
    TempDir root;
    const std::string auditDir = root.path() + "/audit";
    uint16_t port = pickFreePort();
    Daemon first(relayArgs(port, {"127.0.0.1:9"}, {"--audit-dir", auditDir}));
    ASSERT_TRUE(first.waitReady(port)) << first.why();
    auto before = settledSnapshot(auditDir);
    ASSERT_TRUE(before.count("w00-0000000001.index")) << "the live segment";

    for (uint16_t secondPort : {pickFreePort(), port}) {
        std::vector<std::string> argv = {daemonBinary()};
        for (auto& arg : relayArgs(secondPort, {"127.0.0.1:9"}, {"--audit-dir", auditDir}))
            argv.push_back(arg);
        // As the Daemon helper does: no admin socket (the default's directory is the unit's).
        argv.insert(argv.end(), {"--admin-socket", ""});
        auto second = runProcess(argv);
        ASSERT_TRUE(second.status) << "the second daemon kept running on port " << secondPort;
        EXPECT_TRUE(second.status->isExit(1)) << second.status->describe() << "\n" << second.err;
        auto named = grepLines(second.err, "pid " + std::to_string(first.pid()));
        EXPECT_EQ(named.size(), 1u) << second.err;
        EXPECT_EQ(snapshot(auditDir), before) << "port " << secondPort;
        EXPECT_TRUE(first.running());
    }
    auto stopped = first.terminate();
    ASSERT_TRUE(stopped && stopped->isExit(0)) << first.why();
    auto verify = runProcess({auditToolBinary(), "verify", auditDir});
    ASSERT_TRUE(verify.status);
    EXPECT_TRUE(verify.status->isExit(0)) << verify.out << verify.err;
}

TEST(AuditIntegrityDaemonTest, NewSegmentFilesAreFollowedByADirectoryFsync) {
    ASSERT_EQ(::access("/usr/bin/strace", X_OK), 0)
        << "strace is missing: tools/install-deps.sh installs it";
    TempDir root;
    const std::string auditDir = root.path() + "/audit";
    const std::string trace = root.path() + "/trace";
    uint16_t port = pickFreePort();
    std::vector<std::string> args = {
        "-f", "-qq", "-o", trace, "-e", "trace=openat,openat2,fsync,fdatasync", daemonBinary()};
    for (auto& arg : relayArgs(port, {"127.0.0.1:9"}, {"--audit-dir", auditDir}, 1))
        args.push_back(arg);
    {
        // Daemon runs argv[0] = daemonBinary(); point it at strace through SPLICEGATE_BIN.
        ::setenv("SPLICEGATE_BIN", "/usr/bin/strace", 1);
        Daemon traced(args);  // appends "--admin-socket ''" etc. for the daemon
        ::unsetenv("SPLICEGATE_BIN");
        ASSERT_TRUE(traced.waitReady(port, milliseconds(30000))) << traced.why();
        // SIGTERM to strace would detach and leave the daemon running: stop the traced child.
        std::ifstream children("/proc/" + std::to_string(traced.pid()) + "/task/" +
                               std::to_string(traced.pid()) + "/children");
        pid_t daemonPid = 0;
        children >> daemonPid;
        ASSERT_GT(daemonPid, 0) << "strace's child not found";
        ASSERT_EQ(::kill(daemonPid, SIGTERM), 0);
        auto stopped = traced.waitExit(milliseconds(30000));
        ASSERT_TRUE(stopped) << traced.why();
    }
    std::ifstream in(trace);
    std::string line;
    // Directory fds: the audit directory opened with O_DIRECTORY ("... = FD"), or the dirfd the
    // segment files are created relative to. After the first index file is created, one of
    // them must be fsynced.
    std::regex directoryOpen("\"" + auditDir + "\".*O_DIRECTORY.*= (\\d+)");
    std::regex createdAt(R"(openat2?\((\d+), "w00-0000000001\.index".*O_CREAT)");
    std::set<std::string> directoryFds;
    bool created = false;
    bool synced = false;
    std::vector<std::string> seen;
    while (std::getline(in, line)) {
        std::smatch match;
        if (std::regex_search(line, match, directoryOpen)) directoryFds.insert(match[1]);
        if (line.find("w00-0000000001.index") != std::string::npos &&
            line.find("O_CREAT") != std::string::npos) {
            created = true;
            if (std::regex_search(line, match, createdAt)) directoryFds.insert(match[1]);
        }
        std::smatch fsyncMatch;
        static const std::regex fsyncCall(R"(\bfsync\((\d+)\))");
        if (created && std::regex_search(line, fsyncMatch, fsyncCall) &&
            directoryFds.count(fsyncMatch[1]))
            synced = true;
        if (line.find("w00-") != std::string::npos || line.find("fsync") != std::string::npos ||
            line.find("O_DIRECTORY") != std::string::npos)
            seen.push_back(line);
    }
    ASSERT_TRUE(created) << "no creation of the first index seen:\n" << joined(seen);
    EXPECT_TRUE(synced) << "no fsync of the audit directory after the segment was created:\n"
                        << joined(seen);
}

// --audit-group: the directory (made before the option was set, mode 0700) is given to the group
// and opened to it, and every segment file the daemon writes is the group's, mode 0640.
TEST(AuditIntegrityDaemonTest, AuditGroupOwnsTheDirectoryAndItsFiles) {
    TempDir root;
    const std::string auditDir = root.path() + "/audit";
    ASSERT_EQ(::mkdir(auditDir.c_str(), 0700), 0);
    constexpr gid_t kNogroup = 65534;  // Debian's nogroup, in every base system
    uint16_t port = pickFreePort();
    {
        Daemon daemon(relayArgs(port, {"127.0.0.1:9"},
                                {"--audit-dir", auditDir, "--audit-group", "nogroup"}, 1));
        ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
        auto stopped = daemon.terminate();
        ASSERT_TRUE(stopped && stopped->isExit(0)) << daemon.why();
    }
    struct stat dir {};
    ASSERT_EQ(::stat(auditDir.c_str(), &dir), 0);
    EXPECT_EQ(dir.st_gid, kNogroup);
    EXPECT_EQ(dir.st_mode & 07777, 0750u);
    std::size_t segmentFiles = 0;
    for (const auto& entry : std::filesystem::directory_iterator(auditDir)) {
        const std::string name = entry.path().filename();
        if (name.rfind("w00-", 0) != 0) continue;
        ++segmentFiles;
        struct stat file {};
        ASSERT_EQ(::stat(entry.path().c_str(), &file), 0);
        EXPECT_EQ(file.st_gid, kNogroup) << name;
        EXPECT_EQ(file.st_mode & 07777, 0640u) << name;
    }
    EXPECT_GE(segmentFiles, 2u) << "a data and an index file";
}

}  // namespace
}  // namespace splicegate::test
