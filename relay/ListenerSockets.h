#pragma once
// The listening sockets of every route: one SO_REUSEPORT socket per worker and listen address,
// bound here by the relay rather than inside the workers, so that a reload binds every new
// listener before any old one closes, and a bind that fails leaves the running set untouched.
// A worker accepts on a duplicate of its socket (duplicateFor); the socket closes once neither
// this set nor the worker holds it.
// Thread-safety: immutable after bind(); shared through shared_ptr<const>.
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

class ListenerSockets {
  public:
    // Binds the listeners of `table` for `workers` workers. Addresses that `current` already
    // holds are shared, not bound again (no gap in accepting, no EADDRINUSE with ourselves).
    // Throws std::system_error naming the route, the address and the call on the first failure;
    // the sockets bound so far are closed again.
    static std::shared_ptr<const ListenerSockets> bind(const RouteTable& table, unsigned workers,
                                                       const ListenerSockets* current,
                                                       const AcceptedSocketOptions& accepted);

    // A duplicate of worker `worker`'s socket for `address`, owned by the caller. Throws
    // std::system_error (dup) or std::out_of_range when no such socket is held.
    UniqueFd duplicateFor(unsigned worker, const SocketAddress& address) const;
    std::size_t socketCount() const noexcept;

  private:
    struct Bound {
        SocketAddress address;
        std::vector<UniqueFd> perWorker;
    };
    static std::shared_ptr<const Bound> bindAddress(const Route& route, unsigned workers,
                                                    const AcceptedSocketOptions& accepted);

    std::vector<std::shared_ptr<const Bound>> bound_;
};

}  // namespace splicegate
