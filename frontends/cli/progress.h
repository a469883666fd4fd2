// A one-line progress display on stderr, shown only when stderr is a terminal.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace gphash::cli {

class Progress {
 public:
  Progress(std::string label, bool enabled) : label_(std::move(label)), enabled_(enabled && isatty(2)) {}
  ~Progress() { finish(); }

  void update(uint64_t done, uint64_t total) {
    if (!enabled_) return;
    auto now = std::chrono::steady_clock::now();
    if (now - last_ < std::chrono::milliseconds(200) && done < total) return;
    last_ = now;
    double secs = std::chrono::duration<double>(now - start_).count();
    std::fprintf(stderr, "\r\033[K%s %llu/%llu (%.0f%%) %.2f M ops/s", label_.c_str(),
                 static_cast<unsigned long long>(done), static_cast<unsigned long long>(total),
                 total ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100.0,
                 secs > 0 ? static_cast<double>(done) / secs / 1e6 : 0.0);
    std::fflush(stderr);
    shown_ = true;
  }
  void finish() {
    if (shown_) std::fprintf(stderr, "\r\033[K");
    shown_ = false;
  }

 private:
  std::string label_;
  bool enabled_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace gphash::cli
