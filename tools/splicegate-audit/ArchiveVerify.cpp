#include "tools/splicegate-audit/ArchiveVerify.h"

#include <fcntl.h>
#include <google/protobuf/util/json_util.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <set>
#include <stdexcept>
#include <string_view>

#include "archive/ObjectKeys.h"
#include "archive/s3/S3Client.h"
#include "audit/Crc32c.h"
#include "audit/Records.h"
#include "audit/Retention.h"
#include "audit/SealChain.h"
#include "common/Error.h"
#include "common/UniqueFd.h"
#include "splicegate/archive_index.pb.h"

namespace splicegate::audittool {
namespace {

using archive::ObjectKind;
using SegmentKey = std::pair<unsigned, std::uint64_t>;

// Ranged GETs of this size: a 1 GiB data object never sits in memory whole.
constexpr std::uint64_t kFetchPiece = std::uint64_t{16} << 20;
// A manifest is a few hundred bytes; anything this large is not one.
constexpr std::uint64_t kMaxManifestBytes = std::uint64_t{1} << 20;

std::string url(const std::string& bucket, const std::string& key) {
    return "s3://" + bucket + "/" + key;
}

std::string hex8(std::uint32_t value) {
    char text[16];
    std::snprintf(text, sizeof text, "%08x", value);
    return text;
}

// One segment as the bucket holds it. More than one copy (objects under two creation times) or
// more than one manifest for a worker and segment number is a fork.
struct SegmentCopy {
    std::int64_t createdNs = 0;
    std::map<ObjectKind, s3::VersionEntry> objects;  // the current version of each key
};

struct ArchivedSegment {
    std::map<std::int64_t, SegmentCopy> copies;  // by creation time (to the second)
    std::vector<s3::VersionEntry> manifests;
};

struct BucketView {
    std::map<SegmentKey, ArchivedSegment> segments;
    std::uint64_t objects = 0;
};

// One ListObjectVersions of the prefix. Every key must have exactly one version: the archiver
// puts an object once, and Object Lock keeps what it put, so a second version (or a delete
// marker) is something written to the archive after it: an alarm.
BucketView readBucket(s3::S3Client& s3, const ArchiveLocation& location, const LineSink& report) {
    auto versions = s3.listVersions(location.bucket, location.prefix + "/");
    if (!versions) throw std::runtime_error(versions.error.message);
    std::map<std::string, std::vector<s3::VersionEntry>> byKey;
    for (auto& version : *versions) byKey[version.key].push_back(version);
    BucketView view;
    for (const auto& [key, list] : byKey) {
        if (list.size() > 1) {
            std::string ids;
            for (const auto& version : list)
                ids += (ids.empty() ? "" : ", ") + version.versionId +
                       (version.deleteMarker ? " (delete marker)" : "");
            report(url(location.bucket, key) + ": " + std::to_string(list.size()) +
                   " versions (" + ids +
                   "): an archived object was written again or deleted after it was archived");
        }
        // ListObjectVersions lists a key's newest version first.
        const s3::VersionEntry* current = &list.front();
        for (const auto& version : list)
            if (version.isLatest) current = &version;
        if (current->deleteMarker) {
            if (list.size() == 1)
                report(url(location.bucket, key) + ": only a delete marker (version " +
                       current->versionId + "): the archived object was deleted");
            continue;
        }
        ++view.objects;
        if (auto parsed = archive::parseObjectKey(location.prefix, key)) {
            auto& copy = view.segments[{parsed->id.worker, parsed->id.segment}]
                             .copies[parsed->id.createdNs];
            copy.createdNs = parsed->id.createdNs;
            copy.objects[parsed->kind] = *current;
        } else if (auto manifest = archive::parseManifestKey(location.prefix, key)) {
            view.segments[{manifest->worker, manifest->segment}].manifests.push_back(*current);
        }
    }
    return view;
}

std::optional<archive::ArchiveManifest> readManifest(s3::S3Client& s3, const std::string& bucket,
                                                     const s3::VersionEntry& entry,
                                                     SegmentKey segment, const LineSink& report) {
    const std::string where = url(bucket, entry.key);
    if (entry.size > kMaxManifestBytes) {
        report(where + ": " + std::to_string(entry.size) + " bytes: not a manifest");
        return std::nullopt;
    }
    auto bytes = s3.get(bucket, entry.key);
    if (!bytes) {
        report(bytes.error.message);
        return std::nullopt;
    }
    google::protobuf::util::JsonParseOptions options;
    options.ignore_unknown_fields = true;  // a newer archiver's extra fields
    archive::ArchiveManifest manifest;
    auto status = google::protobuf::util::JsonStringToMessage(*bytes, &manifest, options);
    if (!status.ok()) {
        report(where + ": not a manifest: " + std::string(status.message()));
        return std::nullopt;
    }
    if (manifest.worker() != segment.first || manifest.segment() != segment.second) {
        report(where + ": names worker " + std::to_string(manifest.worker()) + " segment " +
               std::to_string(manifest.segment()) + ", but its key says worker " +
               std::to_string(segment.first) + " segment " + std::to_string(segment.second));
        return std::nullopt;
    }
    return manifest;
}

// A directory of its own under $TMPDIR, removed with everything in it.
class WorkDirectory {
  public:
    WorkDirectory() {
        std::string pattern =
            (std::filesystem::temp_directory_path() / "splicegate-audit-XXXXXX").string();
        if (::mkdtemp(pattern.data()) == nullptr)
            throwErrno(errno, "cannot create a temporary directory like " + pattern);
        path_ = pattern;
    }
    ~WorkDirectory() {
        std::error_code ignored;
        std::filesystem::remove_all(path_, ignored);
    }
    WorkDirectory(const WorkDirectory&) = delete;
    WorkDirectory& operator=(const WorkDirectory&) = delete;
    const std::string& path() const noexcept { return path_; }

  private:
    std::string path_;
};

void writeAll(int fd, const std::string& bytes, const std::string& path) {
    std::size_t done = 0;
    while (done < bytes.size()) {
        ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throwErrno(errno, "cannot write " + path);
        done += static_cast<std::size_t>(n);
    }
}

struct Fetched {
    std::uint64_t size = 0;
    std::uint32_t crc32c = 0;
};

// GETs the current version of `entry` (of the listed size) in pieces, into `path` when it is not
// empty. nullopt after reporting what failed.
std::optional<Fetched> fetch(s3::S3Client& s3, const std::string& bucket,
                             const s3::VersionEntry& entry, const std::string& path,
                             const LineSink& report) {
    UniqueFd out;
    if (!path.empty()) {
        out.reset(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
        if (!out) throwErrno(errno, "cannot create " + path);
    }
    Fetched fetched;
    while (fetched.size < entry.size) {
        std::uint64_t last = std::min(fetched.size + kFetchPiece, entry.size) - 1;
        auto piece = s3.get(bucket, entry.key, std::make_pair(fetched.size, last));
        if (!piece) {
            report(piece.error.message);
            return std::nullopt;
        }
        if (piece->size() != last - fetched.size + 1) {
            report(url(bucket, entry.key) + ": bytes " + std::to_string(fetched.size) + "-" +
                   std::to_string(last) + " came back as " + std::to_string(piece->size()) +
                   " bytes (the listing says " + std::to_string(entry.size) + ")");
            return std::nullopt;
        }
        fetched.crc32c = audit::crc32c(fetched.crc32c, piece->data(), piece->size());
        if (out) writeAll(out.get(), *piece, path);
        fetched.size += piece->size();
    }
    return fetched;
}

// A manifest's "seal": 64 lowercase hex digits, as hexText spells a digest.
bool parseSeal(const std::string& text, audit::Digest& digest) {
    if (text.size() != 2 * digest.size()) return false;
    for (std::size_t i = 0; i < digest.size(); ++i) {
        unsigned value = 0;
        for (char c : text.substr(2 * i, 2)) {
            int nibble = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
            if (nibble < 0) return false;
            value = value << 4 | static_cast<unsigned>(nibble);
        }
        digest[i] = static_cast<std::uint8_t>(value);
    }
    return true;
}

std::optional<ObjectKind> kindFromName(const std::string& name) {
    if (name == "data") return ObjectKind::Data;
    if (name == "index") return ObjectKind::Index;
    if (name == "connections") return ObjectKind::Connections;
    return std::nullopt;
}

// The manifest's word on each object against what the bucket holds and what was fetched.
void checkManifestObjects(const archive::ArchiveManifest& manifest, const std::string& where,
                          const SegmentCopy& copy, const std::map<ObjectKind, Fetched>& fetched,
                          const LineSink& report) {
    std::set<ObjectKind> named;
    for (const auto& object : manifest.objects()) {
        auto kind = kindFromName(object.kind());
        if (!kind) {
            report(where + ": an object of unknown kind '" + object.kind() + "'");
            continue;
        }
        named.insert(*kind);
        auto held = copy.objects.find(*kind);
        if (held == copy.objects.end()) continue;  // reported as missing
        const auto& entry = held->second;
        std::vector<std::string> differences;
        if (object.key() != entry.key) differences.push_back("key " + object.key());
        if (object.version() != entry.versionId)
            differences.push_back("version " + object.version() + ", the bucket holds " +
                                  entry.versionId);
        if (object.size() != entry.size)
            differences.push_back("size " + std::to_string(object.size()) +
                                  ", the bucket holds " + std::to_string(entry.size));
        if (auto got = fetched.find(*kind);
            got != fetched.end() && object.crc32c() != hex8(got->second.crc32c))
            differences.push_back("CRC-32C " + object.crc32c() + ", the bytes fetched have " +
                                  hex8(got->second.crc32c));
        for (const auto& difference : differences)
            report(where + ": " + object.kind() + " object " + entry.key + ": the manifest says " +
                   difference);
    }
    for (const auto& [kind, entry] : copy.objects)
        if (!named.count(kind))
            report(where + ": does not name the segment's object " + entry.key);
}

// Replaces every "WORKDIR/NAME" in `line` by the object NAME was fetched from.
std::string toArchiveNames(std::string line, const std::string& workDir,
                           const std::map<std::string, std::string>& names) {
    const std::string head = workDir + "/";
    for (auto at = line.find(head); at != std::string::npos; at = line.find(head, at)) {
        auto end = line.find_first_of(": ", at + head.size());
        std::string name = line.substr(at + head.size(), end == std::string::npos
                                                             ? std::string::npos
                                                             : end - at - head.size());
        auto it = names.find(name);
        std::string replacement = it != names.end() ? it->second : name;
        line.replace(at, head.size() + name.size(), replacement);
        at += replacement.size();
    }
    return line;
}

// The predecessor digest the seal at the end of the index file `path` names; nullopt when it
// ends otherwise (the verifier reports that).
std::optional<audit::Digest> predecessorDigest(const std::string& path) {
    audit::IndexReader reader(path);
    audit::Record record;
    std::optional<audit::Digest> predecessor;
    while (reader.next(record) == audit::IndexReader::Status::Record)
        predecessor = record.type == audit::RecordType::SegmentSealed && record.chained
                          ? std::optional<audit::Digest>(record.prevDigest)
                          : std::nullopt;
    return predecessor;
}

std::string describeCopies(const std::string& bucket, const ArchivedSegment& segment) {
    std::string text;
    for (const auto& [createdNs, copy] : segment.copies) {
        auto first = copy.objects.begin();
        if (first != copy.objects.end())
            text += (text.empty() ? "" : ", ") + url(bucket, first->second.key);
    }
    return text;
}

}  // namespace

ArchiveVerifySummary verifyArchive(s3::S3Client& s3, const ArchiveLocation& location,
                                   const audit::VerifyOptions& options,
                                   const LineSink& onProblem) {
    ArchiveVerifySummary summary;
    auto report = [&](const std::string& line) {
        ++summary.problems;
        onProblem(line);
    };
    auto note = [&](const std::string& line) {
        if (options.onNote) options.onNote(line);
    };
    const std::string& bucket = location.bucket;
    const std::string where = url(bucket, location.prefix);
    BucketView view = readBucket(s3, location, report);
    summary.objects = view.objects;
    if (view.segments.empty())
        throw std::runtime_error(where + ": no archive there (no " + location.prefix +
                                 "/segments/ or " + location.prefix + "/manifests/ objects)");

    WorkDirectory work;
    std::map<std::string, std::string> names;  // a fetched file's name -> its object
    struct Check {
        std::string manifestUrl;
        std::string seal;       // the manifest's
        std::string indexName;  // the fetched index file's name
    };
    std::vector<Check> sealChecks;
    // worker -> its oldest archived segment, when fetched: number, index file
    std::map<unsigned, std::pair<std::uint64_t, std::string>> oldestFetched;
    std::optional<SegmentKey> previous;
    std::string previousKey;
    for (auto it = view.segments.begin(); it != view.segments.end(); ++it) {
        const auto& [id, segment] = *it;
        const auto [worker, number] = id;
        const std::string label =
            where + ": worker " + std::to_string(worker) + " segment " + std::to_string(number);
        auto next = std::next(it);
        const bool newest = next == view.segments.end() || next->first.first != worker;
        const bool oldest = !previous || previous->first != worker;

        // Gaps: a number missing between two the bucket holds.
        std::string firstKey = !segment.copies.empty() && !segment.copies.begin()->second.objects.empty()
                                   ? segment.copies.begin()->second.objects.begin()->second.key
                               : !segment.manifests.empty() ? segment.manifests.front().key
                                                            : std::string();
        if (previous && previous->first == worker && number > previous->second + 1)
            report(where + ": worker " + std::to_string(worker) + ": segment" +
                   (number == previous->second + 2
                        ? " " + std::to_string(previous->second + 1) + " is"
                        : "s " + std::to_string(previous->second + 1) + " to " +
                              std::to_string(number - 1) + " are") +
                   " missing between " + previousKey + " and " + url(bucket, firstKey) +
                   " (a gap in the archive)");
        previous = id;
        previousKey = url(bucket, firstKey);

        // Forks: two copies, or two manifests, of one segment.
        if (segment.copies.size() > 1)
            report(label + ": " + std::to_string(segment.copies.size()) +
                   " different copies in the bucket (a fork): " + describeCopies(bucket, segment));
        if (segment.manifests.size() > 1) {
            std::string keys;
            for (const auto& manifest : segment.manifests)
                keys += (keys.empty() ? "" : ", ") + url(bucket, manifest.key);
            report(label + ": " + std::to_string(segment.manifests.size()) +
                   " manifests (a fork): " + keys);
        }

        std::optional<archive::ArchiveManifest> manifest;
        std::string manifestUrl;
        if (!segment.manifests.empty()) {
            manifestUrl = url(bucket, segment.manifests.front().key);
            manifest = readManifest(s3, bucket, segment.manifests.front(), id, report);
        }
        // The copy the manifest names, or the only one.
        const SegmentCopy* copy = nullptr;
        for (const auto& [createdNs, candidate] : segment.copies) {
            if (copy == nullptr) copy = &candidate;
            if (!manifest) continue;
            for (const auto& object : manifest->objects())
                if (auto held = candidate.objects.find(ObjectKind::Index);
                    object.kind() == "index" && held != candidate.objects.end() &&
                    held->second.key == object.key())
                    copy = &candidate;
        }
        if (copy == nullptr) {
            report(manifestUrl + ": names a segment of which the bucket holds no object");
            continue;
        }
        if (segment.manifests.empty()) {
            // The archiver puts the manifest last: the newest segment may be on its way.
            if (newest && copy->objects.size() < 3) {
                note(label + ": no manifest yet, objects still being shipped: not checked");
                continue;
            }
            if (newest) {
                note(label + ": no manifest yet (the archiver has not verified it): checked "
                     "without one");
            } else {
                report(label + ": no manifest " +
                       url(bucket, archive::manifestKey(location.prefix,
                                                        {worker, number, copy->createdNs})) +
                       " (the archiver writes it once the segment's objects are verified)");
            }
        }
        for (auto kind : {ObjectKind::Data, ObjectKind::Index, ObjectKind::Connections})
            if (!copy->objects.count(kind))
                report(url(bucket, archive::objectKey(location.prefix,
                                                      {worker, number, copy->createdNs}, kind)) +
                       ": missing (the segment's other objects are there)");

        std::map<ObjectKind, Fetched> fetched;
        const std::string base = audit::segmentBaseName(worker, number);
        for (const auto& [kind, entry] : copy->objects) {
            std::string name;
            if (kind == ObjectKind::Data) name = base + ".data";
            if (kind == ObjectKind::Index) name = base + ".index";
            // The connections object is not part of the chain; its bytes are checked against
            // the manifest only.
            std::string path = name.empty() ? "" : work.path() + "/" + name;
            auto got = fetch(s3, bucket, entry, path, report);
            if (!got) {
                if (!path.empty()) ::unlink(path.c_str());
                continue;
            }
            summary.bytesFetched += got->size;
            fetched[kind] = *got;
            if (!name.empty()) names[name] = url(bucket, entry.key);
        }
        if (oldest && fetched.count(ObjectKind::Index))
            oldestFetched[worker] = {number, work.path() + "/" + base + ".index"};
        if (manifest) {
            checkManifestObjects(*manifest, manifestUrl, *copy, fetched, report);
            if (fetched.count(ObjectKind::Index))
                sealChecks.push_back({manifestUrl, manifest->seal(), base + ".index"});
        }
    }

    if (names.empty()) return summary;  // nothing could be fetched: each object was reported
    audit::VerifyOptions local = options;
    // A box whose retention ran before the archiver first shipped has an archive that starts
    // later than its chain: the oldest archived segment of a worker names a predecessor the
    // bucket never received (Object Lock keeps anything that was put, so nothing was removed).
    for (const auto& [worker, first] : oldestFetched) {
        auto predecessor = predecessorDigest(first.second);
        if (!predecessor || *predecessor == audit::Digest{} || first.first == 0) continue;
        local.knownDeletions.push_back({worker, 0, first.first - 1, *predecessor, 0});
        note(names[audit::segmentBaseName(worker, first.first) + ".index"] +
             ": the archive of worker " + std::to_string(worker) + " starts here: the segments "
             "before it (the last sealed " +
             audit::hexText(predecessor->data(), predecessor->size()) +
             ") were never archived, deleted on the box before the archiver ran");
    }
    std::map<std::string, std::string> seals;  // index file name -> the seal it ends with
    local.onNote = [&](const std::string& line) { note(toArchiveNames(line, work.path(), names)); };
    local.onSeal = [&](const audit::WorkerHead& head) {
        seals[head.indexPath.substr(head.indexPath.rfind('/') + 1)] =
            audit::hexText(head.digest.data(), head.digest.size());
        if (options.onSeal) options.onSeal(head);
    };
    summary.chain = audit::verifyDirectory(
        work.path(),
        [&](const std::string& line) { report(toArchiveNames(line, work.path(), names)); },
        local);
    for (const auto& check : sealChecks) {
        auto it = seals.find(check.indexName);
        const std::string& index = names[check.indexName];
        if (it == seals.end())
            report(index + ": ends with no chained seal, but its manifest " + check.manifestUrl +
                   " says seal " + check.seal);
        else if (it->second != check.seal)
            report(check.manifestUrl + ": seal " + check.seal + ", but the index object " + index +
                   " ends with seal " + it->second +
                   " (the segment in the bucket is not the one the archiver verified)");
    }
    for (auto head : summary.chain.heads) {
        head.indexPath = toArchiveNames(head.indexPath, work.path(), names);
        summary.heads.push_back(head);
    }
    return summary;
}

AnchorSummary checkAgainstArchive(const std::string& dir, const LocalSeals& local,
                                  s3::S3Client& s3, const ArchiveLocation& location,
                                  const LineSink& onProblem) {
    AnchorSummary summary;
    auto report = [&](const std::string& line) {
        ++summary.problems;
        onProblem(line);
    };
    const std::string where = url(location.bucket, location.prefix);
    BucketView view = readBucket(s3, location, report);

    UniqueFd dirFd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dirFd) throwErrno(errno, "cannot open " + dir);
    const auto deleted = audit::repairRetentionLog(dirFd.get(), dir, false).entries;
    std::map<unsigned, audit::SegmentFiles> localNewest;  // worker -> its newest indexed segment
    std::set<SegmentKey> localIndexes;
    for (const auto& files : audit::listSegments(dir)) {
        if (!files.hasIndex) continue;
        localIndexes.insert({files.worker, files.segment});
        localNewest[files.worker] = files;  // listed in (worker, segment) order
    }

    std::map<unsigned, audit::WorkerHead> archiveHeads;
    std::map<unsigned, std::vector<std::string>> tailMissing;  // worker -> archived, not local
    for (const auto& [id, segment] : view.segments) {
        const auto [worker, number] = id;
        for (const auto& entry : segment.manifests) {
            auto manifest = readManifest(s3, location.bucket, entry, id, report);
            if (!manifest) continue;
            const std::string manifestUrl = url(location.bucket, entry.key);
            audit::WorkerHead head;
            head.worker = worker;
            head.segment = number;
            head.indexPath = manifestUrl;
            if (!parseSeal(manifest->seal(), head.digest)) {
                report(manifestUrl + ": seal '" + manifest->seal() +
                       "' is not a digest (64 lowercase hex digits)");
                continue;
            }
            head.checked = true;
            archiveHeads[worker] = head;
            const std::string label = "worker " + std::to_string(worker) + " segment " +
                                      std::to_string(number);
            if (auto it = local.find(id); it != local.end()) {
                auto localSeal = audit::hexText(it->second.digest.data(), it->second.digest.size());
                if (localSeal == manifest->seal())
                    ++summary.compared;
                else
                    report(it->second.indexPath + ": " + label + " is sealed " + localSeal +
                           ", but the archive holds it sealed " + manifest->seal() + " (" +
                           manifestUrl + "): the local segment was rewritten after it was archived");
                continue;
            }
            auto recorded = std::find_if(deleted.begin(), deleted.end(), [&](const auto& e) {
                return e.worker == worker && e.first <= number && number <= e.last;
            });
            if (recorded != deleted.end()) {
                auto digest = audit::hexText(recorded->lastDigest.data(), recorded->lastDigest.size());
                if (recorded->last == number && digest != manifest->seal())
                    report(dir + "/retention.log: " + label + " deleted with seal " + digest +
                           ", but the archive holds it sealed " + manifest->seal() + " (" +
                           manifestUrl + "): the local chain was rewritten");
                else
                    ++summary.deletedLocally;
                continue;
            }
            if (localIndexes.count(id)) {
                report(dir + "/" + audit::segmentBaseName(worker, number) + ".index: " + label +
                       " has no chained seal, but the archive holds it sealed " +
                       manifest->seal() + " (" + manifestUrl + ")");
                continue;
            }
            auto newest = localNewest.find(worker);
            if (newest == localNewest.end() || number > newest->second.segment)
                tailMissing[worker].push_back(manifestUrl + " (seal " + manifest->seal() + ")");
            else
                report(dir + ": " + label + " is in the archive (" + manifestUrl +
                       ") but not in the directory, and its retention.log records no deletion");
        }
    }
    if (archiveHeads.empty())
        throw std::runtime_error(where + ": no manifest there: nothing archived to compare " +
                                 dir + " with");
    for (const auto& [worker, missing] : tailMissing) {
        auto newest = localNewest.find(worker);
        report(dir + ": worker " + std::to_string(worker) + ": the local log " +
               (newest == localNewest.end()
                    ? std::string("has no segment")
                    : "ends at segment " + std::to_string(newest->second.segment)) +
               ", but the archive holds " + std::to_string(missing.size()) + " newer segment" +
               (missing.size() == 1 ? "" : "s") + ", the newest " + missing.back() +
               ": the local tail was deleted");
    }
    for (const auto& [worker, head] : archiveHeads) summary.archiveHeads.push_back(head);
    return summary;
}

std::vector<std::string> listBoxes(s3::S3Client& s3, const std::string& bucket) {
    auto listed = s3.list(bucket, "");
    if (!listed) throw std::runtime_error(listed.error.message);
    std::set<std::string> boxes;
    for (const auto& entry : *listed) {
        const std::string& key = entry.key;
        // A prefix may itself hold "/segments/" or "/manifests/": every candidate is tried.
        for (std::string_view folder : {"/segments/", "/manifests/"}) {
            for (auto at = key.find(folder); at != std::string::npos; at = key.find(folder, at + 1)) {
                std::string prefix = key.substr(0, at);
                if (archive::parseObjectKey(prefix, key) || archive::parseManifestKey(prefix, key))
                    boxes.insert(prefix);
            }
        }
    }
    return {boxes.begin(), boxes.end()};
}

}  // namespace splicegate::audittool
