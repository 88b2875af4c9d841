#include "audit/AuditReader.h"

#include <fcntl.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <stdexcept>
#include <system_error>
#include <unordered_map>
#include <utility>

#include "audit/AuditDirectory.h"
#include "audit/Crc32c.h"
#include "common/Error.h"

namespace splicegate::audit {
namespace {

constexpr std::uint8_t kMagicBytes[4] = {kRecordMagic & 0xff, (kRecordMagic >> 8) & 0xff,
                                         (kRecordMagic >> 16) & 0xff, (kRecordMagic >> 24) & 0xff};

std::string baseName(const std::string& path) {
    auto slash = path.rfind('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::uint64_t addSaturating(std::uint64_t a, std::uint64_t b) noexcept {
    return a + b < a ? UINT64_MAX : a + b;
}

std::uint64_t fileSize(int fd, const std::string& path) {
    struct stat st {};
    checkSys(::fstat(fd, &st), "fstat " + path);
    return static_cast<std::uint64_t>(st.st_size);
}

UniqueFd openRead(const std::string& path) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd) throwErrno(errno, "cannot open " + path);
    return fd;
}

UniqueFd openDirectory(const std::string& dir) {
    UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd) throwErrno(errno, "cannot open audit directory " + dir);
    return fd;
}

// A segment file, opened in the directory without following a symlink.
UniqueFd openIn(int dirFd, const SegmentFiles& files, bool index) {
    auto dir = files.indexPath.substr(0, files.indexPath.size() - files.indexName.size());
    return openInDirectoryOrThrow(dirFd, dir, index ? files.indexName : files.dataName, O_RDONLY);
}

// CRC-32C of `length` bytes at `offset` of `fd`; false when the file ends first.
bool payloadCrc(int fd, std::uint64_t offset, std::uint64_t length, std::uint32_t& crc,
                const std::string& what) {
    static thread_local std::vector<std::uint8_t> buffer(1 << 20);
    std::uint32_t value = 0;
    while (length > 0) {
        auto piece = static_cast<std::size_t>(std::min<std::uint64_t>(length, buffer.size()));
        ssize_t n = ::pread(fd, buffer.data(), piece, static_cast<off_t>(offset));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throwErrno(errno, "read " + what);
        if (n == 0) return false;
        value = crc32c(value, buffer.data(), static_cast<std::size_t>(n));
        offset += static_cast<std::uint64_t>(n);
        length -= static_cast<std::uint64_t>(n);
    }
    crc = value;
    return true;
}

std::string hex32(std::uint32_t value) {
    char text[16];
    std::snprintf(text, sizeof text, "0x%08x", value);
    return text;
}

// The segment after which worker `worker` has no index file: its current (or last) segment.
std::map<unsigned, std::uint64_t> lastIndexedSegments(const std::vector<SegmentFiles>& segments) {
    std::map<unsigned, std::uint64_t> last;
    for (const auto& files : segments)
        if (files.hasIndex) last[files.worker] = std::max(last[files.worker], files.segment);
    return last;
}

std::string chunkText(const Record& record) {
    return std::string("Chunk of connection ") + std::to_string(record.id) + " (" +
           directionName(record.direction) + ", " + std::to_string(record.length) +
           " bytes at data offset " + std::to_string(record.offset) + ")";
}

// Copies byte ranges of files into one output fd: copy_file_range when the output is a regular
// file, else sendfile, else pread/write; each method is dropped for good once the kernel refuses
// it.
class RangeCopier {
  public:
    explicit RangeCopier(int outFd) : out_(outFd) {
        struct stat st {};
        if (::fstat(outFd, &st) == 0 && S_ISREG(st.st_mode)) method_ = Method::CopyFileRange;
    }

    void copy(int inFd, std::uint64_t offset, std::uint64_t length, const std::string& what) {
        constexpr std::uint64_t kPiece = 64ull << 20;
        while (length > 0) {
            auto piece = static_cast<std::size_t>(std::min(length, kPiece));
            ssize_t n = step(inFd, offset, piece, what);
            if (n == 0)
                throw std::runtime_error(what + ": the file ends before offset " +
                                         std::to_string(offset + length));
            offset += static_cast<std::uint64_t>(n);
            length -= static_cast<std::uint64_t>(n);
        }
    }

  private:
    enum class Method { CopyFileRange, SendFile, ReadWrite };

    ssize_t step(int inFd, std::uint64_t offset, std::size_t piece, const std::string& what) {
        for (;;) {
            ssize_t n = -1;
            if (method_ == Method::CopyFileRange) {
                auto in = static_cast<loff_t>(offset);
                n = ::copy_file_range(inFd, &in, out_, nullptr, piece, 0);
                if (n < 0 && (errno == EXDEV || errno == EINVAL || errno == ENOSYS ||
                              errno == EOPNOTSUPP || errno == EBADF)) {
                    method_ = Method::SendFile;
                    continue;
                }
            } else if (method_ == Method::SendFile) {
                auto in = static_cast<off_t>(offset);
                n = ::sendfile(out_, inFd, &in, piece);
                if (n < 0 && (errno == EINVAL || errno == ENOSYS)) {
                    method_ = Method::ReadWrite;
                    continue;
                }
            } else {
                return readWrite(inFd, offset, piece, what);
            }
            if (n >= 0) return n;
            if (errno == EINTR) continue;
            throwErrno(errno, "copy from " + what);
        }
    }

    ssize_t readWrite(int inFd, std::uint64_t offset, std::size_t piece, const std::string& what) {
        if (buffer_.empty()) buffer_.resize(1 << 20);
        piece = std::min(piece, buffer_.size());
        ssize_t n = 0;
        do {
            n = ::pread(inFd, buffer_.data(), piece, static_cast<off_t>(offset));
        } while (n < 0 && errno == EINTR);
        if (n < 0) throwErrno(errno, "read " + what);
        std::size_t done = 0;
        while (done < static_cast<std::size_t>(n)) {
            ssize_t w = ::write(out_, buffer_.data() + done, static_cast<std::size_t>(n) - done);
            if (w < 0 && errno == EINTR) continue;
            if (w < 0) throwErrno(errno, "write of the extracted bytes");
            done += static_cast<std::size_t>(w);
        }
        return n;
    }

    int out_;
    Method method_ = Method::SendFile;
    std::vector<char> buffer_;
};

}  // namespace

// ---- IndexReader

IndexReader::IndexReader(const std::string& path, std::size_t bufferSize)
    : IndexReader(-1, path, bufferSize) {
    owned_ = openRead(path);
    fd_ = owned_.get();
}

IndexReader::IndexReader(int fd, std::string path, std::size_t bufferSize)
    : fd_(fd), path_(std::move(path)) {
    // Room for the largest record plus lookahead, so one fill() always completes a record.
    buffer_.resize(std::max<std::size_t>(bufferSize, 2 * (kMaxRecordSize + 1)));
}

std::size_t IndexReader::fill(std::size_t wanted) {
    if (length_ - pos_ >= wanted || eof_) return length_ - pos_;
    if (pos_ > 0) {
        std::memmove(buffer_.data(), buffer_.data() + pos_, length_ - pos_);
        bufferStart_ += pos_;
        length_ -= pos_;
        pos_ = 0;
    }
    while (length_ < wanted && length_ < buffer_.size()) {
        ssize_t n = ::pread(fd_, buffer_.data() + length_, buffer_.size() - length_,
                            static_cast<off_t>(bufferStart_ + length_));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throwErrno(errno, "read " + path_);
        if (n == 0) {
            eof_ = true;
            break;
        }
        length_ += static_cast<std::size_t>(n);
    }
    return length_ - pos_;
}

IndexReader::Status IndexReader::next(Record& record) {
    recordOffset_ = position();
    std::size_t available = fill(kRecordHeaderSize);
    if (available == 0) return Status::End;
    std::size_t consumed = 0;
    auto status = decodeRecord(buffer_.data() + pos_, available, record, consumed, problem_);
    if (status == DecodeStatus::Incomplete) {
        available = fill(kMaxRecordSize);
        status = decodeRecord(buffer_.data() + pos_, available, record, consumed, problem_);
    }
    if (status == DecodeStatus::Incomplete) {
        problem_ = "torn record at the end of the file (" + problem_ + ")";
        return Status::Torn;
    }
    if (status == DecodeStatus::Corrupt) return Status::Corrupt;
    recordData_ = buffer_.data() + pos_;
    recordSize_ = consumed;
    pos_ += consumed;
    goodEnd_ = position();
    return Status::Record;
}

bool IndexReader::resync() {
    if (fill(1) > 0) ++pos_;  // past the start of the bad record
    Record scratch;
    std::string ignored;
    for (;;) {
        std::size_t available = fill(kMaxRecordSize + 1);
        if (available < sizeof kMagicBytes) {
            pos_ = length_;
            return false;
        }
        auto* begin = buffer_.data() + pos_;
        auto* found = static_cast<const std::uint8_t*>(
            ::memmem(begin, available, kMagicBytes, sizeof kMagicBytes));
        if (found == nullptr) {
            // Keep the last 3 bytes: a magic may straddle the refill.
            pos_ = length_ - (sizeof kMagicBytes - 1);
            if (eof_) {
                pos_ = length_;
                return false;
            }
            continue;
        }
        pos_ = static_cast<std::size_t>(found - buffer_.data());
        available = fill(kMaxRecordSize);
        std::size_t consumed = 0;
        if (decodeRecord(buffer_.data() + pos_, available, scratch, consumed, ignored) ==
            DecodeStatus::Ok) {
            recordOffset_ = position();
            return true;
        }
        ++pos_;
    }
}

DeletedHeads::DeletedHeads(const std::vector<RetentionLogEntry>& deleted) {
    for (const auto& entry : deleted) {
        auto [it, inserted] = afterDeleted_.try_emplace(entry.worker, entry.last + 1);
        if (!inserted) it->second = std::min(it->second, entry.last + 1);
    }
}

void DeletedHeads::restartWorker(unsigned worker, const std::vector<RetentionLogEntry>& deleted) {
    afterDeleted_ = DeletedHeads(deleted).afterDeleted_;
    started_.erase(worker);
    floor_.erase(worker);
}

DeletedHeads DeletedHeads::fromDirectory(int dirFd, const std::string& dir, std::string& problem) {
    try {
        return DeletedHeads(repairRetentionLog(dirFd, dir, false).entries);
    } catch (const std::system_error& error) {
        problem = error.what();
        return DeletedHeads();
    }
}

DeletedHeads DeletedHeads::fromDirectory(const std::string& dir, std::string& problem) {
    try {
        UniqueFd dirFd = openDirectory(dir);
        return fromDirectory(dirFd.get(), dir, problem);
    } catch (const std::system_error& error) {
        problem = error.what();
        return DeletedHeads();
    }
}

void DeletedHeads::segmentStart(unsigned worker, std::uint64_t segment, std::uint64_t idFloor) {
    if (!started_.insert(worker).second) return;
    auto it = afterDeleted_.find(worker);
    if (it != afterDeleted_.end() && it->second <= segment) floor_[worker] = idFloor;
}

bool DeletedHeads::continues(unsigned worker, std::uint64_t id) const {
    auto it = floor_.find(worker);
    return it != floor_.end() && id < it->second;
}

ConnectionSummary ConnectionSummary::withHeadDeleted(std::uint64_t id, unsigned worker,
                                                     std::uint64_t segment) {
    ConnectionSummary summary;
    summary.id = id;
    summary.worker = worker;
    summary.segment = segment;
    summary.headDeleted = true;
    return summary;
}

std::string placeText(const std::string& file, std::uint64_t offset, const std::string& what) {
    return file + ":" + std::to_string(offset) + ": " + what;
}

const char* connectionStateName(ConnectionState state) noexcept {
    switch (state) {
        case ConnectionState::Open:
            return "open";
        case ConnectionState::Closed:
            return "closed";
        case ConnectionState::Truncated:
            return "truncated";
    }
    return "open";
}

// ---- list

namespace {

// Adds the connections of one index file to `result`.
void listSegment(int dirFd, const SegmentFiles& files, ListResult& result,
                 std::unordered_map<std::uint64_t, std::size_t>& byId, DeletedHeads& heads) {
    Record record;
    UniqueFd fd = openIn(dirFd, files, true);
    IndexReader reader(fd.get(), files.indexPath);
    bool first = true;
    for (bool more = true; more;) {
        switch (reader.next(record)) {
            case IndexReader::Status::Record:
                break;
            case IndexReader::Status::End:
            case IndexReader::Status::Torn:
                // A torn tail is a write in progress (or a crash not yet recovered): the
                // records before it are all there is. verify reports it.
                more = false;
                continue;
            case IndexReader::Status::Corrupt:
                result.problems.push_back(
                    placeText(files.indexPath, reader.recordOffset(), reader.problem()));
                more = reader.resync();
                first = false;
                continue;
        }
        if (first && record.type != RecordType::SegmentStart)
            result.problems.push_back(
                placeText(files.indexPath, 0, "the first record is not SegmentStart"));
        first = false;
        if (record.type == RecordType::SegmentStart)
            heads.segmentStart(files.worker, files.segment, record.idFloor);
        if (followsOpen(record.type) && byId.count(record.id) == 0 &&
            heads.continues(files.worker, record.id)) {
            byId.emplace(record.id, result.connections.size());
            result.connections.push_back(
                ConnectionSummary::withHeadDeleted(record.id, files.worker, files.segment));
        }
        switch (record.type) {
            case RecordType::Open: {
                if (byId.count(record.id) != 0) break;
                byId.emplace(record.id, result.connections.size());
                ConnectionSummary summary;
                summary.id = record.id;
                summary.worker = files.worker;
                summary.segment = files.segment;
                summary.route = record.route;
                summary.client = record.client;
                summary.upstream = record.upstream;
                summary.openedNs = record.timeNs;
                result.connections.push_back(std::move(summary));
                break;
            }
            case RecordType::Chunk: {
                auto it = byId.find(record.id);
                if (it == byId.end()) break;
                auto& summary = result.connections[it->second];
                if (summary.state != ConnectionState::Open) break;
                auto& bytes =
                    record.direction == kDirectionC2U ? summary.c2uBytes : summary.u2cBytes;
                bytes = addSaturating(bytes, record.length);
                break;
            }
            case RecordType::Close: {
                auto it = byId.find(record.id);
                if (it == byId.end()) break;
                auto& summary = result.connections[it->second];
                if (summary.state != ConnectionState::Open) break;
                summary.state = ConnectionState::Closed;
                summary.closedNs = record.timeNs;
                summary.reason = record.reason;
                if (summary.headDeleted) break;  // its counts include the deleted bytes
                summary.c2uBytes = record.c2uBytes;
                summary.u2cBytes = record.u2cBytes;
                break;
            }
            case RecordType::Truncated: {
                auto it = byId.find(record.id);
                if (it == byId.end()) break;
                auto& summary = result.connections[it->second];
                if (summary.state == ConnectionState::Open)
                    summary.state = ConnectionState::Truncated;
                break;
            }
            case RecordType::SegmentStart:
            case RecordType::SegmentSealed:
            case RecordType::SegmentsDeleted:
                break;
        }
    }
}

// Whether the retention log's `entries` record deleting the segment of `files`.
bool recordsDeletion(const std::vector<RetentionLogEntry>& entries, const SegmentFiles& files) {
    return std::any_of(entries.begin(), entries.end(), [&](const RetentionLogEntry& entry) {
        return entry.worker == files.worker && entry.first <= files.segment &&
               files.segment <= entry.last;
    });
}

bool deletedSinceListed(const std::system_error& error, int dirFd, const std::string& dir,
                        const SegmentFiles& files, std::vector<RetentionLogEntry>& entries) {
    if (error.code().value() != ENOENT) return false;
    try {
        entries = repairRetentionLog(dirFd, dir, false).entries;
    } catch (const std::system_error&) {
        return false;
    }
    return recordsDeletion(entries, files);
}

}  // namespace

bool deletedSinceListed(const std::system_error& error, const std::string& dir,
                        const SegmentFiles& files, std::vector<RetentionLogEntry>& entries) {
    if (error.code().value() != ENOENT) return false;
    try {
        UniqueFd dirFd = openDirectory(dir);
        return deletedSinceListed(error, dirFd.get(), dir, files, entries);
    } catch (const std::system_error&) {
        return false;
    }
}

ListResult listConnections(const std::string& dir) {
    UniqueFd dirFd = openDirectory(dir);
    auto segments = listSegments(dirFd.get(), dir);
    ListResult result;
    std::unordered_map<std::uint64_t, std::size_t> byId;
    std::string logProblem;
    auto heads = DeletedHeads::fromDirectory(dirFd.get(), dir, logProblem);
    if (!logProblem.empty()) result.problems.push_back(logProblem);
    for (const auto& files : segments) {
        if (files.unsafe)
            result.problems.push_back(placeText(
                files.indexPath, 0, "a segment file that is not a regular file (not followed)"));
        if (!files.hasIndex) continue;
        try {
            listSegment(dirFd.get(), files, result, byId, heads);
        } catch (const std::system_error& error) {
            std::vector<RetentionLogEntry> entries;
            if (deletedSinceListed(error, dirFd.get(), dir, files, entries)) {
                heads.restartWorker(files.worker, entries);
                continue;
            }
            // An unreadable file is one problem; the other segments are still listed.
            result.problems.push_back(placeText(files.indexPath, 0, error.what()));
        }
    }
    std::sort(result.connections.begin(), result.connections.end(),
              [](const auto& a, const auto& b) { return a.id < b.id; });
    return result;
}

// ---- extract

void copyFileRange(int inFd, std::uint64_t offset, std::uint64_t length, int outFd,
                   const std::string& what) {
    RangeCopier(outFd).copy(inFd, offset, length, what);
}

namespace {

// Coalesces adjacent ranges of one data file into one copy.
class PendingCopy {
  public:
    explicit PendingCopy(int outFd) : copier_(outFd) {}

    void add(int inFd, const std::string& path, std::uint64_t offset, std::uint64_t length) {
        if (length == 0) return;
        if (inFd == fd_ && offset == offset_ + length_ && length_ + length > length_) {
            length_ += length;
            return;
        }
        flush();
        fd_ = inFd;
        path_ = path;
        offset_ = offset;
        length_ = length;
    }

    void flush() {
        if (length_ > 0) copier_.copy(fd_, offset_, length_, path_);
        length_ = 0;
        fd_ = -1;
    }

  private:
    RangeCopier copier_;
    int fd_ = -1;
    std::string path_;
    std::uint64_t offset_ = 0;
    std::uint64_t length_ = 0;
};

}  // namespace

ExtractResult extractConnection(const std::string& dir, std::uint64_t id, std::uint8_t direction,
                                const std::function<int()>& openOutput) {
    return extractConnection(dir, id, direction, openOutput, ExtractOptions{});
}

ExtractResult extractConnection(const std::string& dir, std::uint64_t id, std::uint8_t direction,
                                const std::function<int()>& openOutput,
                                const ExtractOptions& options) {
    UniqueFd dirFd = openDirectory(dir);
    auto segments = listSegments(dirFd.get(), dir);
    auto last = lastIndexedSegments(segments);
    std::string logProblem;  // verify reports it; without the log no head counts as deleted
    auto heads = DeletedHeads::fromDirectory(dirFd.get(), dir, logProblem);
    ExtractResult result;
    unsigned worker = 0;
    std::optional<PendingCopy> output;
    Record record;
    bool done = false;
    std::string damage;  // damage seen before the Open, for the "not found" message
    // Copies what is pending (so the output holds every byte before the damage), then throws.
    auto fail = [&output](const std::string& message) {
        if (output) output->flush();
        throw std::runtime_error(message);
    };
    for (const auto& files : segments) {
        if (done || (result.found && files.worker != worker)) break;
        if (!files.hasIndex) continue;
        UniqueFd indexFd;
        UniqueFd data;
        try {
            indexFd = openIn(dirFd.get(), files, true);
            // Both files now: retention may delete them (index first) while this one is read.
            if (files.hasData) data = openIn(dirFd.get(), files, false);
        } catch (const std::system_error& error) {
            std::vector<RetentionLogEntry> entries;
            if (!deletedSinceListed(error, dirFd.get(), dir, files, entries)) throw;
            if (result.found)
                fail(placeText(files.indexPath, 0,
                               "retention deleted this segment while connection " +
                                   std::to_string(id) +
                                   " was being extracted, so its bytes from here on are not "
                                   "all left; extract it again for the bytes that are"));
            heads.restartWorker(files.worker, entries);
            continue;
        }
        IndexReader reader(indexFd.get(), files.indexPath);
        std::uint64_t dataSize = data ? fileSize(data.get(), files.dataPath) : 0;
        bool isLast = last[files.worker] == files.segment;
        while (!done) {
            auto status = reader.next(record);
            if (status == IndexReader::Status::End) break;
            if (status == IndexReader::Status::Torn) {
                // The last segment's tail may be a write in progress; elsewhere records are lost.
                if (result.found && !isLast)
                    fail(placeText(files.indexPath, reader.goodEnd(),
                                   reader.problem() + "; later chunks of connection " +
                                       std::to_string(id) + " may be missing"));
                break;
            }
            if (status == IndexReader::Status::Corrupt) {
                auto place = placeText(files.indexPath, reader.recordOffset(), reader.problem());
                if (result.found)
                    fail(place + "; chunks of connection " + std::to_string(id) +
                         " may be missing");
                if (damage.empty()) damage = place;
                if (!reader.resync()) break;
                continue;
            }
            if (record.type == RecordType::SegmentStart)
                heads.segmentStart(files.worker, files.segment, record.idFloor);
            if (record.id != id || record.type == RecordType::SegmentStart ||
                record.type == RecordType::SegmentSealed ||
                record.type == RecordType::SegmentsDeleted)
                continue;
            if (!result.found && followsOpen(record.type) && heads.continues(files.worker, id)) {
                result.found = true;
                result.headDeleted = true;
                worker = files.worker;
                output.emplace(openOutput());
            }
            if (record.type == RecordType::Open) {
                if (result.found) continue;
                result.found = true;
                worker = files.worker;
                output.emplace(openOutput());
            } else if (!result.found) {
                continue;  // a record before its Open: verify reports it
            } else if (record.type == RecordType::Chunk) {
                if (record.direction != direction) continue;
                if (!data)
                    fail(placeText(files.indexPath, reader.recordOffset(),
                                   chunkText(record) + ": the data file " +
                                       baseName(files.dataPath) + " is missing"));
                // A running daemon's segment grows while it is read: its data file as well.
                if (record.chunkEnd() > dataSize) dataSize = fileSize(data.get(), files.dataPath);
                if (record.chunkEnd() > dataSize)
                    fail(placeText(files.indexPath, reader.recordOffset(),
                                   chunkText(record) + " lies beyond the end of " +
                                       baseName(files.dataPath) + " (" + std::to_string(dataSize) +
                                       " bytes)"));
                std::uint32_t crc = 0;
                if (record.hasCrc &&
                    (!payloadCrc(data.get(), record.offset, record.length, crc, files.dataPath) ||
                     crc != record.crc)) {
                    auto what = placeText(
                        files.indexPath, reader.recordOffset(),
                        "payload of connection " + std::to_string(id) + " " +
                            directionName(direction) + " at stream offset " +
                            std::to_string(result.bytes) + " (" + std::to_string(record.length) +
                            " bytes at data offset " + std::to_string(record.offset) + " of " +
                            baseName(files.dataPath) + ") fails its CRC-32C (recorded " +
                            hex32(record.crc) + ", computed " + hex32(crc) + ")");
                    if (!options.force) fail(what + "; use --force to extract it anyway");
                    if (options.onDamage) options.onDamage(what);
                }
                output->add(data.get(), files.dataPath, record.offset, record.length);
                result.bytes += record.length;
                ++result.chunks;
            } else if (record.type == RecordType::Close) {
                result.state = ConnectionState::Closed;
                done = true;
            } else if (record.type == RecordType::Truncated) {
                result.state = ConnectionState::Truncated;
                done = true;
            }
        }
        if (output) output->flush();  // before `data` closes
    }
    if (!result.found && !damage.empty())
        throw std::runtime_error("no connection " + std::to_string(id) +
                                 " in the readable records; the index is damaged at " + damage);
    return result;
}

// ---- verify

namespace {

// The data-file byte ranges referenced so far in one segment, merged when adjacent: chunks arrive
// nearly in offset order, so this stays small however many chunks there are.
class CoveredRanges {
  public:
    // Adds [begin, end); on overlap returns false and sets the overlapping part.
    bool add(std::uint64_t begin, std::uint64_t end, std::uint64_t& overlapBegin,
             std::uint64_t& overlapEnd) {
        if (begin >= end) return true;
        auto next = ranges_.lower_bound(begin);  // first range starting at or after begin
        if (next != ranges_.begin()) {
            auto prev = std::prev(next);
            if (prev->second > begin) {
                overlapBegin = begin;
                overlapEnd = std::min(end, prev->second);
                return false;
            }
        }
        if (next != ranges_.end() && next->first < end) {
            overlapBegin = next->first;
            overlapEnd = std::min(end, next->second);
            return false;
        }
        // Merge with the neighbours this range touches.
        std::uint64_t newBegin = begin, newEnd = end;
        if (next != ranges_.begin()) {
            auto prev = std::prev(next);
            if (prev->second == begin) {
                newBegin = prev->first;
                ranges_.erase(prev);
            }
        }
        if (next != ranges_.end() && next->first == end) {
            newEnd = next->second;
            ranges_.erase(next);
        }
        ranges_.emplace(newBegin, newEnd);
        return true;
    }

  private:
    std::map<std::uint64_t, std::uint64_t> ranges_;  // begin -> end
};

struct ConnectionCheck {
    unsigned worker = 0;
    bool opened = false;
    bool continued = false;  // its head was deleted by retention (DeletedHeads)
    bool closed = false;
    bool truncated = false;
    std::uint64_t bytes[2] = {0, 0};
};

// What verify knows of one worker's chain while it walks the worker's segments.
struct WorkerChain {
    bool seen = false;          // a segment of this worker was read
    bool known = false;         // `digest` is the previous segment's seal digest
    std::uint64_t segment = 0;  // the previous segment's number
    std::string indexPath;      // and its index file
    Digest digest{};
};

std::string shortHex(const Digest& digest) {
    return hexText(digest.data(), 8) + "...";
}

class Verifier {
  public:
    Verifier(const std::string& dir, const std::function<void(const std::string&)>& onProblem,
             const VerifyOptions& options)
        : dir_(dir),
          onProblem_(onProblem),
          key_(options.key),
          beforeSegment_(options.beforeSegment) {}

    VerifySummary run() {
        UniqueFd dirFd = openDirectory(dir_);
        dirFd_ = dirFd.get();
        // The listing first, then the retention log: retention records a deletion before it
        // deletes, so the log read now names every segment missing from the listing.
        auto segments = listSegments(dirFd_, dir_);
        daemonRunning_ = checkAuditDirectory(dir_).holderPid.has_value();
        retentionLog(true);
        heads_ = DeletedHeads(deleted_);
        // A running daemon's current segments are sealed only when they roll or it stops, and
        // the seal of the one before may still be on its way: while it holds the directory,
        // those two being unsealed, or ending in a record being written, is not a problem.
        if (daemonRunning_)
            for (const auto& files : segments)
                liveSegment_[files.worker] = std::max(liveSegment_[files.worker], files.segment);
        std::size_t indexed = 0;
        for (const auto& files : segments) {
            if (beforeSegment_) beforeSegment_(files.worker, files.segment);
            ++summary_.segments;
            if (files.unsafe)
                report(files.indexPath, 0,
                       "a file with this segment's name is not a regular file (a symlink?); it "
                       "is not followed");
            if (!files.hasIndex) {
                if (files.hasData) report(files.dataPath, 0, "data file without an index file");
                continue;
            }
            ++indexed;
            try {
                segment(files);
            } catch (const std::system_error& error) {
                if (error.code().value() == ENOENT && deletedMeanwhile(files)) {
                    --summary_.segments;
                    continue;
                }
                // An unreadable file is one problem; the other segments are still checked.
                report(files.indexPath, 0, error.what());
                chains_[files.worker] =
                    WorkerChain{true, false, files.segment, files.indexPath, {}};
            }
        }
        if (indexed == 0) report(dir_, 0, "no audit log here (no segment index file)");
        summary_.connections = connections_.size();
        return summary_;
    }

  private:
    void report(const std::string& file, std::uint64_t offset, const std::string& what) {
        ++summary_.problems;
        onProblem_(placeText(file, offset, what));
    }

    // Says what is wrong with a chained record's key, or empty when it matches --key-file.
    std::string keyProblem(const Record& record) const {
        if (record.chainKind == kChainHmacSha256 && key_ == nullptr)
            return "sealed with an HMAC key (key id " +
                   hexText(record.keyId.data(), record.keyId.size()) +
                   "): verify it with --key-file";
        if (record.chainKind == kChainSha256 && key_ != nullptr)
            return "sealed without a key, but --key-file was given: whoever wrote it did not "
                   "have the key";
        if (key_ != nullptr && record.keyId != key_->id())
            return "sealed with another key (key id " +
                   hexText(record.keyId.data(), record.keyId.size()) + ", --key-file's is " +
                   hexText(key_->id().data(), key_->id().size()) + "): wrong key";
        return {};
    }

    // A listed segment's file is gone (opening it gave ENOENT). Retention deleted it while verify
    // ran if the retention log, read again, says so: then the worker's log now begins after it,
    // as if verify had started later, and what was learnt of the worker's open connections and
    // chain is let go. Otherwise the caller reports it.
    bool deletedMeanwhile(const SegmentFiles& files) {
        retentionLog(false);
        if (!recordsDeletion(deleted_, files)) return false;
        heads_.restartWorker(files.worker, deleted_);
        chains_.erase(files.worker);
        std::erase_if(connections_, [&](const auto& item) {
            const ConnectionCheck& check = item.second;
            return check.worker == files.worker && !check.closed && !check.truncated;
        });
        return true;
    }

    // The retention log: which segments retention deleted, each entry chained to the previous.
    // Its problems are reported on the first reading only.
    void retentionLog(bool reportProblems) {
        deleted_.clear();
        summary_.deletedByRetention = 0;
        std::string path = (dir_.back() == '/' ? dir_ : dir_ + "/") + kRetentionLogName;
        auto logProblem = [&](const std::string& file, std::uint64_t offset,
                              const std::string& what) {
            if (reportProblems) report(file, offset, what);
        };
        int fd = openInDirectory(dirFd_, kRetentionLogName, O_RDONLY);
        if (fd == -ENOENT) return;
        if (fd < 0) {
            logProblem(path, 0,
                       fd == -ELOOP ? std::string("is a symlink (not followed)") : errnoText(-fd));
            return;
        }
        UniqueFd owned(fd);
        IndexReader reader(fd, path);
        Record record;
        Digest previous{};
        for (;;) {
            auto status = reader.next(record);
            if (status == IndexReader::Status::End) return;
            // A running daemon's retention may be appending an entry as it is read.
            if (status == IndexReader::Status::Torn && daemonRunning_) return;
            if (status != IndexReader::Status::Record) {
                logProblem(
                    path,
                    status == IndexReader::Status::Torn ? reader.goodEnd() : reader.recordOffset(),
                    reader.problem());
                return;  // later entries cannot be trusted without the chain
            }
            auto offset = reader.recordOffset();
            if (record.type != RecordType::SegmentsDeleted) {
                logProblem(
                    path, offset,
                    std::string(recordTypeName(record.type)) + " record in the retention log");
                return;
            }
            if (auto problem = keyProblem(record); !problem.empty()) {
                logProblem(path, offset, "retention entry " + problem);
                return;
            }
            ChainHasher hasher(key_);
            hasher.update(reader.recordData() + kRecordHeaderSize,
                          reader.recordSize() - kRecordHeaderSize - Digest{}.size());
            if (hasher.finish() != record.entryMac || record.prevDigest != previous) {
                logProblem(path, offset,
                           "retention entry for worker " + std::to_string(record.worker) +
                               " segments " + std::to_string(record.firstSegment) + ".." +
                               std::to_string(record.lastSegment) +
                               " does not match its chain: the retention log was altered");
                return;
            }
            previous = record.entryMac;
            summary_.deletedByRetention += record.lastSegment - record.firstSegment + 1;
            deleted_.push_back(
                {record.worker, record.firstSegment, record.lastSegment, record.digest});
        }
    }

    // Whether the retention log records deleting segments up to one whose digest is `digest`,
    // below segment `before` of `worker`.
    bool deletedByRetention(unsigned worker, std::uint64_t before, const Digest& digest) const {
        return std::any_of(deleted_.begin(), deleted_.end(), [&](const RetentionLogEntry& entry) {
            return entry.worker == worker && entry.last < before && entry.lastDigest == digest;
        });
    }

    bool isLive(const SegmentFiles& files) const {
        auto it = liveSegment_.find(files.worker);
        return it != liveSegment_.end() && files.segment + 1 >= it->second;
    }

    void checkLink(const SegmentFiles& files, std::uint64_t offset, const Record& seal) {
        auto& chain = chains_[files.worker];
        bool linked = false;
        std::string expected;
        if (chain.seen && chain.known) {
            linked = seal.prevDigest == chain.digest;
            expected = "the previous segment " + baseName(chain.indexPath) + " ends with " +
                       shortHex(chain.digest);
        } else if (chain.seen) {
            return;  // the previous segment is damaged, unsealed or older than the chain
        } else {
            linked = seal.prevDigest == Digest{};
            expected = "there is no earlier segment of worker " + std::to_string(files.worker);
        }
        if (linked || deletedByRetention(files.worker, files.segment, seal.prevDigest)) return;
        report(files.indexPath, offset,
               "hash chain broken before this segment: its seal names predecessor digest " +
                   shortHex(seal.prevDigest) + ", but " + expected +
                   " and the retention log records no such deletion (a segment was removed, "
                   "replaced or reordered)");
    }

    void segment(const SegmentFiles& files) {
        const std::string& index = files.indexPath;
        std::uint64_t dataSize = 0;
        UniqueFd data;
        if (files.hasData) {
            data = openIn(dirFd_, files, false);
            dataSize = fileSize(data.get(), files.dataPath);
        } else {
            report(index, 0, "the data file " + baseName(files.dataPath) + " is missing");
        }
        UniqueFd indexFd = openIn(dirFd_, files, true);
        IndexReader reader(indexFd.get(), index);
        CoveredRanges covered;
        Record record;
        bool first = true;
        bool sealed = false;
        bool damaged = false;
        std::uint32_t version = 0;
        // Both chain kinds are computed: which one applies is known only at the seal.
        ChainHasher plain(nullptr);
        std::optional<ChainHasher> keyed;
        if (key_ != nullptr) keyed.emplace(key_);
        auto& chain = chains_[files.worker];
        auto finishChain = [&](bool known, const Digest& digest) {
            chain = WorkerChain{true, known, files.segment, index, digest};
        };
        for (;;) {
            auto status = reader.next(record);
            if (status == IndexReader::Status::End) {
                if (first) report(index, 0, "empty index file (no SegmentStart record)");
                if (!sealed && !first && !damaged && version >= kFirstChainedVersion &&
                    !isLive(files))
                    report(index, reader.goodEnd(),
                           "the segment is not sealed: its records are not covered by the hash "
                           "chain (the running daemon's current segment, or a crash not yet "
                           "recovered)");
                if (!sealed) finishChain(false, {});
                return;
            }
            if (status == IndexReader::Status::Torn) {
                // A running daemon's segment: a record being written as it was read.
                if (!isLive(files)) report(index, reader.goodEnd(), reader.problem());
                if (!sealed) finishChain(false, {});
                return;
            }
            if (status == IndexReader::Status::Corrupt) {
                auto offset = reader.recordOffset();
                auto problem = reader.problem();
                bool more = reader.resync();
                problem += more ? " (" + std::to_string(reader.position() - offset) +
                                      " bytes skipped to the next valid record)"
                                : " (no valid record follows)";
                report(index, offset, problem);
                first = false;
                damaged = true;
                if (!more) {
                    finishChain(false, {});
                    return;
                }
                continue;
            }
            ++summary_.records;
            auto offset = reader.recordOffset();
            if (first && record.type != RecordType::SegmentStart)
                report(index, offset,
                       std::string("the first record is ") + recordTypeName(record.type) +
                           ", not SegmentStart");
            if (sealed)
                report(index, offset,
                       std::string(recordTypeName(record.type)) + " record after SegmentSealed");
            if (record.type != RecordType::SegmentSealed) {
                plain.update(reader.recordData(), reader.recordSize());
                if (keyed) keyed->update(reader.recordData(), reader.recordSize());
            }
            switch (record.type) {
                case RecordType::SegmentStart:
                    if (!first) {
                        report(index, offset, "SegmentStart record that is not the first record");
                    } else if (record.worker != files.worker || record.segment != files.segment) {
                        report(index, offset,
                               "SegmentStart names worker " + std::to_string(record.worker) +
                                   " segment " + std::to_string(record.segment) +
                                   " but the file name says worker " +
                                   std::to_string(files.worker) + " segment " +
                                   std::to_string(files.segment) +
                                   " (a segment file was renamed or moved)");
                        damaged = true;
                    } else {
                        version = record.version;
                        heads_.segmentStart(files.worker, files.segment, record.idFloor);
                    }
                    break;
                case RecordType::SegmentSealed:
                    if (!sealed)
                        seal(files, offset, record, reader, damaged, plain, keyed, finishChain);
                    sealed = true;
                    break;
                case RecordType::SegmentsDeleted:
                    report(index, offset, "SegmentsDeleted record in a segment index");
                    break;
                case RecordType::Open:
                    open(files, offset, record);
                    break;
                case RecordType::Chunk:
                    chunk(files, offset, record, dataSize, covered, data.get());
                    break;
                case RecordType::Close:
                case RecordType::Truncated:
                    end(files, offset, record);
                    break;
            }
            first = false;
        }
    }

    template <typename Finish>
    void seal(const SegmentFiles& files, std::uint64_t offset, const Record& record,
              const IndexReader& reader, bool damaged, ChainHasher& plain,
              std::optional<ChainHasher>& keyed, Finish& finishChain) {
        if (!record.chained) {
            finishChain(true, Digest{});  // an old segment: a later chain starts from zero
            return;
        }
        ++summary_.sealedSegments;
        const std::uint8_t* body = reader.recordData() + kRecordHeaderSize;
        if (auto problem = keyProblem(record); !problem.empty()) {
            report(files.indexPath, offset, "segment " + problem);
            finishChain(true, record.digest);
            return;
        }
        ChainHasher& hasher = record.chainKind == kChainHmacSha256 ? *keyed : plain;
        hasher.update(body, kSealDigestedBodyBytes);
        if (!damaged && hasher.finish() != record.digest)
            report(files.indexPath, offset,
                   "the seal's digest does not match the segment's records: a record was "
                   "altered, removed, inserted or reordered");
        checkLink(files, offset, record);
        finishChain(true, record.digest);
    }

    void open(const SegmentFiles& files, std::uint64_t offset, const Record& record) {
        auto& check = connections_[record.id];
        if (check.opened) {
            report(files.indexPath, offset,
                   "second Open record for connection " + std::to_string(record.id));
            return;
        }
        if (check.closed || check.truncated || check.bytes[0] + check.bytes[1] > 0) {
            // Records of this id came before its Open (already reported).
            check = ConnectionCheck{};
        }
        check.opened = true;
        check.worker = files.worker;
    }

    // Checks that `record` (Chunk, Close, Truncated) follows its connection's Open in the same
    // worker and precedes its end. Returns the connection's state, or nullptr when the problem
    // was reported.
    ConnectionCheck* follows(const SegmentFiles& files, std::uint64_t offset,
                             const Record& record) {
        auto [it, inserted] = connections_.try_emplace(record.id);
        auto& check = it->second;
        std::string what = std::string(recordTypeName(record.type)) + " record for connection " +
                           std::to_string(record.id);
        if (!check.opened && inserted && heads_.continues(files.worker, record.id)) {
            check.opened = check.continued = true;
            check.worker = files.worker;
            ++summary_.headsDeleted;
        }
        if (!check.opened) {
            // One report per connection: its later records would only repeat it.
            if (inserted) report(files.indexPath, offset, what + " without an earlier Open record");
            check.closed = true;
            return nullptr;
        }
        if (check.worker != files.worker) {
            report(files.indexPath, offset,
                   what + " in worker " + std::to_string(files.worker) +
                       "'s log, but it was opened by worker " + std::to_string(check.worker));
            return nullptr;
        }
        if (check.closed || check.truncated) {
            report(files.indexPath, offset,
                   what + " after its " + (check.closed ? "Close" : "Truncated") + " record");
            return nullptr;
        }
        return &check;
    }

    void chunk(const SegmentFiles& files, std::uint64_t offset, const Record& record,
               std::uint64_t& dataSize, CoveredRanges& covered, int dataFd) {
        summary_.chunkBytes = addSaturating(summary_.chunkBytes, record.length);
        // A running daemon's segment grows while it is read: its data file as well as its index.
        if (files.hasData && record.chunkEnd() > dataSize)
            dataSize = fileSize(dataFd, files.dataPath);
        bool inside = files.hasData && record.chunkEnd() <= dataSize;
        if (files.hasData && !inside)
            report(files.indexPath, offset,
                   chunkText(record) + " lies beyond the end of " + baseName(files.dataPath) +
                       " (" + std::to_string(dataSize) + " bytes)");
        if (!record.hasCrc) {
            ++summary_.uncheckedChunks;
        } else if (inside) {
            std::uint32_t crc = 0;
            payloadCrc(dataFd, record.offset, record.length, crc, files.dataPath);
            summary_.checkedPayloadBytes += record.length;
            if (crc != record.crc) {
                auto it = connections_.find(record.id);
                std::uint64_t streamOffset =
                    it == connections_.end() ? 0 : it->second.bytes[record.direction];
                report(files.indexPath, offset,
                       "payload of connection " + std::to_string(record.id) + " " +
                           directionName(record.direction) + " at stream offset " +
                           std::to_string(streamOffset) + " (" + std::to_string(record.length) +
                           " bytes at data offset " + std::to_string(record.offset) + " of " +
                           baseName(files.dataPath) + ") fails its CRC-32C (recorded " +
                           hex32(record.crc) + ", computed " + hex32(crc) + ")");
            }
        }
        std::uint64_t overlapBegin = 0, overlapEnd = 0;
        if (!covered.add(record.offset, record.chunkEnd(), overlapBegin, overlapEnd))
            report(files.indexPath, offset,
                   chunkText(record) + " overlaps data bytes " + std::to_string(overlapBegin) +
                       ".." + std::to_string(overlapEnd) + " of an earlier chunk");
        if (auto* check = follows(files, offset, record))
            check->bytes[record.direction] =
                addSaturating(check->bytes[record.direction], record.length);
    }

    void end(const SegmentFiles& files, std::uint64_t offset, const Record& record) {
        auto* check = follows(files, offset, record);
        if (check == nullptr) return;
        if (record.type == RecordType::Truncated) {
            check->truncated = true;
            return;
        }
        check->closed = true;
        // Where the head was deleted the Close still counts every byte: at least those left.
        bool counted = check->continued ? record.c2uBytes >= check->bytes[kDirectionC2U] &&
                                              record.u2cBytes >= check->bytes[kDirectionU2C]
                                        : record.c2uBytes == check->bytes[kDirectionC2U] &&
                                              record.u2cBytes == check->bytes[kDirectionU2C];
        if (!counted)
            report(files.indexPath, offset,
                   "Close record of connection " + std::to_string(record.id) + " counts c2u " +
                       std::to_string(record.c2uBytes) + " / u2c " +
                       std::to_string(record.u2cBytes) + " bytes, but its chunks hold c2u " +
                       std::to_string(check->bytes[kDirectionC2U]) + " / u2c " +
                       std::to_string(check->bytes[kDirectionU2C]));
    }

    const std::string& dir_;
    const std::function<void(const std::string&)>& onProblem_;
    const ChainKey* key_;
    std::function<void(unsigned, std::uint64_t)> beforeSegment_;
    int dirFd_ = -1;
    bool daemonRunning_ = false;  // a splicegate process holds the directory
    std::map<unsigned, std::uint64_t>
        liveSegment_;  // worker -> its newest segment (daemon running)
    VerifySummary summary_;
    std::unordered_map<std::uint64_t, ConnectionCheck> connections_;
    std::map<unsigned, WorkerChain> chains_;
    std::vector<RetentionLogEntry> deleted_;  // the retention log's entries that verified
    DeletedHeads heads_;
};

}  // namespace

VerifySummary verifyDirectory(const std::string& dir,
                              const std::function<void(const std::string&)>& onProblem,
                              const VerifyOptions& options) {
    return Verifier(dir, onProblem, options).run();
}

VerifySummary verifyDirectory(const std::string& dir,
                              const std::function<void(const std::string&)>& onProblem,
                              const ChainKey* key) {
    return verifyDirectory(dir, onProblem, VerifyOptions{key, {}});
}

std::vector<std::string> verifyDirectory(const std::string& dir) {
    std::vector<std::string> problems;
    verifyDirectory(dir, [&](const std::string& line) { problems.push_back(line); });
    return problems;
}

}  // namespace splicegate::audit
