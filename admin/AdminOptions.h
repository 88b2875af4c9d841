#pragma once
// The admin socket's options (docs/configuration.md): their settings, declared once with their
// defaults, the option group that describes them, and how they are read.
#include <boost/program_options/options_description.hpp>
#include <string>

#include "common/OptionValues.h"

namespace splicegate {

struct AdminSettings {
    std::string socket = "/run/splicegate/admin.sock";  // empty: no admin socket
    std::string group = "splicegate";                   // allowed besides root
    std::string readonlyGroup;                          // empty: none
};

// The admin options, their defaults from AdminSettings{}.
boost::program_options::options_description adminOptions();
AdminSettings readAdminSettings(const OptionValues& values);
// Every admin option takes effect at the next start only.
void listChanged(const AdminSettings& running, const AdminSettings& next, ChangedOptions& changed);

}  // namespace splicegate
