#include "xdp/Cidr.h"

#include <arpa/inet.h>
#include <sys/socket.h>

#include <charconv>

#include "common/Error.h"

namespace splicegate {
namespace {

// Parses `text` into `out`; on failure returns why (for the error message), else empty.
std::string parseCidr(std::string_view text, Cidr& out) {
    if (text.empty()) return "empty";
    std::string_view addressPart = text;
    std::optional<unsigned> prefix;
    if (auto slash = text.find('/'); slash != std::string_view::npos) {
        addressPart = text.substr(0, slash);
        std::string_view prefixPart = text.substr(slash + 1);
        unsigned value = 0;
        auto [end, ec] =
            std::from_chars(prefixPart.data(), prefixPart.data() + prefixPart.size(), value);
        if (prefixPart.empty() || prefixPart.size() > 3 || ec != std::errc{} ||
            end != prefixPart.data() + prefixPart.size())
            return "the prefix length after '/' must be a number";
        prefix = value;
    }
    // inet_pton wants a NUL-terminated string; it rejects everything but plain numeric forms.
    std::string address(addressPart);
    Cidr cidr;
    if (address.find(':') == std::string::npos) {
        if (inet_pton(AF_INET, address.c_str(), cidr.address.data()) != 1)
            return "not an IPv4 or IPv6 address";
        cidr.family = AF_INET;
    } else {
        if (inet_pton(AF_INET6, address.c_str(), cidr.address.data()) != 1)
            return "not an IPv4 or IPv6 address";
        cidr.family = AF_INET6;
    }
    unsigned bits = cidr.maxPrefixLength();
    cidr.prefixLength = prefix.value_or(bits);
    if (cidr.prefixLength > bits) return "the prefix length must be 0.." + std::to_string(bits);
    for (unsigned bit = cidr.prefixLength; bit < 128; ++bit)
        cidr.address[bit / 8] &= static_cast<std::uint8_t>(~(0x80u >> (bit % 8)));
    out = cidr;
    return {};
}

}  // namespace

unsigned Cidr::maxPrefixLength() const noexcept {
    return family == AF_INET ? 32 : 128;
}

std::string Cidr::text() const {
    char buffer[INET6_ADDRSTRLEN] = {};
    if (family != AF_INET && family != AF_INET6) return "(invalid)";
    inet_ntop(family, address.data(), buffer, sizeof(buffer));
    return std::string(buffer) + "/" + std::to_string(prefixLength);
}

std::optional<Cidr> Cidr::parse(std::string_view text) {
    Cidr cidr;
    if (!parseCidr(text, cidr).empty()) return std::nullopt;
    return cidr;
}

Cidr Cidr::parseOrThrow(std::string_view text) {
    Cidr cidr;
    if (auto why = parseCidr(text, cidr); !why.empty())
        throw UsageError("invalid CIDR '" + std::string(text) + "': " + why);
    return cidr;
}

std::ostream& operator<<(std::ostream& out, const Cidr& cidr) {
    return out << cidr.text();
}

}  // namespace splicegate
