#pragma once
// The S3 server of the s3_server fixture (tests/s3/radosgw.sh, docs/s3-test-server.md), as the
// s3 tests reach it: CTest names its directory in SPLICEGATE_S3_SERVER_DIR, which holds the
// endpoint's URL and a credentials file in AWS's format.
#include <cstdlib>
#include <fstream>
#include <string>

namespace splicegate::test {

// Empty when the test runs outside the fixture.
inline std::string s3ServerDir() {
    const char* dir = std::getenv("SPLICEGATE_S3_SERVER_DIR");
    return dir != nullptr ? dir : "";
}

inline std::string firstLineOf(const std::string& path) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    return line;
}

inline std::string s3Endpoint() { return firstLineOf(s3ServerDir() + "/endpoint"); }

// The same gateway over TLS, with a certificate for 127.0.0.1 signed by s3CaFile().
inline std::string s3HttpsEndpoint() { return firstLineOf(s3ServerDir() + "/https-endpoint"); }
inline std::string s3CaFile() { return s3ServerDir() + "/ca.pem"; }

inline std::string s3CredentialsFile() { return s3ServerDir() + "/credentials"; }

}  // namespace splicegate::test
