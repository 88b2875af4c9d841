#include "datapath/Failpoints.h"

#ifdef SPLICEGATE_FAILPOINTS
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "common/Error.h"
#include "common/Log.h"

namespace splicegate {
namespace {

struct Failpoint {
    bool shorten = false;
    int error = 0;
    unsigned long first = 0;
    unsigned long count = 1;
};

struct SiteState {
    std::vector<Failpoint> points;
    std::atomic<unsigned long> resultHits{0};
    std::atomic<unsigned long> lengthHits{0};
};

std::array<SiteState, static_cast<std::size_t>(FailSite::Count)> sites;

FailSite parseSite(const std::string& name) {
    if (name == "fill") return FailSite::Fill;
    if (name == "forward") return FailSite::Forward;
    if (name == "tee") return FailSite::Tee;
    if (name == "audit-write") return FailSite::AuditWrite;
    if (name == "audit-sync") return FailSite::AuditSync;
    if (name == "audit-record") return FailSite::AuditRecord;
    throw UsageError("SPLICEGATE_FAILPOINTS: unknown site '" + name + "'");
}

int parseErrno(const std::string& name) {
    if (name == "EIO") return EIO;
    if (name == "ENOSPC") return ENOSPC;
    if (name == "ECONNRESET") return ECONNRESET;
    if (name == "EPIPE") return EPIPE;
    if (name == "ENOMEM") return ENOMEM;
    throw UsageError("SPLICEGATE_FAILPOINTS: unknown action '" + name + "'");
}

unsigned long parseNumber(const std::string& text) {
    unsigned long value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc{} || end != text.data() + text.size())
        throw UsageError("SPLICEGATE_FAILPOINTS: '" + text + "' is not a number");
    return value;
}

bool active(const Failpoint& point, unsigned long hit) {
    return hit >= point.first && (point.count == 0 || hit < point.first + point.count);
}

}  // namespace

void loadFailpoints() {
    const char* spec = std::getenv("SPLICEGATE_FAILPOINTS");
    if (spec == nullptr) return;
    std::stringstream entries(spec);
    std::string entry;
    while (std::getline(entries, entry, ',')) {
        std::vector<std::string> parts;
        std::stringstream fields(entry);
        std::string field;
        while (std::getline(fields, field, ':')) parts.push_back(field);
        if (parts.size() < 3 || parts.size() > 4)
            throw UsageError("SPLICEGATE_FAILPOINTS: '" + entry +
                             "' is not site:action:first[:count]");
        Failpoint point;
        point.shorten = parts[1] == "short";
        if (!point.shorten) point.error = parseErrno(parts[1]);
        point.first = parseNumber(parts[2]);
        if (parts.size() == 4) point.count = parseNumber(parts[3]);
        sites[static_cast<std::size_t>(parseSite(parts[0]))].points.push_back(point);
        logWarn("failpoint armed: ", entry);
    }
}

int failpointResult(FailSite site, int result) noexcept {
    auto& state = sites[static_cast<std::size_t>(site)];
    if (state.points.empty()) return result;
    auto hit = state.resultHits.fetch_add(1) + 1;
    for (const auto& point : state.points)
        if (point.error != 0 && active(point, hit)) return -point.error;
    return result;
}

std::size_t failpointLength(FailSite site, std::size_t length) noexcept {
    auto& state = sites[static_cast<std::size_t>(site)];
    if (state.points.empty()) return length;
    auto hit = state.lengthHits.fetch_add(1) + 1;
    for (const auto& point : state.points)
        if (point.shorten && active(point, hit) && length > 1) return length / 2;
    return length;
}

unsigned failpointAuditWriteDelayMs() noexcept {
    const char* text = std::getenv("SPLICEGATE_AUDIT_WRITE_DELAY_MS");
    if (text == nullptr) return 0;
    unsigned value = 0;
    auto [end, ec] = std::from_chars(text, text + std::strlen(text), value);
    return ec == std::errc{} && *end == '\0' ? value : 0;
}

}  // namespace splicegate
#endif
