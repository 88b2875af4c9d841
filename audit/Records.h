#pragma once
// Audit index records and segment file names (audit/FORMAT.md, format version 2; version-1
// SegmentStart records are still read).
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
#include <string>
#include <string_view>
#include <vector>

namespace splicegate::audit {

enum class RecordType : std::uint16_t {
    SegmentStart = 1,
    Open,
    Chunk,
    Close,
    Truncated,
    SegmentSealed
};

constexpr std::uint32_t kRecordMagic = 0x58494753;  // "SGIX" little-endian
constexpr std::size_t kRecordHeaderSize = 16;
constexpr std::size_t kMaxRecordSize = 65535;
// Written in new SegmentStart records. Readers also accept kOldestFormatVersion, whose
// SegmentStart has no connection id floor, so that logs written before it stay readable.
constexpr std::uint32_t kFormatVersion = 2;
constexpr std::uint32_t kOldestFormatVersion = 1;
// Longest string an encoder writes; three of them plus the Open body still fit kMaxRecordSize.
constexpr std::size_t kMaxStringBytes = 16384;

constexpr std::uint8_t kDirectionC2U = 0;
constexpr std::uint8_t kDirectionU2C = 1;
constexpr std::uint8_t kSealClean = 0;
constexpr std::uint8_t kSealFailed = 1;

// Total sizes of the fixed-size records (header included).
constexpr std::size_t kSegmentStartRecordSize = kRecordHeaderSize + 32;
constexpr std::size_t kSegmentStartV1RecordSize = kRecordHeaderSize + 24;
constexpr std::size_t kChunkRecordSize = kRecordHeaderSize + 32;
constexpr std::size_t kTruncatedRecordSize = kRecordHeaderSize + 16;
constexpr std::size_t kSegmentSealedRecordSize = kRecordHeaderSize + 9;

// `idFloor`: the next connection id the daemon hands out (FORMAT.md "Records").
void encodeSegmentStart(std::string& out, std::uint32_t worker, std::uint64_t segment,
                        std::int64_t createdNs, std::uint64_t idFloor);
void encodeOpen(std::string& out, std::uint64_t id, std::int64_t openedNs, std::string_view route,
                std::string_view client, std::string_view upstream);
void encodeChunk(std::string& out, std::uint64_t id, std::uint8_t direction, std::uint32_t length,
                 std::uint64_t offset, std::int64_t timeNs);
void encodeClose(std::string& out, std::uint64_t id, std::int64_t closedNs, std::uint64_t c2uBytes,
                 std::uint64_t u2cBytes, std::string_view reason);
void encodeTruncated(std::string& out, std::uint64_t id, std::int64_t timeNs);
void encodeSegmentSealed(std::string& out, std::uint64_t dataBytes, std::uint8_t status);

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
    // Chunk
    std::uint8_t direction = 0;
    std::uint32_t length = 0;
    std::uint64_t offset = 0;
    // Close
    std::uint64_t c2uBytes = 0;
    std::uint64_t u2cBytes = 0;
    std::string reason;
    // SegmentSealed
    std::uint64_t dataBytes = 0;
    std::uint8_t status = 0;

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
const char* directionName(std::uint8_t direction) noexcept;  // "c2u", "u2c" or "?"

// "w00-0000000001": worker zero-padded to at least 2 digits, segment to at least 10.
std::string segmentBaseName(unsigned worker, std::uint64_t segment);
// Parses a canonical base name (exactly what segmentBaseName produces); false otherwise.
bool parseSegmentBaseName(std::string_view name, unsigned& worker, std::uint64_t& segment);

struct SegmentFiles {
    unsigned worker = 0;
    std::uint64_t segment = 0;
    std::string dataPath;   // DIR/wWW-SSSSSSSSSS.data (whether or not it exists)
    std::string indexPath;  // DIR/wWW-SSSSSSSSSS.index (whether or not it exists)
    bool hasData = false;   // the data file exists (a regular file)
    bool hasIndex = false;  // the index file exists (a regular file)
};

// Every segment of which at least one file exists, sorted by (worker, segment). Files whose
// names are not canonical segment names, and anything that is not a regular file, are ignored.
std::vector<SegmentFiles> listSegments(const std::string& dir);

}  // namespace splicegate::audit
