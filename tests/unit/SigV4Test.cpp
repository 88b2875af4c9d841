// The SigV4 signer (archive/s3/SigV4.h) against AWS's published test vectors: the
// aws-sig-v4-test-suite as shipped in awslabs/aws-c-auth tests/aws-signing-test-suite/v4/<name>/
// (request.txt, header-canonical-request.txt, header-string-to-sign.txt, header-signature.txt;
// credentials AKIDEXAMPLE, region us-east-1, service "service", 2015-08-30T12:36:00Z), and the
// S3 example of the S3 API reference ("Signature Calculations for the Authorization Header",
// GET /test.txt with Range). Each vector's input is written here; the expected texts are copied
// from the suite's files.
#include <gtest/gtest.h>

#include <string>

#include "archive/s3/SigV4.h"

namespace splicegate::s3 {
namespace {

constexpr const char* kAccess = "AKIDEXAMPLE";
constexpr const char* kSecret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
const SigningScope kSuiteScope{"20150830T123600Z", "us-east-1", "service"};

struct Vector {
    const char* name;
    SigningInput input;
    const char* canonicalRequest;
    const char* stringToSign;
    const char* signature;
};

SigningInput request(std::string method, std::string path, Pairs query, Pairs extraHeaders = {},
                     std::string payloadHash = std::string(kEmptySha256)) {
    Pairs headers = {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", "20150830T123600Z"}};
    headers.insert(headers.end(), extraHeaders.begin(), extraHeaders.end());
    return {std::move(method), std::move(path), std::move(query), std::move(headers), std::move(payloadHash)};
}

std::vector<Vector> suite() {
    return {
        {"get-vanilla", request("GET", "/", {}),
         "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n"
         "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
         "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
         "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63",
         "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"},
        {"get-vanilla-query-order-key-case", request("GET", "/", {{"Param2", "value2"}, {"Param1", "value1"}}),
         "GET\n/\nParam1=value1&Param2=value2\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
         "host;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
         "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
         "816cd5b414d056048ba4f7c5386d6e0533120fb1fcfa93762cf0fc39e2cf19e0",
         "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"},
        {"get-vanilla-empty-query-key", request("GET", "/", {{"Param1", "value1"}}),
         "GET\n/\nParam1=value1\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
         "host;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
         "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
         "1e24db194ed7d0eec2de28d7369675a243488e08526e8c1c73571282f7c517ab",
         "a67d582fa61cc504c4bae71f336f98b97f1ea3c7a6bfe1b6e45aec72011b9aeb"},
        {"get-vanilla-query-unreserved",
         request("GET", "/", {{"-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
                               "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"}}),
         "GET\n/\n-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz="
         "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz\n"
         "host:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n"
         "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
         "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
         "c30d4703d9f799439be92736156d47ccfb2d879ddf56f5befa6d1d6aab979177",
         "9c3e54bfcdf0b19771a7f523ee5669cdf59bc7cc0884027167c21bb143a40197"},
        {"get-vanilla-utf8-query", request("GET", "/", {{"\xE1\x88\xB4", "bar"}}),
         "GET\n/\n%E1%88%B4=bar\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
         "host;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
         "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
         "eb30c5bed55734080471a834cc727ae56beb50e5f39d1bff6d0d38cb192a7073",
         "2cdec8eed098649ff3a119c94853b13c643bcf08f8b0a1d91e12c9027818dd04"},
        {"get-utf8", request("GET", "/\xE1\x88\xB4", {}),
         "GET\n/%E1%88%B4\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
         "host;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
         "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
         "2a0a97d02205e45ce2e994789806b19270cfbbb0921b278ccf58f5249ac42102",
         "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85"},
        // S3 semantics are the unnormalised ones: the path is encoded, never collapsed.
        {"get-space-unnormalized", request("GET", "/example space/", {}),
         "GET\n/example%20space/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
         "host;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
         "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
         "63ee75631ed7234ae61b5f736dfc7754cdccfedbff4b5128a915706ee9390d86",
         "652487583200325589f1fba4c7e578f72c47cb61beeca81406b39ddec1366741"},
        {"post-vanilla-query", request("POST", "/", {{"Param1", "value1"}}),
         "POST\n/\nParam1=value1\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
         "host;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
         nullptr, "28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11"},
        {"post-header-key-sort", request("POST", "/", {}, {{"My-Header1", "value1"}}),
         "POST\n/\n\nhost:example.amazonaws.com\nmy-header1:value1\nx-amz-date:20150830T123600Z\n\n"
         "host;my-header1;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
         "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
         "9368318c2967cf6de74404b30c65a91e8f6253e0a8659d6d5319f1a812f87d65",
         "c5410059b04c1ee005303aed430f6e6645f61f4dc9e1461ec8f8916fdf18852c"},
        // sign_body: the body "Param1=value1" is hashed into x-amz-content-sha256.
        {"post-x-www-form-urlencoded",
         request("POST", "/", {},
                 {{"Content-Type", "application/x-www-form-urlencoded"}, {"Content-Length", "13"},
                  {"x-amz-content-sha256", sha256Hex("Param1=value1")}},
                 sha256Hex("Param1=value1")),
         "POST\n/\n\ncontent-length:13\ncontent-type:application/x-www-form-urlencoded\n"
         "host:example.amazonaws.com\n"
         "x-amz-content-sha256:9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e\n"
         "x-amz-date:20150830T123600Z\n\ncontent-length;content-type;host;x-amz-content-sha256;x-amz-date\n"
         "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e",
         "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
         "b1edd1d03544c25390e32085d55b57acc9a3961bb59415ff86c45c3d89d16cfb",
         "d3875051da38690788ef43de4db0d8f280229d82040bfac253562e56c3f20e0b"},
    };
}

TEST(SigV4Test, AwsTestSuiteVectors) {
    for (const auto& v : suite()) {
        SCOPED_TRACE(v.name);
        Signature s = sign(v.input, kSuiteScope, kAccess, kSecret);
        EXPECT_EQ(s.canonicalRequest, v.canonicalRequest);
        if (v.stringToSign != nullptr) {
            EXPECT_EQ(s.stringToSign, v.stringToSign);
        }
        EXPECT_EQ(s.signature, v.signature);
    }
}

TEST(SigV4Test, AuthorizationHeaderOfGetVanilla) {
    Signature s = sign(suite()[0].input, kSuiteScope, kAccess, kSecret);
    EXPECT_EQ(s.authorization,
              "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
              "SignedHeaders=host;x-amz-date, "
              "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
}

// The S3 API reference's GET Object example: examplebucket, Range bytes=0-9, empty payload.
TEST(SigV4Test, S3GetObjectExample) {
    SigningInput input{"GET", "/test.txt", {},
                       {{"Host", "examplebucket.s3.amazonaws.com"}, {"Range", "bytes=0-9"},
                        {"x-amz-content-sha256", std::string(kEmptySha256)},
                        {"x-amz-date", "20130524T000000Z"}},
                       std::string(kEmptySha256)};
    Signature s = sign(input, {"20130524T000000Z", "us-east-1", "s3"}, "AKIAIOSFODNN7EXAMPLE",
                       "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY");
    EXPECT_EQ(s.canonicalRequest,
              "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
              "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
              "x-amz-date:20130524T000000Z\n\nhost;range;x-amz-content-sha256;x-amz-date\n"
              "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(s.stringToSign,
              "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
              "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
    EXPECT_EQ(s.signature, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
    EXPECT_EQ(s.authorization,
              "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
              "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
              "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST(SigV4Test, EmptyQueryValuesKeepTheirEqualsSign) {
    EXPECT_EQ(canonicalQuery({{"versionId", "v1"}, {"retention", ""}}), "retention=&versionId=v1");
    EXPECT_EQ(canonicalQuery({{"prefix", "a b/c"}}), "prefix=a%20b%2Fc");
    // Sorted by encoded name, then value (byte order: upper case before lower case).
    EXPECT_EQ(canonicalQuery({{"b", "2"}, {"a", "2"}, {"a", "1"}, {"B", "0"}}), "B=0&a=1&a=2&b=2");
}

TEST(SigV4Test, PathSegmentsAreEncodedOnceAndNotNormalised) {
    EXPECT_EQ(canonicalPath("/bucket/a b/./c/../d"), "/bucket/a%20b/./c/../d");
    EXPECT_EQ(canonicalPath("/bucket/pct%41+x=y&z"), "/bucket/pct%2541%2Bx%3Dy%26z");
    EXPECT_EQ(canonicalPath("/bucket//double"), "/bucket//double");
    EXPECT_EQ(canonicalPath(""), "/");
}

TEST(SigV4Test, HeaderValuesAreTrimmedFoldedAndRepeatsJoined) {
    auto [block, names] = canonicalHeaders({{"X-B", "  two   words  "}, {"x-a", "1"}, {"X-A", "2"}});
    EXPECT_EQ(block, "x-a:1,2\nx-b:two words\n");
    EXPECT_EQ(names, "x-a;x-b");
}

TEST(SigV4Test, DigestsAndDates) {
    EXPECT_EQ(sha256Hex(""), kEmptySha256);
    EXPECT_EQ(base64(md5("")), "1B2M2Y8AsgTpgAmY7PhCfg==");
    EXPECT_EQ(amzDate(1440938160), "20150830T123600Z");
}

}  // namespace
}  // namespace splicegate::s3
