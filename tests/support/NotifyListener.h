#pragma once
// The service manager's end of sd_notify for tests: a datagram socket bound to a path in its own
// TempDir (or to an abstract name), whose name() goes into $NOTIFY_SOCKET, and which receives
// the daemon's state messages one datagram at a time.
// Thread affinity: one thread. Error contract: set-up failures throw std::system_error.
#include <optional>
#include <string>

#include "common/UniqueFd.h"
#include "tests/support/Daemon.h"
#include "tests/support/Sockets.h"

namespace splicegate::test {

class NotifyListener {
  public:
    enum class Namespace { Path, Abstract };
    explicit NotifyListener(Namespace kind = Namespace::Path);

    // As $NOTIFY_SOCKET spells it: "/tmp/.../notify" or "@splicegate-test-PID-N".
    const std::string& name() const noexcept { return name_; }
    // The next message, or nothing when none arrives before `timeout`.
    std::optional<std::string> receive(milliseconds timeout = milliseconds(10000));

  private:
    TempDir dir_;
    std::string name_;
    UniqueFd socket_;
};

}  // namespace splicegate::test
