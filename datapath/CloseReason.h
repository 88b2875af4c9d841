#pragma once
// Why a relayed connection ended: decided by the data path (datapath/Verdict.h) and the relay,
// counted by metrics/ and written to the access log by the names below (docs/metrics.md).
// Header-only so that metrics/ can name the reasons without linking the data path.
#include <cstdint>

namespace splicegate {

enum class CloseReason : std::uint8_t {
    Closed,               // both directions ended normally
    ClientReset,
    UpstreamReset,
    UpstreamUnreachable,  // every upstream refused or timed out
    IdleTimeout,
    Killed,               // admin "kill"
    Shutdown,             // drain timeout or stop
    AuditError,           // an audit write failed (fail-closed)
    AuditSyncError,       // an fdatasync failed; its unsynced chunks may be gone (fail-closed)
    PipeError,
    Error,                // anything else (socket errors)
    // Refused before a route was chosen or an upstream connected (relay/Preamble.h): counted
    // as refusals (splicegate_connections_refused_total), named so in the access line.
    NoRoute,                  // no route takes the ClientHello's server name
    ProxyProtocol,            // PROXY header missing, malformed, or from an untrusted source
    BadClientHello,           // not a TLS ClientHello, malformed, or over 16 KiB
    PeekTimeout,              // header or ClientHello not complete within --sni-peek-timeout-ms
    MaxConnectionsPerSource,  // the PROXY header's client, or the client on the route its
                              // ClientHello chose, is at its limit
    MaxConnections,           // the route the ClientHello chose is at its max-connections
    Count
};

// Reasons of a connection refused before it was routed: counted as refusals, never as closes.
constexpr bool isRefusal(CloseReason reason) noexcept {
    return reason >= CloseReason::NoRoute && reason < CloseReason::Count;
}

constexpr const char* toString(CloseReason reason) noexcept {
    switch (reason) {
        case CloseReason::Closed: return "closed";
        case CloseReason::ClientReset: return "client-reset";
        case CloseReason::UpstreamReset: return "upstream-reset";
        case CloseReason::UpstreamUnreachable: return "upstream-unreachable";
        case CloseReason::IdleTimeout: return "idle-timeout";
        case CloseReason::Killed: return "killed";
        case CloseReason::Shutdown: return "shutdown";
        case CloseReason::AuditError: return "audit-error";
        case CloseReason::AuditSyncError: return "audit-sync-error";
        case CloseReason::PipeError: return "pipe-error";
        case CloseReason::Error: return "error";
        case CloseReason::NoRoute: return "no-route";
        case CloseReason::ProxyProtocol: return "proxy-protocol";
        case CloseReason::BadClientHello: return "bad-client-hello";
        case CloseReason::PeekTimeout: return "peek-timeout";
        case CloseReason::MaxConnectionsPerSource: return "max-connections-per-source";
        case CloseReason::MaxConnections: return "max-connections";
        case CloseReason::Count: break;
    }
    return "unknown";
}

}  // namespace splicegate
