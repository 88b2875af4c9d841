#pragma once
// The Prometheus endpoint: prometheus-cpp's pull Exposer (civetweb) serving /metrics on one
// address, with one Collectable that turns a StatsSnapshot into the metric families SPEC.md
// names. A scrape calls the StatsSource once; the data path only ever writes its own relaxed
// per-worker counters (metrics/Stats.h), so scraping adds no lock or shared write per chunk.
//
// Debian 12's civetweb is built without IPv6: an "[IPv6]:PORT" address is then served by
// MetricsHttpServer (same Collectable and families, without prometheus-cpp's own exposer_*
// metrics) instead of prometheus-cpp's Exposer.
//
// Thread affinity: construct and destroy from one thread. The StatsSource runs on a civetweb
// thread, never concurrently with itself (scrapes are serialized by a mutex), and must not block
// for long. Destroying the exposer stops the HTTP server first; after the destructor returns the
// source is never called again.
// Error contract: the constructor throws splicegate::UsageError (a std::runtime_error) when
// `listen` is not a numeric "ADDR:PORT" / "[IPv6]:PORT", std::system_error when the address
// cannot be bound (errno known), std::runtime_error otherwise; every message names the address.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/SocketAddress.h"
#include "metrics/Stats.h"

namespace prometheus {
class Exposer;
}

namespace splicegate {

using StatsSource = std::function<StatsSnapshot()>;

class MetricsCollector;
class MetricsHttpServer;

class MetricsExposer {
  public:
    // Starts serving "http://<listen>/metrics". Port 0 binds a free port (see port()).
    MetricsExposer(const std::string& listen, StatsSource source);
    ~MetricsExposer();
    MetricsExposer(const MetricsExposer&) = delete;
    MetricsExposer& operator=(const MetricsExposer&) = delete;

    // The port actually bound.
    unsigned port() const noexcept { return port_; }
    // The listen address as given.
    const std::string& listen() const noexcept { return listen_; }
    // Scrapes served so far (successful calls of the source).
    std::uint64_t scrapes() const noexcept;

  private:
    std::string listen_;
    unsigned port_ = 0;
    SocketAddress wakeAddress_;  // see the destructor
    // Declared before exposer_: the server (and its threads) stop before the collector goes.
    std::shared_ptr<MetricsCollector> collector_;
    std::unique_ptr<prometheus::Exposer> exposer_;  // civetweb: IPv4 (and IPv6 if built in)
    std::unique_ptr<MetricsHttpServer> fallback_;   // IPv6 when civetweb lacks it
};

// The Prometheus text exposition of `snapshot`, exactly what a scrape serves (for tests and
// tools).
std::string renderMetricsText(const StatsSnapshot& snapshot);

}  // namespace splicegate
