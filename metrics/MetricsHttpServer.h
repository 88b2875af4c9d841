#pragma once
// A minimal HTTP/1.x server for one page, used by MetricsExposer where prometheus-cpp's civetweb
// cannot listen: Debian 12's libcivetweb1 is built without IPv6, so "[v6]:port" is served here.
// It answers "GET <path>" with 200 and the page, other paths with 404, other methods with 405,
// anything unparsable with 400, always "Connection: close".
//
// One thread serves one connection at a time; a request has kRequestTimeout to arrive (at most
// kMaxRequestBytes of request line and headers) and its response as long to be sent, so a stalled
// or hostile peer delays other scrapes by at most that much and uses bounded memory.
// Thread affinity: construct and destroy from one thread; `render` runs on the server thread.
// Error contract: the constructor throws std::system_error naming the address when it cannot
// listen; the serving thread never throws (a failed `render` gets a 500).
#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "common/SocketAddress.h"
#include "common/UniqueFd.h"

namespace splicegate {

class MetricsHttpServer {
  public:
    static constexpr std::size_t kMaxRequestBytes = 8192;
    static constexpr std::chrono::milliseconds kRequestTimeout{5000};

    MetricsHttpServer(const SocketAddress& address, std::string path,
                      std::function<std::string()> render);
    ~MetricsHttpServer();
    MetricsHttpServer(const MetricsHttpServer&) = delete;
    MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

    unsigned port() const noexcept { return port_; }

  private:
    void run() noexcept;
    void serve(int fd) noexcept;
    bool waitFor(int fd, short events, std::chrono::steady_clock::time_point deadline) noexcept;

    std::string path_;
    std::function<std::string()> render_;
    UniqueFd listener_;
    UniqueFd stop_;  // eventfd, written by the destructor
    unsigned port_ = 0;
    std::thread thread_;
};

}  // namespace splicegate
