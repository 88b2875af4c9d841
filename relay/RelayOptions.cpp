#include "relay/RelayOptions.h"

#include <algorithm>
#include <cctype>

#include "relay/SocketOptions.h"

namespace splicegate {
namespace po = boost::program_options;
namespace {

std::string congestionName(const OptionValues& values, const std::string& key) {
    return checkedCongestionName(values.text(key), values.label(key));
}

}  // namespace

std::string checkedCongestionName(const std::string& name, const std::string& label) {
    bool wellFormed = name.size() < kCongestionNameMax &&
                      std::all_of(name.begin(), name.end(), [](unsigned char c) {
                          return std::isalnum(c) != 0 || c == '_' || c == '-';
                      });
    if (!wellFormed)
        throw UsageError(label + ": '" + name +
                         "' is no congestion control name (letters, digits, '_' or '-'; at most " +
                         std::to_string(kCongestionNameMax - 1) + " characters)");
    return name;
}

// One option per line reads better than the formatter's layout of a call chain.
// clang-format off
po::options_description relayOptions() {
    const RelaySettings d;
    po::options_description options;
    options.add_options()
        ("access-log", scalar("on|off", nameOf(kOnOffNames, d.accessLog)),
         "one info line per closed connection")
        ("access-log-format",
         scalar("text|json", nameOf(kAccessLogFormatNames, d.accessLogFormat)),
         "the access line as key=value fields (text) or as one JSON object (json)")
        ("delayed-ack", scalar("on|off", nameOf(kOnOffNames, d.delayedAck)),
         "the relay's sockets delay their ACKs so that they ride on the reply; off: the "
         "kernel's quick ACKs at connection start")
        ("client-tcp-congestion", scalar("ALGO"),
         "TCP congestion control of the sockets accepted from clients (TCP_CONGESTION); "
         "default: the system's (net.ipv4.tcp_congestion_control)")
        ("upstream-tcp-congestion", scalar("ALGO"),
         "TCP congestion control of the sockets connected to upstreams; default: the system's")
        ("max-connections", scalar("N", std::to_string(d.maxConnections)),
         "beyond it new connections are refused (and counted); at least 1")
        ("max-connections-per-source", scalar("N", std::to_string(d.maxConnectionsPerSource)),
         "per client address; 0 = no limit")
        ("connect-timeout-ms", scalar("N", std::to_string(d.connectTimeoutMs)),
         "upstream connect timeout")
        ("idle-timeout-ms", scalar("N", std::to_string(d.idleTimeoutMs)),
         "close a connection idle this long; 0 = never")
        ("half-closed-timeout-ms", scalar("N", std::to_string(d.halfClosedTimeoutMs)),
         "close a connection whose sender has gone while its receiver takes nothing, after this "
         "long without progress; 0 = only the idle timeout")
        ("drain-timeout-ms", scalar("N", std::to_string(d.drainTimeoutMs)),
         "on SIGTERM, how long in-flight connections may finish")
        ("sni-peek-timeout-ms", scalar("N", std::to_string(d.sniPeekTimeoutMs)),
         "how long a client may take to send its PROXY header and TLS ClientHello on a "
         "listener that reads them (routes with sni or proxy-protocol-in); at least 1");
    return options;
}
// clang-format on

RelaySettings readRelaySettings(const OptionValues& values) {
    RelaySettings relay;
    relay.accessLog = values.choice(kOnOffNames, "access-log");
    relay.accessLogFormat = values.choice(kAccessLogFormatNames, "access-log-format");
    relay.maxConnections = values.number<std::uint64_t>("max-connections", 1);
    relay.connectTimeoutMs = values.number<std::uint32_t>("connect-timeout-ms");
    relay.idleTimeoutMs = values.number<std::uint32_t>("idle-timeout-ms");
    relay.halfClosedTimeoutMs = values.number<std::uint32_t>("half-closed-timeout-ms");
    relay.drainTimeoutMs = values.number<std::uint32_t>("drain-timeout-ms");
    relay.sniPeekTimeoutMs = values.number<std::uint32_t>("sni-peek-timeout-ms", 1);
    relay.maxConnectionsPerSource = values.number<std::uint64_t>("max-connections-per-source");
    relay.delayedAck = values.choice(kOnOffNames, "delayed-ack");
    relay.clientCongestion = congestionName(values, "client-tcp-congestion");
    relay.upstreamCongestion = congestionName(values, "upstream-tcp-congestion");
    return relay;
}

void listChanged(const RelaySettings& running, const RelaySettings& next, ChangedOptions& changed) {
    changed.check("access-log", running.accessLog, next.accessLog);
    changed.check("access-log-format", running.accessLogFormat, next.accessLogFormat);
    changed.check("delayed-ack", running.delayedAck, next.delayedAck);
    changed.check("client-tcp-congestion", running.clientCongestion, next.clientCongestion);
    changed.check("upstream-tcp-congestion", running.upstreamCongestion, next.upstreamCongestion);
    changed.check("max-connections", running.maxConnections, next.maxConnections);
    changed.check("max-connections-per-source", running.maxConnectionsPerSource,
                  next.maxConnectionsPerSource);
    changed.check("connect-timeout-ms", running.connectTimeoutMs, next.connectTimeoutMs);
    changed.check("idle-timeout-ms", running.idleTimeoutMs, next.idleTimeoutMs);
    changed.check("half-closed-timeout-ms", running.halfClosedTimeoutMs, next.halfClosedTimeoutMs);
    changed.check("drain-timeout-ms", running.drainTimeoutMs, next.drainTimeoutMs);
    changed.check("sni-peek-timeout-ms", running.sniPeekTimeoutMs, next.sniPeekTimeoutMs);
}

}  // namespace splicegate
