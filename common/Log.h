#pragma once
// One line per event on stderr: "<UTC time> <level> <message>", or, when stderr is the journal
// (JOURNAL_STREAM names it), "<N><level> <message>" with the sd-daemon priority N and no time
// stamp (journald keeps its own). Thread-safe: each line is one write(2), so lines from
// different workers never interleave. GCC 12 lacks <format>, so messages are built by streaming
// the arguments: logInfo("listening on ", address).
#include <chrono>
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace splicegate {

enum class LogLevel { Debug = 0, Info = 1, Warn = 2, Error = 3 };

void setLogLevel(LogLevel level) noexcept;
LogLevel logLevel() noexcept;
bool parseLogLevel(std::string_view text, LogLevel& out) noexcept;
void logLine(LogLevel level, std::string_view message) noexcept;

// Decides the line format: journal when JOURNAL_STREAM's "DEV:INODE" is stderr's device and
// inode. Called once at start (before threads); `journalStream` is the variable's value or null.
void detectJournal(const char* journalStream) noexcept;
bool logsToJournal() noexcept;
// The line logLine() writes, without the newline (exposed for tests).
std::string formatLogLine(LogLevel level, std::string_view message, bool journal);

template <typename... Args>
std::string concat(Args&&... args) {
    std::ostringstream out;
    (out << ... << std::forward<Args>(args));
    return out.str();
}

template <typename... Args>
void logAt(LogLevel level, Args&&... args) {
    if (level < logLevel()) return;
    logLine(level, concat(std::forward<Args>(args)...));
}
template <typename... Args>
void logDebug(Args&&... args) {
    logAt(LogLevel::Debug, std::forward<Args>(args)...);
}
template <typename... Args>
void logInfo(Args&&... args) {
    logAt(LogLevel::Info, std::forward<Args>(args)...);
}
template <typename... Args>
void logWarn(Args&&... args) {
    logAt(LogLevel::Warn, std::forward<Args>(args)...);
}
template <typename... Args>
void logError(Args&&... args) {
    logAt(LogLevel::Error, std::forward<Args>(args)...);
}

// Lines gathered over one turn of a worker's loop and written together: a turn that closes many
// connections logs their access lines with one write(2) instead of one each. A batch is whole
// lines of at most PIPE_BUF bytes (a longer line goes alone), so when stderr is a pipe, no batch
// is split by or interleaved with another thread's line. Each line is formatted (time stamp
// included) when added. Thread affinity: one owner; the destructor flushes.
class LogBatch {
  public:
    explicit LogBatch(int fd = 2) noexcept : fd_(fd) {}
    ~LogBatch() { flush(); }
    LogBatch(const LogBatch&) = delete;
    LogBatch& operator=(const LogBatch&) = delete;

    void add(LogLevel level, std::string_view message) noexcept;
    void flush() noexcept;
    bool empty() const noexcept { return pending_.empty(); }

  private:
    int fd_;
    std::string pending_;
};

// Repeated warnings of one kind (e.g. "connect failed on route web"): the first of each window
// is logged; the rest are counted and reported as one line when the window is over, at the
// next warning of that kind or at flushSuppressedWarnings(). Thread-safe (one mutex, taken only
// on the warning path).
class WarningLimiter {
  public:
    using Clock = std::chrono::steady_clock;
    static constexpr auto kWindow = std::chrono::seconds(5);
    // True when a warning of `kind` may be logged now; otherwise counts it as suppressed.
    // `report` receives the suppressed count of the window just ended, 0 if none.
    static bool admit(std::string_view kind, std::uint64_t& report, Clock::time_point now);
    // Kinds whose window has ended with warnings suppressed, and how many; they start over.
    static std::vector<std::pair<std::string, std::uint64_t>> takeEnded(Clock::time_point now);
    // Logs "K: N similar warnings suppressed" for every kind takeEnded() gives.
    static void flush();
};

template <typename... Args>
void logWarnLimited(std::string_view kind, Args&&... args) {
    if (LogLevel::Warn < logLevel()) return;
    std::uint64_t suppressed = 0;
    if (!WarningLimiter::admit(kind, suppressed, WarningLimiter::Clock::now())) return;
    if (suppressed > 0) logWarn(kind, ": ", suppressed, " similar warnings suppressed");
    logWarn(std::forward<Args>(args)...);
}

inline void flushSuppressedWarnings() {
    WarningLimiter::flush();
}

}  // namespace splicegate
