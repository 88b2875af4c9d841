#include "relay/Handoff.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "common/Error.h"
#include "common/Log.h"

namespace splicegate {
namespace {
// A hand-off message is small: a kind and an address.
constexpr std::size_t kMaxMessageBytes = 4096;
// The old process sends everything at once; a gap this long means it is gone.
constexpr std::chrono::milliseconds kSocketsTimeout{10000};
}  // namespace

int HandoffChannel::send(const handoff::Message& message, int attached) {
    std::string bytes;
    if (!message.SerializeToString(&bytes)) return -EINVAL;
    iovec iov{bytes.data(), bytes.size()};
    msghdr header{};
    header.msg_iov = &iov;
    header.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    if (attached >= 0) {
        header.msg_control = control;
        header.msg_controllen = sizeof control;
        cmsghdr* cmsg = CMSG_FIRSTHDR(&header);
        cmsg->cmsg_level = SOL_SOCKET;
        cmsg->cmsg_type = SCM_RIGHTS;
        cmsg->cmsg_len = CMSG_LEN(sizeof(int));
        std::memcpy(CMSG_DATA(cmsg), &attached, sizeof(int));
    }
    for (;;) {
        if (::sendmsg(fd_.get(), &header, MSG_NOSIGNAL) >= 0) return 0;
        if (errno != EINTR) return -errno;
    }
}

std::optional<HandoffChannel::Received> HandoffChannel::receive(std::chrono::milliseconds timeout,
                                                                std::string& problem) {
    pollfd ready{fd_.get(), POLLIN, 0};
    int polled = 0;
    do {
        polled = ::poll(&ready, 1, static_cast<int>(timeout.count()));
    } while (polled < 0 && errno == EINTR);
    if (polled < 0) {
        problem = "poll: " + errnoText(errno);
        return std::nullopt;
    }
    if (polled == 0) {
        problem = "no answer within " + std::to_string(timeout.count()) + " ms";
        return std::nullopt;
    }
    char buffer[kMaxMessageBytes];
    iovec iov{buffer, sizeof buffer};
    msghdr header{};
    header.msg_iov = &iov;
    header.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)] = {};
    header.msg_control = control;
    header.msg_controllen = sizeof control;
    ssize_t n = 0;
    do {
        n = ::recvmsg(fd_.get(), &header, MSG_CMSG_CLOEXEC);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
        problem = "recvmsg: " + errnoText(errno);
        return std::nullopt;
    }
    Received received;
    for (cmsghdr* cmsg = CMSG_FIRSTHDR(&header); cmsg != nullptr;
         cmsg = CMSG_NXTHDR(&header, cmsg)) {
        if (cmsg->cmsg_level != SOL_SOCKET || cmsg->cmsg_type != SCM_RIGHTS) continue;
        const std::size_t count = (cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (std::size_t i = 0; i < count; ++i) {
            int fd = -1;
            std::memcpy(&fd, CMSG_DATA(cmsg) + i * sizeof(int), sizeof(int));
            // One fd per message; any extra is closed rather than leaked.
            if (!received.attached) received.attached.reset(fd);
            else ::close(fd);
        }
    }
    if (n == 0) {
        problem = "closed";
        return std::nullopt;
    }
    if ((header.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0 ||
        !received.message.ParseFromArray(buffer, static_cast<int>(n))) {
        problem = "a hand-off message that does not parse";
        return std::nullopt;
    }
    return received;
}

std::unique_ptr<InheritedSockets> InheritedSockets::fromEnvironment() {
    const char* value = std::getenv(kUpgradeFdVariable);
    if (value == nullptr) return nullptr;
    char* end = nullptr;
    long fd = std::strtol(value, &end, 10);
    const std::string text = value;
    ::unsetenv(kUpgradeFdVariable);
    if (end == value || *end != '\0' || fd < 3 || fd > 1 << 20)
        throw std::runtime_error(std::string(kUpgradeFdVariable) + "=" + text +
                                 ": not a file descriptor");
    // Not passed on to anything this process starts (the next upgrade makes its own pair).
    checkSys(::fcntl(static_cast<int>(fd), F_SETFD, FD_CLOEXEC),
             std::string(kUpgradeFdVariable) + "=" + text);
    std::unique_ptr<InheritedSockets> inherited(
        new InheritedSockets(UniqueFd(static_cast<int>(fd))));
    std::size_t received = 0;
    for (;;) {
        std::string problem;
        auto next = inherited->channel_.receive(kSocketsTimeout, problem);
        if (!next)
            throw std::runtime_error("upgrade: receiving the running daemon's sockets: " + problem);
        if (next->message.has_end()) break;
        if (next->message.has_audit() && next->attached) {
            inherited->audit_ = Audit{next->message.audit(), std::move(next->attached)};
            continue;
        }
        if (next->message.has_maintenance()) {
            inherited->maintenance_ = next->message.maintenance();
            continue;
        }
        if (next->message.has_xdp() && next->attached) {
            inherited->xdp_ = Xdp{next->message.xdp(), std::move(next->attached)};
            continue;
        }
        if (!next->message.has_socket() || !next->attached) continue;
        const auto& socket = next->message.socket();
        inherited->sockets_.emplace(std::make_pair(static_cast<int>(socket.kind()), socket.address()),
                                    std::move(next->attached));
        ++received;
    }
    logInfo("upgrade: took over ", received, " listening sockets from the running daemon");
    return inherited;
}

UniqueFd InheritedSockets::take(handoff::SocketKind kind, const std::string& address) {
    auto found = sockets_.find({static_cast<int>(kind), address});
    if (found == sockets_.end()) return UniqueFd();
    UniqueFd fd = std::move(found->second);
    sockets_.erase(found);
    return fd;
}

std::vector<UniqueFd> InheritedSockets::takeListeners(const SocketAddress& address) {
    std::vector<UniqueFd> taken;
    while (auto fd = take(handoff::SOCKET_LISTENER, address.toString())) taken.push_back(std::move(fd));
    return taken;
}

UniqueFd InheritedSockets::takeAdmin(const std::string& path) {
    return take(handoff::SOCKET_ADMIN, path);
}

UniqueFd InheritedSockets::takeMetrics(const std::string& address) {
    return take(handoff::SOCKET_METRICS, address);
}

void InheritedSockets::ready() {
    if (answered_) return;
    answered_ = true;
    handoff::Message message;
    message.mutable_ready()->set_pid(static_cast<std::uint32_t>(::getpid()));
    if (int rc = channel_.send(message); rc < 0)
        logWarn("upgrade: telling the previous daemon this one is ready: ", errnoText(-rc));
}

void InheritedSockets::failed(const std::string& reason) {
    if (answered_) return;
    answered_ = true;
    handoff::Message message;
    message.mutable_failed()->set_reason(reason);
    channel_.send(message);  // it learns of the exit anyway when the pair closes
}

}  // namespace splicegate
