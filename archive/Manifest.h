#pragma once
// A segment's manifest as read back from the bucket (its JSON, written by manifestJson in
// Archiver.h; the message is proto/splicegate/archive_index.proto's ArchiveManifest): the
// archiver reads the retain-until it records when it adopts a segment shipped before, and
// `splicegate-audit verify` the whole of it. One parser for both, protobuf's.
// Thread affinity: none. Error contract: none; a text that is not a manifest gives nullopt.
#include <optional>
#include <string>
#include <string_view>

#include "splicegate/archive_index.pb.h"

namespace splicegate::archive {

// `json` parsed (fields of a newer archiver ignored); nullopt with `problem` saying why when it
// is not a manifest.
std::optional<ArchiveManifest> parseManifest(std::string_view json, std::string& problem);

}  // namespace splicegate::archive
