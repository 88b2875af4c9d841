#pragma once
// The worker's own io_uring ops (RingOwner::Worker), shared by the parts it is made of
// (acceptor, upstream connector, timers). The lanes' ops carry owners of their own
// (RingOwner::Mover: datapath/Mover.h, RingOwner::BufferLane: datapath/BufferLaneDriver.h);
// the audit tap's lie at 0x20..0x2f (datapath/AuditTap.h), so these stay below.
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
    PreambleRead,  // the client's socket until its PROXY header and ClientHello are in
};

}  // namespace splicegate
