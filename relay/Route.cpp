#include "relay/Route.h"

namespace splicegate {

UpstreamHealthPolicy healthPolicyOf(const RouteConfig& route) {
    UpstreamHealthPolicy policy;
    policy.activeCheckInterval = std::chrono::milliseconds(route.healthCheckIntervalMs);
    return policy;
}

Route::Route(RouteConfig routeConfig, std::size_t statsSlot,
             std::shared_ptr<UpstreamPool> upstreamPool, const RelaySettings& global)
    : config(std::move(routeConfig)),
      statsIndex(statsSlot),
      settings(effectiveRouteSettings(config.overrides, global)),
      pool(std::move(upstreamPool)) {
    connectTimeout.tv_sec = static_cast<long long>(settings.connectTimeoutMs / 1000);
    connectTimeout.tv_nsec = static_cast<long long>(settings.connectTimeoutMs % 1000) * 1000000;
    if (!pool)
        pool =
            std::make_shared<UpstreamPool>(config.name, config.upstreams, healthPolicyOf(config));
}

}  // namespace splicegate
