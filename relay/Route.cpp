#include "relay/Route.h"

namespace splicegate {

UpstreamHealthPolicy healthPolicyOf(const RouteConfig& route) {
    UpstreamHealthPolicy policy;
    policy.activeCheckInterval = std::chrono::milliseconds(route.healthCheckIntervalMs);
    return policy;
}

Route::Route(RouteConfig routeConfig, std::size_t statsSlot,
             std::shared_ptr<UpstreamPool> upstreamPool)
    : config(std::move(routeConfig)), statsIndex(statsSlot), pool(std::move(upstreamPool)) {
    if (!pool)
        pool =
            std::make_shared<UpstreamPool>(config.name, config.upstreams, healthPolicyOf(config));
}

}  // namespace splicegate
