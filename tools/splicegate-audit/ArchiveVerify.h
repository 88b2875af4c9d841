#pragma once
// `splicegate-audit verify` against the archive splicegate-archive wrote (docs/archive.md):
// - verifyArchive: `verify s3://BUCKET/PREFIX`, the chain as the bucket holds it. The bucket's
//   layout is checked from one ListObjectVersions (a key with a second version of other bytes or
//   a delete marker, a segment number missing between two present ones, two copies or two
//   manifests of one segment, an object or a manifest missing; versions of the same bytes are a
//   note); then the local verifier (verifyDirectory) checks the chain as it checks an audit
//   directory, with the segments fetched (ranged GETs, bounded memory) one at a time into a
//   temporary directory, each removed before the next is fetched, and each manifest must name
//   the versions, sizes and CRC-32C of the objects fetched and the seal their index ends with.
// - checkAgainstArchive: `verify DIR --archive s3://BUCKET/PREFIX`, the off-box anchor. The
//   manifests carry each segment's seal as it shipped; every segment they name must still be in
//   DIR with that seal, or recorded as deleted by retention in DIR's retention.log.
// - listBoxes: the box prefixes of a bucket, for `--all-boxes`.
// Problems are one line each naming the object (s3://BUCKET/KEY) or the local file.
// Thread affinity: none. Error contract: a bucket that cannot be listed, a prefix holding no
// archive, or a temporary directory that cannot be made throw std::runtime_error or
// std::system_error (exit 1); an object that cannot be fetched is a problem, the rest is checked.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "audit/AuditReader.h"
#include "tools/splicegate-audit/ArchiveSource.h"

namespace splicegate::s3 {
class S3Client;
}

namespace splicegate::audittool {

using LineSink = std::function<void(const std::string&)>;

struct ArchiveVerifySummary {
    audit::VerifySummary chain;       // the local verifier's, over the fetched segments
    std::uint64_t problems = 0;       // chain.problems and the bucket's own
    std::uint64_t objects = 0;        // objects listed (current versions)
    std::uint64_t bytesFetched = 0;
    // The most the temporary directory held at once (measured after each segment's fetch):
    // one segment's data and index, however many segments the archive holds.
    std::uint64_t stagedPeakBytes = 0;
    // Each worker's newest seal, `indexPath` naming the index object (s3://BUCKET/KEY).
    std::vector<audit::WorkerHead> heads;
};

// `options.key`, `expectedHeads` and `onNote` as for a directory; onSeal is the caller's too.
// Fetched objects go to a temporary directory under $TMPDIR (or /tmp), one segment at a time,
// removed at the end.
ArchiveVerifySummary verifyArchive(s3::S3Client& s3, const ArchiveLocation& location,
                                   const audit::VerifyOptions& options, const LineSink& onProblem);

// A seal a local chain holds, from the local verifier's onSeal.
using LocalSeals = std::map<std::pair<unsigned, std::uint64_t>, audit::WorkerHead>;

struct AnchorSummary {
    std::uint64_t problems = 0;
    std::uint64_t compared = 0;           // archived segments found locally with the same seal
    std::uint64_t deletedLocally = 0;     // archived segments retention deleted locally since
    std::vector<audit::WorkerHead> archiveHeads;  // each worker's newest archived seal
};

// Compares `dir`'s chains (`local`, every chained seal of a verify of `dir`) with the manifests
// under `location`: a segment the archive holds must be in `dir` with the same seal, or in `dir`'s
// retention log as deleted (with the same digest where the log records it). A worker whose local
// log ends before the archive's newest segment had its tail deleted; a segment with another seal
// was rewritten. Throws std::runtime_error when the prefix holds no manifest.
AnchorSummary checkAgainstArchive(const std::string& dir, const LocalSeals& local,
                                  s3::S3Client& s3, const ArchiveLocation& location,
                                  const LineSink& onProblem, const LineSink& onNote);

// Every box prefix in `bucket` (a prefix P with P/segments/… or P/manifests/… objects in the
// archive's key layout), sorted. Throws std::runtime_error when the bucket cannot be listed.
std::vector<std::string> listBoxes(s3::S3Client& s3, const std::string& bucket);

}  // namespace splicegate::audittool
