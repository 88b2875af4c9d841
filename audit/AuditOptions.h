#pragma once
// The audit's options (--audit-*, docs/configuration.md): their settings, declared once with
// their defaults, the option group that describes them, and how they are read and checked.
#include <boost/program_options/options_description.hpp>
#include <cstdint>
#include <string>

#include "common/OptionValues.h"

namespace splicegate {

enum class AuditDurability { Strict, Batch, None };
enum class AuditOnError { FailClosed, FailOpen };
// How audited bytes reach the disk: direct = O_DIRECT from registered buffers; splice = into the
// page cache.
enum class AuditWriterKind { Direct, Splice };

struct AuditSettings {
    std::string dir = "/var/lib/splicegate/audit";  // empty: audit off
    AuditDurability durability = AuditDurability::Batch;
    std::uint32_t fsyncIntervalMs = 50;
    AuditOnError onError = AuditOnError::FailClosed;
    std::uint64_t retentionBytes = 0;
    std::uint64_t retentionHours = 0;
    // Splice until the direct writer keeps fail-closed on a full disk (its index records are
    // booked after the data is durable and can still be lost: issue 12, audit/FORMAT.md).
    AuditWriterKind writer = AuditWriterKind::Direct;
    std::uint64_t bufferBytes = 67108864;  // per worker
    std::string group;                     // empty: the daemon's group
    std::string hmacKeyFile;               // empty: hash chain without a key
    // splicegate-archive's state directory (empty: no archive): retention then deletes only
    // segments the archive verified (audit/Retention.h, archive/ArchiveLedger.h).
    std::string archiveStateDir;
    // Not an option: where a worker's segment file ends and the next begins.
    std::uint64_t segmentBytes = 1ull << 30;
};

// The audit options, their defaults from AuditSettings{}.
boost::program_options::options_description auditOptions();
AuditSettings readAuditSettings(const OptionValues& values);
// Every audit option takes effect at the next start only.
void listChanged(const AuditSettings& running, const AuditSettings& next, ChangedOptions& changed);

const char* toString(AuditDurability durability) noexcept;
const char* toString(AuditWriterKind writer) noexcept;

}  // namespace splicegate
