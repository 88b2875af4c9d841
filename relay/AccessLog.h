#pragma once
// The access line of a closed connection (one info line each, --access-log):
// "access route=NAME id=ID client=ADDR upstream=ADDR c2u=BYTES u2c=BYTES duration_ms=MS
// reason=REASON". An upstream never connected reads "upstream=-". Route names are restricted
// to [A-Za-z0-9_-] by the config, addresses are numeric: no field can contain a space.
#include <cstdint>
#include <string>
#include <string_view>

#include "common/SocketAddress.h"
#include "metrics/Stats.h"

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
};

std::string formatAccessLine(const AccessRecord& record);

}  // namespace splicegate
