#include "audit/Records.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <utility>

#include "audit/AuditDirectory.h"
#include "audit/Crc32c.h"
#include "common/Error.h"
#include "common/UniqueFd.h"

namespace splicegate::audit {
namespace {

// ---- Little-endian writing into a std::string.

void putU8(std::string& out, std::uint8_t value) {
    out.push_back(static_cast<char>(value));
}

// One append per field, not one per byte: the buffer lane books a record per small message.
template <std::size_t Bytes>
void putLittleEndian(std::string& out, std::uint64_t value) {
    char bytes[Bytes];
    for (std::size_t i = 0; i < Bytes; ++i) bytes[i] = static_cast<char>((value >> (8 * i)) & 0xff);
    out.append(bytes, Bytes);
}

void putU16(std::string& out, std::uint16_t value) {
    putLittleEndian<2>(out, value);
}

void putU32(std::string& out, std::uint32_t value) {
    putLittleEndian<4>(out, value);
}

void putU64(std::string& out, std::uint64_t value) {
    putLittleEndian<8>(out, value);
}

void putI64(std::string& out, std::int64_t value) {
    putU64(out, static_cast<std::uint64_t>(value));
}

// Cuts `text` to at most `limit` bytes without splitting a UTF-8 sequence.
std::string_view clampString(std::string_view text, std::size_t limit) {
    if (text.size() <= limit) return text;
    std::size_t length = limit;
    // Back off over continuation bytes (10xxxxxx) so the cut lands before a lead byte.
    while (length > 0 && (static_cast<unsigned char>(text[length]) & 0xc0) == 0x80) --length;
    return text.substr(0, length);
}

void putString(std::string& out, std::string_view text, std::size_t limit = kMaxStringBytes) {
    text = clampString(text, limit);
    putU16(out, static_cast<std::uint16_t>(text.size()));
    out.append(text.data(), text.size());
}

std::uint32_t recordCrc(const std::uint8_t* record, std::size_t length) {
    static constexpr std::uint8_t kZeros[4] = {0, 0, 0, 0};
    uLong crc = ::crc32(0L, Z_NULL, 0);
    crc = ::crc32(crc, record, 8);
    crc = ::crc32(crc, kZeros, 4);
    crc = ::crc32(crc, record + 12, static_cast<uInt>(length - 12));
    return static_cast<std::uint32_t>(crc);
}

// Writes the header of a record of `type`; returns its start for finish().
std::size_t begin(std::string& out, RecordType type) {
    std::size_t start = out.size();
    putU32(out, kRecordMagic);
    putU16(out, static_cast<std::uint16_t>(type));
    putU16(out, 0);  // length, filled by finish()
    putU32(out, 0);  // CRC, filled by finish()
    putU32(out, 0);  // reserved
    return start;
}

void patch(std::string& out, std::size_t at, std::uint64_t value, int bytes) {
    for (int i = 0; i < bytes; ++i)
        out[at + static_cast<std::size_t>(i)] = static_cast<char>((value >> (8 * i)) & 0xff);
}

void finish(std::string& out, std::size_t start) {
    std::size_t length = out.size() - start;  // <= kMaxRecordSize by construction
    patch(out, start + 6, length, 2);
    auto* record = reinterpret_cast<const std::uint8_t*>(out.data() + start);
    // The CRC field still holds the zeros begin() wrote, so one pass over the record gives what
    // recordCrc() computes around it (zlib's per-call cost is most of a small record's).
    auto crc = ::crc32(::crc32(0L, Z_NULL, 0), record, static_cast<uInt>(length));
    patch(out, start + 8, crc, 4);
}

// ---- Bounds-checked little-endian reading.

class Reader {
  public:
    Reader(const std::uint8_t* data, std::size_t size) noexcept : data_(data), size_(size) {}

    bool u8(std::uint8_t& value) noexcept {
        if (size_ - pos_ < 1) return false;
        value = data_[pos_++];
        return true;
    }
    bool u16(std::uint16_t& value) noexcept {
        std::uint64_t v = 0;
        if (!little(2, v)) return false;
        value = static_cast<std::uint16_t>(v);
        return true;
    }
    bool u32(std::uint32_t& value) noexcept {
        std::uint64_t v = 0;
        if (!little(4, v)) return false;
        value = static_cast<std::uint32_t>(v);
        return true;
    }
    bool u64(std::uint64_t& value) noexcept { return little(8, value); }
    bool i64(std::int64_t& value) noexcept {
        std::uint64_t v = 0;
        if (!little(8, v)) return false;
        value = static_cast<std::int64_t>(v);
        return true;
    }
    bool string(std::string& value) {
        std::uint16_t length = 0;
        if (!u16(length) || size_ - pos_ < length) return false;
        value.assign(reinterpret_cast<const char*>(data_ + pos_), length);
        pos_ += length;
        return true;
    }
    template <std::size_t N>
    bool bytes(std::array<std::uint8_t, N>& value) noexcept {
        if (size_ - pos_ < N) return false;
        std::memcpy(value.data(), data_ + pos_, N);
        pos_ += N;
        return true;
    }
    bool atEnd() const noexcept { return pos_ == size_; }
    std::size_t remaining() const noexcept { return size_ - pos_; }

  private:
    bool little(std::size_t bytes, std::uint64_t& value) noexcept {
        if (size_ - pos_ < bytes) return false;
        value = 0;
        for (std::size_t i = 0; i < bytes; ++i)
            value |= static_cast<std::uint64_t>(data_[pos_ + i]) << (8 * i);
        pos_ += bytes;
        return true;
    }

    const std::uint8_t* data_;
    std::size_t size_;
    std::size_t pos_ = 0;
};

std::uint64_t loadLittle(const std::uint8_t* data, std::size_t bytes) noexcept {
    std::uint64_t value = 0;
    for (std::size_t i = 0; i < bytes; ++i) value |= static_cast<std::uint64_t>(data[i]) << (8 * i);
    return value;
}

std::string hex(std::uint64_t value) {
    char text[24];
    std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(value));
    return text;
}

// Parses the body of a record whose header (type known, CRC good) was checked. Returns an empty
// string on success, else what is wrong.
std::string decodeBody(RecordType type, Reader& body, Record& out) {
    std::string bad = std::string("bad ") + recordTypeName(type) + " record: ";
    switch (type) {
        case RecordType::SegmentStart:
            if (!body.u32(out.version) || !body.u32(out.worker) || !body.u64(out.segment) ||
                !body.i64(out.timeNs))
                return bad + "wrong length";
            // The version decides the body's length, so an unknown one is named as such.
            if (out.version < kOldestFormatVersion || out.version > kFormatVersion)
                return "unsupported format version " + std::to_string(out.version) +
                       " (this reader knows versions " + std::to_string(kOldestFormatVersion) +
                       " to " + std::to_string(kFormatVersion) + ")";
            out.idFloor = 0;
            if (out.version > kOldestFormatVersion && !body.u64(out.idFloor))
                return bad + "wrong length";
            if (!body.atEnd()) return bad + "wrong length";
            return {};
        case RecordType::Open:
            if (!body.u64(out.id) || !body.i64(out.timeNs) || !body.string(out.route) ||
                !body.string(out.client) || !body.string(out.upstream))
                return bad + "string lengths do not match the record length";
            out.via.clear();
            out.sni.clear();
            // Version 4 appends via and sni; an older record ends here.
            if (!body.atEnd() && (!body.string(out.via) || !body.string(out.sni)))
                return bad + "string lengths do not match the record length";
            if (!body.atEnd()) return bad + "string lengths do not match the record length";
            return {};
        case RecordType::Chunk: {
            std::uint8_t flags = 0;
            std::uint8_t pad[2] = {};
            if (!body.u64(out.id) || !body.u8(out.direction) || !body.u8(flags) ||
                !body.u8(pad[0]) || !body.u8(pad[1]) || !body.u32(out.length) ||
                !body.u64(out.offset) || !body.i64(out.timeNs))
                return bad + "wrong length";
            out.crc = 0;
            // Version 3 appends the payload CRC; a version-2 record ends here (flags zero).
            if (!body.atEnd() && (!body.u32(out.crc) || !body.atEnd())) return bad + "wrong length";
            out.hasCrc = (flags & kChunkHasCrc) != 0;
            if (out.direction > kDirectionU2C)
                return bad + "direction " + std::to_string(out.direction) + " is neither 0 nor 1";
            if ((flags & ~kChunkHasCrc) != 0 || pad[0] != 0 || pad[1] != 0)
                return bad + "padding is not zero";
            if (out.hasCrc == false && out.crc != 0) return bad + "CRC without its flag";
            return {};
        }
        case RecordType::Close:
            if (!body.u64(out.id) || !body.i64(out.timeNs) || !body.u64(out.c2uBytes) ||
                !body.u64(out.u2cBytes) || !body.string(out.reason) || !body.atEnd())
                return bad + "string length does not match the record length";
            return {};
        case RecordType::Truncated:
            if (!body.u64(out.id) || !body.i64(out.timeNs) || !body.atEnd())
                return bad + "wrong length";
            return {};
        case RecordType::SegmentSealed:
            if (!body.u64(out.dataBytes) || !body.u8(out.status)) return bad + "wrong length";
            out.chained = !body.atEnd();  // version 3 carries the chain
            if (out.chained &&
                (!body.u8(out.chainKind) || !body.bytes(out.keyId) || !body.bytes(out.prevDigest) ||
                 !body.bytes(out.digest) || !body.atEnd()))
                return bad + "wrong length";
            if (out.status > kSealFailed)
                return bad + "status " + std::to_string(out.status) + " is neither 0 nor 1";
            if (out.chained && out.chainKind > kChainHmacSha256)
                return bad + "unknown chain kind " + std::to_string(out.chainKind);
            return {};
        case RecordType::SegmentsDeleted: {
            std::uint32_t worker = 0;
            if (!body.u32(worker) || !body.u64(out.firstSegment) || !body.u64(out.lastSegment) ||
                !body.i64(out.timeNs) || !body.u8(out.chainKind) || !body.bytes(out.keyId) ||
                !body.bytes(out.digest) || !body.bytes(out.prevDigest) ||
                !body.bytes(out.entryMac) || !body.atEnd())
                return bad + "wrong length";
            out.worker = worker;
            if (out.chainKind > kChainHmacSha256)
                return bad + "unknown chain kind " + std::to_string(out.chainKind);
            if (out.firstSegment > out.lastSegment) return bad + "first segment after the last";
            return {};
        }
    }
    return "unknown record type";
}

// Never follows a symlink: a link named like a segment file is not a segment file.
bool isRegular(int dirFd, const struct dirent& entry) {
    if (entry.d_type != DT_UNKNOWN) return entry.d_type == DT_REG;
    struct stat st {};
    if (::fstatat(dirFd, entry.d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) return false;
    return S_ISREG(st.st_mode);
}

}  // namespace

std::uint64_t Record::chunkEnd() const noexcept {
    std::uint64_t end = offset + length;
    return end < offset ? UINT64_MAX : end;
}

void encodeSegmentStart(std::string& out, std::uint32_t worker, std::uint64_t segment,
                        std::int64_t createdNs, std::uint64_t idFloor) {
    auto start = begin(out, RecordType::SegmentStart);
    putU32(out, kFormatVersion);
    putU32(out, worker);
    putU64(out, segment);
    putI64(out, createdNs);
    putU64(out, idFloor);
    finish(out, start);
}

void encodeOpen(std::string& out, std::uint64_t id, std::int64_t openedNs, std::string_view route,
                std::string_view client, std::string_view upstream, std::string_view via,
                std::string_view sni) {
    auto start = begin(out, RecordType::Open);
    putU64(out, id);
    putI64(out, openedNs);
    putString(out, route);
    putString(out, client);
    putString(out, upstream);
    putString(out, via, kMaxNameBytes);
    putString(out, sni, kMaxNameBytes);
    finish(out, start);
}

void encodeChunk(std::string& out, std::uint64_t id, std::uint8_t direction, std::uint32_t length,
                 std::uint64_t offset, std::int64_t timeNs, std::optional<std::uint32_t> crc) {
    auto start = begin(out, RecordType::Chunk);
    putU64(out, id);
    putU8(out, direction);
    putU8(out, crc ? kChunkHasCrc : 0);
    putU8(out, 0);
    putU8(out, 0);
    putU32(out, length);
    putU64(out, offset);
    putI64(out, timeNs);
    putU32(out, crc.value_or(0));
    finish(out, start);
}

void encodeClose(std::string& out, std::uint64_t id, std::int64_t closedNs, std::uint64_t c2uBytes,
                 std::uint64_t u2cBytes, std::string_view reason) {
    auto start = begin(out, RecordType::Close);
    putU64(out, id);
    putI64(out, closedNs);
    putU64(out, c2uBytes);
    putU64(out, u2cBytes);
    putString(out, reason);
    finish(out, start);
}

void encodeTruncated(std::string& out, std::uint64_t id, std::int64_t timeNs) {
    auto start = begin(out, RecordType::Truncated);
    putU64(out, id);
    putI64(out, timeNs);
    finish(out, start);
}

void encodeSegmentSealedV2(std::string& out, std::uint64_t dataBytes, std::uint8_t status) {
    auto start = begin(out, RecordType::SegmentSealed);
    putU64(out, dataBytes);
    putU8(out, status);
    finish(out, start);
}

Digest encodeSegmentSealed(std::string& out, std::uint64_t dataBytes, std::uint8_t status,
                           const ChainKey* key, const Digest& prevDigest, ChainHasher& indexHash) {
    auto start = begin(out, RecordType::SegmentSealed);
    auto body = out.size();
    putU64(out, dataBytes);
    putU8(out, status);
    putU8(out, key ? kChainHmacSha256 : kChainSha256);
    out.append(reinterpret_cast<const char*>(key ? key->id().data() : KeyId{}.data()),
               KeyId{}.size());
    out.append(reinterpret_cast<const char*>(prevDigest.data()), prevDigest.size());
    indexHash.update(out.data() + body, out.size() - body);
    Digest digest = indexHash.finish();
    out.append(reinterpret_cast<const char*>(digest.data()), digest.size());
    finish(out, start);
    return digest;
}

namespace {
constexpr std::uint32_t kLeaseMagic = 0x44494753;  // "SGID"
constexpr std::uint32_t kLeaseVersion = 1;
constexpr std::size_t kLeaseCrcOffset = kConnectionIdLeaseSize - 4;
}  // namespace

std::string encodeConnectionIdLease(std::uint64_t end) {
    std::string out;
    putU32(out, kLeaseMagic);
    putU32(out, kLeaseVersion);
    putU64(out, end);
    putU32(out, crc32c(0, out.data(), out.size()));
    return out;
}

std::optional<std::uint64_t> decodeConnectionIdLease(std::string_view bytes, std::string& problem) {
    if (bytes.size() != kConnectionIdLeaseSize) {
        problem =
            std::to_string(bytes.size()) + " bytes, not " + std::to_string(kConnectionIdLeaseSize);
        return std::nullopt;
    }
    Reader reader(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    std::uint32_t magic = 0, version = 0, crc = 0;
    std::uint64_t end = 0;
    reader.u32(magic);
    reader.u32(version);
    reader.u64(end);
    reader.u32(crc);  // the size was checked: every field is there
    if (magic != kLeaseMagic) {
        problem = "bad magic";
        return std::nullopt;
    }
    if (crc != crc32c(0, bytes.data(), kLeaseCrcOffset)) {
        problem = "bad CRC";
        return std::nullopt;
    }
    if (version != kLeaseVersion) {
        problem = "unknown version " + std::to_string(version);
        return std::nullopt;
    }
    return end;
}

Digest encodeSegmentsDeleted(std::string& out, std::uint32_t worker, std::uint64_t first,
                             std::uint64_t last, std::int64_t timeNs, const ChainKey* key,
                             const Digest& lastDigest, const Digest& prevEntryMac) {
    auto start = begin(out, RecordType::SegmentsDeleted);
    auto body = out.size();
    putU32(out, worker);
    putU64(out, first);
    putU64(out, last);
    putI64(out, timeNs);
    putU8(out, key ? kChainHmacSha256 : kChainSha256);
    out.append(reinterpret_cast<const char*>(key ? key->id().data() : KeyId{}.data()),
               KeyId{}.size());
    out.append(reinterpret_cast<const char*>(lastDigest.data()), lastDigest.size());
    out.append(reinterpret_cast<const char*>(prevEntryMac.data()), prevEntryMac.size());
    ChainHasher hasher(key);
    hasher.update(out.data() + body, out.size() - body);
    Digest mac = hasher.finish();
    out.append(reinterpret_cast<const char*>(mac.data()), mac.size());
    finish(out, start);
    return mac;
}

DecodeStatus decodeRecord(const std::uint8_t* data, std::size_t size, Record& out,
                          std::size_t& consumed, std::string& problem) {
    consumed = 0;
    if (size < kRecordHeaderSize) {
        problem = "short record header: " + std::to_string(size) + " of " +
                  std::to_string(kRecordHeaderSize) + " bytes";
        // A partial header with a wrong magic is garbage, not a torn tail.
        std::size_t magicBytes = std::min<std::size_t>(size, 4);
        if (loadLittle(data, magicBytes) != (kRecordMagic & ((1ull << (8 * magicBytes)) - 1))) {
            problem = "bad magic";
            return DecodeStatus::Corrupt;
        }
        return DecodeStatus::Incomplete;
    }
    auto magic = static_cast<std::uint32_t>(loadLittle(data, 4));
    if (magic != kRecordMagic) {
        problem = "bad magic " + hex(magic);
        return DecodeStatus::Corrupt;
    }
    auto typeValue = static_cast<std::uint16_t>(loadLittle(data + 4, 2));
    auto length = static_cast<std::size_t>(loadLittle(data + 6, 2));
    if (length < kRecordHeaderSize) {
        problem = "bad record length " + std::to_string(length);
        return DecodeStatus::Corrupt;
    }
    if (length > size) {
        problem =
            "short record: " + std::to_string(size) + " of " + std::to_string(length) + " bytes";
        return DecodeStatus::Incomplete;
    }
    auto storedCrc = static_cast<std::uint32_t>(loadLittle(data + 8, 4));
    auto actualCrc = recordCrc(data, length);
    if (storedCrc != actualCrc) {
        problem = "bad CRC (stored " + hex(storedCrc) + ", computed " + hex(actualCrc) + ")";
        return DecodeStatus::Corrupt;
    }
    if (loadLittle(data + 12, 4) != 0) {
        problem = "reserved header field is not zero";
        return DecodeStatus::Corrupt;
    }
    if (typeValue < static_cast<std::uint16_t>(RecordType::SegmentStart) ||
        typeValue > static_cast<std::uint16_t>(RecordType::SegmentsDeleted)) {
        problem = "unknown record type " + std::to_string(typeValue);
        return DecodeStatus::Corrupt;
    }
    auto type = static_cast<RecordType>(typeValue);
    Reader body(data + kRecordHeaderSize, length - kRecordHeaderSize);
    std::string bad = decodeBody(type, body, out);
    if (!bad.empty()) {
        problem = std::move(bad);
        return DecodeStatus::Corrupt;
    }
    out.type = type;
    consumed = length;
    return DecodeStatus::Ok;
}

bool followsOpen(RecordType type) noexcept {
    return type == RecordType::Chunk || type == RecordType::Close || type == RecordType::Truncated;
}

const char* recordTypeName(RecordType type) noexcept {
    switch (type) {
        case RecordType::SegmentStart:
            return "SegmentStart";
        case RecordType::Open:
            return "Open";
        case RecordType::Chunk:
            return "Chunk";
        case RecordType::Close:
            return "Close";
        case RecordType::Truncated:
            return "Truncated";
        case RecordType::SegmentSealed:
            return "SegmentSealed";
        case RecordType::SegmentsDeleted:
            return "SegmentsDeleted";
    }
    return "unknown";
}

const char* directionName(std::uint8_t direction) noexcept {
    if (direction == kDirectionC2U) return "c2u";
    if (direction == kDirectionU2C) return "u2c";
    return "?";
}

std::string segmentBaseName(unsigned worker, std::uint64_t segment) {
    char name[64];
    std::snprintf(name, sizeof name, "w%02u-%010llu", worker,
                  static_cast<unsigned long long>(segment));
    return name;
}

namespace {
// A decimal number of at most `limit`, digits only (no sign, no space); false otherwise.
bool parseDecimal(std::string_view text, std::uint64_t limit, std::uint64_t& value) {
    if (text.empty() || text.size() > 20) return false;
    value = 0;
    for (char c : text) {
        if (c < '0' || c > '9') return false;
        auto digit = static_cast<std::uint64_t>(c - '0');
        if (value > (limit - digit) / 10) return false;
        value = value * 10 + digit;
    }
    return true;
}
}  // namespace

std::string spareDataName(unsigned worker, unsigned slot) {
    char name[48];
    std::snprintf(name, sizeof name, "w%02u.spare%u", worker, slot);
    return name;
}

bool parseSpareDataName(std::string_view name, unsigned& worker, unsigned& slot) {
    auto dot = name.find(".spare");
    if (name.size() < 2 || name.front() != 'w' || dot == std::string_view::npos) return false;
    std::uint64_t w = 0, s = 0;
    if (!parseDecimal(name.substr(1, dot - 1), UINT32_MAX, w) ||
        !parseDecimal(name.substr(dot + 6), UINT32_MAX, s))
        return false;
    // Only the canonical spelling, as for segment names.
    if (spareDataName(static_cast<unsigned>(w), static_cast<unsigned>(s)) != name) return false;
    worker = static_cast<unsigned>(w);
    slot = static_cast<unsigned>(s);
    return true;
}

bool parseSegmentBaseName(std::string_view name, unsigned& worker, std::uint64_t& segment) {
    if (name.size() < 14 || name.front() != 'w') return false;
    auto dash = name.find('-');
    if (dash == std::string_view::npos || dash < 3) return false;
    std::uint64_t w = 0, s = 0;
    if (!parseDecimal(name.substr(1, dash - 1), UINT32_MAX, w)) return false;
    if (!parseDecimal(name.substr(dash + 1), UINT64_MAX, s)) return false;
    // Only the canonical spelling: "w0-1" or "w000-..." would alias another segment's name.
    if (segmentBaseName(static_cast<unsigned>(w), s) != name) return false;
    worker = static_cast<unsigned>(w);
    segment = s;
    return true;
}

std::vector<SegmentFiles> listSegments(const std::string& dir) {
    UniqueFd dirFd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dirFd) throwErrno(errno, "cannot open audit directory " + dir);
    return listSegments(dirFd.get(), dir);
}

std::vector<SegmentFiles> listSegments(int dirFd, const std::string& dir) {
    std::map<std::pair<unsigned, std::uint64_t>, SegmentFiles> found;
    std::string prefix = dir.empty() || dir.back() == '/' ? dir : dir + "/";
    forEachDirectoryEntry(dirFd, dir, [&](const dirent& entry) {
        std::string_view name(entry.d_name);
        bool isData = name.ends_with(".data");
        bool isIndex = name.ends_with(".index");
        if (!isData && !isIndex) return;
        auto base = name.substr(0, name.size() - (isData ? 5 : 6));
        unsigned worker = 0;
        std::uint64_t segment = 0;
        if (!parseSegmentBaseName(base, worker, segment)) return;
        auto& files = found[{worker, segment}];
        if (files.dataPath.empty()) {
            files.worker = worker;
            files.segment = segment;
            files.dataName = std::string(base) + ".data";
            files.indexName = std::string(base) + ".index";
            files.dataPath = prefix + files.dataName;
            files.indexPath = prefix + files.indexName;
        }
        if (!isRegular(dirFd, entry))
            files.unsafe = true;
        else
            (isData ? files.hasData : files.hasIndex) = true;
    });
    std::vector<SegmentFiles> segments;
    segments.reserve(found.size());
    for (auto& [key, files] : found) segments.push_back(std::move(files));
    return segments;
}

}  // namespace splicegate::audit
