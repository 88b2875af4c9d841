#pragma once
#include <cstddef>
#include <string>
// The TCP options the relay sets on its sockets, and what it asks them, one wrapper each: the
// result, or -errno on failure (the caller decides whether a failure matters).
namespace splicegate {

// Nagle off: the relay forwards what it has at once (its peers set their own).
int setNoDelay(int fd) noexcept;

// A close with SO_LINGER {1, 0} sends RST: how a reset on one side is passed to the other.
int armReset(int fd) noexcept;

// TCP_QUICKACK 0 puts the socket in the kernel's delayed-ACK ("pingpong") mode: the ACK of
// received data waits up to the delayed-ACK timeout for data going the other way and rides on
// it, instead of the quick ACKs a new connection sends for its first segments. The kernel
// leaves the mode by itself the first time the timer fires with nothing to carry the ACK.
// On a listening socket it must come after listen(); accepted sockets inherit it.
int enterDelayedAckMode(int fd) noexcept;

// TCP_CONGESTION: `algorithm` for this socket instead of the system's default (empty: nothing to
// set, 0). Set on a listener before listen(), it is inherited by the sockets accepted from it.
// -ENOENT: the kernel has no such algorithm; -EPERM: not in net.ipv4.tcp_allowed_congestion_control
// and no CAP_NET_ADMIN.
constexpr std::size_t kCongestionNameMax = 16;  // the kernel's TCP_CA_NAME_MAX, with the NUL
int setCongestionControl(int fd, const std::string& algorithm) noexcept;
// The socket's congestion control, or an empty string when it cannot be read.
std::string congestionControlOf(int fd);

// The socket's TCP state (TCP_INFO's tcpi_state: TCP_ESTABLISHED, TCP_CLOSE...), or -1.
int tcpStateOf(int fd) noexcept;
// A socket in `state` was closed by a reset (or another error nobody has read yet), not by an
// orderly close. TCP_CLOSE alone does not tell: a socket that sent its FIN first also reads
// TCP_CLOSE once the peer's FIN arrives (the kernel hands TIME_WAIT to a mini socket), with the
// peer's last bytes possibly still unread. Takes the pending error (SO_ERROR) when it answers
// true: the caller closes the connection on it.
bool closedByReset(int fd, int state) noexcept;

// Bytes received and not yet read (SIOCINQ).
int bytesWaiting(int fd) noexcept;
// Bytes written and not yet acknowledged by the peer (SIOCOUTQ).
int bytesUnsent(int fd) noexcept;

}  // namespace splicegate
