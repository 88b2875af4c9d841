// splicegate-bench: load tools for the relay benchmark (see tools/bench/README.md).
#include <cstring>
#include <iostream>
#include <string>

#include "tools/bench/BenchUtil.h"
#include "tools/bench/Commands.h"

namespace {

constexpr const char* kUsage =
    "usage: splicegate-bench COMMAND [options]   (COMMAND --help for its options)\n"
    "\n"
    "commands:\n"
    "  server    upstream server: --mode sink | source | echo\n"
    "  bulk      N streams for T seconds, Gbit/s moved end to end\n"
    "  rr        64-byte request/response over C connections: req/s, p50, p99\n"
    "  churn     new connections/s (connect, 1 KiB each way, close)\n"
    "  idle      open and hold N idle connections, sample the relay's RSS and threads\n"
    "  waitport  wait until a listener accepts\n"
    "  report    turn run.sh's raw results into the markdown tables\n"
    "  fsync-per-chunk  files written and fdatasync'd chunk by chunk (strict.sh's baseline)\n"
    "\n"
    "Results are one line on stdout: result=NAME key=value ...; diagnostics go to stderr.\n"
    "Exit status: 0 success, 1 runtime failure, 2 usage error.\n";

}  // namespace

int main(int argc, char** argv) {
    using namespace splicegate::bench;
    if (argc < 2) {
        std::cerr << kUsage;
        return 2;
    }
    std::string command = argv[1];
    if (command == "--help" || command == "-h" || command == "help") {
        std::cout << kUsage;
        return 0;
    }
    if (command == "--version") {
        std::cout << "splicegate-bench " << SPLICEGATE_VERSION << '\n';
        return 0;
    }
    try {
        if (command == "server") return runServer(argc, argv);
        if (command == "bulk") return runBulk(argc, argv);
        if (command == "rr") return runRequestResponse(argc, argv);
        if (command == "churn") return runChurn(argc, argv);
        if (command == "idle") return runIdle(argc, argv);
        if (command == "waitport") return runWaitPort(argc, argv);
        if (command == "report") return runReport(argc, argv);
        if (command == "fsync-per-chunk") return runFsyncPerChunk(argc, argv);
        std::cerr << "splicegate-bench: unknown command '" << command << "' (see --help)\n";
        return 2;
    } catch (const HelpRequested& help) {
        std::cout << help.what();
        return 0;
    } catch (const UsageError& e) {
        std::cerr << "splicegate-bench: " << e.what() << '\n';
        return 2;
    } catch (const std::exception& e) {
        std::cerr << "splicegate-bench " << command << ": " << e.what() << '\n';
        return 1;
    }
}
