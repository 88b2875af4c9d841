// FileRangeReader (archive/s3/FileRangeReader.h): the bytes of a range, read with O_DIRECT on a
// file system that allows it and buffered where it does not, in any block alignment.
#include "archive/s3/FileRangeReader.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <string>

#include "common/UniqueFd.h"

namespace splicegate::s3 {
namespace {

std::string randomBytes(std::size_t size) {
    std::mt19937 random(11);
    std::string bytes(size, '\0');
    for (auto& c : bytes) c = static_cast<char>(random());
    return bytes;
}

std::string readAll(FileRangeReader& reader, std::size_t piece) {
    std::string out;
    std::string buffer(piece, '\0');
    for (;;) {
        ssize_t n = reader.read(buffer.data(), buffer.size());
        EXPECT_GE(n, 0) << -n;
        if (n <= 0) return out;
        out.append(buffer.data(), static_cast<std::size_t>(n));
    }
}

class FileRangeReaderTest : public ::testing::TestWithParam<const char*> {
  protected:
    void SetUp() override {
        dir_ = std::filesystem::path(GetParam()) / ("splicegate-frr-" + std::to_string(::getpid()));
        std::filesystem::create_directories(dir_);
        path_ = (dir_ / "segment.data").string();
        bytes_ = randomBytes((5u << 20) + 12345);  // more than two blocks, not block-aligned
        std::ofstream(path_, std::ios::binary) << bytes_;
        fd_ = UniqueFd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
        ASSERT_TRUE(fd_);
    }
    void TearDown() override { std::filesystem::remove_all(dir_); }

    std::filesystem::path dir_;
    std::string path_;
    std::string bytes_;
    UniqueFd fd_;
};

TEST_P(FileRangeReaderTest, ReadsExactlyTheRangeAtAnyOffsetAndPieceSize) {
    for (std::uint64_t offset : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{4095}, std::uint64_t{2u << 20}}) {
        for (std::size_t piece : {std::size_t{1000}, std::size_t{65536}, std::size_t{3u << 20}}) {
            std::uint64_t length = bytes_.size() - offset - 7;
            FileRangeReader reader(FileRange{fd_.get(), offset, length});
            EXPECT_EQ(readAll(reader, piece), bytes_.substr(offset, length)) << offset << " " << piece;
            EXPECT_EQ(reader.position(), length);
        }
    }
}

// curl's upload buffer is 2 MiB-aligned (archive/s3/Http.cpp): the reader reads into it
// directly, whole blocks past the range's end included, and returns only the range's bytes.
TEST_P(FileRangeReaderTest, ReadsExactlyTheRangeIntoAnAlignedBuffer) {
    struct Free {
        void operator()(char* p) const { std::free(p); }
    };
    for (std::uint64_t offset : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{2u << 20}}) {
        for (std::size_t piece : {std::size_t{10000}, std::size_t{3 * 4096}, std::size_t{2u << 20}}) {
            std::unique_ptr<char, Free> buffer(static_cast<char*>(std::aligned_alloc(4096, 2u << 20)));
            std::uint64_t length = bytes_.size() - offset - 7;
            FileRangeReader reader(FileRange{fd_.get(), offset, length});
            std::string out;
            ssize_t n;
            while ((n = reader.read(buffer.get(), piece)) > 0) out.append(buffer.get(), static_cast<std::size_t>(n));
            EXPECT_EQ(n, 0);
            EXPECT_EQ(out, bytes_.substr(offset, length)) << offset << " " << piece;
        }
    }
}

// A multipart upload's part starts where a chunk does, anywhere: the first read stops at the
// block boundary, so the reads after it are aligned and land in the buffer directly.
TEST_P(FileRangeReaderTest, AnUnalignedStartIsCopiedOnlyUpToTheNextBlock) {
    struct Free {
        void operator()(char* p) const { std::free(p); }
    };
    std::unique_ptr<char, Free> buffer(static_cast<char*>(std::aligned_alloc(4096, 2u << 20)));
    FileRangeReader reader(FileRange{fd_.get(), 4096 + 100, 3u << 20});
    ssize_t first = reader.read(buffer.get(), 2u << 20);
    if (reader.direct()) {
        EXPECT_EQ(first, 4096 - 100);
    } else {
        EXPECT_EQ(first, 2 << 20);   // buffered (tmpfs without O_DIRECT): as much as asked
    }
    ASSERT_GT(first, 0);
    EXPECT_EQ(std::string(buffer.get(), static_cast<std::size_t>(first)), bytes_.substr(4196, static_cast<std::size_t>(first)));
    ssize_t second = reader.read(buffer.get(), 2u << 20);
    EXPECT_EQ(second, 2 << 20);
    EXPECT_EQ(std::string(buffer.get(), static_cast<std::size_t>(second)),
              bytes_.substr(4196 + static_cast<std::size_t>(first), static_cast<std::size_t>(second)));
}

TEST_P(FileRangeReaderTest, SeekingBackReadsTheSameBytesAgain) {
    FileRangeReader reader(FileRange{fd_.get(), 10, 3u << 20});
    std::string first = readAll(reader, 1u << 20);
    reader.seek(12345);
    EXPECT_EQ(readAll(reader, 70000), first.substr(12345));
}

TEST_P(FileRangeReaderTest, AFileShorterThanTheRangeIsNoDataNotAShortBody) {
    FileRangeReader reader(FileRange{fd_.get(), 0, bytes_.size() + 100});
    std::string buffer(1u << 20, '\0');
    std::uint64_t total = 0;
    ssize_t n;
    while ((n = reader.read(buffer.data(), buffer.size())) > 0) total += static_cast<std::uint64_t>(n);
    EXPECT_EQ(n, -ENODATA);
    EXPECT_EQ(total, bytes_.size());
}

TEST(FileRangeReaderPathTest, BypassesThePageCacheOnExt4) {
    for (const char* base : {"/var/tmp", "/dev/shm"}) {
        auto path = std::filesystem::path(base) / ("splicegate-frr-path-" + std::to_string(::getpid()));
        std::ofstream(path, std::ios::binary) << randomBytes(10000);
        UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
        FileRangeReader reader(FileRange{fd.get(), 0, 10000});
        std::string buffer(20000, '\0');
        EXPECT_EQ(reader.read(buffer.data(), buffer.size()), 10000) << base;
        // Whether tmpfs takes O_DIRECT depends on the kernel: the bytes are right either way.
        if (std::string(base) == "/var/tmp") {
            EXPECT_TRUE(reader.direct()) << base;
        }
        std::filesystem::remove(path);
    }
}

INSTANTIATE_TEST_SUITE_P(FileSystems, FileRangeReaderTest, ::testing::Values("/var/tmp", "/dev/shm"));

}  // namespace
}  // namespace splicegate::s3
