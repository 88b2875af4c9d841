#pragma once
// An IPv4 or IPv6 prefix as the edge filter's deny and allow rules hold it.
// Parsed from "10.0.0.0/8", "2001:db8::/32", or a bare address (= /32 or /128). Host bits below
// the prefix are cleared, so "10.1.2.3/8" and "10.0.0.0/8" are the same rule and print alike.
// Thread affinity: none (a value type). Error contract: parse() returns nullopt;
// parseOrThrow() throws UsageError whose message names the text and what is wrong with it.
#include <array>
#include <compare>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>

namespace splicegate {

struct Cidr {
    int family = 0;                          // AF_INET or AF_INET6
    std::array<std::uint8_t, 16> address{};  // network byte order; IPv4 uses the first 4 bytes
    unsigned prefixLength = 0;

    std::string text() const;
    static std::optional<Cidr> parse(std::string_view text);
    static Cidr parseOrThrow(std::string_view text);
    // Address bits of the family: 32 or 128.
    unsigned maxPrefixLength() const noexcept;

    friend bool operator==(const Cidr&, const Cidr&) = default;
    friend auto operator<=>(const Cidr&, const Cidr&) = default;
};

std::ostream& operator<<(std::ostream& out, const Cidr& cidr);

}  // namespace splicegate
