// splicegate-admin-bench: admin requests/s and latency (issue 4 "Targets"). C client threads,
// each on its own connection to the admin socket, send one request and wait for its response,
// back to back, for D seconds after a warm-up; prints one "result=admin ..." line with req/s,
// p50 and p99 in µs. tools/bench/admin.sh runs it beside a paced bulk load through the relay.
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "common/UniqueFd.h"
#include "proto/ProtocolVersion.h"
#include "admin/AdminFraming.h"
#include "splicegate/admin.pb.h"

namespace po = boost::program_options;
using Clock = std::chrono::steady_clock;

namespace splicegate {
namespace {

struct ClientResult {
    std::vector<std::uint32_t> latenciesUs;  // inside the window
    std::string error;
};

UniqueFd connectAdmin(const std::string& path) {
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    if (!fd || path.size() >= sizeof(address.sun_path)) return UniqueFd();
    std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0)
        return UniqueFd();
    return fd;
}

// One request, its response; false with `error` set when the exchange failed.
bool roundTrip(int fd, const std::string& frame, admin::FrameAssembler& frames, std::string& buffer,
               std::string& error) {
    std::size_t sent = 0;
    while (sent < frame.size()) {
        ssize_t n = ::send(fd, frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL);
        if (n <= 0) {
            error = std::string("send: ") + std::strerror(errno);
            return false;
        }
        sent += static_cast<std::size_t>(n);
    }
    while (!frames.hasFrame()) {
        ssize_t n = ::recv(fd, buffer.data(), buffer.size(), 0);
        if (n <= 0) {
            error = n == 0 ? "the daemon closed the connection" : std::strerror(errno);
            return false;
        }
        if (!frames.feed(buffer.data(), static_cast<std::size_t>(n))) {
            error = "bad response: " + frames.error();
            return false;
        }
    }
    admin::Response response;
    if (!response.ParseFromString(frames.popFrame()) || !response.has_status()) {
        error = "the response is not a status";
        return false;
    }
    return true;
}

void clientLoop(const std::string& path, Clock::time_point windowStart, Clock::time_point windowEnd,
                ClientResult& result) {
    UniqueFd fd = connectAdmin(path);
    if (!fd) {
        result.error = path + ": " + std::strerror(errno);
        return;
    }
    admin::Request request;
    request.set_protocol_version(admin::kProtocolVersion);
    request.mutable_status();
    const std::string frame = admin::encodeFrame(request);
    admin::FrameAssembler frames(admin::kMaxFrameBytes, admin::kMaxFrameBytes);
    std::string buffer(64 * 1024, '\0');
    for (;;) {
        const auto sentAt = Clock::now();
        if (sentAt >= windowEnd) return;
        if (!roundTrip(fd.get(), frame, frames, buffer, result.error)) return;
        if (sentAt >= windowStart) {
            auto us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - sentAt);
            result.latenciesUs.push_back(static_cast<std::uint32_t>(us.count()));
        }
    }
}

std::uint32_t percentile(std::vector<std::uint32_t>& sorted, double p) {
    if (sorted.empty()) return 0;
    auto index = static_cast<std::size_t>(p * static_cast<double>(sorted.size() - 1));
    return sorted[index];
}

int run(int argc, char** argv) {
    std::string socketPath;
    unsigned clients = 4;
    double duration = 5, warmup = 0.5;
    po::options_description options(
        "usage: splicegate-admin-bench --socket PATH [options]\n"
        "Status requests back to back on C connections; prints result=admin rps=... p50_us=... "
        "p99_us=...\noptions");
    options.add_options()("help", "this text")("socket", po::value(&socketPath)->required(),
                                               "the daemon's admin socket")(
        "clients", po::value(&clients)->default_value(4), "connections, one thread each")(
        "duration", po::value(&duration)->default_value(5), "measuring window, seconds")(
        "warmup", po::value(&warmup)->default_value(0.5), "seconds before the window opens");
    po::variables_map values;
    try {
        po::store(po::parse_command_line(argc, argv, options), values);
        if (values.count("help")) {
            std::cout << options;
            return 0;
        }
        po::notify(values);
        if (clients == 0 || clients > 1024 || duration <= 0 || warmup < 0)
            throw po::error("--clients wants 1..1024, --duration > 0, --warmup >= 0");
    } catch (const po::error& error) {
        std::cerr << "splicegate-admin-bench: " << error.what() << "\n";
        return 2;
    }
    auto toDuration = [](double seconds) {
        return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    };
    const auto windowStart = Clock::now() + toDuration(warmup);
    const auto windowEnd = windowStart + toDuration(duration);
    std::vector<ClientResult> results(clients);
    std::vector<std::thread> threads;
    for (unsigned i = 0; i < clients; ++i)
        threads.emplace_back(clientLoop, socketPath, windowStart, windowEnd, std::ref(results[i]));
    for (auto& thread : threads) thread.join();

    std::vector<std::uint32_t> all;
    std::string errors;
    for (auto& result : results) {
        all.insert(all.end(), result.latenciesUs.begin(), result.latenciesUs.end());
        if (!result.error.empty()) errors = result.error;
    }
    std::sort(all.begin(), all.end());
    std::cout << "result=admin clients=" << clients << " requests=" << all.size()
              << " rps=" << static_cast<std::uint64_t>(static_cast<double>(all.size()) / duration)
              << " p50_us=" << percentile(all, 0.50) << " p99_us=" << percentile(all, 0.99)
              << " max_us=" << (all.empty() ? 0 : all.back()) << " ok=" << (errors.empty() ? 1 : 0)
              << std::endl;
    if (!errors.empty()) std::cerr << "splicegate-admin-bench: " << errors << "\n";
    return errors.empty() ? 0 : 1;
}

}  // namespace
}  // namespace splicegate

int main(int argc, char** argv) {
    return splicegate::run(argc, argv);
}
