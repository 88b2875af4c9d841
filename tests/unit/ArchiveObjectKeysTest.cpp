#include "archive/ObjectKeys.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace splicegate::archive {
namespace {

// 2026-12-07T06:05:09Z
constexpr std::int64_t kCreated = 1796623509LL * 1'000'000'000 + 123;

TEST(ArchiveObjectKeys, NamesEachObjectUnderItsHour) {
    SegmentId id{3, 42, kCreated};
    EXPECT_EQ(objectKey("gw1", id, ObjectKind::Data),
              "gw1/segments/2026/12/07/06/20261207T060509Z-w03-0000000042.data");
    EXPECT_EQ(objectKey("site/gw1", id, ObjectKind::Index),
              "site/gw1/segments/2026/12/07/06/20261207T060509Z-w03-0000000042.index");
    EXPECT_EQ(objectKey("gw1", id, ObjectKind::Connections),
              "gw1/segments/2026/12/07/06/20261207T060509Z-w03-0000000042.connections.jsonl.gz");
    EXPECT_EQ(manifestKey("gw1", id), "gw1/manifests/2026/12/07/06/w03-0000000042.json");
    EXPECT_EQ(manifestHourPrefix("gw1", kCreated), "gw1/manifests/2026/12/07/06/");
}

TEST(ArchiveObjectKeys, KeysSortByTime) {
    std::vector<std::string> keys;
    for (std::int64_t hours : {30, 0, 5, 24 * 40})
        keys.push_back(objectKey("p", {0, static_cast<std::uint64_t>(hours), kCreated +
                                                                              hours * 3600'000'000'000},
                                 ObjectKind::Data));
    auto sorted = keys;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, (std::vector<std::string>{keys[1], keys[2], keys[0], keys[3]}));
}

TEST(ArchiveObjectKeys, ParsesWhatItNames) {
    SegmentId id{128, 9876543210, kCreated - 123};  // to the second
    for (auto kind : {ObjectKind::Data, ObjectKind::Index, ObjectKind::Connections}) {
        auto parsed = parseObjectKey("gw1", objectKey("gw1", id, kind));
        ASSERT_TRUE(parsed);
        EXPECT_EQ(parsed->id, id);
        EXPECT_EQ(parsed->kind, kind);
    }
}

TEST(ArchiveObjectKeys, RefusesKeysItDidNotName) {
    auto good = objectKey("gw1", {3, 42, kCreated}, ObjectKind::Data);
    EXPECT_TRUE(parseObjectKey("gw1", good));
    EXPECT_FALSE(parseObjectKey("gw2", good));
    for (std::string bad : {
             "gw1/segments/2026/12/07/06/20261207T060509Z-w3-0000000042.data",    // spelling
             "gw1/segments/2026/12/07/07/20261207T060509Z-w03-0000000042.data",   // wrong hour
             "gw1/segments/2026/12/07/06/20261207T060509Z-w03-0000000042.datax",  // suffix
             "gw1/segments/2026/12/07/06/20261207T060509Z-w03-0000000042",
             "gw1/manifests/2026/12/07/06/w03-0000000042.json",
         })
        EXPECT_FALSE(parseObjectKey("gw1", bad)) << bad;
}

TEST(ArchiveObjectKeys, ParsesManifestKeysToTheHour) {
    SegmentId id{3, 42, kCreated};
    auto parsed = parseManifestKey("site/gw1", manifestKey("site/gw1", id));
    ASSERT_TRUE(parsed);
    EXPECT_EQ(parsed->worker, 3u);
    EXPECT_EQ(parsed->segment, 42u);
    EXPECT_EQ(parsed->createdNs, 1796623200LL * 1'000'000'000);  // 06:00:00, the folder's hour
    const std::string good = "gw1/manifests/2026/12/07/06/w03-0000000042.json";
    EXPECT_TRUE(parseManifestKey("gw1", good));
    EXPECT_FALSE(parseManifestKey("gw2", good));
    for (const std::string bad : {"gw1/manifests/2026/12/07/06/w3-0000000042.json",
                                  "gw1/manifests/2026/12/07/06/w03-0000000042.json.x",
                                  "gw1/manifests/2026/12/07/w03-0000000042.json",
                                  "gw1/segments/2026/12/07/06/w03-0000000042.json"})
        EXPECT_FALSE(parseManifestKey("gw1", bad)) << bad;
}

TEST(ArchiveObjectKeys, ChecksPrefixes) {
    EXPECT_EQ(checkPrefix("gw1.example.net"), "");
    EXPECT_EQ(checkPrefix("site_a/gw-1"), "");
    EXPECT_EQ(checkPrefix(""), "is empty");
    EXPECT_EQ(checkPrefix("/gw1"), "starts or ends with '/'");
    EXPECT_EQ(checkPrefix("a//b"), "has an empty part ('//')");
    EXPECT_EQ(checkPrefix("a b"), "has the character ' '");
    EXPECT_EQ(checkPrefix("a/../b"), "has a '.' or '..' part");
    EXPECT_EQ(checkPrefix(".."), "has a '.' or '..' part");
}

}  // namespace
}  // namespace splicegate::archive
