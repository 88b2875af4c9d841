#include "tests/support/NotifyListener.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <system_error>

namespace splicegate::test {

NotifyListener::NotifyListener(Namespace kind) {
    static std::atomic<unsigned> serial{0};
    name_ = kind == Namespace::Path
                ? dir_.path() + "/notify"
                : "@splicegate-test-" + std::to_string(::getpid()) + "-" + std::to_string(serial++);
    socket_.reset(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!socket_) throw std::system_error(errno, std::system_category(), "socket(AF_UNIX)");
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, name_.data(), name_.size());
    if (kind == Namespace::Abstract) address.sun_path[0] = '\0';
    auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name_.size());
    if (::bind(socket_.get(), reinterpret_cast<const sockaddr*>(&address), length) != 0)
        throw std::system_error(errno, std::system_category(), "bind " + name_);
}

std::optional<std::string> NotifyListener::receive(milliseconds timeout) {
    pollfd ready{socket_.get(), POLLIN, 0};
    if (::poll(&ready, 1, static_cast<int>(timeout.count())) != 1) return std::nullopt;
    char buffer[4096];
    auto size = ::recv(socket_.get(), buffer, sizeof buffer, 0);
    if (size < 0) return std::nullopt;
    return std::string(buffer, static_cast<std::size_t>(size));
}

}  // namespace splicegate::test
