#pragma once
// A TCP echo server for XDP integration tests, bound to one address (any family), served by one
// poll thread; the destructor stops it and closes every connection.
// echoes(): sends a pattern on a connected socket while reading it back, and compares.
// Thread affinity: construct and destroy from one thread. Error contract: the constructor throws
// std::system_error naming the call; echoes() returns false on any shortfall or mismatch.
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>

#include "common/UniqueFd.h"

namespace splicegate::xdptest {

class EchoServer {
  public:
    explicit EchoServer(const std::string& address);  // port chosen by the kernel
    EchoServer(const EchoServer&) = delete;
    EchoServer& operator=(const EchoServer&) = delete;
    ~EchoServer();

    std::uint16_t port() const { return port_; }
    // "a.b.c.d:port" or "[v6]:port".
    std::string endpoint() const;

  private:
    void loop();

    std::string address_;
    UniqueFd listener_;
    UniqueFd stopRead_, stopWrite_;
    std::uint16_t port_ = 0;
    std::thread thread_;
};

bool echoes(int fd, std::size_t size);

}  // namespace splicegate::xdptest
