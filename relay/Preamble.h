#pragma once
// What a connection sends before its payload and before a route can be chosen: the PROXY
// protocol header of a trusted load balancer (proxy-protocol-in; consumed, exactly its bytes)
// and the TLS ClientHello whose server name chooses among the routes of one listen address
// (`sni`; only peeked, so it stays in the socket and is relayed and audited unchanged as the
// client's first bytes). A client outside proxy-trusted on such a listener has its first bytes
// checked for a header it must not send.
//
// The bytes are read with MSG_PEEK after a poll on the client socket says they are there;
// while a header or ClientHello is incomplete, SO_RCVLOWAT is raised to the bytes the parser
// needs, so the next poll completes only when they are in (tcp_poll honours it) instead of at
// every segment. Each step returns what the worker is to do; the worker owns the deadline
// (--sni-peek-timeout-ms). Its SQEs go through RingOps, tagged RingOwner::Worker
// (WorkerOp::PreambleRead). Worker-thread only.
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "common/RingOps.h"
#include "relay/Acceptor.h"
#include "relay/Connection.h"
#include "relay/RelayContext.h"

namespace splicegate {

struct PreambleStep {
    enum class Action : std::uint8_t {
        Wait,    // a poll is armed
        Routed,  // c.route is chosen (c.routed): connect
        Close,   // refuse with `reason`
    };
    Action action = Action::Wait;
    CloseReason reason = CloseReason::Closed;
};

class Preamble {
  public:
    // `acceptor`: books the per-source limit for the client a PROXY header names.
    Preamble(RelayContext& context, RingOps& ring, Acceptor& acceptor);

    // Does this connection have anything to read before it is routed? (Its peer is in
    // clientAddress; a connection without the listener's group has nothing to read.)
    static bool needed(const Connection& c) noexcept;
    // The first step: what to read, and the poll for it.
    PreambleStep start(Connection& c);
    // The poll's completion.
    PreambleStep onReadable(Connection& c, int result);

  private:
    enum class Step : std::uint8_t { ProxyHeader, NotAHeader, ClientHello, Done };
    PreambleStep advance(Connection& c, unsigned events);
    PreambleStep readProxyHeader(Connection& c, std::size_t peeked, bool ended, bool& again);
    PreambleStep checkNotAHeader(Connection& c, std::size_t peeked, bool ended, bool& again);
    PreambleStep readClientHello(Connection& c, std::size_t peeked, bool ended);
    PreambleStep nextAfterHeader(Connection& c, bool& again);
    PreambleStep routeTo(Connection& c, std::shared_ptr<const Route> route);
    std::optional<CloseReason> bookChosenRoute(Connection& c);
    PreambleStep waitFor(Connection& c, std::size_t totalBytes);
    static PreambleStep close(CloseReason reason) noexcept {
        return {PreambleStep::Action::Close, reason};
    }

    RelayContext& context_;
    RingOps& ring_;
    Acceptor& acceptor_;
    std::vector<std::uint8_t> scratch_;  // what a peek copies; the bytes stay in the socket
};

}  // namespace splicegate
