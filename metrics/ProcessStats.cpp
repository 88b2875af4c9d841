#include "metrics/ProcessStats.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>

namespace splicegate {

namespace {

// Seconds since the epoch at which the machine booted ("btime" of /proc/stat).
std::optional<double> bootTime() {
    std::ifstream stat("/proc/stat");
    std::string key;
    while (stat >> key) {
        if (key == "btime") {
            double seconds = 0;
            if (stat >> seconds) return seconds;
            return std::nullopt;
        }
        stat.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
    }
    return std::nullopt;
}

// Field 22 of /proc/self/stat: start time in clock ticks after boot. The command name (field 2)
// may hold spaces and parentheses, so fields are counted from its closing ')'.
std::optional<double> startTimeSeconds() {
    std::ifstream in("/proc/self/stat");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto end = text.rfind(')');
    if (end == std::string::npos) return std::nullopt;
    std::istringstream fields(text.substr(end + 1));
    std::string field;
    for (int index = 3; fields >> field; ++index) {
        if (index != 22) continue;
        auto boot = bootTime();
        long ticks = ::sysconf(_SC_CLK_TCK);
        if (!boot || ticks <= 0) return std::nullopt;
        return *boot + std::stod(field) / static_cast<double>(ticks);
    }
    return std::nullopt;
}

std::optional<std::uint64_t> openFds() {
    DIR* dir = ::opendir("/proc/self/fd");
    if (dir == nullptr) return std::nullopt;
    std::uint64_t count = 0;
    while (const dirent* entry = ::readdir(dir))
        if (entry->d_name[0] != '.') ++count;
    ::closedir(dir);
    return count - 1;  // the directory stream's own fd
}

std::optional<std::uint64_t> maxFds() {
    rlimit limit{};
    if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return std::nullopt;
    return static_cast<std::uint64_t>(limit.rlim_cur);
}

std::optional<std::uint64_t> residentMemoryBytes() {
    std::ifstream statm("/proc/self/statm");
    std::uint64_t sizePages = 0, residentPages = 0;
    long pageSize = ::sysconf(_SC_PAGESIZE);
    if (!(statm >> sizePages >> residentPages) || pageSize <= 0) return std::nullopt;
    return residentPages * static_cast<std::uint64_t>(pageSize);
}

}  // namespace

ProcessStats readProcessStats() noexcept {
    ProcessStats stats;
    try {
        stats.startTimeSeconds = startTimeSeconds();
        stats.openFds = openFds();
        stats.maxFds = maxFds();
        stats.residentMemoryBytes = residentMemoryBytes();
    } catch (...) {  // std::stod or a stream's allocation: what was read so far stands
    }
    return stats;
}

}  // namespace splicegate
