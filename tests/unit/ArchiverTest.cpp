// The archiver's decisions over an in-memory bucket, so that every crash point can be tried:
// each point between two of its steps is interrupted once (as a kill -9 would) and the next run
// must finish with every object verified, locked, and put once. The same flows run against a
// real server (radosgw) in tests/s3.
#include "archive/Archiver.h"

#include <gtest/gtest.h>

#include "tests/support/Daemon.h"

#include <filesystem>
#include <map>
#include <stdexcept>
#include <vector>

#include "archive/ObjectKeys.h"
#include "audit/Crc32c.h"
#include "tests/support/AuditSegmentBuilder.h"

namespace splicegate::archive {
namespace {

constexpr std::int64_t kNow = 1796623509LL * 1'000'000'000;

using test::TempDir;

// A versioned bucket with Object Lock. `keepsChecksums` false and `honoursLockHeaders` false
// play radosgw (no x-amz-checksum-crc32c on HEAD, lock headers ignored).
class MemoryBucket : public ObjectStore {
  public:
    struct Version {
        std::string id, bytes, lockMode, retainUntil;
        std::optional<std::uint32_t> crc32c;
    };
    bool keepsChecksums = true;
    bool honoursLockHeaders = true;
    std::map<std::string, std::vector<Version>> objects;
    unsigned puts = 0;

    s3::Result<s3::ObjectInfo> head(const std::string& key, const std::string& versionId) override {
        auto* version = find(key, versionId);
        if (!version) return notFound(key);
        s3::ObjectInfo info;
        info.size = version->bytes.size();
        info.versionId = version->id;
        if (keepsChecksums) info.crc32c = version->crc32c;
        if (honoursLockHeaders) {
            info.lockMode = version->lockMode;
            info.retainUntil = version->retainUntil;
        }
        return s3::Result<s3::ObjectInfo>::success(info);
    }
    s3::Result<s3::ObjectInfo> put(s3::PutRequest request) override {
        ++puts;
        Version version;
        version.id = "v" + std::to_string(++nextVersion_);
        if (request.file) {
            version.bytes.resize(request.file->length);
            EXPECT_EQ(::pread(request.file->fd, version.bytes.data(), version.bytes.size(),
                              static_cast<off_t>(request.file->offset)),
                      static_cast<ssize_t>(version.bytes.size()));
        } else {
            version.bytes = std::string(request.body);
        }
        version.crc32c = request.crc32c;
        if (honoursLockHeaders) {
            version.lockMode = request.lockMode;
            version.retainUntil = request.retainUntil;
        }
        objects[request.key].push_back(version);
        s3::ObjectInfo info;
        info.versionId = version.id;
        info.size = version.bytes.size();
        return s3::Result<s3::ObjectInfo>::success(info);
    }
    s3::Result<std::string> get(const std::string& key, std::uint64_t first,
                                std::uint64_t last) override {
        auto* version = find(key, {});
        if (!version) return s3::Result<std::string>::failure(notFound(key).error);
        return s3::Result<std::string>::success(version->bytes.substr(first, last - first + 1));
    }
    s3::Result<s3::ObjectInfo> getRetention(const std::string& key,
                                            const std::string& versionId) override {
        auto* version = find(key, versionId);
        if (!version) return notFound(key);
        s3::ObjectInfo info;
        info.lockMode = version->lockMode;
        info.retainUntil = version->retainUntil;
        return s3::Result<s3::ObjectInfo>::success(info);
    }
    s3::Result<bool> putRetention(const std::string& key, const std::string& versionId,
                                  const std::string& mode, const std::string& until) override {
        auto* version = find(key, versionId);
        if (!version) return s3::Result<bool>::failure(notFound(key).error);
        version->lockMode = mode;
        version->retainUntil = until;
        return s3::Result<bool>::success(true);
    }
    std::string describe() const override { return "s3://memory"; }

    std::size_t versionsOf(const std::string& key) const {
        auto at = objects.find(key);
        return at == objects.end() ? 0 : at->second.size();
    }

  private:
    Version* find(const std::string& key, const std::string& versionId) {
        auto at = objects.find(key);
        if (at == objects.end() || at->second.empty()) return nullptr;
        if (versionId.empty()) return &at->second.back();
        for (auto& version : at->second)
            if (version.id == versionId) return &version;
        return nullptr;
    }
    static s3::Result<s3::ObjectInfo> notFound(const std::string& key) {
        s3::Error error;
        error.httpStatus = 404;
        error.code = "NotFound";
        error.message = "HEAD s3://memory/" + key + ": 404";
        return s3::Result<s3::ObjectInfo>::failure(error);
    }
    unsigned nextVersion_ = 0;
};

struct Killed {};  // not a std::exception: passes through ship() as a kill -9 would

class ArchiverTest : public ::testing::Test {
  protected:
    void SetUp() override {
        audit_ = dir_.path() + "/audit";
        std::filesystem::create_directory(audit_);
        test::SegmentBuilder segment(audit_, 1, 7);
        segment.open(1);
        segment.chunk(1, 0, "GET / HTTP/1.1\r\n\r\n");
        segment.chunk(1, 1, std::string(5000, 'x'));
        segment.close(1, 18, 5000);
        segment.seal();
        segment.write();
        files_.worker = 1;
        files_.segment = 7;
        files_.indexPath = segment.indexPath();
        files_.dataPath = segment.dataPath();
        files_.hasIndex = files_.hasData = true;
        data_ = segment.data();
    }

    ArchiveSettings settings() const {
        ArchiveSettings s;
        s.prefix = "gw1";
        s.lockDays = 30;
        return s;
    }

    std::string dataKey() const {
        return objectKey("gw1", {1, 7, test::kCraftedLogStartNs}, ObjectKind::Data);
    }

    void expectArchived(const MemoryBucket& bucket, UploadStateStore& states) {
        auto state = states.load(1, 7);
        ASSERT_TRUE(state);
        EXPECT_EQ(state->phase, UploadPhase::Verified) << state->problem;
        ASSERT_EQ(state->objects.size(), 4u);
        for (const auto& object : state->objects) {
            EXPECT_EQ(bucket.versionsOf(object.key), 1u) << object.key;
            auto& version = bucket.objects.at(object.key).back();
            EXPECT_EQ(version.id, object.versionId);
            EXPECT_EQ(version.lockMode, "COMPLIANCE") << object.key;
            EXPECT_EQ(version.retainUntil, "2027-01-06T06:05:09Z") << object.key;
            EXPECT_EQ(audit::crc32c(0, version.bytes.data(), version.bytes.size()), object.crc32c);
        }
        EXPECT_EQ(bucket.objects.at(dataKey()).back().bytes, data_);
    }

    TempDir dir_;
    std::string audit_;
    audit::SegmentFiles files_;
    std::string data_;
};

TEST_F(ArchiverTest, ShipsEveryObjectLockedAndVerifiesIt) {
    MemoryBucket bucket;
    UploadStateStore states(dir_.path() + "/state");
    Archiver archiver(bucket, states, settings());
    auto outcome = archiver.ship(files_, kNow);
    EXPECT_EQ(outcome.kind, ShipOutcome::Kind::Shipped) << outcome.message;
    expectArchived(bucket, states);
    EXPECT_EQ(archiver.ship(files_, kNow).kind, ShipOutcome::Kind::AlreadyVerified);
    EXPECT_EQ(bucket.puts, 4u);
}

TEST_F(ArchiverTest, AServerThatIgnoresLockHeadersAndChecksumsGetsTheRetentionSet) {
    MemoryBucket bucket;
    bucket.keepsChecksums = false;
    bucket.honoursLockHeaders = false;
    UploadStateStore states(dir_.path() + "/state");
    Archiver archiver(bucket, states, settings());
    auto outcome = archiver.ship(files_, kNow);
    EXPECT_EQ(outcome.kind, ShipOutcome::Kind::Shipped) << outcome.message;
    expectArchived(bucket, states);
}

// Every point of the state machine, interrupted once, for both kinds of server.
TEST_F(ArchiverTest, AKillAtAnyPointResumesWithNothingLostOrPutTwice) {
    std::vector<std::string> points;
    {
        MemoryBucket bucket;
        UploadStateStore states(dir_.path() + "/probe");
        Archiver archiver(bucket, states, settings());
        archiver.setHook([&](const std::string& point) { points.push_back(point); });
        ASSERT_EQ(archiver.ship(files_, kNow).kind, ShipOutcome::Kind::Shipped);
    }
    ASSERT_GE(points.size(), 12u);
    for (bool radosgw : {false, true}) {
        for (std::size_t stopAt = 0; stopAt < points.size(); ++stopAt) {
            SCOPED_TRACE(points[stopAt] + (radosgw ? " (radosgw-like)" : ""));
            MemoryBucket bucket;
            bucket.keepsChecksums = bucket.honoursLockHeaders = !radosgw;
            auto stateDir = dir_.path() + "/state-" + std::to_string(radosgw) + "-" +
                            std::to_string(stopAt);
            {
                UploadStateStore states(stateDir);
                Archiver archiver(bucket, states, settings());
                std::size_t seen = 0;
                archiver.setHook([&](const std::string&) {
                    if (seen++ == stopAt) throw Killed{};
                });
                EXPECT_THROW(archiver.ship(files_, kNow), Killed);
            }
            UploadStateStore states(stateDir);  // a new process
            Archiver archiver(bucket, states, settings());
            auto outcome = archiver.ship(files_, kNow);
            EXPECT_TRUE(outcome.kind == ShipOutcome::Kind::Shipped ||
                        outcome.kind == ShipOutcome::Kind::AlreadyVerified)
                << outcome.message;
            expectArchived(bucket, states);
        }
    }
}

TEST_F(ArchiverTest, DifferentBytesUnderTheKeyAreAnAlarmNotAnOverwrite) {
    for (std::string foreign : {std::string("not ours"), std::string()}) {  // "" : a 0-byte object
        SCOPED_TRACE(foreign.size());
        MemoryBucket bucket;
        bucket.objects[dataKey()].push_back({"v0", foreign, "COMPLIANCE", "2030-01-01T00:00:00Z",
                                             audit::crc32c(0, foreign.data(), foreign.size())});
        UploadStateStore states(dir_.path() + "/state-" + std::to_string(foreign.size()));
        Archiver archiver(bucket, states, settings());
        auto outcome = archiver.ship(files_, kNow);
        EXPECT_EQ(outcome.kind, ShipOutcome::Kind::Conflict);
        EXPECT_NE(outcome.message.find("exists with other bytes"), std::string::npos)
            << outcome.message;
        EXPECT_EQ(bucket.versionsOf(dataKey()), 1u);
        EXPECT_EQ(bucket.objects.at(dataKey()).back().bytes, foreign);
        EXPECT_EQ(states.load(1, 7)->phase, UploadPhase::Conflict);
        EXPECT_EQ(archiver.ship(files_, kNow).kind, ShipOutcome::Kind::Conflict);  // stays
    }
}

TEST_F(ArchiverTest, AnIdenticalObjectAlreadyThereIsAdopted) {
    MemoryBucket bucket;
    bucket.keepsChecksums = false;  // adoption has to read it back
    bucket.objects[dataKey()].push_back({"v0", data_, "", "", std::nullopt});
    UploadStateStore states(dir_.path() + "/state");
    Archiver archiver(bucket, states, settings());
    auto outcome = archiver.ship(files_, kNow);
    EXPECT_EQ(outcome.kind, ShipOutcome::Kind::Shipped) << outcome.message;
    EXPECT_EQ(states.load(1, 7)->objects[0].versionId, "v0");
    EXPECT_EQ(bucket.puts, 3u);
    expectArchived(bucket, states);
}

// A lost state directory, an hour later: the segment is begun again with this run's clock, but
// its objects, manifest included, are adopted with the lock they were put with: no conflict, no
// put, no lock extended.
TEST_F(ArchiverTest, ALostStateAdoptsEveryObjectWithItsFirstLock) {
    MemoryBucket bucket;
    {
        UploadStateStore states(dir_.path() + "/state");
        Archiver archiver(bucket, states, settings());
        ASSERT_EQ(archiver.ship(files_, kNow).kind, ShipOutcome::Kind::Shipped);
    }
    std::filesystem::remove_all(dir_.path() + "/state");
    UploadStateStore states(dir_.path() + "/state");
    Archiver archiver(bucket, states, settings());
    auto outcome = archiver.ship(files_, kNow + std::int64_t{3600} * 1'000'000'000);
    EXPECT_EQ(outcome.kind, ShipOutcome::Kind::Shipped) << outcome.message;
    EXPECT_EQ(bucket.puts, 4u);
    EXPECT_EQ(states.load(1, 7)->retainUntil, "2027-01-06T06:05:09Z");
    expectArchived(bucket, states);
}

TEST_F(ArchiverTest, ASegmentRewrittenAfterItsFirstShippingIsAnAlarm) {
    MemoryBucket bucket;
    UploadStateStore states(dir_.path() + "/state");
    {
        Archiver archiver(bucket, states, settings());
        archiver.setHook([](const std::string& point) {
            if (point == "put data") throw Killed{};
        });
        EXPECT_THROW(archiver.ship(files_, kNow), Killed);
    }
    // Someone with root on the box rewrites the segment and seals it again.
    test::SegmentBuilder forged(audit_, 1, 7);
    forged.open(1);
    forged.chunk(1, 0, "something else");
    forged.close(1, 14, 0);
    forged.seal();
    forged.write();
    Archiver archiver(bucket, states, settings());
    auto outcome = archiver.ship(files_, kNow);
    EXPECT_EQ(outcome.kind, ShipOutcome::Kind::Conflict);
    EXPECT_NE(outcome.message.find("its seal changed since it was first shipped"),
              std::string::npos)
        << outcome.message;
    EXPECT_EQ(bucket.objects.at(dataKey()).back().bytes, data_);  // the first version stays
}

TEST_F(ArchiverTest, AnUnsealedSegmentWaits) {
    test::SegmentBuilder open(audit_, 1, 8);
    open.open(2);
    open.write();
    audit::SegmentFiles files;
    files.worker = 1;
    files.segment = 8;
    files.indexPath = open.indexPath();
    files.dataPath = open.dataPath();
    files.hasIndex = files.hasData = true;
    MemoryBucket bucket;
    UploadStateStore states(dir_.path() + "/state");
    Archiver archiver(bucket, states, settings());
    EXPECT_EQ(archiver.ship(files, kNow).kind, ShipOutcome::Kind::NotReady);
    EXPECT_TRUE(bucket.objects.empty());
    EXPECT_FALSE(states.load(1, 8));
}

TEST_F(ArchiverTest, AnUnversionedBucketFailsWithAClearLine) {
    struct Unversioned final : MemoryBucket {
        s3::Result<s3::ObjectInfo> put(s3::PutRequest request) override {
            auto result = MemoryBucket::put(std::move(request));
            result->versionId.clear();
            return result;
        }
    } bucket;
    UploadStateStore states(dir_.path() + "/state");
    Archiver archiver(bucket, states, settings());
    auto outcome = archiver.ship(files_, kNow);
    EXPECT_EQ(outcome.kind, ShipOutcome::Kind::Failed);
    EXPECT_NE(outcome.message.find("not versioned"), std::string::npos) << outcome.message;
}

TEST(ArchiverSettings, ABadPrefixIsRefused) {
    MemoryBucket bucket;
    TempDir dir;
    UploadStateStore states(dir.path());
    ArchiveSettings settings;
    settings.prefix = "a//b";
    EXPECT_THROW(Archiver(bucket, states, settings), std::invalid_argument);
}

}  // namespace
}  // namespace splicegate::archive
