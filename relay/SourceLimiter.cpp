#include "relay/SourceLimiter.h"

#include <netinet/in.h>

#include <cstring>

namespace splicegate {

SourceLimiter::Key SourceLimiter::keyOf(const SocketAddress& client) noexcept {
    Key key{};
    if (client.family() == AF_INET) {
        key[0] = 4;
        std::memcpy(&key[1], &reinterpret_cast<const sockaddr_in*>(client.get())->sin_addr, 4);
    } else if (client.family() == AF_INET6) {
        const auto& address = reinterpret_cast<const sockaddr_in6*>(client.get())->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(&address)) {
            key[0] = 4;
            std::memcpy(&key[1], &address.s6_addr[12], 4);
        } else {
            key[0] = 6;
            std::memcpy(&key[1], &address, 16);
        }
    }
    return key;
}

bool SourceLimiter::tryAcquire(const SocketAddress& client, std::uint64_t limit) {
    if (limit == 0) return true;
    std::lock_guard lock(mutex_);
    auto& open = open_[keyOf(client)];
    if (open >= limit) return false;
    ++open;
    return true;
}

void SourceLimiter::release(const SocketAddress& client, std::uint64_t limit) {
    if (limit == 0) return;
    std::lock_guard lock(mutex_);
    auto found = open_.find(keyOf(client));
    if (found == open_.end()) return;
    if (--found->second == 0) open_.erase(found);  // the map holds only sources with connections
}

std::uint64_t SourceLimiter::openFrom(const SocketAddress& client) const {
    std::lock_guard lock(mutex_);
    auto found = open_.find(keyOf(client));
    return found == open_.end() ? 0 : found->second;
}

}  // namespace splicegate
