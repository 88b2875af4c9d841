#include "common/SocketAddress.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>

#include <charconv>
#include <cstring>
#include <ostream>

#include "common/Error.h"

namespace splicegate {

SocketAddress::SocketAddress() noexcept { storage_.generic.sa_family = AF_UNSPEC; }

bool splitHostPort(std::string_view text, std::string& host, unsigned& port) noexcept {
    std::string_view hostPart;
    std::string_view portPart;
    if (!text.empty() && text.front() == '[') {
        auto close = text.find(']');
        if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':')
            return false;
        hostPart = text.substr(1, close - 1);
        portPart = text.substr(close + 2);
    } else {
        auto colon = text.rfind(':');
        if (colon == std::string_view::npos) return false;
        hostPart = text.substr(0, colon);
        portPart = text.substr(colon + 1);
        if (hostPart.find(':') != std::string_view::npos) return false;  // bare IPv6 needs []
    }
    if (hostPart.empty() || portPart.empty()) return false;
    unsigned value = 0;
    auto [end, ec] = std::from_chars(portPart.data(), portPart.data() + portPart.size(), value);
    if (ec != std::errc{} || end != portPart.data() + portPart.size() || value > 65535)
        return false;
    try {
        host.assign(hostPart);
    } catch (...) {
        return false;
    }
    port = value;
    return true;
}

std::optional<SocketAddress> SocketAddress::parseNumeric(std::string_view text) noexcept {
    std::string host;
    unsigned port = 0;
    if (!splitHostPort(text, host, port)) return std::nullopt;
    SocketAddress result;
    bool bracketed = text.front() == '[';
    if (!bracketed) {
        auto* v4 = reinterpret_cast<sockaddr_in*>(&result.storage_);
        if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) != 1) return std::nullopt;
        v4->sin_family = AF_INET;
        v4->sin_port = htons(static_cast<uint16_t>(port));
        result.length_ = sizeof(sockaddr_in);
    } else {
        auto* v6 = reinterpret_cast<sockaddr_in6*>(&result.storage_);
        if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) != 1) return std::nullopt;
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(static_cast<uint16_t>(port));
        result.length_ = sizeof(sockaddr_in6);
    }
    return result;
}

std::vector<SocketAddress> SocketAddress::resolve(std::string_view text) {
    if (auto numeric = parseNumeric(text)) return {*numeric};
    std::string host;
    unsigned port = 0;
    if (!splitHostPort(text, host, port))
        throw UsageError("'" + std::string(text) + "' is not HOST:PORT, ADDR:PORT or [IPv6]:PORT");
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* list = nullptr;
    int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &list);
    if (rc != 0)
        throw UsageError("cannot resolve '" + std::string(text) + "': " + gai_strerror(rc));
    std::vector<SocketAddress> result;
    for (auto* entry = list; entry != nullptr; entry = entry->ai_next) {
        auto address = fromSockaddr(entry->ai_addr, entry->ai_addrlen);
        bool seen = false;
        for (auto& known : result) seen = seen || known == address;
        if (!seen) result.push_back(address);
    }
    freeaddrinfo(list);
    if (result.empty()) throw UsageError("'" + std::string(text) + "' resolves to no address");
    return result;
}

SocketAddress SocketAddress::fromSockaddr(const sockaddr* address, socklen_t length) noexcept {
    SocketAddress result;
    if (length > sizeof(result.storage_)) length = sizeof(result.storage_);
    std::memcpy(&result.storage_, address, length);
    result.length_ = length;
    return result;
}

unsigned SocketAddress::port() const noexcept {
    if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage_)->sin_port);
    if (family() == AF_INET6)
        return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_port);
    return 0;
}

std::string SocketAddress::toString() const {
    char text[INET6_ADDRSTRLEN] = "?";
    if (family() == AF_INET) {
        inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage_)->sin_addr, text,
                  sizeof text);
        return std::string(text) + ":" + std::to_string(port());
    }
    if (family() == AF_INET6) {
        inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_addr, text,
                  sizeof text);
        // Built with += : GCC 12 -O3 warns falsely (-Wrestrict, bug 105329) on "[" + string.
        std::string out = "[";
        out += text;
        out += "]:";
        out += std::to_string(port());
        return out;
    }
    return "unspecified";
}

bool operator==(const SocketAddress& a, const SocketAddress& b) noexcept {
    return a.length_ == b.length_ && std::memcmp(&a.storage_, &b.storage_, a.length_) == 0;
}

std::ostream& operator<<(std::ostream& out, const SocketAddress& address) {
    return out << address.toString();
}

}  // namespace splicegate
