#include "audit/AuditOptions.h"

namespace splicegate {
namespace po = boost::program_options;
namespace {

constexpr std::uint64_t kMinAuditBufferBytes = std::uint64_t{1} << 20;

constexpr Named<AuditDurability> kDurabilityNames[] = {{"strict", AuditDurability::Strict},
                                                       {"batch", AuditDurability::Batch},
                                                       {"none", AuditDurability::None}};
constexpr Named<AuditOnError> kOnErrorNames[] = {{"fail-closed", AuditOnError::FailClosed},
                                                 {"fail-open", AuditOnError::FailOpen}};
constexpr Named<AuditWriterKind> kAuditWriterNames[] = {{"direct", AuditWriterKind::Direct},
                                                        {"splice", AuditWriterKind::Splice}};

}  // namespace

// One option per line reads better than the formatter's layout of a call chain.
// clang-format off
po::options_description auditOptions() {
    const AuditSettings d;
    po::options_description options;
    options.add_options()
        ("audit-dir", scalar("DIR", d.dir), "audit log directory; empty = audit off")
        ("audit-durability", scalar("MODE", nameOf(kDurabilityNames, d.durability)),
         "strict: forward a chunk only once it is durable; batch: durable within the fsync "
         "interval; none: page cache only")
        ("audit-fsync-interval-ms", scalar("N", std::to_string(d.fsyncIntervalMs)),
         "batch mode's bound (at least 1)")
        ("audit-on-error", scalar("MODE", nameOf(kOnErrorNames, d.onError)),
         "fail-closed: close the affected connections on an audit write error; fail-open: go on "
         "forwarding and count the lost bytes")
        ("audit-retention-bytes", scalar("N", std::to_string(d.retentionBytes)),
         "delete oldest closed audit data above this size; 0 = keep all")
        ("audit-retention-hours", scalar("N", std::to_string(d.retentionHours)),
         "delete closed audit data older than this; 0 = keep all")
        ("audit-writer", scalar("W", nameOf(kAuditWriterNames, d.writer)),
         "direct: O_DIRECT writes from registered aligned buffers (buffered where the filesystem "
         "refuses O_DIRECT); splice: splice into the page cache")
        ("audit-buffer-bytes", scalar("N", std::to_string(d.bufferBytes)),
         "per worker, audited bytes not yet written (at least 1 MiB); when full, audited flows "
         "stop reading")
        ("audit-group", scalar("NAME"),
         "group that may read audit files (files 0640, directory 0750); default: the daemon's")
        ("audit-hmac-key-file", scalar("FILE"),
         "key for the audit log's sealing HMAC; none = hash chain without a key")
        ("audit-archive-state-dir", scalar("DIR"),
         "splicegate-archive's state directory: retention deletes only segments the archive "
         "verified (with fail-open, unarchived ones too when the size limit needs it); none = no "
         "archive");
    return options;
}
// clang-format on

AuditSettings readAuditSettings(const OptionValues& values) {
    AuditSettings audit;
    audit.dir = values.text("audit-dir");
    audit.durability = values.choice(kDurabilityNames, "audit-durability");
    audit.fsyncIntervalMs = values.number<std::uint32_t>("audit-fsync-interval-ms", 1);
    audit.onError = values.choice(kOnErrorNames, "audit-on-error");
    audit.retentionBytes = values.number<std::uint64_t>("audit-retention-bytes");
    audit.retentionHours = values.number<std::uint64_t>("audit-retention-hours");
    audit.writer = values.choice(kAuditWriterNames, "audit-writer");
    audit.bufferBytes = values.number<std::uint64_t>("audit-buffer-bytes", kMinAuditBufferBytes);
    audit.group = values.text("audit-group");
    audit.hmacKeyFile = values.text("audit-hmac-key-file");
    if (values.has("audit-hmac-key-file") && audit.hmacKeyFile.empty())
        throw UsageError(values.label("audit-hmac-key-file") + ": empty file name");
    audit.archiveStateDir = values.text("audit-archive-state-dir");
    return audit;
}

void listChanged(const AuditSettings& running, const AuditSettings& next, ChangedOptions& changed) {
    changed.check("audit-dir", running.dir, next.dir);
    changed.check("audit-durability", running.durability, next.durability);
    changed.check("audit-fsync-interval-ms", running.fsyncIntervalMs, next.fsyncIntervalMs);
    changed.check("audit-on-error", running.onError, next.onError);
    changed.check("audit-retention-bytes", running.retentionBytes, next.retentionBytes);
    changed.check("audit-retention-hours", running.retentionHours, next.retentionHours);
    changed.check("audit-writer", running.writer, next.writer);
    changed.check("audit-buffer-bytes", running.bufferBytes, next.bufferBytes);
    changed.check("audit-group", running.group, next.group);
    changed.check("audit-hmac-key-file", running.hmacKeyFile, next.hmacKeyFile);
    changed.check("audit-archive-state-dir", running.archiveStateDir, next.archiveStateDir);
}

const char* toString(AuditDurability durability) noexcept {
    return nameOf(kDurabilityNames, durability);
}

const char* toString(AuditWriterKind writer) noexcept {
    return nameOf(kAuditWriterNames, writer);
}

}  // namespace splicegate
