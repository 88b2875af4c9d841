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
#include "archive/Parts.h"
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
        std::string composite;  // put in parts: S3's "BASE64-N" instead of crc32c
    };
    bool keepsChecksums = true;
    bool honoursLockHeaders = true;
    std::map<std::string, std::vector<Version>> objects;
    unsigned puts = 0;  // objects put, in one PUT or in parts
    unsigned multipartPuts = 0;
    unsigned gets = 0;
    std::map<std::string, unsigned> getsOf;  // by key
    std::vector<std::vector<s3::PartRange>> partsPut;  // each multipart upload's parts
    std::map<std::string, std::vector<std::string>> uploads;  // unfinished: key -> upload ids
    std::vector<std::string> aborted;                         // upload ids
    unsigned failPart = 0;  // a part number whose upload fails once (500), 0 = none
    // With !honoursLockHeaders: the lock a multipart upload gets (radosgw: the bucket's default
    // retention, counted from the completion).
    std::string multipartDefaultRetainUntil;

    s3::Result<s3::ObjectInfo> head(const std::string& key, const std::string& versionId) override {
        auto* version = find(key, versionId);
        if (!version) return notFound(key);
        s3::ObjectInfo info;
        info.size = version->bytes.size();
        info.versionId = version->id;
        if (keepsChecksums) {
            info.crc32c = version->crc32c;
            info.checksumCrc32c = version->composite;
        }
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
        version.bytes = bodyOf(request);
        lastKey_ = request.key;
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
    s3::Result<s3::ObjectInfo> putMultipart(s3::PutRequest request,
                                            const std::vector<s3::PartRange>& parts) override {
        auto id = "u" + std::to_string(++nextUpload_);
        uploads[request.key].push_back(id);
        std::string body = bodyOf(request);
        std::uint64_t end = 0;
        for (std::size_t i = 0; i < parts.size(); ++i) {
            EXPECT_EQ(parts[i].offset, end) << "part " << i + 1;
            EXPECT_EQ(parts[i].crc32c, audit::crc32c(0, body.data() + parts[i].offset,
                                                     parts[i].length))
                << "part " << i + 1;
            end += parts[i].length;
            if (failPart == i + 1) {
                failPart = 0;
                abortUpload(request.key, id);
                s3::Error error;
                error.httpStatus = 500;
                error.code = "InternalError";
                error.message = "PUT s3://memory/" + request.key + "?partNumber=" +
                                std::to_string(i + 1) + ": HTTP 500 InternalError";
                return s3::Result<s3::ObjectInfo>::failure(error);
            }
        }
        EXPECT_EQ(end, body.size());
        std::erase(uploads[request.key], id);
        ++multipartPuts;
        partsPut.push_back(parts);
        auto composite = compositeCrc32c(parts);
        auto result = put(std::move(request));
        auto& version = objects.at(lastKey_).back();
        version.crc32c.reset();
        version.composite = composite;
        if (!honoursLockHeaders && !multipartDefaultRetainUntil.empty()) {
            version.lockMode = "COMPLIANCE";
            version.retainUntil = multipartDefaultRetainUntil;
        }
        return result;
    }
    s3::Result<std::vector<s3::UploadEntry>> listUploads(const std::string& prefix) override {
        std::vector<s3::UploadEntry> out;
        for (const auto& [key, ids] : uploads)
            if (key.starts_with(prefix))
                for (const auto& id : ids) out.push_back({key, id, ""});
        return s3::Result<std::vector<s3::UploadEntry>>::success(out);
    }
    s3::Result<bool> abortUpload(const std::string& key, const std::string& uploadId) override {
        std::erase(uploads[key], uploadId);
        aborted.push_back(uploadId);
        return s3::Result<bool>::success(true);
    }
    s3::Result<std::string> get(const std::string& key, const std::string& versionId,
                                std::uint64_t first, std::uint64_t last) override {
        ++gets;
        ++getsOf[key];
        auto* version = find(key, versionId);
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
    static std::string bodyOf(const s3::PutRequest& request) {
        if (!request.file) return std::string(request.body);
        std::string bytes(request.file->length, '\0');
        EXPECT_EQ(::pread(request.file->fd, bytes.data(), bytes.size(),
                          static_cast<off_t>(request.file->offset)),
                  static_cast<ssize_t>(bytes.size()));
        return bytes;
    }
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
    unsigned nextUpload_ = 0;
    std::string lastKey_;
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
    auto state = states.load(1, 7);
    ASSERT_TRUE(state);
    for (const auto& object : state->objects)  // no checksum: each read back
        EXPECT_GT(bucket.getsOf[object.key], 0u) << object.key;
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
    // 1000-byte parts: the data file one part from its chunks, the index several, read.
    for (std::uint64_t partBytes : {std::uint64_t{64} << 20, std::uint64_t{1000}})
    for (bool radosgw : {false, true}) {
        for (std::size_t stopAt = 0; stopAt < points.size(); ++stopAt) {
            SCOPED_TRACE(points[stopAt] + (radosgw ? " (radosgw-like)" : "") + " parts of " +
                         std::to_string(partBytes));
            MemoryBucket bucket;
            bucket.keepsChecksums = bucket.honoursLockHeaders = !radosgw;
            auto stateDir = dir_.path() + "/state-" + std::to_string(radosgw) + "-" +
                            std::to_string(stopAt) + "-" + std::to_string(partBytes);
            auto parted = settings();
            parted.partBytes = partBytes;
            {
                UploadStateStore states(stateDir);
                Archiver archiver(bucket, states, parted);
                std::size_t seen = 0;
                archiver.setHook([&](const std::string&) {
                    if (seen++ == stopAt) throw Killed{};
                });
                EXPECT_THROW(archiver.ship(files_, kNow), Killed);
            }
            UploadStateStore states(stateDir);  // a new process
            Archiver archiver(bucket, states, parted);
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
                                             audit::crc32c(0, foreign.data(), foreign.size()), ""});
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
    bucket.objects[dataKey()].push_back({"v0", data_, "", "", std::nullopt, ""});
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

namespace splicegate::archive {
namespace {

// A data file of six 100 kB chunks, shipped in parts of 150 kB: three parts of two chunks each.
class ArchiverMultipartTest : public ArchiverTest {
  protected:
    void SetUp() override {
        ArchiverTest::SetUp();
        test::SegmentBuilder segment(audit_, 1, 7);
        segment.open(1);
        for (int i = 0; i < 6; ++i)
            segment.chunk(1, static_cast<std::uint8_t>(i % 2),
                          std::string(100000, static_cast<char>('a' + i)));
        segment.close(1, 300000, 300000);
        segment.seal();
        segment.write();
        data_ = segment.data();
        ASSERT_EQ(data_.size(), 600000u);
    }
    ArchiveSettings parted(std::uint64_t partBytes = 150000) const {
        auto s = settings();
        s.partBytes = partBytes;
        return s;
    }
};

TEST_F(ArchiverMultipartTest, TheDataObjectGoesUpInPartsCutAtItsChunksAndIsVerified) {
    MemoryBucket bucket;
    UploadStateStore states(dir_.path() + "/state");
    Archiver archiver(bucket, states, parted());
    auto outcome = archiver.ship(files_, kNow);
    EXPECT_EQ(outcome.kind, ShipOutcome::Kind::Shipped) << outcome.message;
    expectArchived(bucket, states);
    EXPECT_EQ(bucket.puts, 4u);
    ASSERT_EQ(bucket.multipartPuts, 1u);  // the index and the small objects in one PUT each
    ASSERT_EQ(bucket.partsPut[0].size(), 3u);
    for (std::size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(bucket.partsPut[0][i].offset, 200000u * i);
        EXPECT_EQ(bucket.partsPut[0][i].length, 200000u);
    }
    EXPECT_EQ(bucket.objects.at(dataKey()).back().composite, compositeCrc32c(bucket.partsPut[0]));
    EXPECT_EQ(bucket.gets, 0u);  // the composite checksum verified it, no read back
    EXPECT_TRUE(bucket.uploads[dataKey()].empty());
}

// radosgw: no checksum on HEAD, lock headers of a multipart upload ignored.
TEST_F(ArchiverMultipartTest, AServerIgnoringTheLockOfAMultipartUploadGetsTheRetentionSet) {
    MemoryBucket bucket;
    bucket.keepsChecksums = false;
    bucket.honoursLockHeaders = false;
    UploadStateStore states(dir_.path() + "/state");
    Archiver archiver(bucket, states, parted());
    auto outcome = archiver.ship(files_, kNow);
    EXPECT_EQ(outcome.kind, ShipOutcome::Kind::Shipped) << outcome.message;
    EXPECT_EQ(bucket.multipartPuts, 1u);
    expectArchived(bucket, states);
}

TEST_F(ArchiverMultipartTest, ACompositeChecksumThatDiffersFailsTheVerification) {
    struct Damaged final : MemoryBucket {
        s3::Result<s3::ObjectInfo> head(const std::string& key, const std::string& versionId) override {
            auto info = MemoryBucket::head(key, versionId);
            if (info && !versionId.empty() && !info->checksumCrc32c.empty())
                info->checksumCrc32c = "AAAAAA==-3";
            return info;
        }
    } bucket;
    UploadStateStore states(dir_.path() + "/state");
    Archiver archiver(bucket, states, parted());
    auto outcome = archiver.ship(files_, kNow);
    EXPECT_EQ(outcome.kind, ShipOutcome::Kind::Failed);
    EXPECT_NE(outcome.message.find("composite CRC-32C AAAAAA==-3, expected "), std::string::npos)
        << outcome.message;
    EXPECT_NE(states.load(1, 7)->phase, UploadPhase::Verified);
}

TEST_F(ArchiverMultipartTest, AFailedPartAbortsTheUploadAndTheNextPassShips) {
    MemoryBucket bucket;
    bucket.failPart = 2;
    UploadStateStore states(dir_.path() + "/state");
    Archiver archiver(bucket, states, parted());
    auto outcome = archiver.ship(files_, kNow);
    EXPECT_EQ(outcome.kind, ShipOutcome::Kind::Failed);
    EXPECT_NE(outcome.message.find("partNumber=2"), std::string::npos) << outcome.message;
    EXPECT_EQ(bucket.aborted.size(), 1u);
    EXPECT_TRUE(bucket.uploads[dataKey()].empty());
    EXPECT_EQ(bucket.versionsOf(dataKey()), 0u);
    outcome = archiver.ship(files_, kNow);
    EXPECT_EQ(outcome.kind, ShipOutcome::Kind::Shipped) << outcome.message;
    expectArchived(bucket, states);
}

// A lost state: the multipart object is adopted by its composite checksum where the parts are
// cut as now, read back where they are not (another part size) or the server keeps none.
TEST_F(ArchiverMultipartTest, AMultipartObjectAlreadyThereIsAdopted) {
    for (auto [partBytes, keepsChecksums, readsBack] :
         {std::tuple{std::uint64_t{150000}, true, false}, std::tuple{std::uint64_t{250000}, true, true},
          std::tuple{std::uint64_t{150000}, false, true}}) {
        SCOPED_TRACE(std::to_string(partBytes) + (keepsChecksums ? "" : " no checksums"));
        MemoryBucket bucket;
        bucket.keepsChecksums = keepsChecksums;
        auto stateDir = dir_.path() + "/state-" + std::to_string(partBytes) +
                        std::to_string(keepsChecksums);
        {
            UploadStateStore states(stateDir);
            Archiver archiver(bucket, states, parted());
            ASSERT_EQ(archiver.ship(files_, kNow).kind, ShipOutcome::Kind::Shipped);
        }
        std::filesystem::remove_all(stateDir);
        bucket.getsOf.clear();
        UploadStateStore states(stateDir);
        Archiver archiver(bucket, states, parted(partBytes));
        auto outcome = archiver.ship(files_, kNow);
        EXPECT_EQ(outcome.kind, ShipOutcome::Kind::Shipped) << outcome.message;
        EXPECT_EQ(bucket.puts, 4u);
        EXPECT_EQ(bucket.getsOf[dataKey()] > 0, readsBack);
        expectArchived(bucket, states);
    }
}

// radosgw locks a multipart upload by the bucket's default, from its completion: later than the
// lock asked for, so accepted as it is. A lost state then takes the manifest's retain-until,
// not the data object's, and the manifest is adopted rather than a conflict.
TEST_F(ArchiverMultipartTest, ALostStateAdoptsTheManifestsLockWhereTheServerChoseALaterOne) {
    MemoryBucket bucket;
    bucket.keepsChecksums = false;
    bucket.honoursLockHeaders = false;
    bucket.multipartDefaultRetainUntil = "2027-01-06T06:05:14Z";
    {
        UploadStateStore states(dir_.path() + "/state");
        Archiver archiver(bucket, states, parted());
        ASSERT_EQ(archiver.ship(files_, kNow).kind, ShipOutcome::Kind::Shipped);
    }
    EXPECT_EQ(bucket.objects.at(dataKey()).back().retainUntil, "2027-01-06T06:05:14Z");
    std::filesystem::remove_all(dir_.path() + "/state");
    UploadStateStore states(dir_.path() + "/state");
    Archiver archiver(bucket, states, parted());
    auto outcome = archiver.ship(files_, kNow + std::int64_t{3600} * 1'000'000'000);
    EXPECT_EQ(outcome.kind, ShipOutcome::Kind::Shipped) << outcome.message;
    EXPECT_EQ(bucket.puts, 4u);
    EXPECT_EQ(states.load(1, 7)->retainUntil, "2027-01-06T06:05:09Z");
}

// The manifest's retain_until is read by a JSON parser: not the first text that looks like it
// (a field of the same name nested in an object), and escaped or after the objects all the same.
TEST_F(ArchiverMultipartTest, ALostStateReadsTheManifestsRetainUntilAsJson) {
    MemoryBucket bucket;
    bucket.keepsChecksums = false;
    bucket.honoursLockHeaders = false;
    bucket.multipartDefaultRetainUntil = "2027-01-06T06:05:14Z";  // not the manifest's
    {
        UploadStateStore states(dir_.path() + "/state");
        Archiver archiver(bucket, states, parted());
        ASSERT_EQ(archiver.ship(files_, kNow).kind, ShipOutcome::Kind::Shipped);
    }
    auto& manifest = bucket.objects.at(manifestKey("gw1", {1, 7, test::kCraftedLogStartNs})).back();
    manifest.bytes = R"({"objects":[{"kind":"data","retain_until":"2031-01-01T00:00:00Z"}],)"
                     R"("newer_field":{"retain_until":"2032-01-01T00:00:00Z"},)"
                     R"("retain_until":"2027-01-06T06:05:09Z","format":1,"worker":1})";
    std::filesystem::remove_all(dir_.path() + "/state");
    UploadStateStore states(dir_.path() + "/state");
    Archiver archiver(bucket, states, parted());
    auto outcome = archiver.ship(files_, kNow + std::int64_t{3600} * 1'000'000'000);
    // The manifest in the bucket is not the bytes this archiver writes: that is an alarm anyway.
    EXPECT_EQ(outcome.kind, ShipOutcome::Kind::Conflict) << outcome.message;
    EXPECT_EQ(states.load(1, 7)->retainUntil, "2027-01-06T06:05:09Z");
}

// The same object with one byte changed, put in parts: not adopted, an alarm.
TEST_F(ArchiverMultipartTest, AMultipartObjectWithOtherBytesIsAnAlarm) {
    MemoryBucket bucket;
    auto forged = data_;
    forged[400000] ^= 1;
    auto parts = equalParts(forged.size(), 200000);
    for (auto& part : parts) part.crc32c = audit::crc32c(0, forged.data() + part.offset, part.length);
    bucket.objects[dataKey()].push_back({"v0", forged, "COMPLIANCE", "2030-01-01T00:00:00Z",
                                         std::nullopt, compositeCrc32c(parts)});
    UploadStateStore states(dir_.path() + "/state");
    Archiver archiver(bucket, states, parted());
    auto outcome = archiver.ship(files_, kNow);
    EXPECT_EQ(outcome.kind, ShipOutcome::Kind::Conflict) << outcome.message;
    // Nothing records how the object under the key was cut: the bytes decide, not the composite.
    EXPECT_GT(bucket.getsOf[dataKey()], 0u);
    EXPECT_EQ(bucket.versionsOf(dataKey()), 1u);
}

// kill -9 during a multipart upload: the segment's state says Uploading, its parts are on the
// server; the next run aborts them before it ships the object again.
TEST_F(ArchiverMultipartTest, AResumedSegmentAbortsWhatAKilledUploadLeft) {
    MemoryBucket bucket;
    UploadStateStore states(dir_.path() + "/state");
    {
        Archiver archiver(bucket, states, parted());
        archiver.setHook([](const std::string& point) {
            if (point == "uploading") throw Killed{};
        });
        EXPECT_THROW(archiver.ship(files_, kNow), Killed);
    }
    bucket.uploads[dataKey()] = {"stale"};
    bucket.uploads[dataKey() + ".other"] = {"not-ours"};
    Archiver archiver(bucket, states, parted());
    auto outcome = archiver.ship(files_, kNow);
    EXPECT_EQ(outcome.kind, ShipOutcome::Kind::Shipped) << outcome.message;
    EXPECT_EQ(bucket.aborted, std::vector<std::string>{"stale"});
    EXPECT_EQ(bucket.uploads[dataKey() + ".other"], std::vector<std::string>{"not-ours"});
    expectArchived(bucket, states);
}

class ArchiverRestartTest : public ArchiverMultipartTest {
  protected:
    // Uploads in parts of 150 kB (three of 200 kB, cut at the chunks), stops once Uploaded,
    // lets `between` alter the bucket or the state, then verifies with `verifyPartBytes`.
    ShipOutcome uploadThenVerify(MemoryBucket& bucket, std::uint64_t verifyPartBytes,
                                 const std::function<void(UploadStateStore&)>& between) {
        UploadStateStore states(dir_.path() + "/state");
        {
            Archiver archiver(bucket, states, parted());
            archiver.setHook([](const std::string& point) {
                if (point == "uploaded") throw Killed{};
            });
            EXPECT_THROW(archiver.ship(files_, kNow), Killed);
        }
        between(states);
        bucket.getsOf.clear();
        Archiver archiver(bucket, states, parted(verifyPartBytes));
        return archiver.ship(files_, kNow);
    }
    // The data object's bytes with one changed, and the composite of the parts it went up in
    // computed from them: a server that stored other bytes than it was sent, self-consistently.
    void corrupt(MemoryBucket& bucket) {
        auto& version = bucket.objects.at(dataKey()).back();
        version.bytes[400000] ^= 1;
        auto parts = bucket.partsPut.at(0);
        for (auto& part : parts)
            part.crc32c = audit::crc32c(0, version.bytes.data() + part.offset, part.length);
        version.composite = compositeCrc32c(parts);
    }
    static void forgetPartBytes(UploadStateStore& states) {  // a state file of an older archiver
        auto state = *states.load(1, 7);
        for (auto& object : state.objects) object.partBytes.reset();
        states.save(state);
    }
};

// --s3-part-mb changed between the upload and the verification: 250 kB cuts two parts where
// the upload cut three, so the composite is compared with the parts as the upload cut them.
TEST_F(ArchiverRestartTest, AnotherPartSizeAtVerificationStillChecksTheComposite) {
    {
        MemoryBucket bucket;
        auto outcome = uploadThenVerify(bucket, 250000, [](UploadStateStore&) {});
        EXPECT_EQ(outcome.kind, ShipOutcome::Kind::Shipped) << outcome.message;
        EXPECT_EQ(bucket.getsOf[dataKey()], 0u);  // the composite sufficed
        UploadStateStore states(dir_.path() + "/state");
        expectArchived(bucket, states);
    }
    std::filesystem::remove_all(dir_.path() + "/state");
    MemoryBucket bucket;
    auto outcome = uploadThenVerify(bucket, 250000, [&](UploadStateStore&) { corrupt(bucket); });
    EXPECT_EQ(outcome.kind, ShipOutcome::Kind::Failed);
    EXPECT_NE(outcome.message.find("not verified: s3://memory/" + dataKey() +
                                   " version v1: composite CRC-32C "),
              std::string::npos)
        << outcome.message;
    EXPECT_EQ(UploadStateStore(dir_.path() + "/state").load(1, 7)->phase, UploadPhase::Uploaded);
}

// A state file without part sizes (written by an older archiver) and another part size now:
// the cut is not known, so the object is read back rather than passed on its size.
TEST_F(ArchiverRestartTest, AnUnknownCutIsVerifiedByReadingTheObjectBack) {
    {
        MemoryBucket bucket;
        auto outcome = uploadThenVerify(bucket, 250000, forgetPartBytes);
        EXPECT_EQ(outcome.kind, ShipOutcome::Kind::Shipped) << outcome.message;
        EXPECT_GT(bucket.getsOf[dataKey()], 0u);
    }
    std::filesystem::remove_all(dir_.path() + "/state");
    MemoryBucket bucket;
    auto outcome = uploadThenVerify(bucket, 250000, [&](UploadStateStore& states) {
        forgetPartBytes(states);
        corrupt(bucket);
    });
    EXPECT_EQ(outcome.kind, ShipOutcome::Kind::Failed);
    EXPECT_NE(outcome.message.find(dataKey() + " version v1: CRC-32C read back "),
              std::string::npos)
        << outcome.message;
}

// radosgw 16 keeps no checksum: equal sizes are not a verification, the bytes are read back.
TEST_F(ArchiverRestartTest, AServerWithoutChecksumsHasItsObjectsReadBack) {
    MemoryBucket bucket;
    bucket.keepsChecksums = false;
    auto outcome = uploadThenVerify(bucket, 150000, [&](UploadStateStore&) { corrupt(bucket); });
    EXPECT_EQ(outcome.kind, ShipOutcome::Kind::Failed);
    EXPECT_NE(outcome.message.find(dataKey() + " version v1: CRC-32C read back "),
              std::string::npos)
        << outcome.message;
}

TEST_F(ArchiverMultipartTest, TheStartupSweepAbortsOnlyThisArchiversOwnKeys) {
    MemoryBucket bucket;
    SegmentId id{1, 7, test::kCraftedLogStartNs};
    bucket.uploads[objectKey("gw1", id, ObjectKind::Data)] = {"a", "b"};
    bucket.uploads[manifestKey("gw1", id)] = {"c"};
    bucket.uploads["gw1/notes.txt"] = {"foreign"};
    bucket.uploads[objectKey("gw10", id, ObjectKind::Data)] = {"other-box"};
    bucket.uploads[objectKey("gw1/b", id, ObjectKind::Data)] = {"nested-box"};
    UploadStateStore states(dir_.path() + "/state");
    Archiver archiver(bucket, states, parted());
    auto aborted = archiver.abortStaleUploads();
    ASSERT_TRUE(aborted) << aborted.error.message;
    EXPECT_EQ(*aborted, 3u);
    EXPECT_EQ(bucket.aborted, (std::vector<std::string>{"c", "a", "b"}));  // key order
}

}  // namespace
}  // namespace splicegate::archive
