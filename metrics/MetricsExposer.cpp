#include "metrics/MetricsExposer.h"

#include <CivetServer.h>
#include <netinet/in.h>
#include <prometheus/client_metric.h>
#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>
#include <prometheus/metric_type.h>
#include <prometheus/text_serializer.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <exception>
#include <limits>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "common/Error.h"
#include "common/Log.h"
#include "common/SocketAddress.h"
#include "metrics/MetricsHttpServer.h"

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

// The fsync latency histogram from the snapshot's cumulative bucket counts (one per bound of
// fsyncBucketBounds(), then +Inf). The counters are read one by one without a common lock, so a
// scrape racing an fsync could see a later bucket lag an earlier one: counts are clamped to be
// non-decreasing, and _count is the +Inf bucket so the exposition is always self-consistent.
ClientMetric fsyncHistogram(const StatsSnapshot& s) {
    const auto& bounds = fsyncBucketBounds();
    const auto& counts = s.fsyncBucketCounts;
    ClientMetric metric;
    std::uint64_t running = 0;
    for (std::size_t i = 0; i < bounds.size(); ++i) {
        if (i < counts.size()) running = std::max(running, counts[i]);
        metric.histogram.bucket.push_back({running, bounds[i]});
    }
    std::uint64_t total = counts.size() > bounds.size() ? counts[bounds.size()] : s.fsyncCount;
    running = std::max(running, total);
    metric.histogram.bucket.push_back({running, std::numeric_limits<double>::infinity()});
    metric.histogram.sample_count = running;
    metric.histogram.sample_sum = s.fsyncSumSeconds;
    return metric;
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
    auto connectFailures = family(
        "splicegate_upstream_connect_failures_total",
        "Upstream connection attempts that failed (refused, unreachable or timed out), by route.",
        MetricType::Counter);
    auto bytes = family("splicegate_bytes_total",
                        "Bytes relayed, by route and direction (c2u: client to upstream, u2c: "
                        "upstream to client).",
                        MetricType::Counter);
    for (const auto& route : s.routes) {
        addCounter(accepted, {{"route", route.name}}, route.accepted);
        addGauge(active, {{"route", route.name}}, asDouble(route.active));
        for (const auto& [reason, count] : route.closed)
            addCounter(closed, {{"reason", reason}, {"route", route.name}}, count);
        for (const auto& [reason, count] : route.refused)
            addCounter(refused, {{"reason", reason}, {"route", route.name}}, count);
        addCounter(connectFailures, {{"route", route.name}}, route.connectFailures);
        addCounter(bytes, {{"direction", "c2u"}, {"route", route.name}}, route.bytesC2u);
        addCounter(bytes, {{"direction", "u2c"}, {"route", route.name}}, route.bytesU2c);
    }
    out.push_back(std::move(accepted));
    out.push_back(std::move(active));
    out.push_back(std::move(closed));
    out.push_back(std::move(refused));
    out.push_back(std::move(connectFailures));
    out.push_back(std::move(bytes));

    auto auditBytes = family("splicegate_audit_bytes_total",
                             "Relayed bytes written to the audit log.", MetricType::Counter);
    addCounter(auditBytes, {}, s.auditBytes);
    out.push_back(std::move(auditBytes));

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

    auto lost = family("splicegate_audit_lost_bytes_total",
                       "Relayed bytes that could not be audited (fail-open mode after an audit "
                       "error).",
                       MetricType::Counter);
    addCounter(lost, {}, s.auditLostBytes);
    out.push_back(std::move(lost));

    auto pipes = family("splicegate_pipes",
                        "Kernel pipes of the pipe pools, by state (in_use, idle, overflow_in_use: "
                        "one-page pipes lent because the pipe budget was spent).",
                        MetricType::Gauge);
    addGauge(pipes, {{"state", "in_use"}}, asDouble(s.pipesInUse));
    addGauge(pipes, {{"state", "idle"}}, asDouble(s.pipesIdle));
    addGauge(pipes, {{"state", "overflow_in_use"}}, asDouble(s.pipesOverflowInUse));
    out.push_back(std::move(pipes));

    auto budget = family("splicegate_pipe_budget_bytes",
                         "Cap on the total capacity of the pipe pools' pipes.", MetricType::Gauge);
    addGauge(budget, {}, asDouble(s.pipeBudgetBytes));
    out.push_back(std::move(budget));
    auto budgetUsed = family("splicegate_pipe_budget_used_bytes",
                             "Capacity of the pipe pools' budgeted pipes now.", MetricType::Gauge);
    addGauge(budgetUsed, {}, asDouble(s.pipeBudgetUsedBytes));
    out.push_back(std::move(budgetUsed));

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

// civetweb reports its errors (e.g. "cannot bind to ...") through log_message. While the
// constructor starts the server those messages are collected for the exception; later ones are
// logged.
thread_local std::string* startupMessages = nullptr;

int civetLogMessage(const mg_connection*, const char* message) {
    if (message == nullptr) return 1;
    if (startupMessages != nullptr) {
        if (!startupMessages->empty()) *startupMessages += "; ";
        *startupMessages += message;
    } else {
        logWarn("metrics endpoint: ", message);
    }
    return 1;
}

// After civetweb failed to bind: the errno of binding the same address ourselves, 0 if that works.
int probeBindErrno(const SocketAddress& address) noexcept {
    int fd = ::socket(address.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return errno;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (address.family() == AF_INET6) ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    int err = ::bind(fd, address.get(), address.length()) == 0 ? 0 : errno;
    ::close(fd);
    return err;
}

// civetweb's server on `address` (the option as given in `listen`, for messages).
std::unique_ptr<prometheus::Exposer> startCivetweb(const SocketAddress& address,
                                                   const std::string& listen) {
    CivetCallbacks callbacks;
    callbacks.log_message = &civetLogMessage;
    // civetweb takes "a.b.c.d:port" and "[v6]:port", the same syntax as the option.
    std::vector<std::string> options = {
        "listening_ports", address.toString(), "num_threads", "2", "request_timeout_ms", "10000"};
    std::string messages;
    startupMessages = &messages;
    try {
        auto exposer = std::make_unique<prometheus::Exposer>(std::move(options), &callbacks);
        startupMessages = nullptr;
        return exposer;
    } catch (const std::exception& e) {
        startupMessages = nullptr;
        std::string detail = messages.empty() ? e.what() : messages;
        if (int err = probeBindErrno(address); err != 0)
            throwErrno(err, concat("metrics endpoint: cannot listen on ", listen));
        throw std::runtime_error(
            concat("metrics endpoint: cannot listen on ", listen, ": ", detail));
    }
}

// One connection to the listener (a wildcard address reached through loopback), closed at once.
void wakeListener(const SocketAddress& address) noexcept {
    int fd = ::socket(address.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return;
    if (::connect(fd, address.get(), address.length()) == 0) {
        linger reset{1, 0};  // RST: no TIME_WAIT left behind per wake-up
        ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
    }
    ::close(fd);
}

// Where wakeListener() connects: the bound address and port, loopback for a wildcard.
SocketAddress wakeAddress(const SocketAddress& bound, unsigned port) {
    auto text = bound.toString();
    auto host = text.substr(0, text.rfind(':'));
    if (host == "0.0.0.0") host = "127.0.0.1";
    if (host == "[::]") host = "[::1]";
    auto parsed = SocketAddress::parseNumeric(concat(host, ":", port));
    return parsed ? *parsed : bound;
}

}  // namespace

class MetricsCollector final : public prometheus::Collectable {
  public:
    explicit MetricsCollector(StatsSource source) : source_(std::move(source)) {}

    std::vector<MetricFamily> Collect() const override {
        StatsSnapshot snapshot;
        try {
            std::lock_guard<std::mutex> lock(mutex_);
            snapshot = source_();
        } catch (const std::exception& e) {
            logWarn("metrics scrape: reading the statistics failed: ", e.what());
            return {};
        } catch (...) {
            logWarn("metrics scrape: reading the statistics failed");
            return {};
        }
        scrapes_.fetch_add(1, std::memory_order_relaxed);
        return buildFamilies(snapshot);
    }

    std::uint64_t scrapes() const noexcept { return scrapes_.load(std::memory_order_relaxed); }

  private:
    StatsSource source_;
    mutable std::mutex mutex_;
    mutable std::atomic<std::uint64_t> scrapes_{0};
};

MetricsExposer::MetricsExposer(const std::string& listen, StatsSource source) : listen_(listen) {
    if (!source) throw std::invalid_argument("metrics endpoint: no statistics source");
    auto address = SocketAddress::parseNumeric(listen);
    if (!address)
        throw UsageError(
            concat("metrics endpoint: '", listen, "' is not a numeric ADDR:PORT or [IPv6]:PORT"));

    collector_ = std::make_shared<MetricsCollector>(std::move(source));

    constexpr unsigned kCivetFeatureIpv6 = 8;  // mg_check_feature(): "IPv6 is supported"
    if (address->family() == AF_INET6 && mg_check_feature(kCivetFeatureIpv6) == 0) {
        std::weak_ptr<MetricsCollector> weak = collector_;
        fallback_ = std::make_unique<MetricsHttpServer>(*address, "/metrics", [weak] {
            auto collector = weak.lock();
            if (!collector) return std::string();
            return prometheus::TextSerializer().Serialize(collector->Collect());
        });
        port_ = fallback_->port();
    } else {
        exposer_ = startCivetweb(*address, listen);
        auto ports = exposer_->GetListeningPorts();
        port_ = ports.empty() ? address->port() : static_cast<unsigned>(ports.front());
        wakeAddress_ = wakeAddress(*address, port_);
        exposer_->RegisterCollectable(collector_, "/metrics");
    }
    auto text = address->toString();  // "a.b.c.d:port" or "[v6]:port"
    logInfo("metrics endpoint listening on http://", text.substr(0, text.rfind(':')), ":", port_,
            "/metrics");
}

MetricsExposer::~MetricsExposer() {
    // Both servers stop (joining their threads) while the collector is still alive.
    fallback_.reset();
    if (!exposer_) return;
    // civetweb 1.15's accept thread only notices the stop flag when its poll() on the listening
    // socket returns, which is every 2 s when idle: mg_stop() would block that long. Connecting
    // to the port makes that poll() return at once.
    std::atomic<bool> stopped{false};
    std::thread waker;
    try {
        waker = std::thread([this, &stopped] {
            while (!stopped.load()) {
                wakeListener(wakeAddress_);
                std::this_thread::sleep_for(std::chrono::milliseconds(20));
            }
        });
    } catch (...) {  // no thread: stopping just takes longer
    }
    exposer_.reset();
    stopped = true;
    if (waker.joinable()) waker.join();
}

std::uint64_t MetricsExposer::scrapes() const noexcept {
    return collector_->scrapes();
}

std::string renderMetricsText(const StatsSnapshot& snapshot) {
    return prometheus::TextSerializer().Serialize(buildFamilies(snapshot));
}

}  // namespace splicegate
