#include "pipes/Pipe.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>

namespace splicegate {

int Pipe::create(std::size_t capacity, Pipe& out) noexcept {
    int fds[2];
    if (::pipe2(fds, O_NONBLOCK | O_CLOEXEC) < 0) return -errno;
    Pipe pipe;
    pipe.read_.reset(fds[0]);
    pipe.write_.reset(fds[1]);
    int granted = ::fcntl(fds[1], F_SETPIPE_SZ, static_cast<int>(capacity));
    if (granted < 0) granted = ::fcntl(fds[1], F_GETPIPE_SZ);
    if (granted < 0) return -errno;
    pipe.capacity_ = static_cast<std::size_t>(granted);
    out = std::move(pipe);
    return 0;
}

long Pipe::bufferedBytes() const noexcept {
    int bytes = 0;
    if (::ioctl(read_.get(), FIONREAD, &bytes) < 0) return -errno;
    return bytes;
}

}  // namespace splicegate
