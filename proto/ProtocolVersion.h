#pragma once
// Version of the admin protocol (proto/splicegate/admin.proto) spoken by this build. A client
// puts it in Request.protocol_version, the daemon in Response.protocol_version. Bump it when a
// command or field is added, so an old daemon can tell a newer client what it does not know.
#include <cstdint>

namespace splicegate::admin {

inline constexpr std::uint32_t kProtocolVersion = 2;

}  // namespace splicegate::admin
