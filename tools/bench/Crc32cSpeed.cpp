// splicegate-crc32c-bench: how fast each CRC-32C path (audit/Crc32c.h) checksums audit payloads on
// this CPU. The audit checksums every byte it keeps, in pieces of one pipe read (up to 1 MiB)
// spread over the log buffer (64 MiB per worker by default), so the defaults walk a 64 MiB span
// in 1 MiB pieces: mostly out of cache, as in the daemon. One result line per path the CPU has.
#include <chrono>
#include <cstdint>
#include <random>
#include <vector>

#include "audit/Crc32c.h"
#include "tools/bench/BenchUtil.h"

namespace splicegate::bench {
namespace {

using Checksum = std::uint32_t (*)(std::uint32_t, const void*, std::size_t) noexcept;

struct Speed {
    double gigabytesPerSecond;
    std::uint32_t check;  // XOR of the first pass's checksums: equal for all paths
};

// GB/s of `checksum` over `span` in `piece`-sized calls, for about `seconds`.
Speed measure(Checksum checksum, const std::vector<std::uint8_t>& span, std::size_t piece,
              double seconds) {
    const auto start = Clock::now();
    std::uint64_t bytes = 0;
    std::uint32_t check = 0;
    double elapsed = 0;
    for (bool first = true; first || elapsed < seconds; first = false) {
        for (std::size_t offset = 0; offset + piece <= span.size(); offset += piece) {
            // Called through a pointer into another file: the call stays even where its value
            // is not kept.
            auto crc = checksum(0, span.data() + offset, piece);
            if (first) check ^= crc;
            bytes += piece;
        }
        elapsed = secondsBetween(start, Clock::now());
    }
    return {static_cast<double>(bytes) / elapsed / 1e9, check};
}

int runCrc32cSpeed(int argc, char** argv) {
    Options opts("crc32c-bench", "GB/s of each CRC-32C path this CPU has (audit/Crc32c.h).",
                 {
                     {"span", "BYTES", "67108864", "bytes walked (the log buffer's size)"},
                     {"piece", "BYTES", "1048576", "bytes per call (one pipe read)"},
                     {"seconds", "S", "2", "time per path"},
                 },
                 argc, argv, 1);
    const auto span = static_cast<std::size_t>(opts.integer("span", 1, 1L << 34));
    const auto piece = static_cast<std::size_t>(opts.integer("piece", 1, 1L << 34));
    if (piece > span) throw UsageError("--piece must not exceed --span");
    const double seconds = opts.number("seconds", 0.1, 3600);

    std::vector<std::uint8_t> bytes(span);
    std::mt19937_64 random(1);  // no repeats within the span, so the pieces' checksums differ
    for (auto& byte : bytes) byte = static_cast<std::uint8_t>(random());
    struct Path {
        const char* name;
        Checksum checksum;
        bool available;
    };
    const Path paths[] = {
        {"portable", audit::crc32cPortable, true},
        {"crc32-instruction", audit::crc32cHardware, audit::crc32cHardwareAvailable()},
        {"folding", audit::crc32cFolding, audit::crc32cFoldingAvailable()},
    };
    for (const auto& path : paths) {
        if (!path.available) continue;
        ResultLine line("crc32c");
        line.add("path", path.name).add("span", span).add("piece", piece);
        auto speed = measure(path.checksum, bytes, piece, seconds);
        line.addFixed("GBps", speed.gigabytesPerSecond, 2).add("check", speed.check);
        line.print();
    }
    return 0;
}

}  // namespace
}  // namespace splicegate::bench

int main(int argc, char** argv) {
    return splicegate::bench::runTool("splicegate-crc32c-bench", splicegate::bench::runCrc32cSpeed,
                                      argc, argv);
}
