// The operator's documentation against the code it documents, so neither drifts:
// - every option `splicegate --help` prints is in docs/configuration.md, with the default the
//   daemon really has;
// - every [route.NAME] key the parser accepts is in docs/configuration.md;
// - every metric name the exposer's sources define is in docs/metrics.md;
// - README.md, docs/ and packaging/README.md link only files that exist in the repository and
//   cite nothing outside it;
// - every "docs/kernel-notes.md §N" cited anywhere in the sources names a section that exists.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <set>
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
         matches(read(kSource / "relay/Config.cpp"), std::regex(R"re(field == "([a-z0-9-]+)")re")))
        keys.insert(key);
    for (const auto& key : matches(helpText(), std::regex(R"(\n  ([a-z0-9-]+) = )")))
        keys.insert(key);
    ASSERT_TRUE(keys.count("listen") && keys.count("upstream") && keys.count("audit"));
    for (const auto& key : keys)
        EXPECT_NE(doc.find("\n| `" + key + "` |"), std::string::npos)
            << "route key " << key << " is not in the [route.NAME] table of docs/configuration.md";
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
