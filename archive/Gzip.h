#pragma once
// gzip (RFC 1952) of the archive's connections objects, both ways: the archiver writes them, the
// audit tool and the benchmarks read them.
// Thread affinity: none (pure functions). Error contract: std::runtime_error, naming `origin`
// for what cannot be unzipped.
#include <cstddef>
#include <string>

namespace splicegate::archive {

std::string gzip(const std::string& bytes);

// `bytes` as one complete gzip stream, unzipped; more than `maxBytes` of output is an error (a
// zip bomb in a bucket must not take the reader's memory).
std::string gunzip(const std::string& bytes, const std::string& origin, std::size_t maxBytes);

}  // namespace splicegate::archive
