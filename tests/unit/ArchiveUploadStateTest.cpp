#include "archive/UploadState.h"
#include "archive/ArchiveLedger.h"

#include "audit/Crc32c.h"

#include <gtest/gtest.h>

#include "tests/support/Daemon.h"
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <system_error>

namespace splicegate::archive {
namespace {

SegmentUpload uploadedSegment() {
    SegmentUpload upload;
    upload.worker = 3;
    upload.segment = 42;
    upload.phase = UploadPhase::Uploaded;
    upload.sealDigest = std::string(64, 'a');
    upload.retainUntil = "2027-12-07T06:00:00Z";
    upload.objects.push_back({ObjectKind::Data, "box/segments/20261207T060000Z-w03-0000000042.data",
                              1u << 30, 0xdeadbeef, "v1.abc", 64u << 20});
    upload.objects.push_back(
        {ObjectKind::Index, "box/segments/20261207T060000Z-w03-0000000042.index", 4096, 7, "", 0});
    return upload;
}

// A valid checksum line after `body`, so that the parser, not the checksum, meets the body.
std::string withChecksum(const std::string& body) {
    char crc[16];
    std::snprintf(crc, sizeof crc, "%08x", audit::crc32c(0, body.data(), body.size()));
    return body + "crc32c=" + crc + "\n";
}

using test::TempDir;

std::string readFile(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
}

void writeFile(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

TEST(ArchiveUploadState, EncodesAndDecodesEveryField) {
    auto upload = uploadedSegment();
    upload.problem = "data differs: size 1 against 2";
    EXPECT_EQ(decode(encode(upload), "test"), upload);
}

TEST(ArchiveUploadState, FileNameUsesTheAuditSpelling) {
    EXPECT_EQ(stateFileName(3, 42), "w03-0000000042.upload");
    EXPECT_EQ(stateFileName(128, 7), "w128-0000000007.upload");
}

TEST(ArchiveUploadState, AChangedByteIsFoundByTheChecksum) {
    auto text = encode(uploadedSegment());
    auto at = text.find("phase=uploaded");
    text.replace(at, 14, "phase=verified");
    try {
        decode(text, "STATE");
        FAIL() << "a damaged state file was read";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("STATE:1: checksum mismatch"), std::string::npos)
            << e.what();
    }
}

TEST(ArchiveUploadState, ATornFileIsRefused) {
    auto text = encode(uploadedSegment());
    for (std::size_t cut : {std::size_t{0}, text.size() / 2, text.size() - 1})
        EXPECT_THROW(decode(text.substr(0, cut), "torn"), std::runtime_error) << cut;
}

TEST(ArchiveUploadState, UnknownKeysAndPhasesNameTheLine) {
    auto withBody = withChecksum;
    try {
        decode(withBody("worker=1\nsegment=2\nphase=shipped\n"), "F");
        FAIL();
    } catch (const std::runtime_error& e) {
        EXPECT_STREQ(e.what(), "F:3: unknown phase 'shipped'");
    }
    try {
        decode(withBody("worker=1\nsegment=x\nphase=sealed\n"), "F");
        FAIL();
    } catch (const std::runtime_error& e) {
        EXPECT_STREQ(e.what(), "F:2: bad segment 'x'");
    }
    try {
        decode(withBody("worker=1\nphase=sealed\n"), "F");
        FAIL();
    } catch (const std::runtime_error& e) {
        EXPECT_STREQ(e.what(), "F:2: worker, segment or phase missing");
    }
    EXPECT_THROW(decode(withBody("worker=1\nsegment=2\nphase=sealed\ncolour=red\n"), "F"),
                 std::runtime_error);
}

// A state file written before part sizes were recorded: its objects' part size is unknown,
// not 0 (which would claim a single PUT).
TEST(ArchiveUploadState, AnObjectLineWithoutPartBytesIsReadAsUnknown) {
    auto upload = decode(withChecksum("worker=1\nsegment=2\nphase=uploaded\n"
                                      "object=kind=data key=k size=10 crc32c=0000000a version=v1\n"),
                         "F");
    ASSERT_EQ(upload.objects.size(), 1u);
    EXPECT_EQ(upload.objects[0].versionId, "v1");
    EXPECT_FALSE(upload.objects[0].partBytes);
    auto single = uploadedSegment();
    EXPECT_EQ(decode(encode(single), "F").objects[1].partBytes, std::optional<std::uint64_t>(0));
    EXPECT_NE(encode(single).find(" part-bytes=67108864\n"), std::string::npos);
    try {
        decode(withChecksum("worker=1\nsegment=2\nphase=uploaded\n"
                            "object=kind=data key=k size=10 crc32c=0000000a part-bytes=-1\n"),
               "F");
        FAIL();
    } catch (const std::runtime_error& e) {
        EXPECT_STREQ(e.what(), "F:4: bad part-bytes '-1'");
    }
}

TEST(ArchiveUploadState, AKeyWithASpaceCannotBeWritten) {
    auto upload = uploadedSegment();
    upload.objects[0].key = "a key";
    EXPECT_THROW(encode(upload), std::invalid_argument);
}

TEST(ArchiveUploadState, PhasesOnlyMoveForward) {
    using P = UploadPhase;
    EXPECT_TRUE(mayAdvance(P::Sealed, P::Uploading));
    EXPECT_TRUE(mayAdvance(P::Uploading, P::Uploading));  // a retry after a restart
    EXPECT_TRUE(mayAdvance(P::Uploaded, P::Verified));
    EXPECT_TRUE(mayAdvance(P::Uploading, P::Conflict));
    EXPECT_FALSE(mayAdvance(P::Uploaded, P::Uploading));
    EXPECT_FALSE(mayAdvance(P::Verified, P::Conflict));  // verified stays verified
    EXPECT_FALSE(mayAdvance(P::Conflict, P::Verified));  // an alarm is cleared by a person
    EXPECT_FALSE(mayAdvance(P::Verified, P::Sealed));
}

TEST(ArchiveUploadState, AnObjectAlreadyThereIsAdoptedOnlyWhenIdentical) {
    ObjectRecord local{ObjectKind::Data, "k", 100, 0x1234, "", std::nullopt};
    EXPECT_EQ(compareExisting(local, {false, 0, std::nullopt}), ExistingObject::Absent);
    EXPECT_EQ(compareExisting(local, {true, 100, 0x1234}), ExistingObject::Identical);
    EXPECT_EQ(compareExisting(local, {true, 100, 0x1235}), ExistingObject::Different);
    EXPECT_EQ(compareExisting(local, {true, 99, 0x1234}), ExistingObject::Different);
    // A 0-byte object under the key (an upload reported done that was not) is never adopted.
    EXPECT_EQ(compareExisting(local, {true, 0, std::nullopt}), ExistingObject::Different);
    EXPECT_EQ(compareExisting(local, {true, 100, std::nullopt}), ExistingObject::Different);
}

TEST(ArchiveUploadStateStore, SavesLoadsAndLists) {
    TempDir dir;
    UploadStateStore store(dir.path() + "/state");
    EXPECT_FALSE(store.load(3, 42));
    auto upload = uploadedSegment();
    store.save(upload);
    EXPECT_EQ(store.load(3, 42), upload);
    upload.phase = UploadPhase::Verified;
    store.save(upload);
    EXPECT_EQ(store.load(3, 42)->phase, UploadPhase::Verified);
    SegmentUpload other;
    other.worker = 0;
    other.segment = 1;
    store.save(other);
    writeFile(dir.path() + "/state/w3-42.upload", "not canonical");
    writeFile(dir.path() + "/state/notes.txt", "ignored");
    auto listed = store.list();
    std::sort(listed.begin(), listed.end());
    EXPECT_EQ(listed, (std::vector<std::pair<unsigned, std::uint64_t>>{{0, 1}, {3, 42}}));
    struct stat status {};
    ASSERT_EQ(::stat((dir.path() + "/state").c_str(), &status), 0);
    EXPECT_EQ(status.st_mode & 0777, 0750u);
}

TEST(ArchiveUploadStateStore, RefusesToMoveBackward) {
    TempDir dir;
    UploadStateStore store(dir.path());
    auto upload = uploadedSegment();
    upload.phase = UploadPhase::Verified;
    store.save(upload);
    upload.phase = UploadPhase::Uploading;
    EXPECT_THROW(store.save(upload), std::logic_error);
    EXPECT_EQ(store.load(3, 42)->phase, UploadPhase::Verified);
}

TEST(ArchiveUploadStateStore, ALeftoverTemporaryFileChangesNothing) {
    TempDir dir;
    UploadStateStore store(dir.path());
    store.save(uploadedSegment());
    // A kill -9 between writing the new state and its rename leaves this behind.
    writeFile(dir.path() + "/w03-0000000042.upload.new", "half a state");
    EXPECT_EQ(store.load(3, 42), uploadedSegment());
    auto verified = uploadedSegment();
    verified.phase = UploadPhase::Verified;
    store.save(verified);  // overwrites the leftover
    EXPECT_EQ(store.load(3, 42), verified);
}

TEST(ArchiveUploadStateStore, ADamagedFileIsReportedWithItsPath) {
    TempDir dir;
    UploadStateStore store(dir.path());
    store.save(uploadedSegment());
    auto file = dir.path() + "/w03-0000000042.upload";
    auto text = readFile(file);
    text[text.find("size=") + 5] = '9';
    writeFile(file, text);
    try {
        store.load(3, 42);
        FAIL() << "a damaged state file was read";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find(file + ":1: checksum mismatch"), std::string::npos)
            << e.what();
    }
}

TEST(ArchiveUploadStateStore, AFileHoldingAnotherSegmentIsRefused) {
    TempDir dir;
    UploadStateStore store(dir.path());
    store.save(uploadedSegment());
    std::filesystem::rename(dir.path() + "/w03-0000000042.upload",
                            dir.path() + "/w03-0000000043.upload");
    EXPECT_THROW(store.load(3, 43), std::runtime_error);
}

// The relay's read-only view: only a Verified state whose seal is the local one counts; the
// directory may appear after the first question; nothing is ever written through it.
TEST(ArchiveLedger, OnlyAVerifiedStateWithTheSameSealCounts) {
    TempDir root;
    const std::string dir = root.path() + "/state";
    audit::Digest seal{};
    seal.fill(0xaa);  // uploadedSegment()'s sealDigest, "aa..."
    ArchiveLedger ledger(dir);
    auto missing = ledger.verified(3, 42, seal);
    EXPECT_FALSE(missing.verified);
    EXPECT_NE(missing.problem.find(dir), std::string::npos) << missing.problem;

    UploadStateStore store(dir);
    auto upload = uploadedSegment();
    store.save(upload);
    auto uploaded = ledger.verified(3, 42, seal);
    EXPECT_FALSE(uploaded.verified);
    EXPECT_TRUE(uploaded.problem.empty()) << uploaded.problem;
    EXPECT_FALSE(ledger.verified(3, 41, seal).verified);

    upload.phase = UploadPhase::Verified;
    store.save(upload);
    auto verified = ledger.verified(3, 42, seal);
    EXPECT_TRUE(verified.verified) << verified.problem;

    audit::Digest other = seal;
    other[0] = 0xab;
    auto replaced = ledger.verified(3, 42, other);
    EXPECT_FALSE(replaced.verified);
    EXPECT_NE(replaced.problem.find("w03-0000000042.upload"), std::string::npos)
        << replaced.problem;

    writeFile(dir + "/w03-0000000042.upload", "phase=verified\n");
    auto damaged = ledger.verified(3, 42, seal);
    EXPECT_FALSE(damaged.verified);
    EXPECT_NE(damaged.problem.find("kept"), std::string::npos) << damaged.problem;
}

TEST(ArchiveLedger, AReadOnlyStoreNeitherCreatesNorWrites) {
    TempDir root;
    EXPECT_THROW(UploadStateStore(root.path() + "/absent", UploadStateStore::Access::ReadOnly),
                 std::system_error);
    EXPECT_FALSE(std::filesystem::exists(root.path() + "/absent"));
    UploadStateStore reader(root.path(), UploadStateStore::Access::ReadOnly);
    EXPECT_THROW(reader.save(uploadedSegment()), std::logic_error);
    // Written for the relay's group to read.
    UploadStateStore writer(root.path() + "/state");
    writer.save(uploadedSegment());
    struct stat st {};
    ASSERT_EQ(::stat((root.path() + "/state/w03-0000000042.upload").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0640u);
}

}  // namespace
}  // namespace splicegate::archive
