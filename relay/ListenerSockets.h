#pragma once
// The listening sockets of every route: one SO_REUSEPORT socket per worker and listen address,
// bound here by the relay rather than inside the workers, so that a reload binds every new
// listener before any old one closes, and a bind that fails leaves the running set untouched.
// A worker accepts on a duplicate of its socket (duplicatesFor); the socket closes once neither
// this set nor the worker holds it.
// An upgrade's new process adopts the sockets of the running one (relay/Handoff.h) instead of
// binding: the kernel's accept queues carry over, so no connection is refused or reset. It may
// get more or fewer sockets for an address than it has workers: worker w takes every socket i
// with i % workers == w (a worker without one gets its connections by hand-off, Acceptor).
// Thread-safety: immutable after bind(); shared through shared_ptr<const>.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/SocketAddress.h"
#include "common/UniqueFd.h"
#include "relay/Route.h"

namespace splicegate {

// What sockets accepted from clients start with; set on each listener, which they inherit.
struct AcceptedSocketOptions {
    bool delayedAck = true;  // the kernel's delayed-ACK mode (--delayed-ack)
    std::string congestion;  // TCP_CONGESTION (--client-tcp-congestion); empty: the system's
};

// Listening sockets handed over for an address (an upgrade); none: bind them.
using InheritedListeners = std::function<std::vector<UniqueFd>(const SocketAddress&)>;

class ListenerSockets {
  public:
    // Binds the listeners of `table` for `workers` workers. Addresses that `current` already
    // holds are shared, not bound again (no gap in accepting, no EADDRINUSE with ourselves);
    // those `inherited` has are adopted (given this configuration's socket options).
    // Throws std::system_error naming the route, the address and the call on the first failure;
    // the sockets bound so far are closed again.
    static std::shared_ptr<const ListenerSockets> bind(const RouteTable& table, unsigned workers,
                                                       const ListenerSockets* current,
                                                       const AcceptedSocketOptions& accepted,
                                                       const InheritedListeners& inherited = {});

    // Duplicates of worker `worker`'s sockets for `address` (usually one; none when an upgrade
    // handed over fewer sockets than there are workers), owned by the caller. Throws
    // std::system_error (dup) or std::out_of_range when the address is not held.
    std::vector<UniqueFd> duplicatesFor(unsigned worker, const SocketAddress& address) const;
    std::size_t socketCount() const noexcept;
    // Every socket with its address, for an upgrade's hand-off.
    void forEach(const std::function<void(const SocketAddress&, int fd)>& visit) const;

  private:
    struct Bound {
        SocketAddress address;
        std::vector<UniqueFd> sockets;  // worker w accepts on every i with i % workers == w
        unsigned workers = 0;
    };
    static std::shared_ptr<const Bound> bindAddress(const Route& route, unsigned workers,
                                                    const AcceptedSocketOptions& accepted);
    static std::shared_ptr<const Bound> adopt(const Route& route, unsigned workers,
                                              std::vector<UniqueFd> sockets,
                                              const AcceptedSocketOptions& accepted);

    std::vector<std::shared_ptr<const Bound>> bound_;
};

}  // namespace splicegate
