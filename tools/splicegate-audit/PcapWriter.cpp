#include "tools/splicegate-audit/PcapWriter.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/Error.h"

namespace splicegate::audittool {
namespace {

constexpr std::uint32_t kMagicNanoseconds = 0xa1b23c4d;
constexpr std::size_t kBufferBytes = 1 << 20;

struct FileHeader {
    std::uint32_t magic;
    std::uint16_t versionMajor;
    std::uint16_t versionMinor;
    std::int32_t thisZone;
    std::uint32_t sigFigs;
    std::uint32_t snapLength;
    std::uint32_t linkType;
};
static_assert(sizeof(FileHeader) == 24);

struct RecordHeader {
    std::uint32_t seconds;
    std::uint32_t nanoseconds;
    std::uint32_t capturedLength;
    std::uint32_t originalLength;
};
static_assert(sizeof(RecordHeader) == 16);

}  // namespace

PcapWriter::PcapWriter(const std::string& path) : path_(path) {
    if (path == "-") {
        fd_ = STDOUT_FILENO;
    } else {
        file_.reset(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640));
        if (!file_) throwErrno(errno, "cannot create " + path);
        fd_ = file_.get();
    }
    buffer_.reserve(kBufferBytes);
    const FileHeader header{kMagicNanoseconds, 2, 4, 0, 0, kSnapLength, kLinkTypeRaw};
    append(&header, sizeof header);
}

PcapWriter::~PcapWriter() {
    if (!finished_ && path_ != "-") ::unlink(path_.c_str());
}

void PcapWriter::packet(std::int64_t timeNs, const std::uint8_t* data, std::size_t length) {
    if (timeNs < 0) timeNs = 0;
    RecordHeader header{};
    header.seconds = static_cast<std::uint32_t>(timeNs / 1'000'000'000);
    header.nanoseconds = static_cast<std::uint32_t>(timeNs % 1'000'000'000);
    header.capturedLength = static_cast<std::uint32_t>(length);
    header.originalLength = static_cast<std::uint32_t>(length);
    append(&header, sizeof header);
    append(data, length);
}

void PcapWriter::append(const void* data, std::size_t length) {
    const auto* bytes = static_cast<const std::uint8_t*>(data);
    if (buffer_.size() + length > kBufferBytes) flush();
    buffer_.insert(buffer_.end(), bytes, bytes + length);
}

void PcapWriter::flush() {
    std::size_t done = 0;
    while (done < buffer_.size()) {
        const ssize_t written = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
        if (written < 0) {
            if (errno == EINTR) continue;
            throwErrno(errno, "writing " + (path_ == "-" ? std::string("stdout") : path_));
        }
        done += static_cast<std::size_t>(written);
    }
    buffer_.clear();
}

void PcapWriter::finish() {
    flush();
    if (file_) checkSys(::close(file_.release()), "close " + path_);
    finished_ = true;
}

}  // namespace splicegate::audittool
