#include "tests/support/Sysctl.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/UniqueFd.h"

namespace splicegate::test {
namespace {
// -errno of writing `value` to `path`, 0 on success.
int writeSysctl(const std::string& path, const std::string& value) {
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
    if (!fd) return -errno;
    auto written = ::write(fd.get(), value.data(), value.size());
    if (written < 0) return -errno;
    return written == static_cast<ssize_t>(value.size()) ? 0 : -EIO;
}
}  // namespace

SysctlOverride::SysctlOverride(std::string path, const std::string& value)
    : path_(std::move(path)), previous_(sysctlValue(path_)) {
    int rc = writeSysctl(path_, value);
    ok_ = rc == 0;
    if (!ok_) why_ = "write '" + value + "' to " + path_ + ": " + std::strerror(-rc);
}

SysctlOverride::~SysctlOverride() {
    if (ok_) writeSysctl(path_, previous_);
}

}  // namespace splicegate::test
