#pragma once
// Tells whether connecting to an address would reach one of the daemon's own listeners: the same
// address, or a wildcard listener (0.0.0.0 / ::) on the same port and an address of this host.
// IPv6 listeners are bound with IPV6_V6ONLY, so [::] does not catch IPv4 addresses.
// Thread affinity: none (immutable after construction).
#include <optional>
#include <string>
#include <vector>

#include "common/SocketAddress.h"
#include "relay/Config.h"

namespace splicegate {

class ListenerMatcher {
  public:
    // `localAddresses`: the host's interface addresses (port ignored). Loopback (127.0.0.0/8,
    // ::1) and the unspecified addresses (a connect to 0.0.0.0 reaches the local host) are
    // always local.
    explicit ListenerMatcher(std::vector<SocketAddress> localAddresses);
    // With the addresses of this network namespace's interfaces (getifaddrs). Throws
    // std::system_error naming getifaddrs when it fails.
    static ListenerMatcher withLocalAddresses();

    // The name of the route in `routes` whose listener `address` would reach, if any.
    std::optional<std::string> routeListeningOn(const SocketAddress& address,
                                                const std::vector<RouteConfig>& routes) const;
    bool reaches(const SocketAddress& address, const SocketAddress& listen) const;

  private:
    bool isLocal(const SocketAddress& address) const;

    std::vector<SocketAddress> localAddresses_;
};

}  // namespace splicegate
