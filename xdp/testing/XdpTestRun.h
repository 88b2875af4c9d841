#pragma once
// Runs an XDP program on one crafted frame with BPF_PROG_TEST_RUN (no interface involved).
// Thread affinity: none. Error contract: results and errors are returned; nothing throws.
#include <cstdint>
#include <string>
#include <vector>

#include "common/UniqueFd.h"

namespace splicegate::xdptest {

struct XdpRunResult {
    int error = 0;                 // 0, or the negative errno of BPF_PROG_TEST_RUN
    std::uint32_t verdict = 0;     // XDP_PASS, XDP_DROP, ...
    std::uint32_t durationNs = 0;  // mean per repetition, measured by the kernel
};

XdpRunResult runXdp(int programFd, const std::vector<std::uint8_t>& frame, int repeat = 1);

// The smallest XDP program (returns XDP_PASS) under `name`; invalid fd and `error` on failure.
UniqueFd loadPassProgram(const char* name, int* error = nullptr);

// True when BPF programs can be loaded here (privilege, kernel config); `why` says otherwise.
bool bpfAvailable(std::string* why);

}  // namespace splicegate::xdptest
