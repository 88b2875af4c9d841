#pragma once
// One line per event on stderr: "<UTC time> <level> <message>". Thread-safe: each line is one
// write(2), so lines from different workers never interleave. GCC 12 lacks <format>, so messages
// are built by streaming the arguments: logInfo("listening on ", address).
#include <sstream>
#include <string_view>

namespace splicegate {

enum class LogLevel { Debug = 0, Info = 1, Warn = 2, Error = 3 };

void setLogLevel(LogLevel level) noexcept;
LogLevel logLevel() noexcept;
bool parseLogLevel(std::string_view text, LogLevel& out) noexcept;
void logLine(LogLevel level, std::string_view message) noexcept;

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
void logDebug(Args&&... args) { logAt(LogLevel::Debug, std::forward<Args>(args)...); }
template <typename... Args>
void logInfo(Args&&... args) { logAt(LogLevel::Info, std::forward<Args>(args)...); }
template <typename... Args>
void logWarn(Args&&... args) { logAt(LogLevel::Warn, std::forward<Args>(args)...); }
template <typename... Args>
void logError(Args&&... args) { logAt(LogLevel::Error, std::forward<Args>(args)...); }

}  // namespace splicegate
