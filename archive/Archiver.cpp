#include "archive/Archiver.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <ctime>
#include <stdexcept>

#include "archive/Gzip.h"
#include "archive/Manifest.h"
#include "archive/ObjectKeys.h"
#include "archive/Parts.h"
#include "archive/s3/FileRangeReader.h"
#include "audit/Crc32c.h"
#include "audit/TextFormat.h"
#include "common/Error.h"
#include "common/UniqueFd.h"

namespace splicegate::archive {
namespace {

constexpr std::int64_t kNsPerSecond = 1'000'000'000;
constexpr std::uint64_t kReadBackPiece = 64u << 20;  // a ranged GET's size when reading back
constexpr std::uint64_t kMaxManifestBytes = 1u << 20;  // ours are a few hundred bytes

UniqueFd openReadOnly(const std::string& path) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd) throw std::runtime_error("cannot open " + path + ": " + errnoText(errno));
    return fd;
}

// CRC-32C of [0, length) of the file, read in pieces.
std::uint32_t fileCrc32c(const std::string& path, std::uint64_t length) {
    auto fd = openReadOnly(path);
    std::vector<char> buffer(1 << 20);
    std::uint32_t crc = 0;
    std::uint64_t done = 0;
    while (done < length) {
        auto want = static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size(), length - done));
        ssize_t n = ::pread(fd.get(), buffer.data(), want, static_cast<off_t>(done));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw std::runtime_error("cannot read " + path + ": " + errnoText(errno));
        if (n == 0) throw std::runtime_error(path + " is shorter than its seal says");
        crc = audit::crc32c(crc, buffer.data(), static_cast<std::size_t>(n));
        done += static_cast<std::uint64_t>(n);
    }
    return crc;
}

// Each part's CRC-32C, the file read once front to back (O_DIRECT where it can: FileRangeReader).
void fileCrc32cs(const std::string& path, std::vector<s3::PartRange>& parts) {
    auto fd = openReadOnly(path);
    s3::FileRangeReader reader({fd.get(), 0, parts.back().offset + parts.back().length});
    std::vector<char> buffer(1 << 20);
    for (auto& part : parts) {
        part.crc32c = 0;
        for (std::uint64_t left = part.length; left > 0;) {
            auto want = static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size(), left));
            ssize_t n = reader.read(buffer.data(), want);
            if (n == 0 || n == -ENODATA)
                throw std::runtime_error(path + " is shorter than its seal says");
            if (n < 0)
                throw std::runtime_error("cannot read " + path + ": " +
                                         errnoText(static_cast<int>(-n)));
            part.crc32c = audit::crc32c(part.crc32c, buffer.data(), static_cast<std::size_t>(n));
            left -= static_cast<std::uint64_t>(n);
        }
    }
}

std::string quoted(const std::string& text) { return audittool::jsonString(text); }

std::string hex32(std::uint32_t value) {
    char text[16];
    std::snprintf(text, sizeof text, "%08x", value);
    return text;
}

}  // namespace

std::string rfc3339(std::int64_t ns) {
    auto t = static_cast<std::time_t>(ns / kNsPerSecond);
    std::tm parts{};
    ::gmtime_r(&t, &parts);
    char text[64];
    std::snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02dZ", parts.tm_year + 1900,
                  parts.tm_mon + 1, parts.tm_mday, parts.tm_hour, parts.tm_min, parts.tm_sec);
    return text;
}

std::string manifestJson(const SegmentUpload& state, const SealedSegment& sealed) {
    std::string out = "{\"format\":1,\"worker\":" + std::to_string(sealed.worker) +
                      ",\"segment\":" + std::to_string(sealed.segment) +
                      ",\"created_ns\":" + std::to_string(sealed.createdNs) +
                      ",\"newest_ns\":" + std::to_string(sealed.newestNs) +
                      ",\"seal\":" + quoted(sealed.sealDigest) +
                      ",\"keyed\":" + (sealed.keyed ? "true" : "false") +
                      ",\"failed\":" + (sealed.failed ? "true" : "false") +
                      ",\"connections\":" + std::to_string(sealed.connections.size()) +
                      ",\"retain_until\":" + quoted(state.retainUntil) + ",\"objects\":[";
    bool first = true;
    for (const auto& object : state.objects) {
        if (object.kind == ObjectKind::Manifest) continue;
        out += std::string(first ? "" : ",") + "{\"kind\":" +
               quoted(std::string(toString(object.kind))) + ",\"key\":" + quoted(object.key) +
               ",\"version\":" + quoted(object.versionId) +
               ",\"size\":" + std::to_string(object.size) + ",\"crc32c\":\"" +
               hex32(object.crc32c) + "\"}";
        first = false;
    }
    return out + "]}\n";
}

// An object's bytes: a range of a local file, or bytes built in memory.
struct Archiver::Body {
    std::string path;  // empty: `bytes`
    std::uint64_t length = 0;
    std::string_view bytes;
    const std::vector<CrcPiece>* pieces = nullptr;  // the data file's, when its chunks tile it
};

Archiver::Archiver(ObjectStore& bucket, UploadStateStore& states, ArchiveSettings settings)
    : bucket_(bucket), states_(states), settings_(std::move(settings)) {
    if (auto problem = checkPrefix(settings_.prefix); !problem.empty())
        throw std::invalid_argument("--s3-prefix '" + settings_.prefix + "' " + problem);
}

void Archiver::save(const SegmentUpload& state, const std::string& point) {
    if (hook_) hook_("before saving " + point);
    states_.save(state);
    if (hook_) hook_(point);
}

ShipOutcome Archiver::conflict(SegmentUpload& state, const std::string& problem) {
    state.phase = UploadPhase::Conflict;
    state.problem = problem;
    save(state, "conflict");
    return {ShipOutcome::Kind::Conflict, problem, 0};
}

SegmentUpload Archiver::begin(const SealedSegment& sealed, const audit::SegmentFiles& files,
                              std::int64_t nowNs, std::string_view connections) {
    SegmentUpload state;
    state.worker = sealed.worker;
    state.segment = sealed.segment;
    state.phase = UploadPhase::Uploading;
    state.sealDigest = sealed.sealDigest;
    state.retainUntil =
        rfc3339(nowNs + static_cast<std::int64_t>(settings_.lockDays) * 86400 * kNsPerSecond);
    SegmentId id{sealed.worker, sealed.segment, sealed.createdNs};
    auto dataCrc = sealed.dataCrc32c ? *sealed.dataCrc32c
                                     : fileCrc32c(files.dataPath, sealed.dataBytes);
    state.objects.push_back({ObjectKind::Data, objectKey(settings_.prefix, id, ObjectKind::Data),
                             sealed.dataBytes, dataCrc, "", std::nullopt});
    state.objects.push_back({ObjectKind::Index, objectKey(settings_.prefix, id, ObjectKind::Index),
                             sealed.indexBytes, fileCrc32c(files.indexPath, sealed.indexBytes),
                             "", std::nullopt});
    state.objects.push_back({ObjectKind::Connections,
                             objectKey(settings_.prefix, id, ObjectKind::Connections),
                             connections.size(),
                             audit::crc32c(0, connections.data(), connections.size()), "",
                             std::nullopt});
    return state;
}

Archiver::Body Archiver::bodyOf(const ObjectRecord& object, const audit::SegmentFiles& files,
                                const SealedSegment& sealed, std::string_view built) {
    switch (object.kind) {
        case ObjectKind::Data:
            return {files.dataPath, object.size, {},
                    sealed.dataCrc32c && *sealed.dataCrc32c == object.crc32c ? &sealed.dataPieces
                                                                             : nullptr};
        case ObjectKind::Index:
            return {files.indexPath, object.size, {}, nullptr};
        case ObjectKind::Connections:
        case ObjectKind::Manifest:
            return {{}, 0, built, nullptr};
    }
    return {};
}

std::uint64_t Archiver::partBytesNow(const ObjectRecord& object) const {
    return multipart(object) ? partBytesFor(object.size, settings_.partBytes) : 0;
}

std::vector<s3::PartRange> Archiver::partsOf(const ObjectRecord& object, const Body& body,
                                             std::uint64_t partBytes) const {
    std::vector<s3::PartRange> parts;
    if (body.pieces) parts = partsFromPieces(*body.pieces, partBytes);
    if (parts.empty()) {
        parts = equalParts(object.size, partBytes);
        if (!body.path.empty()) {
            fileCrc32cs(body.path, parts);
        } else {
            for (auto& part : parts)
                part.crc32c = audit::crc32c(0, body.bytes.data() + part.offset, part.length);
        }
    }
    if (combinedCrc32c(parts) != object.crc32c)
        throw std::runtime_error(
            (body.path.empty() ? object.key : body.path) +
            ": its parts' CRC-32C differs from the one taken when the segment was first shipped "
            "(the file changed)");
    return parts;
}

Archiver::Checksum Archiver::compareChecksum(const ObjectRecord& local,
                                             const s3::ObjectInfo& remote, const Body& body,
                                             std::string& difference) const {
    if (remote.crc32c) {
        if (*remote.crc32c == local.crc32c) return Checksum::Same;
        difference = "CRC-32C differs";
        return Checksum::Differs;
    }
    auto count = compositePartCount(remote.checksumCrc32c);
    if (!count) return Checksum::Unknown;  // the server keeps none (radosgw 16)
    // Put in parts: S3's checksum is the composite of the parts' CRCs, which depends on where
    // the parts were cut: as recorded when it was put, else as this archiver would cut them now.
    auto partBytes = local.partBytes.value_or(partBytesNow(local));
    std::string expected = "none (put in one PUT)";
    if (partBytes > 0) {
        auto parts = partsOf(local, body, partBytes);
        expected = compositeCrc32c(parts);
        if (expected == remote.checksumCrc32c) return Checksum::Same;
    }
    if (!local.partBytes) return Checksum::Unknown;  // perhaps only cut otherwise
    difference = "composite CRC-32C " + remote.checksumCrc32c + ", expected " + expected;
    return Checksum::Differs;
}

std::string Archiver::readBackCrc32c(const std::string& key, const std::string& versionId,
                                     std::uint64_t size, std::uint32_t& crc) {
    crc = 0;
    for (std::uint64_t first = 0; first < size; first += kReadBackPiece) {
        auto last = std::min(size, first + kReadBackPiece) - 1;
        auto next = bucket_.crc32c(key, versionId, first, last, crc);
        if (!next) return next.error.message;
        crc = *next;
    }
    return {};
}

std::string Archiver::sameBytes(ObjectRecord& local, const s3::ObjectInfo& remote,
                                const Body& body, bool& identical) {
    identical = false;
    if (remote.size != local.size) return {};
    // Adoption has no version of its own yet: a cut recorded before a PUT that may never have
    // landed is a guess like the current one, so a composite that differs is settled by the bytes.
    std::string difference;
    auto checksum = compareChecksum(local, remote, body, difference);
    if (checksum == Checksum::Same) {
        identical = true;
        if (!remote.crc32c) local.partBytes = local.partBytes.value_or(partBytesNow(local));
        return {};
    }
    if (checksum == Checksum::Differs && remote.crc32c) return {};
    std::uint32_t crc = 0;
    if (auto problem = readBackCrc32c(local.key, remote.versionId, remote.size, crc);
        !problem.empty())
        return problem;
    identical = crc == local.crc32c;
    // Where its parts were cut is not known: verification reads it back too, unless the
    // server's checksum is a whole-object one.
    if (identical) local.partBytes.reset();
    return {};
}

std::optional<std::string> Archiver::manifestRetainUntil(const ObjectRecord& data) {
    auto parsed = parseObjectKey(settings_.prefix, data.key);
    if (!parsed) return std::nullopt;
    auto key = manifestKey(settings_.prefix, parsed->id);
    // A manifest that cannot be read here is not adopted from: the manifest's own step, later,
    // meets the same error and fails the segment with it.
    auto head = bucket_.head(key);
    if (!head || head->size == 0 || head->size > kMaxManifestBytes) return std::nullopt;
    auto bytes = bucket_.get(key, {}, 0, head->size - 1);
    if (!bytes) return std::nullopt;
    std::string problem;
    auto manifest = parseManifest(*bytes, problem);
    if (!manifest) return std::nullopt;
    auto ns = audittool::parseRfc3339(manifest->retain_until());
    if (!ns) return std::nullopt;
    return rfc3339(*ns);
}

void Archiver::adoptRetainUntil(SegmentUpload& state, const ObjectRecord& object,
                                const s3::ObjectInfo& existing) {
    // The manifest, where the first run got that far, records the retain-until the segment was
    // shipped with; the data object's own lock may be later (radosgw gives a multipart upload
    // the bucket's default retention, counted from its completion), and the manifest put again
    // must be the same bytes to be adopted.
    if (auto recorded = manifestRetainUntil(object)) {
        state.retainUntil = *recorded;
        return;
    }
    auto until = existing.retainUntil;
    if (until.empty())
        if (auto retention = bucket_.getRetention(object.key, object.versionId))
            until = retention->retainUntil;
    if (auto ns = audittool::parseRfc3339(until)) state.retainUntil = rfc3339(*ns);
}

std::string Archiver::upload(SegmentUpload& state, ObjectRecord& object, const Body& body,
                             bool& isConflict, std::uint64_t& bytesPut) {
    isConflict = false;
    auto existing = bucket_.head(object.key);
    if (existing) {
        bool identical = false;
        if (auto problem = sameBytes(object, *existing, body, identical); !problem.empty())
            return problem;
        if (!identical) {
            isConflict = true;
            return bucket_.describe() + "/" + object.key + " exists with other bytes (size " +
                   std::to_string(existing->size) + ", ours " + std::to_string(object.size) +
                   "): not overwritten";
        }
        if (existing->versionId.empty())
            return bucket_.describe() + "/" + object.key +
                   ": no version id (the bucket is not versioned; Object Lock needs it)";
        object.versionId = existing->versionId;  // shipped before a crash: adopted
        // A segment begun again (its state lost) keeps the lock its objects were put with: the
        // first run's retain-until, which the manifest records too. A new one from this run's
        // clock would make the manifest differ (a false conflict) and extend every lock.
        if (object.kind == ObjectKind::Data) adoptRetainUntil(state, object, *existing);
        return {};
    }
    if (existing.error.httpStatus != 404) return existing.error.message;
    // The cut is saved before the PUT, so that whatever lands under the key can be compared
    // with the composite checksum the server gives it, even after a restart with another
    // --s3-part-mb.
    if (auto partBytes = partBytesNow(object); object.partBytes != partBytes) {
        object.partBytes = partBytes;
        save(state, "cut " + std::string(toString(object.kind)));
    }
    s3::PutRequest request;
    request.key = object.key;
    request.crc32c = object.crc32c;
    // --s3-payload-hash: the SHA-256 is a second read of every byte (about 0.65 CPU-s per GiB
    // here) and buys nothing the signed x-amz-checksum-crc32c and TLS do not, except over plain
    // HTTP on an untrusted network or with a server that ignores the CRC header (radosgw).
    request.unsignedPayload = settings_.unsignedPayload;
    request.lockMode = settings_.lockMode;
    request.retainUntil = state.retainUntil;
    UniqueFd file;
    if (!body.path.empty()) {
        file = openReadOnly(body.path);
        request.file = s3::FileRange{file.get(), 0, body.length};
    } else {
        request.body = body.bytes;
    }
    if (object.kind == ObjectKind::Connections) {
        request.contentType = "application/x-ndjson";
        request.contentEncoding = "gzip";
    } else if (object.kind == ObjectKind::Manifest) {
        request.contentType = "application/json";
    } else {
        request.contentType = "application/octet-stream";
    }
    auto put = *object.partBytes > 0
                   ? bucket_.putMultipart(std::move(request),
                                          partsOf(object, body, *object.partBytes))
                   : bucket_.put(std::move(request));
    if (!put) return put.error.message;
    if (put->versionId.empty())
        return bucket_.describe() + "/" + object.key +
               ": the server gave no version id (the bucket is not versioned; Object Lock needs it)";
    object.versionId = put->versionId;
    bytesPut += object.size;
    return {};
}

std::string Archiver::verify(const SegmentUpload& state, const ObjectRecord& object,
                             const Body& body) {
    auto where = bucket_.describe() + "/" + object.key + " version " + object.versionId;
    auto head = bucket_.head(object.key, object.versionId);
    if (!head) return head.error.message;
    if (head->size != object.size)
        return where + ": size " + std::to_string(head->size) + ", expected " +
               std::to_string(object.size);
    // Verified means the CRC-32C was confirmed: by the server's checksum where it keeps one
    // that can be compared, else by reading this version back.
    std::string difference;
    auto checksum = compareChecksum(object, *head, body, difference);
    if (checksum == Checksum::Differs) return where + ": " + difference;
    if (checksum == Checksum::Unknown) {
        std::uint32_t crc = 0;
        if (auto problem = readBackCrc32c(object.key, object.versionId, head->size, crc);
            !problem.empty())
            return problem;
        if (crc != object.crc32c)
            return where + ": CRC-32C read back " + hex32(crc) + ", expected " +
                   hex32(object.crc32c);
    }
    auto lock = *head;
    if (lock.lockMode.empty() || lock.retainUntil.empty()) {
        auto retention = bucket_.getRetention(object.key, object.versionId);
        if (retention) lock = *retention;
    }
    auto wanted = audittool::parseRfc3339(state.retainUntil);
    auto has = audittool::parseRfc3339(lock.retainUntil);
    bool locked = lock.lockMode == settings_.lockMode && wanted && has && *has + kNsPerSecond >= *wanted;
    if (locked) return {};
    // The server ignored the lock headers (radosgw does on multipart uploads): set it on the
    // version, then read it back.
    auto set = bucket_.putRetention(object.key, object.versionId, settings_.lockMode,
                                    state.retainUntil);
    if (!set) return set.error.message;
    auto retention = bucket_.getRetention(object.key, object.versionId);
    if (!retention) return retention.error.message;
    has = audittool::parseRfc3339(retention->retainUntil);
    if (retention->lockMode != settings_.lockMode || !has || !wanted || *has + kNsPerSecond < *wanted)
        return where + ": lock is '" + retention->lockMode + "' until '" +
               retention->retainUntil + "', expected " + settings_.lockMode + " until " +
               state.retainUntil;
    return {};
}

s3::Result<unsigned> Archiver::abortUploads(const std::string& prefix,
                                           const std::function<bool(const std::string&)>& ours) {
    auto uploads = bucket_.listUploads(prefix);
    if (!uploads) return s3::Result<unsigned>::failure(uploads.error);
    unsigned aborted = 0;
    for (const auto& upload : *uploads) {
        if (!ours(upload.key)) continue;
        auto done = bucket_.abortUpload(upload.key, upload.uploadId);
        if (!done) return s3::Result<unsigned>::failure(done.error);
        ++aborted;
    }
    return s3::Result<unsigned>::success(aborted);
}

s3::Result<unsigned> Archiver::abortStaleUploads() {
    const auto& prefix = settings_.prefix;
    return abortUploads(prefix + "/", [&](const std::string& key) {
        return parseObjectKey(prefix, key).has_value() || parseManifestKey(prefix, key).has_value();
    });
}

ShipOutcome Archiver::ship(const audit::SegmentFiles& files, std::int64_t nowNs) {
    std::optional<SealedSegment> sealed;
    std::string name = audit::segmentBaseName(files.worker, files.segment);
    try {
        sealed = readSealedSegment(files);
        if (!sealed) return {ShipOutcome::Kind::NotReady, name + ": not sealed yet", 0};
        auto stored = states_.load(sealed->worker, sealed->segment);
        if (stored && stored->phase == UploadPhase::Verified)
            return {ShipOutcome::Kind::AlreadyVerified, {}, 0};
        if (stored && stored->phase == UploadPhase::Conflict)
            return {ShipOutcome::Kind::Conflict, stored->problem, 0};
        SegmentUpload state;
        if (stored && stored->phase != UploadPhase::Sealed) {
            state = *stored;
            if (state.sealDigest != sealed->sealDigest)
                return conflict(state, name + ": its seal changed since it was first shipped (" +
                                           state.sealDigest + ", now " + sealed->sealDigest +
                                           "): the local segment was rewritten");
        }
        // The objects built in memory, each at most once per call: the connections object (its
        // CRC for the state, its bytes for the PUT) and the manifest.
        std::optional<std::string> connections, manifestBytes;
        auto connectionsObject = [&]() -> const std::string& {
            if (!connections) connections = gzip(connectionsJsonLines(*sealed));
            return *connections;
        };
        auto built = [&](ObjectKind kind) -> std::string_view {
            if (kind == ObjectKind::Connections) return connectionsObject();
            if (kind != ObjectKind::Manifest) return {};
            if (!manifestBytes) manifestBytes = manifestJson(state, *sealed);
            return *manifestBytes;
        };
        if (!stored || stored->phase == UploadPhase::Sealed) {
            state = begin(*sealed, files, nowNs, connectionsObject());
            save(state, "uploading");
        }
        // Resumed: a run killed during a multipart upload left its parts behind (the startup
        // sweep finds them too; this covers a segment retried while the process runs).
        if (stored && stored->phase == UploadPhase::Uploading)
            for (const auto& object : state.objects) {
                if (!object.versionId.empty()) continue;
                auto aborted = abortUploads(object.key, [&](const std::string& key) {
                    return key == object.key;
                });
                if (!aborted)
                    return {ShipOutcome::Kind::Failed,
                            name + ": aborting the unfinished uploads of " + object.key + ": " +
                                aborted.error.message,
                            0};
            }
        std::uint64_t bytesPut = 0;
        auto step = [&](ObjectRecord& object) -> std::optional<ShipOutcome> {
            if (!object.versionId.empty()) return std::nullopt;
            bool isConflict = false;
            auto problem = upload(state, object, bodyOf(object, files, *sealed, built(object.kind)),
                                  isConflict, bytesPut);
            if (isConflict) return conflict(state, name + ": " + problem);
            if (!problem.empty())
                return ShipOutcome{ShipOutcome::Kind::Failed, name + ": " + problem, bytesPut};
            save(state, "put " + std::string(toString(object.kind)));
            return std::nullopt;
        };
        for (auto& object : state.objects)
            if (object.kind != ObjectKind::Manifest)
                if (auto stop = step(object)) return *stop;
        if (state.phase == UploadPhase::Uploading) {
            state.phase = UploadPhase::Uploaded;
            save(state, "uploaded");
        }
        // The manifest, where a resumed state has it already, is verified after its own step.
        for (const auto& object : state.objects) {
            if (object.kind == ObjectKind::Manifest) continue;
            if (auto problem =
                    verify(state, object, bodyOf(object, files, *sealed, built(object.kind)));
                !problem.empty())
                return {ShipOutcome::Kind::Failed, name + ": not verified: " + problem, bytesPut};
        }
        auto manifest = std::find_if(state.objects.begin(), state.objects.end(), [](auto& o) {
            return o.kind == ObjectKind::Manifest;
        });
        if (manifest == state.objects.end()) {
            auto bytes = built(ObjectKind::Manifest);
            state.objects.push_back({ObjectKind::Manifest,
                                     manifestKey(settings_.prefix, {sealed->worker, sealed->segment,
                                                                    sealed->createdNs}),
                                     bytes.size(), audit::crc32c(0, bytes.data(), bytes.size()),
                                     "", std::nullopt});
            manifest = std::prev(state.objects.end());
        }
        if (auto stop = step(*manifest)) return *stop;
        if (auto problem = verify(state, *manifest,
                                  bodyOf(*manifest, files, *sealed, built(ObjectKind::Manifest)));
            !problem.empty())
            return {ShipOutcome::Kind::Failed, name + ": manifest not verified: " + problem,
                    bytesPut};
        state.phase = UploadPhase::Verified;
        save(state, "verified");
        return {ShipOutcome::Kind::Shipped, {}, bytesPut};
    } catch (const std::logic_error&) {
        throw;  // a state machine fault, not the bucket's or the files'
    } catch (const std::exception& e) {
        return {ShipOutcome::Kind::Failed, name + ": " + e.what(), 0};
    }
}

}  // namespace splicegate::archive
