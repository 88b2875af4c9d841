#pragma once
// Text forms shared by the splicegate-audit commands and the archive: timestamps (ISO-8601 out, RFC 3339 in),
// JSON string literals and table cells that untrusted log strings cannot break.
// Thread affinity: none (pure functions). Error contract: nothing throws but std::bad_alloc;
// parseRfc3339 returns nullopt on bad input.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace splicegate::audittool {

// ISO-8601 UTC with milliseconds: 2024-05-01T12:34:56.789Z.
std::string isoTime(std::int64_t ns);

// RFC 3339 date-time ("2024-05-01T12:34:56Z", "2024-05-01t12:34:56.5+02:00", also with a space
// for the T, as RFC 3339 section 5.6 allows) as nanoseconds since the epoch.
std::optional<std::int64_t> parseRfc3339(const std::string& text);
// Same; `outOfRange` says whether a well-formed time was refused for lying outside what
// nanoseconds since the epoch in an int64 hold (1677-09-21 to 2262-04-11).
std::optional<std::int64_t> parseRfc3339(const std::string& text, bool& outOfRange);

// A JSON string literal; invalid UTF-8 becomes U+FFFD so the document always parses.
std::string jsonString(const std::string& text);

// A table cell: control characters and invalid UTF-8 (which could drive a terminal) become '?',
// whitespace becomes '_' so columns stay split by spaces, and an empty value is "-".
std::string cell(const std::string& text);

// Display width of a cell (UTF-8 code points; good enough for addresses and route names).
std::size_t width(const std::string& text);

}  // namespace splicegate::audittool
