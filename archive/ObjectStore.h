#pragma once
// The bucket as the archiver uses it: the calls it makes, on one bucket. The service runs
// it over s3::S3Client (S3ObjectStore); the archiver's unit tests run it over a map, so that
// every crash point between two of its calls can be tried, and its integration tests over a
// real server (radosgw).
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "archive/s3/Http.h"
#include "archive/s3/S3Client.h"
#include "audit/Crc32c.h"

namespace splicegate::archive {

class ObjectStore {
  public:
    virtual ~ObjectStore() = default;
    virtual s3::Result<s3::ObjectInfo> head(const std::string& key,
                                            const std::string& versionId = {}) = 0;
    // `request.bucket` is filled in by the store.
    virtual s3::Result<s3::ObjectInfo> put(s3::PutRequest request) = 0;
    // A multipart upload of `parts` of the request's body; aborted when it fails.
    virtual s3::Result<s3::ObjectInfo> putMultipart(s3::PutRequest request,
                                                    const std::vector<s3::PartRange>& parts) = 0;
    virtual s3::Result<std::vector<s3::UploadEntry>> listUploads(const std::string& prefix) = 0;
    virtual s3::Result<bool> abortUpload(const std::string& key, const std::string& uploadId) = 0;
    // Bytes [first, last] of `versionId` ("" = the newest version).
    virtual s3::Result<std::string> get(const std::string& key, const std::string& versionId,
                                        std::uint64_t first, std::uint64_t last) = 0;
    // The CRC-32C of bytes [first, last] of `versionId`, continuing `seed`: by default from
    // get(); S3ObjectStore streams the bytes through the CRC instead of holding them.
    virtual s3::Result<std::uint32_t> crc32c(const std::string& key, const std::string& versionId,
                                             std::uint64_t first, std::uint64_t last,
                                             std::uint32_t seed) {
        auto piece = get(key, versionId, first, last);
        if (!piece) return s3::Result<std::uint32_t>::failure(piece.error);
        return s3::Result<std::uint32_t>::success(audit::crc32c(seed, piece->data(), piece->size()));
    }
    virtual s3::Result<s3::ObjectInfo> getRetention(const std::string& key,
                                                    const std::string& versionId) = 0;
    virtual s3::Result<bool> putRetention(const std::string& key, const std::string& versionId,
                                          const std::string& mode,
                                          const std::string& retainUntil) = 0;
    virtual std::string describe() const = 0;  // "s3://BUCKET" for messages
};

// A reply's bytes into a running CRC-32C, started again on each attempt.
class Crc32cSink final : public s3::BodySink {
  public:
    explicit Crc32cSink(std::uint32_t seed) : seed_(seed), crc_(seed) {}
    void restart() override { crc_ = seed_; }
    void take(std::string_view bytes) override { crc_ = audit::crc32c(crc_, bytes.data(), bytes.size()); }
    std::uint32_t crc() const { return crc_; }

  private:
    std::uint32_t seed_;
    std::uint32_t crc_;
};

class S3ObjectStore final : public ObjectStore {
  public:
    S3ObjectStore(s3::S3Client& client, std::string bucket)
        : client_(client), bucket_(std::move(bucket)) {}

    s3::Result<s3::ObjectInfo> head(const std::string& key, const std::string& versionId) override {
        return client_.head(bucket_, key, versionId);
    }
    s3::Result<s3::ObjectInfo> put(s3::PutRequest request) override {
        request.bucket = bucket_;
        return client_.put(request);
    }
    s3::Result<s3::ObjectInfo> putMultipart(s3::PutRequest request,
                                            const std::vector<s3::PartRange>& parts) override {
        request.bucket = bucket_;
        return client_.putMultipart(request, parts);
    }
    s3::Result<std::vector<s3::UploadEntry>> listUploads(const std::string& prefix) override {
        return client_.listMultipartUploads(bucket_, prefix);
    }
    s3::Result<bool> abortUpload(const std::string& key, const std::string& uploadId) override {
        return client_.abortMultipartUpload(bucket_, key, uploadId);
    }
    s3::Result<std::string> get(const std::string& key, const std::string& versionId,
                                std::uint64_t first, std::uint64_t last) override {
        return client_.get(bucket_, key, std::make_pair(first, last), versionId);
    }
    s3::Result<std::uint32_t> crc32c(const std::string& key, const std::string& versionId,
                                     std::uint64_t first, std::uint64_t last,
                                     std::uint32_t seed) override {
        Crc32cSink sink(seed);
        auto got = client_.getInto(bucket_, key, first, last, versionId, sink);
        if (!got) return s3::Result<std::uint32_t>::failure(got.error);
        return s3::Result<std::uint32_t>::success(sink.crc());
    }
    s3::Result<s3::ObjectInfo> getRetention(const std::string& key,
                                            const std::string& versionId) override {
        return client_.getRetention(bucket_, key, versionId);
    }
    s3::Result<bool> putRetention(const std::string& key, const std::string& versionId,
                                  const std::string& mode, const std::string& retainUntil) override {
        return client_.putRetention(bucket_, key, versionId, mode, retainUntil);
    }
    std::string describe() const override { return "s3://" + bucket_; }

  private:
    s3::S3Client& client_;
    std::string bucket_;
};

}  // namespace splicegate::archive
