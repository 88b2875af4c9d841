// splicegate-audit: offline reader and verifier of splicegate audit logs (SPEC.md "Audit logs and
// splicegate-audit", audit/FORMAT.md).
//   splicegate-audit list DIR [--json]
//   splicegate-audit extract DIR --connection ID --direction c2u|u2c [-o FILE] [--force]
//   splicegate-audit verify DIR [--key-file FILE]
// Exit status: 0 success, 1 runtime failure (verify: problems found), 2 usage error. Errors are
// one line each on stderr.
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cerrno>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "audit/AuditReader.h"
#include "audit/SealChain.h"
#include "common/Error.h"

namespace po = boost::program_options;
using namespace splicegate;
using namespace splicegate::audit;

namespace {

constexpr const char* kProgram = "splicegate-audit";

constexpr const char* kMainHelp =
    "usage: splicegate-audit COMMAND DIR [OPTIONS]\n"
    "Offline reader and verifier of splicegate audit logs (DIR is the daemon's --audit-dir).\n"
    "\n"
    "Commands:\n"
    "  list DIR [--json]         one row per connection: id, route, client, upstream, opened,\n"
    "                            closed, c2u_bytes, u2c_bytes, state (open|closed|truncated),\n"
    "                            reason; --json prints a JSON array of objects\n"
    "  extract DIR --connection ID --direction c2u|u2c [-o FILE] [--force]\n"
    "                            the exact bytes of one direction of a connection (stdout by\n"
    "                            default); a chunk failing its payload CRC is refused unless\n"
    "                            --force\n"
    "  verify DIR [--key-file FILE]\n"
    "                            check every record, payload CRC and the hash chain; exit 1\n"
    "                            with one line per problem, FILE:OFFSET: what is wrong\n"
    "\n"
    "Options:\n"
    "  -h [ --help ]             print this help (or a command's: COMMAND --help) and exit\n"
    "  --version                 print the version and exit\n"
    "\n"
    "Exit status: 0 success, 1 runtime failure or problems found, 2 usage error.\n";

// ---- Text output helpers.

// ISO-8601 UTC with milliseconds: 2024-05-01T12:34:56.789Z.
std::string isoTime(std::int64_t ns) {
    std::int64_t seconds = ns / 1'000'000'000;
    std::int64_t rest = ns % 1'000'000'000;
    if (rest < 0) {
        rest += 1'000'000'000;
        --seconds;
    }
    auto t = static_cast<time_t>(seconds);
    tm parts{};
    if (::gmtime_r(&t, &parts) == nullptr) return std::to_string(ns) + "ns";
    char text[64];
    std::snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", parts.tm_year + 1900,
                  parts.tm_mon + 1, parts.tm_mday, parts.tm_hour, parts.tm_min, parts.tm_sec,
                  static_cast<int>(rest / 1'000'000));
    return text;
}

// Length of the valid UTF-8 sequence at text[i], or 0 when it is not valid UTF-8.
std::size_t utf8Length(const std::string& text, std::size_t i) {
    auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
    unsigned char lead = byte(i);
    if (lead < 0x80) return 1;
    std::size_t length = 0;
    std::uint32_t min = 0;
    if ((lead & 0xe0) == 0xc0) {
        length = 2;
        min = 0x80;
    } else if ((lead & 0xf0) == 0xe0) {
        length = 3;
        min = 0x800;
    } else if ((lead & 0xf8) == 0xf0) {
        length = 4;
        min = 0x10000;
    } else {
        return 0;
    }
    if (i + length > text.size()) return 0;
    std::uint32_t code = lead & (0x7f >> length);
    for (std::size_t k = 1; k < length; ++k) {
        if ((byte(i + k) & 0xc0) != 0x80) return 0;
        code = (code << 6) | (byte(i + k) & 0x3f);
    }
    if (code < min || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return 0;
    return length;
}

// A JSON string literal; invalid UTF-8 becomes U+FFFD so the document always parses.
std::string jsonString(const std::string& text) {
    std::string out = "\"";
    for (std::size_t i = 0; i < text.size();) {
        auto c = static_cast<unsigned char>(text[i]);
        std::size_t length = utf8Length(text, i);
        if (length == 0) {
            out += "\\ufffd";
            ++i;
            continue;
        }
        if (length > 1) {
            out.append(text, i, length);
        } else if (c == '"' || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\t') {
            out += "\\t";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c < 0x20 || c == 0x7f) {
            char escaped[8];
            std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
            out += escaped;
        } else {
            out += static_cast<char>(c);
        }
        i += length;
    }
    return out + "\"";
}

// A table cell: control characters and invalid UTF-8 (which could drive a terminal) become '?',
// whitespace becomes '_' so columns stay split by spaces, and an empty value is "-".
std::string cell(const std::string& text) {
    if (text.empty()) return "-";
    std::string out;
    for (std::size_t i = 0; i < text.size();) {
        auto c = static_cast<unsigned char>(text[i]);
        std::size_t length = utf8Length(text, i);
        if (length == 0 || (length == 1 && (c < 0x20 || c == 0x7f))) {
            out += '?';
            ++i;
            continue;
        }
        out += c == ' ' ? '_' : static_cast<char>(c);
        if (length > 1) out.append(text, i + 1, length - 1);
        i += length;
    }
    return out;
}

// Display width of a cell (UTF-8 code points; good enough for addresses and route names).
std::size_t width(const std::string& text) {
    std::size_t n = 0;
    for (char c : text)
        if ((static_cast<unsigned char>(c) & 0xc0) != 0x80) ++n;
    return n;
}

void printTable(const std::vector<ConnectionSummary>& connections) {
    const std::vector<std::string> headers = {"ID",     "ROUTE",  "CLIENT",    "UPSTREAM",
                                              "OPENED", "CLOSED", "C2U_BYTES", "U2C_BYTES",
                                              "STATE",  "REASON"};
    const std::vector<bool> rightAligned = {true,  false, false, false, false,
                                            false, true,  true,  false, false};
    std::vector<std::vector<std::string>> rows;
    rows.reserve(connections.size());
    for (const auto& c : connections) {
        rows.push_back({std::to_string(c.id), cell(c.route), cell(c.client), cell(c.upstream),
                        isoTime(c.openedNs), c.closedNs ? isoTime(*c.closedNs) : "-",
                        std::to_string(c.c2uBytes), std::to_string(c.u2cBytes),
                        connectionStateName(c.state), cell(c.reason)});
    }
    std::vector<std::size_t> widths;
    for (const auto& header : headers) widths.push_back(header.size());
    for (const auto& row : rows)
        for (std::size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], width(row[i]));
    auto print = [&](const std::vector<std::string>& row) {
        std::string line;
        for (std::size_t i = 0; i < row.size(); ++i) {
            std::string pad(widths[i] - width(row[i]), ' ');
            bool lastColumn = i + 1 == row.size();
            if (rightAligned[i]) {
                line += pad + row[i];
            } else {
                line += row[i];
                if (!lastColumn) line += pad;
            }
            if (!lastColumn) line += "  ";
        }
        line += '\n';
        std::cout << line;
    };
    print(headers);
    for (const auto& row : rows) print(row);
}

void printJson(const std::vector<ConnectionSummary>& connections) {
    if (connections.empty()) {
        std::cout << "[]\n";
        return;
    }
    std::cout << "[\n";
    for (std::size_t i = 0; i < connections.size(); ++i) {
        const auto& c = connections[i];
        std::string line =
            "  {\"id\": " + std::to_string(c.id) + ", \"route\": " + jsonString(c.route) +
            ", \"client\": " + jsonString(c.client) + ", \"upstream\": " + jsonString(c.upstream) +
            ", \"opened\": " + jsonString(isoTime(c.openedNs)) +
            ", \"closed\": " + (c.closedNs ? jsonString(isoTime(*c.closedNs)) : "null") +
            ", \"c2u_bytes\": " + std::to_string(c.c2uBytes) +
            ", \"u2c_bytes\": " + std::to_string(c.u2cBytes) +
            ", \"state\": " + jsonString(connectionStateName(c.state)) +
            ", \"reason\": " + (c.closedNs ? jsonString(c.reason) : "null") + "}";
        line += i + 1 < connections.size() ? ",\n" : "\n";
        std::cout << line;
    }
    std::cout << "]\n";
}

// ---- Command-line parsing.

struct Command {
    std::string name;
    po::options_description options;
    const char* usage;
    const char* about;
};

Command makeCommand(const std::string& name) {
    Command command{name, po::options_description("Options"), nullptr, nullptr};
    // clang-format off
    if (name == "list") {
        command.usage = "usage: splicegate-audit list DIR [--json]";
        command.about =
            "One row per connection, by id: id, route, client, upstream, opened, closed\n"
            "(ISO-8601 UTC), c2u_bytes, u2c_bytes, state (open, closed or truncated), reason.\n"
            "Byte counts are the Close record's, or the bytes recorded so far.";
        command.options.add_options()
            ("json", "print a JSON array of objects instead of a table");
    } else if (name == "extract") {
        command.usage = "usage: splicegate-audit extract DIR --connection ID --direction c2u|u2c "
                        "[-o FILE] [--force]";
        command.about =
            "Writes the exact bytes of one direction of a connection, in order. A chunk whose\n"
            "payload fails its CRC-32C is refused (exit 1, naming it) unless --force.";
        command.options.add_options()
            ("connection", po::value<std::string>()->value_name("ID"), "connection id (required)")
            ("direction", po::value<std::string>()->value_name("c2u|u2c"),
             "c2u: client to upstream, u2c: upstream to client (required)")
            ("output,o", po::value<std::string>()->value_name("FILE"),
             "write to FILE instead of stdout ('-' = stdout)")
            ("force", "extract chunks whose payload CRC fails too (each one named on stderr)");
    } else if (name == "verify") {
        command.usage = "usage: splicegate-audit verify DIR [--key-file FILE]";
        command.about =
            "Checks every record (magic, length, CRC), that every segment starts with\n"
            "SegmentStart, that chunks lie inside their data file without overlapping, follow\n"
            "their connection's Open, and add up to its Close byte counts; every payload\n"
            "against its CRC-32C; and the hash chain of the segments' seals (HMAC-SHA256 with\n"
            "--key-file, the daemon's --audit-hmac-key-file). Exit 0 when all is consistent,\n"
            "else 1 with one line per problem: FILE:OFFSET: what is wrong.";
        command.options.add_options()
            ("key-file", po::value<std::string>()->value_name("FILE"),
             "the key the log was sealed with (--audit-hmac-key-file)");
    }
    command.options.add_options()
        ("help,h", "print this help and exit")
        ("version", "print the version and exit");
    // clang-format on
    return command;
}

std::uint64_t parseId(const std::string& text) {
    std::uint64_t value = 0;
    bool ok = !text.empty() && text.size() <= 20;
    for (char c : text) {
        if (!ok) break;
        if (c < '0' || c > '9') {
            ok = false;
            break;
        }
        auto digit = static_cast<std::uint64_t>(c - '0');
        if (value > (UINT64_MAX - digit) / 10) ok = false;
        value = value * 10 + digit;
    }
    if (!ok)
        throw UsageError("--connection: invalid id '" + text + "' (expected a decimal number)");
    return value;
}

std::uint8_t parseDirection(const std::string& text) {
    if (text == "c2u") return kDirectionC2U;
    if (text == "u2c") return kDirectionU2C;
    throw UsageError("--direction: invalid value '" + text + "' (expected c2u or u2c)");
}

// ---- Commands.

int runList(const std::string& dir, bool json) {
    auto result = listConnections(dir);
    if (json) {
        printJson(result.connections);
    } else {
        printTable(result.connections);
    }
    std::cout.flush();
    for (const auto& problem : result.problems) std::cerr << kProgram << ": " << problem << "\n";
    return result.problems.empty() ? 0 : 1;
}

int runExtract(const std::string& dir, std::uint64_t id, std::uint8_t direction,
               const std::string& output, bool force) {
    bool toStdout = output.empty() || output == "-";
    bool created = false;
    UniqueFd file;
    auto open = [&]() -> int {
        if (toStdout) return STDOUT_FILENO;
        struct stat st {};
        created = ::stat(output.c_str(), &st) != 0;
        file.reset(::open(output.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640));
        if (!file) throwErrno(errno, "cannot create " + output);
        return file.get();
    };
    try {
        ExtractOptions options;
        options.force = force;
        options.onDamage = [](const std::string& what) {
            std::cerr << kProgram << ": warning: " << what << " (extracted anyway: --force)\n";
        };
        auto result = extractConnection(dir, id, direction, open, options);
        if (!result.found) {
            std::cerr << kProgram << ": no connection " << id << " in " << dir << "\n";
            return 1;
        }
        if (file) checkSys(::close(file.release()), "close " + output);
        return 0;
    } catch (...) {
        // Do not leave a partial file that looks like a complete extract.
        if (created && file) ::unlink(output.c_str());
        throw;
    }
}

int runVerify(const std::string& dir, const std::string& keyFile) {
    std::shared_ptr<const ChainKey> key;
    if (!keyFile.empty()) key = ChainKey::fromFile(keyFile);
    auto summary = verifyDirectory(
        dir, [](const std::string& line) { std::cout << line << "\n"; }, key.get());
    std::cout.flush();
    if (summary.problems > 0) {
        std::cerr << kProgram << ": " << dir << ": " << summary.problems
                  << (summary.problems == 1 ? " problem" : " problems") << " found\n";
        return 1;
    }
    std::cout << dir << ": consistent (" << summary.segments << " segments, " << summary.connections
              << " connections, " << summary.records << " records, " << summary.chunkBytes
              << " chunk bytes, " << summary.sealedSegments << " chained seals"
              << (key ? " (HMAC-SHA256)" : " (SHA-256)") << ", " << summary.checkedPayloadBytes
              << " payload bytes checked, " << summary.uncheckedChunks
              << " chunks without payload CRC, " << summary.deletedByRetention
              << " segments deleted by retention)\n";
    return 0;
}

int run(const std::vector<std::string>& args) {
    if (args.empty()) throw UsageError("missing command: list, extract or verify (see --help)");
    const std::string& name = args.front();
    if (name == "-h" || name == "--help" || name == "help") {
        std::cout << kMainHelp;
        return 0;
    }
    if (name == "--version") {
        std::cout << kProgram << " " << SPLICEGATE_VERSION << "\n";
        return 0;
    }
    if (name != "list" && name != "extract" && name != "verify") {
        if (!name.empty() && name.front() == '-')
            throw UsageError("unknown option '" + name + "' before the command (see --help)");
        throw UsageError("unknown command '" + name + "' (expected list, extract or verify)");
    }
    Command command = makeCommand(name);
    po::options_description all;
    all.add(command.options);
    all.add_options()("dir", po::value<std::string>())("extra",
                                                       po::value<std::vector<std::string>>());
    po::positional_options_description positional;
    positional.add("dir", 1).add("extra", -1);
    constexpr int kStyle =
        po::command_line_style::default_style & ~po::command_line_style::allow_guessing;
    po::variables_map values;
    std::string hint = " (see 'splicegate-audit " + name + " --help')";
    try {
        std::vector<std::string> rest(args.begin() + 1, args.end());
        po::store(
            po::command_line_parser(rest).options(all).positional(positional).style(kStyle).run(),
            values);
    } catch (const po::error& error) {
        throw UsageError(error.what() + hint);
    }
    if (values.count("help")) {
        std::cout << command.usage << "\n" << command.about << "\n\n" << command.options;
        return 0;
    }
    if (values.count("version")) {
        std::cout << kProgram << " " << SPLICEGATE_VERSION << "\n";
        return 0;
    }
    if (values.count("extra"))
        throw UsageError("unexpected argument '" +
                         values["extra"].as<std::vector<std::string>>().front() + "'" + hint);
    if (!values.count("dir")) throw UsageError("missing audit directory DIR" + hint);
    auto dir = values["dir"].as<std::string>();
    if (dir.empty()) throw UsageError("the audit directory DIR is empty" + hint);
    if (name == "list") return runList(dir, values.count("json") != 0);
    if (name == "verify") {
        std::string keyFile = values.count("key-file") ? values["key-file"].as<std::string>() : "";
        if (values.count("key-file") && keyFile.empty())
            throw UsageError("--key-file: empty file name" + hint);
        return runVerify(dir, keyFile);
    }
    if (!values.count("connection")) throw UsageError("missing --connection ID" + hint);
    if (!values.count("direction")) throw UsageError("missing --direction c2u|u2c" + hint);
    auto id = parseId(values["connection"].as<std::string>());
    auto direction = parseDirection(values["direction"].as<std::string>());
    std::string output = values.count("output") ? values["output"].as<std::string>() : "";
    if (values.count("output") && output.empty()) throw UsageError("-o: empty file name" + hint);
    return runExtract(dir, id, direction, output, values.count("force") != 0);
}

}  // namespace

int main(int argc, char** argv) {
    std::ios::sync_with_stdio(false);
    try {
        return run(std::vector<std::string>(argv + 1, argv + argc));
    } catch (const UsageError& error) {
        std::cout.flush();
        std::cerr << kProgram << ": " << error.what() << "\n";
        return 2;
    } catch (const std::exception& error) {
        std::cout.flush();
        std::cerr << kProgram << ": " << error.what() << "\n";
        return 1;
    }
}
