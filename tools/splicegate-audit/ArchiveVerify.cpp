#include "tools/splicegate-audit/ArchiveVerify.h"

#include <fcntl.h>
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

#include "archive/Manifest.h"
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
    // A key whose versions all hold the same bytes (readBucket): each of its version ids.
    std::map<ObjectKind, std::set<std::string>> twins;
};

struct ArchivedSegment {
    std::map<std::int64_t, SegmentCopy> copies;  // by creation time (to the second)
    std::vector<s3::VersionEntry> manifests;
};

struct BucketView {
    std::map<SegmentKey, ArchivedSegment> segments;
    std::uint64_t objects = 0;
};

// Whether every version of a key holds the same bytes: the same size and ETag (a single PUT's
// is the MD5 of its body), and the same CRC-32C where the server keeps one. `what` says what
// was compared; an error is reported and counts as a difference.
bool identicalVersions(s3::S3Client& s3, const std::string& bucket,
                       const std::vector<s3::VersionEntry>& list, std::string& what,
                       const LineSink& report) {
    std::optional<s3::ObjectInfo> first;
    bool crcCompared = false;
    for (const auto& version : list) {
        if (version.deleteMarker || version.size != list.front().size) return false;
        auto info = s3.head(bucket, version.key, version.versionId);
        if (!info) {
            report(info.error.message);
            return false;
        }
        if (info->etag.empty()) return false;
        if (!first) {
            first = *info;
            continue;
        }
        if (info->etag != first->etag) return false;
        if (info->crc32c && first->crc32c) {
            if (*info->crc32c != *first->crc32c) return false;
            crcCompared = true;
        }
    }
    what = crcCompared ? "size, ETag and CRC-32C" : "size and ETag";
    return true;
}

// One ListObjectVersions of the prefix. Every key must have exactly one version: the archiver
// puts an object once, and Object Lock keeps what it put, so a second version of other bytes (or
// a delete marker) is something written to the archive after it: an alarm. Versions of the same
// bytes are the one benign case (docs/archive.md): an archiver killed while the server finished
// its PUT, restarted in that moment, found no object and put it again; the manifest names one of
// them, and which one does not matter.
BucketView readBucket(s3::S3Client& s3, const ArchiveLocation& location, const LineSink& report,
                      const LineSink& note) {
    auto versions = s3.listVersions(location.bucket, location.prefix + "/");
    if (!versions) throw std::runtime_error(versions.error.message);
    std::map<std::string, std::vector<s3::VersionEntry>> byKey;
    for (auto& version : *versions) byKey[version.key].push_back(version);
    BucketView view;
    for (const auto& [key, list] : byKey) {
        std::set<std::string> twins;
        if (list.size() > 1) {
            std::string ids;
            for (const auto& version : list)
                ids += (ids.empty() ? "" : ", ") + version.versionId +
                       (version.deleteMarker ? " (delete marker)" : "");
            const std::string head = url(location.bucket, key) + ": " +
                                     std::to_string(list.size()) + " versions (" + ids + ")";
            std::string what;
            if (identicalVersions(s3, location.bucket, list, what, report)) {
                note(head + " with the same " + what +
                     ": one object put twice (an archiver restarted while the server finished "
                     "its PUT), not a second write of other bytes");
                for (const auto& version : list) twins.insert(version.versionId);
            } else {
                report(head + ": an archived object was written again or deleted after it was "
                              "archived");
            }
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
            if (!twins.empty()) copy.twins[parsed->kind] = std::move(twins);
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
    std::string problem;
    auto parsed = archive::parseManifest(*bytes, problem);
    if (!parsed) {
        report(where + ": not a manifest: " + problem);
        return std::nullopt;
    }
    auto& manifest = *parsed;
    if (manifest.worker() != segment.first || manifest.segment() != segment.second) {
        report(where + ": names worker " + std::to_string(manifest.worker()) + " segment " +
               std::to_string(manifest.segment()) + ", but its key says worker " +
               std::to_string(segment.first) + " segment " + std::to_string(segment.second));
        return std::nullopt;
    }
    return parsed;
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
        auto twins = copy.twins.find(*kind);
        const bool sameBytes = twins != copy.twins.end() && twins->second.count(object.version());
        if (object.version() != entry.versionId && !sameBytes)
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

// Bytes of the regular files in `dir` now: what staging holds, measured rather than counted.
std::uint64_t directoryBytes(const std::string& dir) {
    std::uint64_t bytes = 0;
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator(dir, error))
        if (entry.is_regular_file(error)) bytes += entry.file_size(error);
    return bytes;
}

// Walks a box's segments in (worker, segment) order for the local verifier
// (VerifyOptions::nextSegment): checks each one's layout and manifest, fetches its data and index
// objects into the staging directory, and removes them when the verifier asks for the next, so
// that staging holds one segment at a time however large the archive is.
class SegmentWalk {
  public:
    SegmentWalk(s3::S3Client& s3, const ArchiveLocation& location, const BucketView& view,
                const std::string& staging, ArchiveVerifySummary& summary, const LineSink& report,
                const LineSink& note)
        : s3_(s3),
          location_(location),
          view_(view),
          staging_(staging),
          summary_(summary),
          report_(report),
          note_(note),
          where_(url(location.bucket, location.prefix)),
          at_(view.segments.begin()) {}

    struct SealCheck {
        std::string manifestUrl;
        std::string seal;       // the manifest's
        std::string indexName;  // the fetched index file's name
    };

    // The next segment with a fetched object, nullopt after the last.
    std::optional<audit::SegmentFiles> next(std::vector<audit::RetentionLogEntry>& learnt) {
        unstage();
        while (at_ != view_.segments.end()) {
            auto it = at_++;
            if (auto files = stage(it, learnt)) return files;
        }
        return std::nullopt;
    }

    // A fetched file's name -> its object (s3://BUCKET/KEY).
    const std::map<std::string, std::string>& names() const noexcept { return names_; }
    const std::vector<SealCheck>& sealChecks() const noexcept { return sealChecks_; }

  private:
    using Segments = std::map<SegmentKey, ArchivedSegment>;

    void unstage() {
        for (const auto& path : staged_)
            if (::unlink(path.c_str()) != 0 && errno != ENOENT)
                throwErrno(errno, "cannot remove " + path);
        staged_.clear();
    }

    // The checks of one segment's layout; its files when one of them could be fetched.
    std::optional<audit::SegmentFiles> stage(Segments::const_iterator it,
                                             std::vector<audit::RetentionLogEntry>& learnt) {
        const std::string& bucket = location_.bucket;
        const auto& [id, segment] = *it;
        const auto [worker, number] = id;
        const std::string label =
            where_ + ": worker " + std::to_string(worker) + " segment " + std::to_string(number);
        auto next = std::next(it);
        const bool newest = next == view_.segments.end() || next->first.first != worker;
        const bool oldest = !previous_ || previous_->first != worker;

        // Gaps: a number missing between two the bucket holds.
        std::string firstKey =
            !segment.copies.empty() && !segment.copies.begin()->second.objects.empty()
                ? segment.copies.begin()->second.objects.begin()->second.key
            : !segment.manifests.empty() ? segment.manifests.front().key
                                         : std::string();
        if (previous_ && previous_->first == worker && number > previous_->second + 1)
            report_(where_ + ": worker " + std::to_string(worker) + ": segment" +
                    (number == previous_->second + 2
                         ? " " + std::to_string(previous_->second + 1) + " is"
                         : "s " + std::to_string(previous_->second + 1) + " to " +
                               std::to_string(number - 1) + " are") +
                    " missing between " + previousKey_ + " and " + url(bucket, firstKey) +
                    " (a gap in the archive)");
        previous_ = id;
        previousKey_ = url(bucket, firstKey);

        // Forks: two copies, or two manifests, of one segment.
        if (segment.copies.size() > 1)
            report_(label + ": " + std::to_string(segment.copies.size()) +
                    " different copies in the bucket (a fork): " + describeCopies(bucket, segment));
        if (segment.manifests.size() > 1) {
            std::string keys;
            for (const auto& manifest : segment.manifests)
                keys += (keys.empty() ? "" : ", ") + url(bucket, manifest.key);
            report_(label + ": " + std::to_string(segment.manifests.size()) +
                    " manifests (a fork): " + keys);
        }

        std::optional<archive::ArchiveManifest> manifest;
        std::string manifestUrl;
        if (!segment.manifests.empty()) {
            manifestUrl = url(bucket, segment.manifests.front().key);
            manifest = readManifest(s3_, bucket, segment.manifests.front(), id, report_);
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
            report_(manifestUrl + ": names a segment of which the bucket holds no object");
            return std::nullopt;
        }
        if (segment.manifests.empty()) {
            // The archiver puts the manifest last: the newest segment may be on its way.
            if (newest && copy->objects.size() < 3) {
                note_(label + ": no manifest yet, objects still being shipped: not checked");
                return std::nullopt;
            }
            if (newest) {
                note_(label + ": no manifest yet (the archiver has not verified it): checked "
                      "without one");
            } else {
                report_(label + ": no manifest " +
                        url(bucket, archive::manifestKey(location_.prefix,
                                                         {worker, number, copy->createdNs})) +
                        " (the archiver writes it once the segment's objects are verified)");
            }
        }
        for (auto kind : {ObjectKind::Data, ObjectKind::Index, ObjectKind::Connections})
            if (!copy->objects.count(kind))
                report_(url(bucket, archive::objectKey(location_.prefix,
                                                       {worker, number, copy->createdNs}, kind)) +
                        ": missing (the segment's other objects are there)");

        audit::SegmentFiles files;
        files.worker = worker;
        files.segment = number;
        files.dataName = audit::segmentBaseName(worker, number) + ".data";
        files.indexName = audit::segmentBaseName(worker, number) + ".index";
        files.dataPath = staging_ + "/" + files.dataName;
        files.indexPath = staging_ + "/" + files.indexName;
        std::map<ObjectKind, Fetched> fetched;
        for (const auto& [kind, entry] : copy->objects) {
            // The connections object is not part of the chain; its bytes are checked against
            // the manifest only.
            const std::string path = kind == ObjectKind::Data    ? files.dataPath
                                     : kind == ObjectKind::Index ? files.indexPath
                                                                 : std::string();
            if (!path.empty()) staged_.push_back(path);
            auto got = fetch(s3_, bucket, entry, path, report_);
            if (!got) continue;
            summary_.bytesFetched += got->size;
            fetched[kind] = *got;
            if (kind == ObjectKind::Data) files.hasData = true;
            if (kind == ObjectKind::Index) files.hasIndex = true;
            if (!path.empty()) names_[path.substr(staging_.size() + 1)] = url(bucket, entry.key);
        }
        // A failed fetch leaves a partial file the verifier must not read.
        if (!files.hasData) ::unlink(files.dataPath.c_str());
        if (!files.hasIndex) ::unlink(files.indexPath.c_str());
        summary_.stagedPeakBytes = std::max(summary_.stagedPeakBytes, directoryBytes(staging_));
        if (manifest) {
            checkManifestObjects(*manifest, manifestUrl, *copy, fetched, report_);
            if (files.hasIndex)
                sealChecks_.push_back({manifestUrl, manifest->seal(), files.indexName});
        }
        if (oldest && files.hasIndex) startsLater(files, learnt);
        if (!files.hasData && !files.hasIndex) return std::nullopt;
        return files;
    }

    // A box whose retention ran before the archiver first shipped has an archive that starts
    // later than its chain: the oldest archived segment of a worker names a predecessor the
    // bucket never received (Object Lock keeps anything that was put, so nothing was removed).
    void startsLater(const audit::SegmentFiles& files,
                     std::vector<audit::RetentionLogEntry>& learnt) {
        auto predecessor = predecessorDigest(files.indexPath);
        if (!predecessor || *predecessor == audit::Digest{} || files.segment == 0) return;
        learnt.push_back({files.worker, 0, files.segment - 1, *predecessor, 0});
        note_(names_[files.indexName] + ": the archive of worker " +
              std::to_string(files.worker) +
              " starts here: the segments before it (the last sealed " +
              audit::hexText(predecessor->data(), predecessor->size()) +
              ") were never archived, deleted on the box before the archiver ran");
    }

    s3::S3Client& s3_;
    const ArchiveLocation& location_;
    const BucketView& view_;
    const std::string staging_;
    ArchiveVerifySummary& summary_;
    const LineSink& report_;
    const LineSink& note_;
    const std::string where_;
    Segments::const_iterator at_;
    std::optional<SegmentKey> previous_;
    std::string previousKey_;
    std::vector<std::string> staged_;  // the current segment's files
    std::map<std::string, std::string> names_;
    std::vector<SealCheck> sealChecks_;
};

}  // namespace

ArchiveVerifySummary verifyArchive(s3::S3Client& s3, const ArchiveLocation& location,
                                   const audit::VerifyOptions& options,
                                   const LineSink& onProblem) {
    ArchiveVerifySummary summary;
    const LineSink report = [&](const std::string& line) {
        ++summary.problems;
        onProblem(line);
    };
    const LineSink note = [&](const std::string& line) {
        if (options.onNote) options.onNote(line);
    };
    const std::string& bucket = location.bucket;
    const std::string where = url(bucket, location.prefix);
    BucketView view = readBucket(s3, location, report, note);
    summary.objects = view.objects;
    if (view.segments.empty())
        throw std::runtime_error(where + ": no archive there (no " + location.prefix +
                                 "/segments/ or " + location.prefix + "/manifests/ objects)");

    WorkDirectory work;
    SegmentWalk walk(s3, location, view, work.path(), summary, report, note);
    const auto& names = walk.names();
    audit::VerifyOptions local = options;
    local.nextSegment = [&](std::vector<audit::RetentionLogEntry>& learnt) {
        return walk.next(learnt);
    };
    std::map<std::string, std::string> seals;  // index file name -> the seal it ends with
    local.onNote = [&](const std::string& line) { note(toArchiveNames(line, work.path(), names)); };
    local.onSeal = [&](const audit::WorkerHead& head) {
        seals[head.indexPath.substr(head.indexPath.rfind('/') + 1)] =
            audit::hexText(head.digest.data(), head.digest.size());
        if (options.onSeal) options.onSeal(head);
    };
    // Nothing fetched (each object was reported): there was no chain to check, so the
    // verifier's word on an empty directory is not reported.
    auto chain = audit::verifyDirectory(
        work.path(),
        [&](const std::string& line) {
            if (names.empty()) return;
            report(toArchiveNames(line, work.path(), names));
        },
        local);
    if (names.empty()) return summary;
    summary.chain = chain;
    for (const auto& check : walk.sealChecks()) {
        auto it = seals.find(check.indexName);
        const std::string& index = names.at(check.indexName);
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
                                  const LineSink& onProblem, const LineSink& onNote) {
    AnchorSummary summary;
    auto report = [&](const std::string& line) {
        ++summary.problems;
        onProblem(line);
    };
    const std::string where = url(location.bucket, location.prefix);
    BucketView view = readBucket(s3, location, report, onNote);

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
