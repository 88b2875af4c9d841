#include "xdp/testing/XdpTestRun.h"

#include <bpf/bpf.h>
#include <linux/bpf.h>

#include <string>

#include "common/Error.h"
#include "common/UniqueFd.h"

namespace splicegate::xdptest {

XdpRunResult runXdp(int programFd, const std::vector<std::uint8_t>& frame, int repeat) {
    bpf_test_run_opts options{};
    options.sz = sizeof(options);
    options.data_in = frame.data();
    options.data_size_in = static_cast<std::uint32_t>(frame.size());
    options.repeat = repeat;
    XdpRunResult result;
    result.error = bpf_prog_test_run_opts(programFd, &options);
    result.verdict = options.retval;
    result.durationNs = options.duration;
    return result;
}

UniqueFd loadPassProgram(const char* name, int* error) {
    // r0 = XDP_PASS; exit.
    const bpf_insn program[] = {
        {BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, XDP_PASS},
        {BPF_JMP | BPF_EXIT, 0, 0, 0, 0},
    };
    int fd = bpf_prog_load(BPF_PROG_TYPE_XDP, name, "GPL", program, 2, nullptr);
    if (fd < 0 && error) *error = -fd;
    return UniqueFd(fd < 0 ? -1 : fd);
}

bool bpfAvailable(std::string* why) {
    int error = 0;
    if (!loadPassProgram("sg_probe", &error)) {
        if (why)
            *why = "cannot load an XDP program: " + errnoText(error) +
                   " (needs root, or CAP_BPF + CAP_PERFMON + CAP_NET_ADMIN)";
        return false;
    }
    return true;
}

}  // namespace splicegate::xdptest
