// splicegatectl: admin CLI of the splicegate daemon (proto/splicegate/admin.proto).
//   splicegatectl [--socket PATH] [--json] COMMAND [ARGS]
// Exit status: 0 success, 1 the daemon answered with an error (or a runtime failure), 2 usage
// error, 3 the daemon cannot be reached (no socket, refused, no answer within the timeout).
// Errors are one line each on stderr; results go to stdout (aligned tables, or one JSON document
// with --json).
#include <arpa/inet.h>
#include <google/protobuf/descriptor.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "admin/AdminFraming.h"
#include "proto/ProtocolVersion.h"
#include "splicegate/admin.pb.h"
#include "tools/splicegatectl/AdminClient.h"

#ifndef SPLICEGATE_VERSION
#define SPLICEGATE_VERSION "unknown"
#endif

namespace po = boost::program_options;
using namespace splicegate;

namespace {

constexpr const char* kProgram = "splicegatectl";
constexpr const char* kDefaultSocket = "/run/splicegate/admin.sock";

enum Exit { kOk = 0, kFailed = 1, kUsage = 2, kUnreachable = 3 };

struct UsageProblem {
    std::string message;
};

struct CommandHelp {
    const char* name;
    const char* synopsis;
    const char* summary;
    const char* details;
};

const std::vector<CommandHelp>& commandHelp() {
    static const std::vector<CommandHelp> commands = {
        {"status", "status", "daemon state: uptime, routes, traffic, pipes, audit",
         "Prints the daemon's version, uptime, worker count, splice engine, whether it drains,\n"
         "connection and byte counts, one row per route, the pipe pool and the audit state.\n"},
        {"connections", "connections", "open connections, one row each",
         "One row per open connection: ID, ROUTE, CLIENT, UPSTREAM, AGE, C2U_BYTES (client to\n"
         "upstream), U2C_BYTES (upstream to client), STATE (preamble|connecting|open|closing),\n"
         "WORKER, SNI (the TLS ClientHello's server name), VIA (the load balancer whose PROXY\n"
         "header named CLIENT).\n"
         "With --json the fields are those of 'splicegate-audit list --json' (id, route, client,\n"
         "upstream, opened, c2u_bytes, u2c_bytes, state) plus worker and age_ms.\n"},
        {"kill", "kill ID", "close connection ID (the audit records the reason)",
         "Closes the connection with this ID (see 'connections'). Exit 1 if no such\n"
         "connection is open.\n"},
        {"drain", "drain", "stop accepting, exit when connections finish",
         "Like SIGTERM: listeners close, open connections may finish up to the daemon's\n"
         "--drain-timeout-ms, the audit is made durable and the daemon exits 0.\n"},
        {"reload", "reload", "reload the config file (like SIGHUP)",
         "Re-reads the daemon's --config file and waits for the outcome: routes are added,\n"
         "removed or changed; established connections are not cut. Exit 1 with the daemon's\n"
         "message if the reload failed (the running configuration stays in force).\n"},
        {"audit-rotate", "audit-rotate", "start new audit segment files",
         "Closes and syncs the current audit segment files and starts new ones (exit 1 if audit\n"
         "is off).\n"},
        {"xdp", "xdp list|add CIDR|del CIDR", "XDP edge-filter rules",
         "  xdp list       the rules: CIDR, KIND (deny|allow)\n"
         "  xdp add CIDR   drop traffic from this IPv4 or IPv6 prefix at the edge\n"
         "  xdp del CIDR   remove a rule\n"
         "Exit 1 with \"XDP not enabled\" when the daemon runs without --xdp-interface.\n"},
        {"upgrade", "upgrade", "start the daemon's binary again without refusing a connection",
         "The daemon starts the binary at its path again with the same arguments (so a new\n"
         "package's binary, a changed config file and settings that apply only at a start take\n"
         "effect) and hands its listeners, admin socket and metrics listener to it. Once the new\n"
         "process serves, the old one stops accepting and drains its connections for up to its\n"
         "--drain-timeout-ms, then exits. Prints both PIDs. Exit 1 with the reason when the new\n"
         "process fails (bad config, crash, not ready within 30 s): the old one goes on serving.\n"
         "Waits up to 60 s for the answer (--timeout, if longer).\n"},
        {"upstreams", "upstreams", "each route's upstreams: state, weight, connections",
         "One row per upstream of every route: ROUTE, UPSTREAM, STATE (up|down|disabled),\n"
         "WEIGHT, BACKUP (yes|no), ACTIVE (established connections open now), CONNECT_FAILURES\n"
         "(client connections' failed connects) and CHECK_FAILURES (failed health checks).\n"},
        {"upstream", "upstream disable|enable ROUTE ADDR", "maintenance of one upstream",
         "  upstream disable ROUTE ADDR   no new connection goes to ADDR (as configured, see\n"
         "                                'upstreams'); its established connections go on\n"
         "  upstream enable ROUTE ADDR    back in the rotation\n"
         "A reload or an upgrade (the packaged unit's systemctl reload) keeps the disable while the\n"
         "route keeps that upstream; a restart forgets it.\n"
         "Exit 1 when the route or the upstream does not exist.\n"},
        {"version", "version", "versions of splicegatectl and the daemon",
         "Prints this program's version and the daemon's, each with its admin protocol version.\n"},
    };
    return commands;
}

const CommandHelp* findCommand(const std::string& name) {
    for (const auto& command : commandHelp()) {
        if (name == command.name) return &command;
    }
    return nullptr;
}

std::string optionsText(const po::options_description& visible) {
    std::ostringstream out;
    out << visible;
    return out.str();
}

std::string mainHelp(const po::options_description& visible) {
    std::ostringstream out;
    out << "usage: splicegatectl [--socket PATH] [--json] COMMAND [ARGS]\n"
        << "Controls a running splicegate daemon over its admin socket.\n\nCommands:\n";
    for (const auto& command : commandHelp()) {
        std::string synopsis = command.synopsis;
        out << "  " << synopsis;
        out << std::string(synopsis.size() < 28 ? 28 - synopsis.size() : 1, ' ') << command.summary
            << "\n";
    }
    out << "\n"
        << optionsText(visible) << "\nSee 'splicegatectl COMMAND --help' for a command.\n"
        << "Exit status: 0 success, 1 the daemon answered with an error, 2 usage error,\n"
        << "3 the daemon cannot be reached.\n";
    return out.str();
}

std::string commandHelpText(const CommandHelp& command, const po::options_description& visible) {
    std::ostringstream out;
    out << "usage: splicegatectl [--socket PATH] [--json] " << command.synopsis << "\n"
        << command.summary << ".\n\n"
        << command.details << "\n"
        << optionsText(visible);
    return out.str();
}

bool parseId(const std::string& text, std::uint64_t& id) {
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, id);
    return !text.empty() && ec == std::errc() && ptr == end;
}

// Syntax only (the daemon is the authority): an IPv4 or IPv6 address, optionally "/prefix".
bool plausibleCidr(const std::string& text) {
    std::string address = text;
    std::optional<unsigned> prefix;
    if (auto slash = text.find('/'); slash != std::string::npos) {
        address = text.substr(0, slash);
        std::string bits = text.substr(slash + 1);
        unsigned value = 0;
        auto [ptr, ec] = std::from_chars(bits.data(), bits.data() + bits.size(), value);
        if (bits.empty() || ec != std::errc() || ptr != bits.data() + bits.size()) return false;
        prefix = value;
    }
    unsigned char storage[16];
    if (::inet_pton(AF_INET, address.c_str(), storage) == 1) return !prefix || *prefix <= 32;
    if (::inet_pton(AF_INET6, address.c_str(), storage) == 1) return !prefix || *prefix <= 128;
    return false;
}

// Builds the request for `command args`; throws UsageProblem.
admin::Request buildRequest(const std::string& command, const std::vector<std::string>& args) {
    admin::Request request;
    auto expectArgs = [&](std::size_t count, const char* what) {
        if (args.size() != count) {
            throw UsageProblem{args.size() < count
                                   ? std::string("'") + command + "' needs " + what
                                   : std::string("'") + command + "' takes " + what +
                                         "; unexpected '" + args[count] + "'"};
        }
    };
    if (command == "status") {
        expectArgs(0, "no arguments");
        request.mutable_status();
    } else if (command == "connections") {
        expectArgs(0, "no arguments");
        request.mutable_list_connections();
    } else if (command == "kill") {
        expectArgs(1, "one connection ID");
        std::uint64_t id = 0;
        if (!parseId(args[0], id)) {
            throw UsageProblem{"'kill' needs a connection ID (a number), not '" + args[0] + "'"};
        }
        request.mutable_kill_connection()->set_id(id);
    } else if (command == "drain") {
        expectArgs(0, "no arguments");
        request.mutable_drain();
    } else if (command == "reload") {
        expectArgs(0, "no arguments");
        request.mutable_reload();
    } else if (command == "audit-rotate") {
        expectArgs(0, "no arguments");
        request.mutable_rotate_audit();
    } else if (command == "version") {
        expectArgs(0, "no arguments");
        request.mutable_version();
    } else if (command == "upgrade") {
        expectArgs(0, "no arguments");
        request.mutable_upgrade();
    } else if (command == "upstreams") {
        expectArgs(0, "no arguments");
        request.mutable_list_upstreams();
    } else if (command == "upstream") {
        if (args.empty() || (args[0] != "disable" && args[0] != "enable"))
            throw UsageProblem{"'upstream' needs disable or enable, then ROUTE and ADDR"};
        if (args.size() != 3)
            throw UsageProblem{"'upstream " + args[0] + "' needs ROUTE and ADDR (see 'upstreams')"};
        auto& set = *request.mutable_set_upstream();
        set.set_route(args[1]);
        set.set_upstream(args[2]);
        set.set_disabled(args[0] == "disable");
    } else if (command == "xdp") {
        if (args.empty())
            throw UsageProblem{"'xdp' needs a subcommand: list, add CIDR or del CIDR"};
        const std::string& sub = args[0];
        if (sub == "list") {
            if (args.size() != 1) throw UsageProblem{"'xdp list' takes no arguments"};
            request.mutable_xdp_list();
        } else if (sub == "add" || sub == "del") {
            if (args.size() != 2) {
                throw UsageProblem{"'xdp " + sub + "' needs exactly one CIDR (e.g. 192.0.2.0/24)"};
            }
            if (!plausibleCidr(args[1])) {
                throw UsageProblem{"'xdp " + sub + "': '" + args[1] +
                                   "' is not an IPv4 or IPv6 CIDR (e.g. 192.0.2.0/24, "
                                   "2001:db8::/32)"};
            }
            if (sub == "add") {
                request.mutable_xdp_add()->set_cidr(args[1]);
            } else {
                request.mutable_xdp_delete()->set_cidr(args[1]);
            }
        } else {
            throw UsageProblem{"unknown xdp subcommand '" + sub + "' (list, add CIDR, del CIDR)"};
        }
    } else {
        throw UsageProblem{"unknown command '" + command + "' (see splicegatectl --help)"};
    }
    return request;
}

// ---- Human output.

class Table {
  public:
    explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
    void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
    void print(std::ostream& out) const {
        std::vector<std::size_t> widths;
        for (const auto& row : rows_) {
            widths.resize(std::max(widths.size(), row.size()), 0);
            for (std::size_t i = 0; i < row.size(); ++i) {
                widths[i] = std::max(widths[i], row[i].size());
            }
        }
        for (const auto& row : rows_) {
            std::string line;
            for (std::size_t i = 0; i < row.size(); ++i) {
                line += row[i];
                if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 2, ' ');
            }
            out << line << "\n";
        }
    }

  private:
    std::vector<std::vector<std::string>> rows_;
};

std::string orDash(const std::string& text) {
    return text.empty() ? "-" : text;
}

std::string duration(std::uint64_t ms) {
    if (ms < 10'000) {
        char text[32];
        std::snprintf(text, sizeof text, "%.1fs", static_cast<double>(ms) / 1000.0);
        return text;
    }
    std::uint64_t s = ms / 1000;
    const std::uint64_t days = s / 86400;
    s %= 86400;
    char text[64];
    if (days > 0) {
        std::snprintf(text, sizeof text, "%llud%02lluh%02llum",
                      static_cast<unsigned long long>(days),
                      static_cast<unsigned long long>(s / 3600),
                      static_cast<unsigned long long>((s % 3600) / 60));
    } else if (s >= 3600) {
        std::snprintf(text, sizeof text, "%lluh%02llum%02llus",
                      static_cast<unsigned long long>(s / 3600),
                      static_cast<unsigned long long>((s % 3600) / 60),
                      static_cast<unsigned long long>(s % 60));
    } else {
        std::snprintf(text, sizeof text, "%llum%02llus", static_cast<unsigned long long>(s / 60),
                      static_cast<unsigned long long>(s % 60));
    }
    return text;
}

std::string join(const google::protobuf::RepeatedPtrField<std::string>& items) {
    std::string out;
    for (const auto& item : items) {
        if (!out.empty()) out += ",";
        out += item;
    }
    return out;
}

void printStatus(const admin::StatusResponse& s, std::ostream& out) {
    Table facts({"version", s.version()});
    facts.add({"uptime", duration(s.uptime_seconds() * 1000)});
    facts.add({"workers", std::to_string(s.workers())});
    facts.add({"splice engine", orDash(s.splice_engine())});
    facts.add({"draining", s.draining() ? "yes" : "no"});
    facts.add({"connections", std::to_string(s.connections_active()) + " active, " +
                                  std::to_string(s.connections_accepted()) + " accepted"});
    facts.add({"bytes",
               std::to_string(s.c2u_bytes()) + " c2u, " + std::to_string(s.u2c_bytes()) + " u2c"});
    const auto& p = s.pipes();
    facts.add({"pipes", std::to_string(p.in_use()) + " in use, " + std::to_string(p.idle()) +
                            " idle, " + std::to_string(p.overflow_in_use()) + " overflow"});
    facts.add({"pipe budget", p.budget_bytes() == 0
                                  ? std::string("unlimited")
                                  : std::to_string(p.budget_used_bytes()) + " of " +
                                        std::to_string(p.budget_bytes()) + " bytes used"});
    const auto& a = s.audit();
    if (a.enabled()) {
        facts.add({"audit", a.directory() + " (" + orDash(a.durability()) + ", " +
                                orDash(a.on_error()) + ")"});
        facts.add({"audit bytes", std::to_string(a.bytes()) + " written, " +
                                      std::to_string(a.errors()) + " errors, " +
                                      std::to_string(a.lost_bytes()) + " lost"});
        for (const auto& head : a.heads())
            facts.add({"audit head w" + std::to_string(head.worker()),
                       head.index_file() + " digest=" + head.digest()});
    } else {
        facts.add({"audit", "off"});
    }
    facts.add({"xdp", s.xdp_enabled() ? "on" : "off"});
    facts.print(out);
    out << "\n";
    Table routes(
        {"ROUTE", "LISTEN", "UPSTREAMS", "AUDIT", "ACTIVE", "ACCEPTED", "C2U_BYTES", "U2C_BYTES"});
    for (const auto& r : s.routes()) {
        routes.add({r.name(), orDash(r.listen()), orDash(join(r.upstreams())),
                    r.audit() ? "yes" : "no", std::to_string(r.connections_active()),
                    std::to_string(r.connections_accepted()), std::to_string(r.c2u_bytes()),
                    std::to_string(r.u2c_bytes())});
    }
    routes.print(out);
}

void printConnections(const admin::ListConnectionsResponse& list, std::ostream& out) {
    Table table(
        {"ID", "ROUTE", "CLIENT", "UPSTREAM", "AGE", "C2U_BYTES", "U2C_BYTES", "STATE", "WORKER",
         "SNI", "VIA"});
    for (const auto& c : list.connections()) {
        table.add({std::to_string(c.id()), orDash(c.route()), orDash(c.client()),
                   orDash(c.upstream()), duration(c.age_ms()), std::to_string(c.c2u_bytes()),
                   std::to_string(c.u2c_bytes()), orDash(c.state()), std::to_string(c.worker()),
                   orDash(c.sni()), orDash(c.via())});
    }
    table.print(out);
    if (list.not_listed() > 0) {
        std::cerr << kProgram << ": " << list.not_listed()
                  << " more connections not listed (the daemon keeps a response within 1 MiB)\n";
    }
}

void printHuman(const admin::Request& request, const admin::Response& response, std::ostream& out) {
    switch (request.command_case()) {
        case admin::Request::kStatus:
            printStatus(response.status(), out);
            break;
        case admin::Request::kListConnections:
            printConnections(response.list_connections(), out);
            break;
        case admin::Request::kKillConnection:
            out << "connection " << request.kill_connection().id() << " closed\n";
            break;
        case admin::Request::kDrain:
            out << "draining: the daemon accepts no new connections and exits when the open ones "
                   "finish\n";
            break;
        case admin::Request::kReload:
            out << "configuration reloaded: " << response.reload().routes()
                << (response.reload().routes() == 1 ? " route\n" : " routes\n");
            if (response.reload().restart_required_size() > 0) {
                out << "takes effect at the next start:";
                for (const auto& name : response.reload().restart_required()) out << " " << name;
                out << "\n";
            }
            break;
        case admin::Request::kRotateAudit:
            out << "audit rotated\n";
            break;
        case admin::Request::kXdpList: {
            Table table({"CIDR", "KIND"});
            for (const auto& rule : response.xdp_list().rules())
                table.add({rule.cidr(), rule.kind()});
            table.print(out);
            break;
        }
        case admin::Request::kXdpAdd:
            out << "xdp rule added: " << request.xdp_add().cidr() << "\n";
            break;
        case admin::Request::kXdpDelete:
            out << "xdp rule deleted: " << request.xdp_delete().cidr() << "\n";
            break;
        case admin::Request::kUpgrade:
            out << "upgraded: PID " << response.upgrade().new_pid() << " serves; PID "
                << response.upgrade().old_pid() << " stopped accepting and drains for up to "
                << response.upgrade().drain_timeout_ms() << " ms\n";
            break;
        case admin::Request::kListUpstreams: {
            Table table({"ROUTE", "UPSTREAM", "STATE", "WEIGHT", "BACKUP", "ACTIVE",
                         "CONNECT_FAILURES", "CHECK_FAILURES"});
            for (const auto& u : response.list_upstreams().upstreams())
                table.add({u.route(), u.upstream(), u.state(), std::to_string(u.weight()),
                           u.backup() ? "yes" : "no", std::to_string(u.active()),
                           std::to_string(u.connect_failures()),
                           std::to_string(u.health_check_failures())});
            table.print(out);
            break;
        }
        case admin::Request::kSetUpstream: {
            const auto& u = response.set_upstream().upstream();
            out << "route " << u.route() << ": upstream " << u.upstream() << " is " << u.state()
                << (request.set_upstream().disabled()
                        ? " (no new connections; " + std::to_string(u.active()) +
                              " established go on)\n"
                        : "\n");
            break;
        }
        case admin::Request::kVersion: {
            Table table({kProgram, SPLICEGATE_VERSION,
                         "(admin protocol " + std::to_string(admin::kProtocolVersion) + ")"});
            table.add(
                {"splicegate", orDash(response.version().version()),
                 "(admin protocol " + std::to_string(response.version().protocol_version()) + ")"});
            table.print(out);
            break;
        }
        case admin::Request::COMMAND_NOT_SET:
            break;
    }
}

// The result message of `response` for `request`'s command.
const google::protobuf::Message& resultOf(const admin::Request& request,
                                          const admin::Response& response) {
    switch (request.command_case()) {
        case admin::Request::kStatus:
            return response.status();
        case admin::Request::kListConnections:
            return response.list_connections();
        case admin::Request::kKillConnection:
            return response.kill_connection();
        case admin::Request::kDrain:
            return response.drain();
        case admin::Request::kReload:
            return response.reload();
        case admin::Request::kRotateAudit:
            return response.rotate_audit();
        case admin::Request::kXdpList:
            return response.xdp_list();
        case admin::Request::kXdpAdd:
            return response.xdp_add();
        case admin::Request::kXdpDelete:
            return response.xdp_delete();
        case admin::Request::kVersion:
            return response.version();
        case admin::Request::kUpgrade:
            return response.upgrade();
        case admin::Request::kListUpstreams:
            return response.list_upstreams();
        case admin::Request::kSetUpstream:
            return response.set_upstream();
        case admin::Request::COMMAND_NOT_SET:
            break;
    }
    return response;
}

// ---- JSON output: protobuf field names, every field (defaults too), and 64-bit integers as JSON
// numbers (proto3's JSON mapping prints them as strings, which breaks numeric jq filters;
// protobuf's JSON parser accepts either form).

std::string jsonString(const std::string& text) {
    std::string out = "\"";
    for (unsigned char c : text) {
        switch (c) {
            case '"':
                out += "\\\"";
                break;
            case '\\':
                out += "\\\\";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\r':
                out += "\\r";
                break;
            case '\t':
                out += "\\t";
                break;
            default:
                if (c < 0x20) {
                    char escaped[8];
                    std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
                    out += escaped;
                } else {
                    out += static_cast<char>(c);
                }
        }
    }
    return out + "\"";
}

void writeJson(const google::protobuf::Message& message, std::ostream& out, int depth);

void writeJsonValue(const google::protobuf::Message& message,
                    const google::protobuf::FieldDescriptor* field, int index, std::ostream& out,
                    int depth) {
    using FD = google::protobuf::FieldDescriptor;
    const auto* reflection = message.GetReflection();
    const bool repeated = field->is_repeated();
    switch (field->cpp_type()) {
        case FD::CPPTYPE_INT32:
            out << (repeated ? reflection->GetRepeatedInt32(message, field, index)
                             : reflection->GetInt32(message, field));
            break;
        case FD::CPPTYPE_INT64:
            out << (repeated ? reflection->GetRepeatedInt64(message, field, index)
                             : reflection->GetInt64(message, field));
            break;
        case FD::CPPTYPE_UINT32:
            out << (repeated ? reflection->GetRepeatedUInt32(message, field, index)
                             : reflection->GetUInt32(message, field));
            break;
        case FD::CPPTYPE_UINT64:
            out << (repeated ? reflection->GetRepeatedUInt64(message, field, index)
                             : reflection->GetUInt64(message, field));
            break;
        case FD::CPPTYPE_DOUBLE:
            out << (repeated ? reflection->GetRepeatedDouble(message, field, index)
                             : reflection->GetDouble(message, field));
            break;
        case FD::CPPTYPE_FLOAT:
            out << (repeated ? reflection->GetRepeatedFloat(message, field, index)
                             : reflection->GetFloat(message, field));
            break;
        case FD::CPPTYPE_BOOL:
            out << ((repeated ? reflection->GetRepeatedBool(message, field, index)
                              : reflection->GetBool(message, field))
                        ? "true"
                        : "false");
            break;
        case FD::CPPTYPE_ENUM:
            out << jsonString(repeated ? reflection->GetRepeatedEnum(message, field, index)->name()
                                       : reflection->GetEnum(message, field)->name());
            break;
        case FD::CPPTYPE_STRING:
            out << jsonString(repeated ? reflection->GetRepeatedString(message, field, index)
                                       : reflection->GetString(message, field));
            break;
        case FD::CPPTYPE_MESSAGE:
            writeJson(repeated ? reflection->GetRepeatedMessage(message, field, index)
                               : reflection->GetMessage(message, field),
                      out, depth);
            break;
    }
}

void writeJson(const google::protobuf::Message& message, std::ostream& out, int depth) {
    const auto* descriptor = message.GetDescriptor();
    const std::string indent(static_cast<std::size_t>(depth + 1) * 2, ' ');
    const std::string closing(static_cast<std::size_t>(depth) * 2, ' ');
    if (descriptor->field_count() == 0) {
        out << "{}";
        return;
    }
    out << "{\n";
    for (int i = 0; i < descriptor->field_count(); ++i) {
        const auto* field = descriptor->field(i);
        out << indent << jsonString(field->name()) << ": ";
        if (field->is_repeated()) {
            const int size = message.GetReflection()->FieldSize(message, field);
            if (size == 0) {
                out << "[]";
            } else {
                out << "[\n";
                for (int k = 0; k < size; ++k) {
                    out << indent << "  ";
                    writeJsonValue(message, field, k, out, depth + 2);
                    out << (k + 1 < size ? ",\n" : "\n");
                }
                out << indent << "]";
            }
        } else {
            writeJsonValue(message, field, -1, out, depth + 1);
        }
        out << (i + 1 < descriptor->field_count() ? ",\n" : "\n");
    }
    out << closing << "}";
}

bool printJson(const google::protobuf::Message& message, std::ostream& out) {
    writeJson(message, out, 0);
    out << "\n";
    return static_cast<bool>(out);
}

int usageError(const std::string& message) {
    std::cerr << kProgram << ": " << message << "\n";
    return kUsage;
}

int run(int argc, char** argv) {
    std::string socketPath;
    unsigned timeoutSeconds = 5;
    po::options_description visible("Options", 80, 40);
    // clang-format off
    visible.add_options()
        ("socket,s",
         po::value<std::string>(&socketPath)->value_name("PATH")->default_value(kDefaultSocket),
         "admin socket of the daemon (its --admin-socket)")
        ("json", "print the result as one JSON document")
        ("timeout", po::value<unsigned>(&timeoutSeconds)->value_name("SECONDS")->default_value(5),
         "seconds to wait for the daemon before giving up (exit 3)")
        ("help,h", "print this help (or a command's: COMMAND --help) and exit")
        ("version", "print splicegatectl's version and exit");
    po::options_description hidden;
    hidden.add_options()
        ("command", po::value<std::string>(), "command")
        ("args", po::value<std::vector<std::string>>(), "arguments");
    // clang-format on
    po::options_description all;
    all.add(visible).add(hidden);
    po::positional_options_description positional;
    positional.add("command", 1).add("args", -1);

    po::variables_map vm;
    try {
        po::store(po::command_line_parser(argc, argv)
                      .options(all)
                      .positional(positional)
                      .style(po::command_line_style::default_style &
                             ~po::command_line_style::allow_guessing)
                      .run(),
                  vm);
        po::notify(vm);
    } catch (const po::error& error) {
        return usageError(std::string(error.what()) + " (see splicegatectl --help)");
    }
    const std::string command = vm.count("command") ? vm["command"].as<std::string>() : "";
    const std::vector<std::string> args =
        vm.count("args") ? vm["args"].as<std::vector<std::string>>() : std::vector<std::string>{};

    if (vm.count("help")) {
        if (command.empty() || command == "help") {
            std::cout << mainHelp(visible);
            return kOk;
        }
        const CommandHelp* help = findCommand(command);
        if (help == nullptr) {
            return usageError("unknown command '" + command + "' (see splicegatectl --help)");
        }
        std::cout << commandHelpText(*help, visible);
        return kOk;
    }
    if (vm.count("version")) {
        std::cout << kProgram << " " << SPLICEGATE_VERSION << " (admin protocol "
                  << admin::kProtocolVersion << ")\n";
        return kOk;
    }
    if (command == "help") {
        if (args.empty()) {
            std::cout << mainHelp(visible);
            return kOk;
        }
        const CommandHelp* help = findCommand(args[0]);
        if (help == nullptr) {
            return usageError("unknown command '" + args[0] + "' (see splicegatectl --help)");
        }
        std::cout << commandHelpText(*help, visible);
        return kOk;
    }
    if (command.empty()) return usageError("no command given (see splicegatectl --help)");
    if (socketPath.empty()) return usageError("--socket needs a path");
    if (timeoutSeconds == 0 || timeoutSeconds > 3600) {
        return usageError("--timeout must be between 1 and 3600 seconds");
    }

    admin::Request request;
    try {
        request = buildRequest(command, args);
    } catch (const UsageProblem& problem) {
        return usageError(problem.message);
    }

    admin::Response response;
    try {
        // An upgrade waits for a whole start of the new process (the daemon gives it 30 s).
        const unsigned waitSeconds =
            request.has_upgrade() ? std::max(timeoutSeconds, 60u) : timeoutSeconds;
        response = ctl::exchange(socketPath, request, std::chrono::seconds(waitSeconds));
    } catch (const ctl::Unreachable& error) {
        std::cerr << kProgram << ": " << error.what() << "\n";
        return kUnreachable;
    } catch (const ctl::ProtocolFailure& error) {
        std::cerr << kProgram << ": " << error.what() << "\n";
        return kFailed;
    }
    if (response.error().code() != admin::ERROR_NONE) {
        std::string message = response.error().message();
        std::replace(message.begin(), message.end(), '\n', ' ');
        if (message.empty()) message = admin::resultLabel(response.error().code());
        std::cerr << kProgram << ": " << message << "\n";
        return kFailed;
    }
    if (vm.count("json")) {
        if (!printJson(resultOf(request, response), std::cout)) {
            std::cerr << kProgram << ": cannot print the response as JSON\n";
            return kFailed;
        }
    } else {
        printHuman(request, response, std::cout);
    }
    std::cout.flush();
    if (!std::cout) {
        std::cerr << kProgram << ": cannot write the output\n";
        return kFailed;
    }
    return kOk;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const std::exception& error) {
        std::cerr << kProgram << ": " << error.what() << "\n";
        return kFailed;
    }
}
