#include "tools/splicegate-audit/Progress.h"

#include <unistd.h>

#include <cstdio>
#include <utility>

namespace splicegate::audittool {
namespace {

constexpr auto kRedrawInterval = std::chrono::milliseconds(200);

std::string amount(std::uint64_t value, bool bytes) {
    if (!bytes) return std::to_string(value);
    char text[32];
    if (value >= (1ULL << 30))
        std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(value) / (1ULL << 30));
    else
        std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(value) / (1ULL << 20));
    return text;
}

void writeAll(const std::string& text) noexcept {
    const char* data = text.data();
    std::size_t left = text.size();
    while (left > 0) {
        const ssize_t written = ::write(STDERR_FILENO, data, left);
        if (written <= 0) return;
        data += written;
        left -= static_cast<std::size_t>(written);
    }
}

}  // namespace

Progress::Progress(std::string what, std::uint64_t total, bool bytes)
    : what_(std::move(what)),
      total_(total),
      bytes_(bytes),
      enabled_(::isatty(STDERR_FILENO) == 1),
      nextDraw_(std::chrono::steady_clock::now() + kRedrawInterval) {}

Progress::~Progress() {
    clear();
}

void Progress::advance(std::uint64_t done) noexcept {
    done_ += done;
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (now < nextDraw_) return;
    nextDraw_ = now + kRedrawInterval;
    draw();
}

void Progress::draw() noexcept {
    try {
        std::string line = "\r\x1b[K" + what_ + ": " + amount(done_, bytes_);
        if (total_ > 0) line += " of " + amount(total_, bytes_);
        writeAll(line);
        shown_ = true;
    } catch (...) {
        // decoration only
    }
}

void Progress::clear() noexcept {
    if (!shown_) return;
    writeAll("\r\x1b[K");
    shown_ = false;
}

}  // namespace splicegate::audittool
