// Crash recovery (audit/FORMAT.md "Crash recovery") on crafted directories: every repair, the
// report, the consistency of the result (verify finds nothing) and idempotence.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "audit/AuditReader.h"
#include "audit/Records.h"
#include "audit/Recovery.h"
#include "tests/support/AuditSegmentBuilder.h"
#include "tests/support/Daemon.h"

namespace splicegate::audit {
namespace {

using test::joined;
using test::readFile;
using test::SegmentBuilder;
using test::TempDir;

// All files of the directory with their contents.
std::map<std::string, std::string> snapshot(const std::string& dir) {
    std::map<std::string, std::string> files;
    for (const auto& entry : std::filesystem::directory_iterator(dir))
        files[entry.path().filename().string()] = readFile(entry.path().string());
    return files;
}

// Decoded records of an index file.
std::vector<Record> records(const std::string& path) {
    std::vector<Record> out;
    IndexReader reader(path);
    Record record;
    while (reader.next(record) == IndexReader::Status::Record) out.push_back(record);
    return out;
}

// Runs recovery, then checks the result is consistent and that a second run does nothing. (A
// removed lone data file may lower the second run's lastSegment: that number is free again.)
RecoveryReport recoverAndCheck(const std::string& dir, bool sameLastSegment = true) {
    auto report = recoverAuditDirectory(dir);
    auto problems = verifyDirectory(dir);
    EXPECT_TRUE(problems.empty()) << "after recovery:\n"
                                  << joined(problems) << "actions:\n"
                                  << joined(report.actions);
    auto before = snapshot(dir);
    auto again = recoverAuditDirectory(dir);
    EXPECT_TRUE(again.actions.empty()) << "second run:\n" << joined(again.actions);
    EXPECT_EQ(again.truncatedConnections, 0u);
    EXPECT_EQ(again.maxConnectionId, report.maxConnectionId);
    EXPECT_EQ(again.maxIdFloor, report.maxIdFloor);
    if (sameLastSegment) {
        EXPECT_EQ(again.lastSegment, report.lastSegment);
    }
    EXPECT_TRUE(snapshot(dir) == before) << "the second run changed files";
    return report;
}

bool anyLineHas(const std::vector<std::string>& lines, const std::string& a,
                const std::string& b = "") {
    for (const auto& line : lines)
        if (line.find(a) != std::string::npos && line.find(b) != std::string::npos) return true;
    return false;
}

TEST(AuditRecoveryTest, CreatesAMissingDirectory) {
    TempDir dir;
    std::string path = dir.path() + "/a/b/audit";
    auto report = recoverAuditDirectory(path);
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    EXPECT_TRUE(report.actions.empty());
    EXPECT_EQ(report.maxConnectionId, 0u);
    EXPECT_EQ(report.maxIdFloor, 0u);
    EXPECT_TRUE(report.lastSegment.empty());
}

TEST(AuditRecoveryTest, ThrowsWhenTheDirectoryCannotBeMade) {
    TempDir dir;
    SegmentBuilder::writeFile(dir.path() + "/file", "x");
    EXPECT_THROW(recoverAuditDirectory(dir.path() + "/file/audit"), std::system_error);
}

TEST(AuditRecoveryTest, CleanSealedLogIsLeftAlone) {
    TempDir dir;
    SegmentBuilder segment(dir.path(), 0, 4);
    segment.open(11);
    segment.chunk(11, kDirectionC2U, "abc");
    segment.close(11, 3, 0);
    segment.seal();
    segment.write();
    auto before = snapshot(dir.path());
    auto report = recoverAndCheck(dir.path());
    EXPECT_TRUE(report.actions.empty()) << joined(report.actions);
    EXPECT_TRUE(snapshot(dir.path()) == before);
    EXPECT_EQ(report.maxConnectionId, 11u);
    EXPECT_EQ(report.lastSegment, (std::map<unsigned, std::uint64_t>{{0, 4}}));
}

TEST(AuditRecoveryTest, CutsATornIndexTail) {
    TempDir dir;
    SegmentBuilder segment(dir.path(), 0, 1);
    segment.open(1);
    segment.chunk(1, kDirectionC2U, "abcdef");
    auto tornAt = segment.close(1, 6, 0);
    segment.index().resize(segment.index().size() - 5);
    segment.write();
    auto report = recoverAndCheck(dir.path());
    EXPECT_TRUE(anyLineHas(report.actions, "w00-0000000001.index: cut",
                           "at offset " + std::to_string(tornAt)))
        << joined(report.actions);
    auto kept = records(segment.indexPath());
    // SegmentStart, Open, Chunk, then recovery's Truncated (the Close was torn) and seal.
    ASSERT_EQ(kept.size(), 5u);
    EXPECT_EQ(kept[3].type, RecordType::Truncated);
    EXPECT_EQ(kept[3].id, 1u);
    EXPECT_EQ(kept[4].type, RecordType::SegmentSealed);
    EXPECT_EQ(kept[4].dataBytes, 6u);
    EXPECT_EQ(report.truncatedConnections, 1u);
}

TEST(AuditRecoveryTest, CutsAGarbageTail) {
    TempDir dir;
    SegmentBuilder segment(dir.path(), 0, 1);
    segment.open(1);
    segment.close(1, 0, 0);
    auto goodEnd = segment.index().size();
    segment.index() += std::string(100, '\x5a');
    segment.write();
    auto report = recoverAndCheck(dir.path());
    EXPECT_TRUE(anyLineHas(
        report.actions, "cut 100 bytes of index at offset " + std::to_string(goodEnd), "bad magic"))
        << joined(report.actions);
}

TEST(AuditRecoveryTest, CutsUnindexedDataTail) {
    TempDir dir;
    SegmentBuilder segment(dir.path(), 0, 1);
    segment.open(1);
    segment.chunk(1, kDirectionC2U, "0123456789");
    segment.close(1, 10, 0);
    segment.data() += std::string(1000, 'z');  // spliced, never indexed
    segment.write();
    auto report = recoverAndCheck(dir.path());
    EXPECT_TRUE(
        anyLineHas(report.actions, "w00-0000000001.data: cut 1000 unindexed bytes at offset 10"))
        << joined(report.actions);
    EXPECT_EQ(readFile(segment.dataPath()), "0123456789");
    auto kept = records(segment.indexPath());
    EXPECT_EQ(kept.back().type, RecordType::SegmentSealed);
    EXPECT_EQ(kept.back().dataBytes, 10u);
    EXPECT_TRUE(anyLineHas(report.actions, "w00-0000000001.index: sealed (10 data bytes)"))
        << joined(report.actions);
}

TEST(AuditRecoveryTest, CutsAtTheFirstChunkBeyondTheDataFile) {
    TempDir dir;
    SegmentBuilder segment(dir.path(), 0, 1);
    segment.open(1);
    segment.chunk(1, kDirectionC2U, "0123456789");
    auto lost = segment.chunkAt(1, kDirectionC2U, 10, 10);  // payload never reached the disk
    segment.chunkAt(1, kDirectionC2U, 5, 2);                // after the cut point: dropped too
    segment.close(1, 25, 0);
    segment.write();
    auto report = recoverAndCheck(dir.path());
    EXPECT_TRUE(
        anyLineHas(report.actions, "at offset " + std::to_string(lost), "never reached the disk"))
        << joined(report.actions);
    auto list = listConnections(dir.path());
    ASSERT_EQ(list.connections.size(), 1u);
    EXPECT_EQ(list.connections[0].state, ConnectionState::Truncated);
    EXPECT_EQ(list.connections[0].c2uBytes, 10u);
}

TEST(AuditRecoveryTest, OpenConnectionsAreTruncatedInTheLastSegmentOfTheirWorker) {
    TempDir dir;
    SegmentBuilder first(dir.path(), 0, 1);
    first.open(1);
    first.open(2);
    first.open(3);
    first.chunk(1, kDirectionC2U, "a");
    first.close(2, 0, 0);
    first.write();  // unsealed (crash during the roll)
    SegmentBuilder second(dir.path(), 0, 2);
    second.open(4);
    second.chunk(1, kDirectionU2C, "bb");
    second.close(4, 0, 0);
    second.write();
    SegmentBuilder other(dir.path(), 3, 7);
    other.open(9);
    other.write();
    auto report = recoverAndCheck(dir.path());
    EXPECT_EQ(report.truncatedConnections, 3u);
    EXPECT_EQ(report.maxConnectionId, 9u);
    EXPECT_EQ(report.lastSegment, (std::map<unsigned, std::uint64_t>{{0, 2}, {3, 7}}));
    EXPECT_TRUE(anyLineHas(report.actions, "w00-0000000002.index: connection 1 ", "truncated"));
    EXPECT_TRUE(anyLineHas(report.actions, "w00-0000000002.index: connection 3 ", "truncated"));
    EXPECT_TRUE(anyLineHas(report.actions, "w03-0000000007.index: connection 9 ", "truncated"));
    EXPECT_TRUE(anyLineHas(report.actions, "w00-0000000001.index: sealed"));
    EXPECT_TRUE(anyLineHas(report.actions, "w00-0000000002.index: sealed"));
    auto firstRecords = records(first.indexPath());
    EXPECT_EQ(firstRecords.back().type, RecordType::SegmentSealed);
    auto secondRecords = records(second.indexPath());
    ASSERT_GE(secondRecords.size(), 3u);
    EXPECT_EQ(secondRecords[secondRecords.size() - 3].type, RecordType::Truncated);
    EXPECT_EQ(secondRecords[secondRecords.size() - 3].id, 1u);
    EXPECT_EQ(secondRecords[secondRecords.size() - 2].id, 3u);
    EXPECT_EQ(secondRecords.back().type, RecordType::SegmentSealed);
    auto list = listConnections(dir.path());
    ASSERT_EQ(list.connections.size(), 5u);
    std::map<std::uint64_t, ConnectionState> states;
    for (const auto& c : list.connections) states[c.id] = c.state;
    EXPECT_EQ(states[1], ConnectionState::Truncated);
    EXPECT_EQ(states[2], ConnectionState::Closed);
    EXPECT_EQ(states[3], ConnectionState::Truncated);
    EXPECT_EQ(states[4], ConnectionState::Closed);
    EXPECT_EQ(states[9], ConnectionState::Truncated);
}

TEST(AuditRecoveryTest, TruncationsAfterASealedLastSegmentGoToANewSegment) {
    TempDir dir;
    SegmentBuilder segment(dir.path(), 1, 5);
    segment.open(6);
    segment.chunk(6, kDirectionC2U, "xyz");
    segment.seal();  // sealed by a roll; the next segment was never created
    segment.write();
    auto before = readFile(segment.indexPath());
    auto report = recoverAndCheck(dir.path());
    EXPECT_EQ(readFile(segment.indexPath()), before);  // nothing after SegmentSealed
    EXPECT_EQ(report.lastSegment, (std::map<unsigned, std::uint64_t>{{1, 6}}));
    auto created = records(dir.path() + "/w01-0000000006.index");
    ASSERT_EQ(created.size(), 3u);
    EXPECT_EQ(created[0].type, RecordType::SegmentStart);
    EXPECT_EQ(created[0].segment, 6u);
    EXPECT_EQ(created[0].idFloor, 7u) << "above every id of the worker's older segments";
    EXPECT_EQ(report.maxIdFloor, 7u);
    EXPECT_EQ(created[1].type, RecordType::Truncated);
    EXPECT_EQ(created[1].id, 6u);
    EXPECT_EQ(created[2].type, RecordType::SegmentSealed);
    EXPECT_EQ(readFile(dir.path() + "/w01-0000000006.data"), "");
    EXPECT_EQ(report.truncatedConnections, 1u);
}

// Retention deleted every segment with an Open record (after a restart only the new, empty one
// is left): the floor alone tells where ids continue.
TEST(AuditRecoveryTest, ReportsTheIdFloorOfASegmentWithoutOpenRecords) {
    TempDir dir;
    SegmentBuilder segment(dir.path(), 0, 9, 500);
    segment.write();
    auto report = recoverAndCheck(dir.path());
    EXPECT_EQ(report.maxConnectionId, 0u);
    EXPECT_EQ(report.maxIdFloor, 500u);
}

TEST(AuditRecoveryTest, TheLargestIdFloorOfAllWorkersIsReported) {
    TempDir dir;
    SegmentBuilder older(dir.path(), 0, 1, 40);
    older.open(45);
    older.close(45, 0, 0);
    older.seal();
    older.write();
    SegmentBuilder newer(dir.path(), 0, 2, 300);
    newer.seal();
    newer.write();
    SegmentBuilder other(dir.path(), 1, 4, 120);
    other.seal();
    other.write();
    auto report = recoverAndCheck(dir.path());
    EXPECT_TRUE(report.actions.empty()) << joined(report.actions);
    EXPECT_EQ(report.maxConnectionId, 45u);
    EXPECT_EQ(report.maxIdFloor, 300u);
}

TEST(AuditRecoveryTest, HalfMadeSegmentsAreRepaired) {
    TempDir dir;
    SegmentBuilder segment(dir.path(), 0, 1);
    segment.open(1);
    segment.close(1, 0, 0);
    segment.seal();
    segment.write();
    // Crash while creating segment 2: its data file exists, its index does not.
    SegmentBuilder::writeFile(dir.path() + "/w00-0000000002.data", "spliced but never indexed");
    // Worker 1: index created, SegmentStart not yet written; data file missing.
    SegmentBuilder::writeFile(dir.path() + "/w01-0000000003.index", "");
    // Worker 2: index but no data file, with a chunk that therefore never landed.
    SegmentBuilder noData(dir.path(), 2, 1);
    noData.open(5);
    noData.chunk(5, kDirectionC2U, "abc");
    SegmentBuilder::writeFile(noData.indexPath(), noData.index());
    auto report = recoverAndCheck(dir.path(), false);
    EXPECT_TRUE(anyLineHas(report.actions, "w00-0000000002.data: removed"))
        << joined(report.actions);
    EXPECT_TRUE(anyLineHas(report.actions, "w01-0000000003.index: wrote a new SegmentStart"));
    EXPECT_TRUE(anyLineHas(report.actions, "w01-0000000003.data: created"));
    EXPECT_TRUE(anyLineHas(report.actions, "w02-0000000001.data: created"));
    EXPECT_FALSE(std::filesystem::exists(dir.path() + "/w00-0000000002.data"));
    // The removed segment's number is still reported, so it is not reused.
    EXPECT_EQ(report.lastSegment, (std::map<unsigned, std::uint64_t>{{0, 2}, {1, 3}, {2, 1}}));
    auto start = records(dir.path() + "/w01-0000000003.index");
    ASSERT_EQ(start.size(), 2u);
    EXPECT_EQ(start[0].type, RecordType::SegmentStart);
    EXPECT_EQ(start[0].worker, 1u);
    EXPECT_EQ(start[0].segment, 3u);
    EXPECT_EQ(start[1].type, RecordType::SegmentSealed);
}

TEST(AuditRecoveryTest, DamageInsideASealedSegmentIsReportedNotCut) {
    TempDir dir;
    SegmentBuilder segment(dir.path(), 0, 1);
    segment.open(1);
    auto damaged = segment.chunk(1, kDirectionC2U, "abc");
    segment.chunk(1, kDirectionC2U, "def");
    segment.close(1, 6, 0);
    segment.seal();
    segment.index()[damaged + 30] ^= 0x10;
    segment.write();
    auto before = snapshot(dir.path());
    auto report = recoverAuditDirectory(dir.path());
    EXPECT_TRUE(snapshot(dir.path()) == before) << joined(report.actions);
    EXPECT_TRUE(anyLineHas(report.actions, "w00-0000000001.index:" + std::to_string(damaged),
                           "left unchanged"))
        << joined(report.actions);
    EXPECT_EQ(report.truncatedConnections, 0u);  // the Close after the damage was still read
    EXPECT_FALSE(verifyDirectory(dir.path()).empty());
}

// Worker 0's segments 1..count, each one connection, sealed (chained) unless `sealed` is false
// for it; returns each segment's files by number.
std::map<std::uint64_t, SegmentBuilder> writeChain(const std::string& dir, std::uint64_t count,
                                                   const ChainKey* key,
                                                   const std::set<std::uint64_t>& unsealed = {}) {
    std::map<std::uint64_t, SegmentBuilder> segments;
    for (std::uint64_t number = 1; number <= count; ++number) {
        auto& segment = segments.emplace(number, SegmentBuilder(dir, 0, number, number * 10))
                            .first->second;
        segment.open(number * 10);
        segment.chunk(number * 10, kDirectionC2U, "payload of segment " + std::to_string(number));
        segment.close(number * 10, 20, 0);
        if (!unsealed.count(number)) segment.seal(key);
        segment.write();
    }
    return segments;
}

std::vector<std::string> keyedProblems(const std::string& dir, const ChainKey& key) {
    std::vector<std::string> problems;
    verifyDirectory(
        dir, [&](const std::string& line) { problems.push_back(line); }, &key);
    return problems;
}

// The attack: edit an old segment, remove its seal and its successors' (so nothing names the
// edited digest), and let a restart seal them again. Recovery seals only the newest three.
TEST(AuditRecoveryTest, AnUnsealedOldSegmentIsLeftAndNotSealed) {
    TempDir dir;
    auto key = ChainKey::fromBytes(std::string(32, 'k'));
    auto segments = writeChain(dir.path(), 8, key.get(), {2, 3, 4, 5, 6, 7});
    auto editedIndex = readFile(segments.at(2).indexPath());
    auto before = snapshot(dir.path());
    auto report = recoverAuditDirectory(dir.path(), key.get());
    EXPECT_EQ(report.leftUnsealed,
              (std::vector<std::string>{segments.at(2).indexPath(), segments.at(3).indexPath(),
                                        segments.at(4).indexPath(), segments.at(5).indexPath(),
                                        segments.at(6).indexPath(), segments.at(7).indexPath()}))
        << joined(report.actions);
    EXPECT_TRUE(anyLineHas(report.actions, "w00-0000000002.index: unsealed, and older"))
        << joined(report.actions);
    EXPECT_TRUE(anyLineHas(report.actions, "w00-0000000006.index: unsealed, after a break",
                           "w00-0000000002.index (unsealed)"))
        << joined(report.actions);
    EXPECT_TRUE(snapshot(dir.path()) == before) << "recovery changed a segment it must leave";
    auto problems = keyedProblems(dir.path(), *key);
    EXPECT_TRUE(anyLineHas(problems, "w00-0000000002.index")) << joined(problems);
}

// A crash leaves the pending seal, the current segment and the one made ahead unsealed.
TEST(AuditRecoveryTest, TheNewestThreeUnsealedSegmentsOfACrashAreSealed) {
    TempDir dir;
    auto key = ChainKey::fromBytes(std::string(32, 'k'));
    writeChain(dir.path(), 8, key.get(), {6, 7, 8});
    auto report = recoverAuditDirectory(dir.path(), key.get());
    EXPECT_TRUE(report.leftUnsealed.empty()) << joined(report.actions);
    auto problems = keyedProblems(dir.path(), *key);
    EXPECT_TRUE(problems.empty()) << joined(problems) << joined(report.actions);
}

// The seal recovery would extend was forged: it is not built upon.
TEST(AuditRecoveryTest, ASealThatDoesNotHoldIsNotExtended) {
    for (bool forgedWithoutKey : {true, false}) {
        SCOPED_TRACE(forgedWithoutKey ? "sealed without the key" : "records edited after seal");
        TempDir dir;
        auto key = ChainKey::fromBytes(std::string(32, 'k'));
        auto segments = writeChain(dir.path(), 5, key.get(), {5});
        if (forgedWithoutKey) {
            // Segment 4 rewritten and sealed again by someone without the key.
            SegmentBuilder forged(dir.path(), 0, 4, 40);
            forged.open(40, "forged");
            forged.close(40, 0, 0);
            std::filesystem::remove(segments.at(4).indexPath());
            forged.seal();
            forged.write();
        } else {
            auto index = readFile(segments.at(4).indexPath());
            auto at = index.find("web");
            ASSERT_NE(at, std::string::npos);
            index.replace(at, 3, "WEB");  // a byte of the Open record's route, CRC left bad
            SegmentBuilder::writeFile(segments.at(4).indexPath(), index);
        }
        auto before = readFile(segments.at(5).indexPath());
        auto report = recoverAuditDirectory(dir.path(), key.get());
        EXPECT_EQ(report.leftUnsealed, (std::vector<std::string>{segments.at(5).indexPath()}))
            << joined(report.actions);
        EXPECT_TRUE(anyLineHas(report.actions, "w00-0000000004.index (its seal does not hold"))
            << joined(report.actions);
        EXPECT_EQ(readFile(segments.at(5).indexPath()), before);
    }
}

TEST(AuditRecoveryTest, ManyTruncationsAreSummarised) {
    TempDir dir;
    SegmentBuilder segment(dir.path(), 0, 1);
    for (std::uint64_t id = 1; id <= 120; ++id) segment.open(id);
    segment.write();
    auto report = recoverAndCheck(dir.path());
    EXPECT_EQ(report.truncatedConnections, 120u);
    EXPECT_TRUE(anyLineHas(report.actions, "70 more connections of worker 0 marked truncated"))
        << joined(report.actions);
    EXPECT_LT(report.actions.size(), 60u);
}

}  // namespace
}  // namespace splicegate::audit
