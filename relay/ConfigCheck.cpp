#include "relay/ConfigCheck.h"

#include <fcntl.h>
#include <grp.h>
#include <net/if.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "audit/DirectDataWriter.h"
#include "audit/LogBuffer.h"
#include "audit/SealChain.h"
#include "common/Error.h"
#include "common/Groups.h"
#include "common/UniqueFd.h"
#include "relay/Capabilities.h"
#include "relay/SocketOptions.h"

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

// The daemon's own loader, so that the check and the start apply the same rules (SealChain.h).
void checkKeyFile(const std::string& path, std::vector<std::string>& problems) {
    try {
        audit::ChainKey::fromFile(path, audit::KeyFileUse::Daemon);
    } catch (const std::exception& error) {
        problems.push_back(error.what());
    }
}

void checkGroup(const char* option, const std::string& name, std::vector<std::string>& problems) {
    if (name.empty()) return;
    int rc = 0;
    if (!findGroup(name, rc))
        problems.push_back(std::string(option) + " " + name + ": no such group" +
                           (rc != 0 ? " (" + errnoText(rc) + ")" : ""));
}

// A sysctl's one-line value, or "?" when it cannot be read.
std::string sysctlText(const char* path) {
    UniqueFd fd(::open(path, O_RDONLY | O_CLOEXEC));
    char text[512];
    long got = fd ? ::read(fd.get(), text, sizeof text - 1) : -1;
    if (got <= 0) return "?";
    std::string value(text, static_cast<std::size_t>(got));
    while (!value.empty() && value.back() == '\n') value.pop_back();
    return value;
}

std::optional<std::string> congestionProblem(const std::string& option, const std::string& algorithm) {
    if (algorithm.empty()) return std::nullopt;
    UniqueFd probe(::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!probe) probe.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!probe) return option + " " + algorithm + ": socket: " + errnoText(errno);
    int rc = setCongestionControl(probe.get(), algorithm);
    if (rc == 0) return std::nullopt;
    std::string label = option + " " + algorithm + ": ";
    if (rc == -ENOENT)
        return label + "this kernel has no such congestion control (available: " +
               sysctlText("/proc/sys/net/ipv4/tcp_available_congestion_control") + ")";
    if (rc == -EPERM)
        return label + "not in net.ipv4.tcp_allowed_congestion_control (" +
               sysctlText("/proc/sys/net/ipv4/tcp_allowed_congestion_control") +
               ") and this process lacks CAP_NET_ADMIN: add it to that list";
    return label + errnoText(-rc);
}

// The admin socket is created at start, after the listeners are bound: its directory must
// exist and let this user create it, and its path must fit a sockaddr_un.
void checkAdminSocketPath(const std::string& socketPath, std::vector<std::string>& problems) {
    const std::string label = "--admin-socket " + socketPath;
    if (socketPath.size() >= sizeof(sockaddr_un{}.sun_path)) {
        problems.push_back(label + ": longer than " +
                           std::to_string(sizeof(sockaddr_un{}.sun_path) - 1) + " bytes");
        return;
    }
    auto slash = socketPath.find_last_of('/');
    std::string dir = slash == std::string::npos ? "."
                      : slash == 0               ? "/"
                                                 : socketPath.substr(0, slash);
    struct stat status {};
    if (::stat(dir.c_str(), &status) != 0)
        problems.push_back(label + ": directory " + dir + ": " + errnoText(errno));
    else if (!S_ISDIR(status.st_mode))
        problems.push_back(label + ": " + dir + " is not a directory");
    else if (::access(dir.c_str(), W_OK | X_OK) != 0)
        problems.push_back(label + ": cannot create the socket in " + dir + ": " +
                           errnoText(errno));
}

unsigned unprivilegedPortStart() {
    auto text = sysctlText("/proc/sys/net/ipv4/ip_unprivileged_port_start");
    char* end = nullptr;
    unsigned long value = std::strtoul(text.c_str(), &end, 10);
    return end != text.c_str() ? static_cast<unsigned>(value) : 1024;
}

// A port below ip_unprivileged_port_start needs CAP_NET_BIND_SERVICE, which the packaged unit
// grants and a hand-made one may not.
void checkListenPorts(const Config& config, std::vector<std::string>& problems) {
    if (mayBindPrivilegedPorts()) return;
    const unsigned firstFree = unprivilegedPortStart();
    for (const auto& route : config.routes) {
        unsigned port = route.listen.port();
        if (port == 0 || port >= firstFree) continue;
        problems.push_back("route '" + route.name + "': listen " + route.listen.toString() +
                           ": port below net.ipv4.ip_unprivileged_port_start (" +
                           std::to_string(firstFree) +
                           ") and this process lacks CAP_NET_BIND_SERVICE");
    }
}

// Each worker of the direct writer maps --audit-buffer-bytes at start, after the listeners are
// bound: the same mappings are made (and dropped) here, so that a size the address space or
// the overcommit policy refuses is a configuration error.
void checkAuditBuffers(const Config& config, std::vector<std::string>& problems) {
    if (config.audit.dir.empty() || config.audit.writer != AuditWriterKind::Direct) return;
    const unsigned workers = workerThreads(config);
    std::vector<audit::LogBuffer> buffers;
    buffers.reserve(workers);
    try {
        while (buffers.size() < workers)
            buffers.emplace_back(config.audit.bufferBytes, audit::DirectLogOptions{}.writeBytes);
    } catch (const std::exception& error) {
        problems.push_back("--audit-buffer-bytes " + std::to_string(config.audit.bufferBytes) +
                           ": cannot map the buffers of " + std::to_string(workers) +
                           " workers: " + error.what());
    }
}

}  // namespace

std::vector<std::string> congestionControlProblems(const Config& config) {
    std::vector<std::string> problems;
    if (auto problem = congestionProblem("--client-tcp-congestion", config.relay.clientCongestion))
        problems.push_back(*problem);
    if (auto problem =
            congestionProblem("--upstream-tcp-congestion", config.relay.upstreamCongestion))
        problems.push_back(*problem);
    for (const auto& route : config.routes)
        if (route.overrides.upstreamCongestion)
            if (auto problem = congestionProblem("route '" + route.name + "': upstream-tcp-congestion",
                                                 *route.overrides.upstreamCongestion))
                problems.push_back(*problem);
    return problems;
}

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
    if (!config.audit.dir.empty()) checkAuditDir(config.audit.dir, problems);
    if (!config.audit.hmacKeyFile.empty()) checkKeyFile(config.audit.hmacKeyFile, problems);
    if (!config.admin.socket.empty()) {
        checkGroup("--admin-group", config.admin.group, problems);
        checkAdminSocketPath(config.admin.socket, problems);
    }
    checkGroup("--admin-readonly-group", config.admin.readonlyGroup, problems);
    checkGroup("--audit-group", config.audit.group, problems);
    for (auto& problem : congestionControlProblems(config)) problems.push_back(std::move(problem));
    checkListenPorts(config, problems);
    checkAuditBuffers(config, problems);
    if (!config.xdp.interface.empty() && ::if_nametoindex(config.xdp.interface.c_str()) == 0)
        problems.push_back("--xdp-interface " + config.xdp.interface + ": no such interface");
    for (const auto& route : config.routes)
        for (const auto& upstream : route.upstreams)
            if (upstream.addresses.empty())
                report.warnings.push_back("route '" + route.name + "': upstream " + upstream.text +
                                          " does not resolve yet (" + upstream.resolveError +
                                          "); the daemon starts and retries it");
    return report;
}

}  // namespace splicegate
