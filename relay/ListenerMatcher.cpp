#include "relay/ListenerMatcher.h"

#include <ifaddrs.h>
#include <netinet/in.h>

#include <cerrno>
#include <cstring>
#include <system_error>

namespace splicegate {
namespace {

// Only the host part counts: ports, flow labels and scope ids are not compared.
bool sameHost(const SocketAddress& a, const SocketAddress& b) {
    if (a.family() != b.family()) return false;
    if (a.family() == AF_INET)
        return reinterpret_cast<const sockaddr_in*>(a.get())->sin_addr.s_addr ==
               reinterpret_cast<const sockaddr_in*>(b.get())->sin_addr.s_addr;
    if (a.family() == AF_INET6)
        return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(a.get())->sin6_addr,
                           &reinterpret_cast<const sockaddr_in6*>(b.get())->sin6_addr,
                           sizeof(in6_addr)) == 0;
    return false;
}

bool isWildcard(const SocketAddress& address) {
    if (address.family() == AF_INET)
        return reinterpret_cast<const sockaddr_in*>(address.get())->sin_addr.s_addr ==
               htonl(INADDR_ANY);
    if (address.family() == AF_INET6)
        return IN6_IS_ADDR_UNSPECIFIED(
            &reinterpret_cast<const sockaddr_in6*>(address.get())->sin6_addr);
    return false;
}

bool isLoopback(const SocketAddress& address) {
    if (address.family() == AF_INET)
        return (ntohl(reinterpret_cast<const sockaddr_in*>(address.get())->sin_addr.s_addr) >>
                24) == 127;
    if (address.family() == AF_INET6)
        return IN6_IS_ADDR_LOOPBACK(
            &reinterpret_cast<const sockaddr_in6*>(address.get())->sin6_addr);
    return false;
}

// An IPv4-mapped IPv6 address (::ffff:a.b.c.d) reaches IPv4 listeners: compare it as IPv4.
SocketAddress unmapped(const SocketAddress& address) {
    if (address.family() != AF_INET6) return address;
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(address.get());
    if (!IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr)) return address;
    sockaddr_in v4{};
    v4.sin_family = AF_INET;
    v4.sin_port = v6->sin6_port;
    std::memcpy(&v4.sin_addr, &v6->sin6_addr.s6_addr[12], sizeof v4.sin_addr);
    return SocketAddress::fromSockaddr(reinterpret_cast<const sockaddr*>(&v4), sizeof v4);
}

}  // namespace

ListenerMatcher::ListenerMatcher(std::vector<SocketAddress> localAddresses)
    : localAddresses_(std::move(localAddresses)) {}

ListenerMatcher ListenerMatcher::withLocalAddresses() {
    ifaddrs* list = nullptr;
    if (::getifaddrs(&list) != 0)
        throw std::system_error(errno, std::generic_category(), "getifaddrs");
    std::vector<SocketAddress> addresses;
    for (auto* entry = list; entry != nullptr; entry = entry->ifa_next) {
        if (entry->ifa_addr == nullptr) continue;
        auto family = entry->ifa_addr->sa_family;
        if (family == AF_INET)
            addresses.push_back(SocketAddress::fromSockaddr(entry->ifa_addr, sizeof(sockaddr_in)));
        else if (family == AF_INET6)
            addresses.push_back(SocketAddress::fromSockaddr(entry->ifa_addr, sizeof(sockaddr_in6)));
    }
    ::freeifaddrs(list);
    return ListenerMatcher(std::move(addresses));
}

bool ListenerMatcher::isLocal(const SocketAddress& address) const {
    if (isLoopback(address) || isWildcard(address)) return true;
    for (const auto& local : localAddresses_)
        if (sameHost(local, address)) return true;
    return false;
}

bool ListenerMatcher::reaches(const SocketAddress& upstream, const SocketAddress& listen) const {
    auto target = unmapped(upstream);
    if (target.port() != listen.port() || target.family() != listen.family()) return false;
    if (sameHost(target, listen)) return true;
    // A connect to the unspecified address lands on the listener of loopback or the wildcard.
    if (isWildcard(target)) return isWildcard(listen) || isLoopback(listen);
    return isWildcard(listen) && isLocal(target);
}

std::optional<std::string> ListenerMatcher::routeListeningOn(
    const SocketAddress& address, const std::vector<RouteConfig>& routes) const {
    for (const auto& route : routes)
        if (reaches(address, route.listen)) return route.name;
    return std::nullopt;
}

}  // namespace splicegate
