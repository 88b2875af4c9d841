#pragma once
// TLS ClientHellos as bytes, for the parser's tests and the relay's SNI tests: a ClientHello
// laid out as RFC 8446 says (legacy version, random, session id, cipher suites, compression,
// extensions), with or without a server_name extension, padded to a size, and cut into TLS
// records of a chosen payload size. Thread affinity: none.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace splicegate::test {

struct ClientHelloSpec {
    std::string serverName;         // empty: no server_name extension
    std::size_t paddingBytes = 0;   // a padding extension (RFC 7685) of that many zero bytes
    bool withExtensions = true;     // false: the message ends after compression methods
};

// The handshake message (4-byte header included).
std::vector<std::uint8_t> clientHelloMessage(const ClientHelloSpec& spec);
// `message` in handshake records of at most `recordPayload` bytes each.
std::vector<std::uint8_t> inRecords(const std::vector<std::uint8_t>& message,
                                    std::size_t recordPayload = 16384);

}  // namespace splicegate::test
