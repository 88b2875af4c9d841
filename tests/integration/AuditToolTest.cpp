// splicegate-audit as a process (the splicegate-audit(1) man page): list as a table, as
// JSON and as JSON lines with every filter, export as a pcap read back with tcpdump and compared
// with extract, extract to a file and to stdout, verify, --help/--version, usage errors (exit 2,
// one line), runtime failures (exit 1) and garbage input that must never crash it. No root needed.
// property_tree pulls in the deprecated global boost::bind placeholders; keep the build quiet.
#define BOOST_BIND_GLOBAL_PLACEHOLDERS
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/property_tree/json_parser.hpp>
#include <boost/property_tree/ptree.hpp>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "audit/Crc32c.h"
#include "audit/Records.h"
#include "common/UniqueFd.h"
#include "tests/support/Daemon.h"
#include "tests/support/Sockets.h"
#include "tests/support/TestServer.h"
#include "tests/support/Traffic.h"

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
    for (const char* word : {"list", "export", "extract", "verify", "--json", "--jsonl", "--pcap",
                             "--connection", "--direction"})
        EXPECT_NE(help.out.find(word), std::string::npos) << word;
    // Every command names the archive address in the main usage, not only in its own help.
    for (const char* command : {"list", "export", "extract", "verify"})
        EXPECT_NE(help.out.find(std::string("  ") + command + " DIR|s3://BUCKET/PREFIX"),
                  std::string::npos)
            << command << "\n" << help.out;
    for (const char* word : {"s3://BUCKET --all-boxes", "--s3-endpoint", "--s3-credentials-file"})
        EXPECT_NE(help.out.find(word), std::string::npos) << word << "\n" << help.out;
    auto version = runTool({"--version"});
    ASSERT_TRUE(version.status && version.status->isExit(0)) << describe(version);
    EXPECT_EQ(version.out, std::string("splicegate-audit ") + SPLICEGATE_VERSION + "\n");
    for (const char* command : {"list", "export", "extract", "verify"}) {
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

// s3://BUCKET/PREFIX (the archive, docs/archive.md): the address and the S3 options are checked
// before any request (tests/s3 lists a real bucket).
TEST(AuditToolTest, ArchiveAddressUsageErrorsExitTwo) {
    TempDir dir;
    auto loose = dir.write("credentials", "[default]\naws_access_key_id = a\naws_secret_access_key = b\n");
    ::chmod(loose.c_str(), 0644);
    expectUsageError({"list", "s3://"});
    expectUsageError({"list", "s3:///prefix", "--s3-endpoint", "http://127.0.0.1:9"});
    expectUsageError({"list", "s3://bucket/prefix"});  // no --s3-endpoint
    expectUsageError({"list", "s3://bucket/prefix", "--s3-endpoint", "ftp://127.0.0.1:9",
                      "--s3-credentials-file", loose.substr(0, loose.rfind('/')) + "/absent"});
    expectUsageError({"list", "s3://bucket/prefix", "--s3-endpoint", "http://127.0.0.1:9",
                      "--s3-credentials-file", loose});  // mode 0644
    // A server that is not there: a runtime failure naming the endpoint.
    ::chmod(loose.c_str(), 0600);
    auto unreachable = runTool({"list", "s3://bucket/prefix", "--s3-endpoint",
                                "http://127.0.0.1:9", "--s3-credentials-file", loose});
    ASSERT_TRUE(unreachable.status);
    EXPECT_TRUE(unreachable.status->isExit(1)) << describe(unreachable);
    EXPECT_NE(unreachable.err.find("127.0.0.1:9"), std::string::npos) << describe(unreachable);
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

    // A directory that holds no audit log is an error, as for verify.
    TempDir empty;
    auto none = runTool({"list", empty.path(), "--json"});
    ASSERT_TRUE(none.status && none.status->isExit(1)) << describe(none);
    EXPECT_NE(none.err.find("no audit log here"), std::string::npos) << describe(none);
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
              {"list", dir.path(), "--jsonl", "--since", "2000-01-01T00:00:00Z"},
              {"verify", dir.path()},
              {"export", dir.path(), "--pcap", dir.path() + "/garbage.pcap"},
              {"extract", dir.path(), "--connection", "1", "--direction", "c2u"}}) {
            auto result = runTool(args);
            ASSERT_TRUE(result.status.has_value()) << args[0] << ": timed out";
            EXPECT_TRUE(result.status->isExit(1)) << args[0] << " " << describe(result);
        }
    }
}

// ---- list filters and --jsonl

// The ids `list --jsonl` prints with `filters`, each line parsed as one JSON document.
std::vector<std::uint64_t> listedIds(const SampleLog& log, std::vector<std::string> filters) {
    std::vector<std::string> args{"list", log.dir.path(), "--jsonl"};
    args.insert(args.end(), filters.begin(), filters.end());
    auto result = runTool(args);
    EXPECT_TRUE(result.status && result.status->isExit(0)) << describe(result);
    std::vector<std::uint64_t> ids;
    std::istringstream in(result.out);
    for (std::string line; std::getline(in, line);) {
        boost::property_tree::ptree object;
        std::istringstream one(line);
        EXPECT_NO_THROW(boost::property_tree::read_json(one, object)) << line;
        ids.push_back(object.get<std::uint64_t>("id", 0));
    }
    std::sort(ids.begin(), ids.end());
    return ids;
}

using Ids = std::vector<std::uint64_t>;

TEST(AuditToolTest, ListJsonLinesIsOneObjectPerLineWithTheSharedFieldNames) {
    SampleLog log;
    auto result = runTool({"list", log.dir.path(), "--jsonl"});
    ASSERT_TRUE(result.status && result.status->isExit(0)) << describe(result);
    std::istringstream in(result.out);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    ASSERT_EQ(lines.size(), 3u) << result.out;
    // The names splicegatectl --json uses (via and sni too: null in this log, which has none),
    // and the close reason.
    const std::set<std::string> fields = {"id",        "route",     "client", "via",
                                          "sni",       "upstream",  "opened", "closed",
                                          "c2u_bytes", "u2c_bytes", "state",  "reason"};
    std::map<std::uint64_t, boost::property_tree::ptree> byId;
    for (const auto& line : lines) {
        ASSERT_EQ(line.front(), '{') << line;
        ASSERT_EQ(line.back(), '}') << line;
        boost::property_tree::ptree object;
        std::istringstream one(line);
        ASSERT_NO_THROW(boost::property_tree::read_json(one, object)) << line;
        std::set<std::string> keys;
        for (const auto& [key, value] : object) keys.insert(key);
        EXPECT_EQ(keys, fields) << line;
        byId[object.get<std::uint64_t>("id")] = object;
    }
    EXPECT_EQ(byId.at(1).get<std::string>("state"), "closed");
    EXPECT_EQ(byId.at(1).get<std::uint64_t>("c2u_bytes"), log.c2u.size());
    EXPECT_EQ(byId.at(2).get<std::string>("state"), "open");
    EXPECT_EQ(byId.at(3).get<std::string>("state"), "truncated");
    EXPECT_EQ(byId.at(3).get<std::uint64_t>("c2u_bytes"), 3u);
    // Same objects as --json's array elements.
    auto json = runTool({"list", log.dir.path(), "--json"});
    ASSERT_TRUE(json.status && json.status->isExit(0)) << describe(json);
    for (const auto& line : lines) EXPECT_NE(json.out.find(line), std::string::npos) << line;
}

TEST(AuditToolTest, ListFiltersEachAndCombined) {
    // 1: web, 198.51.100.1:4000, opened T0 + 1 ns, closed T0 + 9 ms.
    // 2: db, [2001:db8::7]:5000, opened T0 + 2 ms, open.
    // 3: web, 198.51.100.3:4000, opened T0 + 3 ns, truncated.
    SampleLog log;
    EXPECT_EQ(listedIds(log, {}), (Ids{1, 2, 3}));
    EXPECT_EQ(listedIds(log, {"--route", "web"}), (Ids{1, 3}));
    EXPECT_EQ(listedIds(log, {"--route", "db"}), (Ids{2}));
    EXPECT_EQ(listedIds(log, {"--client", "198.51.100.1"}), (Ids{1}));
    EXPECT_EQ(listedIds(log, {"--client", "198.51.100.1:4000"}), (Ids{1}));
    // A client that is in no connection fails, as --route does (NothingToListIsAnErrorNamingWhy).
    for (const char* client : {"198.51.100.1:4001", "192.0.2.99"}) {
        auto result = runTool({"list", log.dir.path(), "--jsonl", "--client", client});
        EXPECT_TRUE(result.status && result.status->isExit(1)) << describe(result);
        EXPECT_EQ(result.out, "") << client;
    }
    EXPECT_EQ(listedIds(log, {"--client", "2001:db8:0:0::7"}), (Ids{2}));
    EXPECT_EQ(listedIds(log, {"--client", "[2001:db8::7]:5000"}), (Ids{2}));
    EXPECT_EQ(listedIds(log, {"--client", "[2001:db8::7]"}), (Ids{2}));
    EXPECT_EQ(listedIds(log, {"--connection", "2"}), (Ids{2}));
    // --since: still open at or after; 1 closed at .009.
    EXPECT_EQ(listedIds(log, {"--since", "2023-11-14T22:13:20.009Z"}), (Ids{1, 2, 3}));
    EXPECT_EQ(listedIds(log, {"--since", "2023-11-14T22:13:20.010Z"}), (Ids{2, 3}));
    EXPECT_EQ(listedIds(log, {"--since", "2023-11-14 23:13:20.0091+01:00"}), (Ids{2, 3}));
    // --until: opened at or before; 2 opened at .002.
    EXPECT_EQ(listedIds(log, {"--until", "2023-11-14T22:13:20.001Z"}), (Ids{1, 3}));
    EXPECT_EQ(listedIds(log, {"--until", "2023-11-14t17:13:20.002-05:00"}), (Ids{1, 2, 3}));
    EXPECT_EQ(listedIds(log, {"--until", "2023-11-14T22:13:19Z"}), (Ids{}));
    // Combined: every filter must match.
    EXPECT_EQ(listedIds(log, {"--route", "web", "--since", "2023-11-14T22:13:20.010Z"}), (Ids{3}));
    EXPECT_EQ(listedIds(log, {"--route", "web", "--client", "198.51.100.1", "--until",
                              "2023-11-14T22:13:20Z"}),
              (Ids{}));
    EXPECT_EQ(listedIds(log, {"--since", "2023-11-14T22:13:20.001Z", "--until",
                              "2023-11-14T22:13:20.002Z", "--connection", "2"}),
              (Ids{2}));
    // The table takes the same filters.
    auto table = runTool({"list", log.dir.path(), "--route", "db"});
    ASSERT_TRUE(table.status && table.status->isExit(0)) << describe(table);
    EXPECT_EQ(lineCount(table.out), 2u) << table.out;
}

TEST(AuditToolTest, ListOfAnUnknownRouteOrConnectionFails) {
    SampleLog log;
    for (std::vector<std::string> args :
         {std::vector<std::string>{"list", log.dir.path(), "--route", "nope"},
          {"list", log.dir.path(), "--jsonl", "--connection", "42"},
          {"list", log.dir.path(), "--json", "--route", "nope"}}) {
        auto result = runTool(args);
        ASSERT_TRUE(result.status && result.status->isExit(1)) << describe(result);
        EXPECT_EQ(lineCount(result.err), 1u) << describe(result);
        EXPECT_TRUE(result.err.find("nope") != std::string::npos ||
                    result.err.find("42") != std::string::npos)
            << result.err;
    }
    // A known route with nothing in the interval is an empty answer, not an error.
    auto none = runTool(
        {"list", log.dir.path(), "--json", "--route", "db", "--until", "2020-01-01T00:00:00Z"});
    ASSERT_TRUE(none.status && none.status->isExit(0)) << describe(none);
    EXPECT_EQ(none.out, "[]\n");
}

// A directory with no audit log is an error for list and export as it is for verify; --client
// that matches nothing fails like --route; a well-formed time the log cannot hold is named out
// of range, not invalid; verify's key file is named by its own option.
TEST(AuditToolTest, NothingToListIsAnErrorNamingWhy) {
    TempDir empty;
    writeFile(empty.path() + "/notes.txt", "not an audit log\n");
    for (std::vector<std::string> args :
         {std::vector<std::string>{"list", empty.path()},
          {"list", empty.path(), "--json"},
          {"export", empty.path(), "--pcap", empty.path() + "/out.pcap"},
          {"verify", empty.path()}}) {
        auto result = runTool(args);
        ASSERT_TRUE(result.status && result.status->isExit(1)) << args[0] << describe(result);
        EXPECT_NE((result.out + result.err).find("no audit log here"), std::string::npos)
            << describe(result);
        EXPECT_EQ(result.out.find("ROUTE"), std::string::npos) << "printed an empty table";
    }
    EXPECT_FALSE(std::filesystem::exists(empty.path() + "/out.pcap"));

    SampleLog log;
    auto noClient = runTool({"list", log.dir.path(), "--client", "203.0.113.9"});
    ASSERT_TRUE(noClient.status && noClient.status->isExit(1)) << describe(noClient);
    EXPECT_EQ(lineCount(noClient.err), 1u) << describe(noClient);
    EXPECT_NE(noClient.err.find("no connection from client 203.0.113.9"), std::string::npos)
        << noClient.err;
    auto client = runTool({"list", log.dir.path(), "--jsonl", "--client", "198.51.100.3"});
    ASSERT_TRUE(client.status && client.status->isExit(0)) << describe(client);
    EXPECT_EQ(lineCount(client.out), 1u) << client.out;

    for (const char* far : {"2500-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "1600-01-01T00:00:00Z"}) {
        auto result = runTool({"list", log.dir.path(), "--since", far});
        ASSERT_TRUE(result.status && result.status->isExit(2)) << describe(result);
        EXPECT_NE(result.err.find("out of range"), std::string::npos) << result.err;
        EXPECT_EQ(result.err.find("invalid time"), std::string::npos) << result.err;
    }

    auto key = runTool({"verify", log.dir.path(), "--key-file", "/nonexistent"});
    ASSERT_TRUE(key.status && key.status->isExit(1)) << describe(key);
    EXPECT_NE(key.err.find("--key-file /nonexistent"), std::string::npos) << key.err;
    EXPECT_EQ(key.err.find("audit-hmac-key-file"), std::string::npos) << key.err;
}

TEST(AuditToolTest, ListAndExportBadOptionsExitTwoWithOneLine) {
    SampleLog log;
    const std::string dir = log.dir.path();
    for (const char* time :
         {"yesterday", "2023-11-14", "2023-11-14T22:13:20", "2023-13-01T00:00:00Z",
          "2023-02-29T00:00:00Z", "2023-11-14T24:00:00Z", "2023-11-14T22:13:20.Z",
          "2023-11-14T22:13:20+0100", "2023-11-14T22:13:20Zjunk", ""}) {
        expectUsageError({"list", dir, "--since", time});
        expectUsageError({"list", dir, "--until", time});
    }
    expectUsageError(
        {"list", dir, "--since", "2023-11-15T00:00:00Z", "--until", "2023-11-14T00:00:00Z"});
    expectUsageError({"list", dir, "--json", "--jsonl"});
    expectUsageError({"list", dir, "--route", "bad name"});
    expectUsageError({"list", dir, "--route", ""});
    for (const char* client : {"host.example", "198.51.100.1:", "198.51.100.1:70000",
                               "[198.51.100.1]:80", "2001:db8::7:5000x", "[2001:db8::7"})
        expectUsageError({"list", dir, "--client", client});
    expectUsageError({"list", dir, "--connection", "one"});
    expectUsageError({"list", dir, "--since"});
    expectUsageError({"export", dir});
    expectUsageError({"export", dir, "--pcap", ""});
    expectUsageError({"export", dir, "--pcap", "/dev/null", "--connection", "x"});
    expectUsageError({"export", dir, "--pcap", "/dev/null", "--json"});
    expectUsageError({"export", "--pcap", "/dev/null"});

    TempDir parent;
    const std::string missing = parent.path() + "/no-such-dir";
    for (std::vector<std::string> args :
         {std::vector<std::string>{"list", missing, "--jsonl"},
          {"list", missing, "--route", "web"},
          {"export", missing, "--pcap", parent.path() + "/out.pcap"},
          {"export", dir, "--pcap", missing + "/out.pcap"}}) {
        auto result = runTool(args);
        ASSERT_TRUE(result.status && result.status->isExit(1)) << describe(result);
        EXPECT_EQ(lineCount(result.err), 1u) << describe(result);
        EXPECT_NE(result.err.find(missing), std::string::npos) << result.err;
    }
    EXPECT_FALSE(std::filesystem::exists(parent.path() + "/out.pcap"));
}

// ---- export --pcap

struct CapturedPacket {
    int family = 0;
    std::string source, destination;  // address bytes
    std::uint16_t sourcePort = 0, destinationPort = 0;
    std::uint32_t seq = 0;
    std::uint8_t flags = 0;
    std::string payload;
};

std::uint32_t read32(const std::string& bytes, std::size_t at, bool swap) {
    std::uint32_t value;
    std::memcpy(&value, bytes.data() + at, 4);
    return swap ? __builtin_bswap32(value) : value;
}

std::uint32_t be(const std::string& bytes, std::size_t at, int width) {
    std::uint32_t value = 0;
    for (int i = 0; i < width; ++i) value = value << 8 | static_cast<std::uint8_t>(bytes[at + i]);
    return value;
}

// A classic pcap file (either timestamp precision, either byte order) of raw IP TCP packets,
// parsed independently of the exporter's code.
std::vector<CapturedPacket> parsePcap(const std::string& file) {
    std::vector<CapturedPacket> packets;
    if (file.size() < 24) {
        ADD_FAILURE() << "pcap shorter than its header: " << file.size();
        return packets;
    }
    const std::uint32_t magic = read32(file, 0, false);
    const bool swap = magic == 0xd4c3b2a1 || magic == 0x4d3cb2a1;
    EXPECT_TRUE(swap || magic == 0xa1b2c3d4 || magic == 0xa1b23c4d) << std::hex << magic;
    EXPECT_EQ(read32(file, 20, swap), 101u) << "link type LINKTYPE_RAW";
    for (std::size_t at = 24; at < file.size();) {
        if (at + 16 > file.size()) {
            ADD_FAILURE() << "torn record header at " << at;
            break;
        }
        const std::uint32_t length = read32(file, at + 8, swap);
        EXPECT_EQ(length, read32(file, at + 12, swap)) << "captured all of it";
        if (at + 16 + length > file.size()) {
            ADD_FAILURE() << "torn packet at " << at;
            break;
        }
        const std::string ip = file.substr(at + 16, length);
        at += 16 + length;
        CapturedPacket packet;
        std::size_t tcp = 0;
        if ((ip[0] >> 4) == 4) {
            packet.family = AF_INET;
            EXPECT_EQ(be(ip, 2, 2), ip.size());
            EXPECT_EQ(ip[9], 6);
            packet.source = ip.substr(12, 4);
            packet.destination = ip.substr(16, 4);
            tcp = static_cast<std::size_t>(ip[0] & 0x0f) * 4;
        } else {
            packet.family = AF_INET6;
            EXPECT_EQ(be(ip, 4, 2) + 40, ip.size());
            EXPECT_EQ(ip[6], 6);
            packet.source = ip.substr(8, 16);
            packet.destination = ip.substr(24, 16);
            tcp = 40;
        }
        packet.sourcePort = static_cast<std::uint16_t>(be(ip, tcp, 2));
        packet.destinationPort = static_cast<std::uint16_t>(be(ip, tcp + 2, 2));
        packet.seq = be(ip, tcp + 4, 4);
        packet.flags = static_cast<std::uint8_t>(ip[tcp + 13]);
        const std::size_t offset =
            static_cast<std::size_t>(static_cast<std::uint8_t>(ip[tcp + 12]) >> 4) * 4;
        packet.payload = ip.substr(tcp + offset);
        packets.push_back(std::move(packet));
    }
    return packets;
}

// The payload of the packets, in capture order, checking that each one's sequence number follows
// the previous one's (SYN and FIN count one).
std::string reassemble(const std::vector<CapturedPacket>& packets) {
    std::string bytes;
    std::optional<std::uint32_t> next;
    for (const auto& packet : packets) {
        if (next) {
            EXPECT_EQ(packet.seq, *next) << "sequence gap";
        }
        next = packet.seq + static_cast<std::uint32_t>(packet.payload.size()) +
               (packet.flags & 0x03 ? 1 : 0);
        bytes += packet.payload;
    }
    return bytes;
}

// tcpdump's path, or "" when it is missing (tools/install-deps.sh installs it).
std::string tcpdumpPath() {
    for (const char* path : {"/usr/bin/tcpdump", "/usr/sbin/tcpdump"})
        if (::access(path, X_OK) == 0) return path;
    return "";
}

ProcessResult runTcpdump(const std::vector<std::string>& args) {
    std::vector<std::string> argv{tcpdumpPath()};
    argv.insert(argv.end(), args.begin(), args.end());
    return runProcess(argv, milliseconds(20000));
}

std::string extractBytes(const SampleLog& log, const char* id, const char* direction) {
    auto result =
        runTool({"extract", log.dir.path(), "--connection", id, "--direction", direction});
    EXPECT_TRUE(result.status && result.status->isExit(0)) << describe(result);
    return result.out;
}

TEST(AuditToolTest, ExportPcapReadsBackWithTcpdumpAndMatchesExtract) {
    ASSERT_FALSE(tcpdumpPath().empty()) << "tcpdump is missing: tools/install-deps.sh installs it";
    SampleLog log;
    TempDir out;
    const std::string pcap = out.path() + "/all.pcap";
    auto exported = runTool({"export", log.dir.path(), "--pcap", pcap});
    ASSERT_TRUE(exported.status && exported.status->isExit(0)) << describe(exported);
    EXPECT_TRUE(exported.err.empty()) << exported.err;  // stderr is no terminal: no progress

    // tcpdump reads every packet and finds every IP and TCP checksum correct.
    auto text = runTcpdump({"-r", pcap, "-nn", "-vv"});
    ASSERT_TRUE(text.status && text.status->isExit(0)) << describe(text);
    EXPECT_EQ(text.out.find("incorrect"), std::string::npos) << text.out;
    EXPECT_EQ(text.out.find("bad"), std::string::npos) << text.out;
    // 3 connections: 3 handshakes; 1 closed: one FIN each way.
    EXPECT_EQ(grepLines(text.out, "Flags [S],").size(), 3u) << text.out;
    EXPECT_EQ(grepLines(text.out, "Flags [S.],").size(), 3u) << text.out;
    EXPECT_EQ(grepLines(text.out, "Flags [F.],").size(), 2u) << text.out;
    EXPECT_EQ(grepLines(text.out, "198.51.100.1.4000 > 192.0.2.1.443: Flags [S],").size(), 1u);
    // Connection 2: an IPv6 client to an IPv4 upstream, written as IPv6 with the mapped address.
    EXPECT_EQ(grepLines(text.out, "2001:db8::7.5000 > ::ffff:192.0.2.2.5432: Flags [S],").size(),
              1u)
        << text.out;
    const auto checksums = grepLines(text.out, "(correct)");
    EXPECT_GE(checksums.size(), 10u) << text.out;

    // Each direction through tcpdump's own filter and writer, reassembled, equals extract's bytes.
    struct Direction {
        const char* id;
        const char* direction;
        const char* filter;
    };
    for (const Direction& d : {
             Direction{"1", "c2u", "src host 198.51.100.1 and src port 4000"},
             Direction{"1", "u2c", "dst host 198.51.100.1 and dst port 4000"},
             Direction{"2", "u2c", "ip6 and src port 5432"},
             Direction{"2", "c2u", "ip6 and dst port 5432"},
             Direction{"3", "c2u", "src host 198.51.100.3"},
         }) {
        auto filtered = runTcpdump({"-r", pcap, "-w", "-", d.filter});
        ASSERT_TRUE(filtered.status && filtered.status->isExit(0)) << describe(filtered);
        const auto packets = parsePcap(filtered.out);
        ASSERT_FALSE(packets.empty()) << d.filter;
        EXPECT_TRUE(reassemble(packets) == extractBytes(log, d.id, d.direction))
            << "connection " << d.id << " " << d.direction << ": payload differs from extract";
    }
    // 100,000 c2u bytes of connection 1: split at 65,000 at most, the chunk bounds kept.
    const auto all = parsePcap(readFile(pcap));
    std::size_t largest = 0;
    for (const auto& packet : all) largest = std::max(largest, packet.payload.size());
    EXPECT_EQ(largest, 65000u);
}

TEST(AuditToolTest, ExportOfOneConnection) {
    SampleLog log;
    TempDir out;
    const std::string pcap = out.path() + "/one.pcap";
    auto exported = runTool({"export", log.dir.path(), "--pcap", pcap, "--connection", "3"});
    ASSERT_TRUE(exported.status && exported.status->isExit(0)) << describe(exported);
    const auto packets = parsePcap(readFile(pcap));
    // Handshake, one data segment, no FIN (truncated).
    ASSERT_EQ(packets.size(), 4u);
    EXPECT_EQ(packets[0].flags, 0x02);
    EXPECT_EQ(packets[1].flags, 0x12);
    EXPECT_EQ(packets[2].flags, 0x10);
    EXPECT_EQ(packets[3].payload, "xyz");
    EXPECT_EQ(packets[3].sourcePort, 4000);
    EXPECT_EQ(packets[3].destinationPort, 443);

    auto toStdout = runTool({"export", log.dir.path(), "--pcap", "-", "--connection", "3"});
    ASSERT_TRUE(toStdout.status && toStdout.status->isExit(0)) << describe(toStdout);
    EXPECT_TRUE(toStdout.out == readFile(pcap)) << "stdout and file differ";

    const std::string none = out.path() + "/none.pcap";
    auto unknown = runTool({"export", log.dir.path(), "--pcap", none, "--connection", "42"});
    ASSERT_TRUE(unknown.status && unknown.status->isExit(1)) << describe(unknown);
    EXPECT_EQ(lineCount(unknown.err), 1u) << unknown.err;
    EXPECT_NE(unknown.err.find("42"), std::string::npos) << unknown.err;
    EXPECT_FALSE(std::filesystem::exists(none));
}

TEST(AuditToolTest, ExportWithMissingBytesLeavesAGapAndFails) {
    SampleLog log;
    // Worker 0 segment 2 holds connection 1's u2c bytes and the rest of its c2u: cut it short.
    const std::string data = log.dir.path() + "/" + segmentBaseName(0, 2) + ".data";
    ASSERT_EQ(::truncate(data.c_str(), 50), 0);
    TempDir out;
    const std::string pcap = out.path() + "/gap.pcap";
    auto exported = runTool({"export", log.dir.path(), "--pcap", pcap});
    ASSERT_TRUE(exported.status && exported.status->isExit(1)) << describe(exported);
    EXPECT_NE(exported.err.find("connection 1"), std::string::npos) << exported.err;
    EXPECT_NE(exported.err.find(data), std::string::npos) << exported.err;
    // The capture holds everything else, with the lost bytes as a sequence gap.
    const auto packets = parsePcap(readFile(pcap));
    std::uint32_t fin = 0;
    for (const auto& packet : packets) fin += (packet.flags & 0x01) != 0;
    EXPECT_EQ(fin, 2u);
}

// The real daemon's log: two echoed connections, exported and read back with tcpdump; each
// direction equals extract's bytes, and list --jsonl agrees with the byte counts.
TEST(AuditToolTest, ExportOfARealDaemonsLogMatchesExtract) {
    ASSERT_FALSE(tcpdumpPath().empty()) << "tcpdump is missing: tools/install-deps.sh installs it";
    TestServer upstream(echoUpstream(milliseconds(30000)));
    TempDir auditRoot;
    const std::string auditDir = auditRoot.path() + "/audit";
    const std::uint16_t port = pickFreePort();
    Daemon daemon(relayArgs(port, {upstream.address()}, {"--audit-dir", auditDir}));
    ASSERT_TRUE(daemon.waitReady(port)) << daemon.why();
    constexpr std::uint64_t kSizes[] = {300'000, 70'001};
    for (std::size_t i = 0; i < 2; ++i) {
        int error = 0;
        UniqueFd fd = connectTcp(port, error);
        ASSERT_TRUE(fd) << std::strerror(error);
        ASSERT_TRUE(echoRoundTrip(fd.get(), 7 + i, kSizes[i], milliseconds(20000)));
    }
    ASSERT_TRUE(daemon.terminate(milliseconds(20000))) << daemon.why();

    auto listed = runTool({"list", auditDir, "--jsonl", "--route", "default"});
    ASSERT_TRUE(listed.status && listed.status->isExit(0)) << describe(listed);
    std::vector<std::uint64_t> ids;
    std::istringstream in(listed.out);
    for (std::string line; std::getline(in, line);) {
        boost::property_tree::ptree object;
        std::istringstream one(line);
        ASSERT_NO_THROW(boost::property_tree::read_json(one, object)) << line;
        EXPECT_EQ(object.get<std::string>("state"), "closed") << line;
        EXPECT_EQ(object.get<std::uint64_t>("c2u_bytes"), object.get<std::uint64_t>("u2c_bytes"));
        ids.push_back(object.get<std::uint64_t>("id"));
    }
    ASSERT_EQ(ids.size(), 2u) << listed.out;

    TempDir out;
    const std::string pcap = out.path() + "/daemon.pcap";
    auto exported = runTool({"export", auditDir, "--pcap", pcap});
    ASSERT_TRUE(exported.status && exported.status->isExit(0)) << describe(exported);
    auto text = runTcpdump({"-r", pcap, "-nn", "-vv"});
    ASSERT_TRUE(text.status && text.status->isExit(0)) << describe(text);
    EXPECT_EQ(text.out.find("incorrect"), std::string::npos) << text.out.substr(0, 4000);
    EXPECT_EQ(grepLines(text.out, "Flags [S],").size(), 2u);
    EXPECT_EQ(grepLines(text.out, "Flags [F.],").size(), 4u);

    const std::string upstreamPort = std::to_string(upstream.port());
    std::string c2u, u2c;
    for (std::uint64_t id : ids) {
        c2u +=
            runTool({"extract", auditDir, "--connection", std::to_string(id), "--direction", "c2u"})
                .out;
        u2c +=
            runTool({"extract", auditDir, "--connection", std::to_string(id), "--direction", "u2c"})
                .out;
    }
    EXPECT_EQ(c2u.size(), kSizes[0] + kSizes[1]);
    // One direction of both connections at once: the client ports tell them apart.
    for (const auto& [filter, expected] :
         {std::pair<std::string, std::string*>{"tcp dst port " + upstreamPort, &c2u},
          {"tcp src port " + upstreamPort, &u2c}}) {
        auto filtered = runTcpdump({"-r", pcap, "-w", "-", filter});
        ASSERT_TRUE(filtered.status && filtered.status->isExit(0)) << describe(filtered);
        std::map<std::uint16_t, std::vector<CapturedPacket>> byClientPort;
        for (auto& packet : parsePcap(filtered.out)) {
            const std::uint16_t clientPort =
                packet.sourcePort == upstream.port() ? packet.destinationPort : packet.sourcePort;
            byClientPort[clientPort].push_back(std::move(packet));
        }
        ASSERT_EQ(byClientPort.size(), 2u) << filter;
        // Connection ids follow the connects, and so do the client ports' first SYNs; match by
        // content instead of assuming either order.
        std::string first = reassemble(byClientPort.begin()->second);
        std::string second = reassemble(std::next(byClientPort.begin())->second);
        EXPECT_TRUE(first + second == *expected || second + first == *expected)
            << filter << ": payload differs from extract";
    }
}

// export takes list's filters: route, client and time pick the connections written.
TEST(AuditToolTest, ExportFiltersLikeList) {
    SampleLog log;
    TempDir out;
    auto ports = [&](const std::vector<std::string>& filter) {
        const std::string pcap = out.path() + "/f.pcap";
        std::vector<std::string> args{"export", log.dir.path(), "--pcap", pcap};
        args.insert(args.end(), filter.begin(), filter.end());
        auto result = runTool(args);
        EXPECT_TRUE(result.status && result.status->isExit(0)) << describe(result);
        std::set<std::uint16_t> clientPorts;
        for (const auto& packet : parsePcap(readFile(pcap)))
            if (packet.destinationPort == 443 || packet.destinationPort == 5432)
                clientPorts.insert(packet.sourcePort);
        return clientPorts;
    };
    EXPECT_EQ(ports({"--route", "db"}), (std::set<std::uint16_t>{5000}));
    EXPECT_EQ(ports({"--client", "198.51.100.3"}), (std::set<std::uint16_t>{4000}));
    EXPECT_EQ(ports({"--route", "web", "--client", "198.51.100.1:4000"}),
              (std::set<std::uint16_t>{4000}));
    EXPECT_EQ(ports({"--until", "2023-11-14T22:13:20.001Z"}), (std::set<std::uint16_t>{4000}));
    const std::string none = out.path() + "/none.pcap";
    auto nothing = runTool({"export", log.dir.path(), "--pcap", none, "--route", "nope"});
    ASSERT_TRUE(nothing.status && nothing.status->isExit(1)) << describe(nothing);
    EXPECT_EQ(lineCount(nothing.err), 1u) << nothing.err;
    EXPECT_FALSE(std::filesystem::exists(none));
}

}  // namespace
}  // namespace splicegate::test
