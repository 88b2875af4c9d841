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

namespace splicegate::test {

inline constexpr std::int64_t kCraftedLogStartNs = 1'700'000'000'000'000'000;

class SegmentBuilder {
  public:
    // `idFloor`: the connection id floor the SegmentStart record carries.
    SegmentBuilder(std::string dir, unsigned worker, std::uint64_t segment,
                   std::uint64_t idFloor = 0);

    // Each appends one record and returns its offset in the index (where a test may damage it).
    std::uint64_t open(std::uint64_t id, const std::string& route = "web");
    // Appends `payload` to the data file and indexes it.
    std::uint64_t chunk(std::uint64_t id, std::uint8_t direction, const std::string& payload);
    // Indexes a chunk without adding data (it may point anywhere, even past the data file).
    std::uint64_t chunkAt(std::uint64_t id, std::uint8_t direction, std::uint32_t length,
                          std::uint64_t offset);
    std::uint64_t close(std::uint64_t id, std::uint64_t c2u, std::uint64_t u2c,
                        const std::string& reason = "done");
    std::uint64_t truncated(std::uint64_t id);
    std::uint64_t seal();

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
    std::string base_;
    std::string index_;
    std::string data_;
};

// One line per entry, for failure messages that list problems or recovery actions.
std::string joined(const std::vector<std::string>& lines);

}  // namespace splicegate::test
