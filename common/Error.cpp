#include "common/Error.h"

#include <cstring>

namespace splicegate {

void throwErrno(int err, const std::string& what) {
    throw std::system_error(err, std::system_category(), what);
}

std::string errnoText(int err) { return std::strerror(err < 0 ? -err : err); }

}  // namespace splicegate
