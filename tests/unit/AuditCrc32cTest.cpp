// CRC-32C (audit/Crc32c.h): known vectors (RFC 3720 appendix B.4 and the common check value),
// the hardware, folding and portable paths equal on every length and alignment, and chaining.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "audit/Crc32c.h"

namespace splicegate::audit {
namespace {

struct Vector {
    std::vector<std::uint8_t> bytes;
    std::uint32_t crc;
};

std::vector<Vector> knownVectors() {
    std::vector<Vector> vectors;
    std::string check = "123456789";
    vectors.push_back({{check.begin(), check.end()}, 0xE3069283});
    vectors.push_back({std::vector<std::uint8_t>(32, 0x00), 0x8A9136AA});
    vectors.push_back({std::vector<std::uint8_t>(32, 0xFF), 0x62A8AB43});
    std::vector<std::uint8_t> ascending(32), descending(32);
    for (int i = 0; i < 32; ++i) {
        ascending[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(i);
        descending[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(31 - i);
    }
    vectors.push_back({ascending, 0x46DD794E});
    vectors.push_back({descending, 0x113FDB5C});
    vectors.push_back({{}, 0});
    return vectors;
}

TEST(AuditCrc32cTest, PortableMatchesKnownVectors) {
    for (const auto& v : knownVectors())
        EXPECT_EQ(crc32cPortable(0, v.bytes.data(), v.bytes.size()), v.crc) << v.bytes.size();
}

TEST(AuditCrc32cTest, HardwareMatchesKnownVectors) {
    if (!crc32cHardwareAvailable()) GTEST_SKIP() << "this CPU has no SSE4.2 crc32 instruction";
    for (const auto& v : knownVectors())
        EXPECT_EQ(crc32cHardware(0, v.bytes.data(), v.bytes.size()), v.crc) << v.bytes.size();
}

TEST(AuditCrc32cTest, FoldingMatchesKnownVectorsAndALongRun) {
    if (!crc32cFoldingAvailable()) GTEST_SKIP() << "this CPU has no AVX-512 VPCLMULQDQ";
    for (const auto& v : knownVectors())
        EXPECT_EQ(crc32cFolding(0, v.bytes.data(), v.bytes.size()), v.crc) << v.bytes.size();
    // Long enough to fold: 4 KiB of zeros, then of 0xFF, against the table.
    for (std::uint8_t fill : {std::uint8_t{0x00}, std::uint8_t{0xFF}}) {
        std::vector<std::uint8_t> block(4096, fill);
        EXPECT_EQ(crc32cFolding(0, block.data(), block.size()),
                  crc32cPortable(0, block.data(), block.size()))
            << int(fill);
    }
}

TEST(AuditCrc32cTest, AllPathsAgreeOnEveryLengthAndAlignment) {
    std::vector<std::uint8_t> data(100000 + 16);
    std::uint32_t state = 12345;
    for (auto& byte : data) {
        state = state * 1103515245 + 12345;
        byte = static_cast<std::uint8_t>(state >> 16);
    }
    for (std::size_t start = 0; start < 9; ++start) {
        // Up to and past the three-stream blocks (3 x 256 and 3 x 8192 bytes), the folding's
        // 256-byte rounds (one at least), and their ends.
        for (std::size_t length :
             {0u,    1u,    7u,    8u,    9u,     15u,    63u,    64u,    65u,    255u,
              256u,  257u,  511u,  512u,  513u,   767u,   768u,   769u,   1000u,  1023u,
              1024u, 1025u, 1535u, 4096u, 24575u, 24576u, 24577u, 50000u, 65536u, 100000u}) {
            auto expected = crc32cPortable(0, data.data() + start, length);
            EXPECT_EQ(crc32c(0, data.data() + start, length), expected) << start << "+" << length;
            if (crc32cHardwareAvailable()) {
                EXPECT_EQ(crc32cHardware(0, data.data() + start, length), expected);
            }
            if (crc32cFoldingAvailable()) {
                EXPECT_EQ(crc32cFolding(0, data.data() + start, length), expected)
                    << start << "+" << length;
                // A register carried in from earlier bytes joins the first four.
                EXPECT_EQ(crc32cFolding(0xDEADBEEF, data.data() + start, length),
                          crc32cPortable(0xDEADBEEF, data.data() + start, length));
            }
        }
    }
}

TEST(AuditCrc32cTest, ThePathNamedIsTheFastestTheCpuHas) {
    std::string name = crc32cPathName();
    if (crc32cFoldingAvailable())
        EXPECT_EQ(name, "VPCLMULQDQ folding");
    else if (crc32cHardwareAvailable())
        EXPECT_EQ(name, "the crc32 instruction");
    else
        EXPECT_EQ(name, "a table (no SSE4.2)");
}

TEST(AuditCrc32cTest, ChainedCallsEqualOneCall) {
    std::string text = "The quick brown fox jumps over the lazy dog, twice over.";
    auto whole = crc32c(0, text.data(), text.size());
    for (std::size_t cut = 0; cut <= text.size(); ++cut) {
        auto first = crc32c(0, text.data(), cut);
        EXPECT_EQ(crc32c(first, text.data() + cut, text.size() - cut), whole) << cut;
        auto firstPortable = crc32cPortable(0, text.data(), cut);
        EXPECT_EQ(crc32cPortable(firstPortable, text.data() + cut, text.size() - cut), whole);
    }
}

TEST(AuditCrc32cTest, CombiningTwoCrcsEqualsTheCrcOfTheWhole) {
    std::mt19937 random(7);
    std::string bytes(70000, '\0');
    for (auto& c : bytes) c = static_cast<char>(random());
    std::vector<std::size_t> splits{0, 1, 2, 3, 4, 7, 8, 255, 4095, 65536, bytes.size() - 1, bytes.size()};
    for (int i = 0; i < 50; ++i) splits.push_back(random() % (bytes.size() + 1));
    auto whole = crc32c(0, bytes.data(), bytes.size());
    for (std::size_t split : splits) {
        auto a = crc32c(0, bytes.data(), split);
        auto b = crc32c(0, bytes.data() + split, bytes.size() - split);
        EXPECT_EQ(crc32cCombine(a, b, bytes.size() - split), whole) << split;
    }
}

TEST(AuditCrc32cTest, CombiningOverALongRunOfZerosEqualsTheCrcOfTheWhole) {
    // B's length reaches far bits of the shift: 2^24 + 5 zero bytes, checked against the real CRC.
    std::string zeros((std::size_t{1} << 24) + 5, '\0');
    const char head[] = "head";
    auto a = crc32c(0, head, 4);
    auto b = crc32c(0, zeros.data(), zeros.size());
    EXPECT_EQ(crc32cCombine(a, b, zeros.size()), crc32c(a, zeros.data(), zeros.size()));
    EXPECT_EQ(crc32cCombine(a, 0, 0), a);
}

}  // namespace
}  // namespace splicegate::audit
