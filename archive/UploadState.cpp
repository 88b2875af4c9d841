#include "archive/UploadState.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <stdexcept>
#include <memory>
#include <system_error>

#include "audit/Crc32c.h"

namespace splicegate::archive {
namespace {

constexpr std::string_view kPhases[] = {"sealed", "uploading", "uploaded", "verified",
                                        "conflict"};
constexpr std::string_view kKinds[] = {"data", "index", "connections", "manifest"};
constexpr std::string_view kSuffix = ".upload";
constexpr std::string_view kChecksumField = "crc32c=";

[[noreturn]] void throwSystem(int err, const std::string& what) {
    throw std::system_error(err, std::generic_category(), what);
}

std::string hex32(std::uint32_t value) {
    char text[9];
    std::snprintf(text, sizeof text, "%08x", value);
    return text;
}

template <typename T>
std::optional<T> parseNumber(std::string_view text, int base = 10) {
    T value{};
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, base);
    if (ec != std::errc{} || end != text.data() + text.size() || text.empty()) return std::nullopt;
    return value;
}

// "a=1 b=2" -> the value of `name`, or nullopt.
std::optional<std::string_view> field(std::string_view line, std::string_view name) {
    while (!line.empty()) {
        auto space = line.find(' ');
        auto word = line.substr(0, space);
        if (word.size() > name.size() && word.starts_with(name) && word[name.size()] == '=')
            return word.substr(name.size() + 1);
        if (space == std::string_view::npos) break;
        line.remove_prefix(space + 1);
    }
    return std::nullopt;
}

// Keys, version ids and digests are written as they are: none may hold a space or a newline
// (S3 keys here are built by the archiver; version ids are opaque tokens without them).
void requireToken(std::string_view value, std::string_view what) {
    if (value.find_first_of(" \n\r") != std::string_view::npos)
        throw std::invalid_argument("upload state: " + std::string(what) +
                                    " holds a space or a newline: " + std::string(value));
}

class LineParser {
  public:
    LineParser(const std::string& origin) : origin_(origin) {}

    [[noreturn]] void fail(unsigned line, const std::string& what) const {
        throw std::runtime_error(origin_ + ":" + std::to_string(line) + ": " + what);
    }
    template <typename T>
    T number(std::string_view text, unsigned line, std::string_view what, int base = 10) const {
        auto value = parseNumber<T>(text, base);
        if (!value) fail(line, "bad " + std::string(what) + " '" + std::string(text) + "'");
        return *value;
    }
    ObjectRecord object(std::string_view rest, unsigned line) const {
        ObjectRecord object;
        auto kind = field(rest, "kind");
        auto parsedKind = kind ? kindFromString(*kind) : std::nullopt;
        if (!parsedKind) fail(line, "object without a known kind");
        object.kind = *parsedKind;
        auto key = field(rest, "key");
        auto size = field(rest, "size");
        auto crc = field(rest, "crc32c");
        if (!key || !size || !crc) fail(line, "object without key, size or crc32c");
        object.key = std::string(*key);
        object.size = number<std::uint64_t>(*size, line, "size");
        object.crc32c = number<std::uint32_t>(*crc, line, "crc32c", 16);
        if (auto version = field(rest, "version")) object.versionId = std::string(*version);
        if (auto partBytes = field(rest, "part-bytes"))
            object.partBytes = number<std::uint64_t>(*partBytes, line, "part-bytes");
        return object;
    }

  private:
    const std::string& origin_;
};

}  // namespace

std::string_view toString(UploadPhase phase) noexcept {
    return kPhases[static_cast<int>(phase)];
}

std::optional<UploadPhase> phaseFromString(std::string_view text) noexcept {
    for (std::size_t i = 0; i < std::size(kPhases); ++i)
        if (kPhases[i] == text) return static_cast<UploadPhase>(i);
    return std::nullopt;
}

std::string_view toString(ObjectKind kind) noexcept {
    return kKinds[static_cast<int>(kind)];
}

std::optional<ObjectKind> kindFromString(std::string_view text) noexcept {
    for (std::size_t i = 0; i < std::size(kKinds); ++i)
        if (kKinds[i] == text) return static_cast<ObjectKind>(i);
    return std::nullopt;
}

std::string stateFileName(unsigned worker, std::uint64_t segment) {
    char name[64];
    std::snprintf(name, sizeof name, "w%02u-%010llu", worker,
                  static_cast<unsigned long long>(segment));
    return std::string(name) + std::string(kSuffix);
}

std::string encode(const SegmentUpload& upload) {
    for (const auto& object : upload.objects) {
        requireToken(object.key, "an object key");
        requireToken(object.versionId, "a version id");
    }
    requireToken(upload.sealDigest, "the seal digest");
    requireToken(upload.retainUntil, "the retain-until date");
    std::string text = "worker=" + std::to_string(upload.worker) + "\n";
    text += "segment=" + std::to_string(upload.segment) + "\n";
    text += "phase=" + std::string(toString(upload.phase)) + "\n";
    if (!upload.sealDigest.empty()) text += "seal=" + upload.sealDigest + "\n";
    if (!upload.retainUntil.empty()) text += "retain-until=" + upload.retainUntil + "\n";
    for (const auto& object : upload.objects) {
        text += "object=kind=" + std::string(toString(object.kind)) + " key=" + object.key +
                " size=" + std::to_string(object.size) + " crc32c=" + hex32(object.crc32c);
        if (!object.versionId.empty()) text += " version=" + object.versionId;
        if (object.partBytes) text += " part-bytes=" + std::to_string(*object.partBytes);
        text += "\n";
    }
    if (!upload.problem.empty()) {
        std::string problem = upload.problem;
        for (char& c : problem)
            if (c == '\n' || c == '\r') c = ' ';
        text += "problem=" + problem + "\n";
    }
    text += std::string(kChecksumField) + hex32(audit::crc32c(0, text.data(), text.size())) + "\n";
    return text;
}

SegmentUpload decode(std::string_view text, const std::string& origin) {
    LineParser parse(origin);
    auto checksumAt = text.rfind(std::string("\n") + std::string(kChecksumField));
    if (checksumAt == std::string_view::npos || !text.ends_with('\n'))
        parse.fail(1, "no checksum line: a torn or foreign file");
    auto body = text.substr(0, checksumAt + 1);
    auto stored = text.substr(checksumAt + 1 + kChecksumField.size());
    stored.remove_suffix(1);
    auto expected = parseNumber<std::uint32_t>(stored, 16);
    if (!expected || *expected != audit::crc32c(0, body.data(), body.size()))
        parse.fail(1, "checksum mismatch: the file is damaged");

    SegmentUpload upload;
    bool sawWorker = false, sawSegment = false, sawPhase = false;
    unsigned lineNumber = 0;
    while (!body.empty()) {
        ++lineNumber;
        auto end = body.find('\n');
        auto line = body.substr(0, end);
        body.remove_prefix(end + 1);
        auto equals = line.find('=');
        if (equals == std::string_view::npos) parse.fail(lineNumber, "not key=value");
        auto key = line.substr(0, equals);
        auto value = line.substr(equals + 1);
        if (key == "worker") {
            upload.worker = parse.number<unsigned>(value, lineNumber, "worker");
            sawWorker = true;
        } else if (key == "segment") {
            upload.segment = parse.number<std::uint64_t>(value, lineNumber, "segment");
            sawSegment = true;
        } else if (key == "phase") {
            auto phase = phaseFromString(value);
            if (!phase) parse.fail(lineNumber, "unknown phase '" + std::string(value) + "'");
            upload.phase = *phase;
            sawPhase = true;
        } else if (key == "seal") {
            upload.sealDigest = std::string(value);
        } else if (key == "retain-until") {
            upload.retainUntil = std::string(value);
        } else if (key == "object") {
            upload.objects.push_back(parse.object(value, lineNumber));
        } else if (key == "problem") {
            upload.problem = std::string(value);
        } else {
            parse.fail(lineNumber, "unknown key '" + std::string(key) + "'");
        }
    }
    if (!sawWorker || !sawSegment || !sawPhase) parse.fail(lineNumber, "worker, segment or phase missing");
    return upload;
}

bool mayAdvance(UploadPhase from, UploadPhase to) noexcept {
    if (from == UploadPhase::Conflict || from == UploadPhase::Verified) return from == to;
    if (to == UploadPhase::Conflict) return true;
    return static_cast<int>(to) >= static_cast<int>(from);
}

ExistingObject compareExisting(const ObjectRecord& local, const RemoteObject& remote) noexcept {
    if (!remote.exists) return ExistingObject::Absent;
    if (remote.size != local.size) return ExistingObject::Different;
    // Without a checksum on the server, equal sizes are not proof: it is verified after adoption
    // by reading the object back (the caller's part), so here it counts as different.
    if (!remote.crc32c || *remote.crc32c != local.crc32c) return ExistingObject::Different;
    return ExistingObject::Identical;
}

UploadStateStore::UploadStateStore(std::string dir, Access access)
    : dir_(std::move(dir)), access_(access) {
    if (access_ == Access::ReadWrite && ::mkdir(dir_.c_str(), 0750) != 0 && errno != EEXIST)
        throwSystem(errno, "cannot create the state directory " + dir_);
    dirFd_ = UniqueFd(::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
    if (!dirFd_) throwSystem(errno, "cannot open the state directory " + dir_);
}

std::optional<SegmentUpload> UploadStateStore::load(unsigned worker, std::uint64_t segment) const {
    auto name = stateFileName(worker, segment);
    UniqueFd fd(::openat(dirFd_.get(), name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd) {
        if (errno == ENOENT) return std::nullopt;
        throwSystem(errno, "cannot open " + path(name));
    }
    std::string text;
    char buffer[4096];
    for (;;) {
        ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throwSystem(errno, "cannot read " + path(name));
        if (n == 0) break;
        text.append(buffer, static_cast<std::size_t>(n));
        if (text.size() > (1u << 20)) throw std::runtime_error(path(name) + ": larger than 1 MiB");
    }
    auto upload = decode(text, path(name));
    if (upload.worker != worker || upload.segment != segment)
        throw std::runtime_error(path(name) + ": holds the state of another segment");
    return upload;
}

void UploadStateStore::save(const SegmentUpload& upload) {
    if (access_ == Access::ReadOnly)
        throw std::logic_error(dir_ + ": the upload states are open for reading only");
    if (auto stored = load(upload.worker, upload.segment);
        stored && !mayAdvance(stored->phase, upload.phase))
        throw std::logic_error(path(stateFileName(upload.worker, upload.segment)) + ": " +
                               std::string(toString(stored->phase)) + " cannot become " +
                               std::string(toString(upload.phase)));
    auto name = stateFileName(upload.worker, upload.segment);
    auto temporary = name + ".new";
    auto text = encode(upload);
    {
        UniqueFd fd(::openat(dirFd_.get(), temporary.c_str(),
                             O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0640));
        if (!fd) throwSystem(errno, "cannot create " + path(temporary));
        std::string_view rest = text;
        while (!rest.empty()) {
            ssize_t n = ::write(fd.get(), rest.data(), rest.size());
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) throwSystem(errno, "cannot write " + path(temporary));
            rest.remove_prefix(static_cast<std::size_t>(n));
        }
        if (::fsync(fd.get()) != 0) throwSystem(errno, "cannot fsync " + path(temporary));
    }
    if (::renameat(dirFd_.get(), temporary.c_str(), dirFd_.get(), name.c_str()) != 0)
        throwSystem(errno, "cannot rename " + path(temporary) + " to " + name);
    if (::fsync(dirFd_.get()) != 0) throwSystem(errno, "cannot fsync " + dir_);
}

std::vector<std::pair<unsigned, std::uint64_t>> UploadStateStore::list() const {
    std::vector<std::pair<unsigned, std::uint64_t>> segments;
    UniqueFd scan(::openat(dirFd_.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!scan) throwSystem(errno, "cannot open " + dir_);
    DIR* stream = ::fdopendir(scan.get());
    if (!stream) throwSystem(errno, "cannot read " + dir_);
    scan.release();  // the DIR stream owns it now
    std::unique_ptr<DIR, int (*)(DIR*)> owned(stream, ::closedir);
    while (dirent* entry = ::readdir(stream)) {
        std::string_view name = entry->d_name;
        unsigned worker = 0;
        unsigned long long segment = 0;
        if (!name.ends_with(kSuffix)) continue;
        if (std::sscanf(entry->d_name, "w%u-%llu", &worker, &segment) != 2) continue;
        if (stateFileName(worker, segment) != name) continue;  // only the canonical spelling
        segments.emplace_back(worker, segment);
    }
    return segments;
}

}  // namespace splicegate::archive
