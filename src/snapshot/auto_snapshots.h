// Automatic snapshots: a background thread that calls a snapshot function every N seconds and
// after every N writing batches, one snapshot at a time, never on a batch's own thread (a batch
// that reaches the count only wakes the thread).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

namespace gphash::snapshot {

class AutoSnapshots {
 public:
  // `take` must not throw (it records its own failures); `every_seconds` 0 means not by time,
  // `every_batches` 0 not by count.
  AutoSnapshots(std::function<void()> take, double every_seconds, uint64_t every_batches);
  ~AutoSnapshots();  // stop()
  AutoSnapshots(const AutoSnapshots&) = delete;
  AutoSnapshots& operator=(const AutoSnapshots&) = delete;

  // Called after each writing batch: an atomic increment, and a wake-up when the count is reached.
  void writing_batch_done() {
    if (every_batches_ != 0 && batches_.fetch_add(1, std::memory_order_relaxed) + 1 == every_batches_) wake();
  }
  // Lets a snapshot in progress finish, then ends the thread. Idempotent.
  void stop();

 private:
  void wake();
  void loop();

  std::function<void()> take_;
  std::chrono::steady_clock::duration every_;
  uint64_t every_batches_;
  std::atomic<uint64_t> batches_{0};  // writing batches since the last snapshot began
  std::mutex mutex_;
  std::condition_variable cv_;
  bool due_ = false, stopping_ = false;
  std::thread thread_;
};

}  // namespace gphash::snapshot
