#pragma once
// The one place a worker's audit writer is chosen (--audit-writer): which AuditLog the tap
// writes through, how its segment store is set up for it, and what that choice means for the
// tap's policy (AuditPolicy). The daemon asks here too what the chosen writer does with the spare
// data files retention leaves, so that the writer, recovery's clean-up and retention agree.
//
// The writers (audit/AuditLog.h): SpliceAuditLog (the mover splices payload into the segment's
// data file, page cache) and DirectAuditLog (payload copied into the worker's log buffer and
// written with O_DIRECT by audit/DirectDataWriter, index records booked once it is durable).
#include <memory>

#include "audit/AuditLog.h"
#include "audit/AuditOptions.h"
#include "datapath/AuditTap.h"

namespace splicegate {

class RingOps;
class RingRegistration;
namespace audit {
class SegmentStore;
}

struct ChosenAuditLog {
    std::unique_ptr<AuditLog> log;
    AuditPolicy policy;
};

// The writer of `settings.writer` over `store` (the worker's segments), submitting on `ring`
// (the worker's, which must outlive it; `registration` is its registrations, for the direct
// writer's log buffer), and the policy the tap must run it with. Throws as the writer's set-up
// does (std::system_error naming the file or call).
ChosenAuditLog makeAuditLog(const AuditSettings& settings,
                            std::unique_ptr<audit::SegmentStore> store, RingOps& ring,
                            RingRegistration& registration);

// The tap's policy for `settings`. `mayLoseAcceptedBytesToFullDisk`: the writer can lose a byte
// after accepting it, to a full disk (it writes later and could not take the space first), so
// fail-closed must hold each chunk until it is durable, whatever the durability mode.
AuditPolicy auditPolicy(const AuditSettings& settings,
                        bool mayLoseAcceptedBytesToFullDisk) noexcept;

// New segments of `writer` take one of their worker's spare data files when there is one
// (audit::SegmentStore::recycleSpareDataFiles): only then does retention keep spares, and only
// then may the daemon leave the spares of its workers in place at start.
bool recyclesSpareDataFiles(AuditWriterKind writer) noexcept;

}  // namespace splicegate
