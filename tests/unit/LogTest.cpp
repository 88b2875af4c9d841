// Log lines: journald priorities instead of time stamps when stderr is the journal, the
// suppression of repeated warnings, batches of lines, and the access line's fields.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>

#include <regex>
#include <string>

#include "common/Log.h"
#include "common/UniqueFd.h"
#include "relay/AccessLog.h"
#include "tests/support/Sockets.h"

namespace splicegate {
namespace {

using test::numericAddress;

TEST(LogTest, JournalLinesCarryThePriorityAndNoTimestamp) {
    EXPECT_EQ(formatLogLine(LogLevel::Error, "disk gone", true), "<3>error disk gone");
    EXPECT_EQ(formatLogLine(LogLevel::Warn, "slow", true), "<4>warn slow");
    EXPECT_EQ(formatLogLine(LogLevel::Info, "started", true), "<6>info started");
    EXPECT_EQ(formatLogLine(LogLevel::Debug, "tick", true), "<7>debug tick");
}

TEST(LogTest, TerminalLinesStartWithAnUtcTimestamp) {
    auto line = formatLogLine(LogLevel::Warn, "slow", false);
    EXPECT_TRUE(
        std::regex_match(line, std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z warn slow)")))
        << line;
}

TEST(LogTest, NewlinesInAMessageCannotForgeALine) {
    EXPECT_EQ(formatLogLine(LogLevel::Info, "a\nerror forged\r", true), "<6>info a error forged ");
}

TEST(LogTest, JournalIsDetectedOnlyWhenTheStreamIsStderr) {
    struct stat status {};
    ASSERT_EQ(::fstat(STDERR_FILENO, &status), 0);
    auto matching = std::to_string(status.st_dev) + ":" + std::to_string(status.st_ino);
    detectJournal(matching.c_str());
    EXPECT_TRUE(logsToJournal());
    auto other = std::to_string(status.st_dev) + ":" + std::to_string(status.st_ino + 1);
    detectJournal(other.c_str());
    EXPECT_FALSE(logsToJournal());
    detectJournal("garbage");
    EXPECT_FALSE(logsToJournal());
    detectJournal(nullptr);
    EXPECT_FALSE(logsToJournal());
}

// What a pipe holds now (non-blocking reads until empty).
std::string drain(int fd) {
    std::string text;
    char buffer[8192];
    for (;;) {
        auto got = ::read(fd, buffer, sizeof buffer);
        if (got <= 0) return text;
        text.append(buffer, static_cast<std::size_t>(got));
    }
}

// A batch writing into a pipe the test reads, in the time-stamped (not journal) format.
class LogBatchTest : public ::testing::Test {
  protected:
    void SetUp() override {
        int ends[2];
        ASSERT_EQ(::pipe2(ends, O_NONBLOCK | O_CLOEXEC), 0);
        reader.reset(ends[0]);
        writer.reset(ends[1]);
        detectJournal(nullptr);
    }
    UniqueFd reader, writer;
};

TEST_F(LogBatchTest, LinesAreWrittenOnlyWhenFlushedAndInOrder) {
    {
        LogBatch batch(writer.get());
        batch.add(LogLevel::Info, "access id=1");
        batch.add(LogLevel::Debug, "below the level: dropped");
        batch.add(LogLevel::Warn, "access id=2");
        EXPECT_EQ(drain(reader.get()), "") << "written before the flush";
        batch.flush();
        EXPECT_TRUE(batch.empty());
        EXPECT_TRUE(std::regex_match(drain(reader.get()),
                                     std::regex(R"(\S+ info access id=1\n\S+ warn access id=2\n)")));
        batch.add(LogLevel::Info, "access id=3");
    }
    EXPECT_TRUE(std::regex_match(drain(reader.get()), std::regex(R"(\S+ info access id=3\n)")))
        << "the destructor flushes";
}

TEST_F(LogBatchTest, PiecesAreWholeLinesOfAtMostPipeBuf) {
    LogBatch batch(writer.get());
    const std::string message(100, 'x');
    std::size_t lineSize = formatLogLine(LogLevel::Info, message, false).size() + 1;
    std::size_t perPiece = PIPE_BUF / lineSize;
    for (std::size_t i = 0; i < perPiece; ++i) batch.add(LogLevel::Info, message);
    EXPECT_EQ(drain(reader.get()), "") << "a piece that fits stays pending";
    batch.add(LogLevel::Info, message);  // does not fit: the full piece goes first
    auto piece = drain(reader.get());
    EXPECT_EQ(piece.size(), perPiece * lineSize);
    EXPECT_EQ(piece.back(), '\n');
    batch.flush();
    EXPECT_EQ(drain(reader.get()).size(), lineSize);
}

TEST(LogTest, RepeatedWarningsOfOneKindAreCountedNotLogged) {
    using Clock = WarningLimiter::Clock;
    auto start = Clock::now();
    std::uint64_t report = 99;
    EXPECT_TRUE(WarningLimiter::admit("test kind A", report, start));
    EXPECT_EQ(report, 0u);
    for (int i = 0; i < 5; ++i)
        EXPECT_FALSE(WarningLimiter::admit("test kind A", report, start + std::chrono::seconds(1)));
    // Another kind has its own window.
    EXPECT_TRUE(WarningLimiter::admit("test kind B", report, start));
    // The window is over: the next one is logged with the count of the suppressed ones.
    auto later = start + WarningLimiter::kWindow;
    EXPECT_TRUE(WarningLimiter::admit("test kind A", report, later));
    EXPECT_EQ(report, 5u);
}

TEST(LogTest, SuppressedCountsAreReportedWhenTheWindowEnds) {
    using Clock = WarningLimiter::Clock;
    auto start = Clock::now();
    std::uint64_t report = 0;
    EXPECT_TRUE(WarningLimiter::admit("test kind C", report, start));
    EXPECT_FALSE(WarningLimiter::admit("test kind C", report, start));
    EXPECT_FALSE(WarningLimiter::admit("test kind C", report, start));
    auto early = WarningLimiter::takeEnded(start + std::chrono::seconds(1));
    for (const auto& [kind, count] : early) EXPECT_NE(kind, "test kind C");
    auto ended = WarningLimiter::takeEnded(start + WarningLimiter::kWindow);
    bool found = false;
    for (const auto& [kind, count] : ended)
        if (kind == "test kind C") {
            found = true;
            EXPECT_EQ(count, 2u);
        }
    EXPECT_TRUE(found);
    // Reported once: the kind starts over and its next warning is logged at once.
    EXPECT_TRUE(WarningLimiter::admit("test kind C", report, start + WarningLimiter::kWindow));
    EXPECT_EQ(report, 0u);
}

TEST(AccessLogTest, LineHasEveryFieldInOrder) {
    AccessRecord record{"web", 42,   numericAddress("127.0.0.2:40000"), numericAddress("[::1]:8080"), 1000,
                        20,    1234, CloseReason::IdleTimeout};
    EXPECT_EQ(formatAccessLine(record),
              "access route=web id=42 client=127.0.0.2:40000 upstream=[::1]:8080 c2u=1000 u2c=20 "
              "duration_ms=1234 reason=idle-timeout accepted=1970-01-01T00:00:00.000Z connect_ms=- "
              "retries=0 tried=- active=0");
}

TEST(AccessLogTest, NoUpstreamReadsDash) {
    AccessRecord record{"db", 7, numericAddress("10.0.0.1:5"),           SocketAddress{}, 0,
                        0,    3, CloseReason::UpstreamUnreachable};
    EXPECT_EQ(formatAccessLine(record),
              "access route=db id=7 client=10.0.0.1:5 upstream=- c2u=0 u2c=0 duration_ms=3 "
              "reason=upstream-unreachable accepted=1970-01-01T00:00:00.000Z connect_ms=- retries=0 "
              "tried=- active=0");
}

}  // namespace
}  // namespace splicegate
