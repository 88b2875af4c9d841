#include "archive/Manifest.h"

#include <google/protobuf/util/json_util.h>

namespace splicegate::archive {

std::optional<ArchiveManifest> parseManifest(std::string_view json, std::string& problem) {
    google::protobuf::util::JsonParseOptions options;
    options.ignore_unknown_fields = true;  // a newer archiver's extra fields
    ArchiveManifest manifest;
    auto status = google::protobuf::util::JsonStringToMessage(json, &manifest, options);
    if (!status.ok()) {
        problem = std::string(status.message());
        return std::nullopt;
    }
    return manifest;
}

}  // namespace splicegate::archive
