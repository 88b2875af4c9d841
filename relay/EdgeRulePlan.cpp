#include "relay/EdgeRulePlan.h"

#include <sys/socket.h>

#include "common/Log.h"

namespace splicegate {
namespace {

std::size_t setIndex(const Cidr& cidr, bool allow) {
    return (allow ? 2 : 0) + (cidr.family == AF_INET ? 0 : 1);
}

// Prefixes named by `from` and not by `without` (both configuration texts).
std::vector<Cidr> difference(const std::set<std::string>& from,
                             const std::set<std::string>& without) {
    std::set<Cidr> kept;
    for (const auto& text : without) kept.insert(Cidr::parseOrThrow(text));
    std::set<Cidr> out;
    for (const auto& text : from) {
        auto cidr = Cidr::parseOrThrow(text);
        if (!kept.count(cidr)) out.insert(cidr);
    }
    return {out.begin(), out.end()};
}

}  // namespace

EdgeRulePlan EdgeRulePlan::make(const std::vector<std::pair<Cidr, bool>>& inForce,
                                const std::set<std::string>& oldDeny,
                                const std::set<std::string>& oldAllow,
                                const std::set<std::string>& newDeny,
                                const std::set<std::string>& newAllow) {
    EdgeRulePlan plan;
    plan.removeDeny = difference(oldDeny, newDeny);
    plan.addDeny = difference(newDeny, oldDeny);
    plan.removeAllow = difference(oldAllow, newAllow);
    plan.addAllow = difference(newAllow, oldAllow);
    std::set<std::pair<Cidr, bool>> rules(inForce.begin(), inForce.end());
    for (const auto& cidr : plan.removeDeny) rules.erase({cidr, false});
    for (const auto& cidr : plan.removeAllow) rules.erase({cidr, true});
    for (const auto& cidr : plan.addDeny) rules.insert({cidr, false});
    for (const auto& cidr : plan.addAllow) rules.insert({cidr, true});
    for (const auto& [cidr, allow] : rules) ++plan.after[setIndex(cidr, allow)];
    return plan;
}

std::optional<std::string> EdgeRulePlan::overflow(std::size_t capacity) const {
    static constexpr const char* kSetNames[4] = {"deny IPv4", "deny IPv6", "allow IPv4",
                                                 "allow IPv6"};
    for (std::size_t i = 0; i < 4; ++i) {
        if (after[i] > capacity)
            return concat("xdp: the configuration needs ", after[i], " ", kSetNames[i],
                          " prefixes (admin rules included); the edge filter holds at most ",
                          capacity);
    }
    return std::nullopt;
}

}  // namespace splicegate
