#include "tools/splicegate-audit/Endpoint.h"

#include <arpa/inet.h>
#include <sys/socket.h>

#include <algorithm>

namespace splicegate::audittool {
namespace {

bool parseAddress(const std::string& text, Endpoint& endpoint) {
    if (::inet_pton(AF_INET, text.c_str(), endpoint.address.data()) == 1) {
        endpoint.family = AF_INET;
        return true;
    }
    if (::inet_pton(AF_INET6, text.c_str(), endpoint.address.data()) == 1) {
        endpoint.family = AF_INET6;
        return true;
    }
    return false;
}

std::optional<std::uint16_t> parsePort(const std::string& text) {
    if (text.empty() || text.size() > 5 ||
        !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return std::nullopt;
    const unsigned long value = std::stoul(text);
    if (value > 65535) return std::nullopt;
    return static_cast<std::uint16_t>(value);
}

}  // namespace

std::optional<Endpoint> Endpoint::parse(const std::string& text) {
    Endpoint endpoint;
    if (!text.empty() && text.front() == '[') {
        const auto close = text.find(']');
        if (close == std::string::npos) return std::nullopt;
        if (!parseAddress(text.substr(1, close - 1), endpoint) || endpoint.family != AF_INET6)
            return std::nullopt;
        if (close + 1 == text.size()) return endpoint;
        if (text[close + 1] != ':') return std::nullopt;
        endpoint.port = parsePort(text.substr(close + 2));
        if (!endpoint.port) return std::nullopt;
        return endpoint;
    }
    if (parseAddress(text, endpoint)) return endpoint;  // bare IPv4 or IPv6
    const auto colon = text.rfind(':');
    if (colon == std::string::npos || !parseAddress(text.substr(0, colon), endpoint) ||
        endpoint.family != AF_INET)
        return std::nullopt;
    endpoint.port = parsePort(text.substr(colon + 1));
    if (!endpoint.port) return std::nullopt;
    return endpoint;
}

bool Endpoint::matches(const Endpoint& pattern) const {
    if (family != pattern.family || address != pattern.address) return false;
    return !pattern.port || port == pattern.port;
}

}  // namespace splicegate::audittool
