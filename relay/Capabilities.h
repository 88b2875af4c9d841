#pragma once
// Capabilities the daemon needs only to load and attach the XDP edge filter (CAP_NET_ADMIN,
// CAP_BPF, CAP_PERFMON). Without --xdp-interface they are dropped from the effective, permitted
// and inheritable sets (and so from the ambient set) before any thread starts: capabilities are
// per thread, and threads inherit the creator's. CAP_NET_BIND_SERVICE stays, since a reload may
// bind a port below 1024.
#include <string>
#include <vector>

namespace splicegate {

// Drops the edge filter's capabilities from this thread's sets. Returns the names of those that
// were held (empty: nothing to drop). Throws std::system_error naming the call on failure.
std::vector<std::string> dropEdgeFilterCapabilities();

// Whether this thread may bind ports below net.ipv4.ip_unprivileged_port_start
// (CAP_NET_BIND_SERVICE in its effective set).
bool mayBindPrivilegedPorts();

}  // namespace splicegate
