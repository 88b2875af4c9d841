#include "datapath/Mover.h"

namespace splicegate {

const char* toString(MoveStage stage) noexcept {
    switch (stage) {
        case MoveStage::Fill:
            return "fill";
        case MoveStage::Tee:
            return "tee";
        case MoveStage::AuditWrite:
            return "audit write";
        case MoveStage::Forward:
            return "forward";
        case MoveStage::WaitReadable:
            return "wait readable";
        case MoveStage::WaitWritable:
            return "wait writable";
    }
    return "?";
}

}  // namespace splicegate
