#include <algorithm>
#include <cstdio>
#include <unordered_map>

#include "server.h"

namespace gphash::server {

namespace {
uint64_t ns_since(std::chrono::steady_clock::time_point t) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t).count());
}
}  // namespace

Scheduler::Scheduler(kv::KvStore& store, const Options& options)
    : store_(store), threshold_(options.batch_size), period_(options.batch_period) {
  slabs_ = store_.slab_stats();
  thread_ = std::thread([this] { run(); });
}

Scheduler::~Scheduler() { stop(); }

void Scheduler::submit(std::vector<Submission>& batch) {
  if (batch.empty()) return;
  size_t commands = 0;
  for (const Submission& s : batch) commands += s.request->cmds.size();
  bool wake = false;
  {
    std::lock_guard lock(mu_);
    if (queue_.empty()) {
      first_arrival_ = std::chrono::steady_clock::now();
      wake = true;  // the scheduler starts timing the period
    }
    queue_.insert(queue_.end(), batch.begin(), batch.end());
    const size_t before = queued_commands_;
    queued_commands_ += commands;
    if (before < threshold_ && queued_commands_ >= threshold_) wake = true;
  }
  batch.clear();
  if (wake) cv_.notify_one();
}

void Scheduler::stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

std::vector<kv::SlabClassStats> Scheduler::slab_snapshot() const {
  std::lock_guard lock(mu_);
  return slabs_;
}

// One round at a time: wait for work, then until the round is full (batch size) or its oldest
// request has waited the period, whichever comes first; run it; hand the results back.
void Scheduler::run() {
  std::vector<Submission> round;
  std::vector<kv::KvCommand*> cmds;
  std::unordered_map<Worker*, std::vector<Connection*>> done;
  for (;;) {
    std::chrono::steady_clock::time_point arrived;
    bool by_size = false;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left
      const auto deadline = first_arrival_ + period_;
      cv_.wait_until(lock, deadline, [&] { return stopping_ || queued_commands_ >= threshold_; });
      by_size = queued_commands_ >= threshold_;
      round.swap(queue_);  // Mega-KV's buffer swap: the workers fill a fresh queue meanwhile
      queued_commands_ = 0;
      arrived = first_arrival_;
    }
    const auto start = std::chrono::steady_clock::now();
    cmds.clear();
    for (const Submission& s : round)
      for (kv::KvCommand& c : s.request->cmds) cmds.push_back(&c);
    store_.execute(cmds);
    {
      std::lock_guard lock(mu_);
      slabs_ = store_.slab_stats();
    }
    for (const Submission& s : round) {
      s.request->done.store(true, std::memory_order_release);
      done[s.worker].push_back(s.conn);
    }
    for (auto& [worker, conns] : done) {
      if (conns.empty()) continue;
      worker->complete(conns);
      conns.clear();
    }
    stats_.rounds++;
    stats_.commands += cmds.size();
    (by_size ? stats_.by_size : stats_.by_period)++;
    stats_.wait_ns += static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(start - arrived).count());
    stats_.round_ns += ns_since(start);
    if (cmds.size() > stats_.max_round) stats_.max_round = cmds.size();
    round.clear();
  }
}

}  // namespace gphash::server
