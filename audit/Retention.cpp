#include "audit/Retention.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include "audit/AuditDirectory.h"
#include "audit/AuditReader.h"
#include "audit/Records.h"
#include "common/Error.h"
#include "common/UniqueFd.h"

namespace splicegate::audit {
namespace {

std::string baseName(const std::string& path) {
    auto slash = path.rfind('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

struct FileIdentity {
    bool exists = false;
    std::uint64_t device = 0;
    std::uint64_t inode = 0;
    std::uint64_t size = 0;
    std::int64_t mtimeNs = 0;
    bool operator==(const FileIdentity&) const = default;
};

FileIdentity identityOf(const struct stat& st) {
    FileIdentity id;
    id.exists = true;
    id.device = static_cast<std::uint64_t>(st.st_dev);
    id.inode = static_cast<std::uint64_t>(st.st_ino);
    id.size = static_cast<std::uint64_t>(st.st_size);
    id.mtimeNs = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
    return id;
}

// 0, or the errno of fstatat(); a missing file is not an error (exists = false). Never follows
// a symlink.
int statFile(int dirFd, const std::string& name, FileIdentity& out) {
    out = FileIdentity{};
    struct stat st {};
    if (::fstatat(dirFd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
        out = identityOf(st);
        return 0;
    }
    return errno == ENOENT ? 0 : errno;
}

struct SegmentSummary {
    FileIdentity index;
    FileIdentity data;
    bool readable = true;  // false: the index could not be opened or read (never cached)
    bool sealed = false;
    bool damaged = false;
    std::string problem;  // unreadable or damaged: the first problem found
    std::int64_t startNs = std::numeric_limits<std::int64_t>::min();
    std::int64_t newestNs = std::numeric_limits<std::int64_t>::min();
    // Ids of the connections whose records here are not their whole life (Open and Close or
    // Truncated both here): only those can have records in another segment. Sorted.
    std::vector<std::uint64_t> crossing;
    Digest sealDigest{};  // the chain digest in its seal (zero: version 2)

    bool deletable() const noexcept { return readable && sealed && !damaged; }
};

}  // namespace

struct RetentionPlanner::Cache {
    std::map<std::pair<unsigned, std::uint64_t>, std::shared_ptr<const SegmentSummary>> sealed;
};

namespace {

// Reads the index of one segment (already open as `fd`) into a summary.
void scanIndex(int dirFd, int fd, const SegmentFiles& files, SegmentSummary& summary) {
    IndexReader reader(fd, files.indexPath);
    Record record;
    std::unordered_map<std::uint64_t, std::uint8_t> seen;  // id -> kOpen | kEnd
    constexpr std::uint8_t kOpen = 1, kEnd = 2;
    bool first = true;
    std::uint64_t maxChunkEnd = 0, maxChunkRecord = 0;
    auto damage = [&](std::uint64_t offset, const std::string& what) {
        if (summary.damaged) return;
        summary.damaged = true;
        summary.problem = placeText(files.indexPath, offset, what);
    };
    for (bool more = true; more;) {
        switch (reader.next(record)) {
            case IndexReader::Status::Record: break;
            case IndexReader::Status::End: more = false; continue;
            case IndexReader::Status::Torn:
                // Before the seal it is the write in progress (or a crash recovery will cut).
                if (summary.sealed) damage(reader.goodEnd(), reader.problem());
                more = false;
                continue;
            case IndexReader::Status::Corrupt:
                // Go on after it: the connections of the later records still count.
                damage(reader.recordOffset(), reader.problem());
                first = false;
                more = reader.resync();
                continue;
        }
        auto offset = reader.recordOffset();
        if (summary.sealed)
            damage(offset,
                   std::string(recordTypeName(record.type)) + " record after SegmentSealed");
        if (first && record.type != RecordType::SegmentStart)
            damage(offset, std::string("the first record is ") + recordTypeName(record.type) +
                               ", not SegmentStart");
        switch (record.type) {
            case RecordType::SegmentStart:
                if (!first)
                    damage(offset, "SegmentStart record that is not the first record");
                else if (record.worker != files.worker || record.segment != files.segment)
                    damage(offset, "SegmentStart names worker " + std::to_string(record.worker) +
                                       " segment " + std::to_string(record.segment) +
                                       ", not the file's");
                else
                    summary.startNs = record.timeNs;
                break;
            case RecordType::Open: seen[record.id] |= kOpen; break;
            case RecordType::Chunk:
                seen.try_emplace(record.id, 0);
                if (record.chunkEnd() > maxChunkEnd) {
                    maxChunkEnd = record.chunkEnd();
                    maxChunkRecord = offset;
                }
                break;
            case RecordType::Close:
            case RecordType::Truncated: seen[record.id] |= kEnd; break;
            case RecordType::SegmentSealed:
                summary.sealed = true;
                summary.sealDigest = record.chained ? record.digest : Digest{};
                break;
            case RecordType::SegmentsDeleted:
                damage(offset, "SegmentsDeleted record in a segment index");
                break;
        }
        if (record.type != RecordType::SegmentSealed)
            summary.newestNs = std::max(summary.newestNs, record.timeNs);
        first = false;
    }
    for (const auto& [id, flags] : seen)
        if (flags != (kOpen | kEnd)) summary.crossing.push_back(id);
    std::sort(summary.crossing.begin(), summary.crossing.end());

    // The data file is measured after the index was read: a chunk's payload lands before its
    // record is written, so every chunk read above lies inside the file unless it is damaged.
    if (int err = statFile(dirFd, files.dataName, summary.data); err != 0) {
        summary.readable = false;
        summary.problem = "cannot stat " + files.dataPath + ": " + errnoText(err);
    } else if (!summary.data.exists) {
        damage(0, "the data file " + baseName(files.dataPath) + " is missing");
    } else if (maxChunkEnd > summary.data.size) {
        damage(maxChunkRecord, "a chunk ends at data offset " + std::to_string(maxChunkEnd) +
                                   ", beyond the end of " + baseName(files.dataPath) + " (" +
                                   std::to_string(summary.data.size) + " bytes)");
    }
}

// One segment of this run.
struct Entry {
    SegmentFiles files;
    std::uint64_t bytes = 0;                       // index + data as measured now
    std::shared_ptr<const SegmentSummary> summary;  // null: no index file (lone data)
};

struct ConnectionRefs {
    bool manyWorkers = false;
    unsigned worker = 0;
};

// Whether one of the worker's two newest segments (the current one and the one created ahead)
// started before `cutoff` and has a data file closed to the group: a recycled file, which past
// its payload holds a deleted segment's bytes until its seal cuts them (FORMAT.md "Recycled
// data files").
bool holdsAgedRecycledBytes(int dirFd, const std::vector<Entry*>& segments, std::int64_t cutoff) {
    const std::size_t from = segments.size() > 2 ? segments.size() - 2 : 0;
    for (std::size_t i = from; i < segments.size(); ++i) {
        const Entry& entry = *segments[i];
        const auto& summary = *entry.summary;
        if (summary.sealed || summary.startNs == std::numeric_limits<std::int64_t>::min() ||
            summary.startNs >= cutoff)
            continue;
        struct stat st {};
        if (::fstatat(dirFd, entry.files.dataName.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISREG(st.st_mode) && (st.st_mode & 0077) == 0)
            return true;
    }
    return false;
}

// A segment chosen for deletion: its position in its worker's list of indexed segments.
struct Chosen {
    unsigned worker = 0;
    std::size_t position = 0;
};

}  // namespace

RetentionLogRepair repairRetentionLog(int dirFd, const std::string& dir, bool repair) {
    RetentionLogRepair result;
    std::string path = (dir.empty() || dir.back() == '/' ? dir : dir + "/") + kRetentionLogName;
    int fd = openInDirectory(dirFd, kRetentionLogName, repair ? O_RDWR : O_RDONLY);
    if (fd == -ENOENT) return result;
    if (fd < 0) openInDirectoryOrThrow(dirFd, dir, kRetentionLogName, O_RDONLY);  // throws
    UniqueFd owned(fd);
    IndexReader reader(fd, path);
    Record record;
    for (;;) {
        auto status = reader.next(record);
        if (status == IndexReader::Status::End) break;
        bool bad =
            status != IndexReader::Status::Record || record.type != RecordType::SegmentsDeleted;
        if (bad) {
            auto at =
                status == IndexReader::Status::Torn ? reader.goodEnd() : reader.recordOffset();
            result.cut = std::string(kRetentionLogName) + ": cut at offset " + std::to_string(at) +
                         ": " +
                         (status == IndexReader::Status::Record
                              ? std::string(recordTypeName(record.type)) + " record"
                              : reader.problem());
            if (repair) {
                checkSys(::ftruncate(fd, static_cast<off_t>(at)), "truncate " + path);
                checkSys(::fdatasync(fd), "fdatasync " + path);
            }
            result.goodEnd = at;
            return result;
        }
        result.entries.push_back(
            {record.worker, record.firstSegment, record.lastSegment, record.digest, record.timeNs});
        result.lastMac = record.entryMac;
        result.goodEnd = reader.goodEnd();
    }
    return result;
}

namespace {
// Calls fn(name, worker, slot) for each spare data file (spareDataName) in the directory.
template <typename Fn>
void forEachSpareDataFile(int dirFd, const std::string& dir, Fn&& fn) {
    forEachDirectoryEntry(dirFd, dir, [&](const dirent& entry) {
        unsigned worker = 0, slot = 0;
        if (parseSpareDataName(entry.d_name, worker, slot)) fn(entry.d_name, worker, slot);
    });
}

// Records last written before this are past --audit-retention-hours; nullopt: no age limit.
std::optional<std::int64_t> ageCutoffNs(const RetentionPolicy& policy, std::int64_t nowNs) {
    if (policy.maxAgeHours == 0) return std::nullopt;
    constexpr std::int64_t kNsPerHour = 3'600'000'000'000;
    constexpr auto kMin = std::numeric_limits<std::int64_t>::min();
    if (policy.maxAgeHours >
        static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max() / kNsPerHour))
        return kMin;  // nothing is older than the far past
    auto span = static_cast<std::int64_t>(policy.maxAgeHours) * kNsPerHour;
    return nowNs < kMin + span ? kMin : nowNs - span;
}

// Deleted bytes must not outlive the age limit in a spare either: a spare whose last write (its
// mtime; the rename into the slot keeps it) is older than `cutoffNs` is unlinked. A writer taking
// the spare at the same moment finds its name gone and makes a new file (ENOENT, as for an empty
// slot).
std::vector<std::string> removeAgedSpares(int dirFd, const std::string& dir, std::int64_t cutoffNs,
                                          std::vector<std::string>& problems) {
    std::vector<std::string> removed;
    forEachSpareDataFile(dirFd, dir, [&](const char* name, unsigned, unsigned) {
        FileIdentity spare;
        if (statFile(dirFd, name, spare) != 0 || !spare.exists || spare.mtimeNs >= cutoffNs)
            return;
        if (::unlinkat(dirFd, name, 0) == 0)
            removed.push_back(dir + "/" + name);
        else if (errno != ENOENT)
            problems.push_back("cannot delete spare " + dir + "/" + name + ": " + errnoText(errno));
    });
    return removed;
}
}  // namespace

RetentionPlanner::RetentionPlanner(std::string dir, std::shared_ptr<const ChainKey> chainKey)
    : dir_(std::move(dir)), chainKey_(std::move(chainKey)), cache_(std::make_unique<Cache>()) {}
RetentionPlanner::~RetentionPlanner() = default;
RetentionPlanner::RetentionPlanner(RetentionPlanner&&) noexcept = default;
RetentionPlanner& RetentionPlanner::operator=(RetentionPlanner&&) noexcept = default;

RetentionResult RetentionPlanner::apply(const RetentionPolicy& policy, std::int64_t nowNs) {
    RetentionResult result;
    const bool limited = policy.maxBytes > 0 || policy.maxAgeHours > 0;
    UniqueFd dirFd(::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dirFd) throwErrno(errno, "cannot open audit directory " + dir_);
    auto segments = listSegments(dirFd.get(), dir_);  // throws when the directory cannot be read

    // ---- measure and summarise every segment
    std::vector<Entry> entries;
    entries.reserve(segments.size());
    std::uint64_t total = 0;
    for (auto& files : segments) {
        Entry entry;
        entry.files = std::move(files);
        const auto& f = entry.files;
        auto key = std::make_pair(f.worker, f.segment);
        FileIdentity index, data;
        int err = f.hasIndex ? statFile(dirFd.get(), f.indexName, index) : 0;
        if (err == 0 && f.hasData) err = statFile(dirFd.get(), f.dataName, data);
        entry.bytes = index.size + data.size;
        total += entry.bytes;
        if (!f.hasIndex) {
            entries.push_back(std::move(entry));
            continue;
        }
        auto cached = cache_->sealed.find(key);
        if (err == 0 && index.exists && cached != cache_->sealed.end() &&
            cached->second->index == index && cached->second->data == data) {
            entry.summary = cached->second;
            entries.push_back(std::move(entry));
            continue;
        }
        if (cached != cache_->sealed.end()) cache_->sealed.erase(cached);
        auto summary = std::make_shared<SegmentSummary>();
        if (f.unsafe) {
            summary->readable = false;
            summary->problem = f.indexPath +
                               ": a file of this segment is not a regular file "
                               "(a symlink?); it is not followed nor deleted";
        } else if (err != 0 || !index.exists) {
            summary->readable = false;
            summary->problem = "cannot stat " + (index.exists ? f.dataPath : f.indexPath) + ": " +
                               errnoText(err != 0 ? err : ENOENT);
        } else {
            try {
                UniqueFd fd = openInDirectoryOrThrow(dirFd.get(), dir_, f.indexName, O_RDONLY);
                struct stat st {};
                checkSys(::fstat(fd.get(), &st), "fstat " + f.indexPath);
                summary->index = identityOf(st);
                ++indexScans_;
                scanIndex(dirFd.get(), fd.get(), f, *summary);
            } catch (const std::system_error& e) {
                summary->readable = false;
                summary->problem = e.what();
            }
        }
        if (summary->readable && summary->sealed) cache_->sealed[key] = summary;
        entry.summary = std::move(summary);
        entries.push_back(std::move(entry));
    }
    // Forget segments that are gone (both sequences are in (worker, segment) order).
    {
        auto entry = entries.begin();
        for (auto it = cache_->sealed.begin(); it != cache_->sealed.end();) {
            auto key = it->first;
            auto before = [&](const Entry& e) {
                return std::make_pair(e.files.worker, e.files.segment) < key;
            };
            while (entry != entries.end() && before(*entry)) ++entry;
            bool listed = entry != entries.end() && entry->summary &&
                          entry->files.worker == key.first && entry->files.segment == key.second;
            it = listed ? std::next(it) : cache_->sealed.erase(it);
        }
    }

    // ---- per worker: the indexed segments in order, lone data files
    std::map<unsigned, std::vector<Entry*>> indexed;
    std::vector<Entry*> lone;
    for (auto& entry : entries) {
        if (entry.summary)
            indexed[entry.files.worker].push_back(&entry);
        else
            lone.push_back(&entry);
        if (entry.summary && (!entry.summary->readable || entry.summary->damaged))
            result.problems.push_back(entry.summary->problem);
    }

    // ---- where each crossing connection has records
    std::unordered_map<std::uint64_t, ConnectionRefs> refs;
    for (const auto& [worker, list] : indexed) {
        for (std::size_t pos = 0; pos < list.size(); ++pos) {
            for (auto id : list[pos]->summary->crossing) {
                auto [it, inserted] = refs.try_emplace(id);
                auto& ref = it->second;
                if (inserted) {
                    ref.worker = worker;
                } else if (ref.worker != worker && !ref.manyWorkers) {
                    ref.manyWorkers = true;
                    result.problems.push_back(placeText(
                        list[pos]->files.indexPath, 0,
                        "connection " + std::to_string(id) +
                            " has records in the logs of workers " + std::to_string(ref.worker) +
                            " and " + std::to_string(worker) +
                            "; neither is deleted while both exist"));
                }
            }
        }
    }

    // ---- per worker: how many of its oldest segments may go, and how many of those the
    // archive verified. A connection with records in a deleted segment and in a later one keeps
    // those (DeletedHeads).
    std::map<unsigned, std::size_t> deletable;
    std::map<unsigned, std::size_t> archivedPrefix;
    std::map<const Entry*, bool> archived;
    for (const auto& [worker, list] : indexed) {
        for (const auto* entry : list) {
            const auto& summary = *entry->summary;
            if (summary.sealed)
                archived[entry] = !policy.archived ||
                                  policy.archived(worker, entry->files.segment, summary.sealDigest);
        }
        auto& count = deletable[worker];
        // The newest indexed segment stays (the writer's, or the worker's segment numbering).
        for (; count + 1 < list.size(); ++count) {
            const auto& summary = *list[count]->summary;
            if (!summary.deletable()) break;
            bool tangled = std::any_of(summary.crossing.begin(), summary.crossing.end(),
                                       [&](auto id) { return refs[id].manyWorkers; });
            if (tangled) break;
        }
        auto& safe = archivedPrefix[worker];
        while (safe < count && archived[list[safe]]) ++safe;
    }

    // ---- choose
    std::vector<Entry*> orphans;
    std::vector<Chosen> chosen;
    std::map<unsigned, std::size_t> next;  // per worker: the first deletable segment not chosen
    std::uint64_t remaining = total;
    auto choose = [&](unsigned worker) {
        auto position = next[worker]++;
        chosen.push_back({worker, position});
        remaining -= indexed[worker][position]->bytes;
    };
    if (limited) {
        for (auto* entry : lone) {
            auto it = indexed.find(entry->files.worker);
            if (it != indexed.end() && entry->files.segment < it->second.back()->files.segment) {
                orphans.push_back(entry);
                remaining -= entry->bytes;
            }
        }
    }
    const auto ageCutoff = ageCutoffNs(policy, nowNs);
    if (ageCutoff) {
        for (const auto& [worker, count] : archivedPrefix)
            while (next[worker] < count &&
                   indexed[worker][next[worker]]->summary->newestNs < *ageCutoff)
                choose(worker);
    }
    // Oldest first by start time across workers, each worker up to its `limits` entry.
    auto deleteDownToMaxBytes = [&](const std::map<unsigned, std::size_t>& limits) {
        while (remaining > policy.maxBytes) {
            std::optional<unsigned> oldest;
            std::int64_t oldestStart = 0;
            for (const auto& [worker, count] : limits) {
                if (next[worker] >= count) continue;
                auto start = indexed[worker][next[worker]]->summary->startNs;
                // Ties (and equal clocks) go to the lower worker: the map is in worker order.
                if (!oldest || start < oldestStart) {
                    oldest = worker;
                    oldestStart = start;
                }
            }
            if (!oldest) break;  // the rest is damaged, unsealed, current or unarchived
            choose(*oldest);
        }
    };
    if (policy.maxBytes > 0) {
        deleteDownToMaxBytes(archivedPrefix);
        if (policy.deleteUnarchivedOverBudget) deleteDownToMaxBytes(deletable);
    }

    // ---- delete
    auto unlinkFile = [&](const std::string& path, std::uint64_t bytes) {
        auto slash = path.rfind('/');
        std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
        if (::unlinkat(dirFd.get(), name.c_str(), 0) != 0) {
            int err = errno;
            if (err == ENOENT) return true;  // already gone
            result.problems.push_back("cannot delete " + path + ": " + errnoText(err));
            return false;
        }
        result.deleted.push_back(path);
        result.freedBytes += bytes;
        return true;
    };
    // Not while a reader holds the file (ReaderSupport's holdDataFile): unlinked, it keeps its
    // bytes for the reader; recycled, a new segment would overwrite them. Unreadable to the audit
    // group first: what it holds was deleted from the log.
    auto recycleFile = [&](const SegmentFiles& files, std::uint64_t bytes) {
        UniqueFd fd(openInDirectory(dirFd.get(), files.dataName, O_RDONLY));
        if (!fd || ::flock(fd.get(), LOCK_EX | LOCK_NB) != 0 || ::fchmod(fd.get(), 0600) != 0)
            return false;
        bool renamed = false;
        for (unsigned slot = 0; slot < kSpareSlots && !renamed; ++slot) {
            auto spare = spareDataName(files.worker, slot);
            renamed = ::renameat2(dirFd.get(), files.dataName.c_str(), dirFd.get(), spare.c_str(),
                                  RENAME_NOREPLACE) == 0;
        }
        if (!renamed) return false;  // every slot holds a spare (EEXIST)
        result.deleted.push_back(files.dataPath);
        result.freedBytes += bytes;
        ++result.recycledFiles;
        return true;
    };
    for (auto* entry : orphans) unlinkFile(entry->files.dataPath, entry->bytes);
    std::map<unsigned, bool> failed;
    for (const auto& [worker, position] : chosen) {
        if (failed[worker]) continue;  // keep the worker's remaining log a contiguous suffix
        const auto& entry = *indexed[worker][position];
        const auto& summary = *entry.summary;
        // Announce the deletion first (synced): the chain's first remaining link then points
        // at a digest the log records, even if the deletion below is interrupted.
        try {
            appendRetentionEntry(dirFd.get(), worker, entry.files.segment, entry.files.segment,
                                 summary.sealDigest, nowNs);
        } catch (const std::exception& error) {
            result.problems.push_back(std::string("not deleting: ") + error.what());
            failed[worker] = true;
            continue;
        }
        // Index before data: see Retention.h "Deletion order".
        if (!unlinkFile(entry.files.indexPath, summary.index.size)) {
            failed[worker] = true;
            continue;
        }
        // A failure here leaves only a data file without index: readers ignore it, the next
        // run (or recovery) removes it.
        if (!(policy.recycleDataFiles && recycleFile(entry.files, summary.data.size)))
            unlinkFile(entry.files.dataPath, summary.data.size);
        cache_->sealed.erase({entry.files.worker, entry.files.segment});
        if (!archived[&entry]) result.deletedUnarchived.push_back(entry.files.indexPath);
        archived.erase(&entry);
    }
    if (policy.archived)
        for (const auto& [entry, verified] : archived)
            if (!verified) result.unarchivedBytes += entry->bytes;
    if (ageCutoff) {
        result.agedSpares = removeAgedSpares(dirFd.get(), dir_, *ageCutoff, result.problems);
        for (const auto& [worker, list] : indexed)
            if (holdsAgedRecycledBytes(dirFd.get(), list, *ageCutoff))
                result.rollRecycled.push_back(worker);
    }
    if ((!result.deleted.empty() || !result.agedSpares.empty()) && ::fsync(dirFd.get()) != 0) {
        int err = errno;
        result.problems.push_back("cannot fsync audit directory " + dir_ + ": " + errnoText(err));
    }
    result.totalBytesAfter = total - result.freedBytes;
    return result;
}

void RetentionPlanner::appendRetentionEntry(int dirFd, unsigned worker, std::uint64_t first,
                                            std::uint64_t last, const Digest& lastDigest,
                                            std::int64_t nowNs) {
    auto tail = logTail_;
    logTail_.reset();  // until this append has succeeded
    struct stat st {};
    bool existed = ::fstatat(dirFd, kRetentionLogName, &st, AT_SYMLINK_NOFOLLOW) == 0;
    bool known = tail && existed && static_cast<std::uint64_t>(st.st_dev) == tail->device &&
                 static_cast<std::uint64_t>(st.st_ino) == tail->inode &&
                 static_cast<std::uint64_t>(st.st_size) == tail->end;
    std::optional<RetentionLogRepair> log;
    if (!known) {
        log = repairRetentionLog(dirFd, dir_, false);
        tail = LogTail{0, 0, log->goodEnd, log->lastMac};
    }
    if (tail->end >= compactAt_) {
        if (!log) log = repairRetentionLog(dirFd, dir_, false);
        if (auto compacted = compactRetentionLog(dirFd, log->entries)) tail = compacted;
        // A log that does not shrink (entries that must all stay) is tried again only at twice
        // its size, so that appends do not each re-read it.
        compactAt_ = std::max(compactAt_, 2 * tail->end);
    }
    std::string path = dir_ + "/" + kRetentionLogName;
    std::string record;
    Digest mac = encodeSegmentsDeleted(record, worker, first, last, nowNs, chainKey_.get(),
                                       lastDigest, tail->lastMac);
    UniqueFd fd = openInDirectoryOrThrow(dirFd, dir_, kRetentionLogName, O_WRONLY | O_CREAT, 0640);
    std::size_t written = 0;
    if (int rc = writeFullyAt(fd.get(), record, tail->end, written); rc < 0)
        throwErrno(-rc, "write " + path);
    std::uint64_t end = tail->end + record.size();
    checkSys(::ftruncate(fd.get(), static_cast<off_t>(end)), "truncate " + path);
    checkSys(::fdatasync(fd.get()), "fdatasync " + path);
    if (!existed) checkSys(::fsync(dirFd), "fsync " + dir_);
    checkSys(::fstat(fd.get(), &st), "fstat " + path);
    logTail_ = LogTail{static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino),
                       end, mac};
}

// Readers need, per worker, which segments were deleted and the digest of the newest deleted
// segment below the first one left (FORMAT.md "Hash chain"). So a worker's entries older than
// the one before its newest become one entry for their whole range, with the digest and time of
// the newest of them; the entry before the newest and the newest stay as they are (a deletion
// interrupted after its announcement leaves the newest entry's segment in place, whose
// predecessor's digest is then needed). The new log is a fresh chain, written beside the old
// one, synced, and renamed over it: a reader sees one or the other, whole.
std::optional<RetentionPlanner::LogTail> RetentionPlanner::compactRetentionLog(
    int dirFd, const std::vector<RetentionLogEntry>& entries) {
    std::map<unsigned, std::uint64_t> newestFirst;
    for (const auto& entry : entries) newestFirst[entry.worker] = entry.first;
    std::map<unsigned, RetentionLogEntry> merged;
    std::vector<RetentionLogEntry> kept;
    for (const auto& entry : entries) {
        if (entry.last + 1 >= newestFirst[entry.worker]) {
            kept.push_back(entry);
            continue;
        }
        auto [it, inserted] = merged.try_emplace(entry.worker, entry);
        RetentionLogEntry& range = it->second;
        range.first = std::min(range.first, entry.first);
        if (!inserted && entry.last >= range.last) {
            range.last = entry.last;
            range.lastDigest = entry.lastDigest;
            range.timeNs = entry.timeNs;
        }
    }
    if (merged.empty()) return std::nullopt;
    std::string records;
    Digest mac{};
    auto add = [&](const RetentionLogEntry& entry) {
        mac = encodeSegmentsDeleted(records, entry.worker, entry.first, entry.last, entry.timeNs,
                                    chainKey_.get(), entry.lastDigest, mac);
    };
    for (const auto& [worker, entry] : merged) add(entry);
    for (const auto& entry : kept) add(entry);
    UniqueFd fd =
        replaceFileDurably(dirFd, dir_, kRetentionLogCompacting, kRetentionLogName, records);
    struct stat st {};
    checkSys(::fstat(fd.get(), &st), "fstat " + dir_ + "/" + kRetentionLogName);
    return LogTail{static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino),
                   records.size(), mac};
}

std::vector<std::string> removeSpareDataFiles(int dirFd, const std::string& dir,
                                              const std::set<unsigned>& keep) {
    std::vector<std::string> removed;
    forEachSpareDataFile(dirFd, dir, [&](const char* name, unsigned worker, unsigned slot) {
        if ((keep.count(worker) == 0 || slot >= kSpareSlots) && ::unlinkat(dirFd, name, 0) == 0)
            removed.emplace_back(name);
    });
    return removed;
}

}  // namespace splicegate::audit
