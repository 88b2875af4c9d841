// The operator's documentation against the code it documents, so neither drifts:
// - every option `splicegate --help` prints is in docs/configuration.md, with the default the
//   daemon really has;
// - every [route.NAME] key the parser accepts is in docs/configuration.md and splicegate.conf(5);
// - the options of `splicegate --help`, the tables of docs/configuration.md and the options of
//   splicegate(8) are the same set, both ways; so are splicegate-audit's, splicegatectl's and
//   splicegate-archive's and their man pages';
// - the connection states the daemon names are those splicegatectl connections --help and
//   splicegatectl(1) list;
// - a commented "#key = value" of the packaged config file shows --help's default;
// - every metric name the exposer's sources define is in docs/metrics.md;
// - README.md, docs/ and packaging/README.md link only files that exist in the repository and
//   cite nothing outside it; a packaged path they name is one the package installs;
// - every "docs/kernel-notes.md §N" cited anywhere in the sources names a section that exists.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/Daemon.h"

namespace splicegate {
namespace {

namespace fs = std::filesystem;
using test::milliseconds;

const fs::path kSource = SPLICEGATE_SOURCE_DIR;

std::string read(const fs::path& path) {
    return test::readFile(path.string());
}

std::string helpText() {
    auto help = test::runProcess({test::daemonBinary(), "--help"}, milliseconds(10000));
    EXPECT_TRUE(help.status && help.status->isExit(0)) << help.err;
    return help.out;
}

std::vector<std::string> matches(const std::string& text, const std::regex& pattern,
                                 int group = 1) {
    std::vector<std::string> found;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), pattern);
         it != std::sregex_iterator(); ++it)
        found.push_back((*it)[group].str());
    return found;
}

// The row of `--name` in a Markdown table of configuration.md: "| `--name ARG` | default | ...".
std::vector<std::string> rowCells(const std::string& doc, const std::string& option) {
    std::regex row("\\n\\| `" + option + "[ `][^\\n]*");
    std::smatch match;
    if (!std::regex_search(doc, match, row)) return {};
    std::vector<std::string> cells;
    std::string line = match.str().substr(1);
    std::size_t start = 1;
    // Cells are split on '|' outside backticks (`on\|off` holds an escaped one).
    bool code = false;
    for (std::size_t i = 1; i < line.size(); ++i) {
        if (line[i] == '`') code = !code;
        if (line[i] == '|' && !code && line[i - 1] != '\\') {
            auto cell = line.substr(start, i - start);
            cell.erase(0, cell.find_first_not_of(' '));
            cell.erase(cell.find_last_not_of(' ') + 1);
            cells.push_back(cell);
            start = i + 1;
        }
    }
    return cells;
}

TEST(DocsLintTest, EveryDaemonOptionIsDocumentedWithItsDefault) {
    auto help = helpText();
    auto doc = read(kSource / "docs/configuration.md");
    // "  --name ARG (=DEFAULT)   text" or "  -h [ --help ]   text".
    std::regex optionLine(
        R"(\n  (?:-[A-Za-z] \[ )?--([a-z0-9][a-z0-9-]*)( [A-Z:|]+)?(?: \(=([^)]*)\))?)");
    auto options = matches(help, optionLine);
    ASSERT_GE(options.size(), 25u) << "could not parse --help:\n" << help;
    for (auto it = std::sregex_iterator(help.begin(), help.end(), optionLine);
         it != std::sregex_iterator(); ++it) {
        std::string name = "--" + (*it)[1].str();
        auto cells = rowCells(doc, name);
        if (cells.empty()) {
            ADD_FAILURE() << name << " is not in a table of docs/configuration.md";
            continue;
        }
        if ((*it)[3].matched) {
            std::string expected = (*it)[3].str();
            ASSERT_GE(cells.size(), 2u) << name;
            EXPECT_EQ(cells[1], expected.empty() ? cells[1] : expected)
                << name << ": docs/configuration.md gives another default than --help";
        }
    }
}

TEST(DocsLintTest, EveryRouteKeyIsDocumented) {
    auto doc = read(kSource / "docs/configuration.md");
    std::set<std::string> keys;
    // The keys the parser accepts, and those the help text lists.
    for (const auto& key :
         matches(read(kSource / "relay/Config.cpp"),
                 std::regex(R"re(\n    \{"([a-z0-9-]+)", (?:true|false),)re")))
        keys.insert(key);
    for (const auto& key : matches(helpText(), std::regex(R"(\n  ([a-z0-9-]+) = )")))
        keys.insert(key);
    ASSERT_TRUE(keys.count("listen") && keys.count("upstream") && keys.count("audit"));
    for (const auto& key : keys)
        EXPECT_NE(doc.find("\n| `" + key + "` |"), std::string::npos)
            << "route key " << key << " is not in the [route.NAME] table of docs/configuration.md";
}

// The long options a --help text lists ("  --name ARG (=DEFAULT)   text", "  -h [ --help ]").
std::set<std::string> helpOptions(const std::string& help) {
    auto names = matches(help, std::regex(R"(\n  (?:-[A-Za-z] \[ )?--([a-z0-9][a-z0-9-]*))"));
    return {names.begin(), names.end()};
}

// The options a man page describes: those of its .TP item headers ("\-\-name"), dashes unescaped.
std::set<std::string> manOptions(const fs::path& page) {
    std::set<std::string> names;
    for (const auto& header : matches(read(page), std::regex(R"(\n\.TP\n([^\n]*))")))
        for (auto name : matches(header, std::regex(R"(\\-\\-([a-z0-9]+(?:\\-[a-z0-9]+)*))"))) {
            std::string plain;
            for (std::size_t i = 0; i < name.size(); ++i)
                if (!(name[i] == '\\' && i + 1 < name.size() && name[i + 1] == '-')) plain += name[i];
            names.insert(plain);
        }
    return names;
}

void expectSameOptions(const std::set<std::string>& reference, const std::string& referenceName,
                       const std::set<std::string>& other, const std::string& otherName) {
    for (const auto& name : reference)
        EXPECT_TRUE(other.count(name)) << "--" << name << " is in " << referenceName
                                       << " but not in " << otherName;
    for (const auto& name : other)
        EXPECT_TRUE(reference.count(name)) << "--" << name << " is in " << otherName
                                           << " but not in " << referenceName;
}

TEST(DocsLintTest, DaemonOptionsAreTheSameInHelpReferenceAndManPageBothWays) {
    auto help = helpOptions(helpText());
    ASSERT_GE(help.size(), 25u);
    auto tableRows = matches(read(kSource / "docs/configuration.md"),
                             std::regex(R"(\n\| `--([a-z0-9][a-z0-9-]*)[ `])"));
    expectSameOptions(help, "splicegate --help", {tableRows.begin(), tableRows.end()},
                      "docs/configuration.md");
    expectSameOptions(help, "splicegate --help", manOptions(kSource / "packaging/man/splicegate.8"),
                      "splicegate(8)");
}

TEST(DocsLintTest, AuditToolOptionsAreTheSameInHelpAndManPageBothWays) {
    std::set<std::string> help;
    for (const char* command : {"list", "export", "extract", "verify"}) {
        auto result = test::runProcess(
            {std::string(SPLICEGATE_BIN_DIR) + "/splicegate-audit", command, "--help"},
            milliseconds(10000));
        ASSERT_TRUE(result.status && result.status->isExit(0)) << command << result.err;
        for (const auto& name : helpOptions(result.out)) help.insert(name);
    }
    ASSERT_GE(help.size(), 10u);
    expectSameOptions(help, "splicegate-audit COMMAND --help",
                      manOptions(kSource / "packaging/man/splicegate-audit.1"),
                      "splicegate-audit(1)");
}

// splicegatectl's and splicegate-archive's global options against their man pages, both ways.
TEST(DocsLintTest, CtlAndArchiveOptionsAreTheSameInHelpAndManPageBothWays) {
    const std::pair<const char*, const char*> tools[] = {
        {"splicegatectl", "packaging/man/splicegatectl.1"},
        {"splicegate-archive", "packaging/man/splicegate-archive.8"},
    };
    for (const auto& [tool, page] : tools) {
        auto result = test::runProcess({std::string(SPLICEGATE_BIN_DIR) + "/" + tool, "--help"},
                                       milliseconds(10000));
        ASSERT_TRUE(result.status && result.status->isExit(0)) << tool << result.err;
        auto help = helpOptions(result.out);
        ASSERT_GE(help.size(), 4u) << tool << " --help:\n" << result.out;
        expectSameOptions(help, std::string(tool) + " --help", manOptions(kSource / page), page);
    }
}

TEST(DocsLintTest, RouteKeysAreInTheConfigFileManPage) {
    auto page = read(kSource / "packaging/man/splicegate.conf.5");
    for (const auto& key : matches(read(kSource / "relay/Config.cpp"),
                                   std::regex(R"re(\n    \{"([a-z0-9-]+)", (?:true|false),)re"))) {
        std::string escaped;
        for (char c : key) escaped += c == '-' ? std::string("\\-") : std::string(1, c);
        bool described = page.find("\n.BI " + escaped + " ") != std::string::npos ||
                         page.find("\n.BR " + escaped + " ") != std::string::npos;
        EXPECT_TRUE(described)
                << "route key " << key << " is not described in splicegate.conf(5)";
    }
}

// The packaged file says its commented values are the defaults: each must be --help's.
TEST(DocsLintTest, CommentedValuesOfTheConfigFileAreTheDefaults) {
    std::map<std::string, std::string> defaults;
    auto help = helpText();
    std::regex withDefault(R"(\n  --([a-z0-9-]+) [A-Z:|]+ \(=([^)]*)\))");
    for (auto it = std::sregex_iterator(help.begin(), help.end(), withDefault);
         it != std::sregex_iterator(); ++it)
        defaults[(*it)[1].str()] = (*it)[2].str();
    ASSERT_GE(defaults.size(), 20u);
    auto conf = read(kSource / "packaging/splicegate.conf");
    std::regex commented(R"(\n#([a-z0-9-]+) = ([^\n]*))");
    unsigned checked = 0;
    for (auto it = std::sregex_iterator(conf.begin(), conf.end(), commented);
         it != std::sregex_iterator(); ++it) {
        auto found = defaults.find((*it)[1].str());
        if (found == defaults.end()) continue;  // an example value (no default to show)
        ++checked;
        EXPECT_EQ((*it)[2].str(), found->second)
            << "packaging/splicegate.conf shows #" << found->first << " = " << (*it)[2].str()
            << " but the default is " << found->second;
    }
    EXPECT_GE(checked, 15u);
}

// One access line per connection: journald's default per-unit limit (10000 lines / 30 s) would
// drop them above about 333 connections per second.
TEST(DocsLintTest, PackagedUnitLetsEveryAccessLineThroughJournald) {
    auto unit = read(kSource / "packaging/systemd/splicegate.service");
    EXPECT_NE(unit.find("\nLogRateLimitIntervalSec=0\n"), std::string::npos)
        << "packaging/systemd/splicegate.service sets no LogRateLimitIntervalSec=0";
}

// The connection states: those the daemon's table names (relay/ConnectionTable.cpp, "relaying"
// shown as "open" by relay/Control.cpp) are what `splicegatectl connections --help` and
// splicegatectl(1) list, and neither names another.
TEST(DocsLintTest, ConnectionStatesAreTheSameInTheDaemonHelpAndManPage) {
    std::set<std::string> daemon;
    for (const auto& name : matches(read(kSource / "relay/ConnectionTable.cpp"),
                                    std::regex(R"re(return "([a-z]+)";)re")))
        daemon.insert(name == "relaying" ? "open" : name);
    ASSERT_EQ(daemon.size(), 4u);
    EXPECT_NE(read(kSource / "relay/Control.cpp").find(R"(workerState == "relaying" ? "open")"),
              std::string::npos);
    auto help = test::runProcess(
        {std::string(SPLICEGATE_BIN_DIR) + "/splicegatectl", "connections", "--help"},
        milliseconds(10000));
    ASSERT_TRUE(help.status && help.status->isExit(0)) << help.err;
    auto listed = matches(help.out, std::regex(R"(STATE \(([a-z|]+)\))"));
    ASSERT_EQ(listed.size(), 1u) << help.out;
    std::set<std::string> inHelp;
    for (const auto& name : matches(listed[0] + "|", std::regex("([a-z]+)\\|"))) inHelp.insert(name);
    EXPECT_EQ(inHelp, daemon) << help.out;
    auto page = read(kSource / "packaging/man/splicegatectl.1");
    auto item = page.substr(page.find("\n.B connections\n"));
    item = item.substr(0, item.find("\n.TP", 1));
    for (const auto& name : daemon)
        EXPECT_TRUE(std::regex_search(item, std::regex("\\b" + name + "\\b")))
            << "splicegatectl(1) connections does not name the state " << name;
    EXPECT_EQ(item.find("relaying"), std::string::npos) << "splicegatectl(1) names 'relaying'";
}

// systemctl reload and the package's upgrade go through `splicegatectl upgrade` (the new process
// says MAINPID=, which systemd takes from a process other than the main one only with
// NotifyAccess=all); the package neither stops nor restarts the daemon around the unpacking.
TEST(DocsLintTest, PackagedUnitAndPostinstUpgradeWithoutRefusingConnections) {
    auto unit = read(kSource / "packaging/systemd/splicegate.service");
    EXPECT_NE(unit.find("\nExecReload=/usr/bin/splicegatectl upgrade\n"), std::string::npos);
    EXPECT_NE(unit.find("\nNotifyAccess=all\n"), std::string::npos);
    EXPECT_NE(unit.find("\nType=notify\n"), std::string::npos);
    auto postinst = read(kSource / "packaging/debian/splicegate.postinst");
    EXPECT_NE(postinst.find("$(/usr/bin/splicegatectl upgrade 2>&1)"), std::string::npos);
    EXPECT_NE(read(kSource / "packaging/debian/rules")
                  .find("dh_installsystemd --no-stop-on-upgrade --no-restart-after-upgrade "
                        "splicegate.service"),
              std::string::npos);
}

// A packaged path the documentation names is one the package installs: the rules and dashboard
// under /usr/share/splicegate/ (packaging/install.cmake), the documents and examples under
// /usr/share/doc/splicegate/ (debian/splicegate.docs, uncompressed; install.cmake's examples).
TEST(DocsLintTest, InstalledPathsTheDocumentationNamesAreInstalled) {
    const auto install = read(kSource / "packaging/install.cmake");
    std::set<std::string> documents = {"changelog", "copyright"};
    std::istringstream docs(read(kSource / "packaging/debian/splicegate.docs"));
    for (std::string line; std::getline(docs, line);)
        if (!line.empty()) documents.insert(fs::path(line).filename().string());
    EXPECT_NE(read(kSource / "packaging/debian/rules").find("dh_compress -X.md"), std::string::npos)
        << "the documents are named uncompressed";
    std::vector<fs::path> pages = {kSource / "README.md", kSource / "packaging/README.md",
                                   kSource / "packaging/splicegate.conf",
                                   kSource / "packaging/archive.conf"};
    for (const char* folder : {"docs", "packaging/man", "packaging/systemd"})
        for (const auto& entry : fs::recursive_directory_iterator(kSource / folder))
            if (entry.is_regular_file()) pages.push_back(entry.path());
    static const std::regex named(R"(/usr/share/(doc/)?splicegate/((?:examples/)?[A-Za-z0-9._\\-]*[A-Za-z0-9]))");
    unsigned checked = 0;
    for (const auto& page : pages) {
        const auto text = read(page);
        for (auto it = std::sregex_iterator(text.begin(), text.end(), named);
             it != std::sregex_iterator(); ++it) {
            std::string name;
            for (char c : (*it)[2].str())
                if (c != '\\') name += c;  // roff's "\-"
            if (name == "examples") continue;
            ++checked;
            const std::string where = page.lexically_relative(kSource).string();
            if ((*it)[1].matched && name.rfind("examples/", 0) != 0)
                EXPECT_TRUE(documents.count(name))
                    << where << " names /usr/share/doc/splicegate/" << name
                    << ", which debian/splicegate.docs does not install";
            else
                EXPECT_NE(install.find("/" + fs::path(name).filename().string()), std::string::npos)
                    << where << " names " << (*it).str() << ", which install.cmake does not install";
        }
    }
    EXPECT_GE(checked, 8u);
}

TEST(DocsLintTest, EveryMetricIsDocumented) {
    auto doc = read(kSource / "docs/metrics.md");
    std::set<std::string> names;
    std::regex metricName(R"re("((?:splicegate|process)_[a-z0-9_]+)")re");
    for (const char* folder : {"metrics", "archive"})
        for (const auto& entry : fs::directory_iterator(kSource / folder)) {
            if (entry.path().extension() != ".cpp") continue;
            for (const auto& name : matches(read(entry.path()), metricName)) names.insert(name);
        }
    ASSERT_GE(names.size(), 25u) << "could not find the metric names in metrics/*.cpp and archive/*.cpp";
    for (const auto& name : names)
        EXPECT_NE(doc.find("| `" + name + "` |"), std::string::npos)
            << name << " is not in a table of docs/metrics.md";
}

TEST(DocsLintTest, DocumentationStandsAlone) {
    std::vector<fs::path> pages = {kSource / "README.md", kSource / "packaging/README.md"};
    for (const auto& entry : fs::directory_iterator(kSource / "docs"))
        if (entry.path().extension() == ".md") pages.push_back(entry.path());
    for (const auto& entry : fs::directory_iterator(kSource / "packaging/man"))
        pages.push_back(entry.path());
    std::regex outside(R"(\.\./shared|\bNOTES\.md|\bSPEC\.md|\bSTYLE\.md)");
    std::regex link(R"(\]\(([^)#:]+)(#[^)]*)?\))");
    for (const auto& page : pages) {
        auto text = read(page);
        auto relative = fs::relative(page, kSource).string();
        for (const auto& reference : matches(text, outside, 0))
            ADD_FAILURE() << relative << " refers to " << reference << ", outside the repository";
        for (const auto& target : matches(text, link))
            EXPECT_TRUE(fs::exists(page.parent_path() / target))
                << relative << " links " << target << ", which does not exist";
    }
}

TEST(DocsLintTest, KernelNoteCitationsNameExistingSections) {
    std::set<std::string> sections;
    for (const auto& number :
         matches(read(kSource / "docs/kernel-notes.md"), std::regex(R"(\n## ([0-9]+)\. )")))
        sections.insert(number);
    ASSERT_GE(sections.size(), 12u) << "docs/kernel-notes.md keeps sections 1-12";
    std::regex citation(R"(kernel-notes\.md §([0-9]+))");
    std::size_t cited = 0;
    for (auto it = fs::recursive_directory_iterator(kSource);
         it != fs::recursive_directory_iterator(); ++it) {
        auto name = it->path().filename().string();
        if (it->is_directory() && (name == ".git" || name.starts_with("build"))) {
            it.disable_recursion_pending();
            continue;
        }
        auto extension = it->path().extension().string();
        if (!it->is_regular_file() ||
            (extension != ".cpp" && extension != ".h" && extension != ".c" && extension != ".md"))
            continue;
        for (const auto& number : matches(read(it->path()), citation)) {
            ++cited;
            EXPECT_TRUE(sections.count(number))
                << fs::relative(it->path(), kSource).string() << " cites docs/kernel-notes.md §"
                << number << ", which does not exist";
        }
    }
    EXPECT_GT(cited, 0u) << "README.md cites at least one section";
}

}  // namespace
}  // namespace splicegate
