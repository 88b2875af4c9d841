// Where a multipart upload's parts are cut (archive/Parts.h): at the ends of the data file's
// chunk spans, every part but the last at least the part size, their CRCs combined from the
// spans'; equal parts otherwise; the part size raised past S3's 10000 parts; and S3's composite
// checksum of the parts, against AWS's documented construction.
#include "archive/Parts.h"

#include <gtest/gtest.h>

#include <string>

#include "archive/s3/Requests.h"
#include "audit/Crc32c.h"

namespace splicegate::archive {
namespace {

std::uint32_t crcOf(const std::string& bytes, std::uint64_t offset, std::uint64_t length) {
    return audit::crc32c(0, bytes.data() + offset, length);
}

// Spans of `sizes` over `bytes`, back to back, each with its true CRC.
std::vector<CrcPiece> piecesOf(const std::string& bytes, const std::vector<std::uint64_t>& sizes) {
    std::vector<CrcPiece> pieces;
    std::uint64_t offset = 0;
    for (auto size : sizes) {
        pieces.push_back({offset, size, crcOf(bytes, offset, size)});
        offset += size;
    }
    return pieces;
}

TEST(ArchiveParts, CutWhereThePiecesEndEachAtLeastThePartSizeButTheLast) {
    std::string bytes;
    for (int i = 0; i < 1000; ++i) bytes += static_cast<char>(i * 7 + 3);
    auto parts = partsFromPieces(piecesOf(bytes, {150, 100, 300, 50, 50, 50, 200, 100}), 250);
    ASSERT_EQ(parts.size(), 4u);
    EXPECT_EQ(parts[0], (s3::PartRange{0, 250, crcOf(bytes, 0, 250)}));
    EXPECT_EQ(parts[1], (s3::PartRange{250, 300, crcOf(bytes, 250, 300)}));
    EXPECT_EQ(parts[2], (s3::PartRange{550, 350, crcOf(bytes, 550, 350)}));
    EXPECT_EQ(parts[3], (s3::PartRange{900, 100, crcOf(bytes, 900, 100)}));
    EXPECT_EQ(combinedCrc32c(parts), crcOf(bytes, 0, bytes.size()));
    // One part when the part size exceeds the object.
    EXPECT_EQ(partsFromPieces(piecesOf(bytes, {400, 600}), 2000).size(), 1u);
}

TEST(ArchiveParts, APartOverFiveGibIsNotCutFromPieces) {
    std::vector<CrcPiece> pieces = {{0, (5ull << 30) + 1, 0}};
    EXPECT_TRUE(partsFromPieces(pieces, 64u << 20).empty());
}

TEST(ArchiveParts, EqualPartsCoverTheObjectTheLastShorter) {
    auto parts = equalParts(25, 10);
    ASSERT_EQ(parts.size(), 3u);
    EXPECT_EQ(parts[0].offset, 0u);
    EXPECT_EQ(parts[1].offset, 10u);
    EXPECT_EQ(parts[2].offset, 20u);
    EXPECT_EQ(parts[2].length, 5u);
    EXPECT_EQ(equalParts(20, 10).size(), 2u);
}

TEST(ArchiveParts, ThePartSizeIsRaisedPastTenThousandParts) {
    EXPECT_EQ(partBytesFor(640ull << 30, 64u << 20), 66u << 20);  // 640 GiB: 10000 x 65.5 MiB
    EXPECT_EQ(partBytesFor(1ull << 30, 64u << 20), 64u << 20);
    EXPECT_LE(equalParts(640ull << 30, partBytesFor(640ull << 30, 64u << 20)).size(), 10000u);
}

TEST(ArchiveParts, CompositeChecksumIsTheCrcOfThePartCrcs) {
    // AWS: base64(CRC32C(crc1 || crc2 || ...)) "-" N, each CRC four big-endian bytes.
    std::vector<s3::PartRange> parts = {{0, 5, 0x9A71BB4C}, {5, 5, 0x01020304}};
    const char raw[] = {'\x9a', '\x71', '\xbb', '\x4c', '\x01', '\x02', '\x03', '\x04'};
    EXPECT_EQ(compositeCrc32c(parts), s3::crc32cHeaderValue(audit::crc32c(0, raw, 8)) + "-2");
    EXPECT_EQ(compositePartCount(compositeCrc32c(parts)), 2u);
    EXPECT_EQ(compositePartCount("mnG7TA=="), std::nullopt);
    EXPECT_EQ(compositePartCount(""), std::nullopt);
    EXPECT_EQ(compositePartCount("mnG7TA==-"), std::nullopt);
    EXPECT_EQ(compositePartCount("mnG7TA==-0"), std::nullopt);
    EXPECT_EQ(compositePartCount("mnG7TA==-2x"), std::nullopt);
}

}  // namespace
}  // namespace splicegate::archive
