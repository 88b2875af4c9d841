#pragma once
// Group options (--admin-group, --admin-readonly-group, --audit-group) name a group by name or
// by numeric gid: one lookup for all of them, so that the check, the start and the admin socket
// agree on what a value means.
#include <sys/types.h>

#include <optional>
#include <string>

namespace splicegate {

struct GroupEntry {
    gid_t gid = 0;
    std::string name;
};

// The group `nameOrGid` names, or nullopt when there is none; `error` is then the lookup's
// errno (0: simply no such group).
std::optional<GroupEntry> findGroup(const std::string& nameOrGid, int& error);

}  // namespace splicegate
