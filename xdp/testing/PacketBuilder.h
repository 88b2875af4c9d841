#pragma once
// Builds Ethernet frames for the edge filter's tests and benchmark, so a test table reads as
// "IPv4 TCP SYN from 198.18.0.5 behind one VLAN tag" rather than as bytes. Lengths and checksums
// are filled in unless a field is overridden to craft a broken packet; boundaries() lists where
// each header ends, for truncation tests.
// Thread affinity: none (a value type). Error contract: address strings that do not parse and
// impossible layouts throw std::invalid_argument (test-setup bugs).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace splicegate::xdptest {

enum TcpFlag : std::uint8_t { kFin = 0x01, kSyn = 0x02, kRst = 0x04, kPsh = 0x08, kAck = 0x10 };

// IPv6 extension header types (IANA protocol numbers).
enum Ipv6Ext : std::uint8_t {
    kHopByHop = 0,
    kRouting = 43,
    kFragmentHeader = 44,
    kAuthHeader = 51,
    kDestOptions = 60,
};

class PacketBuilder {
  public:
    // 802.1Q (0x8100) or 802.1ad (0x88a8) tag, outermost first.
    PacketBuilder& vlan(std::uint16_t tpid, std::uint16_t vid);
    // A non-IP frame: this EtherType and `payload` bytes after it.
    PacketBuilder& ethernetOnly(std::uint16_t etherType, std::size_t payload);

    PacketBuilder& ipv4(std::string_view source, std::string_view destination);
    PacketBuilder& ipv4Options(std::size_t bytes);  // NOP options, a multiple of 4, at most 40
    PacketBuilder& ipv4Ihl(std::uint8_t ihl);       // override (broken header)
    PacketBuilder& ipv4Version(std::uint8_t version);
    PacketBuilder& ipv4TotalLength(std::uint16_t totalLength);
    PacketBuilder& ipv4Fragment(std::uint16_t offsetIn8ByteUnits, bool moreFragments);

    PacketBuilder& ipv6(std::string_view source, std::string_view destination);
    // Hop-by-hop, routing, destination options (length multiple of 8, >= 8) or AH (multiple of
    // 4, >= 8), in order after the fixed header.
    PacketBuilder& ipv6Ext(Ipv6Ext type, std::size_t length = 8);
    PacketBuilder& ipv6Fragment(std::uint16_t offsetIn8ByteUnits, bool moreFragments);
    PacketBuilder& ipv6PayloadLength(std::uint16_t payloadLength);

    PacketBuilder& tcp(std::uint16_t sourcePort, std::uint16_t destinationPort, std::uint8_t flags,
                       std::size_t optionBytes = 0);
    PacketBuilder& tcpDataOffset(std::uint8_t words);  // override (broken header)
    PacketBuilder& udp(std::uint16_t sourcePort, std::uint16_t destinationPort);
    PacketBuilder& icmp();  // ICMP echo (ICMPv6 echo for IPv6)
    PacketBuilder& payload(std::size_t bytes);

    std::vector<std::uint8_t> build() const;
    // Offsets where each header ends (Ethernet, every tag, IP, every extension, transport).
    std::vector<std::size_t> boundaries() const;

  private:
    struct Tag {
        std::uint16_t tpid;
        std::uint16_t vid;
    };
    struct Ext {
        Ipv6Ext type;
        std::size_t length;
        std::uint16_t fragmentOffset = 0;
        bool moreFragments = false;
    };
    enum class L3 { None, V4, V6 };
    enum class L4 { None, Tcp, Udp, Icmp };

    std::vector<Tag> tags_;
    std::uint16_t etherType_ = 0;
    std::size_t rawPayload_ = 0;
    L3 l3_ = L3::None;
    std::uint8_t source_[16] = {};
    std::uint8_t destination_[16] = {};
    std::size_t v4Options_ = 0;
    std::optional<std::uint8_t> ihl_;
    std::uint8_t version_ = 0;
    std::optional<std::uint16_t> totalLength_;
    std::uint16_t fragmentField_ = 0;
    std::vector<Ext> exts_;
    std::optional<std::uint16_t> payloadLength_;
    L4 l4_ = L4::None;
    std::uint16_t sourcePort_ = 0;
    std::uint16_t destinationPort_ = 0;
    std::uint8_t tcpFlags_ = 0;
    std::size_t tcpOptions_ = 0;
    std::optional<std::uint8_t> dataOffset_;
    std::size_t payload_ = 0;
};

}  // namespace splicegate::xdptest
