// `splicegate-audit verify` on the archive (docs/archive.md), against a real S3 server (Ceph
// radosgw, fixture s3_server) holding what the real splicegate-archive shipped of a real daemon's
// audit log: a whole archive verifies (also every box of the bucket with --all-boxes), with one
// segment at a time in its temporary directory; a key written twice with other bytes, a segment
// missing between two others and a second copy of a segment are each found and named, a key
// put twice with the same bytes (an archiver's restart) is named as a note; the off-box anchor (`verify DIR --archive s3://…`) finds a local tail deleted
// and a local segment rewritten and re-sealed, which the local chain alone cannot, and accepts
// segments the relay's retention deleted after the archive verified them. The bucket has Object
// Lock: damage is made by writing (a second version, a second prefix missing a segment), never by
// deleting.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <thread>
#include <string>
#include <vector>

#include "archive/ObjectKeys.h"
#include "audit/AuditReader.h"
#include "audit/Records.h"
#include "audit/SealChain.h"
#include "tests/s3/ArchiveTestSupport.h"
#include "tests/support/ControlPlaneDaemon.h"

namespace splicegate::test {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> s3Options() {
    return {"--s3-endpoint", s3Endpoint(), "--s3-credentials-file", s3CredentialsFile()};
}

ProcessResult audit(std::vector<std::string> args) {
    args.insert(args.begin(), auditBinary());
    if (args.size() > 2 && args[2].rfind("s3://", 0) == 0) {
        auto extra = s3Options();
        args.insert(args.end(), extra.begin(), extra.end());
    }
    return runProcess(args, milliseconds(120000));
}

bool exited(const ProcessResult& result, int code) {
    return result.status && result.status->isExit(code);
}

bool has(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

void replaceAll(std::string& text, const std::string& from, const std::string& to) {
    for (auto at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
        text.replace(at, from.size(), to);
}

// Copies every object under `from`/ to `to`/ (same key after the prefix), except those `skip`
// names, as a second box in the bucket, built without deleting anything: the segments' objects
// first, then the manifests, which name the copies' keys and versions.
void copyPrefix(s3::S3Client& c, const std::string& bucket, const std::string& from,
                const std::string& to, const std::function<bool(const std::string&)>& skip) {
    auto listed = c.listVersions(bucket, from + "/");
    ASSERT_TRUE(listed) << listed.error.message;
    std::vector<std::pair<std::string, std::string>> renamed;  // old -> new key or version
    for (bool manifests : {false, true}) {
        for (const auto& entry : *listed) {
            if (skip(entry.key) || has(entry.key, "/manifests/") != manifests) continue;
            auto bytes = c.get(bucket, entry.key);
            ASSERT_TRUE(bytes) << bytes.error.message;
            for (const auto& [old, now] : renamed)
                if (manifests) replaceAll(*bytes, "\"" + old + "\"", "\"" + now + "\"");
            s3::PutRequest put;
            put.bucket = bucket;
            put.key = to + entry.key.substr(from.size());
            put.body = *bytes;
            auto stored = c.put(put);
            ASSERT_TRUE(stored) << stored.error.message;
            renamed.emplace_back(entry.key, put.key);
            renamed.emplace_back(entry.versionId, stored->versionId);
        }
    }
}

// Segment numbers per worker, from the bucket's index objects under `prefix`.
std::map<unsigned, std::vector<std::uint64_t>> archivedSegments(s3::S3Client& c,
                                                                const std::string& bucket,
                                                                const std::string& prefix) {
    std::map<unsigned, std::vector<std::uint64_t>> segments;
    auto listed = c.list(bucket, prefix + "/segments/");
    EXPECT_TRUE(listed) << listed.error.message;
    if (!listed) return segments;
    for (const auto& entry : *listed) {
        auto parsed = archive::parseObjectKey(prefix, entry.key);
        if (parsed && parsed->kind == archive::ObjectKind::Index)
            segments[parsed->id.worker].push_back(parsed->id.segment);
    }
    for (auto& [worker, numbers] : segments) std::sort(numbers.begin(), numbers.end());
    return segments;
}

// Whether `key` is one of worker `worker`'s segment `segment`'s objects or its manifest.
bool ofSegment(const std::string& prefix, const std::string& key, unsigned worker,
               std::uint64_t segment) {
    auto object = archive::parseObjectKey(prefix, key);
    auto manifest = archive::parseManifestKey(prefix, key);
    return (object && object->id.worker == worker && object->id.segment == segment) ||
           (manifest && manifest->worker == worker && manifest->segment == segment);
}

// Each worker's newest segment in `dir`.
std::map<unsigned, audit::SegmentFiles> newestSegments(const std::string& dir) {
    std::map<unsigned, audit::SegmentFiles> newest;
    for (const auto& files : audit::listSegments(dir))
        if (files.hasIndex) newest[files.worker] = files;
    return newest;
}

// Rewrites `files`' index as someone with write access to the box could: the first Chunk
// record's time moved by 1 ns, its CRC made good, and the segment sealed again over the new
// records with the old predecessor (unkeyed chain), so that the local chain still verifies.
// False when the segment has no Chunk record or no seal.
bool rewriteAndReseal(const audit::SegmentFiles& files) {
    std::string records;
    bool edited = false, sealed = false;
    audit::Record seal;
    {
        audit::IndexReader reader(files.indexPath);
        audit::Record record;
        while (reader.next(record) == audit::IndexReader::Status::Record) {
            if (record.type == audit::RecordType::SegmentSealed) {
                seal = record;
                sealed = true;
                break;
            }
            if (record.type == audit::RecordType::Chunk && !edited) {
                audit::encodeChunk(records, record.id, record.direction, record.length,
                                   record.offset, record.timeNs + 1,
                                   record.hasCrc ? std::optional<std::uint32_t>(record.crc)
                                                 : std::nullopt);
                edited = true;
                continue;
            }
            records.append(reinterpret_cast<const char*>(reader.recordData()), reader.recordSize());
        }
    }
    if (!edited || !sealed) return false;
    audit::ChainHasher hasher(nullptr);
    hasher.update(records.data(), records.size());
    audit::encodeSegmentSealed(records, seal.dataBytes, seal.status, nullptr, seal.prevDigest,
                               hasher);
    std::ofstream out(files.indexPath, std::ios::binary | std::ios::trunc);
    out << records;
    return static_cast<bool>(out.flush());
}

class ArchiveVerifyRadosgwTest : public ::testing::Test {
  protected:
    void SetUp() override {
        ASSERT_FALSE(s3ServerDir().empty()) << "SPLICEGATE_S3_SERVER_DIR is not set (fixture s3_server)";
        ASSERT_TRUE(fs::exists(archiveBinary())) << archiveBinary();
    }

    // A real daemon's log, shipped whole by the real archiver to a new bucket under gw-test.
    void archiveALog(int connections) {
        makeAuditLog(auditDir_, connections, 200'000, 3);
        bucket_ = lockedBucket(client_);
        auto shipped = runProcess(archiveArgs(auditDir_, stateDir_, bucket_), milliseconds(120000));
        ASSERT_TRUE(exited(shipped, 0)) << shipped.err;
    }

    std::string box(const std::string& prefix) const { return "s3://" + bucket_ + "/" + prefix; }

    TempDir root_;
    std::string auditDir_ = root_.path() + "/audit";
    std::string stateDir_ = root_.path() + "/state";
    s3::S3Client client_ = s3TestClient();
    std::string bucket_;
};

TEST_F(ArchiveVerifyRadosgwTest, AWholeArchiveVerifiesAndEachAlterationIsFound) {
    ASSERT_NO_FATAL_FAILURE(archiveALog(3));
    auto whole = audit({"verify", box("gw-test")});
    ASSERT_TRUE(exited(whole, 0)) << whole.out << whole.err;
    EXPECT_TRUE(has(whole.out, box("gw-test") + ": consistent (")) << whole.out;
    EXPECT_TRUE(has(whole.out, "worker 0 head ")) << whole.out;
    // The bucket's chain is the directory's: the same newest seals.
    auto local = audit({"verify", auditDir_});
    ASSERT_TRUE(exited(local, 0)) << local.out << local.err;
    for (const auto& line : textLines(local.out)) {
        if (line.rfind("worker ", 0) != 0) continue;
        auto digest = line.substr(line.find(" digest=") + 1);
        EXPECT_TRUE(has(whole.out, digest)) << digest << " not in\n" << whole.out;
    }

    // A second box, a full copy: every box verifies, each named.
    ASSERT_NO_FATAL_FAILURE(
        copyPrefix(client_, bucket_, "gw-test", "copy/box-b", [](const std::string&) { return false; }));
    auto both = audit({"verify", "s3://" + bucket_, "--all-boxes"});
    ASSERT_TRUE(exited(both, 0)) << both.out << both.err;
    EXPECT_TRUE(has(both.out, box("gw-test") + ": consistent (")) << both.out;
    EXPECT_TRUE(has(both.out, box("copy/box-b") + ": consistent (")) << both.out;
    // list --all-boxes: each box's connections, each row naming its box.
    auto one = audit({"list", box("gw-test")});
    ASSERT_TRUE(exited(one, 0)) << one.err;
    const auto rows = textLines(one.out).size() - 1;  // less the header
    ASSERT_GE(rows, 6u) << one.out;
    auto boxes = audit({"list", "s3://" + bucket_, "--all-boxes"});
    ASSERT_TRUE(exited(boxes, 0)) << boxes.err;
    auto lines = textLines(boxes.out);
    ASSERT_EQ(lines.size(), 2 * rows + 1) << boxes.out;
    EXPECT_EQ(lines[0].rfind("BOX ", 0), 0u) << boxes.out;
    EXPECT_EQ(lines[1].rfind("copy/box-b ", 0), 0u) << boxes.out;
    EXPECT_EQ(lines[rows + 1].rfind("gw-test ", 0), 0u) << boxes.out;
    auto jsonl = audit({"list", "s3://" + bucket_, "--all-boxes", "--jsonl"});
    ASSERT_TRUE(exited(jsonl, 0)) << jsonl.err;
    auto objects = textLines(jsonl.out);
    ASSERT_EQ(objects.size(), 2 * rows) << jsonl.out;
    EXPECT_EQ(std::count_if(objects.begin(), objects.end(), [](const std::string& line) {
                  return line.rfind("{\"box\": \"gw-test\", \"id\": ", 0) == 0;
              }),
              static_cast<long>(rows))
        << jsonl.out;

    // A gap: a third box missing one segment between two others of its worker.
    auto segments = archivedSegments(client_, bucket_, "gw-test");
    unsigned gapWorker = 0;
    std::uint64_t gapSegment = 0;
    for (const auto& [worker, numbers] : segments)
        if (numbers.size() >= 3) gapWorker = worker, gapSegment = numbers[1];
    ASSERT_NE(gapSegment, 0u) << "no worker with three archived segments";
    ASSERT_NO_FATAL_FAILURE(copyPrefix(client_, bucket_, "gw-test", "gap", [&](const std::string& key) {
        return ofSegment("gw-test", key, gapWorker, gapSegment);
    }));
    auto gap = audit({"verify", box("gap")});
    ASSERT_TRUE(exited(gap, 1)) << gap.out << gap.err;
    EXPECT_TRUE(has(gap.out, box("gap") + ": worker " + std::to_string(gapWorker) + ": segment " +
                                 std::to_string(gapSegment) + " is missing between " + box("gap/segments/")))
        << gap.out;
    EXPECT_TRUE(has(gap.out, "hash chain broken")) << gap.out;
    auto all = audit({"verify", "s3://" + bucket_, "--all-boxes"});
    ASSERT_TRUE(exited(all, 1)) << all.out << all.err;
    EXPECT_TRUE(has(all.out, box("gw-test") + ": consistent (")) << all.out;
    EXPECT_TRUE(has(all.out, box("copy/box-b") + ": consistent (")) << all.out;
    EXPECT_TRUE(has(all.out, "is missing between " + box("gap/segments/"))) << all.out;
    EXPECT_TRUE(has(all.err, "3 boxes")) << all.err;

    // A fork: a second copy of one segment, under another creation second.
    auto forkKeys = [&](const std::string& key) { return ofSegment("gw-test", key, gapWorker, gapSegment); };
    ASSERT_NO_FATAL_FAILURE(copyPrefix(client_, bucket_, "gw-test", "fork", [](const std::string&) { return false; }));
    auto listed = client_.list(bucket_, "gw-test/segments/");
    ASSERT_TRUE(listed);
    for (const auto& entry : *listed) {
        if (!forkKeys(entry.key)) continue;
        auto parsed = archive::parseObjectKey("gw-test", entry.key);
        ASSERT_TRUE(parsed);
        auto id = parsed->id;
        id.createdNs += 1'000'000'000;
        auto bytes = client_.get(bucket_, entry.key);
        ASSERT_TRUE(bytes);
        s3::PutRequest put;
        put.bucket = bucket_;
        put.key = archive::objectKey("fork", id, parsed->kind);
        put.body = *bytes;
        ASSERT_TRUE(client_.put(put));
    }
    auto fork = audit({"verify", box("fork")});
    ASSERT_TRUE(exited(fork, 1)) << fork.out << fork.err;
    EXPECT_TRUE(has(fork.out, box("fork") + ": worker " + std::to_string(gapWorker) + " segment " +
                                  std::to_string(gapSegment) + ": 2 different copies in the bucket (a fork): " +
                                  box("fork/segments/")))
        << fork.out;

    // The same bytes put again under a key, as an archiver killed while the server finished its
    // PUT and restarted in that moment does (docs/archive.md): the manifest names the first
    // version, the bucket's current one is the second, and both hold the same bytes: a note
    // naming the key, not a problem.
    auto keys = client_.list(bucket_, "gw-test/segments/");
    ASSERT_TRUE(keys && keys->size() >= 2);
    const std::string victim = keys->front().key;
    auto original = client_.get(bucket_, victim);
    ASSERT_TRUE(original);
    s3::PutRequest again;
    again.bucket = bucket_;
    again.key = victim;
    again.body = *original;
    ASSERT_TRUE(client_.put(again));
    auto twice = audit({"verify", box("gw-test")});
    ASSERT_TRUE(exited(twice, 0)) << twice.out << twice.err;
    EXPECT_TRUE(has(twice.out, "s3://" + bucket_ + "/" + victim + ": 2 versions (")) << twice.out;
    EXPECT_TRUE(has(twice.out, ") with the same size and ETag: one object put twice")) << twice.out;
    EXPECT_TRUE(has(twice.out, box("gw-test") + ": consistent (")) << twice.out;
    auto anchorTwice = audit({"verify", auditDir_, "--archive", box("gw-test"), "--s3-endpoint",
                              s3Endpoint(), "--s3-credentials-file", s3CredentialsFile()});
    EXPECT_TRUE(exited(anchorTwice, 0)) << anchorTwice.out << anchorTwice.err;

    // Other bytes under a key: written after the archiver verified it, an alarm; the manifest
    // names the version the archiver verified, not the newer one.
    const std::string altered = keys->back().key;
    ASSERT_NE(altered, victim);
    auto before = client_.get(bucket_, altered);
    ASSERT_TRUE(before);
    s3::PutRequest other;
    other.bucket = bucket_;
    other.key = altered;
    std::string changed = *before + "x";
    other.body = changed;
    ASSERT_TRUE(client_.put(other));
    auto differs = audit({"verify", box("gw-test")});
    ASSERT_TRUE(exited(differs, 1)) << differs.out << differs.err;
    EXPECT_TRUE(has(differs.out, "s3://" + bucket_ + "/" + altered + ": 2 versions (")) << differs.out;
    EXPECT_TRUE(has(differs.out, "an archived object was written again or deleted")) << differs.out;
    EXPECT_TRUE(has(differs.out, ": the manifest says version ")) << differs.out;
    // The identical pair is still only a note.
    EXPECT_TRUE(has(differs.out, ") with the same size and ETag: one object put twice"))
        << differs.out;
    EXPECT_TRUE(has(differs.err, "problems found")) << differs.out << differs.err;
}

// Bytes of each segment's data and index objects under `prefix`, by (worker, segment).
std::map<std::pair<unsigned, std::uint64_t>, std::uint64_t> segmentBytes(
    s3::S3Client& c, const std::string& bucket, const std::string& prefix) {
    std::map<std::pair<unsigned, std::uint64_t>, std::uint64_t> bytes;
    auto listed = c.list(bucket, prefix + "/segments/");
    EXPECT_TRUE(listed) << listed.error.message;
    if (!listed) return bytes;
    for (const auto& entry : *listed) {
        auto parsed = archive::parseObjectKey(prefix, entry.key);
        if (parsed && parsed->kind != archive::ObjectKind::Connections)
            bytes[{parsed->id.worker, parsed->id.segment}] += entry.size;
    }
    return bytes;
}

// verify s3:// fetches one segment at a time into its temporary directory: the most it holds
// at once is one segment's data and index, not the archive.
TEST_F(ArchiveVerifyRadosgwTest, TheTemporaryDirectoryHoldsOneSegmentAtATime) {
    ASSERT_NO_FATAL_FAILURE(archiveALog(3));
    const std::string staging = root_.path() + "/staging";
    fs::create_directories(staging);
    std::vector<std::string> args = {"/usr/bin/env", "SPLICEGATE_AUDIT_STAGING_PROBE=1",
                                     "TMPDIR=" + staging, auditBinary(), "verify", box("gw-test")};
    for (const auto& option : s3Options()) args.push_back(option);
    auto probed = runProcess(args, milliseconds(120000));
    ASSERT_TRUE(exited(probed, 0)) << probed.out << probed.err;
    EXPECT_TRUE(has(probed.out, box("gw-test") + ": consistent (")) << probed.out;
    const std::string says = box("gw-test") + ": staged at most ";
    auto at = probed.err.find(says);
    ASSERT_NE(at, std::string::npos) << probed.err;
    const std::uint64_t peak = std::stoull(probed.err.substr(at + says.size()));
    auto bytes = segmentBytes(client_, bucket_, "gw-test");
    ASSERT_GE(bytes.size(), 3u);
    std::uint64_t largest = 0, total = 0;
    for (const auto& [segment, size] : bytes) {
        largest = std::max(largest, size);
        total += size;
    }
    RecordProperty("staged_peak_bytes", std::to_string(peak));
    RecordProperty("largest_segment_bytes", std::to_string(largest));
    RecordProperty("archive_segment_bytes", std::to_string(total));
    EXPECT_GT(peak, 0u) << probed.err;
    EXPECT_LE(peak, largest) << probed.err;
    EXPECT_LT(peak, total) << probed.err;
    // Removed at the end.
    EXPECT_TRUE(fs::is_empty(staging)) << staging;
}

TEST_F(ArchiveVerifyRadosgwTest, TheAnchorFindsALocalTailDeletedOrRewritten) {
    ASSERT_NO_FATAL_FAILURE(archiveALog(4));
    auto withOptions = [&](std::vector<std::string> args) {
        auto extra = s3Options();
        args.insert(args.end(), extra.begin(), extra.end());
        return audit(args);
    };
    auto agrees = withOptions({"verify", auditDir_, "--archive", box("gw-test")});
    ASSERT_TRUE(exited(agrees, 0)) << agrees.out << agrees.err;
    EXPECT_TRUE(has(agrees.out, auditDir_ + ": agrees with " + box("gw-test"))) << agrees.out;
    EXPECT_TRUE(has(agrees.out, "worker 0 archive head ")) << agrees.out;

    // The tail deleted: each worker's newest segment gone. The chain that is left verifies.
    const std::string tailDir = root_.path() + "/tail";
    fs::copy(auditDir_, tailDir, fs::copy_options::recursive);
    auto newest = newestSegments(tailDir);
    ASSERT_FALSE(newest.empty());
    const auto& cut = newest.begin()->second;
    fs::remove(cut.indexPath);
    fs::remove(cut.dataPath);
    auto chainAlone = audit({"verify", tailDir});
    EXPECT_TRUE(exited(chainAlone, 0)) << chainAlone.out << chainAlone.err;
    auto tail = withOptions({"verify", tailDir, "--archive", box("gw-test")});
    ASSERT_TRUE(exited(tail, 1)) << tail.out << tail.err;
    EXPECT_TRUE(has(tail.out, tailDir + ": worker " + std::to_string(cut.worker) +
                                  ": the local log ends at segment " +
                                  std::to_string(cut.segment - 1)))
        << tail.out;
    EXPECT_TRUE(has(tail.out, "the local tail was deleted")) << tail.out;

    // A segment rewritten and sealed again: the local chain verifies, the archive's seal differs.
    const std::string rewrittenDir = root_.path() + "/rewritten";
    fs::copy(auditDir_, rewrittenDir, fs::copy_options::recursive);
    std::optional<audit::SegmentFiles> rewritten;
    for (const auto& [worker, files] : newestSegments(rewrittenDir))
        if (!rewritten && rewriteAndReseal(files)) rewritten = files;
    ASSERT_TRUE(rewritten) << "no worker's newest segment has a chunk";
    auto resealed = audit({"verify", rewrittenDir});
    EXPECT_TRUE(exited(resealed, 0)) << resealed.out << resealed.err;
    auto anchor = withOptions({"verify", rewrittenDir, "--archive", box("gw-test")});
    ASSERT_TRUE(exited(anchor, 1)) << anchor.out << anchor.err;
    EXPECT_TRUE(has(anchor.out, rewritten->indexPath + ": worker " +
                                    std::to_string(rewritten->worker) + " segment " +
                                    std::to_string(rewritten->segment) + " is sealed "))
        << anchor.out;
    EXPECT_TRUE(has(anchor.out, "the local segment was rewritten after it was archived"))
        << anchor.out;

    // The relay's retention deletes what the archive verified: the chain records it, the anchor
    // accepts it.
    const std::uint16_t port = pickFreePort();
    {
        Daemon relay(relayArgs(port, {"127.0.0.1:9"},
                               {"--audit-dir", auditDir_, "--audit-retention-bytes", "1",
                                "--audit-archive-state-dir", stateDir_}));
        ASSERT_TRUE(relay.waitReady(port)) << relay.why();
        auto deadline = std::chrono::steady_clock::now() + milliseconds(20000);
        while (!fs::exists(auditDir_ + "/retention.log") &&
               std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(milliseconds(100));
        ASSERT_TRUE(fs::exists(auditDir_ + "/retention.log"));
        std::this_thread::sleep_for(milliseconds(1500));  // a pass deletes more than one
        ASSERT_TRUE(relay.terminate(milliseconds(20000))) << relay.why();
    }
    auto afterRetention = withOptions({"verify", auditDir_, "--archive", box("gw-test")});
    ASSERT_TRUE(exited(afterRetention, 0)) << afterRetention.out << afterRetention.err;
    EXPECT_FALSE(has(afterRetention.out, " 0 deleted by retention since")) << afterRetention.out;
}

// The relay's retention deleted segments before the archiver first ran: each worker's archive
// starts after them, which verify names and accepts.
TEST_F(ArchiveVerifyRadosgwTest, AnArchiveStartingAfterTheBoxsRetentionVerifies) {
    makeAuditLog(auditDir_, 3, 200'000, 2);
    const std::uint16_t port = pickFreePort();
    {
        Daemon relay(relayArgs(port, {"127.0.0.1:9"},
                               {"--audit-dir", auditDir_, "--audit-retention-bytes", "1"}));
        ASSERT_TRUE(relay.waitReady(port)) << relay.why();
        auto deadline = std::chrono::steady_clock::now() + milliseconds(20000);
        while (!fs::exists(auditDir_ + "/retention.log") &&
               std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(milliseconds(100));
        ASSERT_TRUE(fs::exists(auditDir_ + "/retention.log"));
        ASSERT_TRUE(relay.terminate(milliseconds(20000))) << relay.why();
    }
    bucket_ = lockedBucket(client_);
    auto shipped = runProcess(archiveArgs(auditDir_, stateDir_, bucket_), milliseconds(120000));
    ASSERT_TRUE(exited(shipped, 0)) << shipped.err;
    auto segments = archivedSegments(client_, bucket_, "gw-test");
    ASSERT_FALSE(segments.empty());
    ASSERT_GT(segments.begin()->second.front(), 1u) << "retention deleted nothing of worker "
                                                    << segments.begin()->first;
    auto verify = audit({"verify", box("gw-test")});
    ASSERT_TRUE(exited(verify, 0)) << verify.out << verify.err;
    EXPECT_TRUE(has(verify.out, ": the archive of worker " +
                                    std::to_string(segments.begin()->first) + " starts here"))
        << verify.out;
    EXPECT_TRUE(has(verify.out, box("gw-test") + ": consistent (")) << verify.out;
    auto extra = s3Options();
    std::vector<std::string> args = {"verify", auditDir_, "--archive", box("gw-test")};
    args.insert(args.end(), extra.begin(), extra.end());
    auto anchor = audit(args);
    EXPECT_TRUE(exited(anchor, 0)) << anchor.out << anchor.err;
}

TEST_F(ArchiveVerifyRadosgwTest, BadInputIsOneLine) {
    bucket_ = lockedBucket(client_);
    struct Case {
        std::vector<std::string> args;
        int code;
        std::string says;
    };
    const std::vector<Case> cases = {
        {{"verify", "s3://"}, 2, "no bucket"},
        {{"verify", "s3:///gw-test"}, 2, "no bucket"},
        {{"verify", "s3://" + bucket_}, 2, "no prefix"},
        {{"verify", box("gw-test"), "--all-boxes"}, 2, "--all-boxes"},
        {{"verify", root_.path(), "--archive", "/tmp/elsewhere"}, 2, "--archive"},
        {{"verify", root_.path(), "--archive", "s3://" + bucket_}, 2, "--archive"},
        {{"verify", box("gw-test"), "--archive", box("gw-test")}, 2, "--archive"},
        {{"verify", "s3://" + bucket_, "--all-boxes", "--expect-head", std::string(64, 'a')}, 2,
         "--expect-head"},
        {{"verify", box("nothing-here")}, 1, "no archive there"},
        {{"list", box("gw-test"), "--all-boxes"}, 2, "--all-boxes"},
        {{"list", root_.path(), "--all-boxes"}, 2, "--all-boxes"},
        {{"list", "s3://" + bucket_, "--all-boxes"}, 1, "no archive there"},
        {{"verify", "s3://" + bucket_, "--all-boxes"}, 1, "no archive there"},
    };
    for (const auto& c : cases) {
        auto result = audit(c.args);
        std::string name = c.args[1] + (c.args.size() > 2 ? " " + c.args[2] : "");
        ASSERT_TRUE(result.status) << name;
        EXPECT_TRUE(result.status->isExit(c.code)) << name << ": " << result.out << result.err;
        EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << name << ": " << result.err;
        EXPECT_TRUE(has(result.err, c.says)) << name << ": " << result.err;
    }
    // The endpoint unreachable: one line naming it, exit 1; without one, exit 2.
    auto unreachable = runProcess({auditBinary(), "verify", box("gw-test"), "--s3-endpoint",
                                   "http://127.0.0.1:9", "--s3-credentials-file",
                                   s3CredentialsFile()},
                                  milliseconds(60000));
    ASSERT_TRUE(unreachable.status);
    EXPECT_TRUE(unreachable.status->isExit(1)) << unreachable.err;
    EXPECT_EQ(std::count(unreachable.err.begin(), unreachable.err.end(), '\n'), 1) << unreachable.err;
    EXPECT_TRUE(has(unreachable.err, "127.0.0.1:9")) << unreachable.err;
    auto noEndpoint = runProcess({auditBinary(), "verify", root_.path(), "--archive", box("gw-test")},
                                 milliseconds(30000));
    ASSERT_TRUE(noEndpoint.status);
    EXPECT_TRUE(noEndpoint.status->isExit(2)) << noEndpoint.err;
    EXPECT_TRUE(has(noEndpoint.err, "--s3-endpoint")) << noEndpoint.err;
}

}  // namespace
}  // namespace splicegate::test
