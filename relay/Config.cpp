#include "relay/Config.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <boost/program_options.hpp>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <limits>
#include <set>
#include <sstream>
#include <thread>

#include "common/Error.h"
#include "common/UniqueFd.h"
#include "relay/ListenerMatcher.h"
#include "relay/SocketOptions.h"

namespace splicegate {
namespace po = boost::program_options;
namespace {

constexpr const char* kUsageLine = "Usage: splicegate [OPTIONS]";
constexpr const char* kNoRouteMessage =
    "no route configured: give --listen and --upstream, or a [route.NAME] section in --config";
constexpr std::string_view kRoutePrefix = "route.";
constexpr std::size_t kMaxRouteNameLength = 64;
constexpr uint64_t kMinPipeSize = 4096;
constexpr uint64_t kMaxPipeSize = uint64_t{1} << 30;
constexpr uint64_t kMaxWorkers = 1024;
// io_uring_setup_buf_ring() takes at most 32768 entries (IORING_MAX_ENTRIES of a buffer ring).
constexpr uint64_t kMaxBufferRingEntries = 32768;
constexpr uint64_t kMinBufferSize = 512;
constexpr uint64_t kMaxBufferSize = uint64_t{1} << 24;
constexpr uint64_t kMinAuditBufferBytes = uint64_t{1} << 20;

// ---- Names of enumerated values: one table per type serves parsing, help defaults and errors.

template <typename E>
struct Named {
    const char* name;
    E value;
};

constexpr Named<AuditDurability> kDurabilityNames[] = {{"strict", AuditDurability::Strict},
                                                       {"batch", AuditDurability::Batch},
                                                       {"none", AuditDurability::None}};
constexpr Named<AuditOnError> kOnErrorNames[] = {{"fail-closed", AuditOnError::FailClosed},
                                                 {"fail-open", AuditOnError::FailOpen}};
constexpr Named<SpliceEngine> kEngineNames[] = {{"chain", SpliceEngine::Chain},
                                                {"inline", SpliceEngine::Inline}};
constexpr Named<XdpMode> kXdpModeNames[] = {
    {"native", XdpMode::Native}, {"generic", XdpMode::Generic}, {"auto", XdpMode::Auto}};
constexpr Named<LogLevel> kLogLevelNames[] = {{"debug", LogLevel::Debug},
                                              {"info", LogLevel::Info},
                                              {"warn", LogLevel::Warn},
                                              {"error", LogLevel::Error}};
constexpr Named<Lane> kLaneNames[] = {
    {"auto", Lane::Auto}, {"splice", Lane::Splice}, {"buffer", Lane::Buffer}};
constexpr Named<AuditWriterKind> kAuditWriterNames[] = {{"direct", AuditWriterKind::Direct},
                                                        {"splice", AuditWriterKind::Splice}};
constexpr Named<bool> kOnOffNames[] = {{"on", true},     {"off", false}, {"true", true},
                                       {"false", false}, {"yes", true},  {"no", false},
                                       {"1", true},      {"0", false}};
constexpr Named<bool> kBoolNames[] = {{"true", true}, {"false", false}, {"yes", true},
                                      {"no", false},  {"1", true},      {"0", false}};

template <typename E, std::size_t N>
const char* nameOf(const Named<E> (&table)[N], E value) noexcept {
    for (const auto& entry : table)
        if (entry.value == value) return entry.name;
    return "?";
}

template <typename E, std::size_t N>
std::optional<E> valueOf(const Named<E> (&table)[N], std::string_view text) noexcept {
    for (const auto& entry : table)
        if (text == entry.name) return entry.value;
    return std::nullopt;
}

// "strict, batch or none", for error messages.
template <typename E, std::size_t N>
std::string choicesOf(const Named<E> (&table)[N]) {
    std::string out;
    for (std::size_t i = 0; i < N; ++i) {
        if (i > 0) out += i + 1 == N ? " or " : ", ";
        out += table[i].name;
    }
    return out;
}

template <typename E, std::size_t N>
E parseChoice(const Named<E> (&table)[N], const std::string& text, const std::string& label) {
    if (auto value = valueOf(table, text)) return *value;
    throw UsageError(label + ": invalid value '" + text + "' (expected " + choicesOf(table) + ")");
}

// ---- Value checks shared by the command line, the file's top level and route sections.

uint64_t parseNumber(const std::string& text, uint64_t min, uint64_t max,
                     const std::string& label) {
    // Every number is read as a string first: Boost would silently wrap "-1" into an unsigned.
    uint64_t value = 0;
    const char* end = text.data() + text.size();
    auto [stop, error] = std::from_chars(text.data(), end, value);
    if (error == std::errc::invalid_argument || stop != end)
        throw UsageError(label + ": invalid value '" + text +
                         "' (expected a non-negative integer)");
    if (error == std::errc::result_out_of_range || value < min || value > max)
        throw UsageError(label + ": value '" + text + "' out of range " + std::to_string(min) +
                         ".." + std::to_string(max));
    return value;
}

SocketAddress parseListenAddress(const std::string& text, const std::string& label) {
    auto address = SocketAddress::parseNumeric(text);
    if (!address || address->port() == 0)
        throw UsageError(label + ": invalid address '" + text +
                         "' (expected numeric IPv4:PORT or [IPv6]:PORT, port 1..65535)");
    return *address;
}

UpstreamConfig resolveUpstream(const std::string& text, const std::string& label) {
    std::string host;
    unsigned port = 0;
    // Port 0 cannot be connected to; refuse it before spending a DNS lookup on the host.
    if (splitHostPort(text, host, port) && port == 0)
        throw UsageError(label + ": invalid address '" + text + "' (port must be 1..65535)");
    if (!SocketAddress::parseNumeric(text) && !splitHostPort(text, host, port))
        throw UsageError(label + ": invalid address '" + text +
                         "' (expected HOST:PORT, ADDR:PORT or [IPv6]:PORT)");
    // The syntax is right: whatever fails now is the name service, which may answer later.
    try {
        return UpstreamConfig{text, SocketAddress::resolve(text), {}};
    } catch (const UsageError& error) {
        return UpstreamConfig{text, {}, error.what()};
    }
}

// "10.0.0.1/8" -> "10.0.0.0/8"; a bare address is a host prefix (/32, /128). Host bits are
// cleared so that the same prefix always has the same text (XDP rule add/delete match on it).
std::string normalizeCidr(const std::string& text, const std::string& label) {
    auto invalid = [&] {
        return UsageError(label + ": invalid CIDR '" + text +
                          "' (expected a.b.c.d/0..32 or an IPv6 prefix /0..128)");
    };
    auto slash = text.find('/');
    std::string addressText = text.substr(0, slash);
    bool isV6 = addressText.find(':') != std::string::npos;
    unsigned maxLength = isV6 ? 128 : 32;
    unsigned char bytes[16] = {};
    if (inet_pton(isV6 ? AF_INET6 : AF_INET, addressText.c_str(), bytes) != 1) throw invalid();
    unsigned length = maxLength;
    if (slash != std::string::npos) {
        const char* begin = text.data() + slash + 1;
        const char* end = text.data() + text.size();
        auto [stop, error] = std::from_chars(begin, end, length);
        if (error != std::errc{} || stop != end || begin == end || length > maxLength)
            throw invalid();
    }
    for (unsigned bit = length; bit < maxLength; ++bit)
        bytes[bit / 8] &= static_cast<unsigned char>(~(0x80u >> (bit % 8)));
    char normalized[INET6_ADDRSTRLEN] = {};
    inet_ntop(isV6 ? AF_INET6 : AF_INET, bytes, normalized, sizeof normalized);
    return std::string(normalized) + "/" + std::to_string(length);
}

bool isValidRouteName(const std::string& name) {
    if (name.empty() || name.size() > kMaxRouteNameLength) return false;
    for (char c : name) {
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-';
        if (!ok) return false;
    }
    return true;
}

// A config file is a few KiB. Only a regular file is read (a FIFO would block the reload, the
// admin command and SIGTERM behind it; /dev/zero would grow without end), and at most 1 MiB.
constexpr std::size_t kMaxConfigBytes = 1 << 20;

std::string readConfigFile(const std::string& path) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    if (!fd) throw UsageError("cannot open config file '" + path + "': " + errnoText(errno));
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0)
        throw UsageError("cannot read config file '" + path + "': " + errnoText(errno));
    if (!S_ISREG(st.st_mode)) throw UsageError("config file '" + path + "' is not a regular file");
    std::string text;
    char buffer[4096];
    for (;;) {
        ssize_t count = ::read(fd.get(), buffer, sizeof buffer);
        if (count == 0) return text;
        if (count > 0) {
            text.append(buffer, static_cast<std::size_t>(count));
            if (text.size() > kMaxConfigBytes)
                throw UsageError("config file '" + path + "' is larger than " +
                                 std::to_string(kMaxConfigBytes) + " bytes");
        } else if (errno != EINTR) {
            throw UsageError("cannot read config file '" + path + "': " + errnoText(errno));
        }
    }
}

std::string trimmed(std::string_view text) {
    constexpr std::string_view kSpace = " \t\r\n";
    auto first = text.find_first_not_of(kSpace);
    if (first == std::string_view::npos) return {};
    auto last = text.find_last_not_of(kSpace);
    return std::string(text.substr(first, last - first + 1));
}

// Boost's INI parser drops a section header that no key follows, so an empty [route.NAME] would
// vanish silently. This lists the headers, by Boost's own rules (comment cut at '#', trimmed,
// "[...]"), only so that such sections can be reported; Boost still parses every key.
std::vector<std::string> sectionHeaders(const std::string& text) {
    std::vector<std::string> headers;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
        std::string content = trimmed(std::string_view(line).substr(0, line.find('#')));
        if (content.size() >= 2 && content.front() == '[' && content.back() == ']')
            headers.push_back(content.substr(1, content.size() - 2));
    }
    return headers;
}

// Boost rejects "--name=" outright, yet an empty value is how an operator turns off the admin
// socket, the metrics endpoint or the audit ("--audit-dir="). Such a token is handed to Boost as
// "--name" followed by an empty value, for options that take a value.
std::vector<std::string> splitEmptyValues(const std::vector<std::string>& args,
                                          const po::options_description& options) {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& arg = args[i];
        if (arg == "--") {  // the rest are not options
            out.insert(out.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
            break;
        }
        bool emptyValue =
            arg.size() > 3 && arg.starts_with("--") && arg.find('=') == arg.size() - 1;
        const auto* option =
            emptyValue ? options.find_nothrow(arg.substr(2, arg.size() - 3), false) : nullptr;
        if (option != nullptr && option->semantic()->max_tokens() > 0) {
            out.push_back(arg.substr(0, arg.size() - 1));
            out.emplace_back();
        } else {
            out.push_back(arg);
        }
    }
    return out;
}

// ---- Option descriptions. Defaults shown in --help come from a default-constructed Config so
// that the struct stays the one place where they are written down.

po::typed_value<std::string>* scalar(const char* valueName) {
    return po::value<std::string>()->value_name(valueName);
}

po::typed_value<std::string>* scalar(const char* valueName, const std::string& defaultText) {
    return scalar(valueName)->default_value(defaultText);
}

po::typed_value<std::vector<std::string>>* repeatable(const char* valueName) {
    return po::value<std::vector<std::string>>()->value_name(valueName);
}

// One option per line reads better than the formatter's layout of a call chain.
// clang-format off
po::options_description routeAndServiceOptions(const Config& d) {
    po::options_description options("Routes and service");
    options.add_options()
        ("listen", scalar("ADDR:PORT"),
         "listener of the route named 'default' (IPv4:PORT or [IPv6]:PORT)")
        ("upstream", repeatable("HOST:PORT"),
         "upstream of 'default'; repeatable: round robin, next one on connect failure")
        ("workers", scalar("N", std::to_string(d.workers)),
         "worker threads, each with its own io_uring; 0 = one per CPU (at most 1024)")
        ("admin-socket", scalar("PATH", d.adminSocket), "admin Unix socket; empty = none")
        ("admin-group", scalar("NAME", d.adminGroup),
         "group allowed on the admin socket besides root")
        ("metrics-listen", scalar("ADDR:PORT", d.metricsListen),
         "Prometheus endpoint /metrics; empty = none")
        ("admin-readonly-group", scalar("NAME"),
         "group allowed read-only admin commands (status, connections, version, xdp list); "
         "none by default")
        ("log-level", scalar("LEVEL", nameOf(kLogLevelNames, d.logLevel)),
         "debug, info, warn or error; logs go to stderr")
        ("access-log", scalar("on|off", nameOf(kOnOffNames, d.accessLog)),
         "one info line per closed connection");
    return options;
}

po::options_description auditOptions(const Config& d) {
    po::options_description options("Audit");
    options.add_options()
        ("audit-dir", scalar("DIR", d.auditDir), "audit log directory; empty = audit off")
        ("audit-durability", scalar("MODE", nameOf(kDurabilityNames, d.auditDurability)),
         "strict: forward a chunk only once it is durable; batch: durable within the fsync "
         "interval; none: page cache only")
        ("audit-fsync-interval-ms", scalar("N", std::to_string(d.auditFsyncIntervalMs)),
         "batch mode's bound (at least 1)")
        ("audit-on-error", scalar("MODE", nameOf(kOnErrorNames, d.auditOnError)),
         "fail-closed: close the affected connections on an audit write error; fail-open: go on "
         "forwarding and count the lost bytes")
        ("audit-retention-bytes", scalar("N", std::to_string(d.auditRetentionBytes)),
         "delete oldest closed audit data above this size; 0 = keep all")
        ("audit-retention-hours", scalar("N", std::to_string(d.auditRetentionHours)),
         "delete closed audit data older than this; 0 = keep all")
        ("audit-writer", scalar("W", nameOf(kAuditWriterNames, d.auditWriter)),
         "direct: O_DIRECT writes from registered aligned buffers (buffered where the filesystem "
         "refuses O_DIRECT); splice: splice into the page cache")
        ("audit-buffer-bytes", scalar("N", std::to_string(d.auditBufferBytes)),
         "per worker, audited bytes not yet written (at least 1 MiB); when full, audited flows "
         "stop reading")
        ("audit-group", scalar("NAME"),
         "group that may read audit files (files 0640, directory 0750); default: the daemon's")
        ("audit-hmac-key-file", scalar("FILE"),
         "key for the audit log's sealing HMAC; none = hash chain without a key");
    return options;
}

po::options_description relayOptions(const Config& d) {
    po::options_description options("Relay");
    options.add_options()
        ("splice-engine", scalar("E"),
         "chain (linked io_uring splice/tee SQEs) or inline (direct non-blocking splice/tee); "
         "default: the fastest measured")
        ("lane", scalar("L", nameOf(kLaneNames, d.lane)),
         "auto: a flow starts in the buffer lane and moves to splice while its reads stay large; "
         "splice: always splice; buffer: always the buffer lane")
        ("buffer-ring-entries", scalar("N", std::to_string(d.bufferRingEntries)),
         "provided buffers per worker ring (a power of two, at most 32768)")
        ("buffer-size", scalar("BYTES", std::to_string(d.bufferSize)),
         "size of each provided buffer (512..16 MiB)")
        ("delayed-ack", scalar("on|off", nameOf(kOnOffNames, d.delayedAck)),
         "the relay's sockets delay their ACKs so that they ride on the reply; off: the "
         "kernel's quick ACKs at connection start")
        ("client-tcp-congestion", scalar("ALGO"),
         "TCP congestion control of the sockets accepted from clients (TCP_CONGESTION); "
         "default: the system's (net.ipv4.tcp_congestion_control)")
        ("upstream-tcp-congestion", scalar("ALGO"),
         "TCP congestion control of the sockets connected to upstreams; default: the system's")
        ("sqpoll", scalar("on|off")->implicit_value("on"),
         "kernel-side submission polling for the workers' rings (off by default)")
        ("pipe-size", scalar("BYTES", std::to_string(d.pipeSize)),
         "target pipe capacity (4096..1 GiB), clamped to what the system allows")
        ("pipe-budget", scalar("BYTES", std::to_string(d.pipeBudgetBytes)),
         "extension: cap on the capacity of all pipes together; 0 = the system's limit")
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
         "on SIGTERM, how long in-flight connections may finish");
    return options;
}

po::options_description xdpOptions(const Config& d) {
    po::options_description options("XDP edge filter");
    options.add_options()
        ("xdp-interface", scalar("IFNAME"), "attach the edge filter there; none = no XDP")
        ("xdp-mode", scalar("MODE", nameOf(kXdpModeNames, d.xdpMode)),
         "native, generic, or auto (native, else generic)")
        ("xdp-deny", repeatable("CIDR"), "repeatable; IPv4 or IPv6 prefix dropped at the edge")
        ("xdp-allow", repeatable("CIDR"),
         "repeatable; passes even when a deny prefix or the SYN limit matches")
        ("xdp-syn-rate", scalar("N", std::to_string(d.xdpSynRate)),
         "SYNs per second per source prefix to the listen ports; 0 = no limit")
        ("xdp-syn-burst", scalar("N", std::to_string(d.xdpSynBurst)),
         "burst above the rate; 0 = the rate")
        ("xdp-syn-prefix-v4", scalar("LEN", std::to_string(d.xdpSynPrefixV4)),
         "IPv4 sources in one /LEN share a SYN limit; 32 = per address")
        ("xdp-syn-prefix-v6", scalar("LEN", std::to_string(d.xdpSynPrefixV6)),
         "IPv6 sources in one /LEN share a SYN limit; 128 = per address")
        ("xdp-syn-new-source-rate", scalar("N", std::to_string(d.xdpSynNewSourceRate)),
         "SYNs per second, all together, from source prefixes the SYN limit has no state for "
         "(new or evicted); bounds spoofed floods; 0 = no bound")
        ("xdp-syn-new-source-burst", scalar("N", std::to_string(d.xdpSynNewSourceBurst)),
         "burst above the new-source rate; 0 = that rate");
    return options;
}

// The options valid both on the command line and as INI keys.
po::options_description sharedOptions() {
    const Config defaults;
    po::options_description options;
    options.add(routeAndServiceOptions(defaults))
        .add(auditOptions(defaults))
        .add(relayOptions(defaults))
        .add(xdpOptions(defaults));
    return options;
}

po::options_description commandLineOnlyOptions() {
    po::options_description options("Command line only");
    options.add_options()
        ("config", scalar("FILE"), "INI config file (re-read on SIGHUP)")
        ("check-config",
         "check the configuration (parse, resolve, audit directory usable) and exit 0, or 2 "
         "with one line per problem; binds nothing, changes nothing")
        ("help,h", "print this help and exit")
        ("version", "print the version and exit");
    return options;
}
// clang-format on

constexpr const char* kConfigFileHelp =
    "\nConfig file (INI): every option above except config, help and version is a key without\n"
    "the dashes, e.g. \"workers = 4\". The command line wins; a repeatable option given on the\n"
    "command line replaces the file's values. More routes come from sections:\n"
    "  [route.NAME]           NAME: letters, digits, '_' or '-'; at most 64\n"
    "  listen = ADDR:PORT     required\n"
    "  upstream = HOST:PORT   required, repeatable\n"
    "  audit = true|false     default true\n"
    "  health-check-interval-ms = N   active TCP checks of the upstreams; default 0 = off\n";

std::string helpText(const po::options_description& commandLineOnly,
                     const po::options_description& shared) {
    std::ostringstream out;
    out << kUsageLine << "\nTCP relay that records every forwarded byte in audit logs.\n\n"
        << commandLineOnly << shared << kConfigFileHelp;
    return out.str();
}

// ---- The parser: command line, then file, then validation into a Config.

struct RouteSection {
    std::string name;
    std::optional<std::string> listen;
    std::vector<std::string> upstreams;
    std::optional<std::string> audit;
    std::optional<std::string> healthCheckIntervalMs;
};

class ConfigParser {
  public:
    explicit ConfigParser(const std::vector<std::string>& args) : args_(args) {}

    CommandLine parse() {
        auto shared = sharedOptions();
        auto commandLineOnly = commandLineOnlyOptions();
        po::options_description all;
        all.add(commandLineOnly).add(shared);
        CommandLine result;
        parseArguments(all);
        if (values_.count("help")) {
            result.action = CommandLine::Action::Help;
            result.helpText = helpText(commandLineOnly, shared);
        } else if (values_.count("version")) {
            result.action = CommandLine::Action::Version;
        } else {
            if (values_.count("check-config")) result.action = CommandLine::Action::CheckConfig;
            if (values_.count("config")) parseFile(shared);
            result.config = build();
        }
        return result;
    }

  private:
    void parseArguments(const po::options_description& all) {
        // No guessing: "--work" must not silently mean --workers in a production config.
        constexpr int kStyle =
            po::command_line_style::default_style & ~po::command_line_style::allow_guessing;
        try {
            auto parsed = po::command_line_parser(splitEmptyValues(args_, all))
                              .options(all)
                              .style(kStyle)
                              .run();
            for (const auto& option : parsed.options) {
                if (option.string_key.empty())
                    throw UsageError("unexpected argument '" + option.original_tokens.front() +
                                     "' (options only; see --help)");
                fromCommandLine_.insert(option.string_key);
            }
            po::store(parsed, values_);
        } catch (const po::error& error) {
            throw UsageError(error.what());
        }
    }

    void parseFile(const po::options_description& shared) {
        file_ = values_["config"].as<std::string>();
        std::string text = readConfigFile(file_);
        try {
            std::istringstream stream(text);
            auto parsed = po::parse_config_file(stream, shared, /*allow_unregistered=*/true);
            for (const auto& header : sectionHeaders(text)) addSection(header);
            for (const auto& option : parsed.options)
                if (option.unregistered) addRouteKey(option);
            po::store(parsed, values_);
        } catch (const po::error& error) {
            throw UsageError(file_ + ": " + error.what());
        }
    }

    void addSection(const std::string& header) {
        if (!header.starts_with(kRoutePrefix))
            throw UsageError(file_ + ": unknown section '[" + header +
                             "]' (only [route.NAME] sections exist)");
        routeSection(header.substr(kRoutePrefix.size()));
    }

    // Boost hands keys it does not know as "route.NAME.KEY" (section prefix + key).
    void addRouteKey(const po::option& option) {
        const std::string& key = option.string_key;
        auto lastDot = key.rfind('.');
        if (!key.starts_with(kRoutePrefix) || lastDot < kRoutePrefix.size())
            throw UsageError(file_ + ": unknown key '" + key + "'");
        auto& section =
            routeSection(key.substr(kRoutePrefix.size(), lastDot - kRoutePrefix.size()));
        std::string field = key.substr(lastDot + 1);
        std::string value = option.value.empty() ? std::string() : option.value.front();
        if (field == "listen") {
            setOnce(section, section.listen, field, value);
        } else if (field == "upstream") {
            section.upstreams.push_back(value);
        } else if (field == "audit") {
            setOnce(section, section.audit, field, value);
        } else if (field == "health-check-interval-ms") {
            setOnce(section, section.healthCheckIntervalMs, field, value);
        } else {
            throw UsageError(routeLabel(section.name) + ": unknown key '" + field +
                             "' (expected listen, upstream, audit or health-check-interval-ms)");
        }
    }

    void setOnce(const RouteSection& section, std::optional<std::string>& slot,
                 const std::string& field, const std::string& value) {
        if (slot) throw UsageError(routeLabel(section.name) + ": " + field + " given twice");
        slot = value;
    }

    RouteSection& routeSection(const std::string& name) {
        for (auto& section : sections_)
            if (section.name == name) return section;
        if (!isValidRouteName(name))
            throw UsageError(file_ + ": invalid route name '" + name +
                             "' in [route.NAME] (letters, digits, '_' or '-'; 1..64 characters)");
        sections_.push_back(RouteSection{name, {}, {}, {}, {}});
        return sections_.back();
    }

    Config build() const {
        Config config;
        config.configFile = file_;
        applyServiceOptions(config);
        applyAuditOptions(config);
        applyRelayOptions(config);
        applyXdpOptions(config);
        config.routes = buildRoutes();
        return config;
    }

    void applyServiceOptions(Config& config) const {
        config.workers = number<unsigned>("workers", 0, kMaxWorkers);
        config.adminSocket = text("admin-socket");
        config.adminGroup = text("admin-group");
        config.metricsListen = text("metrics-listen");
        if (!config.metricsListen.empty())
            parseListenAddress(config.metricsListen, label("metrics-listen"));
        config.logLevel = choice(kLogLevelNames, "log-level");
        config.accessLog = choice(kOnOffNames, "access-log");
        config.adminReadonlyGroup = text("admin-readonly-group");
    }

    void applyAuditOptions(Config& config) const {
        config.auditDir = text("audit-dir");
        config.auditDurability = choice(kDurabilityNames, "audit-durability");
        config.auditFsyncIntervalMs = number<uint32_t>("audit-fsync-interval-ms", 1);
        config.auditOnError = choice(kOnErrorNames, "audit-on-error");
        config.auditRetentionBytes = number<uint64_t>("audit-retention-bytes");
        config.auditRetentionHours = number<uint64_t>("audit-retention-hours");
        config.auditWriter = choice(kAuditWriterNames, "audit-writer");
        config.auditBufferBytes = number<uint64_t>("audit-buffer-bytes", kMinAuditBufferBytes);
        config.auditGroup = text("audit-group");
        config.auditHmacKeyFile = text("audit-hmac-key-file");
        if (values_.count("audit-hmac-key-file") && config.auditHmacKeyFile.empty())
            throw UsageError(label("audit-hmac-key-file") + ": empty file name");
    }

    void applyRelayOptions(Config& config) const {
        if (values_.count("splice-engine"))
            config.spliceEngine = choice(kEngineNames, "splice-engine");
        config.pipeSize = number<uint64_t>("pipe-size", kMinPipeSize, kMaxPipeSize);
        config.pipeBudgetBytes = number<uint64_t>("pipe-budget");
        config.maxConnections = number<uint64_t>("max-connections", 1);
        config.connectTimeoutMs = number<uint32_t>("connect-timeout-ms");
        config.idleTimeoutMs = number<uint32_t>("idle-timeout-ms");
        config.halfClosedTimeoutMs = number<uint32_t>("half-closed-timeout-ms");
        config.drainTimeoutMs = number<uint32_t>("drain-timeout-ms");
        config.maxConnectionsPerSource = number<uint64_t>("max-connections-per-source");
        config.lane = choice(kLaneNames, "lane");
        config.bufferRingEntries =
            number<uint32_t>("buffer-ring-entries", 1, kMaxBufferRingEntries);
        if (!std::has_single_bit(config.bufferRingEntries))
            throw UsageError(label("buffer-ring-entries") + ": value '" +
                             text("buffer-ring-entries") + "' is not a power of two");
        config.bufferSize = number<uint32_t>("buffer-size", kMinBufferSize, kMaxBufferSize);
        if (values_.count("sqpoll")) config.sqpoll = choice(kOnOffNames, "sqpoll");
        config.delayedAck = choice(kOnOffNames, "delayed-ack");
        config.clientCongestion = congestionName("client-tcp-congestion");
        config.upstreamCongestion = congestionName("upstream-tcp-congestion");
    }

    // A name TCP_CONGESTION could take (the kernel's TCP_CA_NAME_MAX); whether this kernel has
    // it is checked at start (congestionControlProblems).
    std::string congestionName(const std::string& key) const {
        std::string name = text(key);
        bool wellFormed = name.size() < kCongestionNameMax &&
                          std::all_of(name.begin(), name.end(), [](unsigned char c) {
                              return std::isalnum(c) != 0 || c == '_' || c == '-';
                          });
        if (!wellFormed)
            throw UsageError(label(key) + ": '" + name +
                             "' is no congestion control name (letters, digits, '_' or '-'; at "
                             "most " +
                             std::to_string(kCongestionNameMax - 1) + " characters)");
        return name;
    }

    void applyXdpOptions(Config& config) const {
        config.xdpInterface = text("xdp-interface");
        if (config.xdpInterface.size() >= IFNAMSIZ)
            throw UsageError(label("xdp-interface") + ": interface name '" + config.xdpInterface +
                             "' is longer than " + std::to_string(IFNAMSIZ - 1) + " characters");
        config.xdpMode = choice(kXdpModeNames, "xdp-mode");
        for (const auto& cidr : list("xdp-deny"))
            config.xdpDeny.push_back(normalizeCidr(cidr, label("xdp-deny")));
        for (const auto& cidr : list("xdp-allow"))
            config.xdpAllow.push_back(normalizeCidr(cidr, label("xdp-allow")));
        config.xdpSynRate = number<uint32_t>("xdp-syn-rate");
        config.xdpSynBurst = number<uint32_t>("xdp-syn-burst");
        config.xdpSynPrefixV4 = number<uint32_t>("xdp-syn-prefix-v4", 1, 32);
        config.xdpSynPrefixV6 = number<uint32_t>("xdp-syn-prefix-v6", 1, 128);
        config.xdpSynNewSourceRate = number<uint32_t>("xdp-syn-new-source-rate");
        config.xdpSynNewSourceBurst = number<uint32_t>("xdp-syn-new-source-burst");
    }

    std::vector<RouteConfig> buildRoutes() const {
        std::vector<RouteConfig> routes;
        if (auto route = defaultRoute()) routes.push_back(std::move(*route));
        for (const auto& section : sections_) {
            if (!routes.empty() && routes.front().name == section.name)
                throw UsageError(routeLabel(section.name) +
                                 " conflicts with --listen/--upstream, which make the route "
                                 "named 'default'");
            routes.push_back(sectionRoute(section));
        }
        if (routes.empty()) throw UsageError(kNoRouteMessage);
        rejectSharedListeners(routes);
        rejectOwnListenerUpstreams(routes, ListenerMatcher::withLocalAddresses());
        return routes;
    }

    std::optional<RouteConfig> defaultRoute() const {
        bool hasListen = values_.count("listen") > 0;
        bool hasUpstream = values_.count("upstream") > 0;
        if (!hasListen && !hasUpstream) return std::nullopt;
        if (!hasUpstream)
            throw UsageError(label("listen") + " '" + text("listen") +
                             "' given without --upstream (the route needs both)");
        if (!hasListen)
            throw UsageError(label("upstream") + " given without --listen (the route needs both)");
        RouteConfig route;
        route.name = "default";
        route.listen = parseListenAddress(text("listen"), label("listen"));
        for (const auto& upstream : list("upstream"))
            route.upstreams.push_back(resolveUpstream(upstream, label("upstream")));
        return route;
    }

    RouteConfig sectionRoute(const RouteSection& section) const {
        std::string where = routeLabel(section.name);
        if (!section.listen && section.upstreams.empty() && !section.audit &&
            !section.healthCheckIntervalMs)
            throw UsageError(where + " is empty: it needs listen and upstream");
        if (!section.listen) throw UsageError(where + ": missing listen");
        if (section.upstreams.empty()) throw UsageError(where + ": missing upstream");
        RouteConfig route;
        route.name = section.name;
        route.listen = parseListenAddress(*section.listen, where + ": listen");
        for (const auto& upstream : section.upstreams)
            route.upstreams.push_back(resolveUpstream(upstream, where + ": upstream"));
        if (section.audit) route.audit = parseChoice(kBoolNames, *section.audit, where + ": audit");
        if (section.healthCheckIntervalMs)
            route.healthCheckIntervalMs = static_cast<uint32_t>(
                parseNumber(*section.healthCheckIntervalMs, 0, std::numeric_limits<uint32_t>::max(),
                            where + ": health-check-interval-ms"));
        return route;
    }

    static void rejectSharedListeners(const std::vector<RouteConfig>& routes) {
        for (std::size_t i = 0; i < routes.size(); ++i)
            for (std::size_t j = i + 1; j < routes.size(); ++j)
                if (routes[i].listen == routes[j].listen)
                    throw UsageError("listen address " + routes[i].listen.toString() +
                                     " is used by both route '" + routes[i].name + "' and route '" +
                                     routes[j].name + "'");
    }

    // An upstream that is one of the daemon's own listeners would loop each connection back into
    // the relay, fanning it out until a limit hits and auditing its payload at every turn.
    void rejectOwnListenerUpstreams(const std::vector<RouteConfig>& routes,
                                    const ListenerMatcher& matcher) const {
        for (const auto& route : routes)
            for (const auto& upstream : route.upstreams)
                for (const auto& address : upstream.addresses)
                    if (auto owner = matcher.routeListeningOn(address, routes))
                        throw UsageError(upstreamLabel(route.name) + " '" + upstream.text + "' (" +
                                         address.toString() +
                                         ") is the daemon's own listener of route '" + *owner +
                                         "'");
    }

    std::string upstreamLabel(const std::string& routeName) const {
        if (routeName == "default" && values_.count("listen")) return label("upstream") + ":";
        return routeLabel(routeName) + ": upstream";
    }

    // How an error names the option: as the user wrote it, on the command line or in the file.
    std::string label(const std::string& key) const {
        if (file_.empty() || fromCommandLine_.count(key)) return "--" + key;
        return file_ + ": " + key;
    }

    std::string routeLabel(const std::string& name) const {
        return file_ + ": route '" + name + "'";
    }

    std::string text(const std::string& key) const {
        auto found = values_.find(key);
        return found == values_.end() ? std::string() : found->second.as<std::string>();
    }

    std::vector<std::string> list(const std::string& key) const {
        auto found = values_.find(key);
        if (found == values_.end()) return {};
        return found->second.as<std::vector<std::string>>();
    }

    template <typename T>
    T number(const std::string& key, uint64_t min = 0,
             uint64_t max = std::numeric_limits<T>::max()) const {
        return static_cast<T>(parseNumber(text(key), min, max, label(key)));
    }

    template <typename E, std::size_t N>
    E choice(const Named<E> (&table)[N], const std::string& key) const {
        return parseChoice(table, text(key), label(key));
    }

    std::vector<std::string> args_;
    po::variables_map values_;
    std::set<std::string> fromCommandLine_;
    std::string file_;
    std::vector<RouteSection> sections_;
};

}  // namespace

bool operator==(const RouteConfig& a, const RouteConfig& b) noexcept {
    if (a.name != b.name || !(a.listen == b.listen) || a.audit != b.audit ||
        a.healthCheckIntervalMs != b.healthCheckIntervalMs ||
        a.upstreams.size() != b.upstreams.size())
        return false;
    for (std::size_t i = 0; i < a.upstreams.size(); ++i)
        if (a.upstreams[i].text != b.upstreams[i].text ||
            a.upstreams[i].addresses != b.upstreams[i].addresses)
            return false;
    return true;
}

std::vector<std::string> settingsNeedingRestart(const Config& running, const Config& next) {
    std::vector<std::string> changed;
    auto check = [&](const char* name, const auto& a, const auto& b) {
        if (!(a == b)) changed.emplace_back(name);
    };
    check("workers", running.workers, next.workers);
    check("admin-socket", running.adminSocket, next.adminSocket);
    check("admin-group", running.adminGroup, next.adminGroup);
    check("admin-readonly-group", running.adminReadonlyGroup, next.adminReadonlyGroup);
    check("metrics-listen", running.metricsListen, next.metricsListen);
    check("access-log", running.accessLog, next.accessLog);
    check("audit-dir", running.auditDir, next.auditDir);
    check("audit-durability", running.auditDurability, next.auditDurability);
    check("audit-fsync-interval-ms", running.auditFsyncIntervalMs, next.auditFsyncIntervalMs);
    check("audit-on-error", running.auditOnError, next.auditOnError);
    check("audit-retention-bytes", running.auditRetentionBytes, next.auditRetentionBytes);
    check("audit-retention-hours", running.auditRetentionHours, next.auditRetentionHours);
    check("audit-writer", running.auditWriter, next.auditWriter);
    check("audit-buffer-bytes", running.auditBufferBytes, next.auditBufferBytes);
    check("audit-group", running.auditGroup, next.auditGroup);
    check("audit-hmac-key-file", running.auditHmacKeyFile, next.auditHmacKeyFile);
    check("splice-engine", running.spliceEngine, next.spliceEngine);
    check("lane", running.lane, next.lane);
    check("buffer-ring-entries", running.bufferRingEntries, next.bufferRingEntries);
    check("buffer-size", running.bufferSize, next.bufferSize);
    check("sqpoll", running.sqpoll, next.sqpoll);
    check("delayed-ack", running.delayedAck, next.delayedAck);
    check("client-tcp-congestion", running.clientCongestion, next.clientCongestion);
    check("upstream-tcp-congestion", running.upstreamCongestion, next.upstreamCongestion);
    check("pipe-size", running.pipeSize, next.pipeSize);
    check("pipe-budget", running.pipeBudgetBytes, next.pipeBudgetBytes);
    check("max-connections", running.maxConnections, next.maxConnections);
    check("max-connections-per-source", running.maxConnectionsPerSource,
          next.maxConnectionsPerSource);
    check("connect-timeout-ms", running.connectTimeoutMs, next.connectTimeoutMs);
    check("idle-timeout-ms", running.idleTimeoutMs, next.idleTimeoutMs);
    check("half-closed-timeout-ms", running.halfClosedTimeoutMs, next.halfClosedTimeoutMs);
    check("drain-timeout-ms", running.drainTimeoutMs, next.drainTimeoutMs);
    check("xdp-interface", running.xdpInterface, next.xdpInterface);
    check("xdp-mode", running.xdpMode, next.xdpMode);
    return changed;
}

CommandLine parseCommandLine(int argc, const char* const* argv) {
    std::vector<std::string> args;
    for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
    return ConfigParser(args).parse();
}

Config loadConfig(const std::vector<std::string>& args) {
    auto result = ConfigParser(args).parse();
    if (result.action != CommandLine::Action::Run)
        throw UsageError("cannot reload: the daemon's arguments ask for --help or --version");
    return result.config;
}

const char* toString(SpliceEngine engine) noexcept {
    return nameOf(kEngineNames, engine);
}

const char* toString(AuditDurability durability) noexcept {
    return nameOf(kDurabilityNames, durability);
}

const char* toString(Lane lane) noexcept {
    return nameOf(kLaneNames, lane);
}

const char* toString(AuditWriterKind writer) noexcept {
    return nameOf(kAuditWriterNames, writer);
}

unsigned workerThreads(const Config& config) noexcept {
    return config.workers != 0 ? config.workers : std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace splicegate
