#pragma once
// How many connections fit in RLIMIT_NOFILE when every fd a connection can hold is counted:
// its two sockets and, while bytes are in flight, per direction a data pipe and an audit pipe
// (two fds each). Connections beyond that are refused at accept, before a socket(), pipe() or
// audit open can fail with EMFILE (which would otherwise close busy connections with a
// pipe-error, or count as an audit write error).
//
// Pipes are counted one of three ways (PipeFds):
//   PerConnection  --lane splice: every connection may hold its 4 pipes at once;
//   Shared         --lane auto: the pipes are a pool of their own, capped (PipeBudget's pipe
//                  count) at `pipes`; a flow that finds the pool spent stays in (or goes back
//                  to) the buffer lane, so a connection counts its two sockets only and idle
//                  connections are not limited by pipes they do not hold;
//   None           --lane buffer: no connection ever holds a pipe.
#include <cstdint>

namespace splicegate {

enum class PipeFds : std::uint8_t { PerConnection, Shared, None };

struct FdBudget {
    static constexpr std::uint64_t kSocketsPerConnection = 2;
    static constexpr std::uint64_t kPipeFdsPerConnection = 2 /*directions*/ * 2 /*pipes*/ * 2;
    // The process's own: stdio, admin socket and peers' share, metrics listener, logs, BPF.
    static constexpr std::uint64_t kProcessFds = 64;
    // Per worker: ring, eventfd, audit segment files and directory, idle pipes kept for reuse.
    static constexpr std::uint64_t kWorkerFds = 8;
    // PipeFds::Shared: an eighth of the fd limit goes to the pipe pool, at least this many pipes.
    static constexpr std::uint64_t kMinSharedPipes = 16;

    std::uint64_t fdLimit = 0;
    std::uint64_t reserved = 0;       // fds that are not connections'
    std::uint64_t perConnection = 0;  // worst case
    std::uint64_t connections = 0;    // what fits, at most the wanted count
    std::uint64_t pipes = 0;          // PipeFds::Shared: pipes that may exist at once; else 0

    // `idlePipesPerWorker`: pipes a worker keeps for reuse; `routes`: listen addresses, each
    // held twice per worker (the relay's socket and the worker's duplicate); `controlFds`: what
    // the admin socket's peers and the metrics listener's connections may hold at most.
    static FdBudget plan(std::uint64_t fdLimit, std::uint64_t wantedConnections, unsigned workers,
                         std::uint64_t routes, std::uint64_t idlePipesPerWorker,
                         std::uint64_t controlFds = 0,
                         PipeFds pipeFds = PipeFds::PerConnection) noexcept;
};

}  // namespace splicegate
