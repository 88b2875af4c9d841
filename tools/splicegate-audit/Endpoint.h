#pragma once
// An address with an optional port as the audit log writes them ("198.51.100.1:4000",
// "[2001:db8::7]:5000") and as operators type them (also without the port, an IPv6 address with
// or without brackets). Used by `list --client` and by `export`, which needs numeric addresses.
// Thread affinity: none. Error contract: parse returns nullopt on anything else.
#include <array>
#include <cstdint>
#include <optional>
#include <string>

namespace splicegate::audittool {

struct Endpoint {
    int family = 0;                          // AF_INET or AF_INET6
    std::array<std::uint8_t, 16> address{};  // network byte order; IPv4 in the first 4 bytes
    std::optional<std::uint16_t> port;

    static std::optional<Endpoint> parse(const std::string& text);
    // Same address (and same port when `pattern` has one).
    bool matches(const Endpoint& pattern) const;
};

}  // namespace splicegate::audittool
