#pragma once
// Crafted audit logs for the offline reader and recovery tests: one segment pair (index and data
// file) built in memory with the real encoders of audit/Records.h, so a test can damage the bytes
// before writing them. Times are fixed offsets from kCraftedLogStartNs (Open at +id, chunks at
// +5, Close at +9 ms, Truncated at +10), so tests can assert on them.
// Thread affinity: none. Error contract: write() and writeFile() fail the current test (gtest
// fatal failure) when a file cannot be written.
#include <cstdint>
#include <string>
#include <vector>

#include "audit/SealChain.h"

namespace splicegate::test {

inline constexpr std::int64_t kCraftedLogStartNs = 1'700'000'000'000'000'000;

class SegmentBuilder {
  public:
    // `idFloor`: the connection id floor the SegmentStart record carries.
    SegmentBuilder(std::string dir, unsigned worker, std::uint64_t segment,
                   std::uint64_t idFloor = 0);

    // Each appends one record and returns its offset in the index (where a test may damage it).
    std::uint64_t open(std::uint64_t id, const std::string& route = "web");
    // Appends `payload` to the data file and indexes it (with its payload CRC-32C).
    std::uint64_t chunk(std::uint64_t id, std::uint8_t direction, const std::string& payload);
    // Indexes a chunk without adding data (it may point anywhere, even past the data file) and
    // without a payload CRC.
    std::uint64_t chunkAt(std::uint64_t id, std::uint8_t direction, std::uint32_t length,
                          std::uint64_t offset);
    std::uint64_t close(std::uint64_t id, std::uint64_t c2u, std::uint64_t u2c,
                        const std::string& reason = "done");
    std::uint64_t truncated(std::uint64_t id);
    // Seals with the hash chain (audit/FORMAT.md): the predecessor's digest is read from the
    // seal of the newest index of the same worker below this segment already written in the
    // directory (zero when there is none), so write segments oldest first. `key`: HMAC key.
    std::uint64_t seal(const audit::ChainKey* key = nullptr);
    // The digest of this segment's seal (after seal()).
    const audit::Digest& digest() const { return digest_; }

    void write() const;
    // Creates or replaces the file with exactly `content`.
    static void writeFile(const std::string& path, const std::string& content);
    std::string indexPath() const { return dir_ + "/" + base_ + ".index"; }
    std::string dataPath() const { return dir_ + "/" + base_ + ".data"; }
    std::string& index() { return index_; }
    std::string& data() { return data_; }

  private:
    template <typename Encode>
    std::uint64_t add(Encode encode) {
        auto offset = index_.size();
        encode();
        return offset;
    }

    std::string dir_;
    unsigned worker_ = 0;
    std::uint64_t segment_ = 0;
    audit::Digest digest_{};
    std::string base_;
    std::string index_;
    std::string data_;
};

// Appends a chained SegmentSealed record to `index` (all of it the segment's index so far): the
// predecessor's digest is read from the newest index of `worker` below `segment` already in
// `dir` (zero when there is none). Returns the digest.
audit::Digest sealChained(std::string& index, std::uint64_t dataBytes, const std::string& dir,
                          unsigned worker, std::uint64_t segment,
                          const audit::ChainKey* key = nullptr, std::uint8_t status = 0);

// One line per entry, for failure messages that list problems or recovery actions.
std::string joined(const std::vector<std::string>& lines);

}  // namespace splicegate::test
