#pragma once
// --max-connections-per-source (and a route's own max-connections-per-source): open
// connections per client address (the host part; ports
// differ per connection), so one client cannot take every slot of every route.
// Thread-safety: shared by all workers; one mutex, taken at accept and at release only.
#include <array>
#include <cstdint>
#include <map>
#include <mutex>

#include "common/SocketAddress.h"

namespace splicegate {

class SourceLimiter {
  public:
    explicit SourceLimiter(std::uint64_t perSourceLimit = 0) noexcept : limit_(perSourceLimit) {}

    // Counts a connection from `client`; false (nothing counted) when the source is at its
    // limit. Always true when there is no limit.
    bool tryAcquire(const SocketAddress& client) { return tryAcquire(client, limit_); }
    // Gives back what tryAcquire() counted for `client`.
    void release(const SocketAddress& client) { release(client, limit_); }
    // The same against a limit given per call (a route's own, which a reload may change: the
    // caller passes the limit it acquired with when it releases). 0: not counted.
    bool tryAcquire(const SocketAddress& client, std::uint64_t limit);
    void release(const SocketAddress& client, std::uint64_t limit);

    bool limited() const noexcept { return limit_ != 0; }
    std::uint64_t limit() const noexcept { return limit_; }
    std::uint64_t openFrom(const SocketAddress& client) const;

  private:
    // Family + address bytes; IPv4-mapped IPv6 addresses count as their IPv4 address.
    using Key = std::array<std::uint8_t, 17>;
    static Key keyOf(const SocketAddress& client) noexcept;

    const std::uint64_t limit_;
    mutable std::mutex mutex_;
    std::map<Key, std::uint64_t> open_;
};

}  // namespace splicegate
