// splicegate-audit extract, export and list on s3://BUCKET/PREFIX against a real S3 server
// (Ceph radosgw, fixture s3_server), the bucket filled by the real splicegate-archive: the
// bytes and captures read from the bucket are a local extract's and export's, byte for byte,
// for a real daemon's log and for a connection that spans two segments in two hour folders;
// list --since/--until reads only the segments that can hold matching connections and still
// gives the rows of an unpruned list; a corrupted or missing object is exit 1 naming its key,
// and bad input exits as it does locally.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <sys/stat.h>
#include <vector>

#include "archive/s3/S3Client.h"
#include "audit/Crc32c.h"
#include "audit/Records.h"
#include "tests/s3/ArchiveTestSupport.h"
#include "tests/s3/S3TestServer.h"
#include "tests/support/AuditSegmentBuilder.h"
#include "tests/support/AuditSupport.h"
#include "tests/support/ControlPlaneDaemon.h"
#include "tests/support/Daemon.h"
#include "tests/support/TestServer.h"
#include "tests/support/Traffic.h"

namespace splicegate::test {
namespace {

// Ships every sealed segment of `auditDir` under PREFIX gw-test with the real archiver.
void archive(const std::string& auditDir, const std::string& stateDir, const std::string& bucket) {
    auto shipped = runProcess(archiveArgs(auditDir, stateDir, bucket), milliseconds(120000));
    ASSERT_TRUE(shipped.status && shipped.status->isExit(0)) << shipped.out << shipped.err;
}

// splicegate-audit COMMAND SOURCE ARGS..., with the bucket's options when SOURCE is s3://.
ProcessResult audit(const std::string& command, const std::string& source,
                    std::vector<std::string> args = {}) {
    std::vector<std::string> argv = {auditToolBinary(), command, source};
    argv.insert(argv.end(), args.begin(), args.end());
    if (source.starts_with("s3://"))
        argv.insert(argv.end(), {"--s3-endpoint", s3Endpoint(), "--s3-credentials-file",
                                 s3CredentialsFile()});
    return runTool(argv, milliseconds(60000));
}

// The same command on the directory and on the bucket: the same exit status and stdout.
void expectSameOutput(const std::string& command, const std::string& dir, const std::string& url,
                      const std::vector<std::string>& args, int exitCode = 0) {
    auto local = audit(command, dir, args);
    auto remote = audit(command, url, args);
    ASSERT_TRUE(local.status && local.status->isExit(exitCode)) << local.err;
    ASSERT_TRUE(remote.status && remote.status->isExit(exitCode)) << remote.err;
    EXPECT_TRUE(remote.out == local.out)
        << command << " " << testing::PrintToString(args) << ": " << remote.out.size()
        << " bytes from the bucket, " << local.out.size() << " locally";
}

std::vector<std::uint64_t> connectionIds(const std::string& dir) {
    auto listing = auditList(dir);
    EXPECT_TRUE(listing.ok()) << listing.describe();
    std::vector<std::uint64_t> ids;
    for (const auto& row : listing.rows) ids.push_back(row.id);
    std::sort(ids.begin(), ids.end());
    return ids;
}

// 2026-01-01T09:59:30Z and times after it.
constexpr std::int64_t kSecond = 1'000'000'000;
constexpr std::int64_t kT0 = 1'767'261'570 * kSecond;

// One crafted segment with chunks whose payload CRCs are recorded.
class Segment {
  public:
    Segment(std::string dir, unsigned worker, std::uint64_t segment, std::int64_t createdNs)
        : dir_(std::move(dir)), worker_(worker), segment_(segment) {
        audit::encodeSegmentStart(index_, worker, segment, createdNs, 0);
    }
    Segment& open(std::uint64_t id, std::int64_t timeNs) {
        audit::encodeOpen(index_, id, timeNs, "web", "198.51.100." + std::to_string(id) + ":4000",
                          "192.0.2.1:443");
        return *this;
    }
    Segment& chunk(std::uint64_t id, std::uint8_t direction, const std::string& payload,
                   std::int64_t timeNs) {
        audit::encodeChunk(index_, id, direction, static_cast<std::uint32_t>(payload.size()),
                           data_.size(), timeNs,
                           audit::crc32c(0, payload.data(), payload.size()));
        data_ += payload;
        return *this;
    }
    Segment& close(std::uint64_t id, std::int64_t timeNs, std::uint64_t c2u, std::uint64_t u2c) {
        audit::encodeClose(index_, id, timeNs, c2u, u2c, "client closed");
        return *this;
    }
    void write() {
        sealChained(index_, data_.size(), dir_, worker_, segment_);
        auto base = dir_ + "/" + audit::segmentBaseName(worker_, segment_);
        SegmentBuilder::writeFile(base + ".data", data_);
        SegmentBuilder::writeFile(base + ".index", index_);
    }

  private:
    std::string dir_;
    unsigned worker_;
    std::uint64_t segment_;
    std::string index_;
    std::string data_;
};

std::string bytes(char seed, std::size_t size) {
    std::string out(size, '\0');
    for (std::size_t i = 0; i < size; ++i) out[i] = static_cast<char>(seed + i * 7 % 251);
    return out;
}

class AuditArchiveReadTest : public ::testing::Test {
  protected:
    void SetUp() override {
        ASSERT_FALSE(s3ServerDir().empty()) << "SPLICEGATE_S3_SERVER_DIR is not set (fixture s3_server)";
    }
    // The key of the one object under gw-test/segments/ whose name ends with `ending`.
    std::string keyEnding(s3::S3Client& c, const std::string& bucket, const std::string& ending) {
        auto listed = c.list(bucket, "gw-test/segments/");
        EXPECT_TRUE(listed) << listed.error.message;
        std::vector<std::string> keys;
        for (const auto& entry : *listed)
            if (entry.key.ends_with(ending)) keys.push_back(entry.key);
        EXPECT_EQ(keys.size(), 1u) << ending;
        return keys.empty() ? std::string() : keys.front();
    }
    TempDir root_;
    std::string auditDir_ = root_.path() + "/audit";
    std::string stateDir_ = root_.path() + "/state";
};

// A real daemon's log (two runs, two workers): every connection's two directions and the
// captures, whole and per connection, are the local ones.
TEST_F(AuditArchiveReadTest, ExtractAndExportOfARealDaemonsLogEqualTheLocalOnes) {
    makeAuditLog(auditDir_, 3, 400'000);
    auto c = s3TestClient();
    auto bucket = lockedBucket(c);
    archive(auditDir_, stateDir_, bucket);
    const std::string url = "s3://" + bucket + "/gw-test";
    auto ids = connectionIds(auditDir_);
    ASSERT_EQ(ids.size(), 6u);
    for (auto id : ids)
        for (const char* direction : {"c2u", "u2c"})
            expectSameOutput("extract", auditDir_, url,
                             {"--connection", std::to_string(id), "--direction", direction});
    expectSameOutput("export", auditDir_, url, {"--pcap", "-"});
    expectSameOutput("export", auditDir_, url,
                     {"--pcap", "-", "--connection", std::to_string(ids[1])});
    // An unknown connection: exit 1 and no output, as locally.
    expectSameOutput("extract", auditDir_, url, {"--connection", "999999", "--direction", "c2u"}, 1);
    expectSameOutput("export", auditDir_, url, {"--pcap", "-", "--connection", "999999"}, 1);
    auto unknown = audit("extract", url, {"--connection", "999999", "--direction", "c2u"});
    EXPECT_NE(unknown.err.find("no connection 999999 in " + url), std::string::npos) << unknown.err;
}

// Worker 0: segment 1 (08:30, connection 5), segment 2 (09:59:30, connection 1 opens with 70,000
// bytes c2u), segment 3 (10:00:10, the next hour's folder: connection 1 goes on both ways and
// closes at 10:30; connection 3 at 10:20), segment 4 (11:00:05, connection 4). Worker 1:
// connection 6 opens in segment 1 (09:00), sends in segment 2 (09:30) and closes at 10:15 in
// segment 3 (10:05): a window from 10:10 starts after segment 2, so its Open is two segments back.
class SpanningLogTest : public AuditArchiveReadTest {
  protected:
    void SetUp() override {
        AuditArchiveReadTest::SetUp();
        ASSERT_EQ(::mkdir(auditDir_.c_str(), 0700), 0);
        const std::int64_t t830 = kT0 - 89 * 60 * kSecond - 30 * kSecond;
        Segment(auditDir_, 0, 1, t830)
            .open(5, t830 + kSecond)
            .chunk(5, audit::kDirectionC2U, bytes('e', 900), t830 + 2 * kSecond)
            .close(5, t830 + 3 * kSecond, 900, 0)
            .write();
        Segment(auditDir_, 0, 2, kT0)
            .open(1, kT0 + kSecond)
            .chunk(1, audit::kDirectionC2U, c2u_.substr(0, 70000), kT0 + 2 * kSecond)
            .write();
        const std::int64_t t1000 = kT0 + 40 * kSecond;
        Segment(auditDir_, 0, 3, t1000)
            .chunk(1, audit::kDirectionU2C, u2c_, t1000 + kSecond)
            .chunk(1, audit::kDirectionC2U, c2u_.substr(70000), t1000 + 2 * kSecond)
            .open(3, t1000 + 20 * 60 * kSecond)
            .chunk(3, audit::kDirectionU2C, bytes('x', 5000), t1000 + 20 * 60 * kSecond)
            .close(3, t1000 + 21 * 60 * kSecond, 0, 5000)
            .close(1, t1000 + 30 * 60 * kSecond, c2u_.size(), u2c_.size())
            .write();
        const std::int64_t t1100 = kT0 + (60 * 60 + 35) * kSecond;
        Segment(auditDir_, 0, 4, t1100)
            .open(4, t1100 + kSecond)
            .chunk(4, audit::kDirectionC2U, bytes('y', 300), t1100 + kSecond)
            .close(4, t1100 + 2 * kSecond, 300, 0)
            .write();
        const std::int64_t t900 = kT0 - 59 * 60 * kSecond - 30 * kSecond;
        Segment(auditDir_, 1, 1, t900)
            .open(6, t900 + kSecond)
            .chunk(6, audit::kDirectionC2U, bytes('z', 1234), t900 + 2 * kSecond)
            .write();
        const std::int64_t t930 = t900 + 30 * 60 * kSecond;
        Segment(auditDir_, 1, 2, t930)
            .chunk(6, audit::kDirectionC2U, bytes('w', 777), t930 + kSecond)
            .write();
        const std::int64_t t1005 = kT0 + 5 * 60 * kSecond + 30 * kSecond;
        Segment(auditDir_, 1, 3, t1005).close(6, kT0 + 16 * 60 * kSecond, 1234 + 777, 0).write();
        bucket_ = lockedBucket(c_);
        archive(auditDir_, stateDir_, bucket_);
        url_ = "s3://" + bucket_ + "/gw-test";
    }
    // Replaces the object (a new version) under the key ending with `ending` by `content`.
    void overwrite(const std::string& ending, const std::string& content) {
        s3::PutRequest put;
        put.bucket = bucket_;
        put.key = keyEnding(c_, bucket_, ending);
        put.body = content;
        auto done = c_.put(put);
        ASSERT_TRUE(done) << done.error.message;
    }
    std::string c2u_ = bytes('a', 100000);
    std::string u2c_ = bytes('c', 12345);
    s3::S3Client c_ = s3TestClient();
    std::string bucket_;
    std::string url_;
};

TEST_F(SpanningLogTest, AConnectionAcrossTwoSegmentsAndHoursExtractsAndExportsAsLocally) {
    for (const char* direction : {"c2u", "u2c"}) {
        auto local = audit("extract", auditDir_, {"--connection", "1", "--direction", direction});
        ASSERT_TRUE(local.status && local.status->isExit(0)) << local.err;
        EXPECT_EQ(local.out, direction == std::string("c2u") ? c2u_ : u2c_);
        expectSameOutput("extract", auditDir_, url_, {"--connection", "1", "--direction", direction});
    }
    expectSameOutput("export", auditDir_, url_, {"--pcap", "-"});
    expectSameOutput("export", auditDir_, url_, {"--pcap", "-", "--connection", "1"});
    expectSameOutput("export", auditDir_, url_,
                     {"--pcap", "-", "--since", "2026-01-01T10:10:00Z", "--until",
                      "2026-01-01T10:40:00Z"});
    // -o FILE writes the same bytes.
    const std::string file = root_.file("c2u.bin");
    auto toFile = audit("extract", url_, {"--connection", "1", "--direction", "c2u", "-o", file});
    ASSERT_TRUE(toFile.status && toFile.status->isExit(0)) << toFile.err;
    EXPECT_TRUE(readFile(file) == c2u_);
    // Bad input exits as locally: 2 for usage, one line naming the option.
    expectSameOutput("extract", auditDir_, url_, {"--connection", "1", "--direction", "up"}, 2);
    expectSameOutput("export", auditDir_, url_,
                     {"--pcap", "-", "--since", "2026-01-01T11:00:00Z", "--until",
                      "2026-01-01T10:00:00Z"},
                     2);
    expectSameOutput("extract", auditDir_, url_, {"--connection", "x1", "--direction", "c2u"}, 2);
}

TEST_F(SpanningLogTest, SinceAndUntilReadOnlyTheSegmentsThatCanMatchAndGiveTheSameRows) {
    const std::vector<std::vector<std::string>> windows = {
        {"--since", "2026-01-01T10:10:00Z", "--until", "2026-01-01T10:40:00Z"},
        {"--since", "2026-01-01T10:14:00Z"},
        {"--until", "2026-01-01T09:59:45Z"},
        {"--since", "2026-01-01T10:00:00Z", "--until", "2026-01-01T10:00:30Z"},
        {"--since", "2026-01-01T08:00:00Z", "--until", "2026-01-01T08:40:00Z"}};
    // The table (sorted by id; a directory's JSON streams in its log's order, the bucket's by id).
    for (const auto& window : windows) expectSameOutput("list", auditDir_, url_, window);
    // Segments 1 and 4 cannot hold a connection open between 10:10 and 10:40: with their
    // connections objects damaged, the pruned list still equals the local one, the unpruned
    // list names both.
    overwrite("-w00-0000000001.connections.jsonl.gz", "not gzip");
    overwrite("-w00-0000000004.connections.jsonl.gz", "not gzip");
    expectSameOutput("list", auditDir_, url_, windows[0]);
    auto whole = audit("list", url_);
    ASSERT_TRUE(whole.status);
    EXPECT_TRUE(whole.status->isExit(1)) << whole.err;
    EXPECT_NE(whole.err.find("w00-0000000001.connections.jsonl.gz"), std::string::npos) << whole.err;
    EXPECT_NE(whole.err.find("w00-0000000004.connections.jsonl.gz"), std::string::npos) << whole.err;
}

// extract's --since/--until: the connections objects read are pruned as list's are, so those of
// segments 1 and 4 (nothing of them can be open between 10:10 and 10:40) damaged do not matter;
// the bytes are the local extract's, also of worker 1's connection 6 whose Open is two segments
// before the window; a connection not open in the window is not found.
TEST_F(SpanningLogTest, ExtractWithSinceAndUntilReadsOnlyTheSegmentsThatCanHoldIt) {
    overwrite("-w00-0000000001.connections.jsonl.gz", "not gzip");
    overwrite("-w00-0000000004.connections.jsonl.gz", "not gzip");
    const std::vector<std::string> window = {"--since", "2026-01-01T10:10:00Z", "--until",
                                             "2026-01-01T10:40:00Z"};
    auto hinted = [&](std::vector<std::string> args, const std::vector<std::string>& times) {
        args.insert(args.end(), times.begin(), times.end());
        return audit("extract", url_, args);
    };
    for (const char* direction : {"c2u", "u2c"}) {
        const std::vector<std::string> args = {"--connection", "1", "--direction", direction};
        auto local = audit("extract", auditDir_, args);
        ASSERT_TRUE(local.status && local.status->isExit(0)) << local.err;
        auto pruned = hinted(args, window);
        ASSERT_TRUE(pruned.status && pruned.status->isExit(0)) << pruned.err;
        EXPECT_TRUE(pruned.out == local.out) << direction;
        EXPECT_TRUE(pruned.err.empty()) << pruned.err;
    }
    const std::vector<std::string> six = {"--connection", "6", "--direction", "c2u"};
    auto local6 = audit("extract", auditDir_, six);
    ASSERT_TRUE(local6.status && local6.status->isExit(0)) << local6.err;
    auto pruned6 = hinted(six, {"--since", "2026-01-01T10:10:00Z"});
    ASSERT_TRUE(pruned6.status && pruned6.status->isExit(0)) << pruned6.err;
    EXPECT_TRUE(pruned6.out == local6.out);

    // Unpruned, a search for a connection that is nowhere reads the damaged objects and names
    // one; pruned, they are not read.
    const std::vector<std::string> unknown = {"--connection", "999999", "--direction", "c2u"};
    auto everywhere = audit("extract", url_, unknown);
    ASSERT_TRUE(everywhere.status && everywhere.status->isExit(1)) << everywhere.err;
    EXPECT_NE(everywhere.err.find(".connections.jsonl.gz"), std::string::npos) << everywhere.err;
    auto inWindow = hinted(unknown, window);
    ASSERT_TRUE(inWindow.status && inWindow.status->isExit(1)) << inWindow.err;
    EXPECT_NE(inWindow.err.find("no connection 999999 in " + url_ + " open between --since and --until"),
              std::string::npos)
        << inWindow.err;
    EXPECT_EQ(inWindow.err.find(".connections.jsonl.gz"), std::string::npos) << inWindow.err;
    // Connection 4 (11:00) was not open in the window.
    auto outside = hinted({"--connection", "4", "--direction", "c2u"}, window);
    ASSERT_TRUE(outside.status && outside.status->isExit(1)) << outside.err;
    EXPECT_NE(outside.err.find("no connection 4 in "), std::string::npos) << outside.err;
    EXPECT_TRUE(outside.out.empty());
    // The hint is the archive's: with a directory, or reversed, a usage error.
    auto onDir = audit("extract", auditDir_, {"--connection", "1", "--direction", "c2u", "--since",
                                              "2026-01-01T10:10:00Z"});
    ASSERT_TRUE(onDir.status && onDir.status->isExit(2)) << onDir.err;
    EXPECT_NE(onDir.err.find("--since/--until"), std::string::npos) << onDir.err;
    auto reversed = hinted({"--connection", "1", "--direction", "c2u"},
                           {"--since", "2026-01-01T11:00:00Z", "--until", "2026-01-01T10:00:00Z"});
    ASSERT_TRUE(reversed.status && reversed.status->isExit(2)) << reversed.err;
}

TEST_F(SpanningLogTest, ADamagedOrMissingObjectIsExitOneNamingItsKey) {
    // A byte of connection 1's first chunk changed in the bucket: its payload CRC fails.
    std::string data = c2u_.substr(0, 70000);
    data[1000] = static_cast<char>(data[1000] ^ 0x20);
    overwrite("-w00-0000000002.data", data);
    const std::string dataKey = keyEnding(c_, bucket_, "-w00-0000000002.data");
    auto damaged = audit("extract", url_, {"--connection", "1", "--direction", "c2u"});
    ASSERT_TRUE(damaged.status);
    EXPECT_TRUE(damaged.status->isExit(1)) << damaged.err;
    EXPECT_NE(damaged.err.find("s3://" + bucket_ + "/" + dataKey), std::string::npos) << damaged.err;
    EXPECT_NE(damaged.err.find("CRC-32C"), std::string::npos) << damaged.err;
    EXPECT_EQ(damaged.err.find("splicegate-audit-s3."), std::string::npos) << damaged.err;
    // --force extracts it anyway, naming it.
    auto forced = audit("extract", url_, {"--connection", "1", "--direction", "c2u", "--force"});
    ASSERT_TRUE(forced.status && forced.status->isExit(0)) << forced.err;
    EXPECT_EQ(forced.out, data + c2u_.substr(70000));
    EXPECT_NE(forced.err.find(dataKey), std::string::npos) << forced.err;
    // The other direction does not read that chunk.
    expectSameOutput("extract", auditDir_, url_, {"--connection", "1", "--direction", "u2c"});
    // The index object of segment 3 deleted (a delete marker): named, exit 1.
    const std::string indexKey = keyEnding(c_, bucket_, "-w00-0000000003.index");
    auto removed = c_.deleteObject(bucket_, indexKey);
    ASSERT_TRUE(removed) << removed.error.message;
    for (const std::string command : {"extract", "export"}) {
        auto missing = command == "extract"
                           ? audit(command, url_, {"--connection", "1", "--direction", "u2c"})
                           : audit(command, url_, {"--pcap", root_.file("x.pcap")});
        ASSERT_TRUE(missing.status);
        EXPECT_TRUE(missing.status->isExit(1)) << missing.err;
        EXPECT_NE(missing.err.find("s3://" + bucket_ + "/" + indexKey), std::string::npos)
            << missing.err;
        EXPECT_EQ(textLines(missing.err).size(), 1u) << missing.err;
    }
}

}  // namespace
}  // namespace splicegate::test
