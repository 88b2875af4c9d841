#include "relay/ListenGroup.h"

#include <netinet/in.h>

#include <cstring>

namespace splicegate {
namespace {

bool matches(const std::string& pattern, std::string_view name) noexcept {
    if (!pattern.starts_with("*.")) return pattern == name;
    // "*.example.com" takes one more label: "a.example.com", not "example.com" nor
    // "a.b.example.com" (as a certificate's wildcard does).
    std::string_view suffix = std::string_view(pattern).substr(1);  // ".example.com"
    if (name.size() <= suffix.size() || !name.ends_with(suffix)) return false;
    std::string_view label = name.substr(0, name.size() - suffix.size());
    return label.find('.') == std::string_view::npos;
}

}  // namespace

ListenGroup::ListenGroup(std::vector<std::shared_ptr<const Route>> routes)
    : routes_(std::move(routes)) {
    bool ownSourceLimits = false;
    for (const auto& route : routes_) {
        if (!route->config.sni.empty()) bySni_ = true;
        if (route->settings.ownSourceLimit) ownSourceLimits = true;
    }
    sourceLimitByRoute_ = bySni_ && ownSourceLimits;
}

std::shared_ptr<const Route> ListenGroup::choose(std::string_view name) const {
    std::shared_ptr<const Route> fallback;
    std::shared_ptr<const Route> wildcard;
    std::size_t wildcardLength = 0;
    for (const auto& route : routes_) {
        if (route->config.sni.empty()) {
            fallback = route;
            continue;
        }
        if (name.empty()) continue;
        for (const auto& pattern : route->config.sni) {
            if (!matches(pattern, name)) continue;
            if (!pattern.starts_with("*.")) return route;  // an exact name wins outright
            if (pattern.size() > wildcardLength) {
                wildcard = route;
                wildcardLength = pattern.size();
            }
        }
    }
    return wildcard ? wildcard : fallback;
}

ProxyVersions ListenGroup::proxyVersions() const noexcept {
    auto mode = primary()->config.proxyIn;
    return {mode == ProxyProtocolMode::V1 || mode == ProxyProtocolMode::Any,
            mode == ProxyProtocolMode::V2 || mode == ProxyProtocolMode::Any};
}

bool ListenGroup::trusts(const SocketAddress& peer) const noexcept {
    for (const auto& cidr : primary()->config.proxyTrusted)
        if (cidrContains(cidr, peer)) return true;
    return false;
}

bool cidrContains(const Cidr& cidr, const SocketAddress& address) noexcept {
    std::uint8_t bytes[16]{};
    int family = address.family();
    if (family == AF_INET) {
        std::memcpy(bytes, &reinterpret_cast<const sockaddr_in*>(address.get())->sin_addr, 4);
    } else if (family == AF_INET6) {
        const auto* v6 = &reinterpret_cast<const sockaddr_in6*>(address.get())->sin6_addr;
        if (cidr.family == AF_INET && IN6_IS_ADDR_V4MAPPED(v6)) {
            std::memcpy(bytes, v6->s6_addr + 12, 4);
            family = AF_INET;
        } else {
            std::memcpy(bytes, v6->s6_addr, 16);
        }
    } else {
        return false;
    }
    if (family != cidr.family) return false;
    unsigned full = cidr.prefixLength / 8, rest = cidr.prefixLength % 8;
    if (std::memcmp(bytes, cidr.address.data(), full) != 0) return false;
    if (rest == 0) return true;
    auto mask = static_cast<std::uint8_t>(0xff << (8 - rest));
    return (bytes[full] & mask) == (cidr.address[full] & mask);
}

std::vector<std::shared_ptr<const ListenGroup>> groupByListenAddress(const RouteTable& table) {
    std::vector<std::vector<std::shared_ptr<const Route>>> byAddress;
    for (const auto& route : table) {
        bool placed = false;
        for (auto& group : byAddress)
            if (group.front()->config.listen == route->config.listen) {
                group.push_back(route);
                placed = true;
            }
        if (!placed) byAddress.push_back({route});
    }
    std::vector<std::shared_ptr<const ListenGroup>> groups;
    for (auto& routes : byAddress)
        groups.push_back(std::make_shared<ListenGroup>(std::move(routes)));
    return groups;
}

}  // namespace splicegate
