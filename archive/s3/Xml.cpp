#include "archive/s3/Xml.h"

#include <charconv>

namespace splicegate::s3::xml {
namespace {

// Where the start tag <tag> / <tag attr=...> / <tag/> begins at or after `from`, or npos. A longer
// name with the same beginning (<KeyMarker> when looking for <Key>) is not a match.
std::size_t findStart(std::string_view doc, std::string_view tag, std::size_t from) {
    for (std::size_t at = doc.find('<', from); at != std::string_view::npos; at = doc.find('<', at + 1)) {
        if (doc.compare(at + 1, tag.size(), tag) != 0) continue;
        std::size_t after = at + 1 + tag.size();
        if (after < doc.size() && (doc[after] == '>' || doc[after] == '/' || doc[after] == ' ' ||
                                   doc[after] == '\t' || doc[after] == '\n' || doc[after] == '\r'))
            return at;
    }
    return std::string_view::npos;
}

void appendUtf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

// The character an entity body ("amp", "#38", "#x26") stands for, appended; false if unknown.
bool decodeOne(std::string_view name, std::string& out) {
    static constexpr std::pair<std::string_view, char> kNamed[] = {
        {"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"apos", '\''}};
    for (const auto& [n, c] : kNamed)
        if (name == n) {
            out += c;
            return true;
        }
    if (name.size() < 2 || name[0] != '#') return false;
    bool hexForm = name[1] == 'x' || name[1] == 'X';
    std::string_view digits = name.substr(hexForm ? 2 : 1);
    std::uint32_t cp = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), cp, hexForm ? 16 : 10);
    if (ec != std::errc() || end != digits.data() + digits.size() || cp > 0x10FFFF) return false;
    appendUtf8(out, cp);
    return true;
}

}  // namespace

std::vector<std::string_view> elements(std::string_view doc, std::string_view tag) {
    std::vector<std::string_view> found;
    const std::string close = "</" + std::string(tag) + ">";
    std::size_t at = 0;
    while ((at = findStart(doc, tag, at)) != std::string_view::npos) {
        std::size_t gt = doc.find('>', at);
        if (gt == std::string_view::npos) break;
        if (doc[gt - 1] == '/') {
            found.emplace_back();
            at = gt + 1;
            continue;
        }
        std::size_t end = doc.find(close, gt + 1);
        if (end == std::string_view::npos) break;
        found.push_back(doc.substr(gt + 1, end - gt - 1));
        at = end + close.size();
    }
    return found;
}

std::optional<std::string> text(std::string_view doc, std::string_view tag) {
    auto all = elements(doc, tag);
    if (all.empty()) return std::nullopt;
    return decodeEntities(all.front());
}

std::string decodeEntities(std::string_view raw) {
    std::string out;
    out.reserve(raw.size());
    for (std::size_t i = 0; i < raw.size(); ++i) {
        if (raw[i] == '&') {
            std::size_t semi = raw.find(';', i);
            if (semi != std::string_view::npos && semi - i <= 10 &&
                decodeOne(raw.substr(i + 1, semi - i - 1), out)) {
                i = semi;
                continue;
            }
        }
        out += raw[i];
    }
    return out;
}

}  // namespace splicegate::s3::xml
