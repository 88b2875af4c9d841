// splicegate-logwriter-probe: the direct audit writer (audit/DirectDataWriter.h) alone, on one
// thread and one io_uring, fed from memory, against the audit directory's filesystem. Two uses:
//   --mode stream   appended as fast as the writer takes it, a commit every --commit-ms (batch
//                   mode's shape): sustained GB/s and process CPU-s per GB;
//   --mode commit   append --commit-bytes, commit, wait until durable, again (strict mode's group
//                   commit with that many bytes per commit): commits/s and GB/s.
// --sync picks how data becomes durable: `fdatasync` (plain writes, then an fdatasync of the
// file) or `dsync` (RWF_DSYNC on every write, no fdatasync). Files roll every --file-bytes and
// are unlinked as soon as the next one starts, so the disk never holds more than two.
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "audit/DirectDataWriter.h"
#include "common/Ring.h"
#include "tools/bench/BenchUtil.h"

namespace splicegate::bench {
namespace {

double processCpuSeconds() {
    rusage usage{};
    ::getrusage(RUSAGE_SELF, &usage);  // io-wq workers are threads of this process
    auto seconds = [](const timeval& t) {
        return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
    };
    return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

class Probe {
  public:
    Probe(const std::string& dir, const audit::DirectLogOptions& options, std::uint64_t fileBytes,
          bool recycle)
        : dir_(dir), fileBytes_(fileBytes), recycle_(recycle), ring_(256, 2, 2) {
        writer_ = std::make_unique<audit::DirectDataWriter>(ring_, ring_.registration(), options);
        nextFile();
    }
    ~Probe() {
        writer_.reset();
        for (const auto& path : live_) ::unlink(path.c_str());
    }

    // Appends up to `length` bytes, rolling files; returns what went in (0: buffer full).
    std::size_t append(const std::byte* data, std::size_t length) {
        if (fileOffset_ >= fileBytes_) nextFile();
        auto appended = writer_->append(data, length);
        if (appended.bytes < 0) throwErrno(static_cast<int>(-appended.bytes), "append");
        fileOffset_ += static_cast<std::uint64_t>(appended.bytes);
        return static_cast<std::size_t>(appended.bytes);
    }
    // Submits, waits for one completion at most `waitMs`, routes what came back.
    void turn(unsigned waitMs) {
        if (waitMs > 0)
            ring_.submitAndWait(waitMs);
        else
            ring_.submit();
        ring_.drainCompletions([this](const io_uring_cqe& cqe) {
            writer_->onCompletion(CompletionTag::decode(cqe.user_data), cqe.res);
        });
        auto failures = writer_->takeFailures();
        if (!failures.empty()) throwErrno(-failures.front().error, "audit write in " + dir_);
    }
    void commitAndWait() {
        writer_->commit();
        while (writer_->durableLsn() < writer_->appendedLsn()) turn(100);
    }
    audit::DirectDataWriter& writer() { return *writer_; }

  private:
    // A recycled file is the oldest of the last two, renamed: its blocks are written already, so
    // writes into it convert no unwritten extents, and nothing is freed (or discarded).
    void nextFile() {
        auto path =
            dir_ + "/logwriter-probe-" + std::to_string(::getpid()) + "-" + std::to_string(files_);
        int flags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC;
        if (recycle_ && live_.size() >= 2) {
            if (::rename(live_.front().c_str(), path.c_str()) != 0)
                throwErrno(errno, "rename " + live_.front() + " to " + path);
            live_.pop_front();
            flags = O_WRONLY | O_CLOEXEC;
        }
        UniqueFd fd(::open(path.c_str(), flags, 0600));
        if (!fd) throwErrno(errno, "open " + path);
        int rc = writer_->startFile(fd.get(), files_++);
        if (rc < 0) throwErrno(-rc, "startFile " + path);
        // The writer keeps its own fd until the file is written and synced.
        if (!recycle_ && !live_.empty()) {
            ::unlink(live_.back().c_str());
            live_.pop_back();
        }
        live_.push_back(path);
        fileOffset_ = 0;
    }

    std::string dir_;
    std::uint64_t fileBytes_;
    const bool recycle_;
    Ring ring_;
    std::unique_ptr<audit::DirectDataWriter> writer_;
    std::deque<std::string> live_;
    std::uint64_t files_ = 0;
    std::uint64_t fileOffset_ = 0;
};

}  // namespace

int runLogWriterProbe(int argc, char** argv) {
    Options opts("logwriter-probe",
                 "The direct audit writer alone: sustained stream (batch) or commit loop "
                 "(strict),\nwith fdatasync or RWF_DSYNC. Its files are removed.",
                 {
                     {"dir", "DIR", "", "directory on the audit log's filesystem"},
                     {"mode", "MODE", "stream", "stream | commit"},
                     {"sync", "HOW", "fdatasync", "fdatasync | dsync"},
                     {"seconds", "S", "10", "how long to run"},
                     {"commit-bytes", "BYTES", "262144", "commit mode: bytes per commit"},
                     {"commit-ms", "MS", "50", "stream mode: a commit this often"},
                     {"buffer-bytes", "BYTES", "67108864", "log buffer (--audit-buffer-bytes)"},
                     {"write-bytes", "BYTES", "2097152", "bytes per buffer and full write"},
                     {"inflight", "N", "8", "writes in flight at most"},
                     {"prealloc", "BYTES", "0", "fallocate(KEEP_SIZE) per file"},
                     {"file-bytes", "BYTES", "1073741824", "roll to a new file after this"},
                     {"recycle", "yes|no", "no",
                      "roll into the file before last, renamed, instead of a new one"},
                 },
                 argc, argv, 1);
    audit::DirectLogOptions options;
    options.bufferBytes = static_cast<std::size_t>(opts.integer("buffer-bytes", 16384, 1L << 34));
    options.writeBytes = static_cast<std::size_t>(opts.integer("write-bytes", 4096, 1L << 30));
    options.maxWritesInFlight = static_cast<unsigned>(opts.integer("inflight", 1, 1024));
    options.preallocateBytes = static_cast<std::uint64_t>(opts.integer("prealloc", 0, 1L << 40));
    const auto sync = opts.str("sync");
    if (sync != "fdatasync" && sync != "dsync") throw UsageError("--sync: fdatasync or dsync");
    options.dsyncWrites = sync == "dsync";
    const auto mode = opts.str("mode");
    if (mode != "stream" && mode != "commit") throw UsageError("--mode: stream or commit");
    const double seconds = opts.number("seconds", 0.1, 3600);
    const auto commitBytes = static_cast<std::size_t>(opts.integer("commit-bytes", 1, 1L << 30));
    const auto commitMs = opts.integer("commit-ms", 1, 60000);
    const auto fileBytes =
        static_cast<std::uint64_t>(opts.integer("file-bytes", 1 << 20, 1L << 40));

    installSignalHandlers();
    const auto recycle = opts.str("recycle");
    if (recycle != "yes" && recycle != "no") throw UsageError("--recycle: yes or no");
    Probe probe(opts.str("dir"), options, fileBytes, recycle == "yes");
    std::vector<std::byte> source(std::size_t{1} << 20);
    for (std::size_t i = 0; i < source.size(); ++i) source[i] = static_cast<std::byte>(i * 131);

    const double cpuStart = processCpuSeconds();
    const auto start = Clock::now();
    const auto end = start + secondsToDuration(seconds);
    std::uint64_t commits = 0;
    if (mode == "stream") {
        auto nextCommit = start;
        while (Clock::now() < end && !stopRequested()) {
            std::size_t in = 0;
            do {
                in = probe.append(source.data(), source.size());
            } while (in == source.size());
            if (Clock::now() >= nextCommit) {
                probe.writer().commit();
                ++commits;
                nextCommit += std::chrono::milliseconds(commitMs);
            }
            probe.turn(in == 0 ? 10 : 0);
        }
        probe.commitAndWait();
    } else {
        while (Clock::now() < end && !stopRequested()) {
            std::size_t left = commitBytes;
            while (left > 0) {
                auto in = probe.append(source.data(), std::min(left, source.size()));
                left -= in;
                if (in == 0) probe.turn(10);
            }
            probe.commitAndWait();
            ++commits;
        }
    }
    const double elapsed = secondsBetween(start, Clock::now());
    const double cpu = processCpuSeconds() - cpuStart;
    const auto& stats = probe.writer().stats();
    const double gigabytes = static_cast<double>(probe.writer().durableLsn()) / 1e9;

    ResultLine line("logwriter");
    line.add("mode", mode).add("sync", sync).addFixed("seconds", elapsed, 2);
    line.addFixed("GBps", gigabytes / elapsed, 3).addFixed("gbps", gigabytes * 8 / elapsed, 2);
    line.addFixed("cpu_s_per_GB", gigabytes > 0 ? cpu / gigabytes : 0, 3);
    line.addFixed("commits_per_s", static_cast<double>(commits) / elapsed, 1);
    line.add("writes", stats.writes).add("tail_writes", stats.tailWrites).add("syncs", stats.syncs);
    line.add("fixed", probe.writer().fixedBuffers() ? 1 : 0)
        .add("direct", probe.writer().directIo() ? 1 : 0);
    line.print();
    return stopRequested() ? 1 : 0;
}

}  // namespace splicegate::bench

int main(int argc, char** argv) {
    return splicegate::bench::runTool("splicegate-logwriter-probe",
                                      splicegate::bench::runLogWriterProbe, argc, argv);
}
