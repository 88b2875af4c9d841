#pragma once
// The XDP edge filter's options (docs/configuration.md): their settings, declared once with
// their defaults, the option group that describes them, and how they are read and checked.
#include <boost/program_options/options_description.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "common/OptionValues.h"

namespace splicegate {

enum class XdpMode { Native, Generic, Auto };

struct XdpSettings {
    std::string interface;  // empty: no XDP
    XdpMode mode = XdpMode::Auto;
    std::vector<std::string> deny;   // normalized CIDR text
    std::vector<std::string> allow;  // normalized CIDR text
    std::uint32_t synRate = 0;
    std::uint32_t synBurst = 0;
    std::uint32_t synPrefixV4 = 24;         // sources in one /N share a SYN bucket
    std::uint32_t synPrefixV6 = 64;         // likewise
    std::uint32_t synNewSourceRate = 1000;  // SYNs/s of prefixes without a bucket; 0 = no bound
    std::uint32_t synNewSourceBurst = 0;    // 0 = synNewSourceRate
};

// The XDP options, their defaults from XdpSettings{}.
boost::program_options::options_description xdpOptions();
XdpSettings readXdpSettings(const OptionValues& values);
// A reload applies the rules and the SYN limit; the interface and mode wait for a restart.
void listChanged(const XdpSettings& running, const XdpSettings& next, ChangedOptions& changed);

}  // namespace splicegate
