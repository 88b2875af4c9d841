// splicegate-bench-s3-bucket: creates a versioned bucket with Object Lock and a default
// COMPLIANCE retention, for tools/bench/archive.sh (the archiver itself never creates buckets).
//   splicegate-bench-s3-bucket --endpoint URL --credentials FILE --bucket NAME [--lock-days N]
// Exit status: 0 created, 1 the server refused, 2 usage error.
#include <boost/program_options.hpp>
#include <iostream>

#include "archive/s3/S3Client.h"

namespace po = boost::program_options;

int main(int argc, char** argv) {
    std::string endpoint, credentials, bucket;
    unsigned lockDays = 1;
    po::options_description options("options");
    options.add_options()("endpoint", po::value(&endpoint)->required(), "http(s)://HOST:PORT")(
        "credentials", po::value(&credentials)->required(), "AWS shared-credentials file")(
        "bucket", po::value(&bucket)->required(), "bucket to create")(
        "lock-days", po::value(&lockDays)->default_value(1), "default COMPLIANCE retention");
    try {
        po::variables_map values;
        po::store(po::parse_command_line(argc, argv, options), values);
        po::notify(values);
    } catch (const po::error& e) {
        std::cerr << "splicegate-bench-s3-bucket: " << e.what() << "\n";
        return 2;
    }
    try {
        splicegate::s3::ClientOptions client;
        client.endpoint = endpoint;
        splicegate::s3::S3Client s3(client, splicegate::s3::loadCredentials(credentials));
        auto created = s3.createBucket(bucket, true);
        if (!created) {
            std::cerr << "splicegate-bench-s3-bucket: " << created.error.message << "\n";
            return 1;
        }
        auto retention = s3.putDefaultRetention(bucket, "COMPLIANCE", lockDays);
        if (!retention) {
            std::cerr << "splicegate-bench-s3-bucket: " << retention.error.message << "\n";
            return 1;
        }
    } catch (const std::exception& e) {
        std::cerr << "splicegate-bench-s3-bucket: " << e.what() << "\n";
        return 2;
    }
    return 0;
}
