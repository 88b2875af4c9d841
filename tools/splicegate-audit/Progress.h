#pragma once
// Progress of a long run on stderr, only when stderr is a terminal (isatty): one line rewritten
// in place at most every 200 ms ("export: 1.2 GiB of 3.4 GiB"), erased when done, so scripts and
// logs never see it and errors still print on a clean line.
// Thread affinity: one thread. Error contract: nothing throws; write errors are ignored (it is
// decoration only).
#include <chrono>
#include <cstdint>
#include <string>

namespace splicegate::audittool {

class Progress {
  public:
    // `total` in `unit`s of work ("segments", "bytes"); 0 = unknown.
    Progress(std::string what, std::uint64_t total, bool bytes);
    ~Progress();
    Progress(const Progress&) = delete;
    Progress& operator=(const Progress&) = delete;

    void advance(std::uint64_t done) noexcept;
    // Erases the line (before an error message or at the end).
    void clear() noexcept;

  private:
    void draw() noexcept;

    std::string what_;
    std::uint64_t total_;
    bool bytes_;
    bool enabled_;
    bool shown_ = false;
    std::uint64_t done_ = 0;
    std::chrono::steady_clock::time_point nextDraw_;
};

}  // namespace splicegate::audittool
