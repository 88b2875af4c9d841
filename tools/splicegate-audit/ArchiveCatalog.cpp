#include "tools/splicegate-audit/ArchiveCatalog.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <set>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <utility>

namespace splicegate::audittool {
namespace {

constexpr std::int64_t kNsPerSecond = 1'000'000'000;
// Connections objects fetched and parsed at once (each GET has its own connection).
constexpr std::size_t kParallelReads = 8;

bool continuesFromEarlier(const archive::ArchivedConnection& line) { return !line.has_opened_ns(); }
bool goesOnLater(const archive::ArchivedConnection& line) { return line.state() == "open"; }

}  // namespace

ArchiveCatalog::ArchiveCatalog(s3::S3Client& s3, ArchiveLocation location)
    : s3_(s3), location_(std::move(location)) {
    const std::string head =
        location_.prefix.empty() ? "segments/" : location_.prefix + "/segments/";
    auto listed = s3_.list(location_.bucket, head);
    if (!listed) throw std::runtime_error(listed.error.message);
    // Keys sort by time, so the segments come in key order; an object of a segment seen already
    // joins it (a segment's three keys differ only in their ending).
    std::map<std::tuple<std::int64_t, unsigned, std::uint64_t>, std::size_t> position;
    for (const auto& entry : *listed) {
        auto parsed = archive::parseObjectKey(location_.prefix, entry.key);
        if (!parsed) continue;
        const auto& id = parsed->id;
        auto [it, added] =
            position.try_emplace({id.createdNs, id.worker, id.segment}, segments_.size());
        if (added) segments_.push_back({id, {}, {}, {}, 0, 0});
        auto& segment = segments_[it->second];
        switch (parsed->kind) {
            case archive::ObjectKind::Data:
                segment.dataKey = entry.key;
                segment.dataSize = entry.size;
                break;
            case archive::ObjectKind::Index:
                segment.indexKey = entry.key;
                segment.indexSize = entry.size;
                break;
            case archive::ObjectKind::Connections:
                segment.connectionsKey = entry.key;
                break;
            case archive::ObjectKind::Manifest:
                break;
        }
    }
    // The listing is in key order already; sorting makes that independent of the server.
    std::sort(segments_.begin(), segments_.end(), [](const auto& a, const auto& b) {
        return std::tie(a.id.createdNs, a.id.worker, a.id.segment) <
               std::tie(b.id.createdNs, b.id.worker, b.id.segment);
    });
    for (std::size_t i = 0; i < segments_.size(); ++i) byWorker_[segments_[i].id.worker].push_back(i);
    for (auto& [worker, positions] : byWorker_) {
        std::sort(positions.begin(), positions.end(), [&](std::size_t a, std::size_t b) {
            return segments_[a].id.segment < segments_[b].id.segment;
        });
        for (std::size_t rank = 0; rank < positions.size(); ++rank) rank_[positions[rank]] = rank;
    }
}

std::string ArchiveCatalog::url(const std::string& key) const {
    return "s3://" + location_.bucket + "/" + key;
}

std::optional<std::size_t> ArchiveCatalog::neighbour(std::size_t index, int step) const {
    const auto& positions = byWorker_.at(segments_.at(index).id.worker);
    const auto rank = static_cast<std::int64_t>(rank_.at(index)) + step;
    if (rank < 0 || rank >= static_cast<std::int64_t>(positions.size())) return std::nullopt;
    return positions[static_cast<std::size_t>(rank)];
}

std::vector<std::size_t> ArchiveCatalog::overlapping(std::optional<std::int64_t> sinceNs,
                                                     std::optional<std::int64_t> untilNs) const {
    std::vector<std::size_t> selected;
    for (std::size_t i = 0; i < segments_.size(); ++i) {
        if (untilNs && segments_[i].id.createdNs > *untilNs) continue;
        if (sinceNs) {
            // Ends where the worker's next segment begins (its stamp is rounded down).
            auto next = neighbour(i, +1);
            if (next && segments_[*next].id.createdNs + kNsPerSecond < *sinceNs) continue;
        }
        selected.push_back(i);
    }
    return selected;
}

namespace {

// One segment's connections object read: its lines, and what went wrong, in order.
struct SegmentRead {
    std::vector<archive::ArchivedConnection> lines;
    std::vector<std::string> problems;
};

SegmentRead readSegmentLines(const ArchiveCatalog& catalog, std::size_t index) {
    SegmentRead read;
    const auto& segment = catalog.segments()[index];
    if (segment.connectionsKey.empty()) {
        read.problems.push_back(
            catalog.url(segment.indexKey.empty() ? segment.dataKey : segment.indexKey) +
            ": the segment has no connections object in the bucket");
        return read;
    }
    const std::string origin = catalog.url(segment.connectionsKey);
    auto object = catalog.client().get(catalog.location().bucket, segment.connectionsKey);
    if (!object) {
        read.problems.push_back(object.error.message);
        return read;
    }
    try {
        read.lines = parseConnectionLines(
            gunzipObject(*object, origin), origin,
            [&](const std::string& problem) { read.problems.push_back(problem); });
    } catch (const std::runtime_error& error) {
        read.problems.push_back(error.what());
    }
    return read;
}

// readSegmentLines of every index, kParallelReads at a time: a GET's round trip overlaps
// another object's unzipping and parsing.
std::vector<SegmentRead> readSegmentsLines(const ArchiveCatalog& catalog,
                                           const std::vector<std::size_t>& indexes) {
    std::vector<SegmentRead> reads(indexes.size());
    std::atomic<std::size_t> next{0};
    auto work = [&] {
        for (auto i = next++; i < indexes.size(); i = next++)
            reads[i] = readSegmentLines(catalog, indexes[i]);
    };
    std::vector<std::thread> threads;
    const auto count = std::min<std::size_t>(kParallelReads, indexes.size());
    for (std::size_t t = 1; t < count; ++t) threads.emplace_back(work);
    work();
    for (auto& thread : threads) thread.join();
    return reads;
}

}  // namespace

ArchivedLines readArchivedLines(const ArchiveCatalog& catalog, std::optional<std::int64_t> sinceNs,
                                std::optional<std::int64_t> untilNs, const ProblemSink& onProblem) {
    ArchivedLines lines;
    auto take = [&](std::size_t index, SegmentRead read) {
        for (const auto& problem : read.problems) onProblem(problem);
        if (!read.problems.empty()) lines.unreadable.insert(index);
        lines.bySegment[index] = std::move(read.lines);
    };
    auto readSegment = [&](std::size_t index) -> const std::vector<archive::ArchivedConnection>& {
        if (!lines.bySegment.count(index)) take(index, readSegmentLines(catalog, index));
        return lines.bySegment[index];
    };
    // Follows connection `id` from segment `from` in direction `step` until a line of it shows
    // the end that segment's line left open (its Open going back, its close going on).
    auto follow = [&](std::size_t from, std::uint64_t id, int step) {
        for (auto at = catalog.neighbour(from, step); at; at = catalog.neighbour(*at, step)) {
            const auto& found = readSegment(*at);
            auto line = std::find_if(found.begin(), found.end(),
                                     [&](const auto& l) { return l.id() == id; });
            if (line == found.end()) continue;  // idle in that segment: no line
            if (step < 0 ? !continuesFromEarlier(*line) : !goesOnLater(*line)) return;
        }
    };
    auto window = catalog.overlapping(sinceNs, untilNs);
    if (sinceNs || untilNs) {
        // The segment before each worker's first one in the window too: a connection open
        // across the window's start but idle through its first segment has lines only there.
        std::set<unsigned> workers;
        const auto inWindow = window;
        for (auto index : inWindow)
            if (workers.insert(catalog.segments()[index].id.worker).second)
                if (auto before = catalog.neighbour(index, -1)) window.push_back(*before);
    }
    std::sort(window.begin(), window.end());
    window.erase(std::unique(window.begin(), window.end()), window.end());
    // In parallel; problems reported in key order all the same.
    auto reads = readSegmentsLines(catalog, window);
    for (std::size_t i = 0; i < window.size(); ++i) take(window[i], std::move(reads[i]));
    if (sinceNs || untilNs) {
        for (auto index : window) {
            // A copy: following reads more segments into lines.bySegment.
            const auto segmentLines = lines.bySegment[index];
            for (const auto& line : segmentLines) {
                if (continuesFromEarlier(line)) follow(index, line.id(), -1);
                if (goesOnLater(line)) follow(index, line.id(), +1);
            }
        }
    }
    return lines;
}

std::map<std::uint64_t, audit::ConnectionSummary> mergeArchivedLines(const ArchivedLines& lines) {
    std::map<std::uint64_t, audit::ConnectionSummary> connections;
    // bySegment is keyed by catalog position: key order, the segments oldest first.
    for (const auto& [index, segmentLines] : lines.bySegment)
        for (const auto& line : segmentLines) mergeConnectionLine(line, connections);
    return connections;
}

}  // namespace splicegate::audittool
