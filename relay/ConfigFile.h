#pragma once
// The INI file named by --config, split into its entries with the line each one is on.
// Boost's parse_config_file applies the same syntax but keeps no line numbers and merges a
// section given twice, so the file is split here and only its top-level entries are handed on
// to Boost (relay/Config.cpp), which still checks them against the declared options.
// Syntax (Boost's): '#' starts a comment, blank lines are skipped, "[NAME]" opens a section,
// "KEY = VALUE" (spaces around both trimmed; VALUE may be empty) sets a key.
// Error contract: a line that is none of these, or a section given twice, is a problem of the
// file (one line naming file and line); the rest of the file is still read, so that every
// problem is found at once.
#include <string>
#include <vector>

namespace splicegate {

struct ConfigFileEntry {
    unsigned line = 0;
    std::string key;
    std::string value;
};

struct ConfigFileSection {
    std::string name;  // without the brackets
    unsigned line = 0;
    std::vector<ConfigFileEntry> entries;
};

struct ConfigFileContents {
    std::vector<ConfigFileEntry> topLevel;    // before the first section
    std::vector<ConfigFileSection> sections;  // in file order, each name once
    std::vector<std::string> problems;        // "FILE:LINE: ..."
};

// Reads at most 1 MiB of a regular file. Throws UsageError when the file cannot be read at all.
std::string readConfigFile(const std::string& path);

// `path` only names the file in problems.
ConfigFileContents splitConfigFile(const std::string& path, const std::string& text);

// "FILE:LINE", how every problem of a file starts.
std::string fileLine(const std::string& path, unsigned line);

}  // namespace splicegate
