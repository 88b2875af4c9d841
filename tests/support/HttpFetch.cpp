#include "tests/support/HttpFetch.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>

#include "common/Error.h"
#include "tests/support/Sockets.h"

namespace splicegate::test {

namespace {

// Generous: a reply that is late but arrives is the server's answer, not a failure to report.
constexpr milliseconds kExchangeTimeout(8000);

}  // namespace

HttpReply httpExchange(unsigned port, const std::string& request, bool ipv6) {
    HttpReply reply;
    const Deadline deadline = deadlineIn(kExchangeTimeout);
    int error = 0;
    UniqueFd fd = connectTcp(static_cast<uint16_t>(port), error, kExchangeTimeout, ipv6);
    if (!fd) {
        reply.error = "connect: " + errnoText(error);
        return reply;
    }
    if (!sendAll(fd.get(), request.data(), request.size(), deadline, error)) {
        reply.error = "send: " + errnoText(error);
        return reply;
    }
    std::string raw;
    char buffer[16384];
    for (;;) {
        ssize_t n = ::recv(fd.get(), buffer, sizeof buffer, 0);
        if (n > 0) {
            raw.append(buffer, static_cast<std::size_t>(n));
            continue;
        }
        if (n == 0) break;
        if ((errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) && Clock::now() < deadline)
            continue;
        // A server that answers before reading the whole request (e.g. 431 to an oversized
        // header) resets when it closes; what it sent before the reset is its answer.
        if (errno == ECONNRESET && !raw.empty()) break;
        reply.error = "recv: " + errnoText(errno);
        return reply;
    }
    const auto split = raw.find("\r\n\r\n");
    if (split == std::string::npos || raw.compare(0, 5, "HTTP/") != 0) {
        reply.error = "malformed response: " + raw.substr(0, 200);
        return reply;
    }
    reply.headers = raw.substr(0, split);
    reply.status = std::atoi(raw.c_str() + raw.find(' ') + 1);
    reply.body = raw.substr(split + 4);
    return reply;
}

HttpReply httpGet(unsigned port, const std::string& target, bool ipv6) {
    const std::string host = loopback(static_cast<uint16_t>(port), ipv6);
    return httpExchange(port, "GET " + target + " HTTP/1.0\r\nHost: " + host + "\r\n\r\n", ipv6);
}

}  // namespace splicegate::test
