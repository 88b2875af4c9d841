#include "relay/Config.h"

#include <algorithm>
#include <boost/program_options.hpp>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include "common/Error.h"
#include "common/OptionValues.h"
#include "relay/ConfigFile.h"
#include "relay/ListenerMatcher.h"

namespace splicegate {
namespace po = boost::program_options;
namespace {

constexpr const char* kUsageLine = "Usage: splicegate [OPTIONS]";
constexpr const char* kNoRouteMessage =
    "no route configured: give --listen and --upstream, or a [route.NAME] section in --config";
constexpr std::string_view kRoutePrefix = "route.";
constexpr std::size_t kMaxRouteNameLength = 64;
constexpr uint64_t kMaxWorkers = 1024;

constexpr Named<ProxyProtocolMode> kProxyInNames[] = {{"off", ProxyProtocolMode::Off},
                                                     {"v1", ProxyProtocolMode::V1},
                                                     {"v2", ProxyProtocolMode::V2},
                                                     {"any", ProxyProtocolMode::Any}};
constexpr Named<ProxyProtocolMode> kProxyOutNames[] = {{"off", ProxyProtocolMode::Off},
                                                      {"v1", ProxyProtocolMode::V1},
                                                      {"v2", ProxyProtocolMode::V2}};

constexpr Named<LogLevel> kLogLevelNames[] = {{"debug", LogLevel::Debug},
                                              {"info", LogLevel::Info},
                                              {"warn", LogLevel::Warn},
                                              {"error", LogLevel::Error}};

UpstreamConfig resolveUpstreamAddress(const std::string& text, const std::string& label) {
    std::string host;
    unsigned port = 0;
    // Port 0 cannot be connected to; refuse it before spending a DNS lookup on the host.
    if (splitHostPort(text, host, port) && port == 0)
        throw UsageError(label + ": invalid address '" + text + "' (port must be 1..65535)");
    if (!SocketAddress::parseNumeric(text) && !splitHostPort(text, host, port))
        throw UsageError(label + ": invalid address '" + text +
                         "' (expected HOST:PORT, ADDR:PORT or [IPv6]:PORT)");
    // The syntax is right: whatever fails now is the name service, which may answer later.
    UpstreamConfig upstream;
    upstream.text = text;
    try {
        upstream.addresses = SocketAddress::resolve(text);
    } catch (const UsageError& error) {
        upstream.resolveError = error.what();
    }
    return upstream;
}

// "HOST:PORT [weight=N] [backup]" (relay/RouteSettings.h): the options, then the address.
UpstreamConfig resolveUpstream(const std::string& value, const std::string& label) {
    auto spec = parseUpstreamSpec(value, label);
    const std::string& text = spec.address;
    auto upstream = resolveUpstreamAddress(text, label);
    upstream.weight = spec.weight;
    upstream.backup = spec.backup;
    return upstream;
}

// "a, b,c" -> {"a", "b", "c"}; an empty item stays (and is an error where it is checked).
std::vector<std::string> commaList(const std::string& text) {
    std::vector<std::string> items;
    std::size_t start = 0;
    for (;;) {
        auto comma = text.find(',', start);
        std::string item = text.substr(start, comma == std::string::npos ? comma : comma - start);
        auto first = item.find_first_not_of(" \t");
        auto last = item.find_last_not_of(" \t");
        items.push_back(first == std::string::npos ? std::string()
                                                   : item.substr(first, last - first + 1));
        if (comma == std::string::npos) return items;
        start = comma + 1;
    }
}

// An `sni` entry: a host name, or "*." and one (lower-cased; a trailing dot dropped).
std::string serverNamePattern(const std::string& name, const std::string& label) {
    std::string body = name.starts_with("*.") ? name.substr(2) : name;
    if (!body.empty() && body.back() == '.') body.pop_back();
    bool ok = !body.empty() && body.size() <= 253 && body.front() != '.' &&
              body.find("..") == std::string::npos;
    for (char& c : body) {
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
        ok = ok && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
                    c == '.');
    }
    if (!ok)
        throw UsageError(label + ": '" + name +
                         "' is no server name (a host name, or *.NAME for any one more label)");
    return name.starts_with("*.") ? "*." + body : body;
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

// ---- Option descriptions: each module declares its own group (Config.h); this file only its
// own few (the default route, workers, log level) and the command-line-only ones.

// One option per line reads better than the formatter's layout of a call chain.
// clang-format off
po::options_description serviceOptions() {
    const Config d;
    po::options_description options;
    options.add_options()
        ("listen", scalar("ADDR:PORT"),
         "listener of the route named 'default' (IPv4:PORT or [IPv6]:PORT)")
        ("upstream", repeatable("HOST:PORT"),
         "upstream of 'default', 'HOST:PORT [weight=N] [backup]'; repeatable: weighted round "
         "robin, next one on connect failure")
        ("workers", scalar("N", std::to_string(d.workers)),
         "worker threads, each with its own io_uring; 0 = one per CPU (at most 1024)")
        ("log-level", scalar("LEVEL", nameOf(kLogLevelNames, d.logLevel)),
         "debug, info, warn or error; logs go to stderr");
    return options;
}
// clang-format on

// A section of --help: the options of its modules, those named in `first` leading in that
// order (from whichever module declares them), the rest after them in their module's order.
struct HelpSection {
    const char* caption;
    std::vector<po::options_description> modules;
    std::vector<std::string> first;
};

std::vector<HelpSection> helpSections() {
    return {
        {"Routes and service",
         {serviceOptions(), adminOptions(), metricsOptions()},
         {"listen", "upstream", "workers", "admin-socket", "admin-group", "metrics-listen",
          "admin-readonly-group", "log-level", "access-log", "access-log-format"}},
        {"Audit", {auditOptions()}, {}},
        {"Relay",
         {datapathOptions(), relayOptions()},
         {"splice-engine", "lane", "buffer-ring-entries", "buffer-size", "delayed-ack",
          "client-tcp-congestion", "upstream-tcp-congestion", "sqpoll"}},
        {"XDP edge filter", {xdpOptions()}, {}},
    };
}

// The options valid both on the command line and as INI keys, grouped as --help shows them.
po::options_description sharedOptions() {
    auto sections = helpSections();
    std::vector<boost::shared_ptr<po::option_description>> all;
    for (const auto& section : sections)
        for (const auto& module : section.modules)
            all.insert(all.end(), module.options().begin(), module.options().end());
    std::set<std::string> shown;
    auto show = [&](po::options_description& group, const auto& option) {
        if (shown.insert(option->long_name()).second) group.add(option);
    };
    po::options_description options;
    for (const auto& section : sections) {
        po::options_description group(section.caption);
        for (const auto& name : section.first)
            for (const auto& option : all)
                if (option->long_name() == name) show(group, option);
        for (const auto& module : section.modules)
            for (const auto& option : module.options()) show(group, option);
        options.add(group);
    }
    return options;
}

// clang-format off
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
    "  upstream = HOST:PORT [weight=N] [backup]   required, repeatable; weight 1..1000\n"
    "                         (default 1); backup: used only while no other upstream is up\n"
    "  audit = true|false     default true\n"
    "  health-check-interval-ms = N   active TCP checks of the upstreams; default 0 = off\n"
    "  idle-timeout-ms, half-closed-timeout-ms, connect-timeout-ms, max-connections,\n"
    "  max-connections-per-source, upstream-tcp-congestion, lane   the route's own value of the\n"
    "                         global option (applied by a reload)\n"
    "  sni = NAME[,NAME...]   chosen by the TLS server name among the routes of one listen\n"
    "                         address (exact names, *.example.com); passthrough, no TLS ended\n"
    "  proxy-protocol-in = off|v1|v2|any   sources in proxy-trusted send a PROXY header\n"
    "  proxy-trusted = CIDR[,CIDR...]      the load balancers allowed to send it\n"
    "  proxy-protocol-out = off|v1|v2      a PROXY header to the upstream first\n";

std::string helpText(const po::options_description& commandLineOnly,
                     const po::options_description& shared) {
    std::ostringstream out;
    out << kUsageLine << "\nTCP relay that records every forwarded byte in audit logs.\n\n"
        << commandLineOnly << shared << kConfigFileHelp;
    return out.str();
}

// ---- The keys of a [route.NAME] section. To add one: a row here, its field in RouteConfig
// (and in RouteConfig's operator==), docs/configuration.md, the man page and the example config.

template <auto Member, std::uint64_t Min = 0>
void applyRouteOverride(RouteConfig& route, const std::string& value, const std::string& label) {
    parseRouteOverride(route.overrides.*Member, value, label, Min);
}

struct RouteKey {
    const char* name;
    bool repeatable;
    // Checks `value` and sets it in `route`; throws UsageError starting with `label`.
    void (*apply)(RouteConfig& route, const std::string& value, const std::string& label);
};

const RouteKey kRouteKeys[] = {
    {"listen", false,
     [](RouteConfig& route, const std::string& value, const std::string& label) {
         route.listen = parseListenAddress(value, label);
     }},
    {"upstream", true,
     [](RouteConfig& route, const std::string& value, const std::string& label) {
         route.upstreams.push_back(resolveUpstream(value, label));
     }},
    {"audit", false,
     [](RouteConfig& route, const std::string& value, const std::string& label) {
         route.audit = parseChoice(kBoolNames, value, label);
     }},
    {"health-check-interval-ms", false,
     [](RouteConfig& route, const std::string& value, const std::string& label) {
         route.healthCheckIntervalMs = static_cast<uint32_t>(
             parseNumber(value, 0, std::numeric_limits<uint32_t>::max(), label));
     }},
    // The route's own values of global relay settings (relay/RouteSettings.h).
    {"idle-timeout-ms", false, applyRouteOverride<&RouteOverrides::idleTimeoutMs>},
    {"half-closed-timeout-ms", false, applyRouteOverride<&RouteOverrides::halfClosedTimeoutMs>},
    {"connect-timeout-ms", false, applyRouteOverride<&RouteOverrides::connectTimeoutMs, 1>},
    {"max-connections", false, applyRouteOverride<&RouteOverrides::maxConnections, 1>},
    {"max-connections-per-source", false,
     applyRouteOverride<&RouteOverrides::maxConnectionsPerSource>},
    {"upstream-tcp-congestion", false, applyRouteOverride<&RouteOverrides::upstreamCongestion>},
    {"sni", false,
     [](RouteConfig& route, const std::string& value, const std::string& label) {
         for (const auto& name : commaList(value))
             route.sni.push_back(serverNamePattern(name, label));
     }},
    {"proxy-protocol-in", false,
     [](RouteConfig& route, const std::string& value, const std::string& label) {
         route.proxyIn = parseChoice(kProxyInNames, value, label);
     }},
    {"proxy-trusted", false,
     [](RouteConfig& route, const std::string& value, const std::string& label) {
         for (const auto& cidr : commaList(value)) {
             auto parsed = Cidr::parse(cidr);
             if (!parsed)
                 throw UsageError(label + ": '" + cidr +
                                  "' is no IPv4 or IPv6 prefix (e.g. 10.0.0.0/8)");
             route.proxyTrusted.push_back(*parsed);
         }
     }},
    {"proxy-protocol-out", false,
     [](RouteConfig& route, const std::string& value, const std::string& label) {
         route.proxyOut = parseChoice(kProxyOutNames, value, label);
     }},
    {"lane", false, applyRouteOverride<&RouteOverrides::lane>},
};

// The PROXY protocol keys go together: a header is accepted only from named balancers.
void checkProxyKeys(const RouteConfig& route, bool trustedGiven, const std::string& where) {
    if (route.proxyIn != ProxyProtocolMode::Off && route.proxyTrusted.empty())
        throw UsageError(where + ": proxy-protocol-in needs proxy-trusted (the balancers "
                         "allowed to send the header)");
    if (route.proxyIn == ProxyProtocolMode::Off && trustedGiven)
        throw UsageError(where + ": proxy-trusted given without proxy-protocol-in");
}

// The keys a route cannot do without.
constexpr const char* kRequiredRouteKeys[] = {"listen", "upstream"};

const RouteKey* findRouteKey(const std::string& name) {
    for (const auto& key : kRouteKeys)
        if (name == key.name) return &key;
    return nullptr;
}

std::string routeKeyNames() {
    std::string out;
    for (std::size_t i = 0; i < std::size(kRouteKeys); ++i) {
        if (i > 0) out += i + 1 == std::size(kRouteKeys) ? " or " : ", ";
        out += kRouteKeys[i].name;
    }
    return out;
}

bool isRepeatable(const po::option_description& option) {
    return dynamic_cast<const po::typed_value<std::vector<std::string>>*>(
               option.semantic().get()) != nullptr;
}

// ---- The parser: command line, then file, then validation into a Config. Every problem is
// collected (a file's problems are all reported at once, each naming file, line and key);
// parse() throws ConfigErrors with all of them at the end.

struct RouteSection {
    std::string name;
    unsigned line = 0;                     // of the [route.NAME] header
    std::vector<ConfigFileEntry> entries;  // known keys only, each once unless repeatable
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
            if (values_.count("config")) parseFile(shared, commandLineOnly);
            result.config = build();
            if (!problems_.empty()) throw ConfigErrors(inFileOrder(std::move(problems_)));
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

    void parseFile(const po::options_description& shared,
                   const po::options_description& commandLineOnly) {
        file_ = values_["config"].as<std::string>();
        auto contents = splitConfigFile(file_, readConfigFile(file_));
        problems_ = std::move(contents.problems);
        // Boost still stores the top-level keys (the command line wins, a repeatable option
        // accumulates); what it would reject is reported here first, with its line.
        po::parsed_options parsed(&shared);
        for (const auto& entry : contents.topLevel) {
            std::string where = fileLine(file_, entry.line) + ": ";
            const auto* option = shared.find_nothrow(entry.key, false);
            if (option == nullptr) {
                bool commandLine = commandLineOnly.find_nothrow(entry.key, false) != nullptr;
                problems_.push_back(where + "unknown key '" + entry.key + "'" +
                                    (commandLine ? " (a command-line option only)" : ""));
                continue;
            }
            if (auto first = lines_.find(entry.key); first != lines_.end()) {
                if (!isRepeatable(*option)) {
                    problems_.push_back(where + entry.key + " given twice (first at line " +
                                        std::to_string(first->second) + ")");
                    continue;
                }
            } else {
                lines_[entry.key] = entry.line;
            }
            po::option stored(entry.key, {entry.value});
            stored.original_tokens = {entry.key, entry.value};
            parsed.options.push_back(std::move(stored));
        }
        try {
            po::store(parsed, values_);
        } catch (const po::error& error) {
            problems_.push_back(file_ + ": " + error.what());
        }
        for (auto& section : contents.sections) addSection(section);
    }

    void addSection(const ConfigFileSection& section) {
        std::string where = fileLine(file_, section.line) + ": ";
        if (!section.name.starts_with(kRoutePrefix)) {
            problems_.push_back(where + "unknown section '[" + section.name +
                                "]' (only [route.NAME] sections exist)");
            return;
        }
        std::string name = section.name.substr(kRoutePrefix.size());
        if (!isValidRouteName(name)) {
            problems_.push_back(where + "invalid route name '" + name +
                                "' in [route.NAME] (letters, digits, '_' or '-'; 1..64 "
                                "characters)");
            return;
        }
        RouteSection route{name, section.line, {}};
        std::map<std::string, unsigned> firstLines;
        for (const auto& entry : section.entries) {
            std::string label = routeLabel(name, entry.line);
            const RouteKey* key = findRouteKey(entry.key);
            if (key == nullptr) {
                problems_.push_back(label + ": unknown key '" + entry.key + "' (expected " +
                                    routeKeyNames() + ")");
                continue;
            }
            auto [first, isFirst] = firstLines.emplace(entry.key, entry.line);
            if (!isFirst && !key->repeatable) {
                problems_.push_back(label + ": " + entry.key + " given twice (first at line " +
                                    std::to_string(first->second) + ")");
                continue;
            }
            route.entries.push_back(entry);
        }
        sections_.push_back(std::move(route));
    }

    // The file's problems by line (they are found key by key, module by module), then the rest.
    std::vector<std::string> inFileOrder(std::vector<std::string> problems) const {
        const std::string prefix = file_ + ":";
        auto lineOf = [&](const std::string& problem) -> unsigned long {
            if (file_.empty() || !problem.starts_with(prefix)) return ULONG_MAX;
            auto digits = problem.c_str() + prefix.size();
            char* end = nullptr;
            unsigned long line = std::strtoul(digits, &end, 10);
            return end != digits && *end == ':' ? line : ULONG_MAX;
        };
        std::stable_sort(problems.begin(), problems.end(),
                         [&](const auto& a, const auto& b) { return lineOf(a) < lineOf(b); });
        return problems;
    }

    // Runs one step of the validation; its UsageError becomes one problem and the next step
    // still runs.
    template <typename Step>
    void collect(Step&& step) {
        try {
            step();
        } catch (const UsageError& error) {
            problems_.emplace_back(error.what());
        }
    }

    Config build() {
        auto values = optionValues();
        Config config;
        config.configFile = file_;
        collect([&] { config.workers = values.number<unsigned>("workers", 0, kMaxWorkers); });
        collect([&] { config.admin = readAdminSettings(values); });
        collect([&] { config.metrics = readMetricsSettings(values); });
        collect([&] { config.logLevel = values.choice(kLogLevelNames, "log-level"); });
        collect([&] { config.audit = readAuditSettings(values); });
        collect([&] { config.datapath = readDatapathSettings(values); });
        collect([&] { config.relay = readRelaySettings(values); });
        collect([&] { config.xdp = readXdpSettings(values); });
        config.routes = buildRoutes();
        // --lane splice leaves the buffer lane out of the workers: no route can ask for it.
        if (config.datapath.lane == LaneKind::Splice)
            for (const auto& route : config.routes)
                if (route.overrides.lane && *route.overrides.lane != LaneKind::Splice)
                    problems_.push_back((file_.empty() ? "" : file_ + ": ") + "route '" +
                                        route.name + "': lane " +
                                        toString(*route.overrides.lane) +
                                        " needs the buffer lane, which --lane splice leaves out");
        return config;
    }

    std::vector<RouteConfig> buildRoutes() {
        std::vector<RouteConfig> routes;
        collect([&] {
            if (auto route = defaultRoute()) routes.push_back(std::move(*route));
        });
        bool hasDefault = values_.count("listen") > 0 || values_.count("upstream") > 0;
        for (const auto& section : sections_) {
            if (hasDefault && section.name == "default") {
                problems_.push_back(routeLabel(section.name, section.line) +
                                    " conflicts with --listen/--upstream, which make the route "
                                    "named 'default'");
                continue;
            }
            if (auto route = sectionRoute(section)) routes.push_back(std::move(*route));
        }
        if (routes.empty() && sections_.empty() && !hasDefault) problems_.push_back(kNoRouteMessage);
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

    // nullopt when the section has a problem (recorded).
    std::optional<RouteConfig> sectionRoute(const RouteSection& section) {
        std::string where = routeLabel(section.name, section.line);
        if (section.entries.empty()) {
            problems_.push_back(where + " is empty: it needs listen and upstream");
            return std::nullopt;
        }
        bool complete = true;
        for (const char* required : kRequiredRouteKeys) {
            bool given = std::any_of(section.entries.begin(), section.entries.end(),
                                     [&](const auto& entry) { return entry.key == required; });
            if (!given) {
                problems_.push_back(where + ": missing " + required);
                complete = false;
            }
        }
        RouteConfig route;
        route.name = section.name;
        std::size_t before = problems_.size();
        for (const auto& entry : section.entries) {
            collect([&] {
                findRouteKey(entry.key)->apply(route, entry.value,
                                               routeLabel(section.name, entry.line) + ": " +
                                                   entry.key);
            });
            if (entry.key == "upstream") upstreamLines_[section.name].push_back(entry.line);
        }
        if (problems_.size() == before) {
            bool trustedGiven =
                std::any_of(section.entries.begin(), section.entries.end(),
                            [](const auto& entry) { return entry.key == "proxy-trusted"; });
            collect([&] { checkProxyKeys(route, trustedGiven, where); });
        }
        if (!complete || problems_.size() != before) return std::nullopt;
        return route;
    }

    // Routes share a listen address only when the TLS server name tells them apart: at most
    // one of them without `sni`, no name on two of them, and one PROXY protocol setting (its
    // header comes before the ClientHello).
    void rejectSharedListeners(const std::vector<RouteConfig>& routes) {
        for (std::size_t i = 0; i < routes.size(); ++i)
            for (std::size_t j = i + 1; j < routes.size(); ++j) {
                const auto& a = routes[i];
                const auto& b = routes[j];
                if (!(a.listen == b.listen)) continue;
                std::string both = (file_.empty() ? "" : file_ + ": ") + "listen address " +
                                   a.listen.toString() + " is used by both route '" + a.name +
                                   "' and route '" + b.name + "'";
                if (a.sni.empty() && b.sni.empty()) {
                    problems_.push_back(both + " (routes sharing an address need sni)");
                    continue;
                }
                for (const auto& name : a.sni)
                    if (std::find(b.sni.begin(), b.sni.end(), name) != b.sni.end())
                        problems_.push_back(both + " with sni '" + name + "'");
                if (a.proxyIn != b.proxyIn || a.proxyTrusted != b.proxyTrusted)
                    problems_.push_back(both +
                                        " with different proxy-protocol-in or proxy-trusted");
            }
    }

    // An upstream that is one of the daemon's own listeners would loop each connection back into
    // the relay, fanning it out until a limit hits and auditing its payload at every turn.
    void rejectOwnListenerUpstreams(const std::vector<RouteConfig>& routes,
                                    const ListenerMatcher& matcher) {
        for (const auto& route : routes)
            for (std::size_t i = 0; i < route.upstreams.size(); ++i)
                for (const auto& address : route.upstreams[i].addresses)
                    if (auto owner = matcher.routeListeningOn(address, routes))
                        problems_.push_back(upstreamLabel(route.name, i) + " '" +
                                            route.upstreams[i].text + "' (" + address.toString() +
                                            ") is the daemon's own listener of route '" + *owner +
                                            "'");
    }

    std::string upstreamLabel(const std::string& routeName, std::size_t index) const {
        if (routeName == "default" && values_.count("listen")) return label("upstream") + ":";
        auto lines = upstreamLines_.find(routeName);
        unsigned line =
            lines != upstreamLines_.end() && index < lines->second.size() ? lines->second[index] : 0;
        return routeLabel(routeName, line) + ": upstream";
    }

    // The parsed options as the modules read them (common/OptionValues.h); bad values are
    // recorded in problems_.
    OptionValues optionValues() {
        return OptionValues(values_, file_, fromCommandLine_, lines_, &problems_);
    }
    OptionValues throwingValues() const {
        return OptionValues(values_, file_, fromCommandLine_, lines_);
    }
    std::string label(const std::string& key) const { return throwingValues().label(key); }
    std::string text(const std::string& key) const { return throwingValues().text(key); }
    std::vector<std::string> list(const std::string& key) const {
        return throwingValues().list(key);
    }

    std::string routeLabel(const std::string& name, unsigned line) const {
        return (line != 0 ? fileLine(file_, line) : file_) + ": route '" + name + "'";
    }

    std::vector<std::string> args_;
    po::variables_map values_;
    std::set<std::string> fromCommandLine_;
    std::string file_;
    std::map<std::string, unsigned> lines_;  // top-level key -> its (first) line in file_
    std::vector<RouteSection> sections_;
    std::map<std::string, std::vector<unsigned>> upstreamLines_;  // route -> its upstreams' lines
    std::vector<std::string> problems_;
};

}  // namespace

namespace {
std::string joined(const std::vector<std::string>& problems) {
    std::string out;
    for (const auto& problem : problems) out += (out.empty() ? "" : "; ") + problem;
    return out;
}
}  // namespace

ConfigErrors::ConfigErrors(std::vector<std::string> problems)
    : UsageError(joined(problems)), problems_(std::move(problems)) {}

bool operator==(const RouteConfig& a, const RouteConfig& b) noexcept {
    if (a.name != b.name || !(a.listen == b.listen) || a.audit != b.audit ||
        a.healthCheckIntervalMs != b.healthCheckIntervalMs || !(a.overrides == b.overrides) ||
        a.sni != b.sni || a.proxyIn != b.proxyIn || a.proxyTrusted != b.proxyTrusted || a.proxyOut != b.proxyOut ||
        a.upstreams.size() != b.upstreams.size())
        return false;
    for (std::size_t i = 0; i < a.upstreams.size(); ++i)
        if (a.upstreams[i].text != b.upstreams[i].text ||
            a.upstreams[i].addresses != b.upstreams[i].addresses ||
            a.upstreams[i].weight != b.upstreams[i].weight ||
            a.upstreams[i].backup != b.upstreams[i].backup)
            return false;
    return true;
}

std::vector<std::string> settingsNeedingRestart(const Config& running, const Config& next) {
    ChangedOptions changed;
    changed.check("workers", running.workers, next.workers);
    listChanged(running.admin, next.admin, changed);
    listChanged(running.metrics, next.metrics, changed);
    listChanged(running.audit, next.audit, changed);
    listChanged(running.datapath, next.datapath, changed);
    listChanged(running.relay, next.relay, changed);
    listChanged(running.xdp, next.xdp, changed);
    return std::move(changed).names();
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

unsigned workerThreads(const Config& config) noexcept {
    return config.workers != 0 ? config.workers : std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace splicegate
