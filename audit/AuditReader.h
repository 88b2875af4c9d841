#pragma once
// Offline reading of an audit directory (audit/FORMAT.md): the engine of `splicegate-audit list`,
// `extract` and `verify`, also used by crash recovery.
// - IndexReader streams one index file record by record through a bounded buffer (1 MiB), so
//   multi-GiB logs cost constant memory per file; after a corrupt record it can resynchronise on
//   the next valid record.
// - listConnections / extractConnection / verifyDirectory walk every segment in (worker, segment)
//   order. Memory grows with the number of connections (and, for verify, with the chunks of one
//   segment), never with payload size: extract copies ranges in the kernel (copy_file_range or
//   sendfile, falling back to pread/write) in bounded pieces.
// Thread affinity: none; the objects here are not shared between threads. Error contract: files
// that cannot be opened or read throw std::system_error naming the file; damaged content is
// reported as problems ("FILE:OFFSET: what is wrong") and never crashes or over-allocates.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "audit/Records.h"
#include "audit/Retention.h"
#include "common/UniqueFd.h"

namespace splicegate::audit {

class IndexReader {
  public:
    enum class Status {
        Record,   // a good record; recordOffset() is where it starts
        End,      // clean end of file
        Torn,     // the file ends inside a record (a torn tail); problem() says how
        Corrupt,  // a bad record at recordOffset(); problem() says what. Call resync() to go on.
    };

    // Opens `path` read-only; throws std::system_error naming it.
    explicit IndexReader(const std::string& path, std::size_t bufferSize = kDefaultBufferSize);
    // Reads from `fd` (not owned, positioned anywhere: reading uses pread from offset 0).
    IndexReader(int fd, std::string path, std::size_t bufferSize = kDefaultBufferSize);

    Status next(Record& record);
    // After Corrupt: moves to the next offset where a valid record starts. Returns false when
    // there is none up to the end of the file (next() then returns End).
    bool resync();

    std::uint64_t recordOffset() const noexcept { return recordOffset_; }
    // Offset just past the last good record returned (where a torn tail starts).
    std::uint64_t goodEnd() const noexcept { return goodEnd_; }
    // Where reading continues (after resync(): the offset of the record found).
    std::uint64_t position() const noexcept { return bufferStart_ + pos_; }
    const std::string& problem() const noexcept { return problem_; }
    const std::string& path() const noexcept { return path_; }
    // The bytes of the record next() returned last (valid until the next call).
    const std::uint8_t* recordData() const noexcept { return recordData_; }
    std::size_t recordSize() const noexcept { return recordSize_; }

    static constexpr std::size_t kDefaultBufferSize = 1 << 20;

  private:
    // Makes at least `wanted` bytes available from pos_ unless the file ends first. Returns the
    // bytes available.
    std::size_t fill(std::size_t wanted);

    UniqueFd owned_;
    int fd_ = -1;
    std::string path_;
    std::vector<std::uint8_t> buffer_;
    std::uint64_t bufferStart_ = 0;  // file offset of buffer_[0]
    std::size_t length_ = 0;         // valid bytes in buffer_
    std::size_t pos_ = 0;            // next unread byte in buffer_
    bool eof_ = false;
    std::uint64_t recordOffset_ = 0;
    std::uint64_t goodEnd_ = 0;
    std::string problem_;
    const std::uint8_t* recordData_ = nullptr;
    std::size_t recordSize_ = 0;
};

// "FILE:OFFSET: what" as printed by verify and the other commands.
std::string placeText(const std::string& file, std::uint64_t offset, const std::string& what);

// ---- connections whose head retention deleted

// Retention deletes a worker's oldest sealed segments whole, also where a long-lived connection
// has records in them (FORMAT.md "Retention"), so the records left of such a connection start
// without its Open. Connection ids below a segment's id floor were all handed out before that
// segment began: in a worker whose older segments retention deleted, a record with no Open
// before it, of an id below the first remaining segment's floor, continues a connection whose
// head was deleted. Fed the segments' starts in (worker, segment) order.
class DeletedHeads {
  public:
    DeletedHeads() = default;
    // `deleted`: the retention log's entries.
    explicit DeletedHeads(const std::vector<RetentionLogEntry>& deleted);
    // The retention log of the directory open as `dirFd`; one that cannot be read counts as no
    // deletion, and `problem` says why (verify reports it).
    static DeletedHeads fromDirectory(int dirFd, const std::string& dir, std::string& problem);
    static DeletedHeads fromDirectory(const std::string& dir, std::string& problem);

    // A SegmentStart record, in log order; only each worker's first one counts.
    void segmentStart(unsigned worker, std::uint64_t segment, std::uint64_t idFloor);
    // Retention deleted `worker`'s segments while they were being read: `deleted` is the
    // retention log read again, and the worker's next SegmentStart counts as its first.
    void restartWorker(unsigned worker, const std::vector<RetentionLogEntry>& deleted);
    // Whether a record of `id` in `worker`'s log, with no Open before it, continues a connection
    // whose head retention deleted.
    bool continues(unsigned worker, std::uint64_t id) const;

  private:
    // worker -> the lowest segment number that follows one retention deleted
    std::map<unsigned, std::uint64_t> afterDeleted_;
    std::map<unsigned, std::uint64_t> floor_;  // worker -> id floor, where its head is cut
    std::set<unsigned> started_;
};

// Whether retention deleted `files`' segment after it was listed: opening one of its files gave
// `error` ENOENT, and the retention log, read again, records the deletion (retention records it
// before it deletes). `entries` gets that log, for DeletedHeads::restartWorker. `dir` is the
// audit directory.
bool deletedSinceListed(const std::system_error& error, const std::string& dir,
                        const SegmentFiles& files, std::vector<RetentionLogEntry>& entries);

// ---- list

enum class ConnectionState { Open, Closed, Truncated };
const char* connectionStateName(ConnectionState state) noexcept;  // "open", "closed", "truncated"

struct ConnectionSummary {
    std::uint64_t id = 0;
    unsigned worker = 0;
    std::uint64_t segment = 0;  // segment holding the Open record
    std::string route;
    std::string client;
    std::string upstream;
    // The Open record's (format version 4): the PROXY header's balancer and the TLS server name
    // the route was chosen by; empty when none (and in older logs).
    std::string via;
    std::string sni;
    std::int64_t openedNs = 0;
    std::optional<std::int64_t> closedNs;  // Close record's time (closed connections only)
    std::string reason;                    // Close record's reason
    // Closed: the Close record's counts. Otherwise, and where the head was deleted: the bytes of
    // the chunks the log holds.
    std::uint64_t c2uBytes = 0;
    std::uint64_t u2cBytes = 0;
    ConnectionState state = ConnectionState::Open;
    // Retention deleted the segments with its Open and first chunks (DeletedHeads): route,
    // client, upstream and openedNs are unknown (empty, 0); `segment` is its first one left.
    bool headDeleted = false;

    // The summary of a connection first seen by a record that continues it (DeletedHeads).
    static ConnectionSummary withHeadDeleted(std::uint64_t id, unsigned worker,
                                             std::uint64_t segment);
};

struct ListResult {
    std::vector<ConnectionSummary> connections;  // sorted by id
    // Damage that may hide connections or bytes, as "FILE:OFFSET: what": corrupt records, an
    // index whose first record is not SegmentStart, unreadable files. A torn tail (the running
    // daemon's write in progress, or a crash not yet recovered) is not a problem here.
    std::vector<std::string> problems;
};

// Throws std::system_error when `dir` or one of its index files cannot be read.
ListResult listConnections(const std::string& dir);

// ---- extract

struct ExtractResult {
    bool found = false;        // an Open record with the id exists, or its head was deleted
    bool headDeleted = false;  // retention deleted its first bytes: the output starts later
    std::uint64_t bytes = 0;
    std::uint64_t chunks = 0;
    ConnectionState state = ConnectionState::Open;
};

// Copies the bytes of one direction of connection `id`, in stream order, into the fd returned by
// `openOutput`, which is called once, when the connection's Open record is found, or its first
// record left where retention deleted its head (so an unknown id creates no output). Throws
// std::runtime_error ("FILE:OFFSET: what") when damage makes the exact bytes unavailable (a corrupt
// index record after the Open in the connection's worker, a missing data file, a chunk beyond its
// data file), std::system_error on I/O errors. Bytes copied before the error stay in the output.
// Before `openOutput` is called, the remaining segments of the connection's worker are opened
// (up to 256), so retention deleting them while the copy runs takes nothing from it.
ExtractResult extractConnection(const std::string& dir, std::uint64_t id, std::uint8_t direction,
                                const std::function<int()>& openOutput);

struct ExtractOptions {
    // Copy a chunk whose payload CRC-32C does not match its record instead of refusing it;
    // each such chunk is passed to onDamage ("FILE:OFFSET: what", naming connection, direction
    // and stream offset).
    bool force = false;
    std::function<void(const std::string&)> onDamage;
};
// As above; a chunk whose payload fails its CRC throws std::runtime_error naming it unless
// options.force.
ExtractResult extractConnection(const std::string& dir, std::uint64_t id, std::uint8_t direction,
                                const std::function<int()>& openOutput,
                                const ExtractOptions& options);

// Copies `length` bytes at `offset` of `inFd` to the current position of `outFd` in bounded
// pieces, in the kernel when possible. Throws std::system_error naming `what`; a file shorter
// than offset + length is an error.
void copyFileRange(int inFd, std::uint64_t offset, std::uint64_t length, int outFd,
                   const std::string& what);

// ---- verify

// The newest chained seal of one worker's chain: what `--expect-head` compares, and the value
// the daemon logs as `audit seal FILE digest=HEX` when it writes that seal.
struct WorkerHead {
    unsigned worker = 0;
    std::uint64_t segment = 0;
    std::string indexPath;
    Digest digest{};
    // The digest was recomputed (an unkeyed seal, or a keyed one with --key-file); a keyed seal
    // read without the key only names its predecessor.
    bool checked = false;
};

struct VerifySummary {
    std::uint64_t problems = 0;
    std::uint64_t sealedSegments = 0;       // chained seals checked
    std::uint64_t checkedPayloadBytes = 0;  // payload bytes whose CRC-32C was checked
    std::uint64_t uncheckedChunks = 0;     // chunks without a payload CRC (splice writer, old logs)
    std::uint64_t deletedByRetention = 0;  // segments the retention log records as deleted
    std::uint64_t headsDeleted = 0;  // connections whose first records went with those segments
    std::uint64_t segments = 0;
    std::uint64_t records = 0;
    std::uint64_t connections = 0;
    std::uint64_t chunkBytes = 0;
    // Keyed seals and retention entries read without --key-file: their links were checked, not
    // their digests. `keyId` is the first one's key id.
    std::uint64_t uncheckedKeyedSeals = 0;
    std::optional<KeyId> keyId;
    // Segments treated as a running daemon's live ones (FORMAT.md "verify"), each also passed to
    // VerifyOptions::onNote; `daemonPid` is the holder of the directory's write lock.
    std::uint64_t liveSegments = 0;
    std::optional<long> daemonPid;
    std::vector<WorkerHead> heads;  // one per worker with a chained seal, by worker
};

struct VerifyOptions {
    // --key-file. With it every segment of every chain must carry a seal made with this key;
    // without it keyed seals are accepted unchecked (their links are still checked).
    const ChainKey* key = nullptr;
    // Called before each listed segment is opened: a test's way to let retention delete
    // segments while verify walks a live directory.
    std::function<void(unsigned worker, std::uint64_t segment)> beforeSegment;
    // --expect-head: each digest must be the digest of a seal in some worker's chain (or of a
    // segment the retention log records as deleted); one that is not is a problem.
    std::vector<Digest> expectedHeads;
    // Lines that are not problems but say what was not checked: a keyed log read without the
    // key, a live segment of the running daemon. Null: not reported.
    std::function<void(const std::string&)> onNote;
    // Called for every chained seal read, in (worker, segment) order, with the digest the seal
    // record holds (`checked` as for the heads): what a copy kept elsewhere (the archive's
    // manifests) is compared with. Null: not reported.
    std::function<void(const WorkerHead&)> onSeal;
    // Deletions known without a retention log, taken as its entries (their macs are not
    // checked, and they are not counted in deletedByRetention): a copy of a log that starts
    // after segments the box deleted before they were copied (the archive's oldest segments).
    std::vector<RetentionLogEntry> knownDeletions;
    // Where the segments come from. Null: the directory's listing, read at the start. Otherwise
    // called for one segment at a time, in (worker, segment) order, until it returns nullopt:
    // the files it names must be in the directory when it returns and may be removed when it is
    // called again, because all the chain needs of a segment (its seal, the connections still
    // open) is carried to the next. A source that fetches segments (verify of the archive) so
    // needs room for one segment, not the whole log. It may add to `learnt` deletions it found
    // (taken as knownDeletions), before the first segment of their worker.
    std::function<std::optional<SegmentFiles>(std::vector<RetentionLogEntry>& learnt)>
        nextSegment;
};

// Checks everything FORMAT.md "verify" lists and calls `onProblem` with one "FILE:OFFSET: what"
// line per problem (in file order). Works on a directory the daemon is writing: a listed
// segment that retention deletes meanwhile is not a problem. Throws std::system_error when
// `dir` cannot be read.
VerifySummary verifyDirectory(const std::string& dir,
                              const std::function<void(const std::string&)>& onProblem,
                              const VerifyOptions& options);
VerifySummary verifyDirectory(const std::string& dir,
                              const std::function<void(const std::string&)>& onProblem,
                              const ChainKey* key = nullptr);
// Convenience: the problem lines.
std::vector<std::string> verifyDirectory(const std::string& dir);

}  // namespace splicegate::audit
