#pragma once
// The routes of one listen address, as a worker's listener accepts for them: the route a TLS
// server name chooses (route key `sni`: exact names first, then "*.suffix" wildcards, longest
// suffix first; the route without `sni` takes every other name and ClientHellos without one),
// and the PROXY protocol setting the routes share (proxy-protocol-in, proxy-trusted).
// Immutable, shared by the workers like the routes it holds. Thread affinity: none.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/SocketAddress.h"
#include "relay/ProxyProtocol.h"
#include "relay/Route.h"

namespace splicegate {

class ListenGroup {
  public:
    // `routes`: every route of the table with that listen address, in configuration order
    // (the config checked they may share it: relay/Config.cpp).
    explicit ListenGroup(std::vector<std::shared_ptr<const Route>> routes);

    const SocketAddress& address() const noexcept { return routes_.front()->config.listen; }
    const std::vector<std::shared_ptr<const Route>>& routes() const noexcept { return routes_; }
    // The route counters and log lines name until a route is chosen: the first configured.
    const std::shared_ptr<const Route>& primary() const noexcept { return routes_.front(); }

    // The ClientHello must be read before a route can be chosen. Then the per-route limits
    // (max-connections, a route's own max-connections-per-source) are booked only on the
    // route it chooses (relay/Preamble.h), not at accept.
    bool routesByServerName() const noexcept { return bySni_; }
    // Which per-source limit counts a connection depends on the route it is given: some of the
    // routes have their own (max-connections-per-source in the section) and the ClientHello
    // chooses. Otherwise the limit is known when the client's address is (--max-connections-
    // per-source, or the only route's own), and booked then.
    bool sourceLimitDependsOnRoute() const noexcept { return sourceLimitByRoute_; }
    // Null: no route takes that name (and none is without `sni`). `name` is lower case, empty
    // for a ClientHello without one.
    std::shared_ptr<const Route> choose(std::string_view name) const;
    // The route of a connection that sends no ClientHello to read (no `sni` on the address).
    const std::shared_ptr<const Route>& only() const noexcept { return routes_.front(); }

    bool acceptsProxyHeader() const noexcept {
        return primary()->config.proxyIn != ProxyProtocolMode::Off;
    }
    ProxyVersions proxyVersions() const noexcept;
    // The peer is one of proxy-trusted: it must send a header.
    bool trusts(const SocketAddress& peer) const noexcept;

  private:
    std::vector<std::shared_ptr<const Route>> routes_;
    bool bySni_ = false;
    bool sourceLimitByRoute_ = false;
};

// Groups a route table by listen address (first appearance order).
std::vector<std::shared_ptr<const ListenGroup>> groupByListenAddress(const RouteTable& table);

// True when `address` (IPv4, IPv6, or IPv4-mapped IPv6) lies in `cidr`.
bool cidrContains(const Cidr& cidr, const SocketAddress& address) noexcept;

}  // namespace splicegate
