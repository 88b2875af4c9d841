#include "relay/ConfigFile.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <sstream>
#include <string_view>

#include "common/Error.h"
#include "common/UniqueFd.h"

namespace splicegate {
namespace {

// A config file is a few KiB. Only a regular file is read (a FIFO would block the reload, the
// admin command and SIGTERM behind it; /dev/zero would grow without end), and at most 1 MiB.
constexpr std::size_t kMaxConfigBytes = 1 << 20;

std::string trimmed(std::string_view text) {
    constexpr std::string_view kSpace = " \t\r\n";
    auto first = text.find_first_not_of(kSpace);
    if (first == std::string_view::npos) return {};
    auto last = text.find_last_not_of(kSpace);
    return std::string(text.substr(first, last - first + 1));
}

}  // namespace

std::string fileLine(const std::string& path, unsigned line) {
    return path + ":" + std::to_string(line);
}

std::string readConfigFile(const std::string& path) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    if (!fd) throw UsageError("cannot open config file '" + path + "': " + errnoText(errno));
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0)
        throw UsageError("cannot read config file '" + path + "': " + errnoText(errno));
    if (!S_ISREG(st.st_mode)) throw UsageError("config file '" + path + "' is not a regular file");
    std::string text;
    char buffer[4096];
    for (;;) {
        ssize_t count = ::read(fd.get(), buffer, sizeof buffer);
        if (count == 0) return text;
        if (count > 0) {
            text.append(buffer, static_cast<std::size_t>(count));
            if (text.size() > kMaxConfigBytes)
                throw UsageError("config file '" + path + "' is larger than " +
                                 std::to_string(kMaxConfigBytes) + " bytes");
        } else if (errno != EINTR) {
            throw UsageError("cannot read config file '" + path + "': " + errnoText(errno));
        }
    }
}

ConfigFileContents splitConfigFile(const std::string& path, const std::string& text) {
    ConfigFileContents contents;
    std::istringstream lines(text);
    std::vector<ConfigFileEntry>* current = &contents.topLevel;
    bool skipping = false;  // inside a repeated section: its keys were reported with it
    unsigned number = 0;
    for (std::string line; std::getline(lines, line);) {
        ++number;
        std::string content = trimmed(std::string_view(line).substr(0, line.find('#')));
        if (content.empty()) continue;
        if (content.front() == '[' && content.back() == ']') {
            std::string name = trimmed(std::string_view(content).substr(1, content.size() - 2));
            skipping = false;
            for (const auto& section : contents.sections)
                if (section.name == name) {
                    contents.problems.push_back(fileLine(path, number) + ": section [" + name +
                                                "] given twice (first at line " +
                                                std::to_string(section.line) +
                                                "); merge the two");
                    skipping = true;
                }
            if (skipping) continue;
            contents.sections.push_back(ConfigFileSection{name, number, {}});
            current = &contents.sections.back().entries;
            continue;
        }
        auto equals = content.find('=');
        std::string key = equals == std::string::npos ? std::string() : trimmed(content.substr(0, equals));
        if (key.empty()) {
            contents.problems.push_back(fileLine(path, number) + ": malformed line '" + content +
                                        "' (expected KEY = VALUE or [SECTION])");
            continue;
        }
        if (skipping) continue;
        current->push_back(ConfigFileEntry{number, key, trimmed(content.substr(equals + 1))});
    }
    return contents;
}

}  // namespace splicegate
