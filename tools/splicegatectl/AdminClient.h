#pragma once
// One request/response exchange with the daemon over its admin socket
// (proto/splicegate/admin.proto): connect, send the Request as one frame, read one Response frame.
// Thread affinity: none. Error contract: throws Unreachable when the daemon cannot be reached or
// does not answer within the timeout (splicegatectl exit 3), ProtocolFailure when it answers
// with something that is not a Response (exit 1).
#include <chrono>
#include <stdexcept>
#include <string>

#include "splicegate/admin.pb.h"

namespace splicegate::ctl {

class Unreachable : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

class ProtocolFailure : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

// Sends `request` (protocol_version set to kProtocolVersion) and returns the daemon's response.
// The whole exchange is bounded by `timeout`.
admin::Response exchange(const std::string& socketPath, admin::Request request,
                         std::chrono::milliseconds timeout);

}  // namespace splicegate::ctl
