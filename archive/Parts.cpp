#include "archive/Parts.h"

#include <algorithm>
#include <charconv>

#include "archive/s3/Requests.h"
#include "audit/Crc32c.h"

namespace splicegate::archive {

std::uint64_t partBytesFor(std::uint64_t size, std::uint64_t partBytes) {
    constexpr std::uint64_t kMiB = 1u << 20;
    std::uint64_t least = (size + s3::kMaxParts - 1) / s3::kMaxParts;
    if (partBytes >= least) return partBytes;
    return (least + kMiB - 1) / kMiB * kMiB;
}

std::vector<s3::PartRange> partsFromPieces(const std::vector<CrcPiece>& pieces,
                                           std::uint64_t partBytes) {
    std::vector<s3::PartRange> parts;
    for (const auto& piece : pieces) {
        if (parts.empty() || parts.back().length >= partBytes) parts.push_back({piece.offset, 0, 0});
        auto& part = parts.back();
        part.crc32c = audit::crc32cCombine(part.crc32c, piece.crc32c, piece.length);
        part.length += piece.length;
        if (part.length > s3::kMaxPartBytes) return {};
    }
    return parts;
}

std::vector<s3::PartRange> equalParts(std::uint64_t size, std::uint64_t partBytes) {
    std::vector<s3::PartRange> parts;
    if (partBytes == 0) partBytes = std::max<std::uint64_t>(size, 1);
    for (std::uint64_t offset = 0; offset < size; offset += partBytes)
        parts.push_back({offset, std::min(partBytes, size - offset), 0});
    return parts;
}

std::uint32_t combinedCrc32c(const std::vector<s3::PartRange>& parts) {
    std::uint32_t crc = 0;
    for (const auto& part : parts) crc = audit::crc32cCombine(crc, part.crc32c, part.length);
    return crc;
}

std::string compositeCrc32c(const std::vector<s3::PartRange>& parts) {
    std::string bytes;
    for (const auto& part : parts) {
        bytes += static_cast<char>(part.crc32c >> 24);
        bytes += static_cast<char>(part.crc32c >> 16);
        bytes += static_cast<char>(part.crc32c >> 8);
        bytes += static_cast<char>(part.crc32c);
    }
    return s3::crc32cHeaderValue(audit::crc32c(0, bytes.data(), bytes.size())) + "-" +
           std::to_string(parts.size());
}

std::optional<unsigned> compositePartCount(std::string_view checksum) {
    auto dash = checksum.rfind('-');
    if (dash == std::string_view::npos || dash + 1 >= checksum.size()) return std::nullopt;
    unsigned count = 0;
    auto digits = checksum.substr(dash + 1);
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), count);
    if (ec != std::errc() || end != digits.data() + digits.size() || count == 0) return std::nullopt;
    return count;
}

}  // namespace splicegate::archive
