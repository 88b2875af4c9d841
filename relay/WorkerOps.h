#pragma once
// The worker's own io_uring ops, shared by the parts it is made of (acceptor, upstream
// connector, timers). Below 0x20: the audit tap's and the movers' ops are theirs
// (datapath/AuditTap.h, datapath/Mover.h).
#include <cstdint>

namespace splicegate {

enum class WorkerOp : std::uint8_t {
    Ignore,
    Control,
    Timer,
    Accept,
    Connect,
    ConnectTimeout,
    ClientWatch,  // the client's socket while its upstream connect runs
};

}  // namespace splicegate
