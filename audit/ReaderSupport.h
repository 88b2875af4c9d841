#pragma once
// What the audit log's readers share (AuditReader.cpp: list and extract; Verifier.cpp: verify;
// Recovery.cpp): opening segment files, sizes, payload checksums and the wording of their
// messages. Internal to the audit library. Errors throw std::system_error naming the file.
#include <cstdint>
#include <string>
#include <vector>

#include "audit/AuditReader.h"
#include "audit/Records.h"
#include "audit/Retention.h"
#include "common/UniqueFd.h"

namespace splicegate::audit {

std::string baseName(const std::string& path);
inline std::uint64_t addSaturating(std::uint64_t a, std::uint64_t b) noexcept {
    return a + b < a ? UINT64_MAX : a + b;
}
std::uint64_t fileSize(int fd, const std::string& path);
UniqueFd openDirectory(const std::string& dir);
// A segment file, opened in the directory without following a symlink; a data file also under a
// shared lock (holdDataFile). Throws std::system_error naming the file (ENOENT: gone).
UniqueFd openIn(int dirFd, const SegmentFiles& files, bool index);
// Takes a shared flock on `fd`, the data file of `files`, and checks it still has its name:
// retention recycles no data file a reader holds (Retention.cpp), and one it recycled before the
// lock throws ENOENT, as a deleted one does.
void holdDataFile(int dirFd, int fd, const SegmentFiles& files);
// CRC-32C of `length` bytes at `offset` of `fd`; false when the file ends first.
bool payloadCrc(int fd, std::uint64_t offset, std::uint64_t length, std::uint32_t& crc,
                const std::string& what);
std::string hex32(std::uint32_t value);
// "Chunk of connection ID (DIRECTION, LENGTH bytes at data offset OFFSET)".
std::string chunkText(const Record& record);
// Whether the retention log's `entries` record deleting the segment of `files`.
bool recordsDeletion(const std::vector<RetentionLogEntry>& entries, const SegmentFiles& files);

}  // namespace splicegate::audit
