#pragma once
// An upstream that never answers a SYN, on loopback: a listener whose accept queue is full (the
// kernel then drops new SYNs), for the tests of connect timeouts. `silent` is false where this
// kernel answers anyway (`why` says so): such a test skips.
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/UniqueFd.h"
#include "tests/support/Sockets.h"

namespace splicegate::test {

struct SilentUpstream {
    uint16_t port = 0;
    UniqueFd listener;
    std::vector<UniqueFd> fillers;
    bool silent = false;
    std::string why;

    SilentUpstream() : listener(listenTcp(port, false, /*backlog=*/0)) {
        for (int i = 0; i < 4; ++i) {
            int error = 0;
            UniqueFd fd = connectTcp(port, error, milliseconds(200));
            if (fd) fillers.push_back(std::move(fd));
        }
        int error = 0;
        UniqueFd probe = connectTcp(port, error, milliseconds(300));
        silent = !probe && error == ETIMEDOUT;
        if (!silent)
            why = std::string("this kernel does not drop SYNs to a full accept queue (connect: ") +
                  (probe ? "succeeded" : std::strerror(error)) +
                  "); cannot make a silent upstream on loopback";
    }
};

}  // namespace splicegate::test
