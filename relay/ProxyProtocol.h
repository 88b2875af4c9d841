#pragma once
// The PROXY protocol header a load balancer puts before a connection's first byte (HAProxy's
// published specification, versions 1 and 2): the parser for what a trusted balancer sends
// (route key proxy-protocol-in) and the encoders for what the relay sends its upstreams
// (proxy-protocol-out).
// - v1: one text line "PROXY TCP4|TCP6|UNKNOWN ...\r\n" of at most 107 bytes.
// - v2: a 16-byte binary header (12-byte signature, version/command, family/protocol, length)
//   and that many bytes of addresses and TLVs. LOCAL (health checks of the balancer itself) and
//   the UNSPEC family mean "use the real endpoints"; TLVs are checked to fit and skipped.
// Pure functions over bytes: no socket, no allocation beyond the result. Thread affinity: none.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "common/SocketAddress.h"

namespace splicegate {

enum class ProxyVersion : std::uint8_t { V1 = 1, V2 = 2 };

// Which versions a listener accepts (route key proxy-protocol-in, "off" aside).
struct ProxyVersions {
    bool v1 = true;
    bool v2 = true;
};

// The longest header the parser waits for: v1's 107 bytes, v2's 16 + 2048 (addresses and TLVs;
// a balancer's TLVs are a few hundred bytes at most, and the bytes are peeked on the socket).
constexpr std::size_t kProxyV1MaxBytes = 107;
constexpr std::size_t kProxyV2MaxBytes = 16 + 2048;
constexpr std::size_t kProxyMaxBytes = kProxyV2MaxBytes;

struct ProxyHeader {
    ProxyVersion version = ProxyVersion::V1;
    std::size_t length = 0;  // bytes of the header: the connection's payload starts after them
    // False: LOCAL, UNKNOWN or UNSPEC; the connection's own endpoints stand.
    bool hasAddresses = false;
    SocketAddress source;       // the client as the balancer saw it
    SocketAddress destination;  // the address the client connected to
};

struct ProxyParse {
    enum class Status : std::uint8_t { Complete, NeedMore, Invalid };
    Status status = Status::NeedMore;
    ProxyHeader header;  // Complete
    // NeedMore: how many bytes in all the parser needs before it can say more (at least one
    // more than it was given).
    std::size_t needBytes = 0;
    std::string problem;  // Invalid: what is wrong, for the log
};

// Parses the header at the start of `bytes` (which may hold payload after it).
ProxyParse parseProxyHeader(std::span<const std::uint8_t> bytes, ProxyVersions accepted);

// The header announcing a TCP connection from `source` to `destination` (same family; IPv4 or
// IPv6). A source the relay has no address for (family AF_UNSPEC) gives v1's "UNKNOWN" or v2's
// LOCAL command.
std::string encodeProxyHeader(ProxyVersion version, const SocketAddress& source,
                              const SocketAddress& destination);

}  // namespace splicegate
