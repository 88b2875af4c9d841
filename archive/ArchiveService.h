#pragma once
// The service around the Archiver: each pass lists the audit directory, ships every sealed
// segment not yet verified (`parallel` at a time), and measures what is left, for the metrics
// (splicegate_archive_*) and the log. A pass never deletes anything: the relay's retention does,
// and only what the state directory says is verified.
// Thread affinity: runPass() from one thread at a time (it starts and joins its own workers);
// the metrics may be scraped from any thread. Error contract: a segment's failure is logged and
// counted, never thrown; an audit directory that cannot be listed throws std::system_error.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "archive/Archiver.h"

namespace prometheus {
class Registry;
}

namespace splicegate::archive {

class ArchiveMetrics {
  public:
    ArchiveMetrics();
    ~ArchiveMetrics();
    void counted(ShipOutcome::Kind kind, std::uint64_t bytes, double seconds);
    void backlog(std::uint64_t bytes, double oldestSeconds, std::uint64_t auditDiskSize);
    // Serves `client`'s HTTP connections opened and requests sent, read at each scrape (the
    // client keeps the counts); before the metrics are first scraped. `client` must outlive this.
    void countHttp(const s3::S3Client& client) { client_ = &client; }
    std::string exposition() const;  // the Prometheus text format

  private:
    struct Families;
    std::shared_ptr<prometheus::Registry> registry_;
    std::unique_ptr<Families> families_;
    const s3::S3Client* client_ = nullptr;
};

struct PassResult {
    unsigned shipped = 0, failed = 0, conflicts = 0, waiting = 0;
    std::uint64_t backlogBytes = 0;  // sealed or unsealed segments not verified, after the pass
    double oldestSeconds = 0;        // age of the oldest of them (its index file's last change)
    std::uint64_t auditDiskBytes = 0;  // size of the audit directory's file system
};

class ArchiveService {
  public:
    ArchiveService(Archiver& archiver, UploadStateStore& states, std::string auditDir,
                   unsigned parallel, ArchiveMetrics* metrics);

    PassResult runPass(std::int64_t nowNs);

  private:
    // Whether the segment is verified in the bucket now.
    bool shipOne(const audit::SegmentFiles& files, std::int64_t nowNs, PassResult& result);

    Archiver& archiver_;
    UploadStateStore& states_;
    std::string auditDir_;
    unsigned parallel_;
    ArchiveMetrics* metrics_;
};

}  // namespace splicegate::archive
