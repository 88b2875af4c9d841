#pragma once
// What the archiver needs to know of one sealed audit segment, read from its index file alone:
// its identity and seal (the chain's anchor), the CRC-32C of its data file combined from the
// chunks' CRCs (no second read of the payload where the chunks tile the file), and the
// connections it holds, for the segment's connections object (gzipped JSON lines) that lets the
// bucket be searched without reading payload.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "audit/Records.h"

namespace splicegate::archive {

// One connection's part in one segment.
struct SegmentConnection {
    std::uint64_t id = 0;
    std::string route, client, upstream;  // empty when its Open is in an earlier segment
    std::string via, sni;                 // the Open record's; empty also when it has none
    std::optional<std::int64_t> openedNs;
    std::optional<std::int64_t> closedNs;
    std::string state;   // "open", "closed" or "truncated" at the end of this segment
    std::string reason;  // the Close record's
    std::uint64_t c2uBytes = 0, u2cBytes = 0;  // the chunks in this segment
    std::uint64_t firstRecord = 0, lastRecord = 0;  // offsets in the index file
};

// A span of the data file and its CRC-32C.
struct CrcPiece {
    std::uint64_t offset = 0;
    std::uint64_t length = 0;
    std::uint32_t crc32c = 0;

    bool operator==(const CrcPiece&) const = default;
};

struct SealedSegment {
    unsigned worker = 0;
    std::uint64_t segment = 0;
    std::int64_t createdNs = 0;
    std::int64_t newestNs = 0;   // the newest record time in it
    std::uint64_t indexBytes = 0;
    std::uint64_t dataBytes = 0;  // as the seal records it
    bool failed = false;          // sealed with status 1 (an fdatasync or write error)
    bool keyed = false;           // an HMAC-keyed seal
    std::string sealDigest;       // lowercase hex
    // The data file's CRC-32C from its chunks, when they cover [0, dataBytes) back to back,
    // each with a CRC; otherwise nullopt and the file must be read.
    std::optional<std::uint32_t> dataCrc32c;
    // With dataCrc32c: the chunks' CRCs combined into spans of at least kPieceBytes (but the
    // last), tiling [0, dataBytes) in order, so that a multipart upload's parts can be cut where
    // they end and get their CRCs without a read (archive/Parts.h).
    std::vector<CrcPiece> dataPieces;
    static constexpr std::uint64_t kPieceBytes = 64u << 10;
    std::vector<SegmentConnection> connections;  // in order of first appearance
};

// Reads `files`' index. nullopt when the segment is not sealed yet (no SegmentSealed as its
// last record: the daemon still writes it, or a crash left it for recovery). Throws
// std::runtime_error naming the file and offset for a damaged index, and std::system_error for
// one that cannot be read.
std::optional<SealedSegment> readSealedSegment(const audit::SegmentFiles& files);

// The connections object's content before compression: one JSON object per line.
std::string connectionsJsonLines(const SealedSegment& segment);

}  // namespace splicegate::archive
