#include "xdp/testing/PacketBuilder.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <stdexcept>

namespace splicegate::xdptest {
namespace {

void put16(std::vector<std::uint8_t>& out, std::size_t at, std::uint16_t value) {
    out[at] = static_cast<std::uint8_t>(value >> 8);
    out[at + 1] = static_cast<std::uint8_t>(value);
}

void append16(std::vector<std::uint8_t>& out, std::uint16_t value) {
    out.push_back(static_cast<std::uint8_t>(value >> 8));
    out.push_back(static_cast<std::uint8_t>(value));
}

std::uint16_t checksum(const std::uint8_t* data, std::size_t length) {
    std::uint32_t sum = 0;
    for (std::size_t i = 0; i + 1 < length; i += 2) sum += (data[i] << 8) | data[i + 1];
    if (length % 2) sum += data[length - 1] << 8;
    while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
    return static_cast<std::uint16_t>(~sum);
}

void parseAddress(int family, std::string_view text, std::uint8_t* out) {
    std::string copy(text);
    if (inet_pton(family, copy.c_str(), out) != 1)
        throw std::invalid_argument("PacketBuilder: bad address " + copy);
}

}  // namespace

PacketBuilder& PacketBuilder::vlan(std::uint16_t tpid, std::uint16_t vid) {
    tags_.push_back({tpid, vid});
    return *this;
}

PacketBuilder& PacketBuilder::ethernetOnly(std::uint16_t etherType, std::size_t payload) {
    l3_ = L3::None;
    etherType_ = etherType;
    rawPayload_ = payload;
    return *this;
}

PacketBuilder& PacketBuilder::ipv4(std::string_view source, std::string_view destination) {
    l3_ = L3::V4;
    version_ = 4;
    parseAddress(AF_INET, source, source_);
    parseAddress(AF_INET, destination, destination_);
    return *this;
}

PacketBuilder& PacketBuilder::ipv4Options(std::size_t bytes) {
    if (bytes % 4 || bytes > 40) throw std::invalid_argument("PacketBuilder: IPv4 options");
    v4Options_ = bytes;
    return *this;
}

PacketBuilder& PacketBuilder::ipv4Ihl(std::uint8_t ihl) {
    ihl_ = ihl;
    return *this;
}

PacketBuilder& PacketBuilder::ipv4Version(std::uint8_t version) {
    version_ = version;
    return *this;
}

PacketBuilder& PacketBuilder::ipv4TotalLength(std::uint16_t totalLength) {
    totalLength_ = totalLength;
    return *this;
}

PacketBuilder& PacketBuilder::ipv4Fragment(std::uint16_t offset, bool moreFragments) {
    fragmentField_ = static_cast<std::uint16_t>((offset & 0x1fff) | (moreFragments ? 0x2000 : 0));
    return *this;
}

PacketBuilder& PacketBuilder::ipv6(std::string_view source, std::string_view destination) {
    l3_ = L3::V6;
    version_ = 6;
    parseAddress(AF_INET6, source, source_);
    parseAddress(AF_INET6, destination, destination_);
    return *this;
}

PacketBuilder& PacketBuilder::ipv6Ext(Ipv6Ext type, std::size_t length) {
    if (type == kFragmentHeader) return ipv6Fragment(0, false);
    bool ok = type == kAuthHeader ? length % 4 == 0 && length >= 8 && length <= 1028
                                  : length % 8 == 0 && length >= 8 && length <= 2048;
    if (!ok) throw std::invalid_argument("PacketBuilder: IPv6 extension header length");
    exts_.push_back({type, length});
    return *this;
}

PacketBuilder& PacketBuilder::ipv6Fragment(std::uint16_t offset, bool moreFragments) {
    exts_.push_back({kFragmentHeader, 8, offset, moreFragments});
    return *this;
}

PacketBuilder& PacketBuilder::ipv6PayloadLength(std::uint16_t payloadLength) {
    payloadLength_ = payloadLength;
    return *this;
}

PacketBuilder& PacketBuilder::tcp(std::uint16_t sourcePort, std::uint16_t destinationPort,
                                  std::uint8_t flags, std::size_t optionBytes) {
    if (optionBytes % 4 || optionBytes > 40)
        throw std::invalid_argument("PacketBuilder: TCP options");
    l4_ = L4::Tcp;
    sourcePort_ = sourcePort;
    destinationPort_ = destinationPort;
    tcpFlags_ = flags;
    tcpOptions_ = optionBytes;
    return *this;
}

PacketBuilder& PacketBuilder::tcpDataOffset(std::uint8_t words) {
    dataOffset_ = words;
    return *this;
}

PacketBuilder& PacketBuilder::udp(std::uint16_t sourcePort, std::uint16_t destinationPort) {
    l4_ = L4::Udp;
    sourcePort_ = sourcePort;
    destinationPort_ = destinationPort;
    return *this;
}

PacketBuilder& PacketBuilder::icmp() {
    l4_ = L4::Icmp;
    return *this;
}

PacketBuilder& PacketBuilder::payload(std::size_t bytes) {
    payload_ = bytes;
    return *this;
}

std::vector<std::size_t> PacketBuilder::boundaries() const {
    std::vector<std::size_t> result;
    std::size_t at = 14 + 4 * tags_.size();
    result.push_back(14);
    for (std::size_t i = 1; i <= tags_.size(); ++i) result.push_back(14 + 4 * i);
    if (l3_ == L3::V4) {
        at += 20 + v4Options_;
        result.push_back(at);
    } else if (l3_ == L3::V6) {
        at += 40;
        result.push_back(at);
        for (const Ext& ext : exts_) result.push_back(at += ext.length);
    }
    if (l4_ == L4::Tcp) result.push_back(at += 20 + tcpOptions_);
    if (l4_ == L4::Udp || l4_ == L4::Icmp) result.push_back(at += 8);
    return result;
}

std::vector<std::uint8_t> PacketBuilder::build() const {
    std::vector<std::uint8_t> out = {0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01};
    for (const Tag& tag : tags_) {
        append16(out, tag.tpid);
        append16(out, tag.vid & 0x0fff);
    }
    if (l3_ == L3::None) {
        append16(out, etherType_);
        out.resize(out.size() + rawPayload_, 0xab);
        return out;
    }
    append16(out, l3_ == L3::V4 ? 0x0800 : 0x86dd);

    // Transport first (its length goes into the IP header).
    std::vector<std::uint8_t> l4;
    std::uint8_t protocol = 59;  // IPv6 "no next header" when there is no transport
    if (l4_ == L4::Tcp) {
        protocol = IPPROTO_TCP;
        l4.resize(20 + tcpOptions_, 0);
        put16(l4, 0, sourcePort_);
        put16(l4, 2, destinationPort_);
        put16(l4, 4, 0x1234);
        put16(l4, 6, 0x5678);
        l4[12] = static_cast<std::uint8_t>(dataOffset_.value_or((20 + tcpOptions_) / 4) << 4);
        l4[13] = tcpFlags_;
        put16(l4, 14, 65535);
        for (std::size_t i = 20; i < l4.size(); ++i) l4[i] = 1;  // NOP options
    } else if (l4_ == L4::Udp) {
        protocol = IPPROTO_UDP;
        l4.resize(8, 0);
        put16(l4, 0, sourcePort_);
        put16(l4, 2, destinationPort_);
        put16(l4, 4, static_cast<std::uint16_t>(8 + payload_));
    } else if (l4_ == L4::Icmp) {
        protocol =
            static_cast<std::uint8_t>(l3_ == L3::V4 ? int{IPPROTO_ICMP} : int{IPPROTO_ICMPV6});
        l4.resize(8, 0);
        l4[0] = l3_ == L3::V4 ? 8 : 128;  // echo request
    }
    l4.resize(l4.size() + payload_, 0x5a);

    if (l3_ == L3::V4) {
        const std::size_t headerLength = 20 + v4Options_;
        const std::size_t start = out.size();
        out.resize(start + headerLength, 0);
        std::uint8_t* ip = out.data() + start;
        ip[0] =
            static_cast<std::uint8_t>((version_ << 4) | (ihl_.value_or(headerLength / 4) & 0xf));
        put16(out, start + 2,
              totalLength_.value_or(static_cast<std::uint16_t>(headerLength + l4.size())));
        put16(out, start + 4, 0x4242);
        put16(out, start + 6, fragmentField_);
        ip[8] = 64;
        ip[9] = l4_ == L4::None ? std::uint8_t{IPPROTO_RAW} : protocol;
        std::copy(source_, source_ + 4, ip + 12);
        std::copy(destination_, destination_ + 4, ip + 16);
        for (std::size_t i = 20; i < headerLength; ++i) ip[i] = 1;  // NOP options
        put16(out, start + 10, checksum(ip, headerLength));
    } else {
        std::size_t extBytes = 0;
        for (const Ext& ext : exts_) extBytes += ext.length;
        const std::size_t start = out.size();
        out.resize(start + 40, 0);
        out[start] = static_cast<std::uint8_t>(version_ << 4);
        put16(out, start + 4,
              payloadLength_.value_or(static_cast<std::uint16_t>(extBytes + l4.size())));
        out[start + 6] = exts_.empty() ? protocol : std::uint8_t{exts_.front().type};
        out[start + 7] = 64;
        std::copy(source_, source_ + 16, out.data() + start + 8);
        std::copy(destination_, destination_ + 16, out.data() + start + 24);
        for (std::size_t i = 0; i < exts_.size(); ++i) {
            const Ext& ext = exts_[i];
            const std::size_t at = out.size();
            out.resize(at + ext.length, 0);
            out[at] = i + 1 < exts_.size() ? std::uint8_t{exts_[i + 1].type} : protocol;
            if (ext.type == kFragmentHeader) {
                put16(out, at + 2,
                      static_cast<std::uint16_t>((ext.fragmentOffset << 3) |
                                                 (ext.moreFragments ? 1 : 0)));
            } else if (ext.type == kAuthHeader) {
                out[at + 1] = static_cast<std::uint8_t>(ext.length / 4 - 2);
            } else {
                out[at + 1] = static_cast<std::uint8_t>(ext.length / 8 - 1);
                // PadN filling the options area.
                if (ext.length > 2) {
                    out[at + 2] = 1;
                    out[at + 3] = static_cast<std::uint8_t>(ext.length - 4);
                }
            }
        }
    }
    out.insert(out.end(), l4.begin(), l4.end());
    return out;
}

}  // namespace splicegate::xdptest
