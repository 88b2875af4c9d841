#include "relay/SocketOptions.h"

#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace splicegate {
namespace {
template <typename Value>
int setOption(int fd, int level, int name, const Value& value) noexcept {
    return ::setsockopt(fd, level, name, &value, sizeof value) < 0 ? -errno : 0;
}

int queuedBytes(int fd, unsigned long request) noexcept {
    int bytes = 0;
    return ::ioctl(fd, request, &bytes) < 0 ? -errno : bytes;
}
}  // namespace

int setNoDelay(int fd) noexcept {
    return setOption(fd, IPPROTO_TCP, TCP_NODELAY, 1);
}

int armReset(int fd) noexcept {
    return setOption(fd, SOL_SOCKET, SO_LINGER, linger{1, 0});
}

int enterDelayedAckMode(int fd) noexcept {
    return setOption(fd, IPPROTO_TCP, TCP_QUICKACK, 0);
}

int setCongestionControl(int fd, const std::string& algorithm) noexcept {
    if (algorithm.empty()) return 0;
    auto length = static_cast<socklen_t>(algorithm.size());
    return ::setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, algorithm.data(), length) < 0 ? -errno : 0;
}

std::string congestionControlOf(int fd) {
    char name[kCongestionNameMax] = {};
    socklen_t length = sizeof name;
    if (::getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &length) != 0) return {};
    return std::string(name, ::strnlen(name, length));
}

int tcpStateOf(int fd) noexcept {
    tcp_info info{};
    socklen_t length = sizeof info;
    return ::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &length) == 0 ? info.tcpi_state : -1;
}

bool closedByReset(int fd, int state) noexcept {
    if (state != TCP_CLOSE) return false;
    int error = 0;
    socklen_t length = sizeof error;
    return ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 && error != 0;
}

int bytesWaiting(int fd) noexcept {
    return queuedBytes(fd, SIOCINQ);
}

int bytesUnsent(int fd) noexcept {
    return queuedBytes(fd, SIOCOUTQ);
}

}  // namespace splicegate
