#include "relay/ConfigCheck.h"

#include <fcntl.h>
#include <grp.h>
#include <net/if.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "common/Error.h"
#include "common/UniqueFd.h"

namespace splicegate {
namespace {

// The closest existing ancestor of `path` ("/" at worst): where a missing directory would be
// created.
std::string existingAncestor(std::string path) {
    while (!path.empty()) {
        auto slash = path.find_last_of('/');
        path = slash == 0 ? "/" : path.substr(0, slash == std::string::npos ? 0 : slash);
        struct stat status {};
        if (path.empty() || ::stat(path.c_str(), &status) == 0) break;
    }
    return path.empty() ? "." : path;
}

std::string octalMode(mode_t mode) {
    char text[8];
    std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
    return text;
}

void checkAuditDir(const std::string& dir, std::vector<std::string>& problems) {
    const std::string label = "--audit-dir " + dir;
    struct stat status {};
    if (::lstat(dir.c_str(), &status) != 0) {
        if (errno != ENOENT) {
            problems.push_back(label + ": " + errnoText(errno));
            return;
        }
        // The daemon creates it at start: its parent must let it.
        auto parent = existingAncestor(dir);
        if (::access(parent.c_str(), W_OK | X_OK) != 0)
            problems.push_back(label + ": does not exist and cannot be created in " + parent +
                               ": " + errnoText(errno));
        return;
    }
    if (S_ISLNK(status.st_mode)) {
        problems.push_back(label +
                           ": is a symbolic link (audit files are never opened through "
                           "one)");
        return;
    }
    if (!S_ISDIR(status.st_mode)) {
        problems.push_back(label + ": not a directory");
        return;
    }
    if ((status.st_mode & S_IWOTH) != 0)
        problems.push_back(label + ": writable by every user (mode " + octalMode(status.st_mode) +
                           "); allow only the daemon's user");
    if (::access(dir.c_str(), R_OK | W_OK | X_OK) != 0)
        problems.push_back(label + ": not readable and writable by this user: " + errnoText(errno));
}

void checkKeyFile(const std::string& path, std::vector<std::string>& problems) {
    const std::string label = "--audit-hmac-key-file " + path;
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd) {
        problems.push_back(label + ": " + errnoText(errno));
        return;
    }
    struct stat status {};
    if (::fstat(fd.get(), &status) != 0 || !S_ISREG(status.st_mode))
        problems.push_back(label + ": not a regular file");
    else if (status.st_size == 0)
        problems.push_back(label + ": empty");
}

void checkGroup(const char* option, const std::string& name, std::vector<std::string>& problems) {
    if (name.empty()) return;
    group entry{};
    group* found = nullptr;
    std::vector<char> buffer(16384);
    int rc = ::getgrnam_r(name.c_str(), &entry, buffer.data(), buffer.size(), &found);
    if (found == nullptr)
        problems.push_back(std::string(option) + " " + name + ": no such group" +
                           (rc != 0 ? " (" + errnoText(rc) + ")" : ""));
}

}  // namespace

std::optional<std::string> looseConfigFile(const std::string& path) {
    struct stat status {};
    if (path.empty() || ::stat(path.c_str(), &status) != 0 || (status.st_mode & S_IWOTH) == 0)
        return std::nullopt;
    return "--config " + path + ": writable by every user (mode " + octalMode(status.st_mode) +
           "): anyone could change the routes at the next reload";
}

ConfigCheckReport checkConfiguration(const Config& config) {
    ConfigCheckReport report;
    auto& problems = report.problems;
    if (auto loose = looseConfigFile(config.configFile)) report.warnings.push_back(*loose);
    if (!config.auditDir.empty()) checkAuditDir(config.auditDir, problems);
    if (!config.auditHmacKeyFile.empty()) checkKeyFile(config.auditHmacKeyFile, problems);
    if (!config.adminSocket.empty()) checkGroup("--admin-group", config.adminGroup, problems);
    checkGroup("--admin-readonly-group", config.adminReadonlyGroup, problems);
    checkGroup("--audit-group", config.auditGroup, problems);
    if (!config.xdpInterface.empty() && ::if_nametoindex(config.xdpInterface.c_str()) == 0)
        problems.push_back("--xdp-interface " + config.xdpInterface + ": no such interface");
    for (const auto& route : config.routes)
        for (const auto& upstream : route.upstreams)
            if (upstream.addresses.empty())
                report.warnings.push_back("route '" + route.name + "': upstream " + upstream.text +
                                          " does not resolve yet (" + upstream.resolveError +
                                          "); the daemon starts and retries it");
    return report;
}

}  // namespace splicegate
