#pragma once
// The server name (SNI, RFC 6066) of a TLS ClientHello, read from the TLS records a client sends
// first, without terminating TLS (route key `sni`: the bytes stay in the socket and are
// forwarded unchanged). The ClientHello may span several handshake records; the parser says how
// many bytes it needs until it has the whole message, and refuses one whose handshake message is
// over 16 KiB. TLS 1.0 to 1.3 ClientHellos share this layout.
// A pure function over bytes. Thread affinity: none.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace splicegate {

// The largest ClientHello handshake message accepted (its 4-byte header included).
constexpr std::size_t kMaxClientHelloBytes = 16 * 1024;
// The most bytes of TLS records the parser reads for it: the message and the 5-byte headers of
// the records that carry it (a client splitting it into tiny records gets refused beyond this).
constexpr std::size_t kMaxClientHelloRecordBytes = kMaxClientHelloBytes + 2048;

struct ClientHelloParse {
    enum class Status : std::uint8_t { Complete, NeedMore, Invalid, TooLarge };
    Status status = Status::NeedMore;
    // Complete: the host name, lower case ASCII; empty when the ClientHello carries none.
    std::string serverName;
    std::size_t needBytes = 0;  // NeedMore: the bytes in all needed before it can say more
    std::string problem;        // Invalid, TooLarge: what is wrong, for the log
};

ClientHelloParse parseClientHello(std::span<const std::uint8_t> bytes);

}  // namespace splicegate
