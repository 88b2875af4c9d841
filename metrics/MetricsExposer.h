#pragma once
// The metrics listener: one HTTP server (metrics/HttpServer, libmicrohttpd) on one address,
// IPv4 or IPv6, answering
//   /metrics    the Prometheus text exposition (prometheus-cpp's serializer) of a StatsSnapshot,
//               the process_* gauges and the daemon's own gauges (readiness aside);
//   /-/healthy  200 while the process runs;
//   /-/ready    200 while the daemon serves (setReady(true)), 503 while it starts or drains.
// A scrape calls the StatsSource once; the data path only ever writes its own relaxed per-worker
// counters (metrics/Stats.h), so scraping adds no lock or shared write per chunk.
//
// Thread affinity: construct and destroy from one thread; the setters may be called from any
// thread. The StatsSource runs on a server thread, never concurrently with itself (scrapes are
// serialised by a mutex), and must not block for long. After the destructor returns (or a
// StatsBinding is destroyed) the source is never called again.
// Error contract: the constructor throws splicegate::UsageError (a std::runtime_error) when
// `listen` is not a numeric "ADDR:PORT" / "[IPv6]:PORT", std::system_error when the address
// cannot be bound (errno known), std::runtime_error otherwise; every message names the address.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "metrics/HttpServer.h"
#include "metrics/Stats.h"

namespace splicegate {

using StatsSource = std::function<StatsSnapshot()>;

class MetricsCollector;

class MetricsExposer {
  public:
    // Starts serving on `listen`. Port 0 binds a free port (see port()). `auditDir` (empty: none)
    // is measured for splicegate_audit_disk_{size,free}_bytes and splicegate_audit_stored_bytes.
    // Readiness starts false; the last reload counts as successful at construction (the
    // configuration the daemon started with was loaded). `adopted` (an upgrade: the previous
    // process's listening socket for `listen`) is served instead of binding; -1: bind.
    explicit MetricsExposer(const std::string& listen, StatsSource source = {},
                            const std::string& auditDir = {}, int adopted = -1);
    ~MetricsExposer();
    MetricsExposer(const MetricsExposer&) = delete;
    MetricsExposer& operator=(const MetricsExposer&) = delete;

    // Uses `source` until the returned binding is destroyed (then no source: only the process
    // and daemon gauges are served). Lets the listener start before what the source reads
    // exists, and stop reading it before it goes. Declare the binding after that object.
    class [[nodiscard]] StatsBinding {
      public:
        explicit StatsBinding(MetricsCollector* collector) noexcept : collector_(collector) {}
        StatsBinding(StatsBinding&& other) noexcept : collector_(other.collector_) {
            other.collector_ = nullptr;
        }
        StatsBinding& operator=(StatsBinding&&) = delete;
        ~StatsBinding();

      private:
        MetricsCollector* collector_;
    };
    StatsBinding bindStatsSource(StatsSource source);

    // /-/ready: true while serving, false while starting and draining.
    void setReady(bool ready) noexcept;
    // An upgrade: the listening socket to hand over, then no more accepts here (the new process
    // serves the endpoint).
    int listenFd() const noexcept;
    void stopAccepting() noexcept;
    // splicegate_connections_max (not exported until set).
    void setConnectionsMax(std::uint64_t max) noexcept;
    // splicegate_audit_unsealed_segments (not exported until set): what the start's recovery
    // left unsealed.
    void setAuditUnsealedSegments(std::uint64_t segments) noexcept;
    // splicegate_audit_retention_limit_bytes (--audit-retention-bytes; not exported while 0).
    void setAuditRetentionLimit(std::uint64_t bytes) noexcept;
    // With an archive (--audit-archive-state-dir): splicegate_audit_unarchived_bytes = `backlog`
    // (sealed segments the archive has not verified), and `deletedUnarchived` more segments in
    // splicegate_audit_unarchived_deleted_total (fail-open retention). Not exported until called.
    void recordAuditArchiveBacklog(std::uint64_t backlog, std::uint64_t deletedUnarchived) noexcept;
    // splicegate_config_last_reload_successful, and on success
    // splicegate_config_last_reload_success_timestamp_seconds = now.
    void recordReload(bool successful) noexcept;

    // The port actually bound.
    unsigned port() const noexcept { return port_; }
    // The listen address as given.
    const std::string& listen() const noexcept { return listen_; }
    // Scrapes of /metrics served so far (successful calls of the source).
    std::uint64_t scrapes() const noexcept;
    bool ready() const noexcept { return ready_.load(std::memory_order_relaxed); }

  private:
    HttpResponse answer(std::string_view path) const;

    std::string listen_;
    unsigned port_ = 0;
    std::atomic<bool> ready_{false};
    // Declared before server_: the server (and its threads) stop before the collector goes.
    std::unique_ptr<MetricsCollector> collector_;
    std::unique_ptr<HttpServer> server_;
};

// The Prometheus text exposition of `snapshot` (the StatsSnapshot families only, without the
// process and daemon gauges a scrape adds), for tests and tools.
std::string renderMetricsText(const StatsSnapshot& snapshot);

}  // namespace splicegate
