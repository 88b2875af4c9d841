#pragma once
// Loopback socket helpers for the integration tests: listeners on free ports, connects with a
// timeout, bounded blocking I/O, and hashed pattern transfers (both ends hash what they moved).
// Thread affinity: none (free functions on fds the caller owns).
// Error contract: setup failures (socket, bind, listen) throw std::system_error naming the call;
// transfer functions never throw, they report errno / EOF / timeout in their result.
// Every wait is bounded by a Deadline; sockets are created SOCK_CLOEXEC so a daemon started later
// never inherits a test's socket.
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/SocketAddress.h"
#include "common/UniqueFd.h"

namespace splicegate::test {

using Clock = std::chrono::steady_clock;

// A numeric "a.b.c.d:port" or "[v6]:port" a test spells out; one it cannot parse is a test
// failure (and the unspecified address).
SocketAddress numericAddress(const char* text);
using Deadline = Clock::time_point;
using std::chrono::milliseconds;

inline Deadline deadlineIn(milliseconds timeout) {
    return Clock::now() + timeout;
}

// "127.0.0.1:PORT" (or "[::1]:PORT" with ipv6).
std::string loopback(uint16_t port, bool ipv6 = false);

// One end of a fresh non-blocking Unix socket pair whose other end is closed: a real fd for a
// test to hand over as an accepted socket, with no connection behind it.
UniqueFd lonelySocket();

// A listening socket on 127.0.0.1 (or ::1); port 0 picks a free one. Returns the bound port.
UniqueFd listenTcp(uint16_t& port, bool ipv6 = false, int backlog = 4096);

// A port nothing listens on right now (bound to 0, read back, closed).
uint16_t pickFreePort();

// Connects to loopback:port. On failure returns an invalid fd and sets `error` (errno, or
// ETIMEDOUT). The returned socket is blocking, with an I/O timeout of 250 ms per call so the
// bounded helpers below can check their deadline.
UniqueFd connectTcp(uint16_t port, int& error, milliseconds timeout = milliseconds(5000),
                    bool ipv6 = false);

// A blocking client socket bound to `source` (e.g. 127.0.0.2) connected to 127.0.0.1:port, with
// an I/O timeout of 250 ms per call. On failure returns an invalid fd and sets `error` (errno).
UniqueFd connectFrom(const char* source, uint16_t port, int& error);

// SO_RCVTIMEO and SO_SNDTIMEO.
void setIoTimeout(int fd, milliseconds timeout);

// Arms SO_LINGER {on, 0} and closes: the peer gets an RST instead of a FIN.
void resetClose(UniqueFd& fd);
// Arms SO_LINGER {on, 0} only (the owner closes later).
void armReset(int fd);

// The local port of a socket (0 when getsockname fails).
uint16_t localPort(int fd);

// One socket of /proc/net/tcp (and tcp6): its ports, its TCP state as the kernel numbers it
// (0x01 ESTABLISHED, 0x02 SYN_SENT, 0x04 FIN_WAIT1, 0x08 CLOSE_WAIT, 0x0A LISTEN) and the bytes
// in its send (tx) and receive (rx) queues.
struct TcpTableRow {
    uint16_t localPort = 0;
    uint16_t remotePort = 0;
    int state = 0;
    long txQueue = 0;
    long rxQueue = 0;
    unsigned long inode = 0;  // the socket's inode: /proc/PID/fd links read "socket:[INODE]"
};
// The sockets of this network namespace; IPv4 only unless `withIpv6`.
std::vector<TcpTableRow> tcpTable(bool withIpv6);

// A duplicate (pidfd_getfd) of the socket that process `pid` holds for the TCP connection
// localPort -> remotePort, so a test can read that socket's options; polls until the process
// holds it or the deadline passes (then an invalid fd). Needs CAP_SYS_PTRACE over `pid`.
UniqueFd borrowSocket(pid_t pid, uint16_t localPort, uint16_t remotePort, Deadline deadline);

// True when a socket in LISTEN state has this local port (from /proc/net/tcp and tcp6). Used as
// the readiness probe, so no stray probe connection reaches an upstream.
bool isListening(uint16_t port);
// Polls isListening() until it equals `wanted` or the deadline passes.
bool waitListening(uint16_t port, bool wanted, Deadline deadline);

// Raises RLIMIT_NOFILE's soft limit to the hard limit; returns the new soft limit.
uint64_t raiseFdLimit();

// What one direction of a transfer saw at this end.
struct StreamResult {
    uint64_t bytes = 0;
    std::string sha256;  // of exactly the `bytes` bytes moved
    bool eof = false;    // receive side: orderly EOF seen
    int error = 0;       // errno of the failure that ended it, 0 if none
    bool timedOut = false;

    bool ok() const noexcept { return error == 0 && !timedOut; }
    std::string describe() const;
};

// Sends `size` bytes of PatternStream(seed), hashing them; optionally SHUT_WR afterwards.
// `pauseEveryChunk` > 0 sleeps after every `chunk` bytes (a paced sender); `progress`, if given,
// is advanced by every byte the kernel accepted; `cancel`, if given and set, stops it early
// (result.timedOut stays false, bytes tells how far it got).
struct SendOptions {
    std::size_t chunk = 256 * 1024;
    std::chrono::microseconds pauseEveryChunk{0};
    bool shutdownWrite = true;
    std::atomic<uint64_t>* progress = nullptr;
    const std::atomic<bool>* cancel = nullptr;  // checked between chunks; stops without SHUT_WR
};
StreamResult sendPattern(int fd, uint64_t seed, uint64_t size, Deadline deadline,
                         const SendOptions& options = {});

// How a bounded receive ended: bytes received, and the orderly EOF, errno or deadline that
// stopped it (none of them when `limit` did).
struct ReceiveEnd {
    uint64_t bytes = 0;
    bool eof = false;
    int error = 0;
    bool timedOut = false;
};
// Receives until EOF, an error, `limit` bytes, or the deadline, passing every chunk to `onChunk`
// with the stream offset of its first byte: the one receive loop behind the hashing and the
// checking receivers.
using ChunkSink = std::function<void(const uint8_t* data, std::size_t size, uint64_t offset)>;
ReceiveEnd receiveChunks(int fd, Deadline deadline, uint64_t limit, const ChunkSink& onChunk);

// Receives and hashes until EOF, an error, `limit` bytes, or the deadline.
StreamResult receiveAll(int fd, Deadline deadline, uint64_t limit = UINT64_MAX,
                        std::atomic<uint64_t>* progress = nullptr);

// Plain bounded send/receive of a small buffer; return false and set `error` on failure
// (error = ETIMEDOUT on deadline, ECONNRESET/EPIPE..., or -1 for EOF during recvExact).
bool sendAll(int fd, const void* data, std::size_t size, Deadline deadline, int& error);
bool recvExact(int fd, void* data, std::size_t size, Deadline deadline, int& error);

// Both directions on one socket at once: a helper thread sends `size` bytes of
// PatternStream(seed) then SHUT_WR, while the calling thread receives to EOF.
struct DuplexResult {
    StreamResult sent;
    StreamResult received;
};
DuplexResult duplex(int fd, uint64_t seed, uint64_t size, Deadline deadline);

// How a peer ended a connection, seen by reading (and discarding) until it ends.
enum class PeerClose { Eof, Reset, Timeout, OtherError };
const char* toString(PeerClose kind) noexcept;
PeerClose waitPeerClose(int fd, Deadline deadline, uint64_t* discarded = nullptr,
                        int* error = nullptr);

// A 16-byte header the tests put in front of a stream so an upstream handler knows which client
// it serves and what to do (id selects the seeds; size how much to send back).
struct StreamHeader {
    uint64_t id = 0;
    uint64_t size = 0;
};
bool sendHeader(int fd, const StreamHeader& header, Deadline deadline, int& error);
bool recvHeader(int fd, StreamHeader& header, Deadline deadline, int& error);

}  // namespace splicegate::test
