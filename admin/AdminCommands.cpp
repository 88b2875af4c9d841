#include "admin/AdminCommands.h"

#include <cctype>

namespace splicegate::admin {

namespace {

// A CIDR comes from the peer: keep the log line one line of bounded length.
std::string printable(const std::string& text) {
    constexpr std::size_t kMaxShown = 64;
    std::string out;
    for (char c : text.substr(0, kMaxShown)) {
        out += std::isprint(static_cast<unsigned char>(c)) != 0 ? c : '?';
    }
    if (text.size() > kMaxShown) out += "...";
    return out;
}

}  // namespace

Access requiredAccess(const Request& request) noexcept {
    switch (request.command_case()) {
        case Request::kStatus:
        case Request::kListConnections:
        case Request::kVersion:
        case Request::kXdpList:
        case Request::kListUpstreams:
        case Request::COMMAND_NOT_SET:
            return Access::ReadOnly;
        case Request::kKillConnection:
        case Request::kDrain:
        case Request::kReload:
        case Request::kRotateAudit:
        case Request::kXdpAdd:
        case Request::kXdpDelete:
        case Request::kUpgrade:
        case Request::kSetUpstream:
            return Access::Full;
    }
    return Access::Full;
}

std::string describeCommand(const Request& request) {
    switch (request.command_case()) {
        case Request::kStatus:
            return "status";
        case Request::kListConnections:
            return "connections";
        case Request::kKillConnection:
            return "kill " + std::to_string(request.kill_connection().id());
        case Request::kDrain:
            return "drain";
        case Request::kReload:
            return "reload";
        case Request::kRotateAudit:
            return "audit-rotate";
        case Request::kXdpList:
            return "xdp list";
        case Request::kXdpAdd:
            return "xdp add " + printable(request.xdp_add().cidr());
        case Request::kXdpDelete:
            return "xdp del " + printable(request.xdp_delete().cidr());
        case Request::kVersion:
            return "version";
        case Request::kUpgrade:
            return "upgrade";
        case Request::kListUpstreams:
            return "upstreams";
        case Request::kSetUpstream:
            return std::string("upstream ") +
                   (request.set_upstream().disabled() ? "disable " : "enable ") +
                   printable(request.set_upstream().route()) + " " +
                   printable(request.set_upstream().upstream());
        case Request::COMMAND_NOT_SET:
            break;
    }
    return "unknown";
}

}  // namespace splicegate::admin
