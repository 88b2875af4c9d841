#include "archive/ArchiveService.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <mutex>
#include <thread>

#include "common/Log.h"

namespace splicegate::archive {

struct ArchiveMetrics::Families {
    prometheus::Family<prometheus::Counter>& segments;
    prometheus::Counter& bytes;
    prometheus::Gauge& backlogBytes;
    prometheus::Gauge& backlogOldest;
    prometheus::Gauge& auditDiskSize;
    prometheus::Histogram& uploadSeconds;
};

namespace {

const char* resultLabel(ShipOutcome::Kind kind) {
    switch (kind) {
        case ShipOutcome::Kind::Shipped:
            return "verified";
        case ShipOutcome::Kind::Conflict:
            return "conflict";
        case ShipOutcome::Kind::Failed:
            return "failed";
        case ShipOutcome::Kind::NotReady:
        case ShipOutcome::Kind::AlreadyVerified:
            break;
    }
    return nullptr;
}

}  // namespace

ArchiveMetrics::ArchiveMetrics() : registry_(std::make_shared<prometheus::Registry>()) {
    auto& segments = prometheus::BuildCounter()
                         .Name("splicegate_archive_segments_total")
                         .Help("Segments the archiver finished, by result (verified, failed "
                               "attempts, conflicts)")
                         .Register(*registry_);
    for (const char* result : {"verified", "failed", "conflict"}) segments.Add({{"result", result}});
    auto& bytes = prometheus::BuildCounter()
                      .Name("splicegate_archive_bytes_total")
                      .Help("Bytes put to the bucket")
                      .Register(*registry_)
                      .Add({});
    auto& backlog = prometheus::BuildGauge()
                        .Name("splicegate_archive_backlog_bytes")
                        .Help("Bytes of audit segments not yet verified in the bucket")
                        .Register(*registry_)
                        .Add({});
    auto& oldest = prometheus::BuildGauge()
                       .Name("splicegate_archive_backlog_oldest_seconds")
                       .Help("Age of the oldest audit segment not yet verified in the bucket")
                       .Register(*registry_)
                       .Add({});
    auto& disk = prometheus::BuildGauge()
                     .Name("splicegate_archive_audit_disk_size_bytes")
                     .Help("Size of the file system holding the audit directory (the backlog "
                           "alert compares the backlog with half of it)")
                     .Register(*registry_)
                     .Add({});
    auto& upload = prometheus::BuildHistogram()
                       .Name("splicegate_archive_upload_seconds")
                       .Help("Time to ship and verify one segment")
                       .Register(*registry_)
                       .Add({}, prometheus::Histogram::BucketBoundaries{
                                    0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300});
    families_.reset(new Families{segments, bytes, backlog, oldest, disk, upload});
}

ArchiveMetrics::~ArchiveMetrics() = default;

void ArchiveMetrics::counted(ShipOutcome::Kind kind, std::uint64_t bytes, double seconds) {
    families_->bytes.Increment(static_cast<double>(bytes));
    const char* label = resultLabel(kind);
    if (!label) return;
    families_->segments.Add({{"result", label}}).Increment();
    if (kind == ShipOutcome::Kind::Shipped) families_->uploadSeconds.Observe(seconds);
}

void ArchiveMetrics::backlog(std::uint64_t bytes, double oldestSeconds, std::uint64_t diskSize) {
    families_->backlogBytes.Set(static_cast<double>(bytes));
    families_->backlogOldest.Set(oldestSeconds);
    families_->auditDiskSize.Set(static_cast<double>(diskSize));
}

namespace {

prometheus::MetricFamily counterFamily(std::string name, std::string help, std::uint64_t value) {
    prometheus::ClientMetric sample;
    sample.counter.value = static_cast<double>(value);
    return {std::move(name), std::move(help), prometheus::MetricType::Counter, {sample}};
}

}  // namespace

std::string ArchiveMetrics::exposition() const {
    auto families = registry_->Collect();
    if (client_) {
        // Read from the client rather than mirrored in registry counters: one count, no lag.
        families.push_back(counterFamily(
            "splicegate_archive_http_connections_opened_total",
            "TCP connections the S3 client opened (fewer than requests: kept connections)",
            client_->connectionsOpened()));
        families.push_back(counterFamily("splicegate_archive_http_requests_total",
                                         "HTTP requests the S3 client sent, every attempt",
                                         client_->requestsSent()));
    }
    return prometheus::TextSerializer().Serialize(families);
}

ArchiveService::ArchiveService(Archiver& archiver, UploadStateStore& states,
                               std::string auditDir, unsigned parallel, ArchiveMetrics* metrics)
    : archiver_(archiver),
      states_(states),
      auditDir_(std::move(auditDir)),
      parallel_(std::max(1u, parallel)),
      metrics_(metrics) {}

bool ArchiveService::shipOne(const audit::SegmentFiles& files, std::int64_t nowNs,
                             PassResult& result) {
    auto started = std::chrono::steady_clock::now();
    auto outcome = archiver_.ship(files, nowNs);
    std::chrono::duration<double> took = std::chrono::steady_clock::now() - started;
    auto name = audit::segmentBaseName(files.worker, files.segment);
    switch (outcome.kind) {
        case ShipOutcome::Kind::Shipped:
            ++result.shipped;
            logInfo("archive: ", name, " verified in the bucket (", outcome.bytes, " bytes put, ",
                    took.count(), " s)");
            break;
        case ShipOutcome::Kind::Failed:
            ++result.failed;
            logWarn("archive: ", outcome.message, " (retried next pass)");
            break;
        case ShipOutcome::Kind::Conflict:
            ++result.conflicts;
            logError("archive: ALARM: ", outcome.message);
            break;
        case ShipOutcome::Kind::NotReady:
            ++result.waiting;
            break;
        case ShipOutcome::Kind::AlreadyVerified:
            break;
    }
    if (metrics_) metrics_->counted(outcome.kind, outcome.bytes, took.count());
    return outcome.kind == ShipOutcome::Kind::Shipped ||
           outcome.kind == ShipOutcome::Kind::AlreadyVerified;
}

PassResult ArchiveService::runPass(std::int64_t nowNs) {
    std::vector<audit::SegmentFiles> candidates;
    for (auto& files : audit::listSegments(auditDir_)) {
        if (!files.hasIndex || !files.hasData || files.unsafe) continue;
        try {
            auto state = states_.load(files.worker, files.segment);
            if (state && state->phase == UploadPhase::Verified) continue;
        } catch (const std::runtime_error& e) {
            logError("archive: ", e.what(), ": segment skipped until the state file is repaired");
            continue;
        }
        candidates.push_back(std::move(files));
    }
    PassResult result;
    std::vector<char> verified(candidates.size(), 0);  // written by the worker that took it
    std::mutex resultLock;
    std::atomic<std::size_t> next{0};
    auto work = [&] {
        for (std::size_t i; (i = next.fetch_add(1)) < candidates.size();) {
            PassResult mine;
            verified[i] = shipOne(candidates[i], nowNs, mine);
            std::lock_guard lock(resultLock);
            result.shipped += mine.shipped;
            result.failed += mine.failed;
            result.conflicts += mine.conflicts;
            result.waiting += mine.waiting;
        }
    };
    std::vector<std::jthread> threads;
    for (unsigned t = 1; t < std::min<std::size_t>(parallel_, candidates.size()); ++t)
        threads.emplace_back(work);
    work();
    threads.clear();  // joins

    // What is still not verified, for the backlog metrics.
    auto now = std::chrono::system_clock::now();
    for (std::size_t i = 0; i < candidates.size(); ++i) {
        if (verified[i]) continue;
        const auto& files = candidates[i];
        struct stat data {}, index {};
        if (::stat(files.dataPath.c_str(), &data) != 0 || ::stat(files.indexPath.c_str(), &index) != 0)
            continue;  // deleted meanwhile
        result.backlogBytes += static_cast<std::uint64_t>(data.st_size + index.st_size);
        auto changed = std::chrono::system_clock::from_time_t(index.st_mtim.tv_sec);
        result.oldestSeconds = std::max(
            result.oldestSeconds, std::chrono::duration<double>(now - changed).count());
    }
    struct statvfs disk {};
    if (::statvfs(auditDir_.c_str(), &disk) == 0)
        result.auditDiskBytes = static_cast<std::uint64_t>(disk.f_blocks) * disk.f_frsize;
    if (metrics_) metrics_->backlog(result.backlogBytes, result.oldestSeconds, result.auditDiskBytes);
    return result;
}

}  // namespace splicegate::archive
