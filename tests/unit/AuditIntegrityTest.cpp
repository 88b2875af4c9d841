// Tamper evidence and safe file handling of the audit log (audit/FORMAT.md "Hash chain",
// "Directory"): each case first shows the damage an attacker or accident makes, then that
// verify exits non-clean naming the place; retention's own deletions stay clean; symlinks in
// the directory are never followed; a held directory is not touched by a second holder.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "audit/AuditDirectory.h"
#include "audit/AuditReader.h"
#include "audit/Crc32c.h"
#include "audit/Records.h"
#include "audit/Recovery.h"
#include "audit/Retention.h"
#include "audit/SealChain.h"
#include "audit/SegmentStore.h"
#include "common/UniqueFd.h"
#include "tests/support/AuditSegmentBuilder.h"
#include "tests/support/Daemon.h"

namespace splicegate::audit {
namespace {

using test::joined;
using test::SegmentBuilder;
using test::TempDir;

std::string readFile(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

bool anyContains(const std::vector<std::string>& lines, const std::string& what) {
    for (const auto& line : lines)
        if (line.find(what) != std::string::npos) return true;
    return false;
}

std::vector<std::string> verify(const std::string& dir, const ChainKey* key = nullptr) {
    std::vector<std::string> problems;
    verifyDirectory(
        dir, [&](const std::string& line) { problems.push_back(line); }, key);
    return problems;
}

struct VerifyResult {
    std::vector<std::string> problems;
    std::vector<std::string> notes;
    VerifySummary summary;
};

VerifyResult verifyAll(const std::string& dir, const ChainKey* key = nullptr,
                       std::vector<Digest> expectedHeads = {}) {
    VerifyResult result;
    VerifyOptions options;
    options.key = key;
    options.expectedHeads = std::move(expectedHeads);
    options.onNote = [&](const std::string& line) { result.notes.push_back(line); };
    result.summary = verifyDirectory(
        dir, [&](const std::string& line) { result.problems.push_back(line); }, options);
    return result;
}

// Three sealed segments of worker 0, one closed connection each (ids 1, 2, 3).
std::vector<std::string> writeThreeSegments(const std::string& dir, const ChainKey* key = nullptr) {
    std::vector<std::string> indexes;
    for (std::uint64_t n = 1; n <= 3; ++n) {
        SegmentBuilder segment(dir, 0, n, n);
        segment.open(n);
        std::string hello = "hello from connection " + std::to_string(n);
        segment.chunk(n, kDirectionC2U, hello);
        segment.chunk(n, kDirectionU2C, "answer");
        segment.close(n, hello.size(), 6);
        segment.seal(key);
        segment.write();
        indexes.push_back(segment.indexPath());
    }
    return indexes;
}

// Rewrites the record at `offset` of `index` with `edit` applied and its record CRC fixed.
void editRecord(std::string& index, std::size_t offset, const std::function<void(Record&)>& edit) {
    Record record;
    std::size_t consumed = 0;
    std::string problem;
    ASSERT_EQ(decodeRecord(reinterpret_cast<const std::uint8_t*>(index.data()) + offset,
                           index.size() - offset, record, consumed, problem),
              DecodeStatus::Ok)
        << problem;
    edit(record);
    ASSERT_EQ(record.type, RecordType::Chunk) << "only chunks are edited here";
    std::string replacement;
    encodeChunk(replacement, record.id, record.direction, record.length, record.offset,
                record.timeNs, record.hasCrc ? std::optional(record.crc) : std::nullopt);
    index.replace(offset, consumed, replacement);
}

TEST(AuditIntegrityTest, CleanChainedLogVerifies) {
    TempDir dir;
    writeThreeSegments(dir.path());
    auto problems = verify(dir.path());
    EXPECT_TRUE(problems.empty()) << joined(problems);
}

TEST(AuditIntegrityTest, ChangedPayloadByteFailsItsCrcNamingConnectionDirectionOffset) {
    TempDir dir;
    SegmentBuilder segment(dir.path(), 0, 1);
    segment.open(7);
    segment.chunk(7, kDirectionC2U, "GET / HTTP/1.1\r\n");
    segment.chunk(7, kDirectionC2U, "Host: example\r\n");
    segment.close(7, 31, 0);
    segment.seal();
    segment.data()[20] = 'X';  // inside the second chunk (stream offset 16)
    segment.write();
    auto problems = verify(dir.path());
    ASSERT_EQ(problems.size(), 1u) << joined(problems);
    EXPECT_NE(problems[0].find("w00-0000000001.index:"), std::string::npos) << problems[0];
    EXPECT_NE(problems[0].find("connection 7 c2u at stream offset 16"), std::string::npos)
        << problems[0];
    EXPECT_NE(problems[0].find("CRC-32C"), std::string::npos) << problems[0];
}

TEST(AuditIntegrityTest, PayloadChangedWithItsCrcRecomputedBreaksTheSeal) {
    TempDir dir;
    SegmentBuilder segment(dir.path(), 0, 1);
    segment.open(7);
    auto chunkAt = segment.chunk(7, kDirectionC2U, "transfer 100 EUR");
    segment.close(7, 16, 0);
    segment.seal();
    std::string forged = "HACKED!!!!!!!!!!";
    segment.data().replace(0, forged.size(), forged);
    editRecord(segment.index(), chunkAt,
               [&](Record& r) { r.crc = crc32c(0, forged.data(), forged.size()); });
    segment.write();
    auto problems = verify(dir.path());
    ASSERT_EQ(problems.size(), 1u) << joined(problems);
    EXPECT_NE(problems[0].find("seal's digest does not match"), std::string::npos) << problems[0];
}

TEST(AuditIntegrityTest, RemovedRecordsOfAConnectionBreakTheSeal) {
    TempDir dir;
    SegmentBuilder segment(dir.path(), 0, 1);
    segment.open(1);
    segment.chunk(1, kDirectionC2U, "kept");
    segment.close(1, 4, 0);
    auto removedFrom = segment.open(2);
    segment.chunk(2, kDirectionC2U, "incriminating");
    auto removedTo = segment.close(2, 13, 0);
    removedTo += segment.index().size() - removedTo;  // close is the last record so far
    segment.seal();
    // Every record of connection 2 goes; each remaining record's own CRC is intact.
    segment.index().erase(removedFrom, removedTo - removedFrom);
    segment.write();
    auto problems = verify(dir.path());
    ASSERT_EQ(problems.size(), 1u) << joined(problems);
    EXPECT_NE(problems[0].find("w00-0000000001.index:"), std::string::npos);
    EXPECT_NE(problems[0].find("removed"), std::string::npos) << problems[0];
}

TEST(AuditIntegrityTest, RemovedMiddleSegmentBreaksTheChain) {
    TempDir dir;
    auto indexes = writeThreeSegments(dir.path());
    ASSERT_TRUE(verify(dir.path()).empty());
    std::filesystem::remove(indexes[1]);
    std::filesystem::remove(dir.path() + "/w00-0000000002.data");
    auto problems = verify(dir.path());
    ASSERT_EQ(problems.size(), 1u) << joined(problems);
    EXPECT_NE(problems[0].find("w00-0000000003.index:"), std::string::npos) << problems[0];
    EXPECT_NE(problems[0].find("hash chain broken"), std::string::npos) << problems[0];
}

TEST(AuditIntegrityTest, ReorderedSegmentsAreFound) {
    TempDir dir;
    writeThreeSegments(dir.path());
    auto base = dir.path() + "/w00-000000000";
    for (const char* ext : {".index", ".data"}) {
        std::filesystem::rename(base + "2" + ext, base + "9" + ext);
        std::filesystem::rename(base + "3" + ext, base + "2" + ext);
        std::filesystem::rename(base + "9" + ext, base + "3" + ext);
    }
    auto problems = verify(dir.path());
    ASSERT_FALSE(problems.empty());
    EXPECT_TRUE(anyContains(problems,
                            "w00-0000000002.index:0: SegmentStart names worker 0 "
                            "segment 3"))
        << joined(problems);
    EXPECT_TRUE(anyContains(problems, "hash chain broken")) << joined(problems);
}

TEST(AuditIntegrityTest, KeyedChainNeedsTheRightKey) {
    TempDir dir;
    auto key = ChainKey::fromBytes("0123456789abcdef0123456789abcdef");
    auto wrong = ChainKey::fromBytes("fedcba9876543210fedcba9876543210");
    writeThreeSegments(dir.path(), key.get());
    auto good = verify(dir.path(), key.get());
    EXPECT_TRUE(good.empty()) << joined(good);

    auto withWrongKey = verify(dir.path(), wrong.get());
    ASSERT_EQ(withWrongKey.size(), 3u) << joined(withWrongKey);
    EXPECT_NE(withWrongKey[0].find("w00-0000000001.index:"), std::string::npos);
    EXPECT_NE(withWrongKey[0].find("wrong key"), std::string::npos) << withWrongKey[0];

    // Without the key nothing is wrong, but the digests were not checked, and verify says so.
    VerifyResult withoutKey = verifyAll(dir.path());
    EXPECT_TRUE(withoutKey.problems.empty()) << joined(withoutKey.problems);
    ASSERT_EQ(withoutKey.notes.size(), 1u) << joined(withoutKey.notes);
    EXPECT_NE(withoutKey.notes[0].find("keyed (HMAC-SHA256, key id " +
                                       hexText(key->id().data(), key->id().size()) + ")"),
              std::string::npos)
        << withoutKey.notes[0];
    EXPECT_EQ(withoutKey.summary.uncheckedKeyedSeals, 3u);
    ASSERT_EQ(withoutKey.summary.heads.size(), 1u);
    EXPECT_FALSE(withoutKey.summary.heads[0].checked);
}

// Replaces the seal at the end of `path` (a chained one) with a version-2 seal: the older
// format, which has no chain and so needs no key.
void resealInOlderFormat(const std::string& path) {
    std::string index = readFile(path);
    ASSERT_GE(index.size(), kSegmentSealedRecordSize);
    index.resize(index.size() - kSegmentSealedRecordSize);
    encodeSegmentSealedV2(index, 0, kSealClean);
    SegmentBuilder::writeFile(path, index);
}

TEST(AuditIntegrityTest, OlderFormatSealsNeverPassAfterChainedOnes) {
    TempDir dir;
    auto key = ChainKey::fromBytes("0123456789abcdef0123456789abcdef");
    auto indexes = writeThreeSegments(dir.path(), key.get());
    resealInOlderFormat(indexes[1]);
    resealInOlderFormat(indexes[2]);
    auto keyed = verify(dir.path(), key.get());
    ASSERT_EQ(keyed.size(), 2u) << joined(keyed);
    for (int i = 0; i < 2; ++i) {
        EXPECT_EQ(keyed[i].rfind(indexes[i + 1] + ":", 0), 0u) << keyed[i];
        EXPECT_NE(keyed[i].find("older format"), std::string::npos) << keyed[i];
        EXPECT_NE(keyed[i].find("--key-file was given"), std::string::npos) << keyed[i];
    }
    // Without the key, too: a chained (version 3 or later) segment is never sealed in the old
    // format.
    auto unkeyed = verify(dir.path());
    ASSERT_EQ(unkeyed.size(), 2u) << joined(unkeyed);
    EXPECT_NE(unkeyed[0].find("version-" + std::to_string(kFormatVersion) + " segment"),
              std::string::npos)
        << unkeyed[0];
}

TEST(AuditIntegrityTest, AnUnsealedOldSegmentIsAProblemWithTheKey) {
    TempDir dir;
    auto key = ChainKey::fromBytes("0123456789abcdef0123456789abcdef");
    // A version-2 segment (no chain, no payload CRCs) left unsealed: readable as before, but
    // nothing covers it, so with a key it does not verify.
    std::string index;
    encodeSegmentStart(index, 0, 1, test::kCraftedLogStartNs, 0);
    index.replace(kRecordHeaderSize, 4, std::string("\x02\x00\x00\x00", 4));
    index.replace(8, 4, std::string(4, '\0'));
    std::uint32_t crc = static_cast<std::uint32_t>(
        ::crc32(0, reinterpret_cast<const Bytef*>(index.data()), static_cast<uInt>(index.size())));
    for (int i = 0; i < 4; ++i) index[8 + i] = static_cast<char>(crc >> (8 * i));
    encodeOpen(index, 1, test::kCraftedLogStartNs, "r", "c", "u");
    SegmentBuilder::writeFile(dir.path() + "/w00-0000000001.index", index);
    SegmentBuilder::writeFile(dir.path() + "/w00-0000000001.data", "");
    EXPECT_TRUE(verify(dir.path()).empty()) << joined(verify(dir.path()));
    auto keyed = verify(dir.path(), key.get());
    ASSERT_EQ(keyed.size(), 1u) << joined(keyed);
    EXPECT_NE(keyed[0].find("not sealed"), std::string::npos) << keyed[0];
}

TEST(AuditIntegrityTest, WithoutTheKeyAMixOfKeyingsIsReported) {
    auto key = ChainKey::fromBytes("0123456789abcdef0123456789abcdef");
    auto other = ChainKey::fromBytes("an attacker's very own key bytes");
    for (const ChainKey* forger : {static_cast<const ChainKey*>(nullptr), other.get()}) {
        TempDir dir;
        // Segment 1 as the daemon sealed it; 2 and 3 edited and re-sealed by someone without
        // the key: the chain links, every digest recomputes, only the keying changed.
        SegmentBuilder first(dir.path(), 0, 1, 1);
        first.open(1);
        first.close(1, 0, 0);
        first.seal(key.get());
        first.write();
        for (std::uint64_t n = 2; n <= 3; ++n) {
            SegmentBuilder segment(dir.path(), 0, n, n);
            segment.open(n);
            segment.close(n, 0, 0);
            segment.seal(forger);
            segment.write();
        }
        auto problems = verify(dir.path());
        ASSERT_EQ(problems.size(), 1u) << joined(problems);
        EXPECT_EQ(problems[0].rfind(dir.path() + "/w00-0000000002.index:", 0), 0u) << problems[0];
        EXPECT_NE(problems[0].find("re-sealed"), std::string::npos) << problems[0];
        // With the key both are named.
        EXPECT_EQ(verify(dir.path(), key.get()).size(), 2u);
    }
    // A whole worker re-sealed without a key, next to a keyed one.
    TempDir dir;
    SegmentBuilder keyed(dir.path(), 0, 1, 1);
    keyed.open(1);
    keyed.close(1, 0, 0);
    keyed.seal(key.get());
    keyed.write();
    SegmentBuilder unkeyed(dir.path(), 1, 1, 2);
    unkeyed.open(2);
    unkeyed.close(2, 0, 0);
    unkeyed.seal();
    unkeyed.write();
    auto problems = verify(dir.path());
    ASSERT_EQ(problems.size(), 1u) << joined(problems);
    EXPECT_EQ(problems[0].rfind(unkeyed.indexPath() + ":", 0), 0u) << problems[0];
    EXPECT_NE(problems[0].find("worker 1's chain is sealed without a key"), std::string::npos)
        << problems[0];
}

TEST(AuditIntegrityTest, OnlyTheDaemonsWriteLockMakesTheNewestSegmentsLive) {
    TempDir parent;
    const std::string path = parent.path() + "/audit";
    ASSERT_EQ(::mkdir(path.c_str(), 0750), 0);
    auto indexes = writeThreeSegments(path);
    // The newest segment edited: its seal dropped and a record appended.
    std::string index = readFile(indexes[2]);
    index.resize(index.size() - kSegmentSealedRecordSize);
    encodeOpen(index, 99, test::kCraftedLogStartNs, "r", "c", "u");
    SegmentBuilder::writeFile(indexes[2], index);
    {
        // A reader of the log (the audit group can open the lock file read-only) with a read lock.
        SegmentBuilder::writeFile(path + "/" + kLockFileName, "1\n");
        ASSERT_EQ(::chmod((path + "/" + kLockFileName).c_str(), 0640), 0);
        UniqueFd reader(::open((path + "/" + kLockFileName).c_str(), O_RDONLY | O_CLOEXEC));
        ASSERT_TRUE(reader.valid());
        struct flock lock {};
        lock.l_type = F_RDLCK;
        lock.l_whence = SEEK_SET;
        ASSERT_EQ(::fcntl(reader.get(), F_OFD_SETLK, &lock), 0);
        EXPECT_FALSE(checkAuditDirectory(path).holderPid.has_value());
        VerifyResult result = verifyAll(path);
        ASSERT_EQ(result.problems.size(), 1u) << joined(result.problems);
        EXPECT_EQ(result.problems[0].rfind(indexes[2] + ":", 0), 0u) << result.problems[0];
        EXPECT_NE(result.problems[0].find("not sealed"), std::string::npos) << result.problems[0];
        EXPECT_TRUE(result.notes.empty()) << joined(result.notes);
    }
    // The daemon's lock: the two newest segments are live, and verify names what it let pass.
    auto held = AuditDirectory::open(path);
    VerifyResult result = verifyAll(path);
    EXPECT_TRUE(result.problems.empty()) << joined(result.problems);
    ASSERT_EQ(result.notes.size(), 1u) << joined(result.notes);
    EXPECT_EQ(result.notes[0], indexes[2] + ": live segment of the running daemon (pid " +
                                   std::to_string(::getpid()) + "), not checked to its end");
    EXPECT_EQ(result.summary.liveSegments, 1u);
}

TEST(AuditIntegrityTest, ExpectedHeadsMustStillBeInAChain) {
    TempDir dir;
    auto key = ChainKey::fromBytes("0123456789abcdef0123456789abcdef");
    std::vector<Digest> digests;
    for (std::uint64_t n = 1; n <= 3; ++n) {
        SegmentBuilder segment(dir.path(), 0, n, n);
        segment.open(n);
        segment.close(n, 0, 0);
        segment.seal(key.get());
        segment.write();
        digests.push_back(segment.digest());
    }
    VerifyResult result = verifyAll(dir.path(), key.get(), {digests[2], digests[1]});
    EXPECT_TRUE(result.problems.empty()) << joined(result.problems);
    ASSERT_EQ(result.summary.heads.size(), 1u);
    EXPECT_EQ(result.summary.heads[0].digest, digests[2]);
    EXPECT_EQ(result.summary.heads[0].segment, 3u);
    EXPECT_TRUE(result.summary.heads[0].checked);
    // The newest segment deleted: the chain still verifies, but no longer reaches that head.
    std::filesystem::remove(dir.path() + "/w00-0000000003.index");
    std::filesystem::remove(dir.path() + "/w00-0000000003.data");
    EXPECT_TRUE(verify(dir.path(), key.get()).empty());
    result = verifyAll(dir.path(), key.get(), {digests[2], digests[1]});
    ASSERT_EQ(result.problems.size(), 1u) << joined(result.problems);
    EXPECT_NE(result.problems[0].find("--expect-head " + hexText(digests[2].data(), 32)),
              std::string::npos)
        << result.problems[0];
    EXPECT_NE(result.problems[0].find("w00-0000000002.index digest="), std::string::npos)
        << result.problems[0];
}

TEST(AuditIntegrityTest, UnkeyedChainIsRefusedWhenAKeyIsExpected) {
    TempDir dir;
    auto key = ChainKey::fromBytes("0123456789abcdef0123456789abcdef");
    writeThreeSegments(dir.path());  // an attacker without the key recomputed a plain chain
    auto problems = verify(dir.path(), key.get());
    ASSERT_EQ(problems.size(), 3u) << joined(problems);
    EXPECT_NE(problems[0].find("sealed without a key"), std::string::npos) << problems[0];
}

TEST(AuditIntegrityTest, RetentionDeletionsVerifyButNotWithoutTheirRecord) {
    TempDir dir;
    auto key = ChainKey::fromBytes("0123456789abcdef0123456789abcdef");
    writeThreeSegments(dir.path(), key.get());
    RetentionPlanner planner(dir.path(), key);
    auto result = planner.apply({1, 0}, wallClockNs());  // keep as little as possible
    ASSERT_EQ(result.deleted.size(), 4u) << joined(result.deleted) << joined(result.problems);
    auto problems = verify(dir.path(), key.get());
    EXPECT_TRUE(problems.empty()) << joined(problems);

    // Without the retention log the deletion looks like what it would be otherwise: removal.
    auto log = readFile(dir.path() + "/" + kRetentionLogName);
    std::filesystem::remove(dir.path() + "/" + kRetentionLogName);
    problems = verify(dir.path(), key.get());
    ASSERT_EQ(problems.size(), 1u) << joined(problems);
    EXPECT_NE(problems[0].find("hash chain broken"), std::string::npos) << problems[0];

    // A forged entry (the attacker lacks the key, so signs with another one) is refused.
    Record entry;
    std::size_t consumed = 0;
    std::string why;
    ASSERT_EQ(decodeRecord(reinterpret_cast<const std::uint8_t*>(log.data()), log.size(), entry,
                           consumed, why),
              DecodeStatus::Ok)
        << why;
    auto forger = ChainKey::fromBytes("attacker's key, not the daemon's");
    std::string forged;
    encodeSegmentsDeleted(forged, 0, 1, 2, entry.timeNs, forger.get(), entry.digest, Digest{});
    SegmentBuilder::writeFile(dir.path() + "/" + kRetentionLogName, forged);
    problems = verify(dir.path(), key.get());
    EXPECT_TRUE(anyContains(problems, std::string(kRetentionLogName) + ":0: retention entry "
                                                                       "sealed with another key"))
        << joined(problems);
    EXPECT_TRUE(anyContains(problems, "hash chain broken")) << joined(problems);
}

// ---- segments supplied one at a time (VerifyOptions::nextSegment, the archive's verify)

// Supplies `from`'s segments `numbers` (of worker 0) one at a time, each copied into `staging`
// and removed when the next is asked for, recording the most files staging ever held.
struct OneAtATime {
    OneAtATime(std::string fromDir, std::string stagingDir, std::vector<std::uint64_t> segments,
               std::vector<RetentionLogEntry> learnt = {})
        : from(std::move(fromDir)),
          staging(std::move(stagingDir)),
          numbers(std::move(segments)),
          deletions(std::move(learnt)) {}

    std::string from;
    std::string staging;
    std::vector<std::uint64_t> numbers;
    std::vector<RetentionLogEntry> deletions;  // handed over with the first segment
    std::size_t at = 0;
    std::size_t mostFiles = 0;
    std::vector<std::string> staged;

    std::optional<SegmentFiles> operator()(std::vector<RetentionLogEntry>& learnt) {
        for (const auto& path : staged) std::filesystem::remove(path);
        staged.clear();
        if (at == numbers.size()) return std::nullopt;
        if (at == 0) learnt = deletions;
        SegmentFiles files;
        files.worker = 0;
        files.segment = numbers[at++];
        files.dataName = segmentBaseName(0, files.segment) + ".data";
        files.indexName = segmentBaseName(0, files.segment) + ".index";
        files.dataPath = staging + "/" + files.dataName;
        files.indexPath = staging + "/" + files.indexName;
        for (const auto& name : {files.dataName, files.indexName}) {
            std::filesystem::copy_file(from + "/" + name, staging + "/" + name);
            staged.push_back(staging + "/" + name);
        }
        files.hasData = files.hasIndex = true;
        std::size_t count = 0;
        for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(staging))
            ++count;
        mostFiles = std::max(mostFiles, count);
        return files;
    }
};

VerifyResult verifySupplied(OneAtATime& source) {
    VerifyResult result;
    VerifyOptions options;
    options.onNote = [&](const std::string& line) { result.notes.push_back(line); };
    options.nextSegment = [&](std::vector<RetentionLogEntry>& learnt) { return source(learnt); };
    result.summary = verifyDirectory(
        source.staging, [&](const std::string& line) { result.problems.push_back(line); },
        options);
    return result;
}

// Three sealed segments of worker 0; connection 1 spans all three, 2 lives in the second.
void writeSpanningSegments(const std::string& dir) {
    for (std::uint64_t n = 1; n <= 3; ++n) {
        SegmentBuilder segment(dir, 0, n, n);  // id floor n: ids below n came earlier
        if (n == 1) segment.open(1);
        segment.chunk(1, kDirectionC2U, "part " + std::to_string(n));
        if (n == 2) {
            segment.open(2);
            segment.chunk(2, kDirectionU2C, "short");
            segment.close(2, 0, 5);
        }
        if (n == 3) segment.close(1, 18, 0);
        segment.seal();
        segment.write();
    }
}

TEST(AuditIntegrityTest, SegmentsSuppliedOneAtATimeVerifyAsTheDirectoryDoes) {
    TempDir from, staging;
    writeSpanningSegments(from.path());
    auto whole = verifyAll(from.path());
    ASSERT_TRUE(whole.problems.empty()) << joined(whole.problems);
    OneAtATime source(from.path(), staging.path(), {1, 2, 3});
    auto supplied = verifySupplied(source);
    EXPECT_TRUE(supplied.problems.empty()) << joined(supplied.problems);
    // The staging directory held one segment (its data and index) at a time, and is empty
    // once the source said there was no more.
    EXPECT_EQ(source.mostFiles, 2u);
    EXPECT_TRUE(std::filesystem::is_empty(staging.path()));
    EXPECT_EQ(supplied.summary.segments, 3u);
    EXPECT_EQ(supplied.summary.sealedSegments, whole.summary.sealedSegments);
    EXPECT_EQ(supplied.summary.connections, whole.summary.connections);
    EXPECT_EQ(supplied.summary.records, whole.summary.records);
    EXPECT_EQ(supplied.summary.checkedPayloadBytes, whole.summary.checkedPayloadBytes);
    ASSERT_EQ(supplied.summary.heads.size(), 1u);
    EXPECT_EQ(supplied.summary.heads[0].digest, whole.summary.heads[0].digest);
    EXPECT_EQ(supplied.summary.heads[0].segment, 3u);

    // The previous seal is carried after its files are gone: a segment left out breaks the
    // chain at the next, as a segment missing from a directory does.
    TempDir staging2;
    OneAtATime gap(from.path(), staging2.path(), {1, 3});
    auto broken = verifySupplied(gap);
    EXPECT_TRUE(anyContains(broken.problems, staging2.path() + "/w00-0000000003.index:"))
        << joined(broken.problems);
    EXPECT_TRUE(anyContains(broken.problems, "hash chain broken")) << joined(broken.problems);
}

TEST(AuditIntegrityTest, ASegmentSourceMayLearnDeletionsBeforeAWorkersFirstSegment) {
    TempDir from;
    writeSpanningSegments(from.path());
    // Segment 1 never supplied: segment 2 names its seal as predecessor, and connection 1's
    // records in segments 2 and 3 have no Open before them.
    auto seal1 = [&] {
        IndexReader reader(from.path() + "/w00-0000000001.index");
        Record record;
        Digest digest{};
        while (reader.next(record) == IndexReader::Status::Record)
            if (record.type == RecordType::SegmentSealed) digest = record.digest;
        return digest;
    }();
    TempDir unknown;
    OneAtATime without(from.path(), unknown.path(), {2, 3});
    auto broken = verifySupplied(without);
    EXPECT_TRUE(anyContains(broken.problems, "hash chain broken")) << joined(broken.problems);
    EXPECT_TRUE(anyContains(broken.problems, "without an earlier Open record"))
        << joined(broken.problems);

    TempDir known;
    OneAtATime with(from.path(), known.path(), {2, 3}, {{0, 0, 1, seal1, 0}});
    auto accepted = verifySupplied(with);
    EXPECT_TRUE(accepted.problems.empty()) << joined(accepted.problems);
    EXPECT_EQ(accepted.summary.headsDeleted, 1u);
}

TEST(AuditIntegrityTest, ADirectoryWithoutAuditLogDoesNotVerify) {
    TempDir dir;
    auto problems = verify(dir.path());
    ASSERT_EQ(problems.size(), 1u);
    EXPECT_NE(problems[0].find("no audit log"), std::string::npos) << problems[0];
}

TEST(AuditIntegrityTest, ExtractRefusesADamagedChunkUnlessForced) {
    TempDir dir;
    SegmentBuilder segment(dir.path(), 0, 1);
    segment.open(4);
    segment.chunk(4, kDirectionU2C, "first");
    segment.chunk(4, kDirectionU2C, "second");
    segment.close(4, 0, 11);
    segment.seal();
    segment.data()[6] = '!';
    segment.write();
    std::string out = dir.path() + "/out";
    auto openOut = [&] { return ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600); };
    try {
        extractConnection(dir.path(), 4, kDirectionU2C, openOut);
        FAIL() << "a damaged chunk was extracted";
    } catch (const std::runtime_error& error) {
        std::string what = error.what();
        EXPECT_NE(what.find("connection 4 u2c at stream offset 5"), std::string::npos) << what;
        EXPECT_NE(what.find("--force"), std::string::npos) << what;
    }
    std::vector<std::string> warnings;
    ExtractOptions force;
    force.force = true;
    force.onDamage = [&](const std::string& line) { warnings.push_back(line); };
    auto result = extractConnection(dir.path(), 4, kDirectionU2C, openOut, force);
    EXPECT_EQ(result.bytes, 11u);
    EXPECT_EQ(readFile(out), "firsts!cond");
    EXPECT_EQ(warnings.size(), 1u);
}

TEST(AuditIntegrityTest, WriterLogWithPayloadCrcsAndKeyVerifies) {
    TempDir dir;
    auto key = ChainKey::fromBytes("0123456789abcdef0123456789abcdef");
    {
        SegmentStore writer(dir.path(), 0, 1, 8192, nullptr, key);
        ASSERT_EQ(writer.recordOpen(1, wallClockNs(), "r", "c", "u"), 0);
        std::uint64_t total = 0;
        for (int i = 0; i < 6; ++i) {  // rolls twice
            std::string payload(3000, static_cast<char>('a' + i));
            Reservation slot;
            ASSERT_EQ(writer.reserve(static_cast<std::uint32_t>(payload.size()), slot), 0);
            ASSERT_EQ(::pwrite(slot.segment->data.get(), payload.data(), payload.size(),
                               static_cast<off_t>(slot.offset)),
                      static_cast<ssize_t>(payload.size()));
            std::uint32_t crc = 0;
            if (i % 2 == 0) {
                crc = crc32c(0, payload.data(), payload.size());  // the direct writer's way
            } else {
                ASSERT_EQ(SegmentStore::payloadCrcFromFile(slot, 3000, crc), 0);  // splice's
            }
            ASSERT_EQ(writer.recordChunk(slot, 1, 0, 3000, wallClockNs(), crc), 0);
            total += payload.size();
        }
        ASSERT_EQ(writer.recordClose(1, wallClockNs(), total, 0, "done"), 0);
    }
    auto problems = verify(dir.path(), key.get());
    EXPECT_TRUE(problems.empty()) << joined(problems);
    VerifySummary summary = verifyDirectory(
        dir.path(), [](const std::string&) {}, key.get());
    EXPECT_EQ(summary.sealedSegments, 3u);
    EXPECT_EQ(summary.checkedPayloadBytes, 18000u);
    EXPECT_EQ(summary.uncheckedChunks, 0u);
}

TEST(AuditIntegrityTest, ALaterSegmentWaitsForTheEarlierOneToSealFirst) {
    TempDir dir;
    {
        SegmentStore writer(dir.path(), 0, 1, 1 << 20);
        ASSERT_EQ(writer.recordOpen(1, wallClockNs(), "r", "c", "u"), 0);
        Reservation slow;  // a payload write of segment 1 still in flight
        ASSERT_EQ(writer.reserve(100, slow), 0);
        ASSERT_EQ(writer.rotate(), 0);  // segment 1 retired, waits for its write
        ASSERT_EQ(writer.rotate(), 0);  // segment 2 retired with nothing in flight
        // Segment 2 must not seal before segment 1: its seal needs segment 1's digest.
        Record last;
        IndexReader reader(dir.path() + "/w00-0000000002.index");
        while (reader.next(last) == IndexReader::Status::Record) {
        }
        EXPECT_NE(last.type, RecordType::SegmentSealed);
        std::string payload(100, 'p');
        ASSERT_EQ(::pwrite(slow.segment->data.get(), payload.data(), payload.size(),
                           static_cast<off_t>(slow.offset)),
                  100);
        ASSERT_EQ(writer.recordChunk(slow, 1, 0, 100, wallClockNs(),
                                     crc32c(0, payload.data(), payload.size())),
                  0);
        ASSERT_EQ(writer.recordClose(1, wallClockNs(), 100, 0, "done"), 0);
    }
    auto problems = verify(dir.path());
    EXPECT_TRUE(problems.empty()) << joined(problems);
}

TEST(AuditIntegrityTest, RecoveryExtendsTheChainOverTornTails) {
    TempDir dir;
    auto key = ChainKey::fromBytes("0123456789abcdef0123456789abcdef");
    // Two unsealed segments (the older one had writes in flight at the crash) with torn tails.
    for (std::uint64_t n = 1; n <= 2; ++n) {
        SegmentBuilder segment(dir.path(), 0, n, n);
        segment.open(n);
        segment.chunk(n, kDirectionC2U, "payload");
        segment.index() += std::string("SGIX\x03\x00", 6);  // torn
        segment.write();
    }
    auto report = recoverAuditDirectory(dir.path(), key.get());
    EXPECT_EQ(report.truncatedConnections, 2u) << joined(report.actions);
    auto problems = verify(dir.path(), key.get());
    EXPECT_TRUE(problems.empty()) << joined(problems) << joined(report.actions);
    // A writer continuing after recovery extends the same chain.
    {
        SegmentStore writer(dir.path(), 0, report.lastSegment[0] + 1, 1 << 20, nullptr, key);
        ASSERT_EQ(writer.recordOpen(9, wallClockNs(), "r", "c", "u"), 0);
        ASSERT_EQ(writer.recordClose(9, wallClockNs(), 0, 0, "done"), 0);
    }
    problems = verify(dir.path(), key.get());
    EXPECT_TRUE(problems.empty()) << joined(problems);
}

TEST(AuditIntegrityTest, SymlinkedSegmentFilesAreNeverFollowedNorChanged) {
    for (const char* ext : {".index", ".data"}) {
        TempDir dir, elsewhere;
        std::string target = elsewhere.path() + "/precious";
        const std::string content = "root's file, not an audit index";
        SegmentBuilder::writeFile(target, content);
        SegmentBuilder segment(dir.path(), 0, 1);
        segment.open(1);
        segment.write();  // unsealed: recovery would cut, seal and append here
        std::string link = dir.path() + "/w00-0000000002" + ext;
        ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
        try {
            recoverAuditDirectory(dir.path());
            FAIL() << "recovery accepted a symlinked " << ext;
        } catch (const std::system_error& error) {
            EXPECT_NE(std::string(error.what()).find("w00-0000000002"), std::string::npos)
                << error.what();
        }
        EXPECT_EQ(readFile(target), content);
        struct stat st {};
        ASSERT_EQ(::lstat(link.c_str(), &st), 0);
        EXPECT_TRUE(S_ISLNK(st.st_mode));
        auto problems = verify(dir.path());
        EXPECT_TRUE(anyContains(problems, "not a regular file")) << joined(problems);
        RetentionPlanner planner(dir.path());
        planner.apply({1, 0}, wallClockNs());
        EXPECT_EQ(readFile(target), content);
        EXPECT_EQ(::lstat(link.c_str(), &st), 0);
    }
}

TEST(AuditIntegrityTest, WriterNeverCreatesThroughASymlink) {
    TempDir dir, elsewhere;
    std::string target = elsewhere.path() + "/precious";
    SegmentBuilder::writeFile(target, "keep");
    ASSERT_EQ(::symlink(target.c_str(), (dir.path() + "/w00-0000000001.index").c_str()), 0);
    EXPECT_THROW(SegmentStore(dir.path(), 0, 1, 1 << 20), std::system_error);
    EXPECT_EQ(readFile(target), "keep");
}

// The directory listing with each file's size and content, to show nothing changed.
std::map<std::string, std::string> snapshot(const std::string& dir) {
    std::map<std::string, std::string> files;
    for (const auto& entry : std::filesystem::directory_iterator(dir))
        files[entry.path().filename()] = readFile(entry.path());
    return files;
}

TEST(AuditIntegrityTest, ASecondHolderIsRefusedNamingTheFirstAndChangesNothing) {
    TempDir parent;
    std::string path = parent.path() + "/audit";
    auto held = AuditDirectory::open(path);
    SegmentBuilder live(path, 0, 1);
    live.open(1);  // a live, unsealed segment that recovery would seal and truncate
    live.write();
    auto before = snapshot(path);
    try {
        AuditDirectory::open(path);
        FAIL() << "a second holder got the directory";
    } catch (const AuditDirectoryHeld& error) {
        EXPECT_EQ(error.holderPid(), ::getpid());
        EXPECT_NE(std::string(error.what()).find("pid " + std::to_string(::getpid())),
                  std::string::npos)
            << error.what();
    }
    auto check = checkAuditDirectory(path);
    EXPECT_TRUE(check.problems.empty()) << joined(check.problems);
    ASSERT_TRUE(check.holderPid.has_value());
    EXPECT_EQ(*check.holderPid, ::getpid());
    EXPECT_EQ(snapshot(path), before);
}

TEST(AuditIntegrityTest, LooseDirectoryPermissionsAreRefused) {
    TempDir parent;
    std::string path = parent.path() + "/audit";
    ASSERT_EQ(::mkdir(path.c_str(), 0750), 0);
    for (mode_t loose : {0770, 0757, 0777}) {
        ASSERT_EQ(::chmod(path.c_str(), loose), 0);
        try {
            AuditDirectory::open(path);
            FAIL() << "mode " << std::oct << loose << " accepted";
        } catch (const std::system_error& error) {
            EXPECT_NE(std::string(error.what()).find("writable by its group or others"),
                      std::string::npos)
                << error.what();
        }
        EXPECT_EQ(checkAuditDirectory(path).problems.size(), 1u);
        EXPECT_FALSE(std::filesystem::exists(path + "/" + kLockFileName));
    }
    ASSERT_EQ(::chmod(path.c_str(), 0750), 0);
    std::string link = parent.path() + "/link";
    ASSERT_EQ(::symlink(path.c_str(), link.c_str()), 0);
    EXPECT_THROW(AuditDirectory::open(link), std::system_error);
    EXPECT_EQ(checkAuditDirectory(link).problems.size(), 1u);
    auto dir = AuditDirectory::open(path);
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0750u);
}

TEST(AuditIntegrityTest, SegmentFilesAreCreated0640WithTheDirectoryGroupWhateverTheUmask) {
    TempDir dir;
    constexpr gid_t kAuditGroup = 4242;  // root may give files any group
    ASSERT_EQ(::chown(dir.path().c_str(), static_cast<uid_t>(-1), kAuditGroup), 0);
    mode_t old = ::umask(077);
    { SegmentStore writer(dir.path(), 0, 1, 1 << 20); }
    ::umask(old);
    struct stat st {};
    for (const char* name : {"/w00-0000000001.index", "/w00-0000000001.data"}) {
        ASSERT_EQ(::stat((dir.path() + name).c_str(), &st), 0);
        EXPECT_EQ(st.st_mode & 0777, 0640u) << name;
        EXPECT_EQ(st.st_gid, kAuditGroup) << name;
    }
}

}  // namespace
}  // namespace splicegate::audit
