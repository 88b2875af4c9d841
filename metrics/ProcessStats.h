#pragma once
// The standard process_* gauges of a Prometheus client, read from /proc/self at scrape time
// (the names and meanings of the official clients' process collector).
//
// Thread affinity: any thread. Error contract: never throws; a value that cannot be read is
// left out of the snapshot (nullopt) rather than reported as 0.
#include <cstdint>
#include <optional>

namespace splicegate {

struct ProcessStats {
    std::optional<double> startTimeSeconds;  // since the Unix epoch
    std::optional<std::uint64_t> openFds;
    std::optional<std::uint64_t> maxFds;  // RLIMIT_NOFILE's soft limit
    std::optional<std::uint64_t> residentMemoryBytes;
};

// Costs one readdir of /proc/self/fd (one entry per open fd) and three small /proc reads.
ProcessStats readProcessStats() noexcept;

}  // namespace splicegate
