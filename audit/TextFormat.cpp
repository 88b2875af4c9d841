#include "audit/TextFormat.h"

#include <time.h>

#include <cstdio>

namespace splicegate::audittool {

// ISO-8601 UTC with milliseconds: 2024-05-01T12:34:56.789Z.
std::string isoTime(std::int64_t ns) {
    std::int64_t seconds = ns / 1'000'000'000;
    std::int64_t rest = ns % 1'000'000'000;
    if (rest < 0) {
        rest += 1'000'000'000;
        --seconds;
    }
    auto t = static_cast<time_t>(seconds);
    tm parts{};
    if (::gmtime_r(&t, &parts) == nullptr) return std::to_string(ns) + "ns";
    char text[64];
    std::snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", parts.tm_year + 1900,
                  parts.tm_mon + 1, parts.tm_mday, parts.tm_hour, parts.tm_min, parts.tm_sec,
                  static_cast<int>(rest / 1'000'000));
    return text;
}

// Length of the valid UTF-8 sequence at text[i], or 0 when it is not valid UTF-8.
std::size_t utf8Length(const std::string& text, std::size_t i) {
    auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
    unsigned char lead = byte(i);
    if (lead < 0x80) return 1;
    std::size_t length = 0;
    std::uint32_t min = 0;
    if ((lead & 0xe0) == 0xc0) {
        length = 2;
        min = 0x80;
    } else if ((lead & 0xf0) == 0xe0) {
        length = 3;
        min = 0x800;
    } else if ((lead & 0xf8) == 0xf0) {
        length = 4;
        min = 0x10000;
    } else {
        return 0;
    }
    if (i + length > text.size()) return 0;
    std::uint32_t code = lead & (0x7f >> length);
    for (std::size_t k = 1; k < length; ++k) {
        if ((byte(i + k) & 0xc0) != 0x80) return 0;
        code = (code << 6) | (byte(i + k) & 0x3f);
    }
    if (code < min || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return 0;
    return length;
}

// A JSON string literal; invalid UTF-8 becomes U+FFFD so the document always parses.
std::string jsonString(const std::string& text) {
    std::string out = "\"";
    for (std::size_t i = 0; i < text.size();) {
        auto c = static_cast<unsigned char>(text[i]);
        std::size_t length = utf8Length(text, i);
        if (length == 0) {
            out += "\\ufffd";
            ++i;
            continue;
        }
        if (length > 1) {
            out.append(text, i, length);
        } else if (c == '"' || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\t') {
            out += "\\t";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c < 0x20 || c == 0x7f) {
            char escaped[8];
            std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
            out += escaped;
        } else {
            out += static_cast<char>(c);
        }
        i += length;
    }
    return out + "\"";
}

// A table cell: control characters and invalid UTF-8 (which could drive a terminal) become '?',
// whitespace becomes '_' so columns stay split by spaces, and an empty value is "-".
std::string cell(const std::string& text) {
    if (text.empty()) return "-";
    std::string out;
    for (std::size_t i = 0; i < text.size();) {
        auto c = static_cast<unsigned char>(text[i]);
        std::size_t length = utf8Length(text, i);
        if (length == 0 || (length == 1 && (c < 0x20 || c == 0x7f))) {
            out += '?';
            ++i;
            continue;
        }
        out += c == ' ' ? '_' : static_cast<char>(c);
        if (length > 1) out.append(text, i + 1, length - 1);
        i += length;
    }
    return out;
}

// Display width of a cell (UTF-8 code points; good enough for addresses and route names).
std::size_t width(const std::string& text) {
    std::size_t n = 0;
    for (char c : text)
        if ((static_cast<unsigned char>(c) & 0xc0) != 0x80) ++n;
    return n;
}

namespace {

// Reads exactly `digits` decimal digits at text[pos]; advances pos.
bool readDigits(const std::string& text, std::size_t& pos, int digits, int& value) {
    value = 0;
    for (int i = 0; i < digits; ++i, ++pos) {
        if (pos >= text.size() || text[pos] < '0' || text[pos] > '9') return false;
        value = value * 10 + (text[pos] - '0');
    }
    return true;
}

bool expect(const std::string& text, std::size_t& pos, char c) {
    if (pos >= text.size() || text[pos] != c) return false;
    ++pos;
    return true;
}

}  // namespace

std::optional<std::int64_t> parseRfc3339(const std::string& text) {
    bool outOfRange = false;
    return parseRfc3339(text, outOfRange);
}

std::optional<std::int64_t> parseRfc3339(const std::string& text, bool& outOfRange) {
    outOfRange = false;
    std::size_t pos = 0;
    int year, month, day, hour, minute, second;
    if (!readDigits(text, pos, 4, year) || !expect(text, pos, '-') ||
        !readDigits(text, pos, 2, month) || !expect(text, pos, '-') ||
        !readDigits(text, pos, 2, day))
        return std::nullopt;
    if (pos >= text.size() || (text[pos] != 'T' && text[pos] != 't' && text[pos] != ' '))
        return std::nullopt;
    ++pos;
    if (!readDigits(text, pos, 2, hour) || !expect(text, pos, ':') ||
        !readDigits(text, pos, 2, minute) || !expect(text, pos, ':') ||
        !readDigits(text, pos, 2, second))
        return std::nullopt;
    std::int64_t fractionNs = 0;
    if (pos < text.size() && text[pos] == '.') {
        ++pos;
        int digits = 0;
        std::int64_t scale = 100'000'000;
        while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
            fractionNs += (text[pos] - '0') * scale;
            scale /= 10;
            ++digits;
            ++pos;
        }
        if (digits == 0) return std::nullopt;
    }
    int offsetMinutes = 0;
    if (pos < text.size() && (text[pos] == 'Z' || text[pos] == 'z')) {
        ++pos;
    } else if (pos < text.size() && (text[pos] == '+' || text[pos] == '-')) {
        const int sign = text[pos] == '-' ? -1 : 1;
        ++pos;
        int offsetHours, offsetMins;
        if (!readDigits(text, pos, 2, offsetHours) || !expect(text, pos, ':') ||
            !readDigits(text, pos, 2, offsetMins) || offsetHours > 23 || offsetMins > 59)
            return std::nullopt;
        offsetMinutes = sign * (offsetHours * 60 + offsetMins);
    } else {
        return std::nullopt;
    }
    if (pos != text.size()) return std::nullopt;
    static constexpr int kDaysIn[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    const bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    if (month < 1 || month > 12 || day < 1 || day > kDaysIn[month - 1] ||
        (month == 2 && day == 29 && !leap) || hour > 23 || minute > 59 || second > 60)
        return std::nullopt;
    tm parts{};
    parts.tm_year = year - 1900;
    parts.tm_mon = month - 1;
    parts.tm_mday = day;
    parts.tm_hour = hour;
    parts.tm_min = minute;
    parts.tm_sec = second;  // a leap second (60) counts as the next second's start
    const std::int64_t seconds = static_cast<std::int64_t>(::timegm(&parts)) - offsetMinutes * 60;
    // Nanoseconds since the epoch fit an int64_t until 2262.
    if (seconds < -9'223'372'036LL || seconds > 9'223'372'035LL) {
        outOfRange = true;
        return std::nullopt;
    }
    return seconds * 1'000'000'000 + fractionNs;
}

}  // namespace splicegate::audittool
