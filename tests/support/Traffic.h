#pragma once
// Traffic patterns shared by the integration tests: upstream handlers for TestServer and the
// matching client side, all hashing both ends (docs/kernel-notes.md §10).
//
// The "duplex" protocol: the client connects, sends a StreamHeader {id, u2cSize}, then streams
// c2u bytes of PatternStream(c2uSeed(id)) and SHUT_WR, while receiving to EOF. The upstream reads
// the header, then concurrently streams u2cSize bytes of PatternStream(u2cSeed(id)) (then
// SHUT_WR) and receives to EOF, and records both directions under the id. The header lets every
// transfer be matched end to end even though the relay picks the upstream connection order.
// Thread affinity: handlers run on TestServer threads; the boards they fill are thread-safe.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/Sockets.h"
#include "tests/support/TestServer.h"

namespace splicegate::test {

inline uint64_t c2uSeed(uint64_t id) {
    return id * 2 + 1;
}
inline uint64_t u2cSeed(uint64_t id) {
    return id * 2 + 2 + 0x5eed000000ULL;
}

using DuplexBoard = ResultBoard<uint64_t, DuplexResult>;  // id -> upstream's view

// Upstream side of the duplex protocol. Connections that close before a full header (e.g. a
// probe) are ignored.
TestServer::Handler duplexUpstream(std::shared_ptr<DuplexBoard> board, milliseconds timeout);

// Client side: connect to `port`, run the duplex protocol. `connectError` is set when the
// connect itself failed (then the result is empty).
struct ClientRun {
    uint64_t id = 0;
    int connectError = 0;
    int headerError = 0;
    DuplexResult result;
};
ClientRun duplexClient(uint16_t port, uint64_t id, uint64_t c2uSize, uint64_t u2cSize,
                       milliseconds timeout, bool ipv6 = false);

// Runs `count` duplexClient()s at once (ids firstId..), each on its own thread.
std::vector<ClientRun> duplexClients(uint16_t port, std::size_t count, uint64_t firstId,
                                     uint64_t c2uSize, uint64_t u2cSize, milliseconds timeout);

// Checks every client run against the upstream board: connect ok, both directions complete
// (all bytes, EOF) and SHA-256 equal at both ends, and equal to the independently computed
// pattern digest. The message names each mismatch. First waits up to `wait` for the upstream to
// record every client id whose connect succeeded.
::testing::AssertionResult duplexMatches(const std::vector<ClientRun>& clients,
                                         const DuplexBoard& board, uint64_t c2uSize,
                                         uint64_t u2cSize, milliseconds wait = milliseconds(5000));

// Echo: writes back everything it reads; SHUT_WR after EOF.
TestServer::Handler echoUpstream(milliseconds timeout);

// Client of an echo upstream over an already connected socket: sends `size` bytes of
// PatternStream(seed) while reading `size` bytes back (no SHUT_WR, so the connection stays
// usable); true when the echoed bytes hash equal to what was sent.
::testing::AssertionResult echoRoundTrip(int fd, uint64_t seed, uint64_t size,
                                         milliseconds timeout);

// Sink: receives and hashes until EOF or error; records the result by accept index.
using SinkBoard = ResultBoard<std::size_t, StreamResult>;
TestServer::Handler sinkUpstream(std::shared_ptr<SinkBoard> board, milliseconds timeout);

}  // namespace splicegate::test
