#include "snapshot/auto_snapshots.h"

namespace gphash::snapshot {

AutoSnapshots::AutoSnapshots(std::function<void()> take, double every_seconds, uint64_t every_batches)
    : take_(std::move(take)),
      every_(every_seconds > 0 ? std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                     std::chrono::duration<double>(every_seconds))
                               : std::chrono::steady_clock::duration::max()),
      every_batches_(every_batches),
      thread_([this] { loop(); }) {}

AutoSnapshots::~AutoSnapshots() { stop(); }

void AutoSnapshots::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void AutoSnapshots::wake() {
  {
    std::lock_guard lock(mutex_);
    due_ = true;
  }
  cv_.notify_all();
}

void AutoSnapshots::loop() {
  using Clock = std::chrono::steady_clock;
  std::unique_lock lock(mutex_);
  auto next = every_ == Clock::duration::max() ? Clock::time_point::max() : Clock::now() + every_;
  for (;;) {
    auto ready = [&] { return stopping_ || due_ || Clock::now() >= next; };
    if (next == Clock::time_point::max())
      cv_.wait(lock, ready);
    else
      cv_.wait_until(lock, next, ready);
    if (stopping_) return;
    due_ = false;
    batches_.store(0, std::memory_order_relaxed);
    if (every_ != Clock::duration::max()) next = Clock::now() + every_;
    lock.unlock();
    take_();
    lock.lock();  // batches that reached the count meanwhile have set due_: the next one starts at once
  }
}

}  // namespace gphash::snapshot
