#include "audit/AuditLogFactory.h"

#include <chrono>

#include "audit/DirectAuditLog.h"
#include "audit/SegmentStore.h"
#include "audit/SpliceAuditLog.h"
#include "common/Log.h"
#include "datapath/Failpoints.h"

namespace splicegate {

ChosenAuditLog makeAuditLog(const AuditSettings& settings,
                            std::unique_ptr<audit::SegmentStore> store, RingOps& ring,
                            RingRegistration& registration) {
    // Index records are written after their chunk went on: their space is taken first, so a
    // full disk refuses the chunk instead of tearing the index (both writers). The direct
    // writer fills its data file after the bytes went on, so it takes the data space first too;
    // the splice writer's splice meets a full disk before anything is forwarded.
    const bool direct = settings.writer == AuditWriterKind::Direct;
    const bool spaceAhead = store->reserveSpaceAhead(direct);
    if (!spaceAhead)
        logWarn("audit: ", settings.dir, " cannot allocate ahead (no fallocate)",
                direct ? ": under fail-closed every audited chunk waits for its data to be durable"
                       : "");
    if (recyclesSpareDataFiles(settings.writer)) store->recycleSpareDataFiles();
    ChosenAuditLog chosen;
    chosen.policy = auditPolicy(settings, direct && !spaceAhead);
    if (!direct) {
        chosen.log = std::make_unique<SpliceAuditLog>(std::move(store), ring);
        return chosen;
    }
    audit::DirectLogOptions options;
    options.bufferBytes = settings.bufferBytes;
    options.writeDelay = std::chrono::milliseconds(failpointAuditWriteDelayMs());
    options.label = "audit " + settings.dir;
    chosen.log = std::make_unique<DirectAuditLog>(std::move(store), ring, registration, options);
    return chosen;
}

AuditPolicy auditPolicy(const AuditSettings& settings,
                        bool mayLoseAcceptedBytesToFullDisk) noexcept {
    AuditPolicy policy;
    policy.failClosed = settings.onError == AuditOnError::FailClosed;
    // Fail-closed never forwards a byte the log then loses to a full disk. A writer that takes
    // its disk space before accepting a chunk (the splice writer's splice, the direct writer's
    // space taken ahead) fails at once; one that cannot must hold each chunk until durable.
    bool holdUntilDurable = policy.failClosed && mayLoseAcceptedBytesToFullDisk;
    policy.strict = settings.durability == AuditDurability::Strict || holdUntilDurable;
    policy.groupCommit = settings.durability != AuditDurability::None || holdUntilDurable;
    return policy;
}

bool recyclesSpareDataFiles(AuditWriterKind writer) noexcept {
    // The direct writer's segments take them: its O_DIRECT writes into blocks already allocated
    // change no extent, and nothing is freed (docs/kernel-notes.md §19). The splice writer's
    // page cache gains nothing from it.
    return writer == AuditWriterKind::Direct;
}

}  // namespace splicegate
