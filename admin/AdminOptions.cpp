#include "admin/AdminOptions.h"

namespace splicegate {
namespace po = boost::program_options;

// One option per line reads better than the formatter's layout of a call chain.
// clang-format off
po::options_description adminOptions() {
    const AdminSettings d;
    po::options_description options;
    options.add_options()
        ("admin-socket", scalar("PATH", d.socket), "admin Unix socket; empty = none")
        ("admin-group", scalar("NAME", d.group),
         "group allowed on the admin socket besides root")
        ("admin-readonly-group", scalar("NAME"),
         "group allowed read-only admin commands (status, connections, version, xdp list); "
         "none by default");
    return options;
}
// clang-format on

AdminSettings readAdminSettings(const OptionValues& values) {
    AdminSettings admin;
    admin.socket = values.text("admin-socket");
    admin.group = values.text("admin-group");
    admin.readonlyGroup = values.text("admin-readonly-group");
    return admin;
}

void listChanged(const AdminSettings& running, const AdminSettings& next, ChangedOptions& changed) {
    changed.check("admin-socket", running.socket, next.socket);
    changed.check("admin-group", running.group, next.group);
    changed.check("admin-readonly-group", running.readonlyGroup, next.readonlyGroup);
}

}  // namespace splicegate
