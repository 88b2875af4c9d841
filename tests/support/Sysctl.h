#pragma once
// Sysctls a test depends on, read and set by the test itself: a test never relies on a value
// someone set on the host by hand (a new machine has the kernel's defaults, not a tuned host's).
// SysctlOverride writes a value for the test's lifetime and restores the one it found.
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/Daemon.h"

namespace splicegate::test {

// `/proc/sys/...` file's first line, without its newline ("" when unreadable).
inline std::string sysctlValue(const std::string& path) {
    std::string text = readFile(path);
    return text.substr(0, text.find('\n'));
}

// A list-valued sysctl (e.g. net.ipv4.tcp_allowed_congestion_control) as its words.
inline std::vector<std::string> sysctlWords(const std::string& path) {
    std::istringstream in(sysctlValue(path));
    std::vector<std::string> words;
    for (std::string word; in >> word;) words.push_back(word);
    return words;
}

// Writes `value` to `path` (a /proc/sys file) and restores the previous value when destroyed.
// ok() is false, with why(), when the write failed.
class SysctlOverride {
  public:
    SysctlOverride(std::string path, const std::string& value);
    ~SysctlOverride();
    SysctlOverride(const SysctlOverride&) = delete;
    SysctlOverride& operator=(const SysctlOverride&) = delete;
    bool ok() const noexcept { return ok_; }
    const std::string& why() const noexcept { return why_; }

  private:
    std::string path_;
    std::string previous_;
    bool ok_ = false;
    std::string why_;
};

inline constexpr const char* kAllowedCongestion =
    "/proc/sys/net/ipv4/tcp_allowed_congestion_control";
inline constexpr const char* kAvailableCongestion =
    "/proc/sys/net/ipv4/tcp_available_congestion_control";
inline constexpr const char* kDefaultCongestion = "/proc/sys/net/ipv4/tcp_congestion_control";

}  // namespace splicegate::test
