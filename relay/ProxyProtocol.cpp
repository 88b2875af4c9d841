#include "relay/ProxyProtocol.h"

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <string_view>
#include <vector>

namespace splicegate {
namespace {

constexpr std::array<std::uint8_t, 12> kV2Signature = {0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D,
                                                       0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A};
constexpr std::string_view kV1Prefix = "PROXY ";
constexpr std::size_t kV2HeaderBytes = 16;
constexpr std::uint8_t kCommandLocal = 0x0, kCommandProxy = 0x1;
constexpr std::uint8_t kFamilyUnspec = 0x0, kFamilyInet = 0x1, kFamilyInet6 = 0x2,
                       kFamilyUnix = 0x3;
constexpr std::uint8_t kProtocolUnspec = 0x0, kProtocolStream = 0x1;
constexpr std::size_t kInetAddressBytes = 12, kInet6AddressBytes = 36, kUnixAddressBytes = 216;

ProxyParse invalid(std::string problem) {
    ProxyParse result;
    result.status = ProxyParse::Status::Invalid;
    result.problem = std::move(problem);
    return result;
}

ProxyParse needMore(std::size_t total) {
    ProxyParse result;
    result.status = ProxyParse::Status::NeedMore;
    result.needBytes = total;
    return result;
}

// True while `bytes` is a (possibly whole) prefix of `expected`.
bool startsLike(std::span<const std::uint8_t> bytes, std::span<const std::uint8_t> expected) {
    std::size_t n = std::min(bytes.size(), expected.size());
    return std::memcmp(bytes.data(), expected.data(), n) == 0;
}

std::span<const std::uint8_t> asBytes(std::string_view text) {
    return {reinterpret_cast<const std::uint8_t*>(text.data()), text.size()};
}

SocketAddress inetAddress(const std::uint8_t* address, const std::uint8_t* port) {
    sockaddr_in v4{};
    v4.sin_family = AF_INET;
    std::memcpy(&v4.sin_addr, address, 4);
    std::memcpy(&v4.sin_port, port, 2);  // both in network byte order already
    return SocketAddress::fromSockaddr(reinterpret_cast<const sockaddr*>(&v4), sizeof v4);
}

SocketAddress inet6Address(const std::uint8_t* address, const std::uint8_t* port) {
    sockaddr_in6 v6{};
    v6.sin6_family = AF_INET6;
    std::memcpy(&v6.sin6_addr, address, 16);
    std::memcpy(&v6.sin6_port, port, 2);
    return SocketAddress::fromSockaddr(reinterpret_cast<const sockaddr*>(&v6), sizeof v6);
}

// A v1 port: decimal 0..65535 without a leading zero (the spec's form).
bool parsePort(std::string_view text, std::uint16_t& port) {
    if (text.empty() || text.size() > 5 || (text.size() > 1 && text.front() == '0')) return false;
    unsigned value = 0;
    for (char c : text) {
        if (c < '0' || c > '9') return false;
        value = value * 10 + static_cast<unsigned>(c - '0');
    }
    if (value > 65535) return false;
    port = static_cast<std::uint16_t>(value);
    return true;
}

std::optional<SocketAddress> v1Address(int family, std::string_view host, std::string_view port) {
    std::uint16_t number = 0;
    if (host.empty() || host.size() >= INET6_ADDRSTRLEN || !parsePort(port, number))
        return std::nullopt;
    std::string text(host);
    std::uint8_t raw[16]{};
    if (inet_pton(family, text.c_str(), raw) != 1) return std::nullopt;
    std::uint16_t networkPort = htons(number);
    const auto* portBytes = reinterpret_cast<const std::uint8_t*>(&networkPort);
    return family == AF_INET ? inetAddress(raw, portBytes) : inet6Address(raw, portBytes);
}

ProxyParse parseV1(std::span<const std::uint8_t> bytes) {
    std::size_t limit = std::min(bytes.size(), kProxyV1MaxBytes);
    std::size_t end = 0;  // index of '\r' of the "\r\n"
    bool found = false;
    for (std::size_t i = 0; i < limit; ++i) {
        std::uint8_t c = bytes[i];
        if (c == '\r') {
            if (i + 1 >= bytes.size()) return needMore(i + 2);
            if (bytes[i + 1] != '\n' || i + 2 > kProxyV1MaxBytes)
                return invalid("v1 header: CR not followed by LF");
            end = i;
            found = true;
            break;
        }
        if (c < 0x20 || c > 0x7e) return invalid("v1 header: a byte that is not printable text");
    }
    if (!found) {
        if (bytes.size() < kProxyV1MaxBytes) return needMore(bytes.size() + 1);
        return invalid("v1 header: no CRLF within 107 bytes");
    }
    std::string_view line(reinterpret_cast<const char*>(bytes.data()), end);
    std::vector<std::string_view> words;
    for (std::size_t start = 0; start <= line.size();) {
        auto space = line.find(' ', start);
        if (space == std::string_view::npos) space = line.size();
        words.push_back(line.substr(start, space - start));
        start = space + 1;
    }
    ProxyParse result;
    result.status = ProxyParse::Status::Complete;
    result.header.version = ProxyVersion::V1;
    result.header.length = end + 2;
    if (words.size() >= 2 && words[1] == "UNKNOWN") return result;  // the rest is ignored
    if (words.size() != 6) return invalid("v1 header: expected 6 fields");
    int family = 0;
    if (words[1] == "TCP4")
        family = AF_INET;
    else if (words[1] == "TCP6")
        family = AF_INET6;
    else
        return invalid("v1 header: unknown protocol (TCP4, TCP6 or UNKNOWN)");
    auto source = v1Address(family, words[2], words[4]);
    auto destination = v1Address(family, words[3], words[5]);
    if (!source || !destination) return invalid("v1 header: bad address or port");
    result.header.hasAddresses = true;
    result.header.source = *source;
    result.header.destination = *destination;
    return result;
}

// TLVs: type (1), length (2, big endian), value. They must tile the rest exactly.
bool tlvsFit(std::span<const std::uint8_t> tlvs) {
    std::size_t at = 0;
    while (at < tlvs.size()) {
        if (tlvs.size() - at < 3) return false;
        std::size_t length = (std::size_t{tlvs[at + 1]} << 8) | tlvs[at + 2];
        at += 3;
        if (tlvs.size() - at < length) return false;
        at += length;
    }
    return true;
}

ProxyParse parseV2(std::span<const std::uint8_t> bytes) {
    if (bytes.size() < kV2HeaderBytes) return needMore(kV2HeaderBytes);
    std::uint8_t versionCommand = bytes[12];
    if ((versionCommand >> 4) != 2) return invalid("v2 header: version is not 2");
    std::uint8_t command = versionCommand & 0x0f;
    if (command != kCommandLocal && command != kCommandProxy)
        return invalid("v2 header: unknown command");
    std::uint8_t family = bytes[13] >> 4;
    std::uint8_t protocol = bytes[13] & 0x0f;
    std::size_t length = (std::size_t{bytes[14]} << 8) | bytes[15];
    std::size_t total = kV2HeaderBytes + length;
    if (total > kProxyV2MaxBytes) return invalid("v2 header: longer than 2064 bytes");
    if (bytes.size() < total) return needMore(total);
    auto body = bytes.subspan(kV2HeaderBytes, length);
    ProxyParse result;
    result.status = ProxyParse::Status::Complete;
    result.header.version = ProxyVersion::V2;
    result.header.length = total;
    std::size_t addressBytes = 0;
    switch (family) {
        case kFamilyUnspec:
            addressBytes = 0;
            break;
        case kFamilyInet:
            addressBytes = kInetAddressBytes;
            break;
        case kFamilyInet6:
            addressBytes = kInet6AddressBytes;
            break;
        case kFamilyUnix:
            addressBytes = kUnixAddressBytes;
            break;
        default:
            return invalid("v2 header: unknown address family");
    }
    if (protocol > 2) return invalid("v2 header: unknown transport protocol");
    // LOCAL: the balancer speaks for itself (a health check); whatever follows is skipped.
    if (command == kCommandLocal) return result;
    if (length < addressBytes) return invalid("v2 header: address block shorter than its family");
    if (!tlvsFit(body.subspan(addressBytes)))
        return invalid("v2 header: a TLV runs past the header's end");
    // UNSPEC and AF_UNIX say nothing a TCP relay can use: the real endpoints stand.
    if (family == kFamilyUnspec || family == kFamilyUnix) return result;
    if (protocol != kProtocolStream && protocol != kProtocolUnspec)
        return invalid("v2 header: not a stream (TCP) connection");
    const std::uint8_t* a = body.data();
    if (family == kFamilyInet) {
        result.header.source = inetAddress(a, a + 8);
        result.header.destination = inetAddress(a + 4, a + 10);
    } else {
        result.header.source = inet6Address(a, a + 32);
        result.header.destination = inet6Address(a + 16, a + 34);
    }
    result.header.hasAddresses = true;
    return result;
}

void appendBigEndian16(std::string& out, std::uint16_t value) {
    out.push_back(static_cast<char>(value >> 8));
    out.push_back(static_cast<char>(value & 0xff));
}

}  // namespace

ProxyParse parseProxyHeader(std::span<const std::uint8_t> bytes, ProxyVersions accepted) {
    if (bytes.empty()) return needMore(1);
    bool maybeV1 = accepted.v1 && startsLike(bytes, asBytes(kV1Prefix));
    bool maybeV2 = accepted.v2 && startsLike(bytes, kV2Signature);
    if (maybeV1) {
        if (bytes.size() < kV1Prefix.size()) return needMore(kV1Prefix.size());
        return parseV1(bytes);
    }
    if (maybeV2) {
        if (bytes.size() < kV2Signature.size()) return needMore(kV2HeaderBytes);
        return parseV2(bytes);
    }
    if (accepted.v1 && accepted.v2) return invalid("no PROXY protocol header (v1 or v2)");
    return invalid(accepted.v1 ? "no PROXY protocol v1 header" : "no PROXY protocol v2 header");
}

std::string encodeProxyHeader(ProxyVersion version, const SocketAddress& source,
                              const SocketAddress& destination) {
    bool known = (source.family() == AF_INET || source.family() == AF_INET6) &&
                 source.family() == destination.family();
    if (version == ProxyVersion::V1) {
        if (!known) return "PROXY UNKNOWN\r\n";
        char sourceText[INET6_ADDRSTRLEN]{}, destinationText[INET6_ADDRSTRLEN]{};
        const void* s = nullptr;
        const void* d = nullptr;
        if (source.family() == AF_INET) {
            s = &reinterpret_cast<const sockaddr_in*>(source.get())->sin_addr;
            d = &reinterpret_cast<const sockaddr_in*>(destination.get())->sin_addr;
        } else {
            s = &reinterpret_cast<const sockaddr_in6*>(source.get())->sin6_addr;
            d = &reinterpret_cast<const sockaddr_in6*>(destination.get())->sin6_addr;
        }
        inet_ntop(source.family(), s, sourceText, sizeof sourceText);
        inet_ntop(source.family(), d, destinationText, sizeof destinationText);
        std::string line = source.family() == AF_INET ? "PROXY TCP4 " : "PROXY TCP6 ";
        line += sourceText;
        line += ' ';
        line += destinationText;
        line += ' ' + std::to_string(source.port()) + ' ' + std::to_string(destination.port());
        line += "\r\n";
        return line;
    }
    std::string out(reinterpret_cast<const char*>(kV2Signature.data()), kV2Signature.size());
    if (!known) {
        out.push_back(static_cast<char>(0x20 | kCommandLocal));
        out.push_back(static_cast<char>(kFamilyUnspec << 4 | kProtocolUnspec));
        appendBigEndian16(out, 0);
        return out;
    }
    out.push_back(static_cast<char>(0x20 | kCommandProxy));
    auto appendRaw = [&out](const void* data, std::size_t n) {
        out.append(static_cast<const char*>(data), n);
    };
    if (source.family() == AF_INET) {
        const auto* s = reinterpret_cast<const sockaddr_in*>(source.get());
        const auto* d = reinterpret_cast<const sockaddr_in*>(destination.get());
        out.push_back(static_cast<char>(kFamilyInet << 4 | kProtocolStream));
        appendBigEndian16(out, kInetAddressBytes);
        appendRaw(&s->sin_addr, 4);
        appendRaw(&d->sin_addr, 4);
        appendRaw(&s->sin_port, 2);
        appendRaw(&d->sin_port, 2);
    } else {
        const auto* s = reinterpret_cast<const sockaddr_in6*>(source.get());
        const auto* d = reinterpret_cast<const sockaddr_in6*>(destination.get());
        out.push_back(static_cast<char>(kFamilyInet6 << 4 | kProtocolStream));
        appendBigEndian16(out, kInet6AddressBytes);
        appendRaw(&s->sin6_addr, 16);
        appendRaw(&d->sin6_addr, 16);
        appendRaw(&s->sin6_port, 2);
        appendRaw(&d->sin6_port, 2);
    }
    return out;
}

}  // namespace splicegate
