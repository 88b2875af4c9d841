#pragma once
// An IPv4 or IPv6 socket address, parsed from "a.b.c.d:port" or "[v6]:port" and printed back the
// same way. Host names ("HOST:PORT") are resolved only by resolve(), never on the data path.
#include <netinet/in.h>
#include <sys/socket.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace splicegate {

class SocketAddress {
public:
    SocketAddress() noexcept;
    // Numeric address only; nullopt when `text` is not "IPv4:port" or "[IPv6]:port".
    static std::optional<SocketAddress> parseNumeric(std::string_view text) noexcept;
    // Numeric or "hostname:port" (resolved with getaddrinfo, first result of each family).
    // Throws UsageError naming `text` when it cannot be parsed or resolved.
    static std::vector<SocketAddress> resolve(std::string_view text);
    static SocketAddress fromSockaddr(const sockaddr* address, socklen_t length) noexcept;

    const sockaddr* get() const noexcept { return reinterpret_cast<const sockaddr*>(&storage_); }
    sockaddr* get() noexcept { return reinterpret_cast<sockaddr*>(&storage_); }
    socklen_t length() const noexcept { return length_; }
    int family() const noexcept { return storage_.generic.sa_family; }
    unsigned port() const noexcept;
    std::string toString() const;

    friend bool operator==(const SocketAddress& a, const SocketAddress& b) noexcept;

private:
    // IPv4 or IPv6 only: 28 bytes, not sockaddr_storage's 128 (two of these per connection).
    union Storage {
        sockaddr generic;
        sockaddr_in v4;
        sockaddr_in6 v6;
    };
    Storage storage_{};
    socklen_t length_ = 0;
};

std::ostream& operator<<(std::ostream& out, const SocketAddress& address);

// Splits "host:port" / "[v6]:port" into host and port; false when malformed.
bool splitHostPort(std::string_view text, std::string& host, unsigned& port) noexcept;

}  // namespace splicegate
