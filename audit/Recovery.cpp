#include "audit/Recovery.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <set>
#include <utility>

#include "audit/AuditDirectory.h"
#include "audit/AuditReader.h"
#include "audit/ReaderSupport.h"
#include "audit/Records.h"
#include "audit/Retention.h"
#include "common/Error.h"
#include "common/UniqueFd.h"

namespace splicegate::audit {
namespace {

// Truncated records are listed one line each up to this many per worker, then summed up.
constexpr std::size_t kTruncationLines = 50;

// What a crash can leave unsealed, per worker: the segment created ahead (still empty), the
// current one, and the one before it whose seal was on its way (a writer holds later segments
// until the earlier one is sealed). An unsealed segment older than these was not left by a
// crash: sealing it would launder whatever was done to it.
constexpr std::size_t kCrashUnsealedSegments = 3;

std::int64_t nowNs() {
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME, &now);
    return static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

void writeAt(int fd, const std::string& bytes, std::uint64_t offset, const std::string& path) {
    std::size_t written = 0;
    if (int rc = writeFullyAt(fd, bytes, offset, written); rc < 0) throwErrno(-rc, "write " + path);
}

void truncateTo(int fd, std::uint64_t size, const std::string& path) {
    checkSys(::ftruncate(fd, static_cast<off_t>(size)), "truncate " + path);
}

std::string readAll(int fd, std::uint64_t size, const std::string& path) {
    std::string bytes(static_cast<std::size_t>(size), '\0');
    std::size_t done = 0;
    while (done < bytes.size()) {
        ssize_t n = ::pread(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throwErrno(errno, "read " + path);
        if (n == 0) break;
        done += static_cast<std::size_t>(n);
    }
    bytes.resize(done);
    return bytes;
}

// mkdir -p with mode 0750 for the components it creates.
void makeDirectories(const std::string& dir) {
    if (dir.empty())
        throw std::system_error(ENOENT, std::system_category(), "empty audit directory");
    for (std::size_t slash = dir.find('/', 1);; slash = dir.find('/', slash + 1)) {
        std::string part = dir.substr(0, slash);
        if (::mkdir(part.c_str(), 0750) != 0 && errno != EEXIST)
            throwErrno(errno, "cannot create audit directory " + part);
        if (slash == std::string::npos) break;
    }
}

// Whether the index ends with a valid SegmentSealed record (either version's size): the segment
// was completed (and made durable) before the crash, so damage inside it is not a torn write.
// `digest` receives its chain digest (zero for a version-2 seal).
bool endsWithSeal(int fd, std::uint64_t size, const std::string& path, Digest& digest) {
    for (std::size_t length : {kSegmentSealedRecordSize, kSegmentSealedV2RecordSize}) {
        if (size < length) continue;
        std::uint8_t tail[kSegmentSealedRecordSize];
        auto offset = static_cast<off_t>(size - length);
        ssize_t n = 0;
        do {
            n = ::pread(fd, tail, length, offset);
        } while (n < 0 && errno == EINTR);
        if (n < 0) throwErrno(errno, "read " + path);
        if (static_cast<std::size_t>(n) != length) continue;
        Record record;
        std::size_t consumed = 0;
        std::string problem;
        if (decodeRecord(tail, length, record, consumed, problem) == DecodeStatus::Ok &&
            record.type == RecordType::SegmentSealed && consumed == length) {
            digest = record.chained ? record.digest : Digest{};
            return true;
        }
    }
    return false;
}

// One segment after steps 1 and 2, its files still open for steps 3 and 4.
struct RepairedSegment {
    SegmentFiles files;
    UniqueFd index;
    UniqueFd data;
    std::uint64_t indexEnd = 0;
    std::uint64_t dataSize = 0;
    bool sealed = false;
    bool indexChanged = false;
    bool dataChanged = false;
    Digest digest{};  // its seal's chain digest, once sealed
};

// One worker's connections whose Open retention deleted: which ids continue one, and which of
// those have ended (a Chunk after the end must not reopen them).
struct HeadsLeft {
    DeletedHeads deleted;
    std::set<std::uint64_t> ended;
};

class Recovery {
  public:
    Recovery(int dirFd, const std::string& dir, const ChainKey* key,
             const std::set<unsigned>& liveChains = {})
        : dirFd_(dirFd), dir_(dir), key_(key), liveChains_(liveChains), now_(nowNs()) {}

    RecoveryReport run() {
        auto segments = listSegments(dirFd_, dir_);
        for (const auto& files : segments)
            if (files.unsafe)
                throw std::system_error(
                    ELOOP, std::system_category(),
                    "audit directory " + dir_ + ": a file named " + files.indexName + " or " +
                        files.dataName +
                        " is not a regular file (a symlink?); it is never followed: remove it");
        retention_ = repairRetentionLog(dirFd_, dir_);
        if (!retention_.cut.empty()) act(retention_.cut);
        for (std::size_t begin = 0; begin < segments.size();) {
            std::size_t end = begin;
            while (end < segments.size() && segments[end].worker == segments[begin].worker) ++end;
            if (liveChains_.count(segments[begin].worker) != 0) {
                // Written now by the live process that holds it: its state is its writer's.
                report_.lastSegment[segments[begin].worker] = segments[end - 1].segment;
            } else {
                worker(segments, begin, end);
            }
            begin = end;
        }
        if (dirChanged_) syncDirectory();
        return std::move(report_);
    }

  private:
    void act(const std::string& line) { report_.actions.push_back(line); }

    void worker(const std::vector<SegmentFiles>& segments, std::size_t begin, std::size_t end) {
        unsigned worker = segments[begin].worker;
        std::optional<std::uint64_t> lastIndexed;
        std::vector<std::uint64_t> indexed;
        for (auto i = begin; i < end; ++i) {
            if (segments[i].hasIndex) {
                lastIndexed = segments[i].segment;
                indexed.push_back(segments[i].segment);
            }
            report_.lastSegment[worker] = segments[i].segment;  // sorted: the last one wins
        }
        const std::uint64_t crashTail =
            indexed.size() > kCrashUnsealedSegments
                ? indexed[indexed.size() - kCrashUnsealedSegments]
                : 0;
        std::set<std::uint64_t> open;  // connections with an Open but no Close or Truncated
        // ...or with no Open left, where retention deleted it (FORMAT.md "Retention").
        HeadsLeft heads{DeletedHeads(retention_.entries), {}};
        std::optional<RepairedSegment> last;
        // The chain continues from the newest segment retention deleted, when there was one.
        prevDigest_ = Digest{};
        brokenAt_.clear();
        for (const auto& entry : retention_.entries)
            if (entry.worker == worker && entry.last < segments[begin].segment)
                prevDigest_ = entry.lastDigest;
        for (auto i = begin; i < end; ++i) {
            const auto& files = segments[i];
            if (!files.hasIndex) {
                removeLoneData(files);
                continue;
            }
            if ((files.segment < crashTail || !brokenAt_.empty()) && leftUnsealed(files))
                continue;
            RepairedSegment segment = repair(files, open, heads);
            // Only a seal recovery may extend is checked: the predecessor of the crash tail's
            // first segment and each one after it.
            if (segment.sealed && files.segment + 1 >= crashTail) checkSealExtended(segment);
            if (files.segment == lastIndexed) {
                last = std::move(segment);
            } else {
                if (!segment.sealed) seal(segment);
                prevDigest_ = segment.digest;
                sync(segment);
            }
        }
        if (!last) return;
        if (!open.empty()) {
            if (last->sealed) {
                prevDigest_ = last->digest;
                if (brokenAt_.empty()) truncateInNewSegment(worker, open);
            } else {
                std::string records;
                for (auto id : open) encodeTruncated(records, id, now_);
                append(*last, records);
                reportTruncations(worker, open, baseName(last->files.indexPath));
            }
        }
        if (!last->sealed) seal(*last);
        sync(*last);
    }

    // Recovery extends only a chain whose newest seal it has recomputed: a seal forged by someone
    // without the key, or over edited records, is never built upon. Sets brokenAt_ when the seal
    // `segment` ends with does not hold (its digest, its key or its link to prevDigest_).
    void checkSealExtended(const RepairedSegment& segment) {
        if (!brokenAt_.empty() || segment.indexEnd < kSegmentSealedRecordSize) return;
        auto bytes = readAll(segment.index.get(), segment.indexEnd, segment.files.indexPath);
        const auto* seal = reinterpret_cast<const std::uint8_t*>(bytes.data()) + bytes.size() -
                           kSegmentSealedRecordSize;
        Record record;
        std::size_t consumed = 0;
        std::string problem;
        if (decodeRecord(seal, kSegmentSealedRecordSize, record, consumed, problem) !=
                DecodeStatus::Ok ||
            record.type != RecordType::SegmentSealed || !record.chained)
            return;  // an older-format seal: no chain to extend, the next one starts from zero
        std::string why;
        if (key_ && (record.chainKind != kChainHmacSha256 || record.keyId != key_->id())) {
            why = "it was not made with --audit-hmac-key-file's key";
        } else if (record.prevDigest != prevDigest_) {
            why = "it does not name its predecessor's digest";
        } else if (record.chainKind == kChainSha256 || key_) {
            ChainHasher hasher(record.chainKind == kChainHmacSha256 ? key_ : nullptr);
            hasher.update(bytes.data(), bytes.size() - kSegmentSealedRecordSize);
            hasher.update(seal + kRecordHeaderSize, kSealDigestedBodyBytes);
            if (hasher.finish() != record.digest) why = "its digest does not match its records";
        }
        if (why.empty()) return;
        brokenAt_ = baseName(segment.files.indexPath) + " (its seal does not hold: " + why + ")";
        act(brokenAt_ + ": the worker's segments after it are left unsealed");
    }

    // An unsealed segment older than the crash tail, or after a break in the chain, is reported
    // and not touched: no cut, no Truncated record, no seal. True when `files` is such a segment.
    bool leftUnsealed(const SegmentFiles& files) {
        UniqueFd index = openInDirectoryOrThrow(dirFd_, dir_, files.indexName, O_RDONLY);
        Digest digest{};
        if (endsWithSeal(index.get(), fileSize(index.get(), files.indexPath), files.indexPath,
                         digest))
            return false;
        report_.leftUnsealed.push_back(files.indexPath);
        const std::string name = baseName(files.indexPath);
        if (brokenAt_.empty()) {
            act(name + ": unsealed, and older than what a crash leaves unsealed: left as it is "
                       "(it was changed after it was written, or its seal was removed; verify "
                       "reports it)");
            brokenAt_ = name + " (unsealed)";
        } else {
            act(name + ": unsealed, after a break in the chain at " + brokenAt_ +
                ": left as it is");
        }
        return true;
    }

    // Steps 1 and 2 of FORMAT.md "Crash recovery" for one segment; updates `open`.
    RepairedSegment repair(const SegmentFiles& files, std::set<std::uint64_t>& open,
                           HeadsLeft& heads) {
        RepairedSegment segment;
        segment.files = files;
        const std::string indexName = baseName(files.indexPath);
        segment.index = openInDirectoryOrThrow(dirFd_, dir_, files.indexName, O_RDWR);
        segment.data = openInDirectoryOrThrow(dirFd_, dir_, files.dataName, O_RDWR | O_CREAT);
        if (!files.hasData) {
            dirChanged_ = true;
            act(baseName(files.dataPath) + ": created the missing data file");
        }
        auto indexSize = fileSize(segment.index.get(), files.indexPath);
        segment.dataSize = fileSize(segment.data.get(), files.dataPath);
        bool sealed = endsWithSeal(segment.index.get(), indexSize, files.indexPath, segment.digest);

        IndexReader reader(segment.index.get(), files.indexPath);
        Record record;
        std::optional<std::uint64_t> cutAt;
        std::string cutWhy;
        std::vector<std::string> damage;  // of a sealed segment, which is left as it is
        bool first = true;
        bool hasStart = false;
        std::optional<RecordType> lastType;
        std::uint64_t maxChunkEnd = 0;
        for (bool more = true; more && !cutAt;) {
            switch (reader.next(record)) {
                case IndexReader::Status::End:
                    more = false;
                    continue;
                case IndexReader::Status::Torn:
                    if (sealed) {
                        damage.push_back(placeText(indexName, reader.goodEnd(), reader.problem()));
                    } else {
                        cutAt = reader.goodEnd();
                        cutWhy = reader.problem();
                    }
                    more = false;
                    continue;
                case IndexReader::Status::Corrupt:
                    if (sealed) {
                        damage.push_back(
                            placeText(indexName, reader.recordOffset(), reader.problem()));
                        more = reader.resync();
                    } else {
                        cutAt = reader.recordOffset();
                        cutWhy = reader.problem();
                    }
                    continue;
                case IndexReader::Status::Record:
                    break;
            }
            auto offset = reader.recordOffset();
            if (first) {
                first = false;
                if (record.type == RecordType::SegmentStart) {
                    hasStart = true;
                } else if (sealed) {
                    damage.push_back(placeText(indexName, offset, "no SegmentStart record"));
                } else {
                    cutAt = offset;
                    cutWhy = std::string("the first record is ") + recordTypeName(record.type) +
                             ", not SegmentStart";
                    continue;
                }
            }
            if (record.type == RecordType::Chunk && record.chunkEnd() > segment.dataSize) {
                std::string why = "a chunk of connection " + std::to_string(record.id) +
                                  " ends at data offset " + std::to_string(record.chunkEnd()) +
                                  ", beyond the data file (" + std::to_string(segment.dataSize) +
                                  " bytes)";
                if (sealed) {
                    damage.push_back(placeText(indexName, offset, why));
                    continue;
                }
                cutAt = offset;
                cutWhy = why + ": its payload never reached the disk";
                continue;
            }
            lastType = record.type;
            switch (record.type) {
                case RecordType::Open:
                    open.insert(record.id);
                    break;
                case RecordType::Chunk:
                    maxChunkEnd = std::max(maxChunkEnd, record.chunkEnd());
                    if (heads.deleted.continues(files.worker, record.id) &&
                        !heads.ended.count(record.id))
                        open.insert(record.id);
                    break;
                case RecordType::Close:
                case RecordType::Truncated:
                    open.erase(record.id);
                    if (heads.deleted.continues(files.worker, record.id))
                        heads.ended.insert(record.id);
                    break;
                case RecordType::SegmentStart:
                    report_.maxIdFloor = std::max(report_.maxIdFloor, record.idFloor);
                    heads.deleted.segmentStart(files.worker, files.segment, record.idFloor);
                    break;
                case RecordType::SegmentSealed:
                case RecordType::SegmentsDeleted:
                    break;
            }
            if (record.type != RecordType::SegmentStart &&
                record.type != RecordType::SegmentSealed &&
                record.type != RecordType::SegmentsDeleted)
                report_.maxConnectionId = std::max(report_.maxConnectionId, record.id);
        }

        segment.indexEnd = indexSize;
        if (!damage.empty()) {
            for (const auto& line : damage)
                act(line + " (sealed segment left unchanged; verify reports it)");
        }
        if (cutAt) {
            truncateTo(segment.index.get(), *cutAt, files.indexPath);
            segment.indexChanged = true;
            segment.indexEnd = *cutAt;
            act(indexName + ": cut " + std::to_string(indexSize - *cutAt) +
                " bytes of index at offset " + std::to_string(*cutAt) + ": " + cutWhy);
        }
        if (!hasStart && damage.empty()) {
            // Nothing of the index survived: start it again so the segment stays well-formed.
            std::string start;
            encodeSegmentStart(start, files.worker, files.segment, now_, nextIdFloor());
            writeAt(segment.index.get(), start, 0, files.indexPath);
            segment.indexEnd = start.size();
            segment.indexChanged = true;
            lastType = RecordType::SegmentStart;
            act(indexName + ": wrote a new SegmentStart record (the index had none)");
        }
        segment.sealed = damage.empty() ? lastType == RecordType::SegmentSealed : sealed;
        if (damage.empty() && segment.dataSize > maxChunkEnd) {
            truncateTo(segment.data.get(), maxChunkEnd, files.dataPath);
            segment.dataChanged = true;
            act(baseName(files.dataPath) + ": cut " +
                std::to_string(segment.dataSize - maxChunkEnd) + " unindexed bytes at offset " +
                std::to_string(maxChunkEnd));
            segment.dataSize = maxChunkEnd;
        }
        return segment;
    }

    // The floor of a segment recovery writes. Workers and segments are read oldest first, so it
    // is above every id this worker recorded before the segment, as a daemon-written floor is.
    // The report includes it so that a second run reports the same.
    std::uint64_t nextIdFloor() {
        report_.maxIdFloor = std::max(report_.maxIdFloor, report_.maxConnectionId + 1);
        return report_.maxIdFloor;
    }

    void removeLoneData(const SegmentFiles& files) {
        struct stat st {};
        std::uint64_t size =
            ::fstatat(dirFd_, files.dataName.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0
                ? static_cast<std::uint64_t>(st.st_size)
                : 0;
        if (::unlinkat(dirFd_, files.dataName.c_str(), 0) != 0 && errno != ENOENT)
            throwErrno(errno, "cannot remove " + files.dataPath);
        dirChanged_ = true;
        act(baseName(files.dataPath) + ": removed a data file without an index (" +
            std::to_string(size) + " bytes never indexed)");
    }

    void append(RepairedSegment& segment, const std::string& records) {
        writeAt(segment.index.get(), records, segment.indexEnd, segment.files.indexPath);
        segment.indexEnd += records.size();
        segment.indexChanged = true;
    }

    // Seals over the index as it now is, chained to the worker's previous segment.
    void seal(RepairedSegment& segment) {
        ChainHasher hasher(key_);
        auto bytes = readAll(segment.index.get(), segment.indexEnd, segment.files.indexPath);
        hasher.update(bytes.data(), bytes.size());
        std::string record;
        segment.digest =
            encodeSegmentSealed(record, segment.dataSize, kSealClean, key_, prevDigest_, hasher);
        append(segment, record);
        segment.sealed = true;
        act(baseName(segment.files.indexPath) + ": sealed (" + std::to_string(segment.dataSize) +
            " data bytes)");
    }

    void sync(RepairedSegment& segment) {
        // Data first: an index record must never be durable before the bytes it points at.
        if (segment.dataChanged)
            checkSys(::fdatasync(segment.data.get()), "fdatasync " + segment.files.dataPath);
        if (segment.indexChanged)
            checkSys(::fdatasync(segment.index.get()), "fdatasync " + segment.files.indexPath);
    }

    // The worker's last segment is already sealed, and nothing may follow SegmentSealed: the
    // Truncated records go into a new segment of their own (empty data file).
    void truncateInNewSegment(unsigned worker, const std::set<std::uint64_t>& open) {
        std::uint64_t number = report_.lastSegment[worker] + 1;
        std::string prefix = dir_.back() == '/' ? dir_ : dir_ + "/";
        RepairedSegment segment;
        segment.files.worker = worker;
        segment.files.segment = number;
        segment.files.dataName = segmentBaseName(worker, number) + ".data";
        segment.files.indexName = segmentBaseName(worker, number) + ".index";
        segment.files.dataPath = prefix + segment.files.dataName;
        segment.files.indexPath = prefix + segment.files.indexName;
        segment.data =
            openInDirectoryOrThrow(dirFd_, dir_, segment.files.dataName, O_RDWR | O_CREAT | O_EXCL);
        segment.index = openInDirectoryOrThrow(dirFd_, dir_, segment.files.indexName,
                                               O_RDWR | O_CREAT | O_EXCL);
        dirChanged_ = true;
        report_.lastSegment[worker] = number;
        std::string records;
        encodeSegmentStart(records, worker, number, now_, nextIdFloor());
        for (auto id : open) encodeTruncated(records, id, now_);
        ChainHasher hasher(key_);
        hasher.update(records.data(), records.size());
        encodeSegmentSealed(records, 0, kSealClean, key_, prevDigest_, hasher);
        append(segment, records);
        segment.dataChanged = true;
        sync(segment);
        act(baseName(segment.files.indexPath) +
            ": created to record the truncated connections (the last segment was sealed)");
        reportTruncations(worker, open, baseName(segment.files.indexPath));
    }

    void reportTruncations(unsigned worker, const std::set<std::uint64_t>& open,
                           const std::string& indexName) {
        report_.truncatedConnections += open.size();
        std::size_t listed = 0;
        for (auto id : open) {
            if (listed++ == kTruncationLines) break;
            act(indexName + ": connection " + std::to_string(id) + " of worker " +
                std::to_string(worker) + " was open at the crash: marked truncated");
        }
        if (open.size() > kTruncationLines)
            act(indexName + ": " + std::to_string(open.size() - kTruncationLines) +
                " more connections of worker " + std::to_string(worker) + " marked truncated");
    }

    void syncDirectory() { checkSys(::fsync(dirFd_), "fsync " + dir_); }

    int dirFd_;
    std::string dir_;
    const ChainKey* key_;
    std::set<unsigned> liveChains_;
    RetentionLogRepair retention_;
    Digest prevDigest_{};  // the chain digest of the worker's previous segment
    // Where the worker's chain breaks (an unsealed old segment, or a seal that does not hold),
    // once found: nothing after it is sealed or repaired.
    std::string brokenAt_;
    std::int64_t now_;
    bool dirChanged_ = false;
    RecoveryReport report_;
};

}  // namespace

RecoveryReport recoverAuditDirectory(const AuditDirectory& dir, const ChainKey* key,
                                     const std::set<unsigned>& liveChains) {
    return Recovery(dir.fd(), dir.path(), key, liveChains).run();
}

RecoveryReport recoverAuditDirectory(const std::string& dir, const ChainKey* key) {
    makeDirectories(dir);
    UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd) throwErrno(errno, "cannot open audit directory " + dir);
    return Recovery(fd.get(), dir, key).run();
}

}  // namespace splicegate::audit
