// splicegate-xdp-bench: cost of the XDP edge filter per packet, from BPF_PROG_TEST_RUN with a
// large repeat count (the kernel times the loop around the program; no NIC, no interface).
// Paths: deny hit (drop), pass (no rule matches), SYN over the rate limit (drop), for IPv4 and
// IPv6, with 10 and 10,000 deny prefixes per family. Prints a markdown table; with --check exits
// 1 when a path with 10,000 prefixes costs more than 1.5x the same path with 10.
#include <linux/bpf.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/Log.h"
#include "xdp/EdgeFilterProgram.h"
#include "xdp/testing/PacketBuilder.h"
#include "xdp/testing/XdpTestRun.h"

namespace {

using namespace splicegate;
using xdptest::PacketBuilder;

constexpr const char* kUsage =
    "usage: splicegate-xdp-bench [--repeat N] [--runs R] [--check]\n"
    "  --repeat N  BPF_PROG_TEST_RUN repetitions per measurement (default 1000000)\n"
    "  --runs R    measurements per cell; the median is reported (default 5)\n"
    "  --check     exit 1 if 10,000 prefixes cost more than 1.5x 10 prefixes on any path\n"
    "Needs root (or CAP_BPF + CAP_NET_ADMIN). Exit status: 0 ok, 1 failure, 2 usage error.\n";

constexpr std::uint16_t kListenPort = 8443;

struct Path {
    const char* name;
    std::vector<std::uint8_t> frame;
    std::uint32_t verdict;
};

// Deny prefixes shaped like a blocklist: IPv4 in 1.0.0.0-223.255.255.255, 60 % /32, 30 % /24,
// 10 % /16-/23; IPv6 in 2000::/3, 40 % /128, 40 % /64, 20 % /32-/48.
Cidr randomAddress(int family, std::mt19937& random) {
    std::uniform_int_distribution<int> byte(0, 255);
    Cidr cidr{};
    cidr.family = family;
    if (family == AF_INET) {
        cidr.address[0] = static_cast<std::uint8_t>(std::uniform_int_distribution<int>(1, 223)(random));
        for (std::size_t i = 1; i < 4; ++i) cidr.address[i] = static_cast<std::uint8_t>(byte(random));
        cidr.prefixLength = 32;
    } else {
        cidr.address[0] = static_cast<std::uint8_t>(0x20 | (byte(random) & 0x1f));
        for (std::size_t i = 1; i < 16; ++i) cidr.address[i] = static_cast<std::uint8_t>(byte(random));
        cidr.prefixLength = 128;
    }
    return cidr;
}

std::vector<Cidr> denyPrefixes(int family, std::size_t count, std::mt19937& random) {
    std::vector<Cidr> result;
    std::uniform_int_distribution<int> percent(0, 99);
    while (result.size() < count) {
        Cidr cidr = randomAddress(family, random);
        const int p = percent(random);
        if (family == AF_INET)
            cidr.prefixLength = p < 60 ? 32u : p < 90 ? 24u : 16u + static_cast<unsigned>(p % 8);
        else
            cidr.prefixLength = p < 40 ? 128u : p < 80 ? 64u : 32u + static_cast<unsigned>(p % 17);
        // Normalise through the parser (clears host bits).
        result.push_back(*Cidr::parse(cidr.text()));
    }
    return result;
}

bool covers(const Cidr& cidr, const std::array<std::uint8_t, 16>& address) {
    for (unsigned bit = 0; bit < cidr.prefixLength; ++bit) {
        const unsigned mask = 0x80u >> (bit % 8);
        if ((cidr.address[bit / 8] & mask) != (address[bit / 8] & mask)) return false;
    }
    return true;
}

// An address of the same space that no prefix covers.
std::string uncoveredAddress(int family, const std::vector<Cidr>& prefixes, std::mt19937& random) {
    for (;;) {
        Cidr probe = randomAddress(family, random);
        if (std::none_of(prefixes.begin(), prefixes.end(),
                         [&](const Cidr& cidr) { return covers(cidr, probe.address); })) {
            std::string text = probe.text();
            return text.substr(0, text.find('/'));
        }
    }
}

// The address inside a prefix from the middle of the list (a /32 or /128 is its own address).
std::string coveredAddress(const std::vector<Cidr>& prefixes) {
    const Cidr& cidr = prefixes[prefixes.size() / 2];
    std::string text = cidr.text();
    return text.substr(0, text.find('/'));
}

std::uint32_t median(std::vector<std::uint32_t> values) {
    std::sort(values.begin(), values.end());
    return values[values.size() / 2];
}

struct Row {
    std::string path;
    std::map<std::size_t, std::uint32_t> nsByPrefixes;
};

}  // namespace

int main(int argc, char** argv) {
    int repeat = 1'000'000;
    int runs = 5;
    bool check = false;
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        auto value = [&]() -> int {
            if (i + 1 >= argc) throw std::invalid_argument(arg + " needs a value");
            return std::stoi(argv[++i]);
        };
        try {
            if (arg == "--help" || arg == "-h") {
                std::cout << kUsage;
                return 0;
            } else if (arg == "--version") {
                std::cout << "splicegate-xdp-bench " << SPLICEGATE_VERSION << '\n';
                return 0;
            } else if (arg == "--repeat") {
                repeat = value();
            } else if (arg == "--runs") {
                runs = value();
            } else if (arg == "--check") {
                check = true;
            } else {
                throw std::invalid_argument("unknown option " + arg);
            }
        } catch (const std::exception& error) {
            std::cerr << "splicegate-xdp-bench: " << error.what() << "\n" << kUsage;
            return 2;
        }
        if (repeat <= 0 || runs <= 0) {
            std::cerr << "splicegate-xdp-bench: --repeat and --runs must be positive\n";
            return 2;
        }
    }

    try {
        setLogLevel(LogLevel::Warn);
        std::string why;
        if (!xdptest::bpfAvailable(&why)) {
            std::cerr << "splicegate-xdp-bench: " << why << '\n';
            return 1;
        }
        std::vector<std::size_t> sizes = {10, 10'000};
        if (const char* env = std::getenv("SG_SIZES")) { sizes.clear(); for (std::string t = env; !t.empty();) { auto c = t.find(','); sizes.push_back(std::stoul(t.substr(0, c))); t = c == std::string::npos ? "" : t.substr(c + 1);} }
        std::vector<Row> rows;
        for (std::size_t size : sizes) {
            std::mt19937 random(42);
            EdgeFilterProgram program;
            auto deny4 = denyPrefixes(AF_INET, size, random);
            auto deny6 = denyPrefixes(AF_INET6, size, random);
            for (const Cidr& cidr : deny4) program.addDeny(cidr);
            for (const Cidr& cidr : deny6) program.addDeny(cidr);
            program.setListenPorts({kListenPort});
            program.setSynLimit(1, 1);  // the limited source is over it after its first SYN

            const std::string hit4 = coveredAddress(deny4), miss4 = uncoveredAddress(AF_INET, deny4, random);
            const std::string hit6 = coveredAddress(deny6), miss6 = uncoveredAddress(AF_INET6, deny6, random);
            auto v4 = [](const std::string& source) {
                PacketBuilder builder;
                builder.ipv4(source, "198.18.0.1");
                return builder;
            };
            auto v6 = [](const std::string& source) {
                PacketBuilder builder;
                builder.ipv6(source, "2001:2::1");
                return builder;
            };
            const std::vector<Path> paths = {
                {"IPv4 deny hit (drop)", v4(hit4).tcp(40000, kListenPort, xdptest::kSyn).build(),
                 XDP_DROP},
                {"IPv4 pass (ACK + 1400 B)",
                 v4(miss4).tcp(40000, kListenPort, xdptest::kAck).payload(1400).build(), XDP_PASS},
                {"IPv4 SYN over rate limit (drop)",
                 v4(miss4).tcp(40000, kListenPort, xdptest::kSyn).build(), XDP_DROP},
                {"IPv6 deny hit (drop)", v6(hit6).tcp(40000, kListenPort, xdptest::kSyn).build(),
                 XDP_DROP},
                {"IPv6 pass (ACK + 1400 B)",
                 v6(miss6).tcp(40000, kListenPort, xdptest::kAck).payload(1400).build(), XDP_PASS},
                {"IPv6 SYN over rate limit (drop)",
                 v6(miss6).tcp(40000, kListenPort, xdptest::kSyn).build(), XDP_DROP},
            };
            if (rows.empty())
                for (const Path& path : paths) rows.push_back({path.name, {}});
            for (std::size_t p = 0; p < paths.size(); ++p) {
                const Path& path = paths[p];
                // Warm-up: also spends the limited source's only token.
                auto warm = xdptest::runXdp(program.programFd(), path.frame, 1000);
                if (warm.error != 0) {
                    std::cerr << "splicegate-xdp-bench: BPF_PROG_TEST_RUN: "
                              << std::strerror(-warm.error) << '\n';
                    return 1;
                }
                std::vector<std::uint32_t> samples;
                for (int run = 0; run < runs; ++run) {
                    auto result = xdptest::runXdp(program.programFd(), path.frame, repeat);
                    if (result.error != 0 || result.verdict != path.verdict) {
                        std::cerr << "splicegate-xdp-bench: " << path.name << ": verdict "
                                  << result.verdict << ", expected " << path.verdict << '\n';
                        return 1;
                    }
                    samples.push_back(result.durationNs);
                }
                rows[p].nsByPrefixes[size] = median(samples);
            }
        }

        bool withinTarget = true;
        std::printf("| path | ns/packet, 10 prefixes | ns/packet, 10,000 prefixes | ratio |\n");
        std::printf("|---|---:|---:|---:|\n");
        for (const Row& row : rows) {
            for (auto [k, v] : row.nsByPrefixes) std::printf("%zu:%u ", k, v);
            std::printf("\n");
            const double small = row.nsByPrefixes.at(10), large = row.nsByPrefixes.at(10'000);
            const double ratio = small > 0 ? large / small : 0;
            withinTarget = withinTarget && ratio <= 1.5;
            std::printf("| %s | %.0f | %.0f | %.2f |\n", row.path.c_str(), small, large, ratio);
        }
        std::printf("\nrepeat %d, median of %d runs; prefixes per family shaped like a "
                    "blocklist (mostly /32 and /24; /128 and /64); target ratio <= 1.5: %s\n",
                    repeat, runs, withinTarget ? "met" : "MISSED");
        return check && !withinTarget ? 1 : 0;
    } catch (const std::exception& error) {
        std::cerr << "splicegate-xdp-bench: " << error.what() << '\n';
        return 1;
    }
}
