#pragma once
// The index records of one worker's segments, in log order, read through audit::IndexReader with
// constant memory: what `list` and `export` walk. Damage is handled as audit::listConnections
// handles it: a corrupt record is reported and skipped (the reader resynchronises), a torn tail
// ends its segment (a write in progress or a crash not yet recovered), an index whose first record
// is not SegmentStart is reported, an unreadable index file is reported and skipped, and one that
// retention deleted after it was listed goes to `onDeletedMeanwhile` if given (else it is
// reported).
// Thread affinity: none; one object per thread. Error contract: problems go to `onProblem` as
// "FILE:OFFSET: what"; nothing throws but std::bad_alloc.
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "audit/AuditReader.h"
#include "audit/Records.h"

namespace splicegate::audittool {

using ProblemSink = std::function<void(const std::string&)>;
// A listed segment retention deleted before it was read, and the retention log read again.
using DeletedSink =
    std::function<void(const audit::SegmentFiles&, const std::vector<audit::RetentionLogEntry>&)>;

class WorkerRecords {
  public:
    // `segments`: one worker's, in segment order (as audit::listSegments sorts them); `dir`
    // their directory.
    WorkerRecords(std::string dir, std::vector<audit::SegmentFiles> segments, ProblemSink onProblem,
                  DeletedSink onDeletedMeanwhile = {});

    // The next good record; false after the last segment.
    bool next(audit::Record& record);
    // The segment of the record next() returned last.
    const audit::SegmentFiles& segment() const { return segments_.at(current_); }

  private:
    bool openNext();

    std::string dir_;
    std::vector<audit::SegmentFiles> segments_;
    ProblemSink onProblem_;
    DeletedSink onDeletedMeanwhile_;
    std::size_t current_ = 0;
    std::size_t following_ = 0;  // the segment openNext() opens
    std::optional<audit::IndexReader> reader_;
    bool first_ = true;
};

// audit::listSegments(dir) grouped by worker, in worker order. Throws std::system_error naming
// `dir` when it cannot be read.
std::vector<std::vector<audit::SegmentFiles>> segmentsByWorker(const std::string& dir);

}  // namespace splicegate::audittool
