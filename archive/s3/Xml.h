#pragma once
// Just enough XML for S3's small responses (errors, listings, retention): the text of elements
// by tag name, with the five predefined entities and numeric character references decoded. Not a
// general parser: S3 bodies have no CDATA, comments inside values or same-named nested elements,
// which is why a tag extractor is enough and no XML library is linked.
// Thread affinity: none (pure functions). Error contract: none; malformed input yields fewer or
// empty values, never an exception beyond std::bad_alloc.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace splicegate::s3::xml {

// The raw inner text of each <tag ...>...</tag> (or "" for <tag/>) at any depth, in order.
std::vector<std::string_view> elements(std::string_view doc, std::string_view tag);
// The decoded text of the first <tag>, if there is one.
std::optional<std::string> text(std::string_view doc, std::string_view tag);
std::string decodeEntities(std::string_view raw);

}  // namespace splicegate::s3::xml
