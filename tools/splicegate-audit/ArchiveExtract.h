#pragma once
// `extract` and `export` on s3://BUCKET/PREFIX (docs/archive.md, "Searching the bucket"): the
// connections objects say which segments hold the connection (ArchiveCatalog.h, pruned by
// --since/--until: export's filter, extract's time hint); those segments are staged in a private temporary directory
// (StagedSegments: each index object whole, each data object as a sparse file of its size into
// which only the chunks needed are fetched, by ranged GETs) and the local reader runs on it, so
// the output is byte for byte a local extract's or export's, payload CRC-32C checks included.
// Messages name the bucket's keys, never the staging directory.
// Thread affinity: none. Error contract: bad options throw UsageError; an object that is missing
// or cannot be read, and damage, throw std::runtime_error naming the key (exit 1).
#include <boost/program_options.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "audit/AuditReader.h"
#include "tools/splicegate-audit/ArchiveCatalog.h"

namespace splicegate::audittool {

// A private temporary directory (under $TMPDIR, else /tmp) with copies of some archived
// segments, named as in an audit directory; removed by the destructor.
class StagedSegments {
  public:
    explicit StagedSegments(const ArchiveCatalog& catalog);
    ~StagedSegments();
    StagedSegments(const StagedSegments&) = delete;
    StagedSegments& operator=(const StagedSegments&) = delete;

    // Copies catalog.segments()[index]: its index object, and into a sparse data file of the
    // data object's size the payload of the chunks `wanted` picks (adjacent chunks in one ranged
    // GET, at most kMaxRangeBytes a request). Throws std::runtime_error naming the key of an
    // object that is missing or cannot be read.
    void stage(std::size_t index, const std::function<bool(const audit::Record&)>& wanted);

    const std::string& dir() const { return dir_; }
    // `text` with every staged file's path, and bare file name, replaced by its object's URL.
    std::string inBucketTerms(const std::string& text) const;

    std::uint64_t rangeRequests() const { return rangeRequests_; }
    std::uint64_t fetchedBytes() const { return fetchedBytes_; }

    static constexpr std::uint64_t kMaxRangeBytes = 8u << 20;

  private:
    void fetchRanges(const ArchivedSegment& segment, int fd,
                     std::vector<std::pair<std::uint64_t, std::uint64_t>> chunks);

    const ArchiveCatalog& catalog_;
    std::string dir_;
    // local name ("wWW-SSSSSSSSSS.index") -> the object's URL
    std::vector<std::pair<std::string, std::string>> names_;
    std::uint64_t rangeRequests_ = 0;
    std::uint64_t fetchedBytes_ = 0;
};

// extractConnection() (audit/AuditReader.h) over the archive; `values` has the --s3-* options
// and --since/--until, with which only the connections objects that pruning picks are read and
// a connection not overlapping the interval is not found.
audit::ExtractResult extractArchivedConnection(const ArchiveLocation& location,
                                               const boost::program_options::variables_map& values,
                                               std::uint64_t id, std::uint8_t direction,
                                               const std::function<int()>& openOutput,
                                               const audit::ExtractOptions& options);

// `export` over the archive into `path`; returns the exit status.
int exportArchive(const ArchiveLocation& location, const std::string& path,
                  const boost::program_options::variables_map& values);

}  // namespace splicegate::audittool
