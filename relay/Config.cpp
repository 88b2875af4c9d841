#include "relay/Config.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cerrno>
#include <limits>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include "common/Error.h"
#include "common/OptionValues.h"
#include "common/UniqueFd.h"
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

constexpr Named<LogLevel> kLogLevelNames[] = {{"debug", LogLevel::Debug},
                                              {"info", LogLevel::Info},
                                              {"warn", LogLevel::Warn},
                                              {"error", LogLevel::Error}};

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
         "upstream of 'default'; repeatable: round robin, next one on connect failure")
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
          "admin-readonly-group", "log-level", "access-log"}},
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
        auto values = optionValues();
        Config config;
        config.configFile = file_;
        config.workers = values.number<unsigned>("workers", 0, kMaxWorkers);
        config.admin = readAdminSettings(values);
        config.metrics = readMetricsSettings(values);
        config.logLevel = values.choice(kLogLevelNames, "log-level");
        config.audit = readAuditSettings(values);
        config.datapath = readDatapathSettings(values);
        config.relay = readRelaySettings(values);
        config.xdp = readXdpSettings(values);
        config.routes = buildRoutes();
        return config;
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

    // The parsed options as the modules read them (common/OptionValues.h).
    OptionValues optionValues() const { return OptionValues(values_, file_, fromCommandLine_); }
    std::string label(const std::string& key) const { return optionValues().label(key); }
    std::string text(const std::string& key) const { return optionValues().text(key); }
    std::vector<std::string> list(const std::string& key) const { return optionValues().list(key); }

    std::string routeLabel(const std::string& name) const {
        return file_ + ": route '" + name + "'";
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
