#pragma once
// What a reload does to the edge filter's rules, worked out before anything changes: which
// configured prefixes go and come, and whether each of the filter's four rule sets (deny and
// allow, IPv4 and IPv6) still fits its map afterwards. The reload checks the plan before it
// switches routes, so a configuration the filter cannot hold is refused with nothing changed,
// instead of failing half-way through the map updates. Pure logic; thread affinity: none.
#include <cstddef>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "xdp/Cidr.h"

namespace splicegate {

struct EdgeRulePlan {
    std::vector<Cidr> removeDeny, addDeny, removeAllow, addAllow;
    // Rules per set after the change: [deny v4, deny v6, allow v4, allow v6].
    std::size_t after[4] = {};

    // `inForce`: the filter's rules now ({cidr, allow}), the running configuration's and the
    // admin's; `oldDeny`/`oldAllow`: the running configuration's texts; `newDeny`/`newAllow`:
    // the new configuration's. Throws UsageError naming a malformed prefix.
    static EdgeRulePlan make(const std::vector<std::pair<Cidr, bool>>& inForce,
                             const std::set<std::string>& oldDeny,
                             const std::set<std::string>& oldAllow,
                             const std::set<std::string>& newDeny,
                             const std::set<std::string>& newAllow);

    // One line naming the first set that would hold more than `capacity` rules, if any.
    std::optional<std::string> overflow(std::size_t capacity) const;
};

}  // namespace splicegate
