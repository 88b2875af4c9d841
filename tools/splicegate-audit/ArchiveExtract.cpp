#include "tools/splicegate-audit/ArchiveExtract.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <iostream>
#include <set>
#include <stdexcept>
#include <utility>

#include "common/Error.h"
#include "common/UniqueFd.h"
#include "tools/splicegate-audit/ListCommand.h"
#include "tools/splicegate-audit/PcapExport.h"

namespace po = boost::program_options;

namespace splicegate::audittool {
namespace {

void writeAll(int fd, const std::string& bytes, std::uint64_t offset, const std::string& path) {
    std::size_t done = 0;
    while (done < bytes.size()) {
        ssize_t n = ::pwrite(fd, bytes.data() + done, bytes.size() - done,
                             static_cast<off_t>(offset + done));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throwErrno(errno, "write " + path);
        done += static_cast<std::size_t>(n);
    }
}

UniqueFd createFile(const std::string& path) {
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!fd) throwErrno(errno, "cannot create " + path);
    return fd;
}

// The key an object of `segment` has, or would have when the listing lacks it.
std::string keyOf(const ArchiveCatalog& catalog, const ArchivedSegment& segment,
                  archive::ObjectKind kind) {
    const std::string& listed = kind == archive::ObjectKind::Data ? segment.dataKey : segment.indexKey;
    return listed.empty() ? archive::objectKey(catalog.location().prefix, segment.id, kind) : listed;
}

std::string locationText(const ArchiveLocation& location) {
    return "s3://" + location.bucket + (location.prefix.empty() ? "" : "/" + location.prefix);
}

// The catalog positions of one connection's segments to stage: those of its worker from the
// first with a line of it to the last, and on after that while the connection is open at the
// last one and the next connections object could not be read (it may hold more of it).
std::vector<std::size_t> segmentsOf(const ArchiveCatalog& catalog, const ArchivedLines& lines,
                                    std::uint64_t id) {
    std::optional<std::size_t> first, last;
    bool openAtLast = false;
    for (const auto& [index, segmentLines] : lines.bySegment)
        for (const auto& line : segmentLines) {
            if (line.id() != id) continue;
            if (first && catalog.segments()[index].id.worker !=
                             catalog.segments()[*first].id.worker)
                continue;  // the same id in another worker's log: extract follows the first
            if (!first) first = index;
            last = index;
            openAtLast = line.state() == "open";
        }
    std::vector<std::size_t> staged;
    if (!first) return staged;
    for (std::optional<std::size_t> at = first; at; at = catalog.neighbour(*at, +1)) {
        const bool beyond = !staged.empty() && staged.back() == *last;
        if (beyond && !(openAtLast && lines.unreadable.count(*at))) break;
        staged.push_back(*at);
        if (beyond) last = *at;
    }
    return staged;
}

}  // namespace

StagedSegments::StagedSegments(const ArchiveCatalog& catalog) : catalog_(catalog) {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") +
                          "/splicegate-audit-s3.XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr)
        throwErrno(errno, "cannot create a staging directory " + pattern);
    dir_ = pattern;
}

StagedSegments::~StagedSegments() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
}

void StagedSegments::stage(std::size_t index,
                           const std::function<bool(const audit::Record&)>& wanted) {
    const auto& segment = catalog_.segments().at(index);
    const std::string base = audit::segmentBaseName(segment.id.worker, segment.id.segment);
    const std::string indexKey = keyOf(catalog_, segment, archive::ObjectKind::Index);
    const std::string dataKey = keyOf(catalog_, segment, archive::ObjectKind::Data);
    names_.emplace_back(base + ".index", catalog_.url(indexKey));
    names_.emplace_back(base + ".data", catalog_.url(dataKey));
    if (segment.indexKey.empty())
        throw std::runtime_error(catalog_.url(indexKey) + ": not in the bucket");
    auto indexObject = catalog_.client().get(catalog_.location().bucket, indexKey);
    if (!indexObject) throw std::runtime_error(indexObject.error.message);
    const std::string indexPath = dir_ + "/" + base + ".index";
    {
        UniqueFd fd = createFile(indexPath);
        writeAll(fd.get(), *indexObject, 0, indexPath);
    }
    // No data object: no data file, which the local reader reports where a chunk needs it.
    if (segment.dataKey.empty()) return;
    std::vector<std::pair<std::uint64_t, std::uint64_t>> chunks;  // offset, length
    audit::IndexReader reader(indexPath);
    audit::Record record;
    for (;;) {
        auto status = reader.next(record);
        if (status == audit::IndexReader::Status::Record) {
            if (record.type == audit::RecordType::Chunk && record.length > 0 && wanted(record) &&
                record.chunkEnd() <= segment.dataSize)  // beyond: the local reader says so
                chunks.emplace_back(record.offset, record.length);
            continue;
        }
        if (status != audit::IndexReader::Status::Corrupt || !reader.resync()) break;
    }
    const std::string dataPath = dir_ + "/" + base + ".data";
    UniqueFd data = createFile(dataPath);
    if (::ftruncate(data.get(), static_cast<off_t>(segment.dataSize)) != 0)
        throwErrno(errno, "cannot size " + dataPath);
    fetchRanges(segment, data.get(), std::move(chunks));
}

void StagedSegments::fetchRanges(const ArchivedSegment& segment, int fd,
                                 std::vector<std::pair<std::uint64_t, std::uint64_t>> chunks) {
    std::sort(chunks.begin(), chunks.end());
    // Adjacent (or overlapping) chunks become one range: a connection's chunks usually follow
    // each other in the data file.
    std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;  // [begin, end)
    for (const auto& [offset, length] : chunks) {
        if (!ranges.empty() && offset <= ranges.back().second)
            ranges.back().second = std::max(ranges.back().second, offset + length);
        else
            ranges.emplace_back(offset, offset + length);
    }
    const std::string path = dir_ + "/" +
                             audit::segmentBaseName(segment.id.worker, segment.id.segment) + ".data";
    for (const auto& [begin, end] : ranges)
        for (std::uint64_t from = begin; from < end; from += kMaxRangeBytes) {
            const std::uint64_t to = std::min(end, from + kMaxRangeBytes);
            auto bytes = catalog_.client().get(catalog_.location().bucket, segment.dataKey,
                                               std::make_pair(from, to - 1));
            if (!bytes) throw std::runtime_error(bytes.error.message);
            ++rangeRequests_;
            fetchedBytes_ += bytes->size();
            // A shorter answer leaves a hole of zeros there, which the payload CRC finds.
            writeAll(fd, *bytes, from, path);
        }
}

std::string StagedSegments::inBucketTerms(const std::string& text) const {
    // Full paths first, then bare names; through markers, because a URL holds the bare name.
    std::string out = text;
    auto replaceAll = [](std::string& s, const std::string& from, const std::string& to) {
        for (auto at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
            s.replace(at, from.size(), to);
    };
    for (std::size_t i = 0; i < names_.size(); ++i) {
        const std::string marker = "\x01" + std::to_string(i) + "\x02";
        replaceAll(out, dir_ + "/" + names_[i].first, marker);
        replaceAll(out, names_[i].first, marker);
    }
    for (std::size_t i = 0; i < names_.size(); ++i)
        replaceAll(out, "\x01" + std::to_string(i) + "\x02", names_[i].second);
    replaceAll(out, dir_, locationText(catalog_.location()));
    return out;
}

audit::ExtractResult extractArchivedConnection(const ArchiveLocation& location,
                                               const po::variables_map& values, std::uint64_t id,
                                               std::uint8_t direction,
                                               const std::function<int()>& openOutput,
                                               const audit::ExtractOptions& options) {
    // --since/--until: only the time filter, which prunes the connections objects read.
    ConnectionFilter window;
    {
        auto filter = ConnectionFilter::fromOptions(values);
        window.sinceNs = filter.sinceNs;
        window.untilNs = filter.untilNs;
    }
    auto s3 = openArchive(values);
    ArchiveCatalog catalog(*s3, location);
    std::vector<std::string> problems;
    auto lines = readArchivedLines(catalog, window.sinceNs, window.untilNs,
                                   [&](const std::string& problem) { problems.push_back(problem); });
    auto segments = segmentsOf(catalog, lines, id);
    // The pruned read also has connections outside the window (neighbours of ones in it): the
    // one wanted must overlap it, so that the hint gives the same answer however it prunes.
    if (!segments.empty() && (window.sinceNs || window.untilNs)) {
        auto merged = mergeArchivedLines(lines);
        auto found = merged.find(id);
        if (found == merged.end() || !window.matches(found->second)) segments.clear();
    }
    if (segments.empty()) {
        if (!problems.empty())
            throw std::runtime_error("no connection " + std::to_string(id) +
                                     " in the readable connections objects of " +
                                     locationText(location) + "; " + problems.front());
        return {};
    }
    for (const auto& line : lines.bySegment.at(segments.front()))
        if (line.id() == id && !line.has_opened_ns())
            throw std::runtime_error(
                "connection " + std::to_string(id) + ": its Open is not in the bucket (" +
                catalog.url(catalog.segments()[segments.front()].connectionsKey) +
                ", its oldest segment there, continues it)");
    StagedSegments staged(catalog);
    for (auto index : segments)
        staged.stage(index, [&](const audit::Record& record) {
            return record.id == id && record.direction == direction;
        });
    audit::ExtractOptions local = options;
    local.onDamage = [&](const std::string& what) {
        if (options.onDamage) options.onDamage(staged.inBucketTerms(what));
    };
    try {
        return audit::extractConnection(staged.dir(), id, direction, openOutput, local);
    } catch (const UsageError&) {
        throw;
    } catch (const std::exception& error) {
        throw std::runtime_error(staged.inBucketTerms(error.what()));
    }
}

int exportArchive(const ArchiveLocation& location, const std::string& path,
                  const po::variables_map& values) {
    const ConnectionFilter filter = ConnectionFilter::fromOptions(values);
    const bool byMetadata = filter.sinceNs || filter.untilNs || filter.route || filter.client;
    auto s3 = openArchive(values);
    ArchiveCatalog catalog(*s3, location);
    if (catalog.segments().empty())
        throw std::runtime_error(locationText(location) + ": no archived segment here");
    std::vector<std::string> listProblems;
    auto lines = readArchivedLines(catalog, filter.sinceNs, filter.untilNs,
                                   [&](const std::string& p) { listProblems.push_back(p); });
    std::set<std::uint64_t> picked;
    for (const auto& [id, connection] : mergeArchivedLines(lines))
        if (filter.matches(connection) && !connection.headDeleted) picked.insert(id);
    StagedSegments staged(catalog);
    std::set<std::size_t> segments;
    for (auto id : picked)
        for (auto index : segmentsOf(catalog, lines, id)) segments.insert(index);
    // Nothing to export: one segment's index still makes the (empty) capture a local one is.
    if (segments.empty() && !(filter.id || byMetadata)) segments.insert(0);
    CaptureResult result;
    if (!segments.empty()) {
        for (auto index : segments)
            staged.stage(index, [&](const audit::Record& record) {
                return picked.count(record.id) != 0;
            });
        try {
            result = writeCapture(
                staged.dir(), path, [&](std::uint64_t id) { return picked.count(id) != 0; },
                filter.id || byMetadata);
        } catch (const std::exception& error) {
            throw std::runtime_error(staged.inBucketTerms(error.what()));
        }
    }
    for (auto& problem : result.problems) problem = staged.inBucketTerms(problem);
    result.problems.insert(result.problems.end(), listProblems.begin(), listProblems.end());
    return reportCapture(result, filter, byMetadata, locationText(location),
                         [](const std::string& problem) { return problem; });
}

}  // namespace splicegate::audittool
