// splicegate-xdp-bench: cost of the XDP edge filter per packet, from BPF_PROG_TEST_RUN with a
// large repeat count (the kernel times the loop around the program; no NIC, no interface).
// Paths: deny hit (drop), pass (no rule matches), SYN over the rate limit (drop), for IPv4 and
// IPv6, with 10 and 10,000 deny prefixes per family. Prints a markdown table; with --check exits
// 1 when a path with 10,000 prefixes costs more than 1.5x the same path with 10.
#include <linux/bpf.h>
#include <sys/socket.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "common/Log.h"
#include "xdp/EdgeFilterProgram.h"
#include "xdp/testing/PacketBuilder.h"
#include "xdp/testing/XdpTestRun.h"

namespace {

using namespace splicegate;
using xdptest::PacketBuilder;

constexpr const char* kUsageHead = "usage: splicegate-xdp-bench [options]";
constexpr const char* kUsageTail =
    "Needs root (or CAP_BPF + CAP_PERFMON + CAP_NET_ADMIN). Exit status: 0 ok, 1 failure, 2 usage "
    "error.\n";

constexpr std::uint16_t kListenPort = 8443;

struct Path {
    const char* name;
    std::vector<std::uint8_t> frame;
    std::uint32_t verdict;
};

// blocklist: IPv4 in 1.0.0.0-223.255.255.255, 60 % /32, 30 % /24, 10 % /16-/23; IPv6 in 2000::/3,
// 40 % /128, 40 % /64, 20 % /32-/48. crowded: every IPv4 prefix inside 10.1.0.0/16 (70 % /32,
// 30 % /28-/31, so some of it stays uncovered) and every IPv6 one inside 2001:db8::/32 (40 % /128,
// 60 % /64-/127): one bucket each, so the full trie answers.
bool crowded = false;

Cidr randomAddress(int family, std::mt19937& random) {
    std::uniform_int_distribution<int> byte(0, 255);
    Cidr cidr{};
    cidr.family = family;
    if (crowded && family == AF_INET) {
        cidr.address = {10, 1, static_cast<std::uint8_t>(byte(random)),
                        static_cast<std::uint8_t>(byte(random))};
        cidr.prefixLength = 32;
    } else if (crowded) {
        cidr.address = {0x20, 0x01, 0x0d, 0xb8};
        for (std::size_t i = 4; i < 16; ++i)
            cidr.address[i] = static_cast<std::uint8_t>(byte(random));
        cidr.prefixLength = 128;
    } else if (family == AF_INET) {
        cidr.address[0] =
            static_cast<std::uint8_t>(std::uniform_int_distribution<int>(1, 223)(random));
        for (std::size_t i = 1; i < 4; ++i)
            cidr.address[i] = static_cast<std::uint8_t>(byte(random));
        cidr.prefixLength = 32;
    } else {
        cidr.address[0] = static_cast<std::uint8_t>(0x20 | (byte(random) & 0x1f));
        for (std::size_t i = 1; i < 16; ++i)
            cidr.address[i] = static_cast<std::uint8_t>(byte(random));
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
        if (family == AF_INET && crowded)
            cidr.prefixLength = p < 70 ? 32u : 28u + static_cast<unsigned>(p % 4);
        else if (family == AF_INET)
            cidr.prefixLength = p < 60 ? 32u : p < 90 ? 24u : 16u + static_cast<unsigned>(p % 8);
        else if (crowded)
            cidr.prefixLength = p < 40 ? 128u : 64u + static_cast<unsigned>(p % 64);
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
    for (int attempt = 0; attempt < 100000; ++attempt) {
        Cidr probe = randomAddress(family, random);
        if (std::none_of(prefixes.begin(), prefixes.end(),
                         [&](const Cidr& cidr) { return covers(cidr, probe.address); })) {
            std::string text = probe.text();
            return text.substr(0, text.find('/'));
        }
    }
    throw std::runtime_error("no address left uncovered by the deny prefixes");
}

// The address inside a prefix from the middle of the list (a /32 or /128 is its own address).
std::string coveredAddress(const std::vector<Cidr>& prefixes) {
    const Cidr& cidr = prefixes[prefixes.size() / 2];
    std::string text = cidr.text();
    return text.substr(0, text.find('/'));
}

struct Scenario {
    std::size_t prefixes;
    std::unique_ptr<EdgeFilterProgram> program;
    std::vector<Path> paths;
};

Scenario makeScenario(std::size_t prefixes) {
    std::mt19937 random(42);
    Scenario scenario;
    scenario.prefixes = prefixes;
    scenario.program = std::make_unique<EdgeFilterProgram>();
    EdgeFilterProgram& program = *scenario.program;
    auto deny4 = denyPrefixes(AF_INET, prefixes, random);
    auto deny6 = denyPrefixes(AF_INET6, prefixes, random);
    for (const Cidr& cidr : deny4) program.addDeny(cidr);
    for (const Cidr& cidr : deny6) program.addDeny(cidr);
    program.setListenPorts({kListenPort});
    SynLimit limit;
    limit.rate = 1;
    limit.burst = 1;  // the limited source is over it after its first SYN
    program.setSynLimit(limit);

    const std::string hit4 = coveredAddress(deny4),
                      miss4 = uncoveredAddress(AF_INET, deny4, random);
    const std::string hit6 = coveredAddress(deny6),
                      miss6 = uncoveredAddress(AF_INET6, deny6, random);
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
    using xdptest::kAck;
    using xdptest::kSyn;
    scenario.paths = {
        {"IPv4 deny hit (drop)", v4(hit4).tcp(40000, kListenPort, kSyn).build(), XDP_DROP},
        {"IPv4 pass (ACK, 1400 B)", v4(miss4).tcp(40000, kListenPort, kAck).payload(1400).build(),
         XDP_PASS},
        {"IPv4 SYN over rate limit (drop)", v4(miss4).tcp(40000, kListenPort, kSyn).build(),
         XDP_DROP},
        {"IPv6 deny hit (drop)", v6(hit6).tcp(40000, kListenPort, kSyn).build(), XDP_DROP},
        {"IPv6 pass (ACK, 1400 B)", v6(miss6).tcp(40000, kListenPort, kAck).payload(1400).build(),
         XDP_PASS},
        {"IPv6 SYN over rate limit (drop)", v6(miss6).tcp(40000, kListenPort, kSyn).build(),
         XDP_DROP},
    };
    return scenario;
}

std::uint32_t median(std::vector<std::uint32_t> values) {
    std::sort(values.begin(), values.end());
    return values[values.size() / 2];
}

// "10,10000" -> {10, 10000}; each a whole positive count.
std::vector<std::size_t> parsePrefixCounts(const std::string& list) {
    std::vector<std::size_t> counts;
    for (std::size_t start = 0; start <= list.size();) {
        std::size_t comma = std::min(list.find(',', start), list.size());
        std::size_t count = 0;
        auto [end, ec] = std::from_chars(list.data() + start, list.data() + comma, count);
        if (ec != std::errc{} || end != list.data() + comma || count == 0)
            throw std::invalid_argument(
                "--prefixes wants positive counts separated by commas, got '" + list + "'");
        counts.push_back(count);
        start = comma + 1;
    }
    if (counts.size() < 2)
        throw std::invalid_argument("--prefixes wants at least two counts, got '" + list + "'");
    return counts;
}

}  // namespace

int main(int argc, char** argv) {
    namespace po = boost::program_options;
    int repeat = 0;
    int runs = 0;
    bool check = false;
    std::string prefixList;
    po::options_description described(kUsageHead);
    // clang-format off
    described.add_options()
        ("repeat", po::value(&repeat)->default_value(1'000'000)->value_name("N"),
         "BPF_PROG_TEST_RUN repetitions per measurement")
        ("runs", po::value(&runs)->default_value(7)->value_name("R"),
         "measurements per cell, interleaved; min and median shown")
        ("prefixes", po::value(&prefixList)->default_value("10,10000")->value_name("A,B,..."),
         "deny prefixes per family, one column each")
        ("crowded", po::bool_switch(&crowded),
         "all prefixes in one /16 and one /32 (the bucket index's worst case)")
        ("check", po::bool_switch(&check),
         "exit 1 if the last column costs more than 1.5x the first on any path")
        ("version", "print the version")
        ("help,h", "this text");
    // clang-format on
    std::vector<std::size_t> sizes;
    try {
        po::variables_map given;
        po::store(po::command_line_parser(argc, argv)
                      .options(described)
                      .positional(po::positional_options_description())  // none: strays are errors
                      .run(),
                  given);
        if (given.count("help")) {
            std::cout << described << kUsageTail;
            return 0;
        }
        if (given.count("version")) {
            std::cout << "splicegate-xdp-bench " << SPLICEGATE_VERSION << '\n';
            return 0;
        }
        po::notify(given);
        if (repeat <= 0 || runs <= 0)
            throw std::invalid_argument("--repeat and --runs must be positive");
        sizes = parsePrefixCounts(prefixList);
    } catch (const std::exception& error) {
        std::cerr << "splicegate-xdp-bench: " << error.what() << " (see --help)\n";
        return 2;
    }

    try {
        setLogLevel(LogLevel::Warn);
        std::string why;
        if (!xdptest::bpfAvailable(&why)) {
            std::cerr << "splicegate-xdp-bench: " << why << '\n';
            return 1;
        }
        std::vector<Scenario> scenarios;
        for (std::size_t size : sizes) scenarios.push_back(makeScenario(size));
        const std::size_t pathCount = scenarios.front().paths.size();

        // samples[path][scenario]; interleaved so drift and neighbours hit every cell alike.
        std::vector<std::vector<std::vector<std::uint32_t>>> samples(
            pathCount, std::vector<std::vector<std::uint32_t>>(scenarios.size()));
        for (Scenario& scenario : scenarios)
            for (const Path& path : scenario.paths) {
                // Warm-up; also spends the limited source's only token.
                auto warm = xdptest::runXdp(scenario.program->programFd(), path.frame, 1000);
                if (warm.error != 0) {
                    std::cerr << "splicegate-xdp-bench: BPF_PROG_TEST_RUN: "
                              << std::strerror(-warm.error) << '\n';
                    return 1;
                }
            }
        for (int run = 0; run < runs; ++run)
            for (std::size_t p = 0; p < pathCount; ++p)
                for (std::size_t s = 0; s < scenarios.size(); ++s) {
                    const Path& path = scenarios[s].paths[p];
                    auto result =
                        xdptest::runXdp(scenarios[s].program->programFd(), path.frame, repeat);
                    if (result.error != 0 || result.verdict != path.verdict) {
                        std::cerr << "splicegate-xdp-bench: " << path.name << ": verdict "
                                  << result.verdict << ", expected " << path.verdict << '\n';
                        return 1;
                    }
                    samples[p][s].push_back(result.durationNs);
                }

        // Reference: what BPF_PROG_TEST_RUN costs around a program that only returns XDP_PASS.
        std::vector<std::uint32_t> baseline;
        {
            int error = 0;
            UniqueFd pass = xdptest::loadPassProgram("sg_bench_pass", &error);
            if (!pass) throw std::system_error(error, std::system_category(), "loading XDP_PASS");
            const auto frame = scenarios.front().paths.front().frame;
            for (int run = 0; run < runs; ++run)
                baseline.push_back(xdptest::runXdp(pass.get(), frame, repeat).durationNs);
        }

        bool withinTarget = true;
        std::printf("| path |");
        for (std::size_t size : sizes) std::printf(" %zu prefixes |", size);
        std::printf(" ratio %zu / %zu |\n|---|", sizes.back(), sizes.front());
        for (std::size_t i = 0; i <= sizes.size(); ++i) std::printf("---:|");
        std::printf("\n");
        std::printf("| only `return XDP_PASS` (test-run overhead) |");
        for (std::size_t s = 0; s < scenarios.size(); ++s)
            std::printf(" %u (%u) |", *std::min_element(baseline.begin(), baseline.end()),
                        median(baseline));
        std::printf(" |\n");
        for (std::size_t p = 0; p < pathCount; ++p) {
            std::printf("| %s |", scenarios.front().paths[p].name);
            for (std::size_t s = 0; s < scenarios.size(); ++s)
                std::printf(" %u (%u) |",
                            *std::min_element(samples[p][s].begin(), samples[p][s].end()),
                            median(samples[p][s]));
            const double first =
                *std::min_element(samples[p].front().begin(), samples[p].front().end());
            const double last =
                *std::min_element(samples[p].back().begin(), samples[p].back().end());
            const double ratio = first > 0 ? last / first : 0;
            withinTarget = withinTarget && ratio <= 1.5;
            std::printf(" %.2f |\n", ratio);
        }
        std::printf(
            "\nns/packet: min (median) of %d runs of BPF_PROG_TEST_RUN x %d; deny prefixes per "
            "family, %s; target ratio <= 1.5 on min: %s\n",
            runs, repeat,
            crowded ? "crowded into 10.1.0.0/16 and 2001:db8::/32"
                    : "shaped like a blocklist (IPv4 60% /32, 30% /24, 10% /16-/23; IPv6 "
                      "40% /128, 40% /64, 20% /32-/48)",
            withinTarget ? "met" : "MISSED");
        return check && !withinTarget ? 1 : 0;
    } catch (const std::exception& error) {
        std::cerr << "splicegate-xdp-bench: " << error.what() << '\n';
        return 1;
    }
}
