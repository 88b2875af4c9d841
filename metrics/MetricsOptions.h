#pragma once
// The metrics endpoint's option (docs/configuration.md): its setting, declared once with its
// default, the option group that describes it, and how it is read and checked.
#include <boost/program_options/options_description.hpp>
#include <string>

#include "common/OptionValues.h"

namespace splicegate {

struct MetricsSettings {
    std::string listen = "127.0.0.1:9464";  // Prometheus /metrics; empty: none
};

// The metrics options, their defaults from MetricsSettings{}.
boost::program_options::options_description metricsOptions();
MetricsSettings readMetricsSettings(const OptionValues& values);
// Every metrics option takes effect at the next start only.
void listChanged(const MetricsSettings& running, const MetricsSettings& next,
                 ChangedOptions& changed);

}  // namespace splicegate
