#include "common/Log.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <climits>
#include <ctime>
#include <map>
#include <mutex>
#include <string>

namespace splicegate {
namespace {
std::atomic<LogLevel> currentLevel{LogLevel::Info};
std::atomic<bool> journal{false};

const char* levelName(LogLevel level) {
    switch (level) {
        case LogLevel::Debug:
            return "debug";
        case LogLevel::Info:
            return "info";
        case LogLevel::Warn:
            return "warn";
        case LogLevel::Error:
            return "error";
    }
    return "?";
}

// sd-daemon(3) priorities: LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG.
char journalPriority(LogLevel level) {
    switch (level) {
        case LogLevel::Debug:
            return '7';
        case LogLevel::Info:
            return '6';
        case LogLevel::Warn:
            return '4';
        case LogLevel::Error:
            return '3';
    }
    return '6';
}

void appendTimestamp(std::string& line) {
    auto now = std::chrono::system_clock::now();
    auto seconds = std::chrono::system_clock::to_time_t(now);
    auto millis =
        std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() %
        1000;
    std::tm utc{};
    gmtime_r(&seconds, &utc);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &utc);
    line += stamp;
    line += '.';
    line += static_cast<char>('0' + millis / 100);
    line += static_cast<char>('0' + millis / 10 % 10);
    line += static_cast<char>('0' + millis % 10);
    line += "Z ";
}

bool parseDevIno(std::string_view text, dev_t& dev, ino_t& ino) {
    auto colon = text.find(':');
    if (colon == std::string_view::npos) return false;
    unsigned long long devValue = 0, inoValue = 0;
    auto devEnd = text.data() + colon;
    auto [p1, e1] = std::from_chars(text.data(), devEnd, devValue);
    auto [p2, e2] = std::from_chars(devEnd + 1, text.data() + text.size(), inoValue);
    if (e1 != std::errc{} || p1 != devEnd || e2 != std::errc{} || p2 != text.data() + text.size())
        return false;
    dev = static_cast<dev_t>(devValue);
    ino = static_cast<ino_t>(inoValue);
    return true;
}

struct WarningWindow {
    std::chrono::steady_clock::time_point started;
    std::uint64_t suppressed = 0;
};

std::mutex warningMutex;
std::map<std::string, WarningWindow, std::less<>> warningWindows;
}  // namespace

void setLogLevel(LogLevel level) noexcept {
    currentLevel.store(level, std::memory_order_relaxed);
}
LogLevel logLevel() noexcept {
    return currentLevel.load(std::memory_order_relaxed);
}

bool parseLogLevel(std::string_view text, LogLevel& out) noexcept {
    for (auto level : {LogLevel::Debug, LogLevel::Info, LogLevel::Warn, LogLevel::Error}) {
        if (text == levelName(level)) {
            out = level;
            return true;
        }
    }
    return false;
}

void detectJournal(const char* journalStream) noexcept {
    // systemd sets JOURNAL_STREAM for a unit whose stderr is the journal; a child whose stderr
    // was redirected keeps the variable, so the inode decides, as sd_journal_stream_fd(3) says.
    dev_t dev = 0;
    ino_t ino = 0;
    struct stat status {};
    bool matches = journalStream != nullptr && parseDevIno(journalStream, dev, ino) &&
                   ::fstat(STDERR_FILENO, &status) == 0 && status.st_dev == dev &&
                   status.st_ino == ino;
    journal.store(matches, std::memory_order_relaxed);
}

bool logsToJournal() noexcept {
    return journal.load(std::memory_order_relaxed);
}

std::string formatLogLine(LogLevel level, std::string_view message, bool toJournal) {
    std::string line;
    line.reserve(message.size() + 48);
    if (toJournal) {
        line += '<';
        line += journalPriority(level);
        line += '>';
    } else {
        appendTimestamp(line);
    }
    line += levelName(level);
    line += ' ';
    // One event, one line: a newline inside a message (an peer's text, a path) would forge a
    // second line.
    for (char c : message) line += (c == '\n' || c == '\r') ? ' ' : c;
    return line;
}

void logLine(LogLevel level, std::string_view message) noexcept {
    try {
        auto line = formatLogLine(level, message, logsToJournal());
        line += '\n';
        // One write per line; a short write to stderr is not worth a retry loop here.
        [[maybe_unused]] auto written = ::write(STDERR_FILENO, line.data(), line.size());
    } catch (...) {
        // Logging must never take the process down (allocation failure while formatting).
    }
}

void LogBatch::add(LogLevel level, std::string_view message) noexcept {
    if (level < logLevel()) return;
    try {
        auto line = formatLogLine(level, message, logsToJournal());
        line += '\n';
        if (pending_.size() + line.size() > PIPE_BUF) flush();
        pending_ += line;
        if (pending_.size() >= PIPE_BUF) flush();
    } catch (...) {
        // As logLine: logging never takes the process down.
    }
}

void LogBatch::flush() noexcept {
    if (pending_.empty()) return;
    // As logLine: a short write to stderr is not worth a retry loop.
    [[maybe_unused]] auto written = ::write(fd_, pending_.data(), pending_.size());
    pending_.clear();
}

bool WarningLimiter::admit(std::string_view kind, std::uint64_t& report, Clock::time_point now) {
    std::lock_guard lock(warningMutex);
    auto found = warningWindows.find(kind);
    if (found == warningWindows.end()) {
        warningWindows.emplace(std::string(kind), WarningWindow{now, 0});
        report = 0;
        return true;
    }
    auto& window = found->second;
    if (now - window.started < kWindow) {
        ++window.suppressed;
        return false;
    }
    report = window.suppressed;
    window = WarningWindow{now, 0};
    return true;
}

std::vector<std::pair<std::string, std::uint64_t>> WarningLimiter::takeEnded(
    Clock::time_point now) {
    std::vector<std::pair<std::string, std::uint64_t>> ended;
    std::lock_guard lock(warningMutex);
    for (auto it = warningWindows.begin(); it != warningWindows.end();) {
        if (now - it->second.started < kWindow) {
            ++it;
            continue;
        }
        if (it->second.suppressed > 0) ended.emplace_back(it->first, it->second.suppressed);
        it = warningWindows.erase(it);  // a quiet kind starts over with its next warning
    }
    return ended;
}

void WarningLimiter::flush() {
    for (const auto& [kind, count] : takeEnded(Clock::now()))
        logWarn(kind, ": ", count, " similar warnings suppressed");
}

}  // namespace splicegate
