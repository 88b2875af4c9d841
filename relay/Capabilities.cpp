#include "relay/Capabilities.h"

#include <sys/capability.h>

#include <cerrno>
#include <memory>
#include <system_error>

namespace splicegate {
namespace {
struct CapFree {
    void operator()(cap_t caps) const noexcept { cap_free(caps); }
};
using CapState = std::unique_ptr<std::remove_pointer_t<cap_t>, CapFree>;

struct Named {
    cap_value_t value;
    const char* name;
};
constexpr Named kEdgeFilterCapabilities[] = {
    {CAP_NET_ADMIN, "CAP_NET_ADMIN"}, {CAP_BPF, "CAP_BPF"}, {CAP_PERFMON, "CAP_PERFMON"}};
}  // namespace

std::vector<std::string> dropEdgeFilterCapabilities() {
    CapState caps(cap_get_proc());
    if (!caps) throw std::system_error(errno, std::generic_category(), "cap_get_proc");
    std::vector<std::string> held;
    std::vector<cap_value_t> values;
    for (const auto& cap : kEdgeFilterCapabilities) {
        cap_flag_value_t permitted = CAP_CLEAR;
        if (cap_get_flag(caps.get(), cap.value, CAP_PERMITTED, &permitted) == 0 &&
            permitted == CAP_SET)
            held.emplace_back(cap.name);
        values.push_back(cap.value);
    }
    if (held.empty()) return held;
    for (auto flag : {CAP_EFFECTIVE, CAP_PERMITTED, CAP_INHERITABLE})
        if (cap_set_flag(caps.get(), flag, static_cast<int>(values.size()), values.data(),
                         CAP_CLEAR) != 0)
            throw std::system_error(errno, std::generic_category(), "cap_set_flag");
    if (cap_set_proc(caps.get()) != 0)
        throw std::system_error(errno, std::generic_category(), "cap_set_proc");
    return held;
}

bool mayBindPrivilegedPorts() {
    CapState caps(cap_get_proc());
    if (!caps) throw std::system_error(errno, std::generic_category(), "cap_get_proc");
    cap_flag_value_t effective = CAP_CLEAR;
    return cap_get_flag(caps.get(), CAP_NET_BIND_SERVICE, CAP_EFFECTIVE, &effective) == 0 &&
           effective == CAP_SET;
}

}  // namespace splicegate
