#pragma once
// A veth pair for XDP integration tests: the host end in our network namespace, the peer in a
// fresh namespace, with addresses from 198.19.0.0/16 (inside 198.18.0.0/15) and 2001:2::/48
// (both reserved for benchmarking). Clients run "inside" through sockets made in the namespace.
// - runCommand(): runs a program (ip, ...) to completion, stdout and stderr captured together.
// - VethNamespace: creates namespace and pair in the constructor, deletes them in the destructor
//   (and on a failed construction); each instance leases its own /29 for as long as it lives, so
//   parallel test processes never share a subnet. sweepLeftovers() deletes namespaces and links
//   (names sgxdp-PID-*, sgx?PID_*) of test processes that were killed before cleaning up.
// Names: namespace sgxdp-PID-N, host end sgxhPID_N, peer sgxpPID_N (IFNAMSIZ-safe).
// Thread affinity: none (each instance is independent). Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN).
// Error contract: setup failures throw std::runtime_error / std::system_error naming the command;
// connect() reports in its result.
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/UniqueFd.h"

namespace splicegate::xdptest {

struct CommandResult {
    int status = -1;     // exit code, or -1 if it did not exit normally
    std::string output;  // stdout and stderr
};

CommandResult runCommand(const std::vector<std::string>& args);
// runCommand, throwing std::runtime_error (with the output) unless it exits 0.
void mustRun(const std::vector<std::string>& args);

// A small number unique within this process (for interface and namespace names).
unsigned nextTestIndex();

class VethNamespace {
  public:
    VethNamespace();
    VethNamespace(const VethNamespace&) = delete;
    VethNamespace& operator=(const VethNamespace&) = delete;
    ~VethNamespace();

    static void sweepLeftovers();

    const std::string& name() const { return ns_; }
    const std::string& hostInterface() const { return host_; }
    unsigned hostIndex() const;
    const std::string& hostAddress() const { return hostAddress_; }      // x.x.x.1 on the host end
    const std::string& hostAddress6() const { return hostAddress6_; }    // 2001:2:0:N::1
    const std::string& clientAddress() const { return clientAddress_; }  // x.x.x.2 inside
    const std::string& otherClientAddress() const { return otherClientAddress_; }  // x.x.x.3
    const std::string& clientAddress6() const { return clientAddress6_; }          // 2001:2:0:N::2

    // A TCP socket made inside the namespace (a socket keeps the namespace it was made in).
    UniqueFd socketInside(int family) const;
    // Connects from `source` (inside) to destination:port within `timeout`. The connected,
    // blocking socket (2 s I/O timeouts), or an invalid fd and `error` (ETIMEDOUT when the SYN
    // went unanswered, as when the edge filter drops it).
    UniqueFd connect(const std::string& source, const std::string& destination, std::uint16_t port,
                     std::chrono::milliseconds timeout, int& error) const;

  private:
    class SubnetLease {
      public:
        explicit SubnetLease(unsigned hint);
        unsigned subnet() const { return subnet_; }

      private:
        unsigned subnet_ = 0;
        UniqueFd claim_;
    };

    explicit VethNamespace(unsigned index);
    void cleanUp() noexcept;

    SubnetLease lease_;
    std::string ns_, host_, peer_;
    std::string hostAddress_, clientAddress_, otherClientAddress_;
    std::string hostAddress6_, clientAddress6_;
    bool created_ = false;
};

}  // namespace splicegate::xdptest
