#include "common/Log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <string>

namespace splicegate {
namespace {
std::atomic<LogLevel> currentLevel{LogLevel::Info};

const char* levelName(LogLevel level) {
    switch (level) {
        case LogLevel::Debug: return "debug";
        case LogLevel::Info: return "info";
        case LogLevel::Warn: return "warn";
        case LogLevel::Error: return "error";
    }
    return "?";
}
}  // namespace

void setLogLevel(LogLevel level) noexcept { currentLevel.store(level, std::memory_order_relaxed); }
LogLevel logLevel() noexcept { return currentLevel.load(std::memory_order_relaxed); }

bool parseLogLevel(std::string_view text, LogLevel& out) noexcept {
    for (auto level : {LogLevel::Debug, LogLevel::Info, LogLevel::Warn, LogLevel::Error}) {
        if (text == levelName(level)) {
            out = level;
            return true;
        }
    }
    return false;
}

void logLine(LogLevel level, std::string_view message) noexcept {
    try {
        auto now = std::chrono::system_clock::now();
        auto seconds = std::chrono::system_clock::to_time_t(now);
        auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(
                          now.time_since_epoch()).count() % 1000;
        std::tm utc{};
        gmtime_r(&seconds, &utc);
        char stamp[32];
        std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &utc);
        std::string line;
        line.reserve(message.size() + 48);
        line += stamp;
        line += '.';
        line += static_cast<char>('0' + millis / 100);
        line += static_cast<char>('0' + millis / 10 % 10);
        line += static_cast<char>('0' + millis % 10);
        line += "Z ";
        line += levelName(level);
        line += ' ';
        line += message;
        line += '\n';
        // One write per line; a short write to stderr is not worth a retry loop here.
        [[maybe_unused]] auto written = ::write(STDERR_FILENO, line.data(), line.size());
    } catch (...) {
        // Logging must never take the process down (allocation failure while formatting).
    }
}

}  // namespace splicegate
