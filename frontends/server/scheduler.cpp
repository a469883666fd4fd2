#include <algorithm>
#include <cstdio>
#include <unordered_map>

#include "server.h"

namespace gphash::server {

namespace {
uint64_t ns_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count());
}
}  // namespace

Scheduler::Scheduler(kv::KvStore& store, const Options& options)
    : store_(store), threshold_(options.batch_size), period_(options.batch_period) {
  slabs_ = store_.slab_stats();
  thread_ = std::thread([this] { run(); });
}

Scheduler::~Scheduler() { stop(); }

// Whether the pending requests make a round now: enough of them, or the oldest waited long enough.
bool Scheduler::due(std::chrono::steady_clock::time_point now) const {
  return !queue_.empty() && (queued_commands_ >= threshold_ || now - first_arrival_ >= period_);
}

void Scheduler::submit(std::vector<Submission>& batch, std::vector<Connection*>& own_done) {
  if (batch.empty()) return;
  Worker* self = batch.front().worker;
  size_t commands = 0;
  for (const Submission& s : batch) commands += s.request->cmds.size();
  std::unique_lock lock(mu_);
  if (queue_.empty()) first_arrival_ = std::chrono::steady_clock::now();
  queue_.insert(queue_.end(), batch.begin(), batch.end());
  queued_commands_ += commands;
  batch.clear();
  if (!running_ && due(std::chrono::steady_clock::now())) {
    // The round is due and nobody runs one: this receiver runs it, with no handoff.
    drain(lock, self, own_done);
  } else if (!running_) {
    cv_.notify_one();  // the scheduler thread times the period
  }
}

void Scheduler::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::vector<kv::SlabClassStats> Scheduler::slab_snapshot() const {
  std::lock_guard lock(slab_mu_);
  return slabs_;
}

// The scheduler thread: when requests wait and no receiver is running a round, it runs the round
// once the batch size or the period is reached, whichever comes first.
void Scheduler::run() {
  std::vector<Connection*> none;
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || (!queue_.empty() && !running_); });
    if (stopping_ && queue_.empty() && !running_) return;
    if (running_) continue;
    cv_.wait_until(lock, first_arrival_ + period_, [&] { return stopping_ || running_ || queued_commands_ >= threshold_; });
    if (running_ || queue_.empty()) continue;
    drain(lock, nullptr, none);
  }
}

// Runs rounds while they are due (called with the lock held; returns with it held). Results for
// `self`'s connections go to `own_done`, the others' to their workers.
void Scheduler::drain(std::unique_lock<std::mutex>& lock, Worker* self, std::vector<Connection*>& own_done) {
  running_ = true;
  while (due(std::chrono::steady_clock::now()) || (stopping_ && !queue_.empty())) {
    const bool by_size = queued_commands_ >= threshold_;
    const auto arrived = first_arrival_;
    round_.swap(queue_);  // Mega-KV's buffer swap: receivers fill a fresh queue meanwhile
    queued_commands_ = 0;
    lock.unlock();
    const auto start = std::chrono::steady_clock::now();
    execute_round(self, own_done);
    stats_.rounds++;
    (by_size ? stats_.by_size : stats_.by_period)++;
    stats_.wait_ns += ns_between(arrived, start);
    stats_.round_ns += ns_between(start, std::chrono::steady_clock::now());
    lock.lock();
  }
  running_ = false;
  if (!queue_.empty()) cv_.notify_one();
}

void Scheduler::execute_round(Worker* self, std::vector<Connection*>& own_done) {
  cmds_.clear();
  for (const Submission& s : round_)
    for (kv::KvCommand& c : s.request->cmds) cmds_.push_back(&c);
  store_.execute(cmds_);
  {
    std::lock_guard lock(slab_mu_);
    slabs_ = store_.slab_stats();
  }
  for (const Submission& s : round_) {
    s.request->done.store(true, std::memory_order_release);
    if (s.worker == self) own_done.push_back(s.conn);
    else done_[s.worker].push_back(s.conn);
  }
  for (auto& [worker, conns] : done_) {
    if (conns.empty()) continue;
    worker->complete(conns);
    conns.clear();
  }
  stats_.commands += cmds_.size();
  if (cmds_.size() > stats_.max_round) stats_.max_round = cmds_.size();
  round_.clear();
}

}  // namespace gphash::server
