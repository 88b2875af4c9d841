#pragma once
// A route as the workers use it: an immutable snapshot of its configuration, shared by all
// workers (shared_ptr<const>), replaced as a whole on reload so established connections keep the
// snapshot they started with. Its UpstreamPool (health, current addresses) is shared with the
// route that replaces it when the upstreams stay the same.
#include <linux/time_types.h>

#include <memory>
#include <vector>

#include "relay/Config.h"
#include "relay/UpstreamPool.h"

namespace splicegate {

struct Route {
    // `pool`: the upstreams' health to carry on (reload); null: a new pool from the config.
    // `global`: the relay settings the daemon runs with, for what the route does not set.
    Route(RouteConfig routeConfig, std::size_t statsSlot,
          std::shared_ptr<UpstreamPool> upstreamPool = nullptr, const RelaySettings& global = {});

    RouteConfig config;
    std::size_t statsIndex;  // into WorkerStats::routes (RouteIndex)
    RouteSettings settings;  // its overrides over the global settings
    __kernel_timespec connectTimeout{};  // settings.connectTimeoutMs, for the linked timeout
    // Which upstream a connect goes to (round robin over the healthy ones), its current
    // addresses, and what connects told of each. Thread-safe; shared by all workers.
    std::shared_ptr<UpstreamPool> pool;
};

using RouteTable = std::vector<std::shared_ptr<const Route>>;

// The health policy of a route's upstreams (active checks per the route's config).
UpstreamHealthPolicy healthPolicyOf(const RouteConfig& route);

}  // namespace splicegate
