#pragma once
// The admin commands as the server sees them (--admin-readonly-group):
// which access level each one needs, and how an action is named in the daemon's log.
// Read-only commands (status, list_connections, version, xdp_list, list_upstreams) change nothing; every other
// command is an action and needs full access (root or --admin-group).
// Pure logic. Thread affinity: none. Error contract: nothing throws but std::bad_alloc.
#include <string>

#include "splicegate/admin.pb.h"

namespace splicegate::admin {

// What a peer may do, decided once from its SO_PEERCRED at accept.
enum class Access { ReadOnly, Full };

// The access `request`'s command needs. An unset or unknown command needs only ReadOnly: it is
// answered with ERROR_UNKNOWN_COMMAND and does nothing.
Access requiredAccess(const Request& request) noexcept;

// The action as the operator would type it to splicegatectl: "kill 17", "drain", "reload",
// "audit-rotate", "xdp add 192.0.2.0/24", "xdp del 2001:db8::/32"; for the log line that names
// the peer. Read-only commands give their splicegatectl name too ("status", "connections").
std::string describeCommand(const Request& request);

}  // namespace splicegate::admin
