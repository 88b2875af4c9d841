#include "common/Groups.h"

#include <grp.h>

#include <cerrno>
#include <charconv>
#include <vector>

namespace splicegate {

std::optional<GroupEntry> findGroup(const std::string& nameOrGid, int& error) {
    std::vector<char> buffer(16384);
    group entry{};
    group* found = nullptr;
    while ((error = ::getgrnam_r(nameOrGid.c_str(), &entry, buffer.data(), buffer.size(),
                                 &found)) == ERANGE)
        buffer.resize(buffer.size() * 2);
    if (found == nullptr) {
        unsigned long numeric = 0;
        auto [end, ec] =
            std::from_chars(nameOrGid.data(), nameOrGid.data() + nameOrGid.size(), numeric);
        if (ec == std::errc() && end == nameOrGid.data() + nameOrGid.size())
            while ((error = ::getgrgid_r(static_cast<gid_t>(numeric), &entry, buffer.data(),
                                         buffer.size(), &found)) == ERANGE)
                buffer.resize(buffer.size() * 2);
    }
    if (found == nullptr) return std::nullopt;
    error = 0;
    return GroupEntry{found->gr_gid, found->gr_name};
}

}  // namespace splicegate
