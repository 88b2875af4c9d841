#include "tools/splicegate-audit/TcpPacket.h"

#include <sys/socket.h>

#include <cstring>

namespace splicegate::audittool {
namespace {

constexpr std::size_t kIpv4Header = 20;
constexpr std::size_t kIpv6Header = 40;
constexpr std::size_t kTcpHeader = 20;
constexpr std::uint8_t kProtocolTcp = 6;
constexpr std::uint8_t kHopLimit = 64;
constexpr std::uint16_t kWindow = 65535;

void put16(std::uint8_t* at, std::uint32_t value) {
    at[0] = static_cast<std::uint8_t>(value >> 8);
    at[1] = static_cast<std::uint8_t>(value);
}

void put32(std::uint8_t* at, std::uint32_t value) {
    put16(at, value >> 16);
    put16(at + 2, value & 0xffff);
}

// RFC 1071 one's complement sum of big-endian 16-bit words, not yet folded.
std::uint64_t sum16(const std::uint8_t* data, std::size_t length, std::uint64_t sum = 0) {
    for (std::size_t i = 0; i + 1 < length; i += 2)
        sum += (std::uint32_t{data[i]} << 8) | data[i + 1];
    if (length % 2) sum += std::uint32_t{data[length - 1]} << 8;
    return sum;
}

std::uint16_t fold(std::uint64_t sum) {
    while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
    return static_cast<std::uint16_t>(~sum & 0xffff);
}

}  // namespace

void buildTcpPacket(const Endpoint& source, const Endpoint& destination, const TcpSegment& segment,
                    std::vector<std::uint8_t>& out) {
    const bool v4 = source.family == AF_INET;
    const std::size_t ipHeader = v4 ? kIpv4Header : kIpv6Header;
    const std::size_t addressBytes = v4 ? 4 : 16;
    const std::size_t tcpLength = kTcpHeader + segment.length;
    out.assign(ipHeader + tcpLength, 0);
    std::uint8_t* ip = out.data();
    std::uint8_t* tcp = ip + ipHeader;

    if (v4) {
        ip[0] = 0x45;
        put16(ip + 2, static_cast<std::uint32_t>(ipHeader + tcpLength));
        put16(ip + 6, 0x4000);  // DF, no fragments
        ip[8] = kHopLimit;
        ip[9] = kProtocolTcp;
        std::memcpy(ip + 12, source.address.data(), 4);
        std::memcpy(ip + 16, destination.address.data(), 4);
        put16(ip + 10, fold(sum16(ip, kIpv4Header)));
    } else {
        ip[0] = 0x60;
        put16(ip + 4, static_cast<std::uint32_t>(tcpLength));
        ip[6] = kProtocolTcp;
        ip[7] = kHopLimit;
        std::memcpy(ip + 8, source.address.data(), 16);
        std::memcpy(ip + 24, destination.address.data(), 16);
    }

    put16(tcp, source.port.value_or(0));
    put16(tcp + 2, destination.port.value_or(0));
    put32(tcp + 4, segment.seq);
    put32(tcp + 8, segment.flags & tcpflag::kAck ? segment.ack : 0);
    tcp[12] = static_cast<std::uint8_t>((kTcpHeader / 4) << 4);
    tcp[13] = segment.flags;
    put16(tcp + 14, kWindow);
    if (segment.length > 0) std::memcpy(tcp + kTcpHeader, segment.payload, segment.length);

    // Pseudo-header (RFC 793 / RFC 8200 section 8.1): addresses, protocol, TCP length.
    std::uint64_t sum = sum16(source.address.data(), addressBytes);
    sum = sum16(destination.address.data(), addressBytes, sum);
    sum += kProtocolTcp;
    sum += static_cast<std::uint64_t>(tcpLength);
    sum = sum16(tcp, tcpLength, sum);
    put16(tcp + 16, fold(sum));
}

}  // namespace splicegate::audittool
