// Audit index records (audit/FORMAT.md "Records"): encode/decode round trips, torn and corrupted
// input (every prefix, every flipped byte, random garbage), version-1 SegmentStart records, string
// limits, segment file names and listSegments.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <zlib.h>

#include <cstdint>
#include <random>
#include <string>
#include <system_error>
#include <vector>

#include "audit/Records.h"
#include "tests/support/Daemon.h"

namespace splicegate::audit {
namespace {

using test::TempDir;

const std::uint8_t* bytes(const std::string& text) {
    return reinterpret_cast<const std::uint8_t*>(text.data());
}

DecodeStatus decode(const std::string& data, Record& record, std::size_t& consumed,
                    std::string& problem) {
    return decodeRecord(bytes(data), data.size(), record, consumed, problem);
}

Record decodeOk(const std::string& data) {
    Record record;
    std::size_t consumed = 0;
    std::string problem;
    EXPECT_EQ(decode(data, record, consumed, problem), DecodeStatus::Ok) << problem;
    EXPECT_EQ(consumed, data.size());
    return record;
}

// One record of every type, as the writer would produce them.
std::vector<std::string> sampleRecords() {
    std::vector<std::string> records(6);
    encodeSegmentStart(records[0], 3, 42, 1'700'000'000'123'456'789, 0x0102030405060708ull);
    encodeOpen(records[1], 7, 1'700'000'001'000'000'000, "web", "198.51.100.7:40000",
               "[2001:db8::1]:443", "203.0.113.9:5000", "www.example.com");
    encodeChunk(records[2], 7, kDirectionU2C, 65536, 1ull << 33, 1'700'000'002'000'000'000);
    encodeClose(records[3], 7, 1'700'000'003'000'000'000, 123, 65536, "client closed");
    encodeTruncated(records[4], 8, -5);
    ChainHasher hasher(nullptr);
    encodeSegmentSealed(records[5], 1ull << 30, kSealFailed, nullptr, Digest{}, hasher);
    return records;
}

// Recomputes the CRC of a hand-edited record so that only the edit is wrong.
void fixCrc(std::string& record) {
    for (int i = 8; i < 12; ++i) record[static_cast<std::size_t>(i)] = 0;
    auto crc =
        static_cast<std::uint32_t>(::crc32(0L, bytes(record), static_cast<uInt>(record.size())));
    for (int i = 0; i < 4; ++i)
        record[8 + static_cast<std::size_t>(i)] = static_cast<char>((crc >> (8 * i)) & 0xff);
}

// A SegmentStart record as a version-1 writer made it (no connection id floor), byte by byte.
std::string segmentStartV1(std::uint32_t worker, std::uint64_t segment, std::int64_t createdNs) {
    std::string record;
    auto put = [&](std::uint64_t value, int bytes) {
        for (int i = 0; i < bytes; ++i)
            record.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
    };
    put(kRecordMagic, 4);
    put(static_cast<std::uint16_t>(RecordType::SegmentStart), 2);
    put(kSegmentStartV1RecordSize, 2);
    put(0, 4);  // CRC
    put(0, 4);  // reserved
    put(kOldestFormatVersion, 4);
    put(worker, 4);
    put(segment, 8);
    put(static_cast<std::uint64_t>(createdNs), 8);
    fixCrc(record);
    return record;
}

TEST(AuditRecordsTest, HeaderLayoutIsLittleEndian) {
    std::string record;
    encodeTruncated(record, 0x0102030405060708ull, 9);
    ASSERT_EQ(record.size(), kTruncatedRecordSize);
    EXPECT_EQ(record.substr(0, 4), "SGIX");
    EXPECT_EQ(static_cast<unsigned char>(record[4]), 5);  // type
    EXPECT_EQ(static_cast<unsigned char>(record[5]), 0);
    EXPECT_EQ(static_cast<unsigned char>(record[6]), kTruncatedRecordSize);  // length
    EXPECT_EQ(static_cast<unsigned char>(record[7]), 0);
    EXPECT_EQ(record.substr(12, 4), std::string(4, '\0'));    // reserved
    EXPECT_EQ(static_cast<unsigned char>(record[16]), 0x08);  // id, low byte first
    EXPECT_EQ(static_cast<unsigned char>(record[23]), 0x01);
}

// An Open record of versions 1 to 3 ends after the upstream: it reads with no via and no sni.
// One with a via but no sni is damage; a name longer than a DNS name is cut.
TEST(AuditRecordsTest, OpenRecordsWithAndWithoutViaAndSni) {
    std::string older = sampleRecords()[1];
    older.resize(older.size() - (2 + 16 + 2 + 15));
    older[6] = static_cast<char>(older.size());
    fixCrc(older);
    Record reused = decodeOk(sampleRecords()[1]);
    std::size_t consumed = 0;
    std::string problem;
    ASSERT_EQ(decode(older, reused, consumed, problem), DecodeStatus::Ok) << problem;
    EXPECT_EQ(reused.upstream, "[2001:db8::1]:443");
    EXPECT_EQ(reused.via, "");  // not what the record before it said
    EXPECT_EQ(reused.sni, "");

    std::string viaOnly = sampleRecords()[1];
    viaOnly.resize(viaOnly.size() - (2 + 15));
    viaOnly[6] = static_cast<char>(viaOnly.size());
    fixCrc(viaOnly);
    EXPECT_EQ(decode(viaOnly, reused, consumed, problem), DecodeStatus::Corrupt);

    std::string longName;
    encodeOpen(longName, 1, 0, "r", "c", "u", "", std::string(300, 'a'));
    auto open = decodeOk(longName);
    EXPECT_EQ(open.sni, std::string(kMaxNameBytes, 'a'));
    EXPECT_EQ(open.via, "");
}

TEST(AuditRecordsTest, FixedSizes) {
    auto records = sampleRecords();
    EXPECT_EQ(records[0].size(), kSegmentStartRecordSize);
    EXPECT_EQ(records[2].size(), kChunkRecordSize);
    EXPECT_EQ(records[4].size(), kTruncatedRecordSize);
    EXPECT_EQ(records[5].size(), kSegmentSealedRecordSize);
    EXPECT_EQ(records[1].size(),
              kRecordHeaderSize + 8 + 8 + 2 + 3 + 2 + 18 + 2 + 17 + 2 + 16 + 2 + 15);
}

TEST(AuditRecordsTest, RoundTripOfEveryType) {
    auto records = sampleRecords();
    auto start = decodeOk(records[0]);
    EXPECT_EQ(start.type, RecordType::SegmentStart);
    EXPECT_EQ(start.version, kFormatVersion);
    EXPECT_EQ(start.worker, 3u);
    EXPECT_EQ(start.segment, 42u);
    EXPECT_EQ(start.timeNs, 1'700'000'000'123'456'789);
    EXPECT_EQ(start.idFloor, 0x0102030405060708ull);

    auto open = decodeOk(records[1]);
    EXPECT_EQ(open.type, RecordType::Open);
    EXPECT_EQ(open.id, 7u);
    EXPECT_EQ(open.timeNs, 1'700'000'001'000'000'000);
    EXPECT_EQ(open.route, "web");
    EXPECT_EQ(open.client, "198.51.100.7:40000");
    EXPECT_EQ(open.upstream, "[2001:db8::1]:443");
    EXPECT_EQ(open.via, "203.0.113.9:5000");
    EXPECT_EQ(open.sni, "www.example.com");

    auto chunk = decodeOk(records[2]);
    EXPECT_EQ(chunk.type, RecordType::Chunk);
    EXPECT_EQ(chunk.id, 7u);
    EXPECT_EQ(chunk.direction, kDirectionU2C);
    EXPECT_EQ(chunk.length, 65536u);
    EXPECT_EQ(chunk.offset, 1ull << 33);
    EXPECT_EQ(chunk.chunkEnd(), (1ull << 33) + 65536);
    EXPECT_EQ(chunk.timeNs, 1'700'000'002'000'000'000);

    auto close = decodeOk(records[3]);
    EXPECT_EQ(close.type, RecordType::Close);
    EXPECT_EQ(close.id, 7u);
    EXPECT_EQ(close.timeNs, 1'700'000'003'000'000'000);
    EXPECT_EQ(close.c2uBytes, 123u);
    EXPECT_EQ(close.u2cBytes, 65536u);
    EXPECT_EQ(close.reason, "client closed");

    auto truncated = decodeOk(records[4]);
    EXPECT_EQ(truncated.type, RecordType::Truncated);
    EXPECT_EQ(truncated.id, 8u);
    EXPECT_EQ(truncated.timeNs, -5);

    auto sealed = decodeOk(records[5]);
    EXPECT_EQ(sealed.type, RecordType::SegmentSealed);
    EXPECT_EQ(sealed.dataBytes, 1ull << 30);
    EXPECT_EQ(sealed.status, kSealFailed);
}

TEST(AuditRecordsTest, VersionOneSegmentStartDecodesWithFloorZero) {
    std::string record = segmentStartV1(5, 77, 1'600'000'000'000'000'001);
    ASSERT_EQ(record.size(), kSegmentStartV1RecordSize);
    Record start;
    start.idFloor = 99;  // a reused Record must not keep an earlier record's floor
    std::size_t consumed = 0;
    std::string problem;
    ASSERT_EQ(decode(record, start, consumed, problem), DecodeStatus::Ok) << problem;
    EXPECT_EQ(consumed, kSegmentStartV1RecordSize);
    EXPECT_EQ(start.type, RecordType::SegmentStart);
    EXPECT_EQ(start.version, 1u);
    EXPECT_EQ(start.worker, 5u);
    EXPECT_EQ(start.segment, 77u);
    EXPECT_EQ(start.timeNs, 1'600'000'000'000'000'001);
    EXPECT_EQ(start.idFloor, 0u);
    for (std::size_t size = 0; size < record.size(); ++size)
        EXPECT_EQ(decodeRecord(bytes(record), size, start, consumed, problem),
                  DecodeStatus::Incomplete)
            << "cut at " << size;
}

TEST(AuditRecordsTest, ConsecutiveRecordsDecodeOneByOne) {
    std::string all;
    for (const auto& record : sampleRecords()) all += record;
    std::size_t at = 0;
    int count = 0;
    Record record;
    while (at < all.size()) {
        std::size_t consumed = 0;
        std::string problem;
        ASSERT_EQ(decodeRecord(bytes(all) + at, all.size() - at, record, consumed, problem),
                  DecodeStatus::Ok)
            << problem;
        EXPECT_EQ(static_cast<int>(record.type), count + 1);
        at += consumed;
        ++count;
    }
    EXPECT_EQ(count, 6);
}

TEST(AuditRecordsTest, EveryTruncationIsIncomplete) {
    for (const auto& record : sampleRecords()) {
        for (std::size_t size = 0; size < record.size(); ++size) {
            Record out;
            std::size_t consumed = 99;
            std::string problem;
            EXPECT_EQ(decodeRecord(bytes(record), size, out, consumed, problem),
                      DecodeStatus::Incomplete)
                << "type " << static_cast<int>(record[4]) << " cut at " << size;
            EXPECT_EQ(consumed, 0u);
            EXPECT_FALSE(problem.empty());
        }
    }
}

TEST(AuditRecordsTest, EveryFlippedByteIsCorrupt) {
    // The padding after the record keeps a grown length field from reading past the buffer, so
    // every flip must be caught by magic, length or CRC.
    const std::string padding(kMaxRecordSize, '\0');
    for (const auto& record : sampleRecords()) {
        for (std::size_t at = 0; at < record.size(); ++at) {
            for (unsigned mask : {0x01u, 0x80u, 0xffu}) {
                std::string damaged = record + padding;
                damaged[at] = static_cast<char>(static_cast<unsigned char>(damaged[at]) ^ mask);
                Record out;
                std::size_t consumed = 99;
                std::string problem;
                EXPECT_EQ(decode(damaged, out, consumed, problem), DecodeStatus::Corrupt)
                    << "type " << static_cast<int>(record[4]) << " byte " << at << " ^ " << mask;
                EXPECT_EQ(consumed, 0u);
                EXPECT_FALSE(problem.empty());
            }
        }
    }
}

TEST(AuditRecordsTest, BadFieldsWithAGoodCrcAreCorrupt) {
    auto expectCorrupt = [](std::string record, const std::string& wanted) {
        fixCrc(record);
        Record out;
        std::size_t consumed = 0;
        std::string problem;
        EXPECT_EQ(decode(record, out, consumed, problem), DecodeStatus::Corrupt) << wanted;
        EXPECT_NE(problem.find(wanted), std::string::npos) << problem;
    };
    auto records = sampleRecords();
    std::string unknownType = records[4];
    unknownType[4] = 9;
    expectCorrupt(unknownType, "unknown record type 9");
    std::string version = records[0];
    version[16] = 5;
    expectCorrupt(version, "unsupported format version 5");
    version[16] = 0;
    expectCorrupt(version, "unsupported format version 0");
    // The body's length must be the one of the record's version.
    std::string v1WithFloor = records[0];
    v1WithFloor[16] = 1;
    expectCorrupt(v1WithFloor, "wrong length");
    std::string v2WithoutFloor = segmentStartV1(3, 42, 0);
    v2WithoutFloor[16] = 2;
    expectCorrupt(v2WithoutFloor, "wrong length");
    std::string direction = records[2];
    direction[24] = 2;
    expectCorrupt(direction, "direction");
    std::string padding = records[2];
    padding[26] = 1;
    expectCorrupt(padding, "padding");
    std::string status = records[5];
    status[24] = 2;
    expectCorrupt(status, "status");
    std::string reserved = records[4];
    reserved[13] = 1;
    expectCorrupt(reserved, "reserved");
    // A string length that runs past the record.
    std::string open = records[1];
    open[32] = 100;
    expectCorrupt(open, "string");
    // A fixed-size record with a body too long (length field says so, CRC matches).
    std::string longer = records[4] + "xx";
    longer[6] = static_cast<char>(longer.size());
    expectCorrupt(longer, "wrong length");
    std::string shortLength = records[4];
    shortLength[6] = 15;
    Record out;
    std::size_t consumed = 0;
    std::string problem;
    EXPECT_EQ(decode(shortLength, out, consumed, problem), DecodeStatus::Corrupt);
}

TEST(AuditRecordsTest, RandomGarbageNeverCrashes) {
    std::mt19937_64 random(12345);
    const auto valid = sampleRecords();
    Record out;
    for (int round = 0; round < 20000; ++round) {
        std::string data(random() % 200, '\0');
        for (auto& c : data) c = static_cast<char>(random());
        if (round % 2 == 0 && data.size() >= 8) {
            // Valid magic and a plausible length, to get past the first checks.
            std::string prefix = valid[round % valid.size()].substr(0, 8);
            data.replace(0, 8, prefix);
        }
        std::size_t consumed = 0;
        std::string problem;
        auto status = decode(data, out, consumed, problem);
        EXPECT_LE(consumed, data.size());
        if (status != DecodeStatus::Ok) {
            EXPECT_EQ(consumed, 0u);
        }
    }
}

TEST(AuditRecordsTest, LongStringsAreCutToFitTheRecord) {
    std::string route(70000, 'r');
    std::string client = std::string(kMaxStringBytes - 1, 'c') + "\xc3\xa9";  // é straddles
    std::string upstream(kMaxStringBytes + 5, 'u');
    std::string record;
    encodeOpen(record, 1, 2, route, client, upstream);
    ASSERT_LE(record.size(), kMaxRecordSize);
    auto open = decodeOk(record);
    EXPECT_EQ(open.route, route.substr(0, kMaxStringBytes));
    EXPECT_EQ(open.client, client.substr(0, kMaxStringBytes - 1));  // not half a character
    EXPECT_EQ(open.upstream, upstream.substr(0, kMaxStringBytes));
    std::string close;
    encodeClose(close, 1, 2, 3, 4, std::string(100000, 'x'));
    EXPECT_EQ(decodeOk(close).reason.size(), kMaxStringBytes);
}

TEST(AuditRecordsTest, EncodersAppend) {
    std::string out = "prefix";
    encodeTruncated(out, 1, 2);
    encodeTruncated(out, 3, 4);
    ASSERT_EQ(out.size(), 6 + 2 * kTruncatedRecordSize);
    EXPECT_EQ(decodeOk(out.substr(6, kTruncatedRecordSize)).id, 1u);
    EXPECT_EQ(decodeOk(out.substr(6 + kTruncatedRecordSize)).id, 3u);
}

TEST(AuditRecordsTest, SegmentBaseNames) {
    EXPECT_EQ(segmentBaseName(0, 1), "w00-0000000001");
    EXPECT_EQ(segmentBaseName(7, 1234567890), "w07-1234567890");
    EXPECT_EQ(segmentBaseName(128, 12345678901ull), "w128-12345678901");
    unsigned worker = 0;
    std::uint64_t segment = 0;
    EXPECT_TRUE(parseSegmentBaseName("w07-0000000042", worker, segment));
    EXPECT_EQ(worker, 7u);
    EXPECT_EQ(segment, 42u);
    EXPECT_TRUE(parseSegmentBaseName("w128-12345678901", worker, segment));
    EXPECT_EQ(worker, 128u);
    for (const char* bad : {"w7-0000000042", "w007-0000000042", "w07-42", "w07-00000000042",
                            "x07-0000000042", "w0a-0000000042", "w07_0000000042", "w-0000000042",
                            "w07-", "", "w07-000000004x", "w99999999999-0000000001"})
        EXPECT_FALSE(parseSegmentBaseName(bad, worker, segment)) << bad;
}

TEST(AuditRecordsTest, SpareDataNamesAreNoSegmentNames) {
    EXPECT_EQ(spareDataName(0, 0), "w00.spare0");
    EXPECT_EQ(spareDataName(128, 1), "w128.spare1");
    unsigned worker = 0, slot = 0;
    EXPECT_TRUE(parseSpareDataName("w07.spare1", worker, slot));
    EXPECT_EQ(worker, 7u);
    EXPECT_EQ(slot, 1u);
    EXPECT_TRUE(parseSpareDataName("w128.spare0", worker, slot));
    EXPECT_EQ(worker, 128u);
    EXPECT_EQ(slot, 0u);
    for (const char* bad :
         {"w7.spare0", "w007.spare0", "w07.spare", "w07.spare01", "w07.data", "x07.spare0",
          "w0a.spare0", ".spare0", "", "w07.spare0x", "w99999999999.spare0"})
        EXPECT_FALSE(parseSpareDataName(bad, worker, slot)) << bad;
    std::uint64_t segment = 0;
    EXPECT_FALSE(parseSegmentBaseName("w07.spare0", worker, segment));
}

TEST(AuditRecordsTest, ListSegmentsSortsNumericallyAndIgnoresJunk) {
    TempDir dir;
    for (const char* name :
         {"w10-0000000001.index", "w02-0000000010.data", "w02-0000000010.index",
          "w02-0000000009.index", "w02-0000000009.data", "w00-0000000003.data",
          "w100-0000000001.index", "notes.txt", "w2-0000000001.index", "w02-0000000001.index.tmp",
          "w02-0000000001.idx", "w02-1.data", ".w02-0000000001.index"})
        dir.write(name, "x");
    ASSERT_EQ(::mkdir((dir.path() + "/w05-0000000001.index").c_str(), 0755), 0);
    auto segments = listSegments(dir.path());
    ASSERT_EQ(segments.size(), 6u);
    std::vector<std::pair<unsigned, std::uint64_t>> order;
    for (const auto& s : segments) {
        // A non-regular file with a segment's name is listed as unsafe, never as a file.
        if (s.worker == 5) {
            EXPECT_TRUE(s.unsafe);
            EXPECT_FALSE(s.hasIndex);
            continue;
        }
        EXPECT_FALSE(s.unsafe);
        order.emplace_back(s.worker, s.segment);
    }
    std::vector<std::pair<unsigned, std::uint64_t>> expected = {
        {0, 3}, {2, 9}, {2, 10}, {10, 1}, {100, 1}};
    EXPECT_EQ(order, expected);
    EXPECT_TRUE(segments[0].hasData);
    EXPECT_FALSE(segments[0].hasIndex);
    EXPECT_TRUE(segments[1].hasData && segments[1].hasIndex);
    EXPECT_FALSE(segments[3].hasData);
    EXPECT_EQ(segments[1].indexPath, dir.path() + "/w02-0000000009.index");
    EXPECT_EQ(segments[1].dataPath, dir.path() + "/w02-0000000009.data");
    // A path given with a trailing slash gives the same file names.
    EXPECT_EQ(listSegments(dir.path() + "/")[1].indexPath, dir.path() + "/w02-0000000009.index");
}

TEST(AuditRecordsTest, ListSegmentsOfAMissingDirectoryThrowsNamingIt) {
    TempDir dir;
    std::string missing = dir.path() + "/nope";
    try {
        listSegments(missing);
        FAIL() << "no exception";
    } catch (const std::system_error& error) {
        EXPECT_NE(std::string(error.what()).find(missing), std::string::npos) << error.what();
        EXPECT_EQ(error.code().value(), ENOENT);
    }
    EXPECT_TRUE(listSegments(dir.path()).empty());
}

}  // namespace
}  // namespace splicegate::audit
