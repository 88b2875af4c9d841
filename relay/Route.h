#pragma once
// A route as the workers use it: an immutable snapshot of its configuration, shared by all
// workers (shared_ptr<const>), replaced as a whole on reload so established connections keep the
// snapshot they started with.
#include <atomic>
#include <memory>
#include <vector>

#include "relay/Config.h"

namespace splicegate {

struct Route {
    Route(RouteConfig routeConfig, std::size_t statsSlot);

    RouteConfig config;
    std::vector<SocketAddress> upstreams;  // every resolved address of every upstream, in order
    std::size_t statsIndex;                // into WorkerStats::routes (RouteIndex)
    // Shared by all workers: one relaxed increment per connection, not per byte.
    mutable std::atomic<std::uint64_t> nextUpstream{0};
};

using RouteTable = std::vector<std::shared_ptr<const Route>>;

}  // namespace splicegate
