// `fsync-per-chunk`: the audit design group commit replaces (issue 3 "Targets"): one file per
// connection, every chunk written and then fdatasync'd before the next. With a thread per file
// the syncs of different connections overlap as much as the file system lets them; with one
// thread they run one after another, as in one relay worker without group commit. Reports bytes/s
// and fdatasyncs/s; tools/bench/strict.sh compares the relay in strict mode against it with the
// chunk size the relay actually wrote.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "tools/bench/BenchUtil.h"
#include "tools/bench/Commands.h"

namespace splicegate::bench {
namespace {

struct SyncCounter {
    std::atomic<std::uint64_t> syncs{0};
    std::atomic<std::uint64_t> bytes{0};
};

// Round robin over `paths`: append `chunk` bytes to one, fdatasync it, next file; until
// `stop`. False (with a message) on an error.
bool writeAndSyncLoop(const std::vector<std::string>& paths, std::size_t chunk,
                      SyncCounter& counter, const std::atomic<bool>& stop) {
    std::vector<UniqueFd> fds;
    for (const auto& path : paths) {
        fds.emplace_back(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
        if (!fds.back()) {
            std::cerr << "fsync-per-chunk: " << path << ": " << std::strerror(errno) << std::endl;
            return false;
        }
    }
    const std::string payload(chunk, 'a');
    for (std::size_t i = 0; !stop.load(std::memory_order_relaxed); i = (i + 1) % fds.size()) {
        if (::write(fds[i].get(), payload.data(), payload.size()) != static_cast<ssize_t>(chunk) ||
            ::fdatasync(fds[i].get()) != 0) {
            std::cerr << "fsync-per-chunk: " << paths[i] << ": " << std::strerror(errno)
                      << std::endl;
            return false;
        }
        counter.bytes.fetch_add(chunk, std::memory_order_relaxed);
        counter.syncs.fetch_add(1, std::memory_order_relaxed);
    }
    return true;
}

}  // namespace

int runFsyncPerChunk(int argc, char** argv) {
    Options opts("fsync-per-chunk",
                 "One file per simulated connection, each chunk written then fdatasync'd: the\n"
                 "baseline group commit is measured against. Files are removed at the end.",
                 {
                     {"dir", "DIR", "", "directory for the files (the audit log's file system)"},
                     {"files", "N", "64", "simulated connections, one file each"},
                     {"threads", "N", "0",
                      "threads, each taking files in turn (0 = one per file: syncs overlap; "
                      "1 = one after another, as one relay worker would)"},
                     {"chunk", "BYTES", "65536", "bytes written before each fdatasync"},
                     {"duration", "S", "5", "measuring window in seconds"},
                     {"warmup", "S", "0.5", "seconds before the window opens"},
                 },
                 argc, argv, 2);
    const std::string dir = opts.str("dir");
    const auto files = static_cast<std::size_t>(opts.integer("files", 1, 4096));
    auto threadCount = static_cast<std::size_t>(opts.integer("threads", 0, 4096));
    if (threadCount == 0 || threadCount > files) threadCount = files;
    const auto chunk = static_cast<std::size_t>(opts.integer("chunk", 1, 64 << 20));
    const double duration = opts.number("duration", 0.1, 3600);
    const double warmup = opts.number("warmup", 0, 60);

    installSignalHandlers();
    SyncCounter counter;
    std::atomic<bool> stop{false};
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    std::vector<std::string> paths;
    for (std::size_t i = 0; i < files; ++i)
        paths.push_back(dir + "/fsync-per-chunk-" + std::to_string(i));
    for (std::size_t t = 0; t < threadCount; ++t) {
        std::vector<std::string> mine;
        for (std::size_t i = t; i < files; i += threadCount) mine.push_back(paths[i]);
        threads.emplace_back([&, mine] {
            if (!writeAndSyncLoop(mine, chunk, counter, stop)) failures.fetch_add(1);
        });
    }
    sleepUntil(Clock::now() + secondsToDuration(warmup));
    const auto windowStart = Clock::now();
    const std::uint64_t syncsStart = counter.syncs.load();
    const std::uint64_t bytesStart = counter.bytes.load();
    sleepUntil(windowStart + secondsToDuration(duration));
    const std::uint64_t syncs = counter.syncs.load() - syncsStart;
    const std::uint64_t bytes = counter.bytes.load() - bytesStart;
    const double seconds = secondsBetween(windowStart, Clock::now());
    stop.store(true);
    for (auto& t : threads) t.join();
    for (const auto& path : paths) ::unlink(path.c_str());

    const bool ok = failures.load() == 0 && !stopRequested();
    ResultLine line("fsync-per-chunk");
    line.add("files", files)
        .add("threads", threadCount)
        .add("chunk", chunk)
        .addFixed("seconds", seconds, 3);
    line.add("bytes", bytes).addFixed("gbps", static_cast<double>(bytes) * 8 / seconds / 1e9, 3);
    line.addFixed("fsyncs_per_s", static_cast<double>(syncs) / seconds, 1);
    line.add("ok", ok ? 1 : 0);
    line.print();
    return ok ? 0 : 1;
}

}  // namespace splicegate::bench
