#pragma once
// One plain HTTP/1.0 exchange with a loopback port, read to EOF: all the tests of the metrics
// page and of Prometheus' API need, without linking an HTTP client library.
// Thread affinity: none (no shared state).
// Error contract: never throws; a failed connect, send or receive, a timeout or an answer that is
// not HTTP is reported in HttpReply::error.
#include <string>

namespace splicegate::test {

struct HttpReply {
    int status = 0;
    std::string headers;  // status line and headers
    std::string body;
    std::string error;  // empty on success
};

// Sends `request` as it is to 127.0.0.1:port (::1 with `ipv6`) and reads the answer to EOF; the
// whole exchange is bounded. Takes the request whole so tests can send malformed ones.
// `port` is unsigned because MetricsExposer::port() is.
HttpReply httpExchange(unsigned port, const std::string& request, bool ipv6 = false);

// GET `target` (path and query) through httpExchange().
HttpReply httpGet(unsigned port, const std::string& target, bool ipv6 = false);

}  // namespace splicegate::test
