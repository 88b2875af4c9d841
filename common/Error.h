#pragma once
// One error convention: set-up code throws std::system_error whose message names the call and the
// object involved (file, address, option); data-path code is noexcept and passes -errno values.
#include <cerrno>
#include <stdexcept>
#include <string>
#include <system_error>

namespace splicegate {

// Thrown for bad configuration or bad command-line input: the message is one line for the user.
class UsageError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

[[noreturn]] void throwErrno(int err, const std::string& what);

// For syscalls returning -1 + errno: returns the result, or throws naming `what`.
template <typename T>
T checkSys(T result, const std::string& what) {
    if (result < 0) throwErrno(errno, what);
    return result;
}

// For calls returning -errno (liburing style): returns the result, or throws naming `what`.
template <typename T>
T checkNeg(T result, const std::string& what) {
    if (result < 0) throwErrno(static_cast<int>(-result), what);
    return result;
}

std::string errnoText(int err);

}  // namespace splicegate
