#pragma once
// Synthesized TCP/IP packets for `export --pcap`: an IPv4 or IPv6 header (no options, DF set,
// TTL/hop limit 64) and a 20-byte TCP header, with valid IP and TCP checksums, as the first bytes
// of a LINKTYPE_RAW capture record.
// Thread affinity: none. Error contract: nothing throws but std::bad_alloc.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "tools/splicegate-audit/Endpoint.h"

namespace splicegate::audittool {

namespace tcpflag {
constexpr std::uint8_t kFin = 0x01;
constexpr std::uint8_t kSyn = 0x02;
constexpr std::uint8_t kPsh = 0x08;
constexpr std::uint8_t kAck = 0x10;
}  // namespace tcpflag

// Largest payload per packet: the IPv4 total length (16 bits) must hold it plus 40 header bytes.
constexpr std::size_t kMaxTcpPayload = 65000;

struct TcpSegment {
    std::uint32_t seq = 0;
    std::uint32_t ack = 0;
    std::uint8_t flags = 0;
    const std::uint8_t* payload = nullptr;
    std::size_t length = 0;  // at most kMaxTcpPayload
};

// Writes the packet from `source` to `destination` (same family, ports set) into `out`.
void buildTcpPacket(const Endpoint& source, const Endpoint& destination, const TcpSegment& segment,
                    std::vector<std::uint8_t>& out);

}  // namespace splicegate::audittool
