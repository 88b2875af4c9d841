// The audit log against an attacker who can write the audit directory but does not hold the key
// (--audit-hmac-key-file). Each test takes a keyed log the real daemon wrote, makes one exact
// forgery as such an attacker would, and checks that `splicegate-audit verify --key-file` exits
// 1 naming what was forged (and, where a restart is part of the attack, that the daemon's
// recovery does not launder it). Logs are written by both writers (direct and splice): each
// records a payload CRC-32C.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "audit/AuditDirectory.h"
#include "audit/AuditReader.h"
#include "audit/Crc32c.h"
#include "audit/Records.h"
#include "common/UniqueFd.h"
#include "tests/support/AuditSegmentBuilder.h"
#include "tests/support/AuditSupport.h"
#include "tests/support/ControlPlaneDaemon.h"
#include "tests/support/Daemon.h"
#include "tests/support/HttpFetch.h"
#include "tests/support/Sockets.h"
#include "tests/support/TestServer.h"
#include "tests/support/Traffic.h"

namespace splicegate::test {
namespace {

namespace fs = std::filesystem;

// Segments the daemon writes: one connection each, then an audit-rotate.
constexpr std::uint64_t kSegments = 8;

std::string keyFile(const TempDir& dir, const std::string& name, char fill) {
    std::string path = dir.write(name, std::string(48, fill));
    ::chmod(path.c_str(), 0600);
    return path;
}

// A keyed log the daemon wrote with `writer`, and the digest of the last seal it logged.
struct WrittenLog {
    std::string dir;
    std::string lastDigest;
};

WrittenLog writeLog(const std::string& root, const std::string& writer, const std::string& key) {
    TestServer upstream(echoUpstream(milliseconds(30000)));
    WrittenLog log{root + "/audit-" + writer, {}};
    const uint16_t port = pickFreePort();
    const std::string socket = root + "/admin-" + writer + ".sock";
    Daemon daemon(relayArgs(port, {upstream.address()},
                            {"--audit-dir", log.dir, "--audit-hmac-key-file", key,
                             "--audit-writer", writer, "--admin-socket", socket, "--admin-group", "root"},
                            1));
    EXPECT_TRUE(daemon.waitReady(port)) << daemon.why();
    for (std::uint64_t i = 0; i < kSegments; ++i) {
        int error = 0;
        UniqueFd fd = connectTcp(port, error);
        EXPECT_TRUE(fd) << std::strerror(error);
        if (!fd) break;
        EXPECT_TRUE(echoRoundTrip(fd.get(), 100 + i, 20'000 + i, milliseconds(20000)));
        fd.reset();
        auto rotated = runTool({ctlBinaryPath(), "--socket", socket, "audit-rotate"});
        EXPECT_TRUE(rotated.status && rotated.status->isExit(0)) << describeProcess(rotated);
    }
    EXPECT_TRUE(daemon.terminate(milliseconds(20000))) << daemon.why();
    static const std::regex kSeal(R"(audit seal \S+ digest=([0-9a-f]{64}))");
    const std::string text = daemon.log();
    for (auto it = std::sregex_iterator(text.begin(), text.end(), kSeal);
         it != std::sregex_iterator(); ++it)
        log.lastDigest = (*it)[1];
    return log;
}

// What the attacker works on: a copy of a daemon-written log, by segment number (worker 0).
class Forgery {
  public:
    Forgery(const std::string& from, const std::string& to) : dir_(to) {
        fs::copy(from, to, fs::copy_options::recursive);
        for (const auto& files : audit::listSegments(dir_)) {
            if (files.worker != 0 || !files.hasIndex) continue;
            segments_.push_back(files);
        }
    }

    const std::string& dir() const { return dir_; }
    std::size_t size() const { return segments_.size(); }
    // The n-th segment of the log (0 = oldest).
    const audit::SegmentFiles& segment(std::size_t n) const { return segments_.at(n); }

    // Overwrites 16 payload bytes of the segment's first chunk. With `fixCrc`, the chunk record is
    // re-encoded with the CRC of the new payload (the record's own CRC too), as an attacker who
    // read FORMAT.md would.
    void editPayload(std::size_t n, bool fixCrc) {
        const auto& files = segment(n);
        std::string index = readFile(files.indexPath);
        std::string data = readFile(files.dataPath);
        audit::IndexReader reader(files.indexPath);
        audit::Record record;
        while (reader.next(record) == audit::IndexReader::Status::Record) {
            if (record.type != audit::RecordType::Chunk || record.length < 16) continue;
            data.replace(record.offset, 16, "FORGED PAYLOAD!!");
            SegmentBuilder::writeFile(files.dataPath, data);
            if (!fixCrc) return;
            std::string chunk;
            audit::encodeChunk(chunk, record.id, record.direction, record.length, record.offset,
                               record.timeNs,
                               audit::crc32c(0, data.data() + record.offset, record.length));
            ASSERT_EQ(chunk.size(), reader.recordSize());
            index.replace(reader.recordOffset(), chunk.size(), chunk);
            SegmentBuilder::writeFile(files.indexPath, index);
            return;
        }
        FAIL() << files.indexPath << " has no chunk of 16 bytes or more";
    }

    // Removes the seal of segments first..last (the index ends with it).
    void stripSeals(std::size_t first, std::size_t last) {
        for (auto n = first; n <= last; ++n) {
            std::string index = readFile(segment(n).indexPath);
            ASSERT_GE(index.size(), audit::kSegmentSealedRecordSize);
            index.resize(index.size() - audit::kSegmentSealedRecordSize);
            SegmentBuilder::writeFile(segment(n).indexPath, index);
        }
    }

    // Seals segments first..last again, chained, with `key` (null: unkeyed SHA-256), oldest first
    // so each names its new predecessor.
    void reseal(std::size_t first, std::size_t last, const audit::ChainKey* key) {
        stripSeals(first, last);
        for (auto n = first; n <= last; ++n) {
            std::string index = readFile(segment(n).indexPath);
            sealChained(index, dataBytes(n), dir_, 0, segment(n).segment, key);
            SegmentBuilder::writeFile(segment(n).indexPath, index);
        }
    }

    // Seals segments first..last again in the older format (version 2: no chain, no key).
    void resealOlderFormat(std::size_t first, std::size_t last) {
        stripSeals(first, last);
        for (auto n = first; n <= last; ++n) {
            std::string index = readFile(segment(n).indexPath);
            audit::encodeSegmentSealedV2(index, dataBytes(n), audit::kSealClean);
            SegmentBuilder::writeFile(segment(n).indexPath, index);
        }
    }

    void removeSegment(std::size_t n) {
        fs::remove(segment(n).indexPath);
        fs::remove(segment(n).dataPath);
    }

  private:
    std::uint64_t dataBytes(std::size_t n) const { return fs::file_size(segment(n).dataPath); }

    std::string dir_;
    std::vector<audit::SegmentFiles> segments_;
};

ProcessResult verify(const std::string& dir, const std::vector<std::string>& more = {}) {
    std::vector<std::string> argv{auditToolBinary(), "verify", dir};
    argv.insert(argv.end(), more.begin(), more.end());
    return runTool(argv);
}

class TamperAttackTest : public ::testing::TestWithParam<std::string> {
  protected:
    static void SetUpTestSuite() {
        root_ = std::make_unique<TempDir>();
        key_ = keyFile(*root_, "audit.key", 'k');
        otherKey_ = keyFile(*root_, "other.key", 'o');
        for (const char* writer : {"direct", "splice"})
            logs_[writer] = writeLog(root_->path(), writer, key_);
    }
    static void TearDownTestSuite() {
        logs_.clear();
        root_.reset();
    }

    void SetUp() override {
        log_ = logs_.at(GetParam());
        work_ = std::make_unique<TempDir>();
        forgery_ = std::make_unique<Forgery>(log_.dir, work_->path() + "/audit");
        ASSERT_GE(forgery_->size(), kSegments) << "the daemon wrote too few segments";
        auto untouched = verify(forgery_->dir(), {"--key-file", key_});
        ASSERT_TRUE(untouched.status && untouched.status->isExit(0)) << describeProcess(untouched);
    }

    // verify --key-file exits 1 and says `what` on a line naming `file`.
    void expectDetected(const std::string& file, const std::string& what,
                        const std::vector<std::string>& more = {}) {
        std::vector<std::string> args{"--key-file", key_};
        args.insert(args.end(), more.begin(), more.end());
        auto result = verify(forgery_->dir(), args);
        ASSERT_TRUE(result.status) << describeProcess(result);
        EXPECT_TRUE(result.status->isExit(1)) << describeProcess(result);
        bool named = false;
        for (const auto& line : grepLines(result.out + result.err, what))
            named = named || line.find(file) != std::string::npos;
        EXPECT_TRUE(named) << "no line naming " << file << " says \"" << what << "\"\n"
                           << describeProcess(result);
    }

    std::string name(std::size_t n) const { return fs::path(forgery_->segment(n).indexPath).filename(); }

    static std::unique_ptr<TempDir> root_;
    static std::string key_;
    static std::string otherKey_;
    static std::map<std::string, WrittenLog> logs_;
    WrittenLog log_;
    std::unique_ptr<TempDir> work_;
    std::unique_ptr<Forgery> forgery_;
};

std::unique_ptr<TempDir> TamperAttackTest::root_;
std::string TamperAttackTest::key_;
std::string TamperAttackTest::otherKey_;
std::map<std::string, WrittenLog> TamperAttackTest::logs_;

// Payload rewritten, its CRC recomputed, and the chain recomputed from there on without the key.
TEST_P(TamperAttackTest, ARecomputedUnkeyedChainIsSealedWithoutTheKey) {
    forgery_->editPayload(2, true);
    forgery_->reseal(2, forgery_->size() - 1, nullptr);
    expectDetected(name(2), "sealed without a key");
    // Without the key verify still sees one chain sealed two ways.
    auto unkeyed = verify(forgery_->dir());
    ASSERT_TRUE(unkeyed.status);
    EXPECT_TRUE(unkeyed.status->isExit(1)) << describeProcess(unkeyed);
    EXPECT_FALSE(grepLines(unkeyed.out, "re-sealed by someone else").empty())
        << describeProcess(unkeyed);
}

TEST_P(TamperAttackTest, AChainSealedWithAnotherKeyIsNamed) {
    forgery_->editPayload(2, true);
    auto other = audit::ChainKey::fromFile(otherKey_, audit::KeyFileUse::Verifier);
    forgery_->reseal(2, forgery_->size() - 1, other.get());
    expectDetected(name(2), "sealed with another key");
}

TEST_P(TamperAttackTest, OlderFormatSealsInsideTheChainAreRefused) {
    forgery_->editPayload(2, true);
    forgery_->resealOlderFormat(2, forgery_->size() - 1);
    expectDetected(name(2), "older format");
}

// Each writer records the payload's CRC-32C: 16 bytes edited in place are found.
TEST_P(TamperAttackTest, AnEditedPayloadFailsItsCrc) {
    forgery_->editPayload(3, false);
    expectDetected(fs::path(forgery_->segment(3).indexPath).filename(), "crc");
}

// A payload edit with a fixed CRC (the record's and the payload's) leaves the keyed seal unmatched.
TEST_P(TamperAttackTest, AnEditWithFixedCrcsBreaksTheKeyedSeal) {
    forgery_->editPayload(3, true);
    expectDetected(name(3), "does not match the segment's records");
}

// Edit segment 2, strip the seals of 2..N-2, restart: the daemon's recovery seals only what a
// crash leaves (the newest three) and does not seal the edited one; verify still fails.
TEST_P(TamperAttackTest, ARestartDoesNotLaunderStrippedSeals) {
    forgery_->editPayload(2, true);
    const std::size_t lastStripped = forgery_->size() - 2;
    forgery_->stripSeals(2, lastStripped);
    TestServer upstream(echoUpstream(milliseconds(30000)));
    const uint16_t port = pickFreePort();
    const uint16_t metricsPort = pickFreePort();
    {
        Daemon daemon(relayArgs(port, {upstream.address()},
                                {"--audit-dir", forgery_->dir(), "--audit-hmac-key-file", key_,
                                 "--audit-writer", GetParam(), "--admin-socket", "",
                                 "--metrics-listen", "127.0.0.1:" + std::to_string(metricsPort)},
                                1));
        ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
        auto page = httpGet(metricsPort, "/metrics");
        ASSERT_EQ(page.status, 200) << page.error;
        EXPECT_EQ(sampleValue(parseMetrics(page.body), "splicegate_audit_unsealed_segments", {}),
                  std::optional<double>(static_cast<double>(lastStripped - 1)))
            << page.body;
        ASSERT_TRUE(daemon.terminate(milliseconds(20000))) << daemon.why();
        EXPECT_FALSE(grepLines(daemon.log(), name(2) + ": unsealed, and older").empty())
            << daemon.log();
        EXPECT_FALSE(grepLines(daemon.log(), "segments left unsealed").empty()) << daemon.log();
    }
    expectDetected(name(2), "is not sealed");
    for (auto n = 2u; n <= lastStripped; ++n) {
        std::string index = readFile(forgery_->segment(n).indexPath);
        audit::Record record;
        std::size_t consumed = 0;
        std::string problem;
        const auto* tail = reinterpret_cast<const std::uint8_t*>(index.data()) + index.size() -
                           audit::kSegmentSealedRecordSize;
        bool sealed = index.size() >= audit::kSegmentSealedRecordSize &&
                      audit::decodeRecord(tail, audit::kSegmentSealedRecordSize, record, consumed,
                                          problem) == audit::DecodeStatus::Ok &&
                      record.type == audit::RecordType::SegmentSealed;
        EXPECT_FALSE(sealed) << name(n) << " was sealed by the restart";
    }
}

// A process holding a read lock on the lock file is not a running daemon: verify does not skip
// the newest segments as live, and an edit in them is found.
TEST_P(TamperAttackTest, AReadLockDoesNotMakeTheNewestSegmentsLive) {
    const std::size_t newest = forgery_->size() - 1;
    forgery_->editPayload(newest - 1, true);
    UniqueFd lock(::open((forgery_->dir() + "/" + audit::kLockFileName).c_str(),
                         O_RDWR | O_CLOEXEC));
    ASSERT_TRUE(lock) << std::strerror(errno);
    struct flock read {};
    read.l_type = F_RDLCK;
    read.l_whence = SEEK_SET;
    ASSERT_EQ(::fcntl(lock.get(), F_OFD_SETLK, &read), 0) << std::strerror(errno);
    expectDetected(name(newest - 1), "does not match the segment's records");
    auto result = verify(forgery_->dir(), {"--key-file", key_});
    EXPECT_TRUE(grepLines(result.out + result.err, "live segment").empty())
        << describeProcess(result);
}

// Deleting the newest segments leaves a chain that verifies on its own; the anchor kept off the
// box (the last `audit seal` line of the daemon's log) tells.
TEST_P(TamperAttackTest, ADeletedTailMissesTheLoggedHead) {
    ASSERT_EQ(log_.lastDigest.size(), 64u) << "the daemon logged no seal";
    auto whole = verify(forgery_->dir(), {"--key-file", key_, "--expect-head", log_.lastDigest});
    ASSERT_TRUE(whole.status);
    EXPECT_TRUE(whole.status->isExit(0)) << describeProcess(whole);
    forgery_->removeSegment(forgery_->size() - 1);
    forgery_->removeSegment(forgery_->size() - 2);
    auto plain = verify(forgery_->dir(), {"--key-file", key_});
    ASSERT_TRUE(plain.status);
    EXPECT_TRUE(plain.status->isExit(0)) << "a deleted tail is undetectable without an anchor\n"
                                         << describeProcess(plain);
    auto anchored =
        verify(forgery_->dir(), {"--key-file", key_, "--expect-head", log_.lastDigest});
    ASSERT_TRUE(anchored.status);
    EXPECT_TRUE(anchored.status->isExit(1)) << describeProcess(anchored);
    EXPECT_FALSE(grepLines(anchored.out, "no worker's chain has a seal with this digest").empty())
        << describeProcess(anchored);
}

INSTANTIATE_TEST_SUITE_P(Writers, TamperAttackTest, ::testing::Values("direct", "splice"),
                         [](const auto& param) { return param.param; });

}  // namespace
}  // namespace splicegate::test
