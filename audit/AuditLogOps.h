#pragma once
// The ring tags of the audit writers' own disk work: RingOwner::AuditLog, one op code per kind of
// SQE, the slot saying which buffer, file or step. The worker hands every completion of that
// owner (and of RingOwner::AuditTap, the tap's group commit) to its AuditTap, which hands it to
// its AuditLog (audit/AuditLog.h).
#include <cstdint>

#include "common/CompletionTag.h"

namespace splicegate::audit {

enum class AuditLogOp : std::uint8_t {
    DataWrite = 1,   // DirectDataWriter: a write of log buffer `slot`
    DataWriteDelay,  // DirectDataWriter, test only: the timeout a delayed write waits behind
    DataSync,        // DirectDataWriter: the fdatasync of the data file whose serial is `slot`
    DirectorySync,   // DirectSegmentWriter's group commit: the directory's fsync (names new)
    IndexWrite,      // its index records' write
    IndexSync,       // its index fdatasync, or the NOP of a sync without one: its last step
    IndexFlush,      // durability none: the write of the records a flush took
    DiskWork,        // SegmentStore's disk work (SegmentStore.h DiskWork): DiskStep `slot`
};

constexpr CompletionTag auditLogTag(AuditLogOp op, std::uint32_t slot = 0) noexcept {
    return CompletionTag::of(RingOwner::AuditLog, op, slot);
}

}  // namespace splicegate::audit
