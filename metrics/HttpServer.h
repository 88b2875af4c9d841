#pragma once
// The metrics listener's HTTP server: one libmicrohttpd daemon for IPv4 and IPv6 alike
// (Debian 12's civetweb is built without IPv6, so prometheus-cpp's Exposer cannot serve
// "[::]:9464"). libmicrohttpd runs an epoll event loop on a small thread pool, so a client that
// connects and sends nothing holds no thread: a scrape is answered while such clients wait for
// their request timeout. HEAD is answered by libmicrohttpd from the GET response (headers only).
//
// Thread affinity: construct and destroy from one thread; `handler` runs on the pool's threads,
// possibly concurrently with itself, and must not block for long.
// Error contract: the constructor throws std::system_error (errno of binding the address) or
// std::runtime_error, naming the address, when it cannot listen. The server never throws.
#include <chrono>
#include <functional>
#include <string>
#include <string_view>

#include "common/SocketAddress.h"

struct MHD_Daemon;

namespace splicegate {

struct HttpResponse {
    unsigned status = 200;
    std::string contentType = "text/plain; charset=utf-8";
    std::string body;
};

// method (GET or HEAD; other methods get 405 before the handler runs) and path (no query).
using HttpHandler = std::function<HttpResponse(std::string_view method, std::string_view path)>;

struct HttpServerLimits {
    unsigned threads = 2;
    unsigned maxConnections = 64;             // beyond it new connections are refused at accept
    std::chrono::seconds requestTimeout{10};  // idle connection (no request byte) is closed
};

class HttpServer {
  public:
    // Serves `handler` on `address` (port 0: a free port, see port()); on `adopted` instead of a
    // new socket when given (an upgrade hands over the listening socket bound to `address`).
    HttpServer(const SocketAddress& address, HttpHandler handler, HttpServerLimits limits = {},
               int adopted = -1);
    ~HttpServer();
    HttpServer(const HttpServer&) = delete;
    HttpServer& operator=(const HttpServer&) = delete;

    unsigned port() const noexcept { return port_; }
    // The listening socket (for an upgrade's hand-off); -1 once stopAccepting() ran.
    int listenFd() const noexcept;
    // Accepts no more connections (the socket goes on in the process it was handed to);
    // requests in progress are answered. Idempotent.
    void stopAccepting() noexcept;

  private:
    HttpHandler handler_;
    MHD_Daemon* daemon_ = nullptr;  // owned: MHD_stop_daemon in the destructor
    unsigned port_ = 0;
    bool quiesced_ = false;
};

}  // namespace splicegate
