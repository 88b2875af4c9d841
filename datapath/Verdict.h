#pragma once
// What the data path decides for a connection after driving one of its flows: the connection
// layer acts on it (as Envoy's transport sockets return a PostIoAction). Both lanes return it
// within their StepResult (datapath/Lane.h).
#include <cstdint>

#include "datapath/CloseReason.h"
#include "datapath/Direction.h"

namespace splicegate {

struct Verdict {
    enum class Action : std::uint8_t {
        Wait,   // nothing to do until a completion (or the group commit) resumes the flow
        Yield,  // the flow used its turn and can go on: drive it again after the others
        Close,  // close the connection with `reason`
    };
    Action action = Action::Wait;
    CloseReason reason = CloseReason::Closed;
    bool resetPeers = false;  // RST to both peers (an error), rather than FIN

    static Verdict wait() noexcept { return {}; }
    static Verdict yield() noexcept { return {Action::Yield}; }
    static Verdict close(CloseReason why, bool reset) noexcept {
        return {Action::Close, why, reset};
    }
};

// Which peer a failed socket of direction `d` means: its source (the client for c2u) or its sink.
inline CloseReason sourceResetReason(Direction d) noexcept {
    return d == Direction::ClientToUpstream ? CloseReason::ClientReset : CloseReason::UpstreamReset;
}
inline CloseReason sinkResetReason(Direction d) noexcept {
    return d == Direction::ClientToUpstream ? CloseReason::UpstreamReset : CloseReason::ClientReset;
}

}  // namespace splicegate
