#include "tests/support/AuditSegmentBuilder.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <utility>

#include "audit/AuditReader.h"
#include "audit/Crc32c.h"
#include "audit/Records.h"
#include "common/UniqueFd.h"

namespace splicegate::test {
namespace {

constexpr std::int64_t kT0 = kCraftedLogStartNs;

}  // namespace

SegmentBuilder::SegmentBuilder(std::string dir, unsigned worker, std::uint64_t segment,
                               std::uint64_t idFloor)
    : dir_(std::move(dir)),
      worker_(worker),
      segment_(segment),
      base_(audit::segmentBaseName(worker, segment)) {
    audit::encodeSegmentStart(index_, worker, segment, kT0, idFloor);
}

std::uint64_t SegmentBuilder::open(std::uint64_t id, const std::string& route) {
    return add([&] {
        audit::encodeOpen(index_, id, kT0 + static_cast<std::int64_t>(id), route,
                          "198.51.100." + std::to_string(id) + ":4000", "192.0.2.1:443");
    });
}

std::uint64_t SegmentBuilder::chunk(std::uint64_t id, std::uint8_t direction,
                                    const std::string& payload) {
    auto offset = data_.size();
    data_ += payload;
    auto crc = audit::crc32c(0, payload.data(), payload.size());
    return add([&] {
        audit::encodeChunk(index_, id, direction, static_cast<std::uint32_t>(payload.size()),
                           offset, kT0 + 5, crc);
    });
}

std::uint64_t SegmentBuilder::chunkAt(std::uint64_t id, std::uint8_t direction,
                                      std::uint32_t length, std::uint64_t offset) {
    return add([&] { audit::encodeChunk(index_, id, direction, length, offset, kT0 + 5); });
}

std::uint64_t SegmentBuilder::close(std::uint64_t id, std::uint64_t c2u, std::uint64_t u2c,
                                    const std::string& reason) {
    return add([&] { audit::encodeClose(index_, id, kT0 + 9'000'000, c2u, u2c, reason); });
}

std::uint64_t SegmentBuilder::truncated(std::uint64_t id) {
    return add([&] { audit::encodeTruncated(index_, id, kT0 + 10); });
}

std::uint64_t SegmentBuilder::seal(const audit::ChainKey* key) {
    return add([&] { digest_ = sealChained(index_, data_.size(), dir_, worker_, segment_, key); });
}

audit::Digest sealChained(std::string& index, std::uint64_t dataBytes, const std::string& dir,
                          unsigned worker, std::uint64_t segment, const audit::ChainKey* key,
                          std::uint8_t status) {
    audit::Digest prev{};
    std::uint64_t best = 0;
    for (const auto& files : audit::listSegments(dir)) {
        if (files.worker != worker || files.segment >= segment || !files.hasIndex ||
            files.segment < best)
            continue;
        best = files.segment;
        prev = audit::Digest{};
        audit::IndexReader reader(files.indexPath);
        audit::Record record;
        for (;;) {
            auto next = reader.next(record);
            if (next == audit::IndexReader::Status::Corrupt && reader.resync()) continue;
            if (next != audit::IndexReader::Status::Record) break;
            if (record.type == audit::RecordType::SegmentSealed && record.chained)
                prev = record.digest;
        }
    }
    audit::ChainHasher hasher(key);
    hasher.update(index.data(), index.size());
    return audit::encodeSegmentSealed(index, dataBytes, status, key, prev, hasher);
}

void SegmentBuilder::write() const {
    writeFile(indexPath(), index_);
    writeFile(dataPath(), data_);
}

void SegmentBuilder::writeFile(const std::string& path, const std::string& content) {
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    ASSERT_TRUE(fd.valid()) << path;
    ASSERT_EQ(::write(fd.get(), content.data(), content.size()),
              static_cast<ssize_t>(content.size()));
}

std::string joined(const std::vector<std::string>& lines) {
    std::string text;
    for (const auto& line : lines) text += line + "\n";
    return text;
}

}  // namespace splicegate::test
