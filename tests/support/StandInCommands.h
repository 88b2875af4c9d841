#pragma once
// A private directory of stand-in commands for testing shell scripts: each one appends its
// arguments to DIR/<name>.log and then runs its body. Put path() first on PATH to use them.
#include <sys/stat.h>

#include <filesystem>
#include <string>

#include "tests/support/Daemon.h"

namespace splicegate::test {

class StandInCommands {
  public:
    void add(const std::string& name, const std::string& body) {
        auto file = dir_.write(name, "#!/bin/sh\necho \"$*\" >> '" + dir_.path() + "/" + name +
                                         ".log'\n" + body + "\n");
        ::chmod(file.c_str(), 0755);
    }
    // What `name` was called with, one line per call; empty if it never ran.
    std::string log(const std::string& name) const {
        std::error_code ignored;
        if (!std::filesystem::exists(dir_.path() + "/" + name + ".log", ignored)) return "";
        return readFile(dir_.path() + "/" + name + ".log");
    }
    const std::string& path() const { return dir_.path(); }

  private:
    TempDir dir_;
};

}  // namespace splicegate::test
