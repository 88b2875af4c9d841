#include "archive/s3/RateLimiter.h"

#include <algorithm>
#include <thread>

namespace splicegate::s3 {

RateLimiter::RateLimiter(double bytesPerSecond, double burstBytes)
    : rate_(bytesPerSecond), burst_(burstBytes), tokens_(burstBytes),
      last_(std::chrono::steady_clock::now()) {}

std::chrono::nanoseconds RateLimiter::charge(std::size_t n, std::chrono::steady_clock::time_point now) {
    if (rate_ <= 0) return {};
    std::lock_guard lock(mutex_);
    if (now > last_) {
        double elapsed = std::chrono::duration<double>(now - last_).count();
        tokens_ = std::min(burst_, tokens_ + elapsed * rate_);
        last_ = now;
    }
    tokens_ -= static_cast<double>(n);
    if (tokens_ >= 0) return {};
    return std::chrono::nanoseconds(static_cast<long long>(-tokens_ / rate_ * 1e9));
}

void RateLimiter::acquire(std::size_t n) {
    auto wait = charge(n, std::chrono::steady_clock::now());
    if (wait.count() > 0) std::this_thread::sleep_for(wait);
}

}  // namespace splicegate::s3
