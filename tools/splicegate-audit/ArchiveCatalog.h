#pragma once
// The segments of an archived audit log, s3://BUCKET/PREFIX (docs/archive.md), found from one
// listing of the key names under PREFIX/segments/ (no object is read for it), and the time
// pruning of `list`, `extract` and `export` with --since/--until.
//
// Pruning. A segment's records lie between its creation (its keys' stamp, to the second) and
// the creation of the worker's next segment (the worker rolls to that one, so nothing later is
// written into this one; +1 s for the stamp's rounding); the worker's newest segment is open
// ended. The segments whose span overlaps [since, until] are read first, with the segment
// before each worker's first one (a connection idle through the window's first segment has
// no line in it); then, because a
// connection that matches may have lines in segments outside the window (opened in a segment
// that ended before --since, closed in one created after --until), every line that continues
// from an earlier segment (no opened_ns) or goes on into a later one (state "open") has the
// worker's neighbouring segments read too, until its Open and its end are found. So a pruned
// read yields the same merged rows as an unpruned one for every connection overlapping the
// window; it relies on the box's clock not stepping back across a segment roll, and misses a
// connection that recorded nothing from the segment before the window to the window's end.
// The key listing itself is not pruned by --since: how far back a segment still open at
// --since was created is only known from the worker's next key.
// Thread affinity: none for the caller; readArchivedLines fetches and parses the window's
// connections objects on up to 8 threads of its own (S3Client calls are thread-safe) and reports
// problems on the caller's thread, in key order. Error contract: a listing that fails throws std::runtime_error naming
// the bucket; an object that cannot be read, unzipped or parsed is a problem ("s3://…: what").
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "archive/ObjectKeys.h"
#include "archive/s3/S3Client.h"
#include "splicegate/archive_index.pb.h"
#include "tools/splicegate-audit/ArchiveSource.h"
#include "tools/splicegate-audit/WorkerRecords.h"

namespace splicegate::audittool {

struct ArchivedSegment {
    archive::SegmentId id;  // createdNs to the second, from the key
    std::string dataKey, indexKey, connectionsKey;  // empty when the listing has no such object
    std::uint64_t dataSize = 0;
    std::uint64_t indexSize = 0;
};

class ArchiveCatalog {
  public:
    // Lists PREFIX/segments/ once; keys that are not a segment object's are ignored.
    ArchiveCatalog(s3::S3Client& s3, ArchiveLocation location);

    // In key order: by creation time, then worker and segment number.
    const std::vector<ArchivedSegment>& segments() const { return segments_; }
    const ArchiveLocation& location() const { return location_; }
    s3::S3Client& client() const { return s3_; }
    // "s3://BUCKET/KEY".
    std::string url(const std::string& key) const;

    // The segments whose span (above) overlaps [sinceNs, untilNs]; all without bounds.
    std::vector<std::size_t> overlapping(std::optional<std::int64_t> sinceNs,
                                         std::optional<std::int64_t> untilNs) const;
    // The same worker's segment before (step -1) or after (+1) segments()[index] in the bucket.
    std::optional<std::size_t> neighbour(std::size_t index, int step) const;

  private:
    s3::S3Client& s3_;
    ArchiveLocation location_;
    std::vector<ArchivedSegment> segments_;
    // worker -> positions in segments_, by segment number
    std::map<unsigned, std::vector<std::size_t>> byWorker_;
    std::map<std::size_t, std::size_t> rank_;  // position in segments_ -> index in its worker's
};

// The lines of the connections objects read, by segment position in the catalog.
struct ArchivedLines {
    std::map<std::size_t, std::vector<archive::ArchivedConnection>> bySegment;
    // Segments whose connections object is missing or could not be read whole (a problem).
    std::set<std::size_t> unreadable;
};

// Reads the connections objects of the segments overlapping [sinceNs, untilNs] and of their
// neighbours as far as the connections in them continue (see Pruning above); all of them
// without bounds. Problems go to `onProblem`.
ArchivedLines readArchivedLines(const ArchiveCatalog& catalog, std::optional<std::int64_t> sinceNs,
                                std::optional<std::int64_t> untilNs, const ProblemSink& onProblem);

// The lines merged into one summary per connection id, as `list` shows them: the segments'
// lines oldest first, bytes summed, the newest line's state, close time and reason.
std::map<std::uint64_t, audit::ConnectionSummary> mergeArchivedLines(const ArchivedLines& lines);

}  // namespace splicegate::audittool
