#include "archive/s3/SigV4.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cctype>
#include <ctime>
#include <stdexcept>

namespace splicegate::s3 {
namespace {

bool unreserved(unsigned char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.' || c == '~';
}

std::string lower(std::string_view s) {
    std::string out(s);
    std::transform(out.begin(), out.end(), out.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return out;
}

// SigV4 wants header values trimmed and runs of spaces inside folded to one.
std::string foldSpaces(std::string_view value) {
    std::string out;
    bool space = false;
    for (char c : value) {
        if (c == ' ' || c == '\t') {
            space = true;
            continue;
        }
        if (space && !out.empty()) out += ' ';
        space = false;
        out += c;
    }
    return out;
}

std::string digest(const char* name, std::string_view data) {
    unsigned char out[EVP_MAX_MD_SIZE];
    unsigned int size = 0;
    if (::EVP_Digest(data.data(), data.size(), out, &size, ::EVP_get_digestbyname(name), nullptr) != 1)
        throw std::runtime_error(std::string("OpenSSL ") + name + " failed");
    return std::string(reinterpret_cast<char*>(out), size);
}

}  // namespace

std::string uriEncode(std::string_view raw, bool keepSlash) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    std::string out;
    out.reserve(raw.size());
    for (unsigned char c : raw) {
        if (unreserved(c) || (keepSlash && c == '/')) {
            out += static_cast<char>(c);
        } else {
            out += '%';
            out += kHex[c >> 4];
            out += kHex[c & 0xF];
        }
    }
    return out;
}

std::string canonicalPath(std::string_view rawPath) {
    if (rawPath.empty()) return "/";
    return uriEncode(rawPath, true);
}

std::string canonicalQuery(const Pairs& rawQuery) {
    std::vector<std::pair<std::string, std::string>> encoded;
    encoded.reserve(rawQuery.size());
    for (const auto& [name, value] : rawQuery)
        encoded.emplace_back(uriEncode(name, false), uriEncode(value, false));
    std::sort(encoded.begin(), encoded.end());
    std::string out;
    for (const auto& [name, value] : encoded) {
        if (!out.empty()) out += '&';
        out += name;
        out += '=';
        out += value;
    }
    return out;
}

std::pair<std::string, std::string> canonicalHeaders(const Pairs& headers) {
    std::vector<std::pair<std::string, std::string>> sorted;
    for (const auto& [name, value] : headers) sorted.emplace_back(lower(foldSpaces(name)), foldSpaces(value));
    // Stable: repeated names keep the order they were given in, which is the order of their values.
    std::stable_sort(sorted.begin(), sorted.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    std::string block, names;
    for (std::size_t i = 0; i < sorted.size(); ++i) {
        if (i > 0 && sorted[i].first == sorted[i - 1].first) {
            block.pop_back();   // the '\n'
            block += ',' + sorted[i].second + '\n';
            continue;
        }
        block += sorted[i].first + ':' + sorted[i].second + '\n';
        if (!names.empty()) names += ';';
        names += sorted[i].first;
    }
    return {block, names};
}

std::string canonicalRequest(const SigningInput& input) {
    auto [block, names] = canonicalHeaders(input.headers);
    return input.method + '\n' + canonicalPath(input.path) + '\n' + canonicalQuery(input.query) +
           '\n' + block + '\n' + names + '\n' + input.payloadHash;
}

std::string credentialScope(const SigningScope& scope) {
    return scope.amzDate.substr(0, 8) + '/' + scope.region + '/' + scope.service + "/aws4_request";
}

std::string stringToSign(const SigningScope& scope, std::string_view canonical) {
    return "AWS4-HMAC-SHA256\n" + scope.amzDate + '\n' + credentialScope(scope) + '\n' +
           sha256Hex(canonical);
}

std::string signingKey(std::string_view secretAccessKey, const SigningScope& scope) {
    std::string key = hmacSha256("AWS4" + std::string(secretAccessKey), scope.amzDate.substr(0, 8));
    key = hmacSha256(key, scope.region);
    key = hmacSha256(key, scope.service);
    return hmacSha256(key, "aws4_request");
}

Signature sign(const SigningInput& input, const SigningScope& scope, std::string_view accessKeyId,
               std::string_view secretAccessKey) {
    Signature out;
    out.canonicalRequest = canonicalRequest(input);
    out.stringToSign = stringToSign(scope, out.canonicalRequest);
    out.signature = hex(hmacSha256(signingKey(secretAccessKey, scope), out.stringToSign));
    out.signedHeaders = canonicalHeaders(input.headers).second;
    out.authorization = "AWS4-HMAC-SHA256 Credential=" + std::string(accessKeyId) + '/' +
                        credentialScope(scope) + ", SignedHeaders=" + out.signedHeaders +
                        ", Signature=" + out.signature;
    return out;
}

std::string sha256(std::string_view data) {
    return digest("SHA256", data);
}

std::string sha256Hex(std::string_view data) {
    return hex(sha256(data));
}

std::string md5(std::string_view data) {
    return digest("MD5", data);
}

std::string hmacSha256(std::string_view key, std::string_view data) {
    unsigned char out[EVP_MAX_MD_SIZE];
    std::size_t size = 0;
    if (::EVP_Q_mac(nullptr, "HMAC", nullptr, "SHA256", nullptr, key.data(), key.size(),
                    reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, sizeof out,
                    &size) == nullptr)
        throw std::runtime_error("OpenSSL HMAC-SHA256 failed");
    return std::string(reinterpret_cast<char*>(out), size);
}

std::string hex(std::string_view bytes) {
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out;
    out.reserve(bytes.size() * 2);
    for (unsigned char c : bytes) {
        out += kHex[c >> 4];
        out += kHex[c & 0xF];
    }
    return out;
}

std::string base64(std::string_view bytes) {
    std::string out(4 * ((bytes.size() + 2) / 3), '\0');
    int n = ::EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                              reinterpret_cast<const unsigned char*>(bytes.data()),
                              static_cast<int>(bytes.size()));
    out.resize(static_cast<std::size_t>(n));
    return out;
}

std::string amzDate(std::int64_t unixSeconds) {
    std::time_t t = static_cast<std::time_t>(unixSeconds);
    std::tm tm{};
    ::gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
    return buf;
}

}  // namespace splicegate::s3
