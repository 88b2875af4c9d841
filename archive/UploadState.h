#pragma once
// The archiver's persisted upload state, one small file per sealed segment in its state
// directory (never in the audit directory, which the relay holds). A segment's state only moves
// forward:
//
//   Sealed -> Uploading -> Uploaded -> Verified
//                 \-----------\-------> Conflict (an object under its key differs: an alarm)
//
// Uploaded records each object's version id, size and CRC-32C as the server answered them;
// Verified means a HEAD confirmed size, lock mode and retain-until of every object and its
// CRC-32C was confirmed (the server's checksum, else the version read back), and
// is the only state in which the local copy may be deleted. The file is replaced atomically
// (written beside it, fsynced, renamed, directory fsynced) and carries a CRC-32C of its own, so
// a kill -9 at any instant leaves either the old state or the new one, and a damaged file is
// reported, never read as some other state.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/UniqueFd.h"

namespace splicegate::archive {

enum class UploadPhase { Sealed, Uploading, Uploaded, Verified, Conflict };

std::string_view toString(UploadPhase phase) noexcept;
std::optional<UploadPhase> phaseFromString(std::string_view text) noexcept;

// What each object of a segment is: its payload, its index (which ends with its seal), the
// connections object (gzipped JSON lines) that lets the bucket be searched without the payload,
// and the manifest, written once the others are verified, that lists them for pruning.
enum class ObjectKind { Data, Index, Connections, Manifest };

std::string_view toString(ObjectKind kind) noexcept;
std::optional<ObjectKind> kindFromString(std::string_view text) noexcept;

struct ObjectRecord {
    ObjectKind kind = ObjectKind::Data;
    std::string key;
    std::uint64_t size = 0;
    std::uint32_t crc32c = 0;
    std::string versionId;  // empty until the server answered the PUT (or the HEAD adopted it)
    // The part size the object goes (or went) up with, which fixes where its parts are cut and
    // so its composite checksum: 0 = one PUT. nullopt = not known (a state file written before
    // this was recorded, or an object adopted by reading it back): verified by reading it back.
    std::optional<std::uint64_t> partBytes;

    bool operator==(const ObjectRecord&) const = default;
};

struct SegmentUpload {
    unsigned worker = 0;
    std::uint64_t segment = 0;
    UploadPhase phase = UploadPhase::Sealed;
    std::string sealDigest;   // lowercase hex of the segment's seal: the chain's anchor off the box
    std::string retainUntil;  // RFC 3339, the lock every object carries
    std::vector<ObjectRecord> objects;
    std::string problem;  // Conflict: what differed, for the alarm

    bool operator==(const SegmentUpload&) const = default;
};

// The state file's name for a segment: "wWW-SSSSSSSSSS.upload" (the audit file's spelling).
std::string stateFileName(unsigned worker, std::uint64_t segment);

// Text form: "key=value" lines, then "crc32c=XXXXXXXX" over every byte before that line. An
// object line's "part-bytes" is optional (older files have none).
std::string encode(const SegmentUpload& upload);
// Throws std::runtime_error naming `origin` and the line for anything it cannot take: a
// missing or wrong checksum, an unknown phase or kind, a bad number, a missing field.
SegmentUpload decode(std::string_view text, const std::string& origin);

// Whether `to` may follow `from`: forward only, Conflict from any state before Verified.
bool mayAdvance(UploadPhase from, UploadPhase to) noexcept;

// What a HEAD of an object's key before its PUT decides (the archive never relies on
// If-None-Match): not there -> put it; there with the same size and CRC-32C -> adopt it (a
// segment shipped twice, after a crash between PUT and the state file's write); there and
// different -> a conflict: something else wrote that key, which is never overwritten.
enum class ExistingObject { Absent, Identical, Different };
struct RemoteObject {
    bool exists = false;
    std::uint64_t size = 0;
    std::optional<std::uint32_t> crc32c;  // servers that keep no checksum give none
};
ExistingObject compareExisting(const ObjectRecord& local, const RemoteObject& remote) noexcept;

// The state directory: loads and atomically replaces state files.
class UploadStateStore {
  public:
    // ReadWrite (the archiver): creates the directory (0750: its group, the relay's, may read
    // the states) when missing. ReadOnly (the relay's retention, ArchiveLedger): the directory
    // must exist and save() is refused. Throws std::system_error naming it.
    enum class Access { ReadWrite, ReadOnly };
    explicit UploadStateStore(std::string dir, Access access = Access::ReadWrite);

    // std::nullopt when the segment has no state file yet; throws std::runtime_error naming the
    // file when it is damaged (the archiver then stops on that segment and says so).
    std::optional<SegmentUpload> load(unsigned worker, std::uint64_t segment) const;
    // Replaces the segment's state; throws std::system_error naming the file. Refuses (throws
    // std::logic_error) a phase that may not follow the stored one.
    void save(const SegmentUpload& upload);
    // Every state file's segment, as (worker, segment), in no particular order.
    std::vector<std::pair<unsigned, std::uint64_t>> list() const;

    const std::string& dir() const noexcept { return dir_; }

  private:
    std::string path(const std::string& name) const { return dir_ + "/" + name; }

    std::string dir_;
    Access access_;
    UniqueFd dirFd_;
};

}  // namespace splicegate::archive
