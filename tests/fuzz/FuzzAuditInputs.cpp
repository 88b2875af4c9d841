// libFuzzer target fuzz_audit_inputs: the audit's two inputs an attacker controls, chosen by the
// first byte of the input (the rest is the payload):
// - even: a key file. Written with mode 0600 and loaded as the daemon and as the verifier would;
//   each either throws (std::system_error / std::runtime_error, with a message naming the option)
//   or yields a key of 32..4096 bytes equal to the file, whose id is stable.
// - odd: an index file (records and seals) of a one-segment audit directory with an empty data
//   file. decodeRecord over it never reads past the bytes it is given and a SegmentSealed it
//   accepts is exactly a seal's size; verify with and without a key and crash recovery read it
//   without crashing, and a second recovery changes nothing the first one left.
// The same function is replayed over the seed corpus by ReplayMain.cpp (a CTest test).
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "audit/AuditReader.h"
#include "audit/Records.h"
#include "audit/Recovery.h"
#include "audit/SealChain.h"

namespace {

using namespace splicegate::audit;

void check(bool condition, const char* what) {
    if (!condition) {
        std::fprintf(stderr, "fuzz_audit_inputs: invariant violated: %s\n", what);
        std::abort();
    }
}

// A scratch directory for one input, removed when it is done (libFuzzer may end the process
// without running exit handlers).
class Scratch {
  public:
    Scratch()
        : path_(std::filesystem::temp_directory_path() /
                ("fuzz_audit_inputs." + std::to_string(::getpid()))) {
        std::filesystem::create_directories(path_);
    }
    ~Scratch() {
        std::error_code ignored;
        std::filesystem::remove_all(path_, ignored);
    }
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;
    const std::filesystem::path& path() const { return path_; }

  private:
    std::filesystem::path path_;
};

void writeFile(const std::filesystem::path& path, const std::string& bytes, mode_t mode) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    ::chmod(path.c_str(), mode);
}

std::string readFile(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void fuzzKeyFile(const Scratch& scratch, const std::string& bytes) {
    const auto path = scratch.path() / "audit.key";
    writeFile(path, bytes, 0600);
    for (auto use : {KeyFileUse::Daemon, KeyFileUse::Verifier}) {
        try {
            auto key = ChainKey::fromFile(path, use);
            check(key != nullptr, "fromFile returned no key");
            check(key->bytes() == bytes, "the key is not the file's bytes");
            check(bytes.size() >= 32 && bytes.size() <= 4096, "a key outside 32..4096 bytes");
            check(ChainKey::fromBytes(bytes)->id() == key->id(), "the key id is not stable");
        } catch (const std::system_error& error) {
            check(std::string(error.what()).find("key") != std::string::npos,
                  "a key file error that names no key option");
        } catch (const std::runtime_error& error) {
            check(std::string(error.what()).find("key") != std::string::npos,
                  "a key file error that names no key option");
        }
    }
}

void decodeAll(const std::string& bytes) {
    const auto* data = reinterpret_cast<const std::uint8_t*>(bytes.data());
    std::size_t at = 0;
    Record record;
    while (at < bytes.size()) {
        std::size_t consumed = 0;
        std::string problem;
        auto status = decodeRecord(data + at, bytes.size() - at, record, consumed, problem);
        if (status != DecodeStatus::Ok) {
            check(consumed == 0, "a failed decode consumed bytes");
            check(!problem.empty() || status == DecodeStatus::Incomplete,
                  "a corrupt record without a problem");
            ++at;  // as a reader resyncs: try the next byte
            continue;
        }
        check(consumed > 0 && consumed <= bytes.size() - at, "consumed outside the input");
        if (record.type == RecordType::SegmentSealed)
            check(consumed == kSegmentSealedRecordSize || consumed == kSegmentSealedV2RecordSize,
                  "a seal of neither format's size");
        at += consumed;
    }
}

void fuzzIndex(const Scratch& scratch, const std::string& bytes) {
    decodeAll(bytes);
    const auto dir = scratch.path() / "audit";
    std::filesystem::create_directories(dir);
    writeFile(dir / "w00-0000000001.index", bytes, 0640);
    writeFile(dir / "w00-0000000001.data", std::string(), 0640);
    static const auto key = ChainKey::fromBytes(std::string(32, 'k'));
    auto ignore = [](const std::string&) {};
    verifyDirectory(dir, ignore, nullptr);
    verifyDirectory(dir, ignore, key.get());
    try {
        recoverAuditDirectory(dir.string(), key.get());
    } catch (const std::system_error&) {
        return;  // the daemon's start fails with the message: not a crash
    }
    const auto index = readFile(dir / "w00-0000000001.index");
    const auto data = readFile(dir / "w00-0000000001.data");
    recoverAuditDirectory(dir.string(), key.get());
    check(readFile(dir / "w00-0000000001.index") == index &&
              readFile(dir / "w00-0000000001.data") == data,
          "a second recovery changed what the first one left");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    const std::string payload(reinterpret_cast<const char*>(data) + 1, size - 1);
    Scratch scratch;
    if (data[0] % 2 == 0)
        fuzzKeyFile(scratch, payload);
    else
        fuzzIndex(scratch, payload);
    return 0;
}
