#include "archive/SealedSegment.h"

#include <gtest/gtest.h>

#include "tests/support/Daemon.h"
#include <zlib.h>

#include <filesystem>
#include <random>
#include <stdexcept>

#include "archive/Gzip.h"
#include "audit/Crc32c.h"
#include "tests/support/AuditSegmentBuilder.h"

namespace splicegate::archive {
namespace {

using test::TempDir;

audit::SegmentFiles filesOf(const test::SegmentBuilder& segment) {
    audit::SegmentFiles files;
    files.indexPath = segment.indexPath();
    files.dataPath = segment.dataPath();
    files.hasIndex = files.hasData = true;
    return files;
}

std::string gunzip(const std::string& compressed) {
    z_stream stream{};
    EXPECT_EQ(inflateInit2(&stream, 15 + 16), Z_OK);
    std::string out(1 << 20, '\0');
    stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data()));
    stream.avail_in = static_cast<uInt>(compressed.size());
    stream.next_out = reinterpret_cast<Bytef*>(out.data());
    stream.avail_out = static_cast<uInt>(out.size());
    EXPECT_EQ(inflate(&stream, Z_FINISH), Z_STREAM_END);
    out.resize(stream.total_out);
    inflateEnd(&stream);
    return out;
}

TEST(ArchiveSealedSegment, ReadsIdentitySealCrcAndConnections) {
    TempDir dir;
    test::SegmentBuilder segment(dir.path(), 2, 5);
    segment.open(1);
    segment.chunk(1, 0, "hello");
    segment.open(2, "db");
    segment.chunk(1, 1, "world, at length");
    segment.chunk(2, 0, "x");
    segment.close(1, 5, 16);
    segment.truncated(2);
    segment.seal();
    segment.write();

    auto sealed = readSealedSegment(filesOf(segment));
    ASSERT_TRUE(sealed);
    EXPECT_EQ(sealed->worker, 2u);
    EXPECT_EQ(sealed->segment, 5u);
    EXPECT_EQ(sealed->dataBytes, segment.data().size());
    EXPECT_EQ(sealed->indexBytes, segment.index().size());
    EXPECT_EQ(sealed->createdNs, test::kCraftedLogStartNs);
    EXPECT_FALSE(sealed->failed);
    ASSERT_TRUE(sealed->dataCrc32c);
    EXPECT_EQ(*sealed->dataCrc32c, audit::crc32c(0, segment.data().data(), segment.data().size()));
    ASSERT_EQ(sealed->sealDigest.size(), 64u);
    EXPECT_EQ(sealed->sealDigest.substr(0, 2),
              [&] {
                  char pair[3];
                  std::snprintf(pair, sizeof pair, "%02x", segment.digest()[0]);
                  return std::string(pair);
              }());

    ASSERT_EQ(sealed->connections.size(), 2u);
    const auto& first = sealed->connections[0];
    EXPECT_EQ(first.id, 1u);
    EXPECT_EQ(first.route, "web");
    EXPECT_EQ(first.state, "closed");
    EXPECT_EQ(first.c2uBytes, 5u);
    EXPECT_EQ(first.u2cBytes, 16u);
    EXPECT_EQ(sealed->connections[1].state, "truncated");
    EXPECT_EQ(sealed->connections[1].route, "db");

    auto lines = connectionsJsonLines(*sealed);
    EXPECT_NE(lines.find("{\"id\":1,\"worker\":2,\"segment\":5,\"route\":\"web\","), std::string::npos)
        << lines;
    EXPECT_NE(lines.find("\"c2u_bytes\":5,\"u2c_bytes\":16,\"state\":\"closed\",\"reason\":\"done\""),
              std::string::npos)
        << lines;
    EXPECT_EQ(std::count(lines.begin(), lines.end(), '\n'), 2);
    EXPECT_EQ(gunzip(gzip(lines)), lines);
}

TEST(ArchiveSealedSegment, AConnectionContinuedFromAnEarlierSegmentHasNoHead) {
    TempDir dir;
    test::SegmentBuilder segment(dir.path(), 0, 1);
    segment.chunk(9, 1, "tail");
    segment.close(9, 100, 204);
    segment.seal();
    segment.write();
    auto sealed = readSealedSegment(filesOf(segment));
    ASSERT_TRUE(sealed);
    auto lines = connectionsJsonLines(*sealed);
    EXPECT_NE(lines.find("\"route\":null,\"client\":null,\"via\":null,\"sni\":null,\"upstream\":null,"
                         "\"opened_ns\":null"),
              std::string::npos)
        << lines;
}

TEST(ArchiveSealedSegment, AnUnsealedSegmentIsNotReady) {
    TempDir dir;
    test::SegmentBuilder segment(dir.path(), 0, 1);
    segment.open(1);
    segment.chunk(1, 0, "abc");
    segment.write();
    EXPECT_FALSE(readSealedSegment(filesOf(segment)));
    // A torn last record (the daemon mid-write) is not ready either.
    segment.seal();
    segment.index().resize(segment.index().size() - 3);
    segment.write();
    EXPECT_FALSE(readSealedSegment(filesOf(segment)));
}

TEST(ArchiveSealedSegment, ChunksThatDoNotTileTheFileGiveNoCombinedCrc) {
    TempDir dir;
    test::SegmentBuilder segment(dir.path(), 0, 1);
    segment.open(1);
    segment.chunk(1, 0, "abc");
    segment.chunkAt(1, 0, 3, 3);  // no CRC
    segment.seal();
    segment.write();
    auto sealed = readSealedSegment(filesOf(segment));
    ASSERT_TRUE(sealed);
    EXPECT_FALSE(sealed->dataCrc32c);
}

TEST(ArchiveSealedSegment, ADamagedRecordIsNamedWithItsPlace) {
    TempDir dir;
    test::SegmentBuilder segment(dir.path(), 0, 1);
    auto open = segment.open(1);
    segment.seal();
    segment.index()[open + 20] ^= 0x55;
    segment.write();
    try {
        readSealedSegment(filesOf(segment));
        FAIL() << "a damaged index was read";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find(segment.indexPath() + ":" + std::to_string(open)),
                  std::string::npos)
            << e.what();
    }
}

}  // namespace
}  // namespace splicegate::archive
