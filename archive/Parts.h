#pragma once
// How an object larger than the part size goes up as an S3 multipart upload: where its parts
// are cut and what S3 then calls its checksum. The data object's parts are cut where the chunk
// spans of its index end (SealedSegment::dataPieces), so each part's CRC-32C is the spans' CRCs
// combined and the payload is read once, by the upload; any other object is cut in equal parts
// whose CRCs the caller computes.
// Thread affinity: none (pure functions). Error contract: none beyond std::bad_alloc.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "archive/SealedSegment.h"
#include "archive/s3/S3Client.h"

namespace splicegate::archive {

// The part size for an object of `size` bytes: `partBytes`, raised (to whole MiB) where the
// object would otherwise need more than S3's 10000 parts.
std::uint64_t partBytesFor(std::uint64_t size, std::uint64_t partBytes);

// Parts made of whole pieces, each closed once it holds at least `partBytes` (so every part but
// the last is at least that); empty when a part would exceed S3's 5 GiB.
std::vector<s3::PartRange> partsFromPieces(const std::vector<CrcPiece>& pieces,
                                           std::uint64_t partBytes);

// [0, size) in parts of `partBytes`, the last shorter; CRCs 0, to be computed.
std::vector<s3::PartRange> equalParts(std::uint64_t size, std::uint64_t partBytes);

// The whole object's CRC-32C from its parts'.
std::uint32_t combinedCrc32c(const std::vector<s3::PartRange>& parts);

// S3's x-amz-checksum-crc32c of an object put in these parts (COMPOSITE): the CRC-32C of the
// parts' CRCs, four bytes each, big-endian, in part order, in base64, then "-" and their count.
std::string compositeCrc32c(const std::vector<s3::PartRange>& parts);

// The N of a composite checksum "BASE64-N"; nullopt for a whole-object one or none.
std::optional<unsigned> compositePartCount(std::string_view checksum);

}  // namespace splicegate::archive
