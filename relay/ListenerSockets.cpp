#include "relay/ListenerSockets.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <stdexcept>

#include "common/Error.h"
#include "relay/SocketOptions.h"

namespace splicegate {
namespace {
constexpr int kBacklog = 4096;

// Options accepted sockets inherit from their listener: one setsockopt per listener, not per
// connection.
void setInheritedOptions(int fd, const AcceptedSocketOptions& accepted, const std::string& where) {
    checkNeg(setNoDelay(fd), where + ": TCP_NODELAY");
    checkNeg(setCongestionControl(fd, accepted.congestion),
             where + ": TCP_CONGESTION " + accepted.congestion);
}

// Inherited like TCP_NODELAY, but only when set after listen(), which resets the socket's ACK
// state.
void setListeningOptions(int fd, const AcceptedSocketOptions& accepted, const std::string& where) {
    if (accepted.delayedAck) checkNeg(enterDelayedAckMode(fd), where + ": TCP_QUICKACK");
}
}  // namespace

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
        setInheritedOptions(fd.get(), accepted, where);
        checkSys(::bind(fd.get(), address.get(), address.length()), where);
        checkSys(::listen(fd.get(), kBacklog), where + ": listen");
        setListeningOptions(fd.get(), accepted, where);
        bound->sockets.push_back(std::move(fd));
    }
    bound->workers = workers;
    return bound;
}

std::shared_ptr<const ListenerSockets::Bound> ListenerSockets::adopt(
    const Route& route, unsigned workers, std::vector<UniqueFd> sockets,
    const AcceptedSocketOptions& accepted) {
    const auto where = "route " + route.config.name + ": listen on " +
                       route.config.listen.toString() + " (handed over)";
    auto bound = std::make_shared<Bound>();
    bound->address = route.config.listen;
    for (auto& fd : sockets) {
        // This configuration's options, which may differ from the previous process's.
        setInheritedOptions(fd.get(), accepted, where);
        setListeningOptions(fd.get(), accepted, where);
        bound->sockets.push_back(std::move(fd));
    }
    bound->workers = workers;
    return bound;
}

std::shared_ptr<const ListenerSockets> ListenerSockets::bind(
    const RouteTable& table, unsigned workers, const ListenerSockets* current,
    const AcceptedSocketOptions& accepted, const InheritedListeners& inherited) {
    auto next = std::make_shared<ListenerSockets>();
    for (const auto& route : table) {
        // Routes that share an address (sni) share its sockets: a second SO_REUSEPORT group on
        // it would take a share of the connections that no worker accepts.
        bool already = false;
        for (const auto& held : next->bound_)
            already = already || held->address == route->config.listen;
        if (already) continue;
        std::shared_ptr<const Bound> reused;
        if (current != nullptr)
            for (const auto& held : current->bound_)
                if (held->address == route->config.listen && held->workers == workers)
                    reused = held;
        if (!reused && inherited) {
            auto sockets = inherited(route->config.listen);
            if (!sockets.empty()) reused = adopt(*route, workers, std::move(sockets), accepted);
        }
        next->bound_.push_back(reused ? reused : bindAddress(*route, workers, accepted));
    }
    return next;
}

std::vector<UniqueFd> ListenerSockets::duplicatesFor(unsigned worker,
                                                     const SocketAddress& address) const {
    for (const auto& held : bound_) {
        if (!(held->address == address)) continue;
        std::vector<UniqueFd> mine;
        for (std::size_t i = worker; i < held->sockets.size(); i += held->workers)
            mine.emplace_back(checkSys(::fcntl(held->sockets[i].get(), F_DUPFD_CLOEXEC, 0),
                                       "listen on " + address.toString() + ": dup"));
        return mine;
    }
    throw std::out_of_range("no listening socket bound for " + address.toString());
}

std::size_t ListenerSockets::socketCount() const noexcept {
    std::size_t count = 0;
    for (const auto& held : bound_) count += held->sockets.size();
    return count;
}

void ListenerSockets::forEach(
    const std::function<void(const SocketAddress&, int fd)>& visit) const {
    std::vector<const Bound*> seen;
    for (const auto& held : bound_) {
        if (std::find(seen.begin(), seen.end(), held.get()) != seen.end()) continue;
        seen.push_back(held.get());
        for (const auto& fd : held->sockets) visit(held->address, fd.get());
    }
}

}  // namespace splicegate
