// splicegate-audit: offline reader and verifier of splicegate audit logs (the splicegate-audit(1)
// man page, audit/FORMAT.md).
//   splicegate-audit list DIR [--json | --jsonl] [filters]      (ListCommand.h)
//   splicegate-audit export DIR --pcap FILE [--connection ID]  (PcapExport.h)
//   splicegate-audit extract DIR --connection ID --direction c2u|u2c [-o FILE] [--force]
//   (DIR may be s3://BUCKET/PREFIX for every command: ArchiveSource.h, ArchiveExtract.h)
//   splicegate-audit verify DIR|s3://BUCKET/PREFIX [--key-file FILE] [--expect-head DIGEST]...
//                           [--archive s3://BUCKET/PREFIX] | s3://BUCKET --all-boxes (VerifyCommand.h)
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
#include "tools/splicegate-audit/ArchiveExtract.h"
#include "tools/splicegate-audit/ArchiveSource.h"
#include "tools/splicegate-audit/ListCommand.h"
#include "tools/splicegate-audit/PcapExport.h"
#include "tools/splicegate-audit/VerifyCommand.h"

namespace po = boost::program_options;
using namespace splicegate;
using namespace splicegate::audit;
using namespace splicegate::audittool;

namespace {

constexpr const char* kProgram = "splicegate-audit";

constexpr const char* kMainHelp =
    "usage: splicegate-audit COMMAND DIR|s3://BUCKET/PREFIX [OPTIONS]\n"
    "Offline reader and verifier of splicegate audit logs (DIR is the daemon's --audit-dir).\n"
    "Every command also reads the archive splicegate-archive wrote: s3://BUCKET/PREFIX (the\n"
    "box's --s3-prefix) in place of DIR, with --s3-endpoint URL and --s3-credentials-file FILE;\n"
    "list and verify take s3://BUCKET --all-boxes for every box of the bucket.\n"
    "\n"
    "Commands:\n"
    "  list DIR|s3://BUCKET/PREFIX [--json | --jsonl] [--since TIME] [--until TIME]\n"
    "           [--route NAME] [--client ADDR] [--connection ID]\n"
    "           (s3://BUCKET --all-boxes: every box, a first column BOX)\n"
    "                            one row per connection: id, route, client, upstream, opened,\n"
    "                            closed, c2u_bytes, u2c_bytes, state (open|closed|truncated),\n"
    "                            reason; --json a JSON array, --jsonl one object per line\n"
    "  export DIR|s3://BUCKET/PREFIX --pcap FILE [--since TIME] [--until TIME]\n"
    "             [--route NAME] [--client ADDR] [--connection ID]\n"
    "                            the connections as a pcap of synthesized TCP/IP packets\n"
    "                            (tcpdump, Wireshark)\n"
    "  extract DIR|s3://BUCKET/PREFIX --connection ID --direction c2u|u2c [-o FILE]\n"
    "          [--force] [--since TIME] [--until TIME]\n"
    "                            the exact bytes of one direction of a connection (stdout by\n"
    "                            default); a chunk failing its payload CRC is refused unless\n"
    "                            --force; on s3:// --since/--until limit the segments searched\n"
    "  verify DIR|s3://BUCKET/PREFIX [--key-file FILE] [--expect-head DIGEST]...\n"
    "         [--archive s3://BUCKET/PREFIX]   (s3://BUCKET --all-boxes: every box)\n"
    "                            check every record, payload CRC and the hash chain; exit 1\n"
    "                            with one line per problem, FILE:OFFSET: what is wrong;\n"
    "                            --archive: DIR must still hold every seal the archive holds\n"
    "\n"
    "Options:\n"
    "  -h [ --help ]             print this help (or a command's: COMMAND --help) and exit\n"
    "  --version                 print the version and exit\n"
    "  --s3-endpoint URL, --s3-credentials-file FILE, --s3-region R, --s3-ca-file FILE\n"
    "                            with s3://: the S3 server and its credentials (COMMAND --help)\n"
    "\n"
    "Exit status: 0 success, 1 runtime failure or problems found, 2 usage error.\n";

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
        command.usage = kListUsage;
        command.about = kListAbout;
        addListOptions(command.options);
    } else if (name == "export") {
        command.usage = kExportUsage;
        command.about = kExportAbout;
        addExportOptions(command.options);
    } else if (name == "extract") {
        command.usage = "usage: splicegate-audit extract DIR|s3://BUCKET/PREFIX --connection ID "
                        "--direction c2u|u2c [-o FILE] [--force]\n"
                        "                                [--since TIME] [--until TIME] "
                        "[--s3-endpoint URL ...]";
        command.about =
            "Writes the exact bytes of one direction of a connection, in order. A chunk whose\n"
            "payload fails its CRC-32C is refused (exit 1, naming it) unless --force. From\n"
            "s3://BUCKET/PREFIX only the connection's segments' index objects and the byte\n"
            "ranges of its chunks are read (ranged GETs); the connections objects say which\n"
            "segments those are, all of them read unless --since/--until (s3:// only) give a\n"
            "time the connection was open at: then only those of the segments that can hold\n"
            "it, pruned as list prunes, and a connection that does not overlap the interval is\n"
            "not found.";
        command.options.add_options()
            ("connection", po::value<std::string>()->value_name("ID"), "connection id (required)")
            ("direction", po::value<std::string>()->value_name("c2u|u2c"),
             "c2u: client to upstream, u2c: upstream to client (required)")
            ("output,o", po::value<std::string>()->value_name("FILE"),
             "write to FILE instead of stdout ('-' = stdout)")
            ("force", "extract chunks whose payload CRC fails too (each one named on stderr)");
        ConnectionFilter::addTimeOptions(command.options);
        addArchiveOptions(command.options);
    } else if (name == "verify") {
        command.usage = kVerifyUsage;
        command.about = kVerifyAbout;
        addVerifyOptions(command.options);
    }
    command.options.add_options()
        ("help,h", "print this help and exit")
        ("version", "print the version and exit");
    // clang-format on
    return command;
}

std::uint8_t parseDirection(const std::string& text) {
    if (text == "c2u") return kDirectionC2U;
    if (text == "u2c") return kDirectionU2C;
    throw UsageError("--direction: invalid value '" + text + "' (expected c2u or u2c)");
}

// ---- Commands.

int runExtract(const std::string& dir, const po::variables_map& values, std::uint64_t id,
               std::uint8_t direction, const std::string& output, bool force) {
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
        const auto archive = ArchiveLocation::parse(dir);
        auto result = archive ? extractArchivedConnection(*archive, values, id, direction, open, options)
                              : extractConnection(dir, id, direction, open, options);
        if (!result.found) {
            const bool hinted = values.count("since") || values.count("until");
            std::cerr << kProgram << ": no connection " << id << " in " << dir
                      << (hinted ? " open between --since and --until" : "") << "\n";
            return 1;
        }
        if (result.headDeleted)
            std::cerr << kProgram << ": warning: connection " << id
                      << ": retention deleted its first segments; the " << result.bytes
                      << " bytes extracted are the end of its stream\n";
        if (file) checkSys(::close(file.release()), "close " + output);
        return 0;
    } catch (...) {
        // Do not leave a partial file that looks like a complete extract.
        if (created && file) ::unlink(output.c_str());
        throw;
    }
}

int run(const std::vector<std::string>& args) {
    if (args.empty())
        throw UsageError("missing command: list, export, extract or verify (see --help)");
    const std::string& name = args.front();
    if (name == "-h" || name == "--help" || name == "help") {
        std::cout << kMainHelp;
        return 0;
    }
    if (name == "--version") {
        std::cout << kProgram << " " << SPLICEGATE_VERSION << "\n";
        return 0;
    }
    if (name != "list" && name != "export" && name != "extract" && name != "verify") {
        if (!name.empty() && name.front() == '-')
            throw UsageError("unknown option '" + name + "' before the command (see --help)");
        throw UsageError("unknown command '" + name +
                         "' (expected list, export, extract or verify)");
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
    if (name == "list") return runList(dir, values);
    if (name == "export") return runExport(dir, values);
    if (name == "verify") return runVerify(dir, values);
    if (!values.count("connection")) throw UsageError("missing --connection ID" + hint);
    if (!values.count("direction")) throw UsageError("missing --direction c2u|u2c" + hint);
    if ((values.count("since") || values.count("until")) && !ArchiveLocation::parse(dir))
        throw UsageError("--since/--until prune the archive's segments: only with "
                         "s3://BUCKET/PREFIX (a directory's extract reads only the connection's "
                         "records anyway)" + hint);
    auto id = parseConnectionId(values["connection"].as<std::string>());
    auto direction = parseDirection(values["direction"].as<std::string>());
    std::string output = values.count("output") ? values["output"].as<std::string>() : "";
    if (values.count("output") && output.empty()) throw UsageError("-o: empty file name" + hint);
    return runExtract(dir, values, id, direction, output, values.count("force") != 0);
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
