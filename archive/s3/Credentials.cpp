#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "archive/s3/S3Client.h"

namespace splicegate::s3 {
namespace {

std::string trim(std::string_view s) {
    auto first = s.find_first_not_of(" \t\r");
    if (first == std::string_view::npos) return {};
    auto last = s.find_last_not_of(" \t\r");
    return std::string(s.substr(first, last - first + 1));
}

}  // namespace

Credentials parseCredentials(std::string_view text, const std::string& path) {
    Credentials out;
    std::string section;
    std::istringstream lines{std::string(text)};
    for (std::string raw; std::getline(lines, raw);) {
        std::string line = trim(raw);
        if (line.empty() || line[0] == '#' || line[0] == ';') continue;
        if (line.front() == '[' && line.back() == ']') {
            section = trim(std::string_view(line).substr(1, line.size() - 2));
            continue;
        }
        auto eq = line.find('=');
        if (section != "default" || eq == std::string::npos) continue;
        std::string name = trim(std::string_view(line).substr(0, eq));
        std::string value = trim(std::string_view(line).substr(eq + 1));
        if (name == "aws_access_key_id") out.accessKeyId = value;
        else if (name == "aws_secret_access_key") out.secretAccessKey = value;
    }
    if (out.accessKeyId.empty() || out.secretAccessKey.empty())
        throw std::runtime_error("S3 credentials file " + path +
                                 ": no [default] profile with aws_access_key_id and aws_secret_access_key");
    return out;
}

Credentials loadCredentials(const std::string& path) {
    if (path.empty()) {
        const char* id = std::getenv("AWS_ACCESS_KEY_ID");
        const char* secret = std::getenv("AWS_SECRET_ACCESS_KEY");
        if (id == nullptr || *id == '\0' || secret == nullptr || *secret == '\0')
            throw std::runtime_error(
                "S3 credentials: no file given and AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY are not set");
        return {id, secret};
    }
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0)
        throw std::runtime_error("S3 credentials file " + path + ": " + std::strerror(errno));
    if (!S_ISREG(st.st_mode))
        throw std::runtime_error("S3 credentials file " + path + " is not a regular file");
    // A secret others can read is no longer a secret: refuse rather than warn.
    auto mode = st.st_mode & 07777;
    if (mode != 0600 && mode != 0400) {
        char octal[8];
        std::snprintf(octal, sizeof octal, "%04o", static_cast<unsigned>(mode));
        throw std::runtime_error("S3 credentials file " + path + " has mode " + octal +
                                 "; it must be 0600 or 0400");
    }
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    if (!in && !in.eof())
        throw std::runtime_error("S3 credentials file " + path + ": cannot be read");
    return parseCredentials(text.str(), path);
}

}  // namespace splicegate::s3
