#pragma once
// Audit index records and segment file names (audit/FORMAT.md, format version 4; the records of
// versions 1 to 3 are still read).
// - encode*(): append one complete record (16-byte header, body, CRC-32 filled) to `out`.
//   Strings longer than kMaxStringBytes are cut (at a UTF-8 character boundary) so that every
//   record fits the u16 length field.
// - decodeRecord(): bounds-checked parsing of one record from untrusted bytes; never reads past
//   `size`, never allocates more than the record's own (<= 64 KiB) strings.
// - listSegments(): the segment pairs of an audit directory, in (worker, segment) order.
// Thread affinity: none (pure functions). Error contract: encoders and decodeRecord do not throw
// except std::bad_alloc; listSegments throws std::system_error naming the directory.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "audit/SealChain.h"

namespace splicegate::audit {

enum class RecordType : std::uint16_t {
    SegmentStart = 1,
    Open,
    Chunk,
    Close,
    Truncated,
    SegmentSealed,
    SegmentsDeleted  // only in the retention log (kRetentionLogName), never in a segment index
};

constexpr std::uint32_t kRecordMagic = 0x58494753;  // "SGIX" little-endian
constexpr std::size_t kRecordHeaderSize = 16;
constexpr std::size_t kMaxRecordSize = 65535;
// Written in new SegmentStart records. Readers also accept versions down to kOldestFormatVersion
// (version 1: SegmentStart has no connection id floor; versions 1 and 2: Chunk has no payload
// CRC and SegmentSealed no chain digest; versions 1 to 3: Open has no via and sni), so that
// logs written before stay readable. Version 4 exists so that a reader of version 3, which
// would take the longer Open record for damage, names the version instead.
constexpr std::uint32_t kFormatVersion = 4;
constexpr std::uint32_t kFirstChainedVersion = 3;
constexpr std::uint32_t kOldestFormatVersion = 1;
// Longest string an encoder writes; three of them plus the Open body (its two names included)
// still fit kMaxRecordSize.
constexpr std::size_t kMaxStringBytes = 16384;
// Longest `via` or `sni` of an Open record (a DNS name has at most 253 bytes, an address fewer).
constexpr std::size_t kMaxNameBytes = 255;

constexpr std::uint8_t kDirectionC2U = 0;
constexpr std::uint8_t kDirectionU2C = 1;
constexpr std::uint8_t kSealClean = 0;
constexpr std::uint8_t kSealFailed = 1;
// Chunk flags (version 3).
constexpr std::uint8_t kChunkHasCrc = 1;  // `crc` is the CRC-32C of the payload

// The retention log: SegmentsDeleted records, one per deleted group of segments (FORMAT.md).
constexpr const char* kRetentionLogName = "retention.log";
// The compacted retention log while it is written, before it is renamed over the log.
constexpr const char* kRetentionLogCompacting = "retention.log.new";

// The connection id lease (FORMAT.md "Connection id lease", audit/ConnectionIdLease.h), and the
// lease being written before it is renamed over it.
constexpr const char* kConnectionIdsName = "connection-ids";
constexpr const char* kConnectionIdsReplacing = "connection-ids.new";
// Its content: magic "SGID", u32 version 1, u64 lease end (every id below it may have been
// handed out), u32 CRC-32C of the 16 bytes before it.
constexpr std::size_t kConnectionIdLeaseSize = 20;

// Total sizes of the fixed-size records (header included).
constexpr std::size_t kSegmentStartRecordSize = kRecordHeaderSize + 32;
constexpr std::size_t kSegmentStartV1RecordSize = kRecordHeaderSize + 24;
constexpr std::size_t kChunkRecordSize = kRecordHeaderSize + 36;
constexpr std::size_t kChunkV2RecordSize = kRecordHeaderSize + 32;
constexpr std::size_t kTruncatedRecordSize = kRecordHeaderSize + 16;
constexpr std::size_t kSegmentSealedRecordSize = kRecordHeaderSize + 82;
constexpr std::size_t kSegmentSealedV2RecordSize = kRecordHeaderSize + 9;
constexpr std::size_t kSegmentsDeletedRecordSize = kRecordHeaderSize + 133;
// Bytes of a version-3 SegmentSealed body that its digest covers (all but the digest itself).
constexpr std::size_t kSealDigestedBodyBytes = 82 - 32;

// `idFloor`: the next connection id the daemon hands out (FORMAT.md "Records").
void encodeSegmentStart(std::string& out, std::uint32_t worker, std::uint64_t segment,
                        std::int64_t createdNs, std::uint64_t idFloor);
// `via`: the load balancer's address when `client` came from its PROXY header; `sni`: the TLS
// server name the route was chosen by (version 4; empty when none). Each is cut to
// kMaxNameBytes.
void encodeOpen(std::string& out, std::uint64_t id, std::int64_t openedNs, std::string_view route,
                std::string_view client, std::string_view upstream, std::string_view via = {},
                std::string_view sni = {});
// `crc`: the CRC-32C of the payload (crc32c(0, payload)); absent when the writer never had the
// bytes in user memory and did not read them back (flag kChunkHasCrc clear).
void encodeChunk(std::string& out, std::uint64_t id, std::uint8_t direction, std::uint32_t length,
                 std::uint64_t offset, std::int64_t timeNs,
                 std::optional<std::uint32_t> crc = std::nullopt);
void encodeClose(std::string& out, std::uint64_t id, std::int64_t closedNs, std::uint64_t c2uBytes,
                 std::uint64_t u2cBytes, std::string_view reason);
void encodeTruncated(std::string& out, std::uint64_t id, std::int64_t timeNs);
// Version 3: `indexHash` has been fed every index byte before this record (SegmentStart
// included); the record's own fields up to the digest are fed too, and the digest is
// indexHash's result (FORMAT.md "Hash chain"). Returns the digest (the next segment's
// `prevDigest`). `key` null: unkeyed SHA-256 chain.
Digest encodeSegmentSealed(std::string& out, std::uint64_t dataBytes, std::uint8_t status,
                           const ChainKey* key, const Digest& prevDigest, ChainHasher& indexHash);
// The version-2 record (no chain), for tests of old logs.
void encodeSegmentSealedV2(std::string& out, std::uint64_t dataBytes, std::uint8_t status);
// A retention log entry: segments [first, last] of `worker` were deleted; `lastDigest` is the
// digest in segment `last`'s seal; `prevEntryMac` the previous entry's mac (zero for the
// first). Returns this entry's mac.
Digest encodeSegmentsDeleted(std::string& out, std::uint32_t worker, std::uint64_t first,
                             std::uint64_t last, std::int64_t timeNs, const ChainKey* key,
                             const Digest& lastDigest, const Digest& prevEntryMac);

std::string encodeConnectionIdLease(std::uint64_t end);
// The lease end, or nothing with `problem` set when `bytes` are not a lease.
std::optional<std::uint64_t> decodeConnectionIdLease(std::string_view bytes, std::string& problem);

// One decoded record. Only the fields of `type` are meaningful (the others keep whatever they
// held, so a Record can be reused across decodeRecord calls without reallocating its strings).
struct Record {
    RecordType type = RecordType::SegmentStart;
    // SegmentStart
    std::uint32_t version = 0;
    std::uint32_t worker = 0;
    std::uint64_t segment = 0;
    std::uint64_t idFloor = 0;  // 0 in a version-1 record, which has none
    // Open, Chunk, Close, Truncated
    std::uint64_t id = 0;
    // SegmentStart: created; Open: opened; Chunk: time; Close: closed; Truncated: recovery time
    std::int64_t timeNs = 0;
    // Open
    std::string route;
    std::string client;
    std::string upstream;
    std::string via;  // version 4; empty in older records and when none
    std::string sni;
    // Chunk
    std::uint8_t direction = 0;
    std::uint32_t length = 0;
    std::uint64_t offset = 0;
    bool hasCrc = false;  // version 3 and the writer computed it
    std::uint32_t crc = 0;
    // Close
    std::uint64_t c2uBytes = 0;
    std::uint64_t u2cBytes = 0;
    std::string reason;
    // SegmentSealed
    std::uint64_t dataBytes = 0;
    std::uint8_t status = 0;
    // SegmentSealed (version 3: chained = true) and SegmentsDeleted
    bool chained = false;
    std::uint8_t chainKind = kChainSha256;
    KeyId keyId{};
    Digest prevDigest{};  // SegmentSealed: predecessor's digest; SegmentsDeleted: previous mac
    Digest digest{};      // SegmentSealed: this segment's; SegmentsDeleted: the last deleted one's
    // SegmentsDeleted (worker in `worker`)
    std::uint64_t firstSegment = 0;
    std::uint64_t lastSegment = 0;
    Digest entryMac{};

    // Chunk: end of its range in the data file (offset + length, saturating).
    std::uint64_t chunkEnd() const noexcept;
};

enum class DecodeStatus {
    Ok,          // `out` holds the record, `consumed` its length
    Incomplete,  // fewer bytes than the header or the record's length: need more (or torn tail)
    Corrupt      // bad magic, length, CRC, type or body; `problem` says which
};

// Decodes the record at data[0..size). On Incomplete and Corrupt, `consumed` is 0 and `problem`
// describes what is wrong (for Incomplete: how many bytes the record needs).
DecodeStatus decodeRecord(const std::uint8_t* data, std::size_t size, Record& out,
                          std::size_t& consumed, std::string& problem);

const char* recordTypeName(RecordType type) noexcept;
// Chunk, Close and Truncated: the records that follow a connection's Open.
bool followsOpen(RecordType type) noexcept;
const char* directionName(std::uint8_t direction) noexcept;  // "c2u", "u2c" or "?"

// "w00-0000000001": worker zero-padded to at least 2 digits, segment to at least 10.
std::string segmentBaseName(unsigned worker, std::uint64_t segment);
// Parses a canonical base name (exactly what segmentBaseName produces); false otherwise.
bool parseSegmentBaseName(std::string_view name, unsigned& worker, std::uint64_t& segment);
// "w00.spare0": a data file retention took out of the log and kept for one of the worker's next
// segments to overwrite (FORMAT.md "Recycled data files"); slot 0 to kSpareSlots - 1. Not a
// segment name: readers never see it. Two slots, because retention (once a second) and the
// worker's creations (once a segment) do not keep step: with one, a spare made just after a
// creation looked would often be unlinked by the next deletion instead.
inline constexpr unsigned kSpareSlots = 2;
std::string spareDataName(unsigned worker, unsigned slot);
// Parses exactly what spareDataName produces (any slot number); false otherwise.
bool parseSpareDataName(std::string_view name, unsigned& worker, unsigned& slot);

struct SegmentFiles {
    unsigned worker = 0;
    std::uint64_t segment = 0;
    std::string dataPath;   // DIR/wWW-SSSSSSSSSS.data (whether or not it exists)
    std::string indexPath;  // DIR/wWW-SSSSSSSSSS.index (whether or not it exists)
    bool hasData = false;   // the data file exists (a regular file)
    bool hasIndex = false;  // the index file exists (a regular file)
    std::string dataName;   // wWW-SSSSSSSSSS.data, relative to the directory
    std::string indexName;  // wWW-SSSSSSSSSS.index
    // A file with this segment's name that is not a regular file (a symlink, a directory...):
    // never opened; recovery refuses the directory, verify reports it.
    bool unsafe = false;
};

// Every segment of which at least one file exists (a symlink or other non-regular file with a
// segment name is reported in `unsafe`, not followed), sorted by (worker, segment). Files whose
// names are not canonical segment names, and anything that is not a regular file, are ignored.
std::vector<SegmentFiles> listSegments(const std::string& dir);
// The same, for a directory already open as `dirFd` (`dir` only names it in paths and errors).
std::vector<SegmentFiles> listSegments(int dirFd, const std::string& dir);

}  // namespace splicegate::audit
