#pragma once
// What a [route.NAME] section may set besides its listener and upstreams: its own values of
// some global relay settings (docs/configuration.md, "Per-route settings"), and the syntax of
// one `upstream = HOST:PORT [weight=N] [backup]` value. A route without its own value uses the
// global one (as the daemon runs with it: global relay settings change at restart only, a
// route's own values at every reload). Pure values; thread affinity: none.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "datapath/LaneKind.h"
#include "relay/RelayOptions.h"

namespace splicegate {

struct RouteOverrides {
    std::optional<std::uint32_t> idleTimeoutMs;
    std::optional<std::uint32_t> halfClosedTimeoutMs;
    std::optional<std::uint32_t> connectTimeoutMs;
    std::optional<std::uint64_t> maxConnections;
    std::optional<std::uint64_t> maxConnectionsPerSource;
    std::optional<std::string> upstreamCongestion;
    std::optional<LaneKind> lane;  // auto, splice or buffer

    friend bool operator==(const RouteOverrides&, const RouteOverrides&) = default;
};

// One override key's value, checked (`min` and the type's maximum; the congestion control's
// name syntax); throws UsageError starting with `label` (file, line, route and key).
void parseRouteOverride(std::optional<std::uint32_t>& slot, const std::string& value,
                        const std::string& label, std::uint64_t min);
void parseRouteOverride(std::optional<std::uint64_t>& slot, const std::string& value,
                        const std::string& label, std::uint64_t min);
void parseRouteOverride(std::optional<std::string>& slot, const std::string& value,
                        const std::string& label, std::uint64_t min);
void parseRouteOverride(std::optional<LaneKind>& slot, const std::string& value,
                        const std::string& label, std::uint64_t min);

// What a route's connections run with: its overrides over the global settings.
struct RouteSettings {
    std::uint32_t idleTimeoutMs = 0;
    std::uint32_t halfClosedTimeoutMs = 0;
    std::uint32_t connectTimeoutMs = 0;
    // The route's own cap on its open connections (0: none; the global --max-connections
    // still caps all routes together: it protects the fd limit).
    std::uint64_t maxConnections = 0;
    // The route counts its connections per source on its own, against this limit, instead of
    // the global --max-connections-per-source (0 with ownSourceLimit: no limit for the route).
    bool ownSourceLimit = false;
    std::uint64_t maxConnectionsPerSource = 0;
    std::string upstreamCongestion;  // empty: the system's default
};
RouteSettings effectiveRouteSettings(const RouteOverrides& overrides, const RelaySettings& global);

// One `upstream` value: the address and its balancing options.
struct UpstreamSpec {
    std::string address;  // HOST:PORT as written
    unsigned weight = 1;
    bool backup = false;
};
constexpr unsigned kMaxUpstreamWeight = 1000;
// "HOST:PORT [weight=N] [backup]" (options in any order, separated by blanks). Throws UsageError
// with `label` for an unknown option or a weight outside 1..kMaxUpstreamWeight.
UpstreamSpec parseUpstreamSpec(const std::string& text, const std::string& label);

}  // namespace splicegate
