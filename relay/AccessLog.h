#pragma once
// The access line of a closed connection (one info line each, --access-log), in the form
// --access-log-format names. Text:
// "access route=NAME id=ID client=ADDR upstream=ADDR c2u=BYTES u2c=BYTES duration_ms=MS
// reason=REASON accepted=TIME connect_ms=MS retries=N tried=LIST active=N"
// (the first fields are the original line's, in its order; the rest follow). An upstream never
// connected reads "upstream=-", a connect that never completed "connect_ms=-"; `tried` lists
// every upstream attempted in order, a failed one with its error ("ADDR(ECONNREFUSED)",
// "ADDR(timeout)"), "-" for none. Route names are restricted to [A-Za-z0-9_-] by the config,
// addresses are numeric: no field can contain a space. Json: one object with the same names
// (docs/configuration.md, Logs). Then " sni=NAME" for a connection whose ClientHello named a
// server and " via=ADDR" for one a PROXY protocol header came with (ADDR: the balancer; client=
// is the client it named); a connection refused before a route was chosen reads "route=-".
// Server names are host-name characters only (relay/ClientHello.h).
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/SocketAddress.h"
#include "metrics/Stats.h"
#include "relay/RelayOptions.h"

namespace splicegate {

struct AccessRecord {
    std::string_view route;
    std::uint64_t id = 0;
    SocketAddress client;
    SocketAddress upstream;  // family AF_UNSPEC: none was connected
    std::uint64_t bytesC2u = 0;
    std::uint64_t bytesU2c = 0;
    std::uint64_t durationMs = 0;
    CloseReason reason = CloseReason::Closed;
    std::chrono::system_clock::time_point acceptedAt{};
    std::optional<std::uint64_t> connectMs{};  // accept to upstream handshake done
    std::uint32_t attempts = 0;              // upstream connects started
    std::string_view failedAttempts{};       // "ADDR(ERROR)" comma-separated
    bool connected = false;                  // the last attempt (to `upstream`) succeeded
    std::uint64_t active = 0;  // the route's open connections on this worker, this one included
    std::string_view serverName{};  // the ClientHello's (route key sni); empty: none
    SocketAddress via{};          // the PROXY header's balancer; AF_UNSPEC: none
};

std::string formatAccessLine(const AccessRecord& record,
                             AccessLogFormat format = AccessLogFormat::Text);

}  // namespace splicegate
