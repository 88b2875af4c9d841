#include "common/Ring.h"

#include <memory>

#include "common/Error.h"

namespace splicegate {

namespace {
int initRing(unsigned entries, unsigned hints, const RingOptions& options, io_uring& ring) {
    io_uring_params params{};
    params.flags = IORING_SETUP_CQSIZE | IORING_SETUP_CLAMP | hints;
    params.cq_entries = entries * 4;
    if (options.sqpoll) {
        params.flags |= IORING_SETUP_SQPOLL;
        params.sq_thread_idle = options.sqThreadIdleMs;
    }
    return io_uring_queue_init_params(entries, &ring, &params);
}
}  // namespace

Ring::Ring(unsigned entries, unsigned maxBoundWorkers, unsigned maxUnboundWorkers,
           RingOptions options) {
    // One thread submits; completions are reaped by the same thread. The hints go from the most
    // to the least a kernel may know: DEFER_TASKRUN 6.1, SINGLE_ISSUER 6.0; older kernels
    // refuse unknown flags with EINVAL.
    std::vector<unsigned> hints;
    if (options.deferTaskrun && !options.sqpoll)
        hints.push_back(IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN);
    hints.push_back(IORING_SETUP_SINGLE_ISSUER);
    hints.push_back(0);
    int rc = -EINVAL;
    for (unsigned hint : hints) {
        rc = initRing(entries, hint, options, ring_);
        if (rc != -EINVAL) break;
    }
    checkNeg(rc, "io_uring_queue_init(" + std::to_string(entries) + " entries" +
                     (options.sqpoll ? ", SQPOLL" : "") + ")");
    // Each io_uring_enter then names the ring by its index in this thread's table instead of an
    // fd the kernel must look up and reference (kernel 5.18); without it, the fd is used.
    (void)io_uring_register_ring_fd(&ring_);
    unsigned limits[2] = {maxBoundWorkers, maxUnboundWorkers};
    rc = io_uring_register_iowq_max_workers(&ring_, limits);
    if (rc < 0) {
        io_uring_queue_exit(&ring_);
        throwErrno(-rc, "io_uring_register_iowq_max_workers");
    }
}

Ring::~Ring() {
    io_uring_queue_exit(&ring_);
}

int Ring::submit() noexcept {
    return io_uring_submit(&ring_);
}

int Ring::submitAndPeek() noexcept {
    return io_uring_submit_and_get_events(&ring_);
}

int Ring::submitAndWait(unsigned timeoutMs) noexcept {
    __kernel_timespec timeout{};
    timeout.tv_sec = timeoutMs / 1000;
    timeout.tv_nsec = static_cast<long long>(timeoutMs % 1000) * 1000000;
    io_uring_cqe* cqe = nullptr;
    return io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, &timeout, nullptr);
}

const std::vector<RequiredOpcode>& requiredOpcodes() {
    static const std::vector<RequiredOpcode> opcodes = {
        {IORING_OP_ACCEPT, "IORING_OP_ACCEPT (multishot accept, 5.19)"},
        {IORING_OP_CONNECT, "IORING_OP_CONNECT (upstream connect)"},
        {IORING_OP_LINK_TIMEOUT, "IORING_OP_LINK_TIMEOUT (connect timeout)"},
        {IORING_OP_POLL_ADD, "IORING_OP_POLL_ADD (socket readiness)"},
        {IORING_OP_POLL_REMOVE, "IORING_OP_POLL_REMOVE"},
        {IORING_OP_ASYNC_CANCEL, "IORING_OP_ASYNC_CANCEL (5.19 cancel by fd)"},
        {IORING_OP_SPLICE, "IORING_OP_SPLICE (zero-copy moves)"},
        {IORING_OP_TEE, "IORING_OP_TEE (audit copy)"},
        {IORING_OP_TIMEOUT, "IORING_OP_TIMEOUT (timers)"},
        {IORING_OP_READ, "IORING_OP_READ (control events)"},
        {IORING_OP_RECV, "IORING_OP_RECV (multishot recv, 6.0)"},
        {IORING_OP_WRITE, "IORING_OP_WRITE (buffer lane audit writes)"},
        {IORING_OP_FSYNC, "IORING_OP_FSYNC (audit durability)"},
        {IORING_OP_SHUTDOWN, "IORING_OP_SHUTDOWN"},
    };
    return opcodes;
}

std::vector<std::string> missingOpcodes() {
    std::unique_ptr<io_uring_probe, decltype(&io_uring_free_probe)> probe(io_uring_get_probe(),
                                                                          io_uring_free_probe);
    if (!probe) throwErrno(ENOSYS, "io_uring_get_probe (is io_uring disabled by sysctl?)");
    std::vector<std::string> missing;
    for (const auto& required : requiredOpcodes()) {
        if (!io_uring_opcode_supported(probe.get(), required.opcode))
            missing.push_back(required.name);
    }
    return missing;
}

}  // namespace splicegate
