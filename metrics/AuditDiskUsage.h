#pragma once
// How full the audit directory's filesystem is and how much the audit log holds there: with
// keep-all retention and fail-closed auditing a full disk stops every audited route, so the
// operator needs a warning (the alert rules in packaging/prometheus/ use these two gauges).
//
// Thread affinity: any thread; sample() is serialised internally. Error contract: never throws;
// a value that cannot be read is nullopt (and logged once per failure streak).
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

namespace splicegate {

struct AuditDiskSample {
    std::optional<std::uint64_t> sizeBytes;    // of the filesystem
    std::optional<std::uint64_t> freeBytes;    // available to the daemon's (unprivileged) user
    std::optional<std::uint64_t> storedBytes;  // sizes of the regular files in the directory
};

class AuditDiskUsage {
  public:
    // The stored-bytes sum costs one readdir and one fstatat per file of the directory, so it is
    // recomputed at most every `refresh`; the free space (one statvfs) is read every time.
    explicit AuditDiskUsage(std::string directory,
                            std::chrono::steady_clock::duration refresh = std::chrono::seconds(10));

    AuditDiskSample sample() noexcept;

  private:
    std::optional<std::uint64_t> storedBytes(std::chrono::steady_clock::time_point now,
                                             int& err) noexcept;

    std::string directory_;
    std::chrono::steady_clock::duration refresh_;
    std::mutex mutex_;
    std::optional<std::uint64_t> stored_;
    std::chrono::steady_clock::time_point storedAt_{};
    bool failing_ = false;
};

}  // namespace splicegate
