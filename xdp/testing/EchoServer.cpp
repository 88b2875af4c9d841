#include "xdp/testing/EchoServer.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <stdexcept>
#include <vector>

#include "common/Error.h"

namespace splicegate::xdptest {

EchoServer::EchoServer(const std::string& address) : address_(address) {
    sockaddr_storage bound{};
    socklen_t length = 0;
    if (address.find(':') == std::string::npos) {
        auto* v4 = reinterpret_cast<sockaddr_in*>(&bound);
        v4->sin_family = AF_INET;
        if (inet_pton(AF_INET, address.c_str(), &v4->sin_addr) != 1)
            throw std::invalid_argument("EchoServer: bad address " + address);
        length = sizeof(sockaddr_in);
    } else {
        auto* v6 = reinterpret_cast<sockaddr_in6*>(&bound);
        v6->sin6_family = AF_INET6;
        if (inet_pton(AF_INET6, address.c_str(), &v6->sin6_addr) != 1)
            throw std::invalid_argument("EchoServer: bad address " + address);
        length = sizeof(sockaddr_in6);
    }
    listener_.reset(checkSys(socket(bound.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0), "socket"));
    checkSys(bind(listener_.get(), reinterpret_cast<sockaddr*>(&bound), length), "bind " + address);
    checkSys(listen(listener_.get(), 64), "listen");
    checkSys(getsockname(listener_.get(), reinterpret_cast<sockaddr*>(&bound), &length),
             "getsockname");
    port_ = ntohs(bound.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&bound)->sin_port
                                             : reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
    int pipeFds[2];
    checkSys(pipe2(pipeFds, O_CLOEXEC), "pipe2");
    stopRead_.reset(pipeFds[0]);
    stopWrite_.reset(pipeFds[1]);
    thread_ = std::thread([this] { loop(); });
}

EchoServer::~EchoServer() {
    if (write(stopWrite_.get(), "x", 1) < 0) {
        // The thread still ends: poll() wakes at least once a second and sees the pipe.
    }
    thread_.join();
}

std::string EchoServer::endpoint() const {
    const std::string port = std::to_string(port_);
    return address_.find(':') == std::string::npos ? address_ + ":" + port
                                                   : "[" + address_ + "]:" + port;
}

void EchoServer::loop() {
    std::vector<UniqueFd> connections;
    std::vector<char> buffer(65536);
    for (;;) {
        std::vector<pollfd> fds = {{stopRead_.get(), POLLIN, 0}, {listener_.get(), POLLIN, 0}};
        for (const auto& fd : connections) fds.push_back({fd.get(), POLLIN, 0});
        if (poll(fds.data(), fds.size(), 1000) < 0 && errno != EINTR) return;
        if (fds[0].revents) return;
        if (fds[1].revents & POLLIN) {
            int fd = accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
            if (fd >= 0) connections.emplace_back(fd);
        }
        for (std::size_t i = 2; i < fds.size(); ++i) {
            if (!fds[i].revents) continue;
            ssize_t n = read(fds[i].fd, buffer.data(), buffer.size());
            if (n <= 0) {
                connections[i - 2].reset();
                continue;
            }
            for (ssize_t sent = 0; sent < n;) {
                ssize_t m =
                    write(fds[i].fd, buffer.data() + sent, static_cast<std::size_t>(n - sent));
                if (m <= 0) break;
                sent += m;
            }
        }
        std::erase_if(connections, [](const UniqueFd& fd) { return !fd.valid(); });
    }
}

bool echoes(int fd, std::size_t size) {
    std::vector<char> out(size), in(size);
    for (std::size_t i = 0; i < size; ++i) out[i] = static_cast<char>(i * 131 + i / 251);
    std::thread writer([&] {
        for (std::size_t sent = 0; sent < size;) {
            ssize_t n = write(fd, out.data() + sent, size - sent);
            if (n <= 0) return;
            sent += static_cast<std::size_t>(n);
        }
    });
    std::size_t received = 0;
    while (received < size) {
        ssize_t n = read(fd, in.data() + received, size - received);
        if (n <= 0) break;
        received += static_cast<std::size_t>(n);
    }
    writer.join();
    return received == size && in == out;
}

}  // namespace splicegate::xdptest
