#include "archive/Gzip.h"

#include <zlib.h>

#include <stdexcept>

namespace splicegate::archive {

std::string gzip(const std::string& bytes) {
    z_stream stream{};
    // 15 window bits + 16: a gzip header and trailer instead of zlib's.
    if (deflateInit2(&stream, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        throw std::runtime_error("gzip: deflateInit2 failed");
    std::string out(deflateBound(&stream, static_cast<uLong>(bytes.size())), '\0');
    stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
    stream.avail_in = static_cast<uInt>(bytes.size());
    stream.next_out = reinterpret_cast<Bytef*>(out.data());
    stream.avail_out = static_cast<uInt>(out.size());
    int rc = deflate(&stream, Z_FINISH);
    out.resize(stream.total_out);
    deflateEnd(&stream);
    if (rc != Z_STREAM_END) throw std::runtime_error("gzip: deflate did not finish");
    return out;
}

std::string gunzip(const std::string& bytes, const std::string& origin, std::size_t maxBytes) {
    z_stream stream{};
    // 15 window bits + 16: a gzip header and trailer expected.
    if (inflateInit2(&stream, 16 + MAX_WBITS) != Z_OK)
        throw std::runtime_error(origin + ": cannot start zlib");
    stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
    stream.avail_in = static_cast<uInt>(bytes.size());
    std::string out;
    char buffer[65536];
    int rc = Z_OK;
    while (rc == Z_OK) {
        stream.next_out = reinterpret_cast<Bytef*>(buffer);
        stream.avail_out = sizeof buffer;
        rc = inflate(&stream, Z_NO_FLUSH);
        out.append(buffer, sizeof buffer - stream.avail_out);
        if (out.size() > maxBytes) rc = Z_MEM_ERROR;
    }
    inflateEnd(&stream);
    if (rc != Z_STREAM_END)
        throw std::runtime_error(origin + ": not a complete gzip stream (zlib " +
                                 std::to_string(rc) + ")");
    return out;
}

}  // namespace splicegate::archive
