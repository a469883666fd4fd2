// A statistics counter that one thread at a time writes and any thread reads.
#pragma once

#include <atomic>
#include <cstdint>

namespace gphash::kv {

// The thread running a partition's rounds is its counters' only writer (rounds never overlap: the
// scheduler's lock hands them from thread to thread), so an update is a plain load and store, not
// a locked read-modify-write: a round of one get made about a dozen of those. Readers (`stats`)
// see a recent value, as with WorkerCounters.
class Counter {
 public:
  uint64_t load() const { return value_.load(std::memory_order_relaxed); }
  operator uint64_t() const { return load(); }
  Counter& operator=(uint64_t v) {
    value_.store(v, std::memory_order_relaxed);
    return *this;
  }
  Counter& operator+=(uint64_t n) { return *this = load() + n; }
  Counter& operator-=(uint64_t n) { return *this = load() - n; }
  void operator++(int) { *this += 1; }
  void operator--(int) { *this -= 1; }

 private:
  std::atomic<uint64_t> value_{0};
};

}  // namespace gphash::kv
