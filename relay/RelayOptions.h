#pragma once
// The relay's options (docs/configuration.md): connection limits and timeouts, the TCP options
// of the relay's sockets, the access log. Their settings are declared once with their defaults,
// next to the option group that describes them and how they are read and checked.
#include <boost/program_options/options_description.hpp>
#include <cstdint>
#include <string>

#include "common/OptionValues.h"

namespace splicegate {

// The form of the access line (relay/AccessLog.h): key=value text, or one JSON object.
enum class AccessLogFormat { Text, Json };
inline constexpr Named<AccessLogFormat> kAccessLogFormatNames[] = {{"text", AccessLogFormat::Text},
                                                                   {"json", AccessLogFormat::Json}};

struct RelaySettings {
    bool accessLog = true;  // one info line per closed connection
    AccessLogFormat accessLogFormat = AccessLogFormat::Text;
    // Sockets start in the kernel's delayed-ACK ("pingpong") mode: the ACK of a request rides on
    // the reply instead of costing a packet of its own (docs/kernel-notes.md).
    bool delayedAck = true;
    // TCP_CONGESTION of the client and upstream sockets; empty: the system's default. A
    // congestion control that paces (bbr) arms a timer per burst (docs/kernel-notes.md §20).
    std::string clientCongestion;
    std::string upstreamCongestion;
    std::uint64_t maxConnections = 65536;       // lowered at start to what the fd limit allows
    std::uint64_t maxConnectionsPerSource = 0;  // per client address; 0 = no limit
    std::uint32_t connectTimeoutMs = 5000;
    // 1 h, as Envoy's TCP proxy: half-open peers do not pile up.
    std::uint32_t idleTimeoutMs = 3600000;
    // A direction whose sender has gone (EOF) while its receiver takes nothing: closed after this
    // long without progress, whatever the idle timeout says.
    std::uint32_t halfClosedTimeoutMs = 60000;
    std::uint32_t drainTimeoutMs = 30000;
    // A listener with `sni` routes or a PROXY protocol header to read: how long a client has to
    // send them before it is closed (reason peek-timeout).
    std::uint32_t sniPeekTimeoutMs = 5000;
};

// The relay's options, their defaults from RelaySettings{}.
boost::program_options::options_description relayOptions();
RelaySettings readRelaySettings(const OptionValues& values);
// `name` if TCP_CONGESTION could take it (the kernel's TCP_CA_NAME_MAX, letters, digits, '_',
// '-'); throws UsageError naming `label` otherwise. Whether this kernel has it is checked at
// start and reload (congestionControlProblems).
std::string checkedCongestionName(const std::string& name, const std::string& label);
// Every relay option takes effect at the next start only.
void listChanged(const RelaySettings& running, const RelaySettings& next, ChangedOptions& changed);

}  // namespace splicegate
