#pragma once
// The two directions of a relayed connection; both lanes, the audit and the connection layer
// name a flow by its connection and one of these.
#include <cstdint>

namespace splicegate {

enum class Direction : std::uint8_t { ClientToUpstream = 0, UpstreamToClient = 1 };
inline const char* toString(Direction d) noexcept {
    return d == Direction::ClientToUpstream ? "c2u" : "u2c";
}

}  // namespace splicegate
