#include "metrics/MetricsExposer.h"

#include <prometheus/client_metric.h>
#include <prometheus/metric_family.h>
#include <prometheus/metric_type.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <limits>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "common/Error.h"
#include "common/Log.h"
#include "common/SocketAddress.h"
#include "metrics/AuditDiskUsage.h"
#include "metrics/HttpServer.h"
#include "metrics/ProcessStats.h"

#ifndef SPLICEGATE_VERSION
#define SPLICEGATE_VERSION "unknown"
#endif

namespace splicegate {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

namespace {

using Labels = std::vector<ClientMetric::Label>;

double asDouble(std::uint64_t value) noexcept {
    return static_cast<double>(value);
}

MetricFamily family(const char* name, const char* help, MetricType type) {
    MetricFamily result;
    result.name = name;
    result.help = help;
    result.type = type;
    return result;
}

void addCounter(MetricFamily& f, Labels labels, std::uint64_t value) {
    ClientMetric metric;
    metric.label = std::move(labels);
    metric.counter.value = asDouble(value);
    f.metric.push_back(std::move(metric));
}

void addGauge(MetricFamily& f, Labels labels, double value) {
    ClientMetric metric;
    metric.label = std::move(labels);
    metric.gauge.value = value;
    f.metric.push_back(std::move(metric));
}

// A family of one unlabelled value.
void addSingleCounter(std::vector<MetricFamily>& out, const char* name, const char* help,
                      std::uint64_t value) {
    auto f = family(name, help, MetricType::Counter);
    addCounter(f, {}, value);
    out.push_back(std::move(f));
}
void addSingleGauge(std::vector<MetricFamily>& out, const char* name, const char* help,
                    double value) {
    auto f = family(name, help, MetricType::Gauge);
    addGauge(f, {}, value);
    out.push_back(std::move(f));
}

// The fsync latency histogram from the snapshot's cumulative bucket counts (one per bound of
// fsyncBucketBounds(), then +Inf). The counters are read one by one without a common lock, so a
// scrape racing an fsync could see a later bucket lag an earlier one: counts are clamped to be
// non-decreasing, and _count is the +Inf bucket so the exposition is always self-consistent.
ClientMetric histogramOf(const std::vector<double>& bounds, const std::vector<std::uint64_t>& counts,
                         std::uint64_t count, double sumSeconds) {
    ClientMetric metric;
    std::uint64_t running = 0;
    for (std::size_t i = 0; i < bounds.size(); ++i) {
        if (i < counts.size()) running = std::max(running, counts[i]);
        metric.histogram.bucket.push_back({running, bounds[i]});
    }
    std::uint64_t total = counts.size() > bounds.size() ? counts[bounds.size()] : count;
    running = std::max(running, total);
    metric.histogram.bucket.push_back({running, std::numeric_limits<double>::infinity()});
    metric.histogram.sample_count = running;
    metric.histogram.sample_sum = sumSeconds;
    return metric;
}

ClientMetric fsyncHistogram(const StatsSnapshot& s) {
    return histogramOf(fsyncBucketBounds(), s.fsyncBucketCounts, s.fsyncCount,
                       s.fsyncSumSeconds);
}

std::vector<MetricFamily> buildFamilies(const StatsSnapshot& s) {
    std::vector<MetricFamily> out;

    auto build = family("splicegate_build_info",
                        "Build information of the running splicegate; the value is always 1.",
                        MetricType::Gauge);
    addGauge(build, {{"version", s.version.empty() ? SPLICEGATE_VERSION : s.version}}, 1.0);
    out.push_back(std::move(build));

    auto accepted = family("splicegate_connections_accepted_total",
                           "Client connections accepted, by route.", MetricType::Counter);
    auto active = family("splicegate_connections_active",
                         "Client connections currently open, by route.", MetricType::Gauge);
    auto closed =
        family("splicegate_connections_closed_total",
               "Client connections closed, by route and close reason.", MetricType::Counter);
    auto refused = family("splicegate_connections_refused_total",
                          "Client connections refused before relaying, by route and reason.",
                          MetricType::Counter);
    // One label set per name: the route's total is sum by (route) of the per-upstream series.
    auto connectFailures = family(
        "splicegate_upstream_connect_failures_total",
        "Client connections' upstream connect attempts that failed (refused, unreachable or "
        "timed out), by route and upstream; active health checks are not counted here.",
        MetricType::Counter);
    auto bytes = family("splicegate_bytes_total",
                        "Bytes relayed, by route and direction (c2u: client to upstream, u2c: "
                        "upstream to client).",
                        MetricType::Counter);
    auto laneSwitches = family("splicegate_lane_switches_total",
                               "Flow directions that moved between the buffer and the splice "
                               "lane (--lane auto), by route and the lane moved to.",
                               MetricType::Counter);
    auto laneBytes = family("splicegate_lane_bytes_total",
                            "Bytes relayed, by route and the lane that moved them (buffer, "
                            "splice).",
                            MetricType::Counter);
    auto duration = family("splicegate_connection_duration_seconds",
                           "Lifetime of closed client connections, accept to close, by route.",
                           MetricType::Histogram);
    for (const auto& route : s.routes) {
        auto lifetimes = histogramOf(connectionDurationBucketBounds(), route.durationBucketCounts,
                                     0, route.durationSumSeconds);
        lifetimes.label = {{"route", route.name}};
        duration.metric.push_back(std::move(lifetimes));
        for (const auto& [lane, count] : route.laneSwitches)
            addCounter(laneSwitches, {{"route", route.name}, {"to", lane}}, count);
        for (const auto& [lane, count] : route.laneBytes)
            addCounter(laneBytes, {{"lane", lane}, {"route", route.name}}, count);
        addCounter(accepted, {{"route", route.name}}, route.accepted);
        addGauge(active, {{"route", route.name}}, asDouble(route.active));
        for (const auto& [reason, count] : route.closed)
            addCounter(closed, {{"reason", reason}, {"route", route.name}}, count);
        for (const auto& [reason, count] : route.refused)
            addCounter(refused, {{"reason", reason}, {"route", route.name}}, count);
        addCounter(bytes, {{"direction", "c2u"}, {"route", route.name}}, route.bytesC2u);
        addCounter(bytes, {{"direction", "u2c"}, {"route", route.name}}, route.bytesU2c);
    }
    // Per upstream: connect failures, health checks, state, active connections, transitions.
    auto upstreamUp = family("splicegate_upstream_up",
                             "Whether the upstream is healthy (1) or down (0: failing connects "
                             "or checks, or its name does not resolve yet), by route and "
                             "upstream; a disabled upstream keeps its health here.",
                             MetricType::Gauge);
    auto upstreamState = family("splicegate_upstream_state",
                                "The upstream's state (1 for the one it is in): up, down, or "
                                "disabled (maintenance: no new connections).",
                                MetricType::Gauge);
    auto checkFailures = family("splicegate_upstream_health_check_failures_total",
                                "Active health checks of the upstream that failed.",
                                MetricType::Counter);
    auto upstreamActive = family("splicegate_upstream_connections_active",
                                 "Connections established to the upstream and still open.",
                                 MetricType::Gauge);
    auto transitions = family("splicegate_upstream_state_changes_total",
                              "Health transitions of the upstream, by the state changed to "
                              "(up, down).",
                              MetricType::Counter);
    auto upstreamBytes = family("splicegate_upstream_bytes_total",
                                "Bytes relayed by the upstream's closed connections, by direction "
                                "(c2u: client to upstream, u2c: upstream to client).",
                                MetricType::Counter);
    auto connectTime = family("splicegate_upstream_connect_seconds",
                              "Time of the TCP handshake with the upstream, for the connections "
                              "it accepted.",
                              MetricType::Histogram);
    for (const auto& upstream : s.upstreams) {
        Labels labels{{"route", upstream.route}, {"upstream", upstream.upstream}};
        auto times = histogramOf(upstreamConnectBucketBounds(), upstream.connectBucketCounts, 0,
                                 upstream.connectSumSeconds);
        times.label = labels;
        connectTime.metric.push_back(std::move(times));
        auto c2u = labels;
        c2u.push_back({"direction", "c2u"});
        addCounter(upstreamBytes, std::move(c2u), upstream.bytesC2u);
        auto u2c = labels;
        u2c.push_back({"direction", "u2c"});
        addCounter(upstreamBytes, std::move(u2c), upstream.bytesU2c);
        addCounter(connectFailures, labels, upstream.connectFailures);
        addCounter(checkFailures, labels, upstream.healthCheckFailures);
        addGauge(upstreamUp, labels, upstream.up ? 1.0 : 0.0);
        addGauge(upstreamActive, labels, asDouble(upstream.active));
        for (const char* state : {"up", "down", "disabled"}) {
            auto stateLabels = labels;
            stateLabels.push_back({"state", state});
            addGauge(upstreamState, std::move(stateLabels),
                     std::string_view(upstream.state()) == state ? 1.0 : 0.0);
        }
        auto toDown = labels;
        toDown.push_back({"to", "down"});
        addCounter(transitions, std::move(toDown), upstream.wentDown);
        auto toUp = labels;
        toUp.push_back({"to", "up"});
        addCounter(transitions, std::move(toUp), upstream.cameUp);
    }
    out.push_back(std::move(upstreamUp));
    out.push_back(std::move(upstreamState));
    out.push_back(std::move(checkFailures));
    out.push_back(std::move(upstreamActive));
    out.push_back(std::move(transitions));
    out.push_back(std::move(upstreamBytes));
    out.push_back(std::move(connectTime));
    out.push_back(std::move(accepted));
    out.push_back(std::move(active));
    out.push_back(std::move(closed));
    out.push_back(std::move(refused));
    out.push_back(std::move(connectFailures));
    out.push_back(std::move(bytes));
    out.push_back(std::move(laneSwitches));
    out.push_back(std::move(laneBytes));
    out.push_back(std::move(duration));

    auto buffers = family("splicegate_buffers",
                          "Provided buffers of the buffer lane's rings, by state (in_use: "
                          "received bytes not yet sent).",
                          MetricType::Gauge);
    addGauge(buffers, {{"state", "in_use"}}, asDouble(s.buffersInUse));
    out.push_back(std::move(buffers));
    addSingleCounter(out, "splicegate_buffer_ring_empty_total",
                     "Buffer lane recvs that found the provided buffer ring empty "
                     "(-ENOBUFS: back-pressure, re-armed once buffers return).",
                     s.bufferRingDry);

    addSingleCounter(out, "splicegate_audit_bytes_total",
                     "Relayed bytes written to the audit log.", s.auditBytes);

    auto fsync =
        family("splicegate_audit_fsync_seconds",
               "Latency of the audit log's fsync (group commit) calls.", MetricType::Histogram);
    fsync.metric.push_back(fsyncHistogram(s));
    out.push_back(std::move(fsync));

    auto auditErrors = family("splicegate_audit_errors_total",
                              "Audit log I/O errors, by kind (write, sync).", MetricType::Counter);
    for (const auto& [kind, count] : s.auditErrors)
        addCounter(auditErrors, {{"kind", kind}}, count);
    out.push_back(std::move(auditErrors));

    addSingleCounter(out, "splicegate_audit_lost_bytes_total",
                     "Relayed bytes that could not be audited (fail-open mode after an audit "
                     "error).",
                     s.auditLostBytes);

    auto pipes = family("splicegate_pipes",
                        "Kernel pipes of the pipe pools, by state (in_use, idle, overflow_in_use: "
                        "one-page pipes lent because the pipe budget was spent).",
                        MetricType::Gauge);
    addGauge(pipes, {{"state", "in_use"}}, asDouble(s.pipesInUse));
    addGauge(pipes, {{"state", "idle"}}, asDouble(s.pipesIdle));
    addGauge(pipes, {{"state", "overflow_in_use"}}, asDouble(s.pipesOverflowInUse));
    out.push_back(std::move(pipes));

    addSingleCounter(out, "splicegate_pipe_cap_refusals_total",
                     "Pipes the pool's cap refused (--lane auto: a sixteenth of the fd "
                     "limit); each such flow went on in the buffer lane.",
                     s.pipeCapRefusals);

    addSingleGauge(out, "splicegate_pipe_budget_bytes",
                   "Cap on the total capacity of the pipe pools' pipes.",
                   asDouble(s.pipeBudgetBytes));
    addSingleGauge(out, "splicegate_pipe_budget_used_bytes",
                   "Capacity of the pipe pools' budgeted pipes now.",
                   asDouble(s.pipeBudgetUsedBytes));

    auto xdp = family("splicegate_xdp_packets_total",
                      "Packets seen by the XDP edge filter, by action (pass, drop) and reason.",
                      MetricType::Counter);
    for (const auto& [key, count] : s.xdpPackets)
        addCounter(xdp, {{"action", key.first}, {"reason", key.second}}, count);
    out.push_back(std::move(xdp));

    auto admin = family("splicegate_admin_requests_total",
                        "Admin socket requests, by command and result.", MetricType::Counter);
    for (const auto& [key, count] : s.adminRequests)
        addCounter(admin, {{"command", key.first}, {"result", key.second}}, count);
    out.push_back(std::move(admin));

    // A family without samples would still print HELP/TYPE lines; leave it out instead.
    out.erase(std::remove_if(out.begin(), out.end(),
                             [](const MetricFamily& f) { return f.metric.empty(); }),
              out.end());
    return out;
}

template <typename T>
void addOptionalGauge(std::vector<MetricFamily>& out, const char* name, const char* help,
                      const std::optional<T>& value) {
    if (value) addSingleGauge(out, name, help, static_cast<double>(*value));
}

// The gauges every Prometheus client library exports for its process (same names and units).
void addProcessFamilies(std::vector<MetricFamily>& out) {
    auto process = readProcessStats();
    addOptionalGauge(out, "process_start_time_seconds",
                     "Start time of the process since the Unix epoch in seconds.",
                     process.startTimeSeconds);
    addOptionalGauge(out, "process_open_fds", "Number of open file descriptors.", process.openFds);
    addOptionalGauge(out, "process_max_fds", "Maximum number of open file descriptors.",
                     process.maxFds);
    addOptionalGauge(out, "process_resident_memory_bytes", "Resident memory size in bytes.",
                     process.residentMemoryBytes);
}

double nowSeconds() noexcept {
    using namespace std::chrono;
    return duration<double>(system_clock::now().time_since_epoch()).count();
}

constexpr const char* kExpositionType = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace

// What a scrape of /metrics reads: the bound StatsSource, the daemon's own gauges, the process
// and the audit directory.
class MetricsCollector {
  public:
    explicit MetricsCollector(const std::string& auditDir) {
        if (!auditDir.empty()) auditDisk_.emplace(auditDir);
    }

    void setSource(StatsSource source) {
        std::lock_guard<std::mutex> lock(mutex_);
        source_ = std::move(source);
    }

    std::string render() {
        std::vector<MetricFamily> families;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (source_) {
                try {
                    families = buildFamilies(source_());
                    scrapes_.fetch_add(1, std::memory_order_relaxed);
                } catch (const std::exception& e) {
                    logWarn("metrics scrape: reading the statistics failed: ", e.what());
                } catch (...) {
                    logWarn("metrics scrape: reading the statistics failed");
                }
            }
            if (auditDisk_) {
                auto disk = auditDisk_->sample();
                addOptionalGauge(families, "splicegate_audit_disk_size_bytes",
                                 "Size of the audit directory's filesystem in bytes.",
                                 disk.sizeBytes);
                addOptionalGauge(families, "splicegate_audit_disk_free_bytes",
                                 "Bytes available to the daemon on the audit directory's "
                                 "filesystem.",
                                 disk.freeBytes);
                addOptionalGauge(families, "splicegate_audit_stored_bytes",
                                 "Bytes of the files in the audit directory (sampled at most "
                                 "every 10 s).",
                                 disk.storedBytes);
            }
        }
        addDaemonFamilies(families);
        addProcessFamilies(families);
        return prometheus::TextSerializer().Serialize(families);
    }

    std::atomic<std::int64_t> connectionsMax{-1};  // -1: not set
    std::atomic<std::int64_t> auditUnsealedSegments{-1};  // -1: not set
    std::atomic<std::int64_t> auditRetentionLimit{-1};    // -1: not set
    std::atomic<std::int64_t> auditUnarchivedBytes{-1};   // -1: no archive
    std::atomic<std::uint64_t> auditUnarchivedDeleted{0};
    std::atomic<bool> lastReloadSuccessful{true};
    std::atomic<double> lastReloadSuccessSeconds{nowSeconds()};
    std::uint64_t scrapes() const noexcept { return scrapes_.load(std::memory_order_relaxed); }

  private:
    void addDaemonFamilies(std::vector<MetricFamily>& out) const {
        auto max = connectionsMax.load(std::memory_order_relaxed);
        if (max >= 0)
            addOptionalGauge(out, "splicegate_connections_max",
                             "Open client connections beyond which new ones are refused.",
                             std::optional<std::int64_t>(max));
        auto unsealed = auditUnsealedSegments.load(std::memory_order_relaxed);
        if (unsealed >= 0)
            addOptionalGauge(out, "splicegate_audit_unsealed_segments",
                             "Audit segments the start's recovery found unsealed and left as "
                             "they were (older than a crash leaves, or after a seal that does "
                             "not hold): the log was changed on disk.",
                             std::optional<std::int64_t>(unsealed));
        auto limit = auditRetentionLimit.load(std::memory_order_relaxed);
        if (limit > 0)
            addOptionalGauge(out, "splicegate_audit_retention_limit_bytes",
                             "--audit-retention-bytes: the audit directory's size budget.",
                             std::optional<std::int64_t>(limit));
        auto backlog = auditUnarchivedBytes.load(std::memory_order_relaxed);
        if (backlog >= 0) {
            addOptionalGauge(out, "splicegate_audit_unarchived_bytes",
                             "Bytes of sealed audit segments the archive has not verified yet "
                             "(retention keeps them).",
                             std::optional<std::int64_t>(backlog));
            addSingleCounter(out, "splicegate_audit_unarchived_deleted_total",
                             "Sealed audit segments retention deleted before the archive "
                             "verified them (--audit-on-error fail-open over the size limit).",
                             auditUnarchivedDeleted.load(std::memory_order_relaxed));
        }
        addOptionalGauge(out, "splicegate_config_last_reload_successful",
                         "Whether the last configuration reload succeeded (1) or failed (0).",
                         std::optional<int>(lastReloadSuccessful.load() ? 1 : 0));
        addOptionalGauge(out, "splicegate_config_last_reload_success_timestamp_seconds",
                         "Time of the last successful configuration load or reload, since the "
                         "Unix epoch.",
                         std::optional<double>(lastReloadSuccessSeconds.load()));
    }

    std::mutex mutex_;  // serialises scrapes: the source never runs concurrently with itself
    StatsSource source_;
    std::optional<AuditDiskUsage> auditDisk_;
    std::atomic<std::uint64_t> scrapes_{0};
};

MetricsExposer::MetricsExposer(const std::string& listen, StatsSource source,
                               const std::string& auditDir, int adopted)
    : listen_(listen), collector_(std::make_unique<MetricsCollector>(auditDir)) {
    auto address = SocketAddress::parseNumeric(listen);
    if (!address)
        throw UsageError(
            concat("metrics endpoint: '", listen, "' is not a numeric ADDR:PORT or [IPv6]:PORT"));
    collector_->setSource(std::move(source));
    server_ = std::make_unique<HttpServer>(
        *address, [this](std::string_view, std::string_view path) { return answer(path); },
        HttpServerLimits{}, adopted);
    port_ = server_->port();
    auto text = address->toString();  // "a.b.c.d:port" or "[v6]:port"
    logInfo("metrics endpoint listening on http://", text.substr(0, text.rfind(':')), ":", port_,
            "/metrics");
}

int MetricsExposer::listenFd() const noexcept {
    return server_->listenFd();
}

void MetricsExposer::stopAccepting() noexcept {
    server_->stopAccepting();
}

MetricsExposer::~MetricsExposer() = default;  // server_ (declared last) stops first

HttpResponse MetricsExposer::answer(std::string_view path) const {
    if (path == "/metrics") return {200, kExpositionType, collector_->render()};
    if (path == "/-/healthy") return {200, "text/plain; charset=utf-8", "splicegate is healthy.\n"};
    if (path == "/-/ready") {
        if (ready()) return {200, "text/plain; charset=utf-8", "splicegate is ready.\n"};
        return {503, "text/plain; charset=utf-8",
                "splicegate is not ready (starting or draining).\n"};
    }
    return {404, "text/plain; charset=utf-8", "not found; try /metrics, /-/healthy, /-/ready\n"};
}

MetricsExposer::StatsBinding MetricsExposer::bindStatsSource(StatsSource source) {
    collector_->setSource(std::move(source));
    return StatsBinding(collector_.get());
}

MetricsExposer::StatsBinding::~StatsBinding() {
    if (collector_ != nullptr) collector_->setSource({});
}

void MetricsExposer::setReady(bool ready) noexcept {
    ready_.store(ready, std::memory_order_relaxed);
}

namespace {
std::int64_t clampedGauge(std::uint64_t value) noexcept {
    return static_cast<std::int64_t>(
        std::min<std::uint64_t>(value, std::numeric_limits<std::int64_t>::max()));
}
}  // namespace

void MetricsExposer::setConnectionsMax(std::uint64_t max) noexcept {
    collector_->connectionsMax.store(clampedGauge(max));
}

void MetricsExposer::setAuditRetentionLimit(std::uint64_t bytes) noexcept {
    collector_->auditRetentionLimit.store(clampedGauge(bytes));
}

void MetricsExposer::recordAuditArchiveBacklog(std::uint64_t backlog,
                                               std::uint64_t deletedUnarchived) noexcept {
    collector_->auditUnarchivedBytes.store(clampedGauge(backlog));
    collector_->auditUnarchivedDeleted.fetch_add(deletedUnarchived);
}

void MetricsExposer::setAuditUnsealedSegments(std::uint64_t segments) noexcept {
    collector_->auditUnsealedSegments.store(clampedGauge(segments));
}

void MetricsExposer::recordReload(bool successful) noexcept {
    collector_->lastReloadSuccessful.store(successful);
    if (successful) collector_->lastReloadSuccessSeconds.store(nowSeconds());
}

std::uint64_t MetricsExposer::scrapes() const noexcept {
    return collector_->scrapes();
}

std::string renderMetricsText(const StatsSnapshot& snapshot) {
    return prometheus::TextSerializer().Serialize(buildFamilies(snapshot));
}

}  // namespace splicegate
