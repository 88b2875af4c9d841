#pragma once
// Ships sealed audit segments to the bucket, one state machine per segment (UploadState.h):
//
//   1. the segment's objects are described (key, size, CRC-32C) and the state saved Uploading;
//   2. each object is looked up (HEAD) before it is put: absent -> PUT with its CRC-32C and
//      its Object Lock headers; present and identical (size and CRC, read back when the server
//      keeps no checksum) -> adopted; present and different -> Conflict, an alarm, never an
//      overwrite. Each version id is saved as it is learnt, so a kill -9 anywhere resumes;
//   3. Uploaded -> every object's HEAD must show its size, its CRC-32C (the whole object's,
//      or the composite of its parts cut as its PUT cut them; where the server keeps neither,
//      or the cut is not known, the version is read back), and its lock (mode and retain-until,
//      read from ?retention where HEAD omits them); a server that ignored the lock headers gets
//      the retention set on the version;
//   4. the manifest (the objects with their versions, the seal, the times) goes last, the same
//      way, and the segment is Verified: only then may its local copy be deleted.
//
// An object larger than --s3-part-mb goes up as a multipart upload (Parts.h) with the same
// checksum and lock headers; a failed one is aborted, and a segment resumed in Uploading first
// aborts what a killed run left on its keys.
// A segment whose seal changed since it was first shipped (its files were rewritten locally) is
// a Conflict too: the bucket keeps the first version, the alarm names both digests.
// Thread affinity: ship() may run on several threads at once for different segments; one
// segment is never shipped by two threads at once (the caller's scheduling). Error contract:
// ship() never throws for the bucket's or the files' failures; they come back as Failed with a
// message naming the segment and the object.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "archive/ObjectStore.h"
#include "archive/SealedSegment.h"
#include "archive/UploadState.h"
#include "audit/Records.h"

namespace splicegate::archive {

struct ArchiveSettings {
    std::string prefix;                    // checked by checkPrefix
    std::string lockMode = "COMPLIANCE";
    unsigned lockDays = 365;
    // UNSIGNED-PAYLOAD: the body's integrity rests on the signed x-amz-checksum-crc32c header (and
    // TLS where used); false signs each body's SHA-256, a second pass over every byte.
    bool unsignedPayload = true;
    // --s3-part-mb in bytes: an object larger than this goes up as a multipart upload of parts
    // of (about) this size; 0 = every object in one PUT.
    std::uint64_t partBytes = 64u << 20;
};

struct ShipOutcome {
    enum class Kind { NotReady, Shipped, AlreadyVerified, Conflict, Failed };
    Kind kind = Kind::NotReady;
    std::string message;
    std::uint64_t bytes = 0;  // bytes put (adopted objects count 0)
};

// Crash points for tests: called after each state change with its name; a test throws from it
// to stop the archiver there, as a kill -9 would.
using ArchiveHook = std::function<void(const std::string& point)>;

class Archiver {
  public:
    Archiver(ObjectStore& bucket, UploadStateStore& states, ArchiveSettings settings);

    ShipOutcome ship(const audit::SegmentFiles& files, std::int64_t nowNs);
    void setHook(ArchiveHook hook) { hook_ = std::move(hook); }
    // Aborts the multipart uploads a killed run left unfinished on this archiver's own keys
    // (those under its prefix that parse as its objects' or manifests'): at startup, before any
    // upload of this process begins. Returns how many it aborted, or the listing's or an abort's
    // error.
    s3::Result<unsigned> abortStaleUploads();

  private:
    struct Body;  // where an object's bytes come from

    SegmentUpload begin(const SealedSegment& sealed, const audit::SegmentFiles& files,
                        std::int64_t nowNs, std::string_view connections);
    // Puts or adopts one object; returns the problem ("" when its version is known).
    std::string upload(SegmentUpload& state, ObjectRecord& object, const Body& body,
                       bool& conflict, std::uint64_t& bytesPut);
    // The retain-until the segment's manifest in the bucket records, else the one an adopted
    // object's lock has (HEAD, else GET ?retention), becomes the segment's; unchanged when the
    // server tells none.
    void adoptRetainUntil(SegmentUpload& state, const ObjectRecord& object,
                          const s3::ObjectInfo& existing);
    // The retain_until of the manifest already in the bucket for `data`'s segment, if any.
    std::optional<std::string> manifestRetainUntil(const ObjectRecord& data);
    std::string verify(const SegmentUpload& state, const ObjectRecord& object, const Body& body);
    // What the server's checksum of `remote` says of `local`'s CRC-32C: Same, Differs (with
    // `difference` saying how), or Unknown: none kept, or a composite of parts perhaps cut
    // otherwise than `local.partBytes` or, where that is unknown, the current part size cuts.
    enum class Checksum { Same, Differs, Unknown };
    Checksum compareChecksum(const ObjectRecord& local, const s3::ObjectInfo& remote,
                             const Body& body, std::string& difference) const;
    // The CRC-32C of `size` bytes of `key`'s `versionId`, read back by ranged GETs.
    std::string readBackCrc32c(const std::string& key, const std::string& versionId,
                               std::uint64_t size, std::uint32_t& crc);
    // Whether `remote` holds `local`'s bytes: its size, then its checksum where the server gives
    // one that can be compared, else (or where a composite differs) its CRC-32C read back.
    // Sets `local.partBytes` to the cut the composite matched, or unknown after a read-back.
    std::string sameBytes(ObjectRecord& local, const s3::ObjectInfo& remote, const Body& body,
                          bool& identical);
    bool multipart(const ObjectRecord& object) const {
        return settings_.partBytes > 0 && object.size > settings_.partBytes;
    }
    // The part size `object` goes up with under the current settings; 0 = one PUT.
    std::uint64_t partBytesNow(const ObjectRecord& object) const;
    // The parts `object` goes up in with `partBytes` (> 0), with their CRCs (Parts.h); throws
    // std::runtime_error when they do not combine to the object's CRC (its file changed since
    // the CRC was taken).
    std::vector<s3::PartRange> partsOf(const ObjectRecord& object, const Body& body,
                                       std::uint64_t partBytes) const;
    // Aborts the unfinished uploads under `prefix` for which `ours` holds.
    s3::Result<unsigned> abortUploads(const std::string& prefix,
                                      const std::function<bool(const std::string&)>& ours);
    // `built`: the bytes of an object made in memory (connections, manifest).
    static Body bodyOf(const ObjectRecord& object, const audit::SegmentFiles& files,
                       const SealedSegment& sealed, std::string_view built);
    void save(const SegmentUpload& state, const std::string& point);
    ShipOutcome conflict(SegmentUpload& state, const std::string& problem);

    ObjectStore& bucket_;
    UploadStateStore& states_;
    ArchiveSettings settings_;
    ArchiveHook hook_;
};

// The manifest's content for a segment whose other objects are uploaded (deterministic: the
// same state gives the same bytes, so a manifest shipped twice is adopted).
std::string manifestJson(const SegmentUpload& state, const SealedSegment& sealed);

// RFC 3339 UTC to the second ("2027-12-07T06:05:09Z").
std::string rfc3339(std::int64_t ns);

}  // namespace splicegate::archive
