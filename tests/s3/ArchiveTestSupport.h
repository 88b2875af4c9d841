#pragma once
// What the archive's s3 tests share: a client of the fixture's server, a fresh versioned bucket
// with Object Lock, a real daemon's audit log, and splicegate-archive's command line.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "archive/s3/S3Client.h"
#include "tests/s3/S3TestServer.h"
#include "tests/support/Daemon.h"
#include "tests/support/TestServer.h"
#include "tests/support/Traffic.h"

namespace splicegate::test {

inline std::string archiveBinary() { return std::string(SPLICEGATE_BIN_DIR) + "/splicegate-archive"; }
inline std::string auditBinary() { return std::string(SPLICEGATE_BIN_DIR) + "/splicegate-audit"; }

inline s3::S3Client s3TestClient() {
    s3::ClientOptions options;
    options.endpoint = s3Endpoint();
    options.retries = 2;
    return s3::S3Client(options, s3::loadCredentials(s3CredentialsFile()));
}

// A new bucket (named after the test process) with Object Lock and a 1-day COMPLIANCE default.
inline std::string lockedBucket(s3::S3Client& c) {
    static int counter = 0;
    std::string bucket = "sg-archive-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    auto created = c.createBucket(bucket, true);
    EXPECT_TRUE(created) << created.error.message;
    auto retention = c.putDefaultRetention(bucket, "COMPLIANCE", 1);
    EXPECT_TRUE(retention) << retention.error.message;
    return bucket;
}

// A real daemon's audit log with `connections` echoed connections of `size` bytes each way, in
// `runs` runs of the daemon (each start opens new segments), sealed by the drain at SIGTERM.
inline void makeAuditLog(const std::string& auditDir, int connections, std::uint64_t size,
                         int runs = 2) {
    TestServer upstream(echoUpstream(milliseconds(30000)));
    for (int run = 0; run < runs; ++run) {
        const std::uint16_t port = pickFreePort();
        Daemon daemon(relayArgs(port, {upstream.address()}, {"--audit-dir", auditDir}));
        ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
        for (int i = 0; i < connections; ++i) {
            int error = 0;
            UniqueFd fd = connectTcp(port, error);
            ASSERT_TRUE(fd) << std::strerror(error);
            ASSERT_TRUE(echoRoundTrip(fd.get(), 11 + i + run * 100, size, milliseconds(20000)));
        }
        ASSERT_TRUE(daemon.terminate(milliseconds(20000))) << daemon.why();
    }
}

// The archiver's command line; `overrides` replace or add options ("" as a value: a switch).
inline std::vector<std::string> archiveArgs(const std::string& auditDir, const std::string& stateDir,
                                            const std::string& bucket,
                                            const std::map<std::string, std::string>& overrides = {}) {
    std::map<std::string, std::string> options = {
        {"--audit-dir", auditDir},
        {"--state-dir", stateDir},
        {"--s3-endpoint", s3Endpoint()},
        {"--s3-bucket", bucket},
        {"--s3-prefix", "gw-test"},
        {"--s3-credentials-file", s3CredentialsFile()},
        {"--lock-days", "1"},
        {"--config", "/dev/null"},
        {"--once", ""}};
    for (const auto& [name, value] : overrides) options[name] = value;
    std::vector<std::string> args = {archiveBinary()};
    for (const auto& [name, value] : options) {
        args.push_back(name);
        if (!value.empty()) args.push_back(value);
    }
    return args;
}

}  // namespace splicegate::test
