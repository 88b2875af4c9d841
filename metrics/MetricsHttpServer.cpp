#include "metrics/MetricsHttpServer.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdint>
#include <exception>

#include "common/Error.h"
#include "common/Log.h"

namespace splicegate {
namespace {

using Clock = std::chrono::steady_clock;

std::string response(const char* status, const std::string& contentType, const std::string& body) {
    return concat("HTTP/1.1 ", status, "\r\nContent-Type: ", contentType,
                  "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
}

std::string plain(const char* status) {
    return response(status, "text/plain; charset=utf-8", std::string(status) + "\n");
}

}  // namespace

MetricsHttpServer::MetricsHttpServer(const SocketAddress& address, std::string path,
                                     std::function<std::string()> render)
    : path_(std::move(path)), render_(std::move(render)) {
    const std::string where = concat("metrics endpoint: cannot listen on ", address.toString());
    listener_.reset(
        checkSys(::socket(address.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), where));
    int one = 1;
    checkSys(::setsockopt(listener_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one), where);
    if (address.family() == AF_INET6)
        checkSys(::setsockopt(listener_.get(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one), where);
    checkSys(::bind(listener_.get(), address.get(), address.length()), where);
    checkSys(::listen(listener_.get(), 16), where);
    SocketAddress bound;
    *bound.lengthPointer() = sizeof(sockaddr_storage);
    checkSys(::getsockname(listener_.get(), bound.get(), bound.lengthPointer()), where);
    port_ = bound.port();
    stop_.reset(checkSys(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK), "metrics endpoint: eventfd"));
    thread_ = std::thread([this] { run(); });
}

MetricsHttpServer::~MetricsHttpServer() {
    std::uint64_t one = 1;
    ssize_t ignored = ::write(stop_.get(), &one, sizeof one);
    (void)ignored;
    if (thread_.joinable()) thread_.join();
}

bool MetricsHttpServer::waitFor(int fd, short events, Clock::time_point deadline) noexcept {
    for (;;) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        if (left.count() <= 0) return false;
        pollfd fds[2] = {{fd, events, 0}, {stop_.get(), POLLIN, 0}};
        int n = ::poll(fds, 2, static_cast<int>(left.count()));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 || fds[1].revents != 0) return false;
        if (fds[0].revents != 0) return true;
    }
}

void MetricsHttpServer::run() noexcept {
    for (;;) {
        pollfd fds[2] = {{listener_.get(), POLLIN, 0}, {stop_.get(), POLLIN, 0}};
        int n = ::poll(fds, 2, -1);
        if (n < 0) {
            if (errno == EINTR) continue;
            logError("metrics endpoint: poll: ", errnoText(errno), "; no longer serving");
            return;
        }
        if (fds[1].revents != 0) return;
        UniqueFd connection(
            ::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
        if (!connection) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                logWarn("metrics endpoint: accept: ", errnoText(errno));
                pollfd stop = {stop_.get(), POLLIN, 0};
                if (::poll(&stop, 1, 100) > 0) return;  // back off instead of spinning
            }
            continue;
        }
        serve(connection.get());
    }
}

void MetricsHttpServer::serve(int fd) noexcept {
    auto deadline = Clock::now() + kRequestTimeout;
    std::string request;
    std::string reply;
    try {
        char buffer[2048];
        while (request.find("\r\n\r\n") == std::string::npos &&
               request.find("\n\n") == std::string::npos) {
            if (request.size() >= kMaxRequestBytes) {
                reply = plain("431 Request Header Fields Too Large");
                break;
            }
            ssize_t got = ::recv(fd, buffer, sizeof buffer, 0);
            if (got > 0) {
                request.append(buffer, static_cast<std::size_t>(got));
                continue;
            }
            if (got == 0) return;  // peer gave up
            if (errno == EINTR) continue;
            if (errno != EAGAIN || !waitFor(fd, POLLIN, deadline)) return;
        }
        if (reply.empty()) {
            auto lineEnd = request.find_first_of("\r\n");
            auto line = request.substr(0, lineEnd);
            auto firstSpace = line.find(' ');
            auto secondSpace = line.find(' ', firstSpace + 1);
            if (firstSpace == std::string::npos || secondSpace == std::string::npos ||
                line.compare(secondSpace + 1, 5, "HTTP/") != 0) {
                reply = plain("400 Bad Request");
            } else {
                auto method = line.substr(0, firstSpace);
                auto target = line.substr(firstSpace + 1, secondSpace - firstSpace - 1);
                target = target.substr(0, target.find('?'));
                if (method != "GET") {
                    reply = plain("405 Method Not Allowed");
                } else if (target != path_) {
                    reply = plain("404 Not Found");
                } else {
                    try {
                        reply = response("200 OK", "text/plain; version=0.0.4; charset=utf-8",
                                         render_());
                    } catch (const std::exception& e) {
                        logWarn("metrics endpoint: rendering the page failed: ", e.what());
                        reply = plain("500 Internal Server Error");
                    }
                }
            }
        }
    } catch (const std::exception& e) {  // allocation failure
        logWarn("metrics endpoint: ", e.what());
        return;
    }
    std::size_t sent = 0;
    while (sent < reply.size()) {
        ssize_t n = ::send(fd, reply.data() + sent, reply.size() - sent, MSG_NOSIGNAL);
        if (n > 0) {
            sent += static_cast<std::size_t>(n);
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN && waitFor(fd, POLLOUT, deadline)) continue;
        return;
    }
    ::shutdown(fd, SHUT_WR);
}

}  // namespace splicegate
