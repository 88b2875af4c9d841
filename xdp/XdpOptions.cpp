#include "xdp/XdpOptions.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>

#include <charconv>

namespace splicegate {
namespace po = boost::program_options;
namespace {

constexpr Named<XdpMode> kXdpModeNames[] = {
    {"native", XdpMode::Native}, {"generic", XdpMode::Generic}, {"auto", XdpMode::Auto}};

// "10.0.0.1/8" -> "10.0.0.0/8"; a bare address is a host prefix (/32, /128). Host bits are
// cleared so that the same prefix always has the same text (XDP rule add/delete match on it).
std::string normalizeCidr(const std::string& text, const std::string& label) {
    auto invalid = [&] {
        return UsageError(label + ": invalid CIDR '" + text +
                          "' (expected a.b.c.d/0..32 or an IPv6 prefix /0..128)");
    };
    auto slash = text.find('/');
    std::string addressText = text.substr(0, slash);
    bool isV6 = addressText.find(':') != std::string::npos;
    unsigned maxLength = isV6 ? 128 : 32;
    unsigned char bytes[16] = {};
    if (inet_pton(isV6 ? AF_INET6 : AF_INET, addressText.c_str(), bytes) != 1) throw invalid();
    unsigned length = maxLength;
    if (slash != std::string::npos) {
        const char* begin = text.data() + slash + 1;
        const char* end = text.data() + text.size();
        auto [stop, error] = std::from_chars(begin, end, length);
        if (error != std::errc{} || stop != end || begin == end || length > maxLength)
            throw invalid();
    }
    for (unsigned bit = length; bit < maxLength; ++bit)
        bytes[bit / 8] &= static_cast<unsigned char>(~(0x80u >> (bit % 8)));
    char normalized[INET6_ADDRSTRLEN] = {};
    inet_ntop(isV6 ? AF_INET6 : AF_INET, bytes, normalized, sizeof normalized);
    return std::string(normalized) + "/" + std::to_string(length);
}

}  // namespace

// One option per line reads better than the formatter's layout of a call chain.
// clang-format off
po::options_description xdpOptions() {
    const XdpSettings d;
    po::options_description options;
    options.add_options()
        ("xdp-interface", scalar("IFNAME"), "attach the edge filter there; none = no XDP")
        ("xdp-mode", scalar("MODE", nameOf(kXdpModeNames, d.mode)),
         "native, generic, or auto (native, else generic)")
        ("xdp-deny", repeatable("CIDR"), "repeatable; IPv4 or IPv6 prefix dropped at the edge")
        ("xdp-allow", repeatable("CIDR"),
         "repeatable; passes even when a deny prefix or the SYN limit matches")
        ("xdp-syn-rate", scalar("N", std::to_string(d.synRate)),
         "SYNs per second per source prefix to the listen ports; 0 = no limit")
        ("xdp-syn-burst", scalar("N", std::to_string(d.synBurst)),
         "burst above the rate; 0 = the rate")
        ("xdp-syn-prefix-v4", scalar("LEN", std::to_string(d.synPrefixV4)),
         "IPv4 sources in one /LEN share a SYN limit; 32 = per address")
        ("xdp-syn-prefix-v6", scalar("LEN", std::to_string(d.synPrefixV6)),
         "IPv6 sources in one /LEN share a SYN limit; 128 = per address")
        ("xdp-syn-new-source-rate", scalar("N", std::to_string(d.synNewSourceRate)),
         "SYNs per second, all together, from source prefixes the SYN limit has no state for "
         "(new or evicted); bounds spoofed floods; 0 = no bound")
        ("xdp-syn-new-source-burst", scalar("N", std::to_string(d.synNewSourceBurst)),
         "burst above the new-source rate; 0 = that rate");
    return options;
}
// clang-format on

XdpSettings readXdpSettings(const OptionValues& values) {
    XdpSettings xdp;
    xdp.interface = values.text("xdp-interface");
    if (xdp.interface.size() >= IFNAMSIZ)
        throw UsageError(values.label("xdp-interface") + ": interface name '" + xdp.interface +
                         "' is longer than " + std::to_string(IFNAMSIZ - 1) + " characters");
    xdp.mode = values.choice(kXdpModeNames, "xdp-mode");
    for (const auto& cidr : values.list("xdp-deny"))
        xdp.deny.push_back(normalizeCidr(cidr, values.label("xdp-deny")));
    for (const auto& cidr : values.list("xdp-allow"))
        xdp.allow.push_back(normalizeCidr(cidr, values.label("xdp-allow")));
    xdp.synRate = values.number<std::uint32_t>("xdp-syn-rate");
    xdp.synBurst = values.number<std::uint32_t>("xdp-syn-burst");
    xdp.synPrefixV4 = values.number<std::uint32_t>("xdp-syn-prefix-v4", 1, 32);
    xdp.synPrefixV6 = values.number<std::uint32_t>("xdp-syn-prefix-v6", 1, 128);
    xdp.synNewSourceRate = values.number<std::uint32_t>("xdp-syn-new-source-rate");
    xdp.synNewSourceBurst = values.number<std::uint32_t>("xdp-syn-new-source-burst");
    return xdp;
}

void listChanged(const XdpSettings& running, const XdpSettings& next, ChangedOptions& changed) {
    changed.check("xdp-interface", running.interface, next.interface);
    changed.check("xdp-mode", running.mode, next.mode);
}

}  // namespace splicegate
