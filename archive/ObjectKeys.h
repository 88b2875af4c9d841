#pragma once
// Where a segment's objects live in the bucket. Keys sort by time (the segment's creation hour,
// then its creation second), so a listing of one hour's prefix finds that hour's segments, and
// nothing is ever rewritten: there is no mutable "latest" object, only immutable ones.
//
//   PREFIX/segments/YYYY/MM/DD/HH/YYYYMMDDTHHMMSSZ-wWW-SSSSSSSSSS.data
//   PREFIX/segments/YYYY/MM/DD/HH/YYYYMMDDTHHMMSSZ-wWW-SSSSSSSSSS.index
//   PREFIX/segments/YYYY/MM/DD/HH/YYYYMMDDTHHMMSSZ-wWW-SSSSSSSSSS.connections.jsonl.gz
//   PREFIX/manifests/YYYY/MM/DD/HH/wWW-SSSSSSSSSS.json   (written last, once all are verified)
//
// A manifest names its segment's objects with their version ids and its time range; `list`
// reads the manifests of the hours it is asked about, then only those segments' index objects.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "archive/UploadState.h"

namespace splicegate::archive {

struct SegmentId {
    unsigned worker = 0;
    std::uint64_t segment = 0;
    std::int64_t createdNs = 0;  // the SegmentStart record's time

    bool operator==(const SegmentId&) const = default;
};

// The object key of one of a segment's objects. `prefix` has no trailing slash.
std::string objectKey(std::string_view prefix, const SegmentId& id, ObjectKind kind);
std::string manifestKey(std::string_view prefix, const SegmentId& id);
// The listing prefix of one hour's manifests ("PREFIX/manifests/YYYY/MM/DD/HH/").
std::string manifestHourPrefix(std::string_view prefix, std::int64_t hourNs);

struct ParsedKey {
    SegmentId id;  // createdNs to the second
    ObjectKind kind = ObjectKind::Data;
};
// The inverse of objectKey for keys under `prefix`; nullopt for any other key.
std::optional<ParsedKey> parseObjectKey(std::string_view prefix, std::string_view key);
// The inverse of manifestKey: worker and segment (createdNs to the hour, from the folder); nullopt
// for any other key.
std::optional<SegmentId> parseManifestKey(std::string_view prefix, std::string_view key);

// A prefix is a host name or a path of them: letters, digits, '.', '-', '_' and '/' between
// non-empty parts. Returns the problem, or an empty string.
std::string checkPrefix(std::string_view prefix);

}  // namespace splicegate::archive
