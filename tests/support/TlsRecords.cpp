#include "tests/support/TlsRecords.h"

#include <algorithm>

namespace splicegate::test {
namespace {

void put16(std::vector<std::uint8_t>& out, std::size_t value) {
    out.push_back(static_cast<std::uint8_t>(value >> 8));
    out.push_back(static_cast<std::uint8_t>(value));
}

void put24(std::vector<std::uint8_t>& out, std::size_t value) {
    out.push_back(static_cast<std::uint8_t>(value >> 16));
    put16(out, value & 0xffff);
}

}  // namespace

std::vector<std::uint8_t> clientHelloMessage(const ClientHelloSpec& spec) {
    std::vector<std::uint8_t> body = {0x03, 0x03};
    for (int i = 0; i < 32; ++i) body.push_back(static_cast<std::uint8_t>(i));  // random
    body.push_back(0);                                                             // session id
    put16(body, 4);
    body.insert(body.end(), {0x13, 0x01, 0xc0, 0x2f});  // two cipher suites
    body.push_back(1);
    body.push_back(0);  // compression: null
    if (spec.withExtensions) {
        std::vector<std::uint8_t> extensions;
        // supported_versions (43): TLS 1.3 and 1.2, as a real client sends it before the name.
        put16(extensions, 43);
        put16(extensions, 5);
        extensions.insert(extensions.end(), {0x04, 0x03, 0x04, 0x03, 0x03});
        if (!spec.serverName.empty()) {
            put16(extensions, 0);
            put16(extensions, spec.serverName.size() + 5);
            put16(extensions, spec.serverName.size() + 3);
            extensions.push_back(0);  // host_name
            put16(extensions, spec.serverName.size());
            extensions.insert(extensions.end(), spec.serverName.begin(), spec.serverName.end());
        }
        if (spec.paddingBytes > 0) {
            put16(extensions, 21);
            put16(extensions, spec.paddingBytes);
            extensions.insert(extensions.end(), spec.paddingBytes, 0);
        }
        put16(body, extensions.size());
        body.insert(body.end(), extensions.begin(), extensions.end());
    }
    std::vector<std::uint8_t> message = {1};
    put24(message, body.size());
    message.insert(message.end(), body.begin(), body.end());
    return message;
}

std::vector<std::uint8_t> inRecords(const std::vector<std::uint8_t>& message,
                                    std::size_t recordPayload) {
    std::vector<std::uint8_t> out;
    for (std::size_t at = 0; at < message.size(); at += recordPayload) {
        std::size_t n = std::min(recordPayload, message.size() - at);
        out.push_back(22);
        out.push_back(3);
        out.push_back(1);
        put16(out, n);
        out.insert(out.end(), message.begin() + static_cast<std::ptrdiff_t>(at),
                   message.begin() + static_cast<std::ptrdiff_t>(at + n));
    }
    return out;
}

}  // namespace splicegate::test
