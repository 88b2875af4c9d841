#include "archive/SealedSegment.h"


#include <algorithm>
#include <cstdio>
#include <map>
#include <stdexcept>

#include "audit/AuditReader.h"
#include "audit/Crc32c.h"
#include "audit/TextFormat.h"

namespace splicegate::archive {
namespace {

std::string hex(const audit::Digest& digest) {
    std::string text;
    char pair[3];
    for (auto byte : digest) {
        std::snprintf(pair, sizeof pair, "%02x", byte);
        text += pair;
    }
    return text;
}

void appendOptionalString(std::string& out, const std::string& value) {
    if (value.empty())
        out += "null";
    else
        out += audittool::jsonString(value);
}

template <typename T>
void appendOptionalNumber(std::string& out, const std::optional<T>& value) {
    out += value ? std::to_string(*value) : "null";
}

// Follows the chunks in offset order: the data file's CRC while they tile it with CRCs.
class CrcTiler {
  public:
    void add(const audit::Record& chunk) {
        if (!chunk.hasCrc) {
            broken_ = true;
            return;
        }
        pieces_.push_back({chunk.offset, chunk.length, chunk.crc});
    }
    // The whole file's CRC, and in `spans` the chunks merged into spans of at least
    // `spanBytes` (a segment of small chunks would otherwise keep one entry per chunk).
    std::optional<std::uint32_t> result(std::uint64_t dataBytes, std::uint64_t spanBytes,
                                        std::vector<CrcPiece>& spans) {
        spans.clear();
        if (broken_) return std::nullopt;
        std::sort(pieces_.begin(), pieces_.end(),
                  [](const Piece& a, const Piece& b) { return a.offset < b.offset; });
        std::uint32_t crc = 0;
        std::uint64_t end = 0;
        for (const auto& piece : pieces_) {
            if (piece.offset != end) {  // a gap or an overlap
                spans.clear();
                return std::nullopt;
            }
            crc = audit::crc32cCombine(crc, piece.crc, piece.length);
            if (spans.empty() || spans.back().length >= spanBytes)
                spans.push_back({piece.offset, 0, 0});
            auto& span = spans.back();
            span.crc32c = audit::crc32cCombine(span.crc32c, piece.crc, piece.length);
            span.length += piece.length;
            end += piece.length;
        }
        if (end != dataBytes) {
            spans.clear();
            return std::nullopt;
        }
        return crc;
    }

  private:
    struct Piece {
        std::uint64_t offset;
        std::uint64_t length;
        std::uint32_t crc;
    };
    std::vector<Piece> pieces_;
    bool broken_ = false;
};

class SegmentScan {
  public:
    SegmentScan(SealedSegment& out) : out_(out) {}

    void take(const audit::Record& record, std::uint64_t offset) {
        out_.newestNs = std::max(out_.newestNs, record.timeNs);
        switch (record.type) {
            case audit::RecordType::SegmentStart:
                out_.worker = record.worker;
                out_.segment = record.segment;
                out_.createdNs = record.timeNs;
                break;
            case audit::RecordType::Open: {
                auto& c = connection(record.id, offset);
                c.route = record.route;
                c.client = record.client;
                c.via = record.via;
                c.sni = record.sni;
                c.upstream = record.upstream;
                c.openedNs = record.timeNs;
                break;
            }
            case audit::RecordType::Chunk: {
                auto& c = connection(record.id, offset);
                (record.direction == 0 ? c.c2uBytes : c.u2cBytes) += record.length;
                tiler_.add(record);
                break;
            }
            case audit::RecordType::Close: {
                auto& c = connection(record.id, offset);
                c.closedNs = record.timeNs;
                c.state = "closed";
                c.reason = record.reason;
                break;
            }
            case audit::RecordType::Truncated:
                connection(record.id, offset).state = "truncated";
                break;
            default:
                break;
        }
    }

    void sealed(const audit::Record& seal) {
        out_.dataBytes = seal.dataBytes;
        out_.failed = seal.status != 0;
        out_.keyed = seal.chainKind == audit::kChainHmacSha256;
        out_.sealDigest = hex(seal.digest);
        out_.dataCrc32c = tiler_.result(seal.dataBytes, SealedSegment::kPieceBytes, out_.dataPieces);
    }

  private:
    SegmentConnection& connection(std::uint64_t id, std::uint64_t offset) {
        auto [at, added] = byId_.try_emplace(id, out_.connections.size());
        if (added) {
            out_.connections.push_back({});
            out_.connections.back().id = id;
            out_.connections.back().state = "open";
            out_.connections.back().firstRecord = offset;
        }
        auto& c = out_.connections[at->second];
        c.lastRecord = offset;
        return c;
    }

    SealedSegment& out_;
    std::map<std::uint64_t, std::size_t> byId_;
    CrcTiler tiler_;
};

}  // namespace

std::optional<SealedSegment> readSealedSegment(const audit::SegmentFiles& files) {
    if (!files.hasIndex) return std::nullopt;
    audit::IndexReader reader(files.indexPath);
    SealedSegment segment;
    SegmentScan scan(segment);
    audit::Record record;
    bool first = true;
    bool sealedLast = false;
    bool chained = false;
    for (;;) {
        auto status = reader.next(record);
        if (status == audit::IndexReader::Status::End) break;
        if (status == audit::IndexReader::Status::Torn) return std::nullopt;  // being written
        if (status == audit::IndexReader::Status::Corrupt)
            throw std::runtime_error(
                audit::placeText(files.indexPath, reader.recordOffset(), reader.problem()));
        if (first && record.type != audit::RecordType::SegmentStart)
            throw std::runtime_error(audit::placeText(files.indexPath, 0,
                                                      "the first record is not SegmentStart"));
        first = false;
        sealedLast = record.type == audit::RecordType::SegmentSealed;
        if (sealedLast) {
            chained = record.chained;
            scan.sealed(record);
        }
        else
            scan.take(record, reader.recordOffset());
    }
    // An unchained (version 2) seal has no digest to anchor: such old logs are not archived.
    if (!sealedLast || !chained) return std::nullopt;
    segment.indexBytes = reader.goodEnd();
    return segment;
}

std::string connectionsJsonLines(const SealedSegment& segment) {
    std::string out;
    for (const auto& c : segment.connections) {
        out += "{\"id\":" + std::to_string(c.id) + ",\"worker\":" +
               std::to_string(segment.worker) + ",\"segment\":" + std::to_string(segment.segment) +
               ",\"route\":";
        appendOptionalString(out, c.route);
        out += ",\"client\":";
        appendOptionalString(out, c.client);
        // The PROXY protocol's balancer and the TLS server name (null: none, or a log written
        // before format version 4, which does not record them).
        out += ",\"via\":";
        appendOptionalString(out, c.via);
        out += ",\"sni\":";
        appendOptionalString(out, c.sni);
        out += ",\"upstream\":";
        appendOptionalString(out, c.upstream);
        out += ",\"opened_ns\":";
        appendOptionalNumber(out, c.openedNs);
        out += ",\"closed_ns\":";
        appendOptionalNumber(out, c.closedNs);
        out += ",\"c2u_bytes\":" + std::to_string(c.c2uBytes) +
               ",\"u2c_bytes\":" + std::to_string(c.u2cBytes) + ",\"state\":";
        out += audittool::jsonString(c.state);
        out += ",\"reason\":";
        appendOptionalString(out, c.reason);
        out += ",\"first_record\":" + std::to_string(c.firstRecord) +
               ",\"last_record\":" + std::to_string(c.lastRecord) + "}\n";
    }
    return out;
}

}  // namespace splicegate::archive
