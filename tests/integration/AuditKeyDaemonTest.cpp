// The audit key end to end, with the real daemon: with --audit-hmac-key-file every seal the
// daemon writes is keyed (the log verifies with that key and fails with another), each seal is
// logged as `audit seal FILE digest=HEX`, and `splicegatectl status` shows each worker's newest
// seal, the same digest. A restart continues the keyed chain (recovery and the writers share the
// key).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "tests/support/AuditSupport.h"
#include "tests/support/ControlPlaneDaemon.h"
#include "tests/support/Daemon.h"
#include "tests/support/Sockets.h"
#include "tests/support/TestServer.h"
#include "tests/support/Traffic.h"

namespace splicegate::test {
namespace {

std::string keyFile(const TempDir& dir, const std::string& name, char fill) {
    std::string path = dir.write(name, std::string(48, fill));
    ::chmod(path.c_str(), 0600);
    return path;
}

void echoOnce(uint16_t port, std::uint64_t id, std::uint64_t bytes) {
    int error = 0;
    UniqueFd fd = connectTcp(port, error);
    ASSERT_TRUE(fd) << std::strerror(error);
    ASSERT_TRUE(echoRoundTrip(fd.get(), id, bytes, milliseconds(20000)));
}

// The digests of the daemon log's `audit seal FILE digest=HEX` lines, by index file name.
std::vector<std::pair<std::string, std::string>> sealLines(const std::string& log) {
    static const std::regex kSeal(R"(audit seal \S*/(w\d+-\d+\.index) digest=([0-9a-f]{64}))");
    std::vector<std::pair<std::string, std::string>> seals;
    for (auto it = std::sregex_iterator(log.begin(), log.end(), kSeal);
         it != std::sregex_iterator(); ++it)
        seals.emplace_back((*it)[1], (*it)[2]);
    return seals;
}

ProcessResult verifyWithKey(const std::string& dir, const std::string& key) {
    return runTool({auditToolBinary(), "verify", dir, "--key-file", key});
}

TEST(AuditKeyDaemonTest, KeyedLogVerifiesWithItsKeyAndFailsWithAnother) {
    TestServer upstream(echoUpstream(milliseconds(30000)));
    TempDir keys;
    const std::string key = keyFile(keys, "audit.key", 'a');
    const std::string otherKey = keyFile(keys, "other.key", 'b');
    ControlPlaneOptions options;
    options.upstreams = {upstream.address()};
    options.workers = 1;
    options.extra = {"--audit-hmac-key-file", key};
    ControlPlaneDaemon daemon(options);
    ASSERT_TRUE(daemon.start()) << daemon.why();
    for (std::uint64_t i = 0; i < 3; ++i) {
        echoOnce(daemon.listenPort(), 11 + i, 100'000 + i);
        auto rotated = daemon.ctl({"audit-rotate"});
        ASSERT_TRUE(rotated.status && rotated.status->isExit(0)) << rotated.out << rotated.err;
    }
    ASSERT_GE(daemon.daemon().waitLogLines("audit seal ", 3, milliseconds(10000)), 3u)
        << daemon.why();
    auto seals = sealLines(daemon.daemon().log());
    ASSERT_GE(seals.size(), 3u) << daemon.daemon().log();

    // The newest seal in status is the newest one logged.
    auto status = daemon.ctl({"status"});
    ASSERT_TRUE(status.status && status.status->isExit(0)) << status.err;
    EXPECT_NE(status.out.find("audit head w0"), std::string::npos) << status.out;
    EXPECT_NE(status.out.find(seals.back().first + " digest=" + seals.back().second),
              std::string::npos)
        << status.out;
    ASSERT_TRUE(daemon.daemon().terminate(milliseconds(20000))) << daemon.why();

    auto withKey = verifyWithKey(daemon.auditDir(), key);
    ASSERT_TRUE(withKey.status);
    EXPECT_TRUE(withKey.status->isExit(0)) << describeProcess(withKey);
    auto withOther = verifyWithKey(daemon.auditDir(), otherKey);
    ASSERT_TRUE(withOther.status);
    EXPECT_TRUE(withOther.status->isExit(1)) << describeProcess(withOther);
    EXPECT_NE(withOther.out.find("sealed with another key"), std::string::npos)
        << describeProcess(withOther);
}

TEST(AuditKeyDaemonTest, ARestartContinuesTheKeyedChain) {
    TestServer upstream(echoUpstream(milliseconds(30000)));
    TempDir keys;
    const std::string key = keyFile(keys, "audit.key", 'c');
    TempDir root;
    const std::string auditDir = root.path() + "/audit";
    for (std::uint64_t run = 0; run < 2; ++run) {
        const uint16_t port = pickFreePort();
        Daemon daemon(relayArgs(port, {upstream.address()},
                                {"--audit-dir", auditDir, "--audit-hmac-key-file", key}, 1));
        ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
        echoOnce(port, 21 + run, 65'537);
        ASSERT_TRUE(daemon.terminate(milliseconds(20000))) << daemon.why();
        // The stop seals the current segment, with the key, and cuts its data file to its last
        // byte: the next start finds nothing to cut or seal.
        EXPECT_GE(sealLines(daemon.log()).size(), 1u) << daemon.log();
        EXPECT_TRUE(grepLines(daemon.log(), "unindexed bytes").empty()) << daemon.log();
        EXPECT_TRUE(grepLines(daemon.log(), "audit recovery").empty()) << daemon.log();
        EXPECT_TRUE(grepLines(daemon.log(), "durable").empty())
            << "a stop after traffic made everything durable\n"
            << daemon.log();
    }
    auto verify = verifyWithKey(auditDir, key);
    ASSERT_TRUE(verify.status);
    EXPECT_TRUE(verify.status->isExit(0)) << describeProcess(verify);
}

}  // namespace
}  // namespace splicegate::test
