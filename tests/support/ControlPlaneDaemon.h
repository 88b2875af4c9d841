#pragma once
// The daemon with its whole control plane on, for tests/integration/ControlPlaneTest.cpp:
// - ControlPlaneDaemon: build/bin/splicegate (through tests/support/Daemon.h, which adds its
//   "quiet" defaults only for options not given) with `--admin-socket DIR/admin.sock
//   --admin-group root --metrics-listen 127.0.0.1:<free port> --audit-dir DIR/audit` and
//   optionally `--config DIR/splicegate.conf`, all in a private TempDir; start() waits until the
//   relay port, the admin socket and the metrics port are up.
// - ctl(): splicegatectl (SPLICEGATE_BIN_DIR) as a process against that socket.
// - httpGet(): from tests/support/HttpFetch.h, to read the metrics port.
// - textLines(), findOnPath(): small helpers the admin and metrics tests share.
// - parseMetrics() / findSamples(): a small Prometheus text-format reader (samples only).
// No protobuf here: the support library is linked by tests that do not link the admin code.
// Thread affinity: create, start and destroy a ControlPlaneDaemon from the test's main thread
// (Daemon's rule); ctl(), httpGet() and the parsers are free of shared state.
// Error contract: spawn failures throw std::system_error (from Daemon); everything else reports
// in its result (start() returns false and why() explains).
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/Daemon.h"
#include "tests/support/HttpFetch.h"
#include "tests/support/Sockets.h"

namespace splicegate::test {

struct ControlPlaneOptions {
    std::vector<std::string> upstreams;  // of the `default` route (--upstream each)
    unsigned workers = 2;
    // When set, written to DIR/splicegate.conf and passed as --config.
    std::optional<std::string> configText;
    std::vector<std::string> extra;  // more daemon arguments
};

class ControlPlaneDaemon {
  public:
    explicit ControlPlaneDaemon(ControlPlaneOptions options);
    ControlPlaneDaemon(const ControlPlaneDaemon&) = delete;
    ControlPlaneDaemon& operator=(const ControlPlaneDaemon&) = delete;
    ~ControlPlaneDaemon();

    // Spawns the daemon and waits (bounded) for the relay port, the admin socket file and the
    // metrics port. False when it died or did not come up in time (see why()).
    bool start(milliseconds timeout = milliseconds(15000));

    uint16_t listenPort() const noexcept { return listenPort_; }
    uint16_t metricsPort() const noexcept { return metricsPort_; }
    const std::string& socketPath() const noexcept { return socketPath_; }
    const std::string& auditDir() const noexcept { return auditDir_; }
    const std::string& configPath() const noexcept { return configPath_; }
    const std::string& stateDir() const noexcept { return dir_.path(); }
    // Rewrites the --config file atomically (temp file + rename).
    void writeConfig(const std::string& text) const;

    Daemon& daemon() { return *daemon_; }
    std::string why() { return daemon_ ? daemon_->why() : std::string("\n  daemon not started"); }

    // splicegatectl --socket socketPath() ARGS...
    ProcessResult ctl(const std::vector<std::string>& args,
                      milliseconds timeout = milliseconds(15000)) const;

  private:
    ControlPlaneOptions options_;
    TempDir dir_;
    uint16_t listenPort_ = 0;
    uint16_t metricsPort_ = 0;
    std::string socketPath_;
    std::string auditDir_;
    std::string configPath_;
    std::unique_ptr<Daemon> daemon_;
};

// splicegatectl of this build.
std::string ctlBinaryPath();

// The lines of `text` (without their '\n'; a trailing newline adds no empty line).
std::vector<std::string> textLines(const std::string& text);

struct MetricSample {
    std::string name;
    std::map<std::string, std::string> labels;
    double value = 0;
    std::string line;  // as scraped
};
// Sample lines of a Prometheus text page (comments and blank lines skipped). Lines that do not
// parse are reported in `problems` (if given).
std::vector<MetricSample> parseMetrics(const std::string& page,
                                       std::vector<std::string>* problems = nullptr);
// Samples named `name` whose labels include every one of `labels` (others may be present).
std::vector<MetricSample> findSamples(const std::vector<MetricSample>& samples,
                                      const std::string& name,
                                      const std::map<std::string, std::string>& labels = {});
// The value of the one sample `findSamples` gives; nullopt when there is none or several.
std::optional<double> sampleValue(const std::vector<MetricSample>& samples, const std::string& name,
                                  const std::map<std::string, std::string>& labels = {});

// Path of `name` on $PATH (via /bin/sh's `command -v`), empty when missing.
std::string findOnPath(const std::string& name);

}  // namespace splicegate::test
