#include "relay/Preamble.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include "common/Error.h"
#include "common/Log.h"
#include "relay/ClientHello.h"
#include "relay/ListenGroup.h"
#include "relay/ProxyProtocol.h"
#include "relay/WorkerOps.h"

namespace splicegate {
namespace {

constexpr std::array<std::uint8_t, 12> kV2Signature = {0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D,
                                                       0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A};
constexpr std::string_view kV1Prefix = "PROXY ";

// How many leading bytes of `bytes` agree with `signature` (all of them: a whole match).
std::size_t agreeing(std::span<const std::uint8_t> bytes, std::span<const std::uint8_t> signature) {
    std::size_t n = 0;
    while (n < bytes.size() && n < signature.size() && bytes[n] == signature[n]) ++n;
    return n;
}

CompletionTag tagOf(const Connection& c) noexcept {
    return CompletionTag::make(WorkerOp::PreambleRead, c.io.slot, c.io.generation);
}

}  // namespace

Preamble::Preamble(RelayContext& context, RingOps& ring, Acceptor& acceptor)
    : context_(context), ring_(ring), acceptor_(acceptor), scratch_(kMaxClientHelloRecordBytes) {}

bool Preamble::needed(const Connection& c) noexcept {
    return c.group && (c.group->acceptsProxyHeader() || c.group->routesByServerName());
}

PreambleStep Preamble::start(Connection& c) {
    if (!c.group->acceptsProxyHeader())
        c.preambleStep = static_cast<std::uint8_t>(Step::ClientHello);
    else if (c.group->trusts(c.clientAddress))
        c.preambleStep = static_cast<std::uint8_t>(Step::ProxyHeader);
    else
        c.preambleStep = static_cast<std::uint8_t>(Step::NotAHeader);
    // Most clients' first bytes are in already (they came with or right after the handshake's
    // last ACK): look before arming a poll.
    return advance(c, POLLIN);
}

PreambleStep Preamble::onReadable(Connection& c, int result) {
    c.preamblePolling = false;
    if (c.state != ConnectionState::Preamble) return {};
    if (result < 0) {
        if (result == -ECANCELED) return {};
        return close(CloseReason::Error);
    }
    return advance(c, static_cast<unsigned>(result));
}

// Peeks what the socket holds and moves through the steps as far as the bytes allow.
PreambleStep Preamble::advance(Connection& c, unsigned events) {
    for (;;) {
        auto step = static_cast<Step>(c.preambleStep);
        std::size_t cap = step == Step::ClientHello ? scratch_.size() : kProxyMaxBytes;
        ssize_t n = ::recv(c.io.client.get(), scratch_.data(), cap, MSG_PEEK | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return waitFor(c, 1);
            return close(errno == ECONNRESET ? CloseReason::ClientReset : CloseReason::Error);
        }
        // The client sent its FIN: what is in the socket is all there will be.
        bool ended = n == 0 || (events & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
        if (n == 0) {
            logDebug("connection ", c.id(), ": client ", c.clientAddress,
                     " closed before it sent anything");
            return close(c.preambleStep == static_cast<std::uint8_t>(Step::ProxyHeader)
                             ? CloseReason::ProxyProtocol
                             : CloseReason::Closed);
        }
        auto peeked = static_cast<std::size_t>(n);
        bool again = false;
        PreambleStep outcome;
        switch (step) {
            case Step::ProxyHeader:
                outcome = readProxyHeader(c, peeked, ended, again);
                break;
            case Step::NotAHeader:
                outcome = checkNotAHeader(c, peeked, ended, again);
                break;
            case Step::ClientHello:
                outcome = readClientHello(c, peeked, ended);
                break;
            case Step::Done:
                return {};
        }
        if (!again) return outcome;
        events = 0;  // the consumed header's FIN flag is peeked again with the rest
    }
}

PreambleStep Preamble::readProxyHeader(Connection& c, std::size_t peeked, bool ended, bool& again) {
    auto parse = parseProxyHeader({scratch_.data(), peeked}, c.group->proxyVersions());
    if (parse.status == ProxyParse::Status::NeedMore && !ended) return waitFor(c, parse.needBytes);
    if (parse.status != ProxyParse::Status::Complete) {
        logWarnLimited("proxy-protocol refusals", "route ", c.route->config.name, ": ",
                       c.clientAddress, ": ",
                       parse.status == ProxyParse::Status::NeedMore ? "PROXY header incomplete"
                                                                    : parse.problem,
                       " (connection ", c.id(), " refused)");
        return close(CloseReason::ProxyProtocol);
    }
    // Consumed: exactly the header's bytes, so the payload starts the relayed (and audited)
    // stream and the header is never in either.
    const auto& header = parse.header;
    ssize_t taken = ::recv(c.io.client.get(), scratch_.data(), header.length, MSG_DONTWAIT);
    if (taken != static_cast<ssize_t>(header.length)) return close(CloseReason::Error);
    if (header.hasAddresses) {
        c.via = c.clientAddress;
        c.clientAddress = header.source;
        c.proxiedDestination = header.destination;
    }
    return nextAfterHeader(c, again);
}

PreambleStep Preamble::checkNotAHeader(Connection& c, std::size_t peeked, bool ended, bool& again) {
    std::span<const std::uint8_t> bytes(scratch_.data(), peeked);
    std::span<const std::uint8_t> v1(reinterpret_cast<const std::uint8_t*>(kV1Prefix.data()),
                                     kV1Prefix.size());
    std::size_t asV1 = agreeing(bytes, v1), asV2 = agreeing(bytes, kV2Signature);
    if (asV1 == v1.size() || asV2 == kV2Signature.size()) {
        logWarnLimited(
            "proxy-protocol refusals", "route ", c.route->config.name, ": ", c.clientAddress,
            ": PROXY header from a source outside proxy-trusted (connection ", c.id(), " refused)");
        return close(CloseReason::ProxyProtocol);
    }
    // Every byte so far agrees with a signature: one more tells.
    if ((asV1 == peeked || asV2 == peeked) && !ended) return waitFor(c, peeked + 1);
    return nextAfterHeader(c, again);
}

PreambleStep Preamble::nextAfterHeader(Connection& c, bool& again) {
    // The per-source limit counts the client the header named (Acceptor left it unbooked),
    // unless the route the ClientHello chooses decides which limit that is (routeTo books it).
    if (!c.sourceBooked && !c.group->sourceLimitDependsOnRoute()) {
        if (!acceptor_.acquireSource(*c.group->primary(), c.clientAddress)) {
            logWarnLimited("per-source refusals", "route ", c.route->config.name, ": refusing ",
                           c.clientAddress, " (via ", c.via,
                           "): at its max-connections-per-source");
            return close(CloseReason::MaxConnectionsPerSource);
        }
        c.sourceBooked = true;
    }
    if (!c.group->routesByServerName()) return routeTo(c, c.group->only());
    c.preambleStep = static_cast<std::uint8_t>(Step::ClientHello);
    again = true;
    return {};
}

PreambleStep Preamble::readClientHello(Connection& c, std::size_t peeked, bool ended) {
    auto parse = parseClientHello({scratch_.data(), peeked});
    if (parse.status == ClientHelloParse::Status::NeedMore) {
        if (parse.needBytes > scratch_.size()) {
            parse.status = ClientHelloParse::Status::TooLarge;
            parse.problem =
                "ClientHello records over " + std::to_string(scratch_.size()) + " bytes";
        } else if (!ended) {
            return waitFor(c, parse.needBytes);
        } else {
            parse.status = ClientHelloParse::Status::Invalid;
            parse.problem = "client closed within its ClientHello";
        }
    }
    if (parse.status != ClientHelloParse::Status::Complete) {
        logWarnLimited("bad ClientHello refusals", "route ", c.route->config.name, ": ",
                       c.clientAddress, ": ", parse.problem, " (connection ", c.id(), " refused)");
        return close(CloseReason::BadClientHello);
    }
    c.serverName = std::move(parse.serverName);
    auto route = c.group->choose(c.serverName);
    if (!route) {
        logWarnLimited("no-route refusals", "listen ", c.group->address(), ": ", c.clientAddress,
                       ": no route for server name '", c.serverName, "' (connection ", c.id(),
                       " refused)");
        return close(CloseReason::NoRoute);
    }
    return routeTo(c, std::move(route));
}

PreambleStep Preamble::routeTo(Connection& c, std::shared_ptr<const Route> route) {
    c.preambleStep = static_cast<std::uint8_t>(Step::Done);
    c.route = std::move(route);
    c.routeChosen = true;
    if (auto refusal = bookChosenRoute(c)) return close(*refusal);
    if (c.receiveLowWater != 1) {  // the data path reads whatever arrives
        int one = 1;
        if (::setsockopt(c.io.client.get(), SOL_SOCKET, SO_RCVLOWAT, &one, sizeof one) != 0)
            return close(CloseReason::Error);
        c.receiveLowWater = 1;
    }
    c.routed = true;
    return {PreambleStep::Action::Routed, CloseReason::Closed};
}

// What admission left for the route to be known (relay/Acceptor.h): that route's
// max-connections and, where it depends on the route, the per-source limit.
std::optional<CloseReason> Preamble::bookChosenRoute(Connection& c) {
    if (!c.admittedRoute) {
        if (!acceptor_.acquireRoute(*c.route)) return CloseReason::MaxConnections;
        c.admittedRoute = c.route;
    }
    if (!c.sourceBooked) {
        if (!acceptor_.acquireSource(*c.route, c.clientAddress)) {
            logWarnLimited("per-source refusals", "route ", c.route->config.name, ": refusing ",
                           c.clientAddress, ": at its max-connections-per-source (connection ",
                           c.id(), ")");
            return CloseReason::MaxConnectionsPerSource;
        }
        c.sourceBooked = true;
    }
    return std::nullopt;
}

PreambleStep Preamble::waitFor(Connection& c, std::size_t totalBytes) {
    int lowWater = static_cast<int>(std::max<std::size_t>(totalBytes, 1));
    if (lowWater != c.receiveLowWater) {
        if (::setsockopt(c.io.client.get(), SOL_SOCKET, SO_RCVLOWAT, &lowWater, sizeof lowWater) !=
            0)
            return close(CloseReason::Error);
        c.receiveLowWater = lowWater;
    }
    ring_.pollAdd(c.io.client.get(), POLLIN | POLLRDHUP, tagOf(c));
    c.preamblePolling = true;
    return {};
}

}  // namespace splicegate
