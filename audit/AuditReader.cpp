#include "audit/AuditReader.h"

#include <fcntl.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <span>
#include <stdexcept>
#include <system_error>
#include <unordered_map>
#include <utility>

#include "audit/AuditDirectory.h"
#include "audit/Crc32c.h"
#include "audit/ReaderSupport.h"
#include "common/Error.h"

namespace splicegate::audit {
namespace {

constexpr std::uint8_t kMagicBytes[4] = {kRecordMagic & 0xff, (kRecordMagic >> 8) & 0xff,
                                         (kRecordMagic >> 16) & 0xff, (kRecordMagic >> 24) & 0xff};

UniqueFd openRead(const std::string& path) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd) throwErrno(errno, "cannot open " + path);
    return fd;
}

// The segment after which worker `worker` has no index file: its current (or last) segment.
std::map<unsigned, std::uint64_t> lastIndexedSegments(const std::vector<SegmentFiles>& segments) {
    std::map<unsigned, std::uint64_t> last;
    for (const auto& files : segments)
        if (files.hasIndex) last[files.worker] = std::max(last[files.worker], files.segment);
    return last;
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
                summary.via = record.via;
                summary.sni = record.sni;
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

// The files of the segments an extract still needs, opened as soon as its connection is found:
// a file stays readable once open, so retention deleting it meanwhile takes nothing from the copy.
class HeldSegments {
  public:
    // Opens both files of the segments of `worker` in `rest` (in order), at most kMaxHeld of them
    // (the rest are opened in turn); stops at the first that cannot be opened, which the caller
    // then meets in turn.
    void hold(int dirFd, unsigned worker, std::span<const SegmentFiles> rest) {
        for (const auto& files : rest) {
            if (files.worker != worker || held_.size() == kMaxHeld) return;
            if (!files.hasIndex) continue;
            Files opened;
            try {
                opened.index = openIn(dirFd, files, true);
                if (files.hasData) opened.data = openIn(dirFd, files, false);
            } catch (const std::system_error&) {
                return;
            }
            held_.emplace(files.segment, std::move(opened));
        }
    }

    // Moves the held files of `files`' segment out; false when it is not held.
    bool take(const SegmentFiles& files, UniqueFd& index, UniqueFd& data) {
        auto it = held_.find(files.segment);
        if (it == held_.end()) return false;
        index = std::move(it->second.index);
        data = std::move(it->second.data);
        held_.erase(it);
        return true;
    }

  private:
    static constexpr std::size_t kMaxHeld = 256;  // 512 descriptors
    struct Files {
        UniqueFd index;
        UniqueFd data;
    };
    std::map<std::uint64_t, Files> held_;
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
    HeldSegments held;
    for (std::size_t position = 0; position < segments.size(); ++position) {
        const auto& files = segments[position];
        if (done || (result.found && files.worker != worker)) break;
        if (!files.hasIndex) continue;
        auto found = [&] {
            result.found = true;
            worker = files.worker;
            held.hold(dirFd.get(), worker, std::span(segments).subspan(position + 1));
            output.emplace(openOutput());
        };
        UniqueFd indexFd;
        UniqueFd data;
        try {
            // Both files now: retention may delete them (index first) while this one is read.
            if (!held.take(files, indexFd, data)) {
                indexFd = openIn(dirFd.get(), files, true);
                if (files.hasData) data = openIn(dirFd.get(), files, false);
            }
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
                result.headDeleted = true;
                found();
            }
            if (record.type == RecordType::Open) {
                if (!result.found) found();
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

}  // namespace splicegate::audit
