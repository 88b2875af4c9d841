#include "relay/Route.h"

namespace splicegate {

Route::Route(RouteConfig routeConfig) : config(std::move(routeConfig)) {
    for (const auto& upstream : config.upstreams)
        upstreams.insert(upstreams.end(), upstream.addresses.begin(), upstream.addresses.end());
}

}  // namespace splicegate
