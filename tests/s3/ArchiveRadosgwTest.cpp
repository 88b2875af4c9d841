// splicegate-archive, the shipped binary, against a real S3 server (Ceph radosgw, fixture
// s3_server) and a real daemon's audit log: every sealed segment ends up in the bucket, locked,
// byte for byte; a second run puts nothing; kill -9 at random points of an upload loses nothing
// and leaves no second, different version of any object; the box's credentials cannot delete a
// version; bad options and a loose credentials file are one line and exit 2. The relay's retention,
// given the archiver's state directory, deletes only what the archive verified (fail-closed),
// or unarchived segments too over the size limit with fail-open, counted.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <chrono>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "archive/UploadState.h"
#include "archive/s3/S3Client.h"
#include "audit/Crc32c.h"
#include "tests/s3/ArchiveTestSupport.h"
#include "audit/Records.h"
#include "tests/support/AuditSupport.h"
#include "tests/support/ChildProcess.h"
#include "tests/support/ControlPlaneDaemon.h"
#include "tests/support/Daemon.h"
#include "tests/support/HttpFetch.h"
#include "tests/support/TestServer.h"
#include "tests/support/Traffic.h"

extern char** environ;

namespace splicegate::test {
namespace {

s3::S3Client client() { return s3TestClient(); }

// Runs the archiver and kills it with SIGKILL after `killAfter` (if it still runs).
std::optional<ExitStatus> runKilledAfter(const std::vector<std::string>& args,
                                         milliseconds killAfter) {
    std::vector<char*> argv;
    for (const auto& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    pid_t pid = 0;
    int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) return std::nullopt;
    auto deadline = std::chrono::steady_clock::now() + killAfter;
    int status = 0;
    while (::waitpid(pid, &status, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() >= deadline) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, &status, 0);
            return std::nullopt;
        }
        std::this_thread::sleep_for(milliseconds(5));
    }
    ExitStatus exit;
    exit.exited = WIFEXITED(status);
    exit.code = exit.exited ? WEXITSTATUS(status) : -1;
    exit.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    return exit;
}

std::vector<audit::SegmentFiles> sealedSegments(const std::string& auditDir) {
    std::vector<audit::SegmentFiles> sealed;
    for (auto& files : audit::listSegments(auditDir))
        if (files.hasIndex && files.hasData) sealed.push_back(files);
    return sealed;
}

// Every segment verified, each object's newest version equal to the local bytes and locked,
// and no key with two versions of different bytes.
void expectBucketMatchesTheLog(s3::S3Client& c, const std::string& bucket,
                               const std::string& auditDir, const std::string& stateDir) {
    archive::UploadStateStore states(stateDir);
    auto segments = sealedSegments(auditDir);
    ASSERT_GE(segments.size(), 2u);
    for (const auto& files : segments) {
        auto state = states.load(files.worker, files.segment);
        ASSERT_TRUE(state) << files.indexPath;
        EXPECT_EQ(state->phase, archive::UploadPhase::Verified) << files.indexPath << state->problem;
        ASSERT_EQ(state->objects.size(), 4u);
        for (const auto& object : state->objects) {
            auto bytes = c.get(bucket, object.key);
            ASSERT_TRUE(bytes) << bytes.error.message;
            EXPECT_EQ(audit::crc32c(0, bytes->data(), bytes->size()), object.crc32c) << object.key;
            if (object.kind == archive::ObjectKind::Index) {
                EXPECT_EQ(*bytes, readFile(files.indexPath)) << object.key;
            }
            if (object.kind == archive::ObjectKind::Data) {
                EXPECT_EQ(*bytes, readFile(files.dataPath).substr(0, bytes->size())) << object.key;
            }
            auto retention = c.getRetention(bucket, object.key, object.versionId);
            ASSERT_TRUE(retention) << retention.error.message;
            EXPECT_EQ(retention->lockMode, "COMPLIANCE") << object.key;
        }
    }
    // HEAD before every PUT: an object is put once, even across kills, except in one race no
    // client can close. A PUT whose body the server had whole when the archiver was killed
    // completes on the server a moment later; a run started in that moment finds no object and
    // puts it again. That second version has the same bytes (same size and ETag): no key may
    // hold two versions that differ, and none may be deleted.
    auto versions = c.listVersions(bucket, "gw-test/");
    ASSERT_TRUE(versions) << versions.error.message;
    std::map<std::string, std::set<std::pair<std::uint64_t, std::string>>> contentsByKey;
    for (const auto& version : *versions) {
        EXPECT_FALSE(version.deleteMarker) << version.key;
        auto head = c.head(bucket, version.key, version.versionId);
        ASSERT_TRUE(head) << head.error.message;
        contentsByKey[version.key].insert({head->size, head->etag});
    }
    for (const auto& [key, contents] : contentsByKey) EXPECT_EQ(contents.size(), 1u) << key;
}

class ArchiveRadosgwTest : public ::testing::Test {
  protected:
    void SetUp() override {
        ASSERT_FALSE(s3ServerDir().empty()) << "SPLICEGATE_S3_SERVER_DIR is not set (fixture s3_server)";
        ASSERT_TRUE(std::filesystem::exists(archiveBinary())) << archiveBinary();
    }
    TempDir root_;
    std::string auditDir_ = root_.path() + "/audit";
    std::string stateDir_ = root_.path() + "/state";
};

TEST_F(ArchiveRadosgwTest, ShipsARealDaemonsLogLockedAndASecondRunPutsNothing) {
    makeAuditLog(auditDir_, 4, 600'000);
    auto c = client();
    auto bucket = lockedBucket(c);
    auto first = runProcess(archiveArgs(auditDir_, stateDir_, bucket), milliseconds(120000));
    ASSERT_TRUE(first.status && first.status->isExit(0)) << first.err;
    expectBucketMatchesTheLog(c, bucket, auditDir_, stateDir_);
    // The bucket lists as the directory does, from the connections objects alone.
    const std::string audit = std::string(SPLICEGATE_BIN_DIR) + "/splicegate-audit";
    // The table sorts by id (the directory's JSON streams in the log's order).
    auto local = runProcess({audit, "list", auditDir_}, milliseconds(30000));
    auto remote = runProcess({audit, "list", "s3://" + bucket + "/gw-test",
                              "--s3-endpoint", s3Endpoint(),
                              "--s3-credentials-file", s3CredentialsFile()},
                             milliseconds(30000));
    ASSERT_TRUE(local.status && local.status->isExit(0)) << local.err;
    ASSERT_TRUE(remote.status && remote.status->isExit(0)) << remote.err;
    EXPECT_EQ(remote.out, local.out);
    EXPECT_GE(textLines(local.out).size(), 9u) << local.out;  // a header and 8 connections
    auto routeMiss = runProcess({audit, "list", "s3://" + bucket + "/gw-test", "--route", "none",
                                 "--s3-endpoint", s3Endpoint(),
                                 "--s3-credentials-file", s3CredentialsFile()},
                                milliseconds(30000));
    ASSERT_TRUE(routeMiss.status);
    EXPECT_TRUE(routeMiss.status->isExit(1)) << routeMiss.out << routeMiss.err;
    auto noEndpoint = runProcess({audit, "list", "s3://" + bucket + "/gw-test"}, milliseconds(30000));
    ASSERT_TRUE(noEndpoint.status);
    EXPECT_TRUE(noEndpoint.status->isExit(2)) << noEndpoint.err;
    EXPECT_NE(noEndpoint.err.find("--s3-endpoint"), std::string::npos) << noEndpoint.err;
    auto before = c.listVersions(bucket, "gw-test/");
    ASSERT_TRUE(before);
    auto second = runProcess(archiveArgs(auditDir_, stateDir_, bucket), milliseconds(60000));
    ASSERT_TRUE(second.status && second.status->isExit(0)) << second.err;
    auto after = c.listVersions(bucket, "gw-test/");
    ASSERT_TRUE(after);
    EXPECT_EQ(after->size(), before->size());
    // The box's own credentials cannot delete what they wrote (COMPLIANCE).
    const auto& victim = before->front();
    auto removed = c.deleteObject(bucket, victim.key, victim.versionId);
    EXPECT_FALSE(removed);
    EXPECT_EQ(removed.error.httpStatus, 403) << removed.error.message;
}

// A state directory lost (a new box with the old prefix): every object is adopted, none put.
TEST_F(ArchiveRadosgwTest, ObjectsAlreadyInTheBucketAreAdopted) {
    makeAuditLog(auditDir_, 2, 300'000);
    auto c = client();
    auto bucket = lockedBucket(c);
    auto first = runProcess(archiveArgs(auditDir_, stateDir_, bucket), milliseconds(120000));
    ASSERT_TRUE(first.status && first.status->isExit(0)) << first.err;
    auto before = c.listVersions(bucket, "gw-test/");
    ASSERT_TRUE(before);
    std::filesystem::remove_all(stateDir_);
    auto again = runProcess(archiveArgs(auditDir_, stateDir_, bucket), milliseconds(120000));
    ASSERT_TRUE(again.status && again.status->isExit(0)) << again.err;
    auto after = c.listVersions(bucket, "gw-test/");
    ASSERT_TRUE(after);
    EXPECT_EQ(after->size(), before->size());
    expectBucketMatchesTheLog(c, bucket, auditDir_, stateDir_);
}

// kill -9 at random instants of the uploads (slowed by the rate cap so that they take seconds),
// then a run to the end: nothing lost, nothing put twice.
TEST_F(ArchiveRadosgwTest, KillNineAtRandomPointsLosesNothing) {
    makeAuditLog(auditDir_, 3, 700'000);
    auto c = client();
    auto bucket = lockedBucket(c);
    std::mt19937 random(static_cast<unsigned>(::getpid()));
    std::uniform_int_distribution<int> delayMs(20, 1500);
    int killed = 0;
    for (int round = 0; round < 12; ++round) {
        auto status = runKilledAfter(archiveArgs(auditDir_, stateDir_, bucket,
                                                 {{"--max-rate-mbps", "40"}, {"--parallel", "2"}}),
                                     milliseconds(delayMs(random)));
        if (!status) {
            ++killed;
            continue;
        }
        ASSERT_TRUE(status->isExit(0)) << status->describe();
        break;  // it finished before the kill
    }
    EXPECT_GE(killed, 1);
    auto last = runProcess(archiveArgs(auditDir_, stateDir_, bucket), milliseconds(120000));
    ASSERT_TRUE(last.status && last.status->isExit(0)) << last.err;
    expectBucketMatchesTheLog(c, bucket, auditDir_, stateDir_);
}

// The sealed segments' index files that are still in `auditDir`.
std::set<std::string> sealedIndexes(const std::string& auditDir) {
    std::set<std::string> indexes;
    for (const auto& files : sealedSegments(auditDir)) indexes.insert(files.indexPath);
    return indexes;
}

std::optional<double> metric(std::uint16_t port, const std::string& name) {
    auto reply = httpGet(port, "/metrics");
    return sampleValue(parseMetrics(reply.body), name);
}

// Polls `done` every 200 ms for at most `timeout`.
template <typename Done>
bool eventually(Done done, milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!done()) {
        if (std::chrono::steady_clock::now() >= deadline) return false;
        std::this_thread::sleep_for(milliseconds(200));
    }
    return true;
}

// A relay whose retention budget is one byte: everything sealed is over it.
std::vector<std::string> retainingRelayArgs(std::uint16_t port, std::uint16_t metricsPort,
                                            const std::string& auditDir,
                                            const std::string& stateDir, const char* onError) {
    return relayArgs(port, {"127.0.0.1:9"},
                     {"--audit-dir", auditDir, "--audit-retention-bytes", "1",
                      "--audit-archive-state-dir", stateDir, "--audit-on-error", onError,
                      "--metrics-listen", "127.0.0.1:" + std::to_string(metricsPort)});
}

TEST_F(ArchiveRadosgwTest, RelayRetentionDeletesOnlyWhatTheArchiveVerified) {
    makeAuditLog(auditDir_, 3, 300'000);
    auto before = sealedIndexes(auditDir_);
    ASSERT_GE(before.size(), 3u);
    const std::uint16_t port = pickFreePort(), metricsPort = pickFreePort();
    // The archiver has not run: its state directory does not even exist yet.
    Daemon relay(retainingRelayArgs(port, metricsPort, auditDir_, stateDir_, "fail-closed"));
    ASSERT_TRUE(relay.waitReady(port)) << relay.why();
    ASSERT_TRUE(eventually([&] { return metric(metricsPort, "splicegate_audit_unarchived_bytes")
                                             .value_or(0) > 0; },
                           milliseconds(15000)))
        << httpGet(metricsPort, "/metrics").body;
    auto now = sealedIndexes(auditDir_);  // and the running daemon's current segments
    for (const auto& index : before)
        EXPECT_TRUE(now.count(index)) << index << ": deleted before the archive verified it";
    EXPECT_EQ(metric(metricsPort, "splicegate_audit_unarchived_deleted_total"), 0);

    auto c = client();
    auto bucket = lockedBucket(c);
    auto shipped = runProcess(archiveArgs(auditDir_, stateDir_, bucket), milliseconds(120000));
    ASSERT_TRUE(shipped.status && shipped.status->isExit(0)) << shipped.err;
    // Now verified, they go, but for each worker's newest one (retention's own rule).
    ASSERT_TRUE(eventually([&] { return sealedIndexes(auditDir_).size() <= 2; },
                           milliseconds(20000)))
        << sealedIndexes(auditDir_).size() << " sealed segments left";
    EXPECT_EQ(metric(metricsPort, "splicegate_audit_unarchived_deleted_total"), 0);
    ASSERT_TRUE(relay.terminate(milliseconds(20000))) << relay.why();
    auto verify = runProcess({std::string(SPLICEGATE_BIN_DIR) + "/splicegate-audit", "verify",
                              auditDir_},
                             milliseconds(60000));
    ASSERT_TRUE(verify.status);
    EXPECT_TRUE(verify.status->isExit(0)) << verify.out << verify.err;
}

TEST_F(ArchiveRadosgwTest, FailOpenRetentionDeletesUnarchivedSegmentsAndCountsThem) {
    makeAuditLog(auditDir_, 3, 300'000);
    ASSERT_GE(sealedIndexes(auditDir_).size(), 3u);
    std::filesystem::create_directories(stateDir_);
    const std::uint16_t port = pickFreePort(), metricsPort = pickFreePort();
    Daemon relay(retainingRelayArgs(port, metricsPort, auditDir_, stateDir_, "fail-open"));
    ASSERT_TRUE(relay.waitReady(port)) << relay.why();
    ASSERT_TRUE(eventually([&] { return metric(metricsPort,
                                               "splicegate_audit_unarchived_deleted_total")
                                             .value_or(0) >= 1; },
                           milliseconds(20000)))
        << httpGet(metricsPort, "/metrics").body;
    EXPECT_GE(relay.waitLogLines("before the archive verified it", 1, milliseconds(5000)), 1u);
    ASSERT_TRUE(relay.terminate(milliseconds(20000))) << relay.why();
}

// TLS as in production: the server's certificate verified (against --s3-ca-file here, a CA the
// fixture made), the payload UNSIGNED with the CRC header signed, and an unknown CA refused.
// The archiver's own /metrics while it runs: its S3 client's requests and the connections it
// opened for them, fewer once several objects went up over a kept connection.
TEST_F(ArchiveRadosgwTest, ItsMetricsCountRequestsAndTheConnectionsKeptForThem) {
    makeAuditLog(auditDir_, 3, 300'000);
    const auto segments = static_cast<double>(sealedSegments(auditDir_).size());
    auto c = client();
    auto bucket = lockedBucket(c);
    const std::uint16_t metricsPort = pickFreePort();
    auto args = archiveArgs(auditDir_, stateDir_, bucket,
                            {{"--metrics-listen", "127.0.0.1:" + std::to_string(metricsPort)}});
    std::erase(args, "--once");  // serving: scraped while it runs
    ChildProcess archiver(args, root_.path() + "/archive.log");
    std::vector<MetricSample> page;
    auto verifiedAll = [&] {
        page = parseMetrics(httpGet(metricsPort, "/metrics").body);
        auto verified = sampleValue(page, "splicegate_archive_segments_total", {{"result", "verified"}});
        return verified && *verified >= segments;
    };
    ASSERT_TRUE(eventually(verifiedAll, milliseconds(60000))) << readFile(root_.path() + "/archive.log");
    auto requests = sampleValue(page, "splicegate_archive_http_requests_total");
    auto connections = sampleValue(page, "splicegate_archive_http_connections_opened_total");
    ASSERT_TRUE(requests && connections);
    // Each segment's four objects: a HEAD and a PUT each, then a HEAD and a read back.
    EXPECT_GE(*requests, segments * 16);
    EXPECT_GE(*connections, 1);
    EXPECT_LT(*connections * 4, *requests) << "connections are not kept";
    EXPECT_TRUE(archiver.stop());
}

TEST_F(ArchiveRadosgwTest, ShipsOverTlsVerifyingTheServerAndRefusesAnUnknownCa) {
    makeAuditLog(auditDir_, 2, 300'000, 1);
    auto c = client();
    auto bucket = lockedBucket(c);
    auto refused = runProcess(archiveArgs(auditDir_, stateDir_, bucket, {{"--s3-endpoint", s3HttpsEndpoint()}}),
                              milliseconds(60000));
    ASSERT_TRUE(refused.status);
    EXPECT_TRUE(refused.status->isExit(1)) << refused.err;
    EXPECT_NE(refused.err.find(s3HttpsEndpoint()), std::string::npos) << refused.err;
    EXPECT_NE(refused.err.find("certificate"), std::string::npos) << refused.err;
    EXPECT_EQ(refused.err.find("attempts"), std::string::npos) << "not retried: " << refused.err;
    auto nothing = c.listVersions(bucket, "gw-test/");
    ASSERT_TRUE(nothing) << nothing.error.message;
    EXPECT_TRUE(nothing->empty());

    auto shipped = runProcess(archiveArgs(auditDir_, stateDir_, bucket,
                                          {{"--s3-endpoint", s3HttpsEndpoint()}, {"--s3-ca-file", s3CaFile()}}),
                              milliseconds(60000));
    ASSERT_TRUE(shipped.status && shipped.status->isExit(0)) << shipped.err;
    archive::UploadStateStore states(stateDir_);
    for (const auto& files : sealedSegments(auditDir_)) {
        auto state = states.load(files.worker, files.segment);
        ASSERT_TRUE(state) << files.indexPath;
        EXPECT_EQ(state->phase, archive::UploadPhase::Verified) << files.indexPath << state->problem;
    }
    const std::string audit = std::string(SPLICEGATE_BIN_DIR) + "/splicegate-audit";
    auto local = runProcess({audit, "list", auditDir_}, milliseconds(30000));
    auto remote = runProcess({audit, "list", "s3://" + bucket + "/gw-test", "--s3-endpoint", s3HttpsEndpoint(),
                              "--s3-ca-file", s3CaFile(), "--s3-credentials-file", s3CredentialsFile()},
                             milliseconds(30000));
    ASSERT_TRUE(remote.status && remote.status->isExit(0)) << remote.err;
    EXPECT_EQ(remote.out, local.out);
}

// Segments of about 14 MB in parts of 5 MiB: radosgw takes the multipart uploads but ignores
// their lock headers, so the archiver's verification sets the retention on each version.
class ArchiveMultipartRadosgwTest : public ArchiveRadosgwTest {
  protected:
    void SetUp() override {
        ArchiveRadosgwTest::SetUp();
        // One connection per run, 7 MB each way: one segment of 14 MB per run.
        makeAuditLog(auditDir_, 1, 7'000'000, 2);
        std::uint64_t largest = 0;
        for (const auto& files : sealedSegments(auditDir_))
            largest = std::max<std::uint64_t>(largest, std::filesystem::file_size(files.dataPath));
        ASSERT_GE(largest, 12u << 20);
    }
    std::map<std::string, std::string> parts() const { return {{"--s3-part-mb", "5"}}; }
    std::vector<s3::UploadEntry> unfinished(s3::S3Client& c, const std::string& bucket) {
        auto uploads = c.listMultipartUploads(bucket, "gw-test/");
        EXPECT_TRUE(uploads) << uploads.error.message;
        return uploads ? *uploads : std::vector<s3::UploadEntry>{};
    }
};

std::vector<std::string> withBucket(std::vector<std::string> args) {
    args.insert(args.end(), {"--s3-endpoint", s3Endpoint(), "--s3-credentials-file",
                             s3CredentialsFile()});
    return args;
}

// --lock-days 2 on a bucket whose default is 1 day: radosgw gives the multipart objects the
// default, shorter than asked, so the archiver must set the retention on their versions; the
// single PUTs keep their headers' lock. Either way each version ends with the state's date.
TEST_F(ArchiveMultipartRadosgwTest, ALargeSegmentGoesUpInPartsLockedAndReadsBackAsTheLocalOne) {
    auto c = client();
    auto bucket = lockedBucket(c);
    auto longer = parts();
    longer["--lock-days"] = "2";
    auto shipped = runProcess(archiveArgs(auditDir_, stateDir_, bucket, longer), milliseconds(120000));
    ASSERT_TRUE(shipped.status && shipped.status->isExit(0)) << shipped.err;
    expectBucketMatchesTheLog(c, bucket, auditDir_, stateDir_);
    EXPECT_TRUE(unfinished(c, bucket).empty());
    archive::UploadStateStore states(stateDir_);
    unsigned inParts = 0;
    for (const auto& files : sealedSegments(auditDir_)) {
        auto state = states.load(files.worker, files.segment);
        ASSERT_TRUE(state);
        for (const auto& object : state->objects) {
            auto head = c.head(bucket, object.key, object.versionId);
            ASSERT_TRUE(head) << head.error.message;
            // A multipart object's ETag is "MD5-N"; a PUT's is the MD5 alone.
            bool multipart = head->etag.find('-') != std::string::npos;
            EXPECT_EQ(multipart, object.size > (5u << 20)) << object.key << " " << head->etag;
            if (multipart) {
                ++inParts;
                EXPECT_EQ(head->etag.substr(head->etag.find('-')), "-3") << object.key;  // 13.4 MiB
            }
            // The lock the verification set: COMPLIANCE until the state's date, not deletable.
            auto retention = c.getRetention(bucket, object.key, object.versionId);
            ASSERT_TRUE(retention) << retention.error.message;
            EXPECT_EQ(retention->lockMode, "COMPLIANCE") << object.key;
            EXPECT_EQ(retention->retainUntil.substr(0, 19), state->retainUntil.substr(0, 19))
                << object.key;
            auto removed = c.deleteObject(bucket, object.key, object.versionId);
            EXPECT_FALSE(removed) << object.key;
            EXPECT_EQ(removed.error.httpStatus, 403) << object.key << removed.error.message;
        }
    }
    EXPECT_GE(inParts, 2u);
    // The chain verifies from the bucket, and every connection extracts from it as locally.
    const std::string url = "s3://" + bucket + "/gw-test";
    auto verified = runProcess(withBucket({auditBinary(), "verify", url}), milliseconds(120000));
    ASSERT_TRUE(verified.status && verified.status->isExit(0)) << verified.out << verified.err;
    auto listing = auditList(auditDir_);
    ASSERT_TRUE(listing.ok()) << listing.describe();
    ASSERT_GE(listing.rows.size(), 2u);
    for (const auto& row : listing.rows)
        for (const char* direction : {"c2u", "u2c"}) {
            std::vector<std::string> args = {"--connection", std::to_string(row.id), "--direction",
                                             direction};
            std::vector<std::string> local = {auditBinary(), "extract", auditDir_};
            std::vector<std::string> remote = {auditBinary(), "extract", url};
            local.insert(local.end(), args.begin(), args.end());
            remote.insert(remote.end(), args.begin(), args.end());
            auto here = runProcess(local, milliseconds(60000));
            auto there = runProcess(withBucket(remote), milliseconds(60000));
            ASSERT_TRUE(here.status && here.status->isExit(0)) << here.err;
            ASSERT_TRUE(there.status && there.status->isExit(0)) << there.err;
            EXPECT_GE(here.out.size(), 7'000'000u) << row.id << direction;
            EXPECT_TRUE(there.out == here.out) << row.id << " " << direction;
        }
    // A lost state directory: the multipart objects are adopted (radosgw keeps no checksum:
    // read back), none put again.
    auto before = c.listVersions(bucket, "gw-test/");
    ASSERT_TRUE(before);
    std::filesystem::remove_all(stateDir_);
    auto again = runProcess(archiveArgs(auditDir_, stateDir_, bucket, longer), milliseconds(120000));
    ASSERT_TRUE(again.status && again.status->isExit(0)) << again.err;
    auto after = c.listVersions(bucket, "gw-test/");
    ASSERT_TRUE(after);
    EXPECT_EQ(after->size(), before->size());
    expectBucketMatchesTheLog(c, bucket, auditDir_, stateDir_);
}

// --lock-days 1, the bucket's default too: radosgw locks each multipart object by the default,
// counted from its completion, a few seconds later than the lock asked (accepted: longer). A
// lost state directory must then adopt the manifest's retain-until, not the data object's, or
// the manifest would differ: a false alarm.
TEST_F(ArchiveMultipartRadosgwTest, ALostStateAdoptsSegmentsTheServerLockedLonger) {
    auto c = client();
    auto bucket = lockedBucket(c);
    auto first = runProcess(archiveArgs(auditDir_, stateDir_, bucket, parts()), milliseconds(120000));
    ASSERT_TRUE(first.status && first.status->isExit(0)) << first.err;
    auto before = c.listVersions(bucket, "gw-test/");
    ASSERT_TRUE(before);
    std::filesystem::remove_all(stateDir_);
    auto again = runProcess(archiveArgs(auditDir_, stateDir_, bucket, parts()), milliseconds(120000));
    ASSERT_TRUE(again.status && again.status->isExit(0)) << again.out << again.err;
    auto after = c.listVersions(bucket, "gw-test/");
    ASSERT_TRUE(after);
    EXPECT_EQ(after->size(), before->size());
    expectBucketMatchesTheLog(c, bucket, auditDir_, stateDir_);
}

// Restarted with another --s3-part-mb between the upload and the verification (the states put
// back to uploaded): radosgw keeps no checksum, so every version is read back and its CRC-32C
// confirmed; a state whose recorded CRC is not the object's fails, naming the read back.
TEST_F(ArchiveMultipartRadosgwTest, AnotherPartSizeBeforeVerificationStillConfirmsTheCrc) {
    auto c = client();
    auto bucket = lockedBucket(c);
    auto first = runProcess(archiveArgs(auditDir_, stateDir_, bucket, parts()), milliseconds(120000));
    ASSERT_TRUE(first.status && first.status->isExit(0)) << first.err;
    auto rewind = [&](bool damage) {
        archive::UploadStateStore states(stateDir_);
        for (const auto& files : sealedSegments(auditDir_)) {
            auto state = states.load(files.worker, files.segment);
            ASSERT_TRUE(state);
            for (const auto& object : state->objects)  // the cut each went up with
                EXPECT_EQ(object.partBytes,
                          std::optional<std::uint64_t>(object.size > (5u << 20) ? 5u << 20 : 0))
                    << object.key;
            state->phase = archive::UploadPhase::Uploaded;
            if (damage) state->objects.at(0).crc32c ^= 1;
            std::ofstream(stateDir_ + "/" + archive::stateFileName(files.worker, files.segment),
                          std::ios::trunc) << archive::encode(*state);
        }
    };
    rewind(false);
    auto other = runProcess(archiveArgs(auditDir_, stateDir_, bucket, {{"--s3-part-mb", "6"}}),
                            milliseconds(120000));
    ASSERT_TRUE(other.status && other.status->isExit(0)) << other.err;
    expectBucketMatchesTheLog(c, bucket, auditDir_, stateDir_);
    rewind(true);
    auto damaged = runProcess(archiveArgs(auditDir_, stateDir_, bucket, {{"--s3-part-mb", "6"}}),
                              milliseconds(120000));
    auto said = damaged.out + damaged.err;
    EXPECT_TRUE(damaged.status && damaged.status->isExit(1)) << said;
    EXPECT_NE(said.find(": CRC-32C read back "), std::string::npos) << said;
    archive::UploadStateStore states(stateDir_);
    for (const auto& files : sealedSegments(auditDir_))
        EXPECT_EQ(states.load(files.worker, files.segment)->phase, archive::UploadPhase::Uploaded);
}

// kill -9 while parts are going up (slowed by the rate cap): the parts stay on the server until
// the next run, which aborts them at its start and ships the segment again.
TEST_F(ArchiveMultipartRadosgwTest, KillNineDuringAMultipartUploadLeavesNoPartsBehind) {
    auto c = client();
    auto bucket = lockedBucket(c);
    auto args = archiveArgs(auditDir_, stateDir_, bucket,
                            {{"--s3-part-mb", "5"}, {"--max-rate-mbps", "40"}});
    std::vector<char*> argv;
    for (const auto& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    pid_t pid = 0;
    ASSERT_EQ(posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ), 0);
    bool seen = eventually([&] { return !unfinished(c, bucket).empty(); }, milliseconds(30000));
    if (seen) std::this_thread::sleep_for(milliseconds(300));  // a part under way
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(seen) << "no multipart upload was ever listed";
    auto left = unfinished(c, bucket);
    ASSERT_FALSE(left.empty()) << "the kill came after the upload completed";
    auto last = runProcess(archiveArgs(auditDir_, stateDir_, bucket, parts()), milliseconds(120000));
    ASSERT_TRUE(last.status && last.status->isExit(0)) << last.err;
    auto said = last.out + last.err;
    EXPECT_NE(said.find("aborted " + std::to_string(left.size()) + " unfinished multipart upload"),
              std::string::npos)
        << said;
    EXPECT_TRUE(unfinished(c, bucket).empty());
    expectBucketMatchesTheLog(c, bucket, auditDir_, stateDir_);
}

TEST_F(ArchiveRadosgwTest, BadInputIsOneLineAndExitTwo) {
    TempDir other;
    auto loose = other.write("credentials", "[default]\naws_access_key_id = a\naws_secret_access_key = b\n");
    ::chmod(loose.c_str(), 0644);
    const std::map<std::string, std::string> cases[] = {
        {{"--s3-credentials-file", loose}},
        {{"--lock-days", "0"}},
        {{"--s3-endpoint", "ftp://127.0.0.1"}},
        {{"--unknown-option", ""}},
        {{"--s3-part-mb", "4"}},
    };
    for (const auto& overrides : cases) {
        auto name = overrides.begin()->first;
        auto result = runProcess(archiveArgs(auditDir_, stateDir_, "bucket", overrides),
                                 milliseconds(20000));
        ASSERT_TRUE(result.status) << name;
        EXPECT_TRUE(result.status->isExit(2)) << name << ": " << result.err;
        EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
        EXPECT_EQ(result.err.rfind("splicegate-archive: ", 0), 0u) << result.err;
        if (name == "--s3-part-mb") {
            EXPECT_NE(result.err.find("--s3-part-mb 4: must be 0"), std::string::npos) << result.err;
        }
        if (name == "--s3-credentials-file") {
            EXPECT_NE(result.err.find(loose), std::string::npos) << result.err;
        }
    }
}

}  // namespace
}  // namespace splicegate::test
