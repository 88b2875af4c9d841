#include "archive/ObjectKeys.h"

#include <cstdio>
#include <ctime>

namespace splicegate::archive {
namespace {

constexpr std::int64_t kNsPerSecond = 1'000'000'000;

std::tm utc(std::int64_t ns) {
    // Floor division: a time before the epoch still lands in the hour it belongs to.
    std::int64_t seconds = ns / kNsPerSecond - (ns % kNsPerSecond < 0 ? 1 : 0);
    auto t = static_cast<std::time_t>(seconds);
    std::tm parts{};
    ::gmtime_r(&t, &parts);
    return parts;
}

std::string hourPath(std::int64_t ns) {
    auto t = utc(ns);
    char text[80];
    std::snprintf(text, sizeof text, "%04d/%02d/%02d/%02d", t.tm_year + 1900, t.tm_mon + 1,
                  t.tm_mday, t.tm_hour);
    return text;
}

std::string stamp(std::int64_t ns) {
    auto t = utc(ns);
    char text[80];
    std::snprintf(text, sizeof text, "%04d%02d%02dT%02d%02d%02dZ", t.tm_year + 1900,
                  t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec);
    return text;
}

std::string segmentName(const SegmentId& id) {
    auto name = stateFileName(id.worker, id.segment);
    return name.substr(0, name.rfind('.'));  // "wWW-SSSSSSSSSS"
}

std::string_view suffix(ObjectKind kind) {
    switch (kind) {
        case ObjectKind::Data:
            return ".data";
        case ObjectKind::Index:
            return ".index";
        case ObjectKind::Connections:
            return ".connections.jsonl.gz";
        case ObjectKind::Manifest:
            return ".json";
    }
    return "";
}

}  // namespace

std::string objectKey(std::string_view prefix, const SegmentId& id, ObjectKind kind) {
    if (kind == ObjectKind::Manifest) return manifestKey(prefix, id);
    return std::string(prefix) + "/segments/" + hourPath(id.createdNs) + "/" +
           stamp(id.createdNs) + "-" + segmentName(id) + std::string(suffix(kind));
}

std::string manifestKey(std::string_view prefix, const SegmentId& id) {
    return manifestHourPrefix(prefix, id.createdNs) + segmentName(id) + ".json";
}

std::string manifestHourPrefix(std::string_view prefix, std::int64_t hourNs) {
    return std::string(prefix) + "/manifests/" + hourPath(hourNs) + "/";
}

std::optional<ParsedKey> parseObjectKey(std::string_view prefix, std::string_view key) {
    std::string head = std::string(prefix) + "/segments/";
    if (!key.starts_with(head)) return std::nullopt;
    auto slash = key.rfind('/');
    auto name = key.substr(slash + 1);
    for (auto kind : {ObjectKind::Data, ObjectKind::Index, ObjectKind::Connections}) {
        auto ending = suffix(kind);
        if (!name.ends_with(ending)) continue;
        std::string base(name.substr(0, name.size() - ending.size()));
        std::tm t{};
        unsigned worker = 0;
        unsigned long long segment = 0;
        int consumed = 0;
        if (std::sscanf(base.c_str(), "%4d%2d%2dT%2d%2d%2dZ-w%u-%llu%n", &t.tm_year, &t.tm_mon,
                        &t.tm_mday, &t.tm_hour, &t.tm_min, &t.tm_sec, &worker, &segment,
                        &consumed) != 8 ||
            static_cast<std::size_t>(consumed) != base.size())
            return std::nullopt;
        t.tm_year -= 1900;
        t.tm_mon -= 1;
        ParsedKey parsed{{worker, segment, static_cast<std::int64_t>(::timegm(&t)) * kNsPerSecond},
                         kind};
        // Only the canonical spelling (and the right hour folder) counts.
        if (objectKey(prefix, parsed.id, kind) != key) return std::nullopt;
        return parsed;
    }
    return std::nullopt;
}

std::optional<SegmentId> parseManifestKey(std::string_view prefix, std::string_view key) {
    std::string head = std::string(prefix) + "/manifests/";
    if (!key.starts_with(head)) return std::nullopt;
    std::string rest(key.substr(head.size()));
    std::tm t{};
    unsigned worker = 0;
    unsigned long long segment = 0;
    int consumed = 0;
    if (std::sscanf(rest.c_str(), "%4d/%2d/%2d/%2d/w%u-%llu.json%n", &t.tm_year, &t.tm_mon,
                    &t.tm_mday, &t.tm_hour, &worker, &segment, &consumed) != 6 ||
        static_cast<std::size_t>(consumed) != rest.size())
        return std::nullopt;
    t.tm_year -= 1900;
    t.tm_mon -= 1;
    SegmentId id{worker, segment, static_cast<std::int64_t>(::timegm(&t)) * kNsPerSecond};
    if (manifestKey(prefix, id) != key) return std::nullopt;  // only the canonical spelling
    return id;
}

std::string checkPrefix(std::string_view prefix) {
    if (prefix.empty()) return "is empty";
    if (prefix.front() == '/' || prefix.back() == '/') return "starts or ends with '/'";
    if (prefix.find("//") != std::string_view::npos) return "has an empty part ('//')";
    for (char c : prefix) {
        bool allowed = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '.' || c == '-' || c == '_' || c == '/';
        if (!allowed) return std::string("has the character '") + c + "'";
    }
    for (std::string_view part : {std::string_view("."), std::string_view("..")})
        if (prefix == part || prefix.starts_with(std::string(part) + "/") ||
            prefix.ends_with("/" + std::string(part)) ||
            prefix.find("/" + std::string(part) + "/") != std::string_view::npos)
            return "has a '.' or '..' part";
    return {};
}

}  // namespace splicegate::archive
