#pragma once
// An archived audit log as a source for `splicegate-audit list`: `s3://BUCKET/PREFIX`, the
// objects splicegate-archive wrote (docs/archive.md). Only the connections objects are read
// (PREFIX/segments/…/*.connections.jsonl.gz, a few hundred bytes per connection), never the
// payload; with --since/--until only those of the segments that can hold matching connections
// (ArchiveCatalog.h). A connection whose life spans segments has a line in each: the lines merge by id
// (bytes summed, the newest line's state, close time and reason).
// Thread affinity: none. Error contract: bad options throw UsageError; a bucket that cannot be
// listed throws std::runtime_error naming it; a connections object that cannot be read, unzipped
// or parsed is a problem ("KEY: what"), the others are still listed.
#include <boost/program_options.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "archive/s3/S3Client.h"
#include "audit/AuditReader.h"
#include "splicegate/archive_index.pb.h"
#include "tools/splicegate-audit/WorkerRecords.h"

namespace splicegate::s3 {
class S3Client;
}

namespace splicegate::audittool {

struct ArchiveLocation {
    std::string bucket;
    std::string prefix;  // without a trailing '/'; may be empty

    // "s3://BUCKET[/PREFIX]" -> a location; anything not starting with s3:// -> nullopt.
    // Throws UsageError for an s3:// address without a bucket.
    static std::optional<ArchiveLocation> parse(const std::string& text);
};

// --s3-endpoint, --s3-region, --s3-credentials-file, --s3-ca-file: the archiver's names.
void addArchiveOptions(boost::program_options::options_description& options);
// The client those options describe (few retries: someone is waiting at the terminal). Throws
// UsageError for a missing or bad --s3-endpoint and for credentials that cannot be loaded.
std::unique_ptr<s3::S3Client> openArchive(const boost::program_options::variables_map& values);

// Calls `emit` once per archived connection, by id.
void forEachArchivedConnection(const ArchiveLocation& location,
                               const boost::program_options::variables_map& values,
                               const std::function<void(const audit::ConnectionSummary&)>& emit,
                               const ProblemSink& onProblem);

// One connections object's text (gunzipped JSON lines) merged into `connections`; a line that
// does not parse is a problem naming `origin` and the line number. For tests.
void mergeConnectionLines(const std::string& text, const std::string& origin,
                          std::map<std::uint64_t, audit::ConnectionSummary>& connections,
                          const ProblemSink& onProblem);

// The same lines parsed, in order; a line that does not parse, or has an unknown state, is a
// problem and left out.
std::vector<archive::ArchivedConnection> parseConnectionLines(const std::string& text,
                                                              const std::string& origin,
                                                              const ProblemSink& onProblem);
// One segment's line merged into the summary of its connection (the segments oldest first).
void mergeConnectionLine(const archive::ArchivedConnection& line,
                         std::map<std::uint64_t, audit::ConnectionSummary>& connections);
// A gzip object's bytes unzipped; throws std::runtime_error naming `origin` when they are not
// one complete gzip stream.
std::string gunzipObject(const std::string& bytes, const std::string& origin);

}  // namespace splicegate::audittool
