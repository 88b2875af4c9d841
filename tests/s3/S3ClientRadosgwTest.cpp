// The S3 client (archive/s3/S3Client.h) against a real S3 server: Ceph radosgw started by the
// CTest fixture s3_server (tests/s3/radosgw.sh, on 127.0.0.1). Object Lock as the archive uses
// it (COMPLIANCE default retention, per-object lock headers, refused deletes and shortening),
// ranged reads, listings with pagination, a PUT streamed from a file range, signing of awkward
// keys, a wrong secret, the retry bound on a closed port, the upload rate cap, and connections
// kept between requests over http and https (the server still verified).
#include <gtest/gtest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "archive/s3/S3Client.h"
#include "audit/Crc32c.h"
#include "tests/s3/S3TestServer.h"

namespace splicegate::s3 {
namespace {

using test::s3CredentialsFile;
using test::s3Endpoint;
using test::s3ServerDir;

ClientOptions serverOptions() {
    ClientOptions options;
    options.endpoint = s3Endpoint();
    options.retries = 2;
    options.timeoutMs = 30000;
    return options;
}

S3Client client() {
    return S3Client(serverOptions(), loadCredentials(s3CredentialsFile()));
}

// Bucket names unique per test and run: tests run in parallel against one server.
std::string bucketName(const std::string& what) {
    static std::atomic<int> counter{0};
    return "sg-" + what + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

std::string rfc3339(std::chrono::system_clock::time_point t) {
    std::time_t s = std::chrono::system_clock::to_time_t(t);
    std::tm tm{};
    ::gmtime_r(&s, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

std::string pattern(std::size_t size, unsigned seed) {
    std::string out(size, '\0');
    std::uint32_t x = seed * 2654435761u + 1;
    for (auto& c : out) {
        x = x * 1103515245u + 12345u;
        c = static_cast<char>(x >> 24);
    }
    return out;
}

std::string lockedBucket(S3Client& c, const std::string& what) {
    std::string bucket = bucketName(what);
    auto created = c.createBucket(bucket, true);
    EXPECT_TRUE(created) << created.error.message;
    auto retention = c.putDefaultRetention(bucket, "COMPLIANCE", 1);
    EXPECT_TRUE(retention) << retention.error.message;
    return bucket;
}

class S3ClientRadosgwTest : public ::testing::Test {
protected:
    void SetUp() override {
        if (s3ServerDir().empty() || s3Endpoint().empty())
            FAIL() << "no S3 server: run through ctest (fixture s3_server) or set SPLICEGATE_S3_SERVER_DIR";
    }
};

TEST_F(S3ClientRadosgwTest, LockedPutReadsBackSizeVersionAndRetention) {
    S3Client c = client();
    std::string bucket = lockedBucket(c, "lock");
    std::string body = pattern(10000, 1);
    std::string until = rfc3339(std::chrono::system_clock::now() + std::chrono::hours(24));
    PutRequest put;
    put.bucket = bucket;
    put.key = "segments/000001.seg";
    put.body = body;
    put.crc32c = audit::crc32c(0, body.data(), body.size());
    put.lockMode = "COMPLIANCE";
    put.retainUntil = until;
    put.contentType = "application/octet-stream";
    auto stored = c.put(put);
    ASSERT_TRUE(stored) << stored.error.message;
    EXPECT_FALSE(stored->versionId.empty());
    EXPECT_FALSE(stored->etag.empty());
    EXPECT_EQ(stored->size, body.size());

    auto head = c.head(bucket, put.key);
    ASSERT_TRUE(head) << head.error.message;
    EXPECT_EQ(head->size, body.size());
    EXPECT_EQ(head->versionId, stored->versionId);
    EXPECT_EQ(head->etag, stored->etag);

    auto retention = c.getRetention(bucket, put.key, stored->versionId);
    ASSERT_TRUE(retention) << retention.error.message;
    EXPECT_EQ(retention->lockMode, "COMPLIANCE");
    EXPECT_EQ(retention->retainUntil.substr(0, 19), until.substr(0, 19)) << retention->retainUntil;
    if (!head->lockMode.empty()) {
        EXPECT_EQ(head->lockMode, "COMPLIANCE");
    }

    auto whole = c.get(bucket, put.key);
    ASSERT_TRUE(whole) << whole.error.message;
    EXPECT_EQ(*whole, body);
}

TEST_F(S3ClientRadosgwTest, MissingObjectIs404) {
    S3Client c = client();
    std::string bucket = bucketName("missing");
    ASSERT_TRUE(c.createBucket(bucket, false));
    auto head = c.head(bucket, "nothing-here");
    ASSERT_FALSE(head);
    EXPECT_EQ(head.error.httpStatus, 404);
    EXPECT_EQ(head.error.attempts, 1u);   // a 4xx is not retried
    EXPECT_NE(head.error.message.find(bucket + "/nothing-here"), std::string::npos) << head.error.message;
    auto get = c.get(bucket, "nothing-here");
    ASSERT_FALSE(get);
    EXPECT_EQ(get.error.code, "NoSuchKey");
}

TEST_F(S3ClientRadosgwTest, RangedGetReturnsExactlyTheRange) {
    S3Client c = client();
    std::string bucket = bucketName("range");
    ASSERT_TRUE(c.createBucket(bucket, false));
    std::string body = pattern(70000, 2);
    PutRequest put;
    put.bucket = bucket;
    put.key = "r";
    put.body = body;
    ASSERT_TRUE(c.put(put));
    auto part = c.get(bucket, "r", std::pair<std::uint64_t, std::uint64_t>{1000, 65999});
    ASSERT_TRUE(part) << part.error.message;
    EXPECT_EQ(*part, body.substr(1000, 65000));
    auto last = c.get(bucket, "r", std::pair<std::uint64_t, std::uint64_t>{69999, 69999});
    ASSERT_TRUE(last) << last.error.message;
    EXPECT_EQ(*last, body.substr(69999));
}

TEST_F(S3ClientRadosgwTest, ListingsFollowPagination) {
    S3Client c = client();
    std::string bucket = bucketName("list");
    ASSERT_TRUE(c.createBucket(bucket, true));   // object lock implies versioning
    for (int i = 0; i < 5; ++i) {
        PutRequest put;
        put.bucket = bucket;
        put.key = "p/" + std::to_string(i);
        std::string body(static_cast<std::size_t>(i + 1), 'x');
        put.body = body;
        ASSERT_TRUE(c.put(put));
    }
    PutRequest other;
    other.bucket = bucket;
    other.key = "q/other";
    other.body = "y";
    ASSERT_TRUE(c.put(other));
    ASSERT_TRUE(c.put(other));   // a second version

    auto listed = c.list(bucket, "p/", 2);
    ASSERT_TRUE(listed) << listed.error.message;
    ASSERT_EQ(listed->size(), 5u);
    for (std::size_t i = 0; i < 5; ++i) {
        EXPECT_EQ((*listed)[i].key, "p/" + std::to_string(i));
        EXPECT_EQ((*listed)[i].size, i + 1);
        EXPECT_FALSE((*listed)[i].etag.empty());
    }
    auto all = c.list(bucket, "");
    ASSERT_TRUE(all);
    EXPECT_EQ(all->size(), 6u);

    auto versions = c.listVersions(bucket, "", 2);
    ASSERT_TRUE(versions) << versions.error.message;
    ASSERT_EQ(versions->size(), 7u);
    int latest = 0;
    for (const auto& v : *versions) {
        EXPECT_FALSE(v.versionId.empty()) << v.key;
        latest += v.isLatest ? 1 : 0;
    }
    EXPECT_EQ(latest, 6);
}

TEST_F(S3ClientRadosgwTest, LockedObjectResistsDeleteShorteningAndBucketDelete) {
    S3Client c = client();
    std::string bucket = lockedBucket(c, "worm");
    PutRequest put;
    put.bucket = bucket;
    put.key = "sealed";
    put.body = "sealed segment";
    put.lockMode = "COMPLIANCE";
    put.retainUntil = rfc3339(std::chrono::system_clock::now() + std::chrono::hours(48));
    auto stored = c.put(put);
    ASSERT_TRUE(stored) << stored.error.message;

    auto deleted = c.deleteObject(bucket, "sealed", stored->versionId);
    ASSERT_FALSE(deleted);
    EXPECT_EQ(deleted.error.httpStatus, 403) << deleted.error.message;

    auto shorter = c.putRetention(bucket, "sealed", stored->versionId, "COMPLIANCE",
                                  rfc3339(std::chrono::system_clock::now() + std::chrono::hours(1)));
    ASSERT_FALSE(shorter);
    EXPECT_EQ(shorter.error.httpStatus, 403) << shorter.error.message;

    auto longer = c.putRetention(bucket, "sealed", stored->versionId, "COMPLIANCE",
                                 rfc3339(std::chrono::system_clock::now() + std::chrono::hours(72)));
    EXPECT_TRUE(longer) << longer.error.message;

    auto dropBucket = c.deleteBucket(bucket);
    ASSERT_FALSE(dropBucket);
    EXPECT_EQ(dropBucket.error.httpStatus, 409) << dropBucket.error.message;

    auto get = c.get(bucket, "sealed");
    ASSERT_TRUE(get) << get.error.message;
    EXPECT_EQ(*get, "sealed segment");
}

TEST_F(S3ClientRadosgwTest, PutStreamsAFileRange) {
    S3Client c = client();
    std::string bucket = bucketName("file");
    ASSERT_TRUE(c.createBucket(bucket, false));
    std::string content = pattern(300000, 3);
    char path[] = "/tmp/splicegate-s3-fileXXXXXX";
    int fd = ::mkstemp(path);
    ASSERT_GE(fd, 0);
    ::unlink(path);
    ASSERT_EQ(::write(fd, content.data(), content.size()), static_cast<ssize_t>(content.size()));
    PutRequest put;
    put.bucket = bucket;
    put.key = "from-file";
    put.file = FileRange{fd, 4096, 200000};
    auto stored = c.put(put);
    ASSERT_TRUE(stored) << stored.error.message;
    EXPECT_EQ(stored->size, 200000u);
    auto back = c.get(bucket, "from-file");
    ASSERT_TRUE(back) << back.error.message;
    EXPECT_EQ(*back, content.substr(4096, 200000));

    // A range past the end of the file is an error naming the key, not a short upload.
    put.key = "short";
    put.file = FileRange{fd, 250000, 100000};
    auto shortPut = c.put(put);
    ASSERT_FALSE(shortPut);
    EXPECT_NE(shortPut.error.message.find(bucket + "/short"), std::string::npos) << shortPut.error.message;
    ::close(fd);
}

TEST_F(S3ClientRadosgwTest, AwkwardKeysAreSignedAndStoredAsGiven) {
    S3Client c = client();
    std::string bucket = bucketName("keys");
    ASSERT_TRUE(c.createBucket(bucket, false));
    std::vector<std::string> keys = {"a b/c+d=e&f", "dir/./x/../y", "\xE1\x88\xB4-utf8", "tilde~_-.",
                                     "pct%41"};
    for (const auto& key : keys) {
        PutRequest put;
        put.bucket = bucket;
        put.key = key;
        put.body = key;
        auto stored = c.put(put);
        ASSERT_TRUE(stored) << stored.error.message;
        auto back = c.get(bucket, key);
        ASSERT_TRUE(back) << back.error.message;
        EXPECT_EQ(*back, key);
    }
    auto listed = c.list(bucket, "");
    ASSERT_TRUE(listed) << listed.error.message;
    std::vector<std::string> names;
    for (const auto& e : *listed) names.push_back(e.key);
    for (const auto& key : keys) EXPECT_NE(std::find(names.begin(), names.end(), key), names.end()) << key;
}

TEST_F(S3ClientRadosgwTest, WrongSecretIsSignatureDoesNotMatch) {
    Credentials wrong = loadCredentials(s3CredentialsFile());
    wrong.secretAccessKey += "x";
    S3Client c(serverOptions(), wrong);
    auto created = c.createBucket(bucketName("wrong"), false);
    ASSERT_FALSE(created);
    EXPECT_EQ(created.error.httpStatus, 403);
    EXPECT_EQ(created.error.code, "SignatureDoesNotMatch") << created.error.message;
    EXPECT_EQ(created.error.attempts, 1u);
    EXPECT_NE(created.error.message.find(serverOptions().endpoint), std::string::npos) << created.error.message;
    EXPECT_NE(created.error.message.find("PUT s3://sg-wrong-"), std::string::npos) << created.error.message;
}

TEST_F(S3ClientRadosgwTest, ClosedPortFailsAfterTheConfiguredRetries) {
    // A port that was just free: nothing listens, so every connect is refused at once.
    int s = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    socklen_t len = sizeof addr;
    ::getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len);
    ::close(s);
    ClientOptions options;
    options.endpoint = "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
    options.retries = 3;
    options.retryBaseMs = 50;
    options.retryMaxMs = 200;
    S3Client c(options, {"id", "secret"});
    auto start = std::chrono::steady_clock::now();
    auto head = c.head("b", "k");
    auto took = std::chrono::steady_clock::now() - start;
    ASSERT_FALSE(head);
    EXPECT_EQ(head.error.code, "transport");
    EXPECT_EQ(head.error.httpStatus, 0);
    EXPECT_EQ(head.error.attempts, 4u);
    EXPECT_NE(head.error.message.find("after 4 attempts"), std::string::npos) << head.error.message;
    EXPECT_NE(head.error.message.find(options.endpoint), std::string::npos) << head.error.message;
    EXPECT_LT(took, std::chrono::seconds(5));
}

TEST_F(S3ClientRadosgwTest, ParallelUploadsShareTheRateCap) {
    ClientOptions options = serverOptions();
    options.maxRateMbps = 8;   // 1 MB/s for all uploads together
    S3Client c(options, loadCredentials(s3CredentialsFile()));
    std::string bucket = bucketName("rate");
    ASSERT_TRUE(c.createBucket(bucket, false));
    std::string body = pattern(256 * 1024, 4);
    std::atomic<int> ok{0};
    auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> threads;
    for (int t = 0; t < 3; ++t)
        threads.emplace_back([&, t] {
            PutRequest put;
            put.bucket = bucket;
            put.key = "t" + std::to_string(t);
            put.body = body;
            auto r = c.put(put);
            if (r) ++ok;
            else ADD_FAILURE() << r.error.message;
        });
    for (auto& t : threads) t.join();
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(ok.load(), 3);
    // 768 KiB at 1 MB/s with a 100 KB burst: at least ~0.65 s; uncapped it takes milliseconds.
    EXPECT_GT(seconds, 0.6);
    EXPECT_LT(seconds, 10.0);
}

// The requests of one client go over one kept connection: the archiver's HEAD, PUT, HEAD and
// retention requests of a segment do not each connect.
TEST_F(S3ClientRadosgwTest, RequestsInARowShareOneKeptConnection) {
    S3Client c = client();
    std::string bucket = bucketName("keep");
    ASSERT_TRUE(c.createBucket(bucket, false));
    std::string body = pattern(3u << 20, 5);   // more than curl's 2 MiB upload buffer
    for (int i = 0; i < 4; ++i) {
        PutRequest put;
        put.bucket = bucket;
        put.key = "k" + std::to_string(i);
        put.body = body;
        auto stored = c.put(put);
        ASSERT_TRUE(stored) << stored.error.message;
        auto head = c.head(bucket, put.key);
        ASSERT_TRUE(head) << head.error.message;
        EXPECT_EQ(head->size, body.size());
    }
    auto back = c.get(bucket, "k3");
    ASSERT_TRUE(back) << back.error.message;
    EXPECT_EQ(*back, body);
    EXPECT_EQ(c.requestsSent(), 10u);
    EXPECT_EQ(c.connectionsOpened(), 1u);
}

// Over TLS the kept connection carries the requests as well, a file body among them, and a client
// without the fixture's CA is refused at once (no retry): keeping connections and sharing TLS
// sessions within a client do not get past verification.
TEST_F(S3ClientRadosgwTest, HttpsKeepsItsConnectionAndStillVerifiesTheServer) {
    ClientOptions options = serverOptions();
    options.endpoint = test::s3HttpsEndpoint();
    options.caFile = test::s3CaFile();
    S3Client c(options, loadCredentials(s3CredentialsFile()));
    std::string bucket = bucketName("tls");
    auto created = c.createBucket(bucket, false);
    ASSERT_TRUE(created) << created.error.message;
    std::string content = pattern((3u << 20) + 100, 6);
    char path[] = "/var/tmp/splicegate-s3-tlsXXXXXX";
    int fd = ::mkstemp(path);
    ASSERT_GE(fd, 0);
    ::unlink(path);
    ASSERT_EQ(::write(fd, content.data(), content.size()), static_cast<ssize_t>(content.size()));
    PutRequest put;
    put.bucket = bucket;
    put.key = "file";
    put.file = FileRange{fd, 0, content.size()};
    auto stored = c.put(put);
    ::close(fd);
    ASSERT_TRUE(stored) << stored.error.message;
    auto head = c.head(bucket, "file");
    ASSERT_TRUE(head) << head.error.message;
    auto back = c.get(bucket, "file");
    ASSERT_TRUE(back) << back.error.message;
    EXPECT_EQ(*back, content);
    EXPECT_EQ(c.requestsSent(), 4u);
    EXPECT_EQ(c.connectionsOpened(), 1u);

    ClientOptions untrusting = options;
    untrusting.caFile.clear();   // the system's store, which does not hold the fixture's CA
    S3Client other(untrusting, loadCredentials(s3CredentialsFile()));
    auto refused = other.head(bucket, "file");
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error.code, "tls") << refused.error.message;
    EXPECT_EQ(refused.error.attempts, 1u);
    auto again = other.head(bucket, "file");
    ASSERT_FALSE(again);
    EXPECT_EQ(again.error.code, "tls") << again.error.message;
}

}  // namespace
}  // namespace splicegate::s3
