// `waitport`: waits until a TCP listener accepts connections (used by run.sh after starting a
// relay or server). The probe connection is closed at once.
#include <iostream>
#include <thread>

#include "tools/bench/BenchUtil.h"
#include "tools/bench/Commands.h"

namespace splicegate::bench {

int runWaitPort(int argc, char** argv) {
    Options opts("waitport", "Waits until ADDR:PORT accepts a TCP connection; exit 1 on timeout.",
                 {
                     {"connect", "ADDR:PORT", "", "address to probe"},
                     {"timeout", "SECONDS", "10", "give up after this long"},
                 },
                 argc, argv, 2);
    auto address = opts.address("connect");
    double timeout = opts.number("timeout", 0.05, 3600);
    installSignalHandlers();
    auto deadline = Clock::now() + secondsToDuration(timeout);
    std::string lastError;
    while (!stopRequested() && Clock::now() < deadline) {
        try {
            connectWithTimeout(address, 1);
            return 0;
        } catch (const std::exception& e) {
            lastError = e.what();
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::cerr << "waitport: " << address.text() << " not accepting after " << timeout << " s ("
              << lastError << ")" << std::endl;
    return 1;
}

}  // namespace splicegate::bench
