#include "archive/ArchiveLedger.h"

#include <exception>
#include <string>

#include "audit/SealHeads.h"

namespace splicegate::archive {

LedgerAnswer ArchiveLedger::verified(unsigned worker, std::uint64_t segment,
                                     const audit::Digest& seal) {
    LedgerAnswer answer;
    try {
        if (!states_) states_.emplace(dir_, UploadStateStore::Access::ReadOnly);
        auto state = states_->load(worker, segment);
        if (!state || state->phase != UploadPhase::Verified) return answer;
        if (state->sealDigest != audit::digestHex(seal)) {
            answer.problem = dir() + "/" + stateFileName(worker, segment) +
                             ": verified for seal " + state->sealDigest +
                             ", but the local segment's seal is " + audit::digestHex(seal) +
                             "; it is kept";
            return answer;
        }
        answer.verified = true;
    } catch (const std::exception& error) {
        answer.problem = std::string(error.what()) + "; the segment is kept";
    }
    return answer;
}

}  // namespace splicegate::archive
