#include "metrics/MetricsOptions.h"

namespace splicegate {
namespace po = boost::program_options;

po::options_description metricsOptions() {
    const MetricsSettings d;
    po::options_description options;
    options.add_options()("metrics-listen", scalar("ADDR:PORT", d.listen),
                          "Prometheus endpoint /metrics; empty = none");
    return options;
}

MetricsSettings readMetricsSettings(const OptionValues& values) {
    MetricsSettings metrics;
    metrics.listen = values.text("metrics-listen");
    if (!metrics.listen.empty()) parseListenAddress(metrics.listen, values.label("metrics-listen"));
    return metrics;
}

void listChanged(const MetricsSettings& running, const MetricsSettings& next,
                 ChangedOptions& changed) {
    changed.check("metrics-listen", running.listen, next.listen);
}

}  // namespace splicegate
