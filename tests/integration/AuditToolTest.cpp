// splicegate-audit as a process (SPEC.md "Audit logs and splicegate-audit"): list as a table and
// as JSON, extract to a file and to stdout, verify, --help/--version, usage errors (exit 2, one
// line), runtime failures (exit 1) and garbage input that must never crash it. No root needed.
// property_tree pulls in the deprecated global boost::bind placeholders; keep the build quiet.
#define BOOST_BIND_GLOBAL_PLACEHOLDERS
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <boost/property_tree/json_parser.hpp>
#include <boost/property_tree/ptree.hpp>
#include <cstdint>
#include <filesystem>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "audit/Crc32c.h"
#include "audit/Records.h"
#include "common/UniqueFd.h"
#include "tests/support/Daemon.h"

namespace splicegate::test {
namespace {

using namespace splicegate::audit;

constexpr std::int64_t kT0 = 1'700'000'000'000'000'000;  // 2023-11-14T22:13:20Z

std::string tool() {
    return std::string(SPLICEGATE_BIN_DIR) + "/splicegate-audit";
}

ProcessResult runTool(const std::vector<std::string>& args) {
    std::vector<std::string> argv{tool()};
    argv.insert(argv.end(), args.begin(), args.end());
    return runProcess(argv, milliseconds(20000));
}

std::size_t lineCount(const std::string& text) {
    return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

std::string describe(const ProcessResult& result) {
    return (result.status ? result.status->describe() : std::string("timed out")) + "\nstdout:\n" +
           result.out.substr(0, 4000) + "\nstderr:\n" + result.err;
}

void writeFile(const std::string& path, const std::string& content) {
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    ASSERT_TRUE(fd.valid()) << path;
    ASSERT_EQ(::write(fd.get(), content.data(), content.size()),
              static_cast<ssize_t>(content.size()));
}

std::string pattern(char seed, std::size_t size) {
    std::string text(size, '\0');
    for (std::size_t i = 0; i < size; ++i) text[i] = static_cast<char>(seed + i * 13 % 256);
    return text;
}

// A consistent log: worker 0 segments 1 and 2, worker 1 segment 1, all sealed into the hash
// chain. Connection 1 spans both segments of worker 0 and is closed, 2 is open, 3 (worker 1) is
// truncated.
struct SampleLog {
    TempDir dir;
    std::string c2u = pattern('a', 70000) + pattern('b', 30000);
    std::string u2c = pattern('c', 123);

    SampleLog() {
        std::string index, data;
        encodeSegmentStart(index, 0, 1, kT0, 0);
        encodeOpen(index, 1, kT0 + 1, "web", "198.51.100.1:4000", "192.0.2.1:443");
        encodeOpen(index, 2, kT0 + 2'000'000, "db", "[2001:db8::7]:5000", "192.0.2.2:5432");
        chunk(index, data, 1, kDirectionC2U, c2u.substr(0, 70000));
        chunk(index, data, 2, kDirectionU2C, "partial");
        Digest first = seal(index, data, Digest{});
        save(0, 1, index, data);
        index.clear();
        data.clear();
        encodeSegmentStart(index, 0, 2, kT0, 0);
        chunk(index, data, 1, kDirectionU2C, u2c);
        chunk(index, data, 1, kDirectionC2U, c2u.substr(70000));
        encodeClose(index, 1, kT0 + 9'000'000, c2u.size(), u2c.size(), "client closed");
        seal(index, data, first);
        save(0, 2, index, data);
        index.clear();
        data.clear();
        encodeSegmentStart(index, 1, 1, kT0, 0);
        encodeOpen(index, 3, kT0 + 3, "web", "198.51.100.3:4000", "192.0.2.1:443");
        chunk(index, data, 3, kDirectionC2U, "xyz");
        encodeTruncated(index, 3, kT0 + 10);
        seal(index, data, Digest{});
        save(1, 1, index, data);
    }

    // Seals with the hash chain after the worker's previous segment (`prev`; zero: none).
    static Digest seal(std::string& index, const std::string& data, const Digest& prev) {
        ChainHasher hasher(nullptr);
        hasher.update(index.data(), index.size());
        return encodeSegmentSealed(index, data.size(), kSealClean, nullptr, prev, hasher);
    }

    static void chunk(std::string& index, std::string& data, std::uint64_t id,
                      std::uint8_t direction, const std::string& payload) {
        encodeChunk(index, id, direction, static_cast<std::uint32_t>(payload.size()), data.size(),
                    kT0 + 5, crc32c(0, payload.data(), payload.size()));
        data += payload;
    }
    void save(unsigned worker, std::uint64_t segment, const std::string& index,
              const std::string& data) const {
        std::string base = dir.path() + "/" + segmentBaseName(worker, segment);
        writeFile(base + ".index", index);
        writeFile(base + ".data", data);
    }
    std::string indexPath(unsigned worker, std::uint64_t segment) const {
        return dir.path() + "/" + segmentBaseName(worker, segment) + ".index";
    }
};

void expectUsageError(const std::vector<std::string>& args) {
    auto result = runTool(args);
    std::string command;
    for (const auto& arg : args) command += " '" + arg + "'";
    ASSERT_TRUE(result.status.has_value()) << command;
    EXPECT_TRUE(result.status->isExit(2)) << command << "\n" << describe(result);
    EXPECT_EQ(lineCount(result.err), 1u) << command << "\n" << describe(result);
    EXPECT_EQ(result.err.rfind("splicegate-audit: ", 0), 0u) << result.err;
    EXPECT_TRUE(result.out.empty()) << command << "\n" << describe(result);
}

TEST(AuditToolTest, HelpAndVersion) {
    auto help = runTool({"--help"});
    ASSERT_TRUE(help.status && help.status->isExit(0)) << describe(help);
    for (const char* word : {"list", "extract", "verify", "--json", "--connection", "--direction"})
        EXPECT_NE(help.out.find(word), std::string::npos) << word;
    auto version = runTool({"--version"});
    ASSERT_TRUE(version.status && version.status->isExit(0)) << describe(version);
    EXPECT_EQ(version.out, std::string("splicegate-audit ") + SPLICEGATE_VERSION + "\n");
    for (const char* command : {"list", "extract", "verify"}) {
        auto commandHelp = runTool({command, "--help"});
        ASSERT_TRUE(commandHelp.status && commandHelp.status->isExit(0)) << describe(commandHelp);
        EXPECT_NE(commandHelp.out.find(std::string("splicegate-audit ") + command),
                  std::string::npos)
            << commandHelp.out;
    }
    EXPECT_NE(runTool({"extract", "-h"}).out.find("--direction"), std::string::npos);
}

TEST(AuditToolTest, UsageErrorsExitTwoWithOneLine) {
    SampleLog log;
    const std::string dir = log.dir.path();
    expectUsageError({});
    expectUsageError({"frobnicate", dir});
    expectUsageError({"--bogus"});
    expectUsageError({"list"});
    expectUsageError({"list", dir, "extra"});
    expectUsageError({"list", dir, "--bogus"});
    expectUsageError({"list", ""});
    expectUsageError({"verify", dir, "--json"});
    expectUsageError({"extract", dir});
    expectUsageError({"extract", dir, "--connection", "1"});
    expectUsageError({"extract", dir, "--direction", "c2u"});
    expectUsageError({"extract", dir, "--connection", "x1", "--direction", "c2u"});
    expectUsageError({"extract", dir, "--connection", "-1", "--direction", "c2u"});
    expectUsageError(
        {"extract", dir, "--connection", "99999999999999999999999", "--direction", "c2u"});
    expectUsageError({"extract", dir, "--connection", "1", "--direction", "both"});
    expectUsageError({"extract", dir, "--connection", "1", "--direction"});
    expectUsageError({"extract", dir, "--connection", "1", "--direction", "c2u", "-o"});
    expectUsageError({"extract", dir, "--conn", "1", "--direction", "c2u"});  // no guessing
}

TEST(AuditToolTest, MissingDirectoryIsARuntimeFailure) {
    TempDir parent;
    std::string missing = parent.path() + "/no-such-dir";
    for (std::vector<std::string> args :
         {std::vector<std::string>{"list", missing},
          {"list", missing, "--json"},
          {"verify", missing},
          {"extract", missing, "--connection", "1", "--direction", "c2u"}}) {
        auto result = runTool(args);
        ASSERT_TRUE(result.status && result.status->isExit(1)) << args[0] << describe(result);
        EXPECT_EQ(lineCount(result.err), 1u) << describe(result);
        EXPECT_NE(result.err.find(missing), std::string::npos) << result.err;
    }
}

TEST(AuditToolTest, ListPrintsAnAlignedTable) {
    SampleLog log;
    auto result = runTool({"list", log.dir.path()});
    ASSERT_TRUE(result.status && result.status->isExit(0)) << describe(result);
    EXPECT_TRUE(result.err.empty()) << result.err;
    std::vector<std::string> lines;
    std::istringstream in(result.out);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    ASSERT_EQ(lines.size(), 4u) << result.out;
    const std::vector<std::string> headers = {
        "ID", "ROUTE", "CLIENT", "UPSTREAM", "OPENED", "CLOSED", "C2U_BYTES", "U2C_BYTES", "STATE"};
    std::vector<std::vector<std::string>> rows;
    for (const auto& line : lines) {
        std::istringstream words(line);
        std::vector<std::string> row;
        for (std::string word; words >> word;) row.push_back(word);
        rows.push_back(row);
    }
    for (std::size_t i = 0; i < headers.size(); ++i) EXPECT_EQ(rows[0][i], headers[i]);
    std::vector<std::string> expected1 = {"1",
                                          "web",
                                          "198.51.100.1:4000",
                                          "192.0.2.1:443",
                                          "2023-11-14T22:13:20.000Z",
                                          "2023-11-14T22:13:20.009Z",
                                          std::to_string(log.c2u.size()),
                                          std::to_string(log.u2c.size()),
                                          "closed"};
    for (std::size_t i = 0; i < expected1.size(); ++i) EXPECT_EQ(rows[1][i], expected1[i]) << i;
    EXPECT_EQ(rows[2][0], "2");
    EXPECT_EQ(rows[2][4], "2023-11-14T22:13:20.002Z");
    EXPECT_EQ(rows[2][5], "-");  // not closed
    EXPECT_EQ(rows[2][7], "7");
    EXPECT_EQ(rows[2][8], "open");
    EXPECT_EQ(rows[3][0], "3");
    EXPECT_EQ(rows[3][6], "3");
    EXPECT_EQ(rows[3][8], "truncated");
    // Aligned: every row's state starts in the STATE column.
    auto stateColumn = lines[0].find("STATE");
    for (std::size_t i = 1; i < lines.size(); ++i)
        EXPECT_EQ(lines[i].substr(stateColumn, rows[i][8].size()), rows[i][8]) << lines[i];
}

TEST(AuditToolTest, ListJsonIsAnArrayWithTheFields) {
    SampleLog log;
    auto result = runTool({"list", log.dir.path(), "--json"});
    ASSERT_TRUE(result.status && result.status->isExit(0)) << describe(result);
    EXPECT_EQ(result.out.find_first_not_of(" \n"), result.out.find('['));
    namespace pt = boost::property_tree;
    pt::ptree tree;
    std::istringstream in(result.out);
    ASSERT_NO_THROW(pt::read_json(in, tree)) << result.out;
    std::vector<pt::ptree> objects;
    for (const auto& [key, value] : tree) {
        EXPECT_TRUE(key.empty()) << "not an array element: " << key;
        objects.push_back(value);
    }
    ASSERT_EQ(objects.size(), 3u) << result.out;
    for (const auto& object : objects)
        for (const char* field : {"id", "route", "client", "upstream", "opened", "closed",
                                  "c2u_bytes", "u2c_bytes", "state"})
            EXPECT_TRUE(object.get_child_optional(field).has_value()) << field;
    const std::regex iso(R"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z)");
    EXPECT_EQ(objects[0].get<std::uint64_t>("id"), 1u);
    EXPECT_EQ(objects[0].get<std::string>("route"), "web");
    EXPECT_EQ(objects[0].get<std::string>("opened"), "2023-11-14T22:13:20.000Z");
    EXPECT_TRUE(std::regex_match(objects[0].get<std::string>("closed"), iso));
    EXPECT_EQ(objects[0].get<std::uint64_t>("c2u_bytes"), log.c2u.size());
    EXPECT_EQ(objects[0].get<std::uint64_t>("u2c_bytes"), log.u2c.size());
    EXPECT_EQ(objects[0].get<std::string>("state"), "closed");
    EXPECT_EQ(objects[1].get<std::string>("client"), "[2001:db8::7]:5000");
    EXPECT_EQ(objects[1].get<std::string>("state"), "open");
    EXPECT_NE(result.out.find("\"closed\": null"), std::string::npos) << result.out;
    EXPECT_EQ(objects[2].get<std::string>("state"), "truncated");
    EXPECT_EQ(objects[2].get<std::uint64_t>("c2u_bytes"), 3u);

    TempDir empty;
    auto none = runTool({"list", empty.path(), "--json"});
    ASSERT_TRUE(none.status && none.status->isExit(0)) << describe(none);
    EXPECT_EQ(none.out, "[]\n");
}

TEST(AuditToolTest, ListJsonEscapesStrangeStrings) {
    TempDir dir;
    std::string index;
    encodeSegmentStart(index, 0, 1, kT0, 0);
    encodeOpen(index, 1, kT0, "q\"uote\\back\nline\x01", "bad\xff\xfeutf8", "ok");
    writeFile(dir.path() + "/w00-0000000001.index", index);
    writeFile(dir.path() + "/w00-0000000001.data", "");
    auto json = runTool({"list", dir.path(), "--json"});
    ASSERT_TRUE(json.status && json.status->isExit(0)) << describe(json);
    boost::property_tree::ptree tree;
    std::istringstream in(json.out);
    ASSERT_NO_THROW(boost::property_tree::read_json(in, tree)) << json.out;
    EXPECT_NE(json.out.find(R"("q\"uote\\back\nline\u0001")"), std::string::npos) << json.out;
    EXPECT_NE(json.out.find(R"("bad\ufffd\ufffdutf8")"), std::string::npos) << json.out;
    auto table = runTool({"list", dir.path()});
    ASSERT_TRUE(table.status && table.status->isExit(0)) << describe(table);
    EXPECT_EQ(lineCount(table.out), 2u) << table.out;  // no raw newline or control byte
    EXPECT_EQ(table.out.find('\x01'), std::string::npos);
}

TEST(AuditToolTest, ExtractWritesTheExactBytes) {
    SampleLog log;
    TempDir out;
    std::string file = out.path() + "/c2u.bin";
    auto toFile =
        runTool({"extract", log.dir.path(), "--connection", "1", "--direction", "c2u", "-o", file});
    ASSERT_TRUE(toFile.status && toFile.status->isExit(0)) << describe(toFile);
    EXPECT_TRUE(toFile.out.empty());
    EXPECT_TRUE(toFile.err.empty()) << toFile.err;
    EXPECT_TRUE(readFile(file) == log.c2u) << "extracted c2u bytes differ";

    auto toStdout = runTool({"extract", log.dir.path(), "--direction", "u2c", "--connection", "1"});
    ASSERT_TRUE(toStdout.status && toStdout.status->isExit(0)) << describe(toStdout);
    EXPECT_TRUE(toStdout.out == log.u2c) << "extracted u2c bytes differ";

    auto dash = runTool(
        {"extract", log.dir.path(), "--connection", "2", "--direction", "u2c", "--output", "-"});
    ASSERT_TRUE(dash.status && dash.status->isExit(0)) << describe(dash);
    EXPECT_EQ(dash.out, "partial");

    auto empty = runTool({"extract", log.dir.path(), "--connection", "2", "--direction", "c2u"});
    ASSERT_TRUE(empty.status && empty.status->isExit(0)) << describe(empty);
    EXPECT_EQ(empty.out, "");
}

TEST(AuditToolTest, ExtractOfAnUnknownConnectionFails) {
    SampleLog log;
    TempDir out;
    std::string file = out.path() + "/none.bin";
    auto result = runTool(
        {"extract", log.dir.path(), "--connection", "42", "--direction", "c2u", "-o", file});
    ASSERT_TRUE(result.status && result.status->isExit(1)) << describe(result);
    EXPECT_EQ(lineCount(result.err), 1u) << result.err;
    EXPECT_NE(result.err.find("42"), std::string::npos) << result.err;
    EXPECT_FALSE(std::filesystem::exists(file));
}

TEST(AuditToolTest, VerifyExitCodes) {
    SampleLog log;
    auto good = runTool({"verify", log.dir.path()});
    ASSERT_TRUE(good.status && good.status->isExit(0)) << describe(good);
    EXPECT_NE(good.out.find("consistent"), std::string::npos) << good.out;

    // Damage: a flipped byte in worker 0 segment 2's first chunk record.
    std::string path = log.indexPath(0, 2);
    std::string index = readFile(path);
    index[kSegmentStartRecordSize + 20] ^= 0x04;
    writeFile(path, index);
    auto bad = runTool({"verify", log.dir.path()});
    ASSERT_TRUE(bad.status && bad.status->isExit(1)) << describe(bad);
    auto place = path + ":" + std::to_string(kSegmentStartRecordSize) + ": bad CRC";
    EXPECT_EQ(bad.out.rfind(place, 0), 0u) << bad.out;
    // The lost chunk also breaks connection 1's Close byte count: one line per problem.
    EXPECT_EQ(lineCount(bad.out), 2u) << bad.out;
    EXPECT_NE(bad.out.find("Close record of connection 1"), std::string::npos) << bad.out;
    EXPECT_EQ(lineCount(bad.err), 1u) << bad.err;
}

TEST(AuditToolTest, DamagedPayloadFailsVerifyAndExtractUnlessForced) {
    SampleLog log;
    std::string dataPath = log.indexPath(1, 1);
    dataPath.replace(dataPath.size() - 6, 6, ".data");
    std::string data = readFile(dataPath);
    ASSERT_EQ(data, "xyz");
    writeFile(dataPath, "xYz");
    auto verify = runTool({"verify", log.dir.path()});
    ASSERT_TRUE(verify.status && verify.status->isExit(1)) << describe(verify);
    EXPECT_EQ(lineCount(verify.out), 1u) << verify.out;
    EXPECT_NE(verify.out.find("payload of connection 3 c2u at stream offset 0"), std::string::npos)
        << verify.out;

    TempDir out;
    std::string file = out.path() + "/3.bin";
    auto refused =
        runTool({"extract", log.dir.path(), "--connection", "3", "--direction", "c2u", "-o", file});
    ASSERT_TRUE(refused.status && refused.status->isExit(1)) << describe(refused);
    EXPECT_EQ(lineCount(refused.err), 1u) << refused.err;
    EXPECT_NE(refused.err.find("--force"), std::string::npos) << refused.err;
    EXPECT_FALSE(std::filesystem::exists(file));
    auto forced = runTool({"extract", log.dir.path(), "--connection", "3", "--direction", "c2u",
                           "-o", file, "--force"});
    ASSERT_TRUE(forced.status && forced.status->isExit(0)) << describe(forced);
    EXPECT_EQ(readFile(file), "xYz");
    EXPECT_EQ(lineCount(forced.err), 1u) << forced.err;
}

TEST(AuditToolTest, VerifyWithAKeyFileRefusesAnUnkeyedLog) {
    SampleLog log;
    TempDir keys;
    std::string key = keys.path() + "/key";
    writeFile(key, "0123456789abcdef0123456789abcdef");
    ASSERT_EQ(::chmod(key.c_str(), 0600), 0);
    auto keyed = runTool({"verify", log.dir.path(), "--key-file", key});
    ASSERT_TRUE(keyed.status && keyed.status->isExit(1)) << describe(keyed);
    EXPECT_EQ(lineCount(keyed.out), 3u) << keyed.out;  // each of the three seals
    EXPECT_NE(keyed.out.find("sealed without a key"), std::string::npos) << keyed.out;
    auto missing = runTool({"verify", log.dir.path(), "--key-file", keys.path() + "/none"});
    ASSERT_TRUE(missing.status && missing.status->isExit(1)) << describe(missing);
    EXPECT_NE(missing.err.find("/none"), std::string::npos) << missing.err;
    auto empty = runTool({"verify", keys.path()});  // a directory without audit log
    ASSERT_TRUE(empty.status && empty.status->isExit(1)) << describe(empty);
    EXPECT_NE(empty.out.find("no audit log"), std::string::npos) << empty.out;
}

TEST(AuditToolTest, GarbageNeverCrashesIt) {
    std::mt19937 random(2024);
    for (int round = 0; round < 6; ++round) {
        TempDir dir;
        for (unsigned file = 0; file < 4; ++file) {
            std::string garbage(1 + random() % (round == 0 ? 20 : 70000), '\0');
            for (auto& c : garbage) c = static_cast<char>(random());
            if (file % 2 == 0 && garbage.size() >= 8) {
                // A valid magic and plausible header start, so decoding goes deeper.
                std::string header;
                encodeOpen(header, 1, 2, "r", "c", "u");
                garbage.replace(0, 8, header.substr(0, 8));
            }
            std::string base = dir.path() + "/" + segmentBaseName(file % 2, file + 1);
            writeFile(base + ".index", garbage);
            writeFile(base + ".data", garbage.substr(0, garbage.size() / 2));
        }
        for (std::vector<std::string> args :
             {std::vector<std::string>{"list", dir.path()},
              {"list", dir.path(), "--json"},
              {"verify", dir.path()},
              {"extract", dir.path(), "--connection", "1", "--direction", "c2u"}}) {
            auto result = runTool(args);
            ASSERT_TRUE(result.status.has_value()) << args[0] << ": timed out";
            EXPECT_TRUE(result.status->isExit(1)) << args[0] << " " << describe(result);
        }
    }
}

}  // namespace
}  // namespace splicegate::test
