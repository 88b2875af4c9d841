#include "relay/Route.h"

namespace splicegate {

Route::Route(RouteConfig routeConfig, std::size_t statsSlot)
    : config(std::move(routeConfig)), statsIndex(statsSlot) {
    for (const auto& upstream : config.upstreams)
        upstreams.insert(upstreams.end(), upstream.addresses.begin(), upstream.addresses.end());
}

}  // namespace splicegate
