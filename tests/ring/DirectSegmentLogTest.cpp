// DirectSegmentLog (audit/DirectSegmentLog.h): the direct writer behind segments and an index, on
// a real io_uring under /var/tmp. What it writes must be a log `verify` accepts and `extract`
// reads back exactly (payload CRCs checked), across segment rolls; a Close record waits for its
// connection's chunks; a full buffer gives no memory and the segment's offsets stay in step with
// the writer's.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "audit/AuditReader.h"
#include "audit/DirectSegmentLog.h"
#include "common/Ring.h"

namespace splicegate::audit {
namespace {

constexpr std::uint64_t kTagBase = std::uint64_t{0x21} << 56;

class ScratchDir {
  public:
    ScratchDir() {
        std::string pattern = "/var/tmp/splicegate-directseg.XXXXXX";
        if (::mkdtemp(pattern.data()) == nullptr)
            throw std::system_error(errno, std::system_category(), "mkdtemp");
        path_ = pattern;
    }
    ~ScratchDir() {
        std::error_code ignored;
        std::filesystem::remove_all(path_, ignored);
    }
    const std::string& path() const { return path_; }

  private:
    std::string path_;
};

std::string pattern(std::size_t length, unsigned seed) {
    std::mt19937 random(seed);
    std::string bytes(length, '\0');
    for (auto& byte : bytes) byte = static_cast<char>(random());
    return bytes;
}

DirectLogOptions smallOptions(std::uint64_t segmentBytes) {
    DirectLogOptions options;
    options.bufferBytes = 256 * 1024;
    options.writeBytes = 64 * 1024;
    options.maxWritesInFlight = 2;
    options.preallocateBytes = segmentBytes;
    return options;
}

class DirectSegmentLogTest : public ::testing::Test {
  protected:
    // Routes completions until a sync ends; its result (bounded: 400 waits of 50 ms).
    std::optional<int> driveSync(DirectSegmentLog& log) {
        for (int round = 0; round < 400; ++round) {
            ring_.submitAndWait(50);
            std::optional<int> ended;
            ring_.drainCompletions([&](const io_uring_cqe& cqe) {
                EXPECT_EQ(cqe.user_data & ~std::uint64_t{0xffffffff}, kTagBase);
                if (auto result = log.complete(static_cast<std::uint32_t>(cqe.user_data), cqe.res))
                    ended = result;
            });
            if (ended) return ended;
        }
        return std::nullopt;
    }
    // Routes completions until the log has room again.
    bool driveRoom(DirectSegmentLog& log) {
        for (int round = 0; round < 400 && log.room() == 0; ++round) {
            ring_.submitAndWait(50);
            ring_.drainCompletions([&](const io_uring_cqe& cqe) {
                log.complete(static_cast<std::uint32_t>(cqe.user_data), cqe.res);
            });
        }
        return log.room() > 0;
    }
    // Appends `bytes` as chunks of at most `piece` bytes of connection `id`, direction 0.
    void send(DirectSegmentLog& log, std::uint64_t id, const std::string& bytes,
              std::size_t piece) {
        std::size_t done = 0;
        while (done < bytes.size()) {
            DirectChunk chunk;
            auto want = static_cast<std::uint32_t>(std::min(piece, bytes.size() - done));
            ASSERT_EQ(log.reserve(want, chunk), 0);
            if (chunk.memory.empty()) {
                ASSERT_TRUE(driveRoom(log));
                continue;
            }
            auto size = static_cast<std::uint32_t>(chunk.memory.size());
            std::memcpy(chunk.memory.data(), bytes.data() + done, size);
            ASSERT_EQ(log.recordChunk(chunk, id, 0, size), 0);
            done += size;
        }
    }
    std::string extract(std::uint64_t id) {
        std::string path = dir_.path() + "/extract.out";
        ::unlink(path.c_str());
        auto result = extractConnection(dir_.path(), id, 0, [&] {
            return ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        });
        EXPECT_TRUE(result.found);
        std::string content;
        UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
        char buffer[65536];
        for (ssize_t got; fd && (got = ::read(fd.get(), buffer, sizeof buffer)) > 0;)
            content.append(buffer, static_cast<std::size_t>(got));
        return content;
    }

    Ring ring_{64, 2, 2};
    ScratchDir dir_;
};

TEST_F(DirectSegmentLogTest, WhatItWritesVerifiesAndReadsBackAcrossSegmentRolls) {
    constexpr std::uint64_t kSegmentBytes = 300 * 1024;
    {
        DirectSegmentLog log(std::make_unique<AuditWriter>(dir_.path(), 0, 1, kSegmentBytes), ring_,
                             smallOptions(kSegmentBytes), kTagBase);
        EXPECT_TRUE(log.writer().fixedBuffers());
        auto first = pattern(700 * 1024, 1), second = pattern(123457, 2);
        ASSERT_EQ(log.recordOpen(1, "web", "192.0.2.1:1000", "192.0.2.2:80"), 0);
        ASSERT_EQ(log.recordOpen(2, "web", "192.0.2.1:1001", "192.0.2.2:80"), 0);
        send(log, 1, first.substr(0, 100000), 30011);
        send(log, 2, second, 9999);
        send(log, 1, first.substr(100000), 65536);
        ASSERT_EQ(log.recordClose(1, first.size(), 0, "client-closed"), 0);
        ASSERT_EQ(log.recordClose(2, second.size(), 0, "client-closed"), 0);
        auto target = log.nextSyncSequence();
        ASSERT_EQ(log.startSync(), 1);
        auto result = driveSync(log);
        ASSERT_TRUE(result);
        EXPECT_EQ(*result, 0);
        EXPECT_GE(log.durableSequence(), target);
        EXPECT_EQ(extract(1), first);
        EXPECT_EQ(extract(2), second);
        log.syncNow();
    }
    VerifySummary summary;
    std::vector<std::string> problems;
    summary = verifyDirectory(dir_.path(), [&](const std::string& p) { problems.push_back(p); });
    EXPECT_TRUE(problems.empty()) << problems.front();
    EXPECT_GE(summary.segments, 3u) << "the log rolled";
    EXPECT_EQ(summary.uncheckedChunks, 0u) << "every chunk carries its payload CRC";
    EXPECT_EQ(summary.checkedPayloadBytes, 700u * 1024 + 123457);
}

TEST_F(DirectSegmentLogTest, CloseRecordWaitsForItsChunksToBeDurable) {
    DirectSegmentLog log(std::make_unique<AuditWriter>(dir_.path(), 0, 1, 1 << 30), ring_,
                         smallOptions(0), kTagBase);
    auto bytes = pattern(5000, 3);
    ASSERT_EQ(log.recordOpen(7, "web", "c", "u"), 0);
    send(log, 7, bytes, bytes.size());
    ASSERT_EQ(log.recordClose(7, bytes.size(), 0, "client-closed"), 0);
    ASSERT_EQ(log.flush(), 0);
    // Nothing is durable yet: the index holds the Open record only.
    auto listed = listConnections(dir_.path());
    ASSERT_EQ(listed.connections.size(), 1u);
    EXPECT_EQ(listed.connections[0].state, ConnectionState::Open);
    EXPECT_EQ(listed.connections[0].c2uBytes, 0u);

    ASSERT_EQ(log.startSync(), 1);
    ASSERT_EQ(driveSync(log), std::optional<int>(0));
    listed = listConnections(dir_.path());
    EXPECT_EQ(listed.connections[0].state, ConnectionState::Closed);
    EXPECT_EQ(extract(7), bytes);
}

TEST_F(DirectSegmentLogTest, FullBufferGivesNoMemoryAndTheSegmentOffsetsStayInStep) {
    std::string sent;
    {
        DirectSegmentLog log(std::make_unique<AuditWriter>(dir_.path(), 0, 1, 1 << 30), ring_,
                             smallOptions(0), kTagBase);
        ASSERT_EQ(log.recordOpen(1, "web", "c", "u"), 0);
        // Fill the whole buffer without routing a completion.
        for (unsigned i = 0;; ++i) {
            DirectChunk chunk;
            ASSERT_EQ(log.reserve(50000, chunk), 0);
            if (chunk.memory.empty()) break;
            auto piece = pattern(chunk.memory.size(), 10 + i);
            std::memcpy(chunk.memory.data(), piece.data(), piece.size());
            // Half filled: the rest goes back and the next reservation starts right after.
            auto half = static_cast<std::uint32_t>(piece.size() / 2 + 1);
            ASSERT_EQ(log.recordChunk(chunk, 1, 0, half), 0);
            sent += piece.substr(0, half);
        }
        EXPECT_EQ(log.room(), 0u);
        ASSERT_TRUE(driveRoom(log));
        ASSERT_EQ(log.recordClose(1, sent.size(), 0, "client-closed"), 0);
        ASSERT_EQ(log.startSync(), 1);
        ASSERT_EQ(driveSync(log), std::optional<int>(0));
        EXPECT_EQ(extract(1), sent);
        log.syncNow();
    }
    auto problems = verifyDirectory(dir_.path());
    EXPECT_TRUE(problems.empty()) << problems.front();
}

}  // namespace
}  // namespace splicegate::audit
