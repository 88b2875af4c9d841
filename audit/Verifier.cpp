// `splicegate-audit verify` (FORMAT.md "verify"): every record, payload checksum, hash-chain
// link, retention log entry and connection's bookkeeping, in one pass over the directory, also
// while the daemon writes it.
#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <unordered_map>
#include <vector>

#include "audit/AuditDirectory.h"
#include "audit/AuditReader.h"
#include "audit/ReaderSupport.h"
#include "audit/SealChain.h"
#include "common/Error.h"

namespace splicegate::audit {

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

// How a chained seal or retention entry was made: without a key, or with the key of `id`.
struct Keying {
    std::uint8_t kind = kChainSha256;
    KeyId id{};
    bool operator==(const Keying&) const = default;
};

std::string keyingText(const Keying& keying) {
    return keying.kind == kChainHmacSha256 ? "with key id " + hexText(keying.id.data(), keying.id.size())
                                           : std::string("without a key");
}

// Where a chain's first chained seal (or retention entry) is, and how it was made.
struct FirstKeying {
    Keying keying;
    std::string path;
    std::uint64_t offset = 0;
};

// What verify knows of one worker's chain while it walks the worker's segments.
struct WorkerChain {
    bool seen = false;          // a segment of this worker was read
    bool known = false;         // `digest` is the previous segment's seal digest
    std::uint64_t segment = 0;  // the previous segment's number
    std::string indexPath;      // and its index file
    Digest digest{};
    // Of the whole chain so far (kept from segment to segment):
    std::optional<FirstKeying> first;  // its first chained seal
    std::optional<Keying> last;        // its newest chained seal's keying
    std::string lastPath;              // and that seal's index file
};

std::string shortHex(const Digest& digest) {
    return hexText(digest.data(), 8) + "...";
}

std::string fullHex(const Digest& digest) {
    return hexText(digest.data(), digest.size());
}

class Verifier {
  public:
    Verifier(const std::string& dir, const std::function<void(const std::string&)>& onProblem,
             const VerifyOptions& options)
        : dir_(dir),
          onProblem_(onProblem),
          key_(options.key),
          beforeSegment_(options.beforeSegment),
          expectedHeads_(options.expectedHeads),
          onNote_(options.onNote),
          onSeal_(options.onSeal),
          knownDeletions_(options.knownDeletions),
          nextSegment_(options.nextSegment) {}

    VerifySummary run() {
        UniqueFd dirFd = openDirectory(dir_);
        dirFd_ = dirFd.get();
        // The listing first, then the retention log: retention records a deletion before it
        // deletes, so the log read now names every segment missing from the listing.
        auto segments = nextSegment_ ? std::vector<SegmentFiles>{} : listSegments(dirFd_, dir_);
        // Only the daemon can hold the lock that makes the newest segments live (a write lock,
        // AuditDirectory.h): a reader of the log cannot make verify look away from them.
        summary_.daemonPid = checkAuditDirectory(dir_).holderPid;
        daemonRunning_ = summary_.daemonPid.has_value();
        retentionLog(true);
        heads_ = DeletedHeads(deleted_);
        // A running daemon's current segments are sealed only when they roll or it stops, and
        // the seal of the one before may still be on its way: while it holds the directory,
        // those two being unsealed, or ending in a record being written, is not a problem.
        if (daemonRunning_)
            for (const auto& files : segments)
                liveSegment_[files.worker] = std::max(liveSegment_[files.worker], files.segment);
        std::size_t indexed = 0;
        if (nextSegment_) {
            std::vector<RetentionLogEntry> learnt;
            while (auto files = nextSegment_(learnt)) {
                learnDeletions(learnt);
                visit(*files, indexed);
            }
        } else {
            for (const auto& files : segments) visit(files, indexed);
        }
        if (indexed == 0) report(dir_, 0, "no audit log here (no segment index file)");
        if (key_ == nullptr) keyingAcrossChains();
        expectedHeads();
        if (summary_.keyId && key_ == nullptr)
            note(dir_ + ": the log is keyed (HMAC-SHA256, key id " +
                 hexText(summary_.keyId->data(), summary_.keyId->size()) +
                 "); without --key-file only its unkeyed parts were checked (records, CRCs, "
                 "payloads, and that every seal names its predecessor's digest), not the " +
                 std::to_string(summary_.uncheckedKeyedSeals) + " keyed digests");
        for (const auto& [worker, head] : chainHeads_) summary_.heads.push_back(head);
        summary_.connections = connections_.size();
        return summary_;
    }

  private:
    // One segment, listed or supplied, in (worker, segment) order.
    void visit(const SegmentFiles& files, std::size_t& indexed) {
        if (beforeSegment_) beforeSegment_(files.worker, files.segment);
        ++summary_.segments;
        if (files.unsafe)
            report(files.indexPath, 0,
                   "a file with this segment's name is not a regular file (a symlink?); it "
                   "is not followed");
        if (!files.hasIndex) {
            if (files.hasData && dataAloneExpected(files))
                --summary_.segments;  // being created or deleted: not a segment yet or still
            else if (files.hasData)
                report(files.dataPath, 0, "data file without an index file");
            return;
        }
        ++indexed;
        try {
            segment(files);
        } catch (const std::system_error& error) {
            if (error.code().value() == ENOENT && deletedMeanwhile(files)) {
                --summary_.segments;
                return;
            }
            // An unreadable file is one problem; the other segments are still checked.
            report(files.indexPath, 0, error.what());
            auto& chain = chains_[files.worker];
            chain.seen = true;
            chain.known = false;
            chain.segment = files.segment;
            chain.indexPath = files.indexPath;
        }
    }

    // Deletions a segment source learnt (VerifyOptions::nextSegment), before the first segment
    // of their worker: known from now on, as the retention log's are.
    void learnDeletions(std::vector<RetentionLogEntry>& learnt) {
        for (const auto& entry : learnt) {
            knownDeletions_.push_back(entry);
            deleted_.push_back(entry);
            heads_.restartWorker(entry.worker, deleted_);
        }
        learnt.clear();
    }

    void report(const std::string& file, std::uint64_t offset, const std::string& what) {
        ++summary_.problems;
        onProblem_(placeText(file, offset, what));
    }

    void note(const std::string& line) const {
        if (onNote_) onNote_(line);
    }

    // Without --key-file a keyed seal's digest cannot be recomputed, only its link: the log is
    // then reported as keyed once (run()), and its first key id kept.
    void uncheckedKeyed(const Record& record) {
        ++summary_.uncheckedKeyedSeals;
        if (!summary_.keyId) summary_.keyId = record.keyId;
    }

    // Says what is wrong with a chained record's key, or empty when it matches --key-file (or,
    // without --key-file, always empty: how the log was keyed is checked by keyingChange).
    std::string keyProblem(const Record& record) const {
        if (key_ == nullptr) return {};
        if (record.chainKind == kChainSha256)
            return "sealed without a key, but --key-file was given: whoever wrote it did not "
                   "have the key";
        if (record.keyId != key_->id())
            return "sealed with another key (key id " +
                   hexText(record.keyId.data(), record.keyId.size()) + ", --key-file's is " +
                   hexText(key_->id().data(), key_->id().size()) + "): wrong key";
        return {};
    }

    // A data file stands alone for a moment twice in a segment's life: a writer creates it before
    // the index, and retention unlinks the index before it (a deletion it recorded first).
    bool dataAloneExpected(const SegmentFiles& files) {
        if (recordsDeletion(deleted_, files)) return true;
        auto live = liveSegment_.find(files.worker);
        return daemonRunning_ && live != liveSegment_.end() && files.segment >= live->second &&
               passesAsLive(files, files.dataPath);
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
        deleted_ = knownDeletions_;
        retentionKeying_.reset();
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
            if (status == IndexReader::Status::Torn && daemonRunning_) {
                if (reportProblems)
                    note(path + ": entry being appended by the running daemon (pid " +
                         std::to_string(*summary_.daemonPid) + "), not checked");
                return;
            }
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
            Keying keying{record.chainKind, record.keyId};
            if (key_ == nullptr && retentionKeying_ && retentionKeying_->keying != keying) {
                logProblem(path, offset,
                           "retention entry for worker " + std::to_string(record.worker) +
                               " made " + keyingText(keying) + ", but the log's first entry was " +
                               keyingText(retentionKeying_->keying) +
                               ": entries of one daemon share its key, so this one was forged");
                return;
            }
            if (!retentionKeying_) retentionKeying_ = FirstKeying{keying, path, offset};
            // Without the key a keyed entry's mac cannot be recomputed; that it names the
            // previous entry's can still be checked.
            bool checkable = record.chainKind == kChainSha256 || key_ != nullptr;
            bool macOk = true;
            if (checkable) {
                ChainHasher hasher(key_);
                hasher.update(reader.recordData() + kRecordHeaderSize,
                              reader.recordSize() - kRecordHeaderSize - Digest{}.size());
                macOk = hasher.finish() == record.entryMac;
            } else if (reportProblems) {
                uncheckedKeyed(record);
            }
            if (!macOk || record.prevDigest != previous) {
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

    // Whether `path`, a file of `files`, may be incomplete as one of the running daemon's live
    // segments; if so it is named (once), so that nothing verify let pass goes unsaid.
    bool passesAsLive(const SegmentFiles& files, const std::string& path) {
        if (!isLive(files)) return false;
        if (liveNoted_.insert(path).second) {
            ++summary_.liveSegments;
            note(path + ": live segment of the running daemon (pid " +
                 std::to_string(*summary_.daemonPid) + "), not checked to its end");
        }
        return true;
    }

    // Without --key-file: a chained seal made otherwise than the worker's previous one. One
    // daemon seals with one key (or none), so a change within a chain means that someone
    // re-sealed segments, with a key of their own or none.
    void keyingChange(const SegmentFiles& files, std::uint64_t offset, WorkerChain& chain,
                      const Keying& keying) {
        if (!chain.first) chain.first = FirstKeying{keying, files.indexPath, offset};
        if (chain.last && *chain.last != keying)
            report(files.indexPath, offset,
                   "segment sealed " + keyingText(keying) + ", but the previous sealed segment " +
                       baseName(chain.lastPath) + " of worker " + std::to_string(files.worker) +
                       " is sealed " + keyingText(*chain.last) +
                       ": one chain is sealed with one key, so these segments were re-sealed by "
                       "someone else (--key-file tells which)");
        chain.last = keying;
        chain.lastPath = files.indexPath;
    }

    // Without --key-file, across chains: all workers (and the retention log) of a keyed log are
    // sealed with the daemon's one key. A chain that begins otherwise was re-sealed whole.
    void keyingAcrossChains() {
        if (!summary_.keyId) return;
        Keying logKeying{kChainHmacSha256, *summary_.keyId};
        auto check = [&](const FirstKeying& first, const std::string& what) {
            if (first.keying == logKeying) return;
            report(first.path, first.offset,
                   what + " is sealed " + keyingText(first.keying) +
                       ", but the log is keyed (key id " +
                       hexText(summary_.keyId->data(), summary_.keyId->size()) +
                       ") and a daemon seals every chain with its one key: this chain was "
                       "re-sealed by someone else");
        };
        for (const auto& [worker, chain] : chains_)
            if (chain.first) check(*chain.first, "worker " + std::to_string(worker) + "'s chain");
        if (retentionKeying_) check(*retentionKeying_, "the retention log");
    }

    // --expect-head: each digest must be a seal of some chain, or of a segment the retention
    // log records as deleted; a chain that no longer reaches it lost its newest segments.
    void expectedHeads() {
        for (const auto& expected : expectedHeads_) {
            auto seen = sealsSeen_.find(expected);
            if (seen != sealsSeen_.end()) {
                if (!seen->second.checked)
                    note(seen->second.path + ": --expect-head " + fullHex(expected) +
                         " is this segment's seal, whose digest was not checked (keyed, and no "
                         "--key-file)");
                continue;
            }
            bool deleted =
                std::any_of(deleted_.begin(), deleted_.end(), [&](const RetentionLogEntry& entry) {
                    return entry.lastDigest == expected;
                });
            if (deleted) continue;
            std::string ends;
            for (const auto& [worker, head] : chainHeads_)
                ends += (ends.empty() ? "" : ", ") + baseName(head.indexPath) + " digest=" +
                        shortHex(head.digest);
            report(dir_, 0,
                   "--expect-head " + fullHex(expected) +
                       ": no worker's chain has a seal with this digest (the chains end at " +
                       (ends.empty() ? std::string("no chained seal") : ends) +
                       "): the segments up to that seal were deleted or replaced");
        }
    }

    // A seal without a chain (format version 2). Logs are upgraded, never downgraded: only a
    // segment written in the old format, before any chained one of its worker, may have one.
    std::string olderSealProblem(unsigned worker, std::uint32_t version,
                                 const WorkerChain& chain) const {
        const std::string what = "sealed in an older format (a version-2 seal, without hash chain)";
        if (key_ != nullptr)
            return what +
                   ", but --key-file was given: with a key every segment must be sealed with it, "
                   "or anyone could rewrite this segment and seal it again";
        if (version >= kFirstChainedVersion)
            return what + " although it is a version-" + std::to_string(version) +
                   " segment, which writers and recovery seal into the chain: its seal was "
                   "replaced";
        if (chain.first)
            return what + " after chained segments of worker " + std::to_string(worker) +
                   " (from " +
                   baseName(chain.first->path) +
                   "): a log is upgraded, never downgraded, so this segment was sealed again";
        return {};
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
            chain.seen = true;
            chain.known = known;
            chain.segment = files.segment;
            chain.indexPath = index;
            chain.digest = digest;
        };
        for (;;) {
            auto status = reader.next(record);
            if (status == IndexReader::Status::End) {
                // A running daemon creates its next segment ahead, and writes a new segment's
                // SegmentStart with its first records. With a key an old segment must be sealed
                // too: unsealed, anyone could have rewritten it.
                if (first && !passesAsLive(files, index))
                    report(index, 0, "empty index file (no SegmentStart record)");
                if (!sealed && !first && !damaged &&
                    (version >= kFirstChainedVersion || key_ != nullptr) &&
                    !passesAsLive(files, index))
                    report(index, reader.goodEnd(),
                           "the segment is not sealed: its records are not covered by the hash "
                           "chain (the running daemon's current segment, or a crash not yet "
                           "recovered)");
                if (!sealed) finishChain(false, {});
                return;
            }
            if (status == IndexReader::Status::Torn) {
                // A running daemon's segment: a record being written as it was read.
                if (!passesAsLive(files, index)) report(index, reader.goodEnd(), reader.problem());
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
                        seal(files, offset, record, reader, damaged, version, plain, keyed,
                             finishChain);
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
              const IndexReader& reader, bool damaged, std::uint32_t version, ChainHasher& plain,
              std::optional<ChainHasher>& keyed, Finish& finishChain) {
        auto& chain = chains_[files.worker];
        if (!record.chained) {
            if (auto problem = olderSealProblem(files.worker, version, chain); !problem.empty())
                report(files.indexPath, offset, "segment " + problem);
            finishChain(true, Digest{});  // an old segment: a later chain starts from zero
            return;
        }
        ++summary_.sealedSegments;
        const std::uint8_t* body = reader.recordData() + kRecordHeaderSize;
        WorkerHead head{files.worker, files.segment, files.indexPath, record.digest, false};
        if (auto problem = keyProblem(record); !problem.empty()) {
            report(files.indexPath, offset, "segment " + problem);
            chainHeads_[files.worker] = head;
            if (onSeal_) onSeal_(head);
            finishChain(true, record.digest);
            return;
        }
        if (key_ == nullptr)
            keyingChange(files, offset, chain, Keying{record.chainKind, record.keyId});
        if (record.chainKind == kChainHmacSha256 && key_ == nullptr) {
            uncheckedKeyed(record);
        } else {
            ChainHasher& hasher = record.chainKind == kChainHmacSha256 ? *keyed : plain;
            hasher.update(body, kSealDigestedBodyBytes);
            bool matches = hasher.finish() == record.digest;
            if (!damaged && !matches)
                report(files.indexPath, offset,
                       "the seal's digest does not match the segment's records: a record was "
                       "altered, removed, inserted or reordered");
            head.checked = !damaged && matches;
        }
        checkLink(files, offset, record);
        chainHeads_[files.worker] = head;
        if (onSeal_) onSeal_(head);
        sealsSeen_.emplace(record.digest, SealSeen{files.indexPath, head.checked});
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
    const std::vector<Digest>& expectedHeads_;
    std::function<void(const std::string&)> onNote_;
    std::function<void(const WorkerHead&)> onSeal_;
    std::vector<RetentionLogEntry> knownDeletions_;
    std::function<std::optional<SegmentFiles>(std::vector<RetentionLogEntry>&)> nextSegment_;
    int dirFd_ = -1;
    bool daemonRunning_ = false;  // a daemon holds the directory's write lock
    std::set<std::string> liveNoted_;  // files named as live (passesAsLive)
    std::map<unsigned, std::uint64_t>
        liveSegment_;  // worker -> its newest segment (daemon running)
    VerifySummary summary_;
    std::unordered_map<std::uint64_t, ConnectionCheck> connections_;
    std::map<unsigned, WorkerChain> chains_;
    std::map<unsigned, WorkerHead> chainHeads_;  // worker -> its newest chained seal
    struct SealSeen {
        std::string path;
        bool checked = false;
    };
    std::map<Digest, SealSeen> sealsSeen_;       // every chained seal, for --expect-head
    std::optional<FirstKeying> retentionKeying_;  // the retention log's first entry
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
    VerifyOptions options;
    options.key = key;
    return verifyDirectory(dir, onProblem, options);
}

std::vector<std::string> verifyDirectory(const std::string& dir) {
    std::vector<std::string> problems;
    verifyDirectory(dir, [&](const std::string& line) { problems.push_back(line); });
    return problems;
}

}  // namespace splicegate::audit
