#include "common/ServiceNotifier.h"

#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "common/Error.h"
#include "common/Log.h"

namespace splicegate {
namespace {

std::uint64_t monotonicMicroseconds() {
    timespec now{};
    ::clock_gettime(CLOCK_MONOTONIC, &now);
    return static_cast<std::uint64_t>(now.tv_sec) * 1'000'000 +
           static_cast<std::uint64_t>(now.tv_nsec) / 1000;
}

// STATUS= is one line of the message; a newline in the text would start a bogus assignment.
std::string oneLine(std::string_view text) {
    std::string line(text);
    for (char& c : line)
        if (c == '\n') c = ' ';
    return line;
}

}  // namespace

ServiceNotifier ServiceNotifier::fromEnvironment() {
    const char* name = std::getenv("NOTIFY_SOCKET");
    return ServiceNotifier(name != nullptr ? name : "");
}

ServiceNotifier::ServiceNotifier(std::string_view socketName) : name_(socketName) {
    if (name_.empty()) return;
    bool abstract = name_.front() == '@';
    if (!abstract && name_.front() != '/') {
        logWarn("NOTIFY_SOCKET '", name_,
                "' is neither an absolute path nor an abstract '@' name: the service manager "
                "will not hear of readiness");
        return;
    }
    if (name_.size() >= sizeof(address_.sun_path)) {
        logWarn("NOTIFY_SOCKET '", name_, "' is longer than a Unix socket address (",
                sizeof(address_.sun_path) - 1,
                " bytes): the service manager will not hear of "
                "readiness");
        return;
    }
    address_.sun_family = AF_UNIX;
    std::memcpy(address_.sun_path, name_.data(), name_.size());
    if (abstract) address_.sun_path[0] = '\0';
    // An abstract name is exactly its bytes, with no terminating NUL; a path may carry one.
    addressLength_ =
        static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name_.size() + (abstract ? 0 : 1));
    socket_.reset(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!socket_)
        logWarn("NOTIFY_SOCKET '", name_, "': socket(AF_UNIX, SOCK_DGRAM): ", errnoText(errno),
                ": the service manager will not hear of readiness");
}

void ServiceNotifier::ready(std::string_view status) {
    send("READY=1\nSTATUS=" + oneLine(status));
}

void ServiceNotifier::readyAsMainProcess(std::string_view status) {
    send("MAINPID=" + std::to_string(::getpid()) + "\nREADY=1\nSTATUS=" + oneLine(status));
}

void ServiceNotifier::reloading() {
    // MONOTONIC_USEC lets `Type=notify-reload` (systemd 253+) match this message to its request.
    send("RELOADING=1\nMONOTONIC_USEC=" + std::to_string(monotonicMicroseconds()));
}

void ServiceNotifier::stopping() {
    send("STOPPING=1");
}

void ServiceNotifier::status(std::string_view text) {
    send("STATUS=" + oneLine(text));
}

void ServiceNotifier::send(const std::string& message) {
    if (!active()) return;
    auto sent = ::sendto(socket_.get(), message.data(), message.size(), MSG_NOSIGNAL,
                         reinterpret_cast<const sockaddr*>(&address_), addressLength_);
    if (sent >= 0 || sendFailureLogged_) return;
    sendFailureLogged_ = true;  // one line, not one per reload: the cause will not change
    logWarn("notifying the service manager through NOTIFY_SOCKET '", name_,
            "' failed: ", errnoText(errno));
}

}  // namespace splicegate
