#pragma once
// A token bucket shared by the uploads of one S3Client, so N parallel uploads together stay under
// the configured byte rate (the link to the bucket is shared with the relay's own traffic).
// Thread affinity: any thread; acquire() blocks the calling thread (a curl read callback) only.
// Error contract: none.
#include <chrono>
#include <cstddef>
#include <mutex>

namespace splicegate::s3 {

class RateLimiter {
public:
    // bytesPerSecond <= 0: unlimited. burst: bytes that may go at once after a pause.
    RateLimiter(double bytesPerSecond, double burstBytes);

    // Takes n bytes from the bucket, sleeping until the bucket has paid them back. The balance may
    // go negative (debt), so one large chunk is not starved by many small ones.
    void acquire(std::size_t n);
    // The wait acquire(n) would need at `now`, and the bucket charged as if it had happened.
    std::chrono::nanoseconds charge(std::size_t n, std::chrono::steady_clock::time_point now);

private:
    double rate_;
    double burst_;
    std::mutex mutex_;
    double tokens_;
    std::chrono::steady_clock::time_point last_;
};

}  // namespace splicegate::s3
