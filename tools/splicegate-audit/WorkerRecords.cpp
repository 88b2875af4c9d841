#include "tools/splicegate-audit/WorkerRecords.h"

#include <system_error>
#include <utility>

namespace splicegate::audittool {

using audit::IndexReader;
using audit::placeText;

WorkerRecords::WorkerRecords(std::string dir, std::vector<audit::SegmentFiles> segments,
                             ProblemSink onProblem, DeletedSink onDeletedMeanwhile)
    : dir_(std::move(dir)),
      segments_(std::move(segments)),
      onProblem_(std::move(onProblem)),
      onDeletedMeanwhile_(std::move(onDeletedMeanwhile)) {}

bool WorkerRecords::openNext() {
    reader_.reset();
    while (following_ < segments_.size()) {
        const audit::SegmentFiles& files = segments_[following_++];
        if (!files.hasIndex) continue;
        try {
            reader_.emplace(files.indexPath);
        } catch (const std::system_error& error) {
            std::vector<audit::RetentionLogEntry> entries;
            if (onDeletedMeanwhile_ && audit::deletedSinceListed(error, dir_, files, entries)) {
                onDeletedMeanwhile_(files, entries);
                continue;
            }
            // One unreadable file is one problem; the other segments are still read.
            onProblem_(placeText(files.indexPath, 0, error.what()));
            continue;
        }
        current_ = following_ - 1;
        first_ = true;
        return true;
    }
    return false;
}

bool WorkerRecords::next(audit::Record& record) {
    for (;;) {
        if (!reader_ && !openNext()) return false;
        switch (reader_->next(record)) {
            case IndexReader::Status::Record:
                if (first_ && record.type != audit::RecordType::SegmentStart)
                    onProblem_(
                        placeText(reader_->path(), 0, "the first record is not SegmentStart"));
                first_ = false;
                return true;
            case IndexReader::Status::End:
            case IndexReader::Status::Torn:
                reader_.reset();
                continue;
            case IndexReader::Status::Corrupt:
                onProblem_(placeText(reader_->path(), reader_->recordOffset(), reader_->problem()));
                first_ = false;
                if (!reader_->resync()) reader_.reset();
                continue;
        }
    }
}

std::vector<std::vector<audit::SegmentFiles>> segmentsByWorker(const std::string& dir) {
    std::vector<std::vector<audit::SegmentFiles>> workers;
    for (auto& files : audit::listSegments(dir)) {
        if (workers.empty() || workers.back().front().worker != files.worker)
            workers.emplace_back();
        workers.back().push_back(std::move(files));
    }
    return workers;
}

}  // namespace splicegate::audittool
