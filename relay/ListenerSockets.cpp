#include "relay/ListenerSockets.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <stdexcept>

#include "common/Error.h"
#include "relay/SocketOptions.h"

namespace splicegate {
namespace {
constexpr int kBacklog = 4096;
}

std::shared_ptr<const ListenerSockets::Bound> ListenerSockets::bindAddress(
    const Route& route, unsigned workers, const AcceptedSocketOptions& accepted) {
    const auto& address = route.config.listen;
    const auto where = "route " + route.config.name + ": listen on " + address.toString();
    auto bound = std::make_shared<Bound>();
    bound->address = address;
    for (unsigned i = 0; i < workers; ++i) {
        UniqueFd fd(
            checkSys(::socket(address.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0),
                     where + ": socket"));
        int one = 1;
        checkSys(::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one),
                 where + ": SO_REUSEADDR");
        // One listener per worker on the same address: the kernel spreads connections across
        // them.
        checkSys(::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof one),
                 where + ": SO_REUSEPORT");
        if (address.family() == AF_INET6)
            checkSys(::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one),
                     where + ": IPV6_V6ONLY");
        // Accepted sockets inherit TCP_NODELAY: one setsockopt per listener, not per connection.
        checkNeg(setNoDelay(fd.get()), where + ": TCP_NODELAY");
        checkNeg(setCongestionControl(fd.get(), accepted.congestion),
                 where + ": TCP_CONGESTION " + accepted.congestion);
        checkSys(::bind(fd.get(), address.get(), address.length()), where);
        checkSys(::listen(fd.get(), kBacklog), where + ": listen");
        // Inherited like TCP_NODELAY, but only when set after listen(), which resets the
        // socket's ACK state.
        if (accepted.delayedAck) checkNeg(enterDelayedAckMode(fd.get()), where + ": TCP_QUICKACK");
        bound->perWorker.push_back(std::move(fd));
    }
    return bound;
}

std::shared_ptr<const ListenerSockets> ListenerSockets::bind(
    const RouteTable& table, unsigned workers, const ListenerSockets* current,
    const AcceptedSocketOptions& accepted) {
    auto next = std::make_shared<ListenerSockets>();
    for (const auto& route : table) {
        std::shared_ptr<const Bound> reused;
        if (current != nullptr)
            for (const auto& held : current->bound_)
                if (held->address == route->config.listen && held->perWorker.size() == workers)
                    reused = held;
        next->bound_.push_back(reused ? reused : bindAddress(*route, workers, accepted));
    }
    return next;
}

UniqueFd ListenerSockets::duplicateFor(unsigned worker, const SocketAddress& address) const {
    for (const auto& held : bound_) {
        if (!(held->address == address)) continue;
        if (worker >= held->perWorker.size()) break;
        return UniqueFd(checkSys(::fcntl(held->perWorker[worker].get(), F_DUPFD_CLOEXEC, 0),
                                 "listen on " + address.toString() + ": dup"));
    }
    throw std::out_of_range("no listening socket bound for " + address.toString());
}

std::size_t ListenerSockets::socketCount() const noexcept {
    std::size_t count = 0;
    for (const auto& held : bound_) count += held->perWorker.size();
    return count;
}

}  // namespace splicegate
