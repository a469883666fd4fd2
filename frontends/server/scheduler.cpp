#include <algorithm>
#include <cstdio>

#include "kv/tick_clock.h"
#include "server.h"

namespace gphash::server {

using kv::TickClock;

Scheduler::Scheduler(kv::KvStore& store, const Options& options, uint16_t partition)
    : store_(store),
      partition_(partition),
      threshold_(options.batch_size),
      period_(options.batch_period),
      extra_rounds_(options.receiver_rounds >= 0 ? options.receiver_rounds : store.pipelined() ? 0 : 4) {
  thread_ = std::thread([this] { run(); });
}

Scheduler::~Scheduler() { stop(); }

// Whether the pending requests make a round now: enough of them, or the oldest waited long enough
// (with no period, at once: the clock is not read).
bool Scheduler::due() const {
  if (queue_.empty()) return false;
  return queued_commands_ >= threshold_ || period_.count() == 0 || std::chrono::steady_clock::now() - first_arrival_ >= period_;
}

void Scheduler::submit(std::vector<Submission>& batch, std::vector<Connection*>& own_done) {
  if (batch.empty()) return;
  Worker* self = batch.front().worker;
  size_t commands = 0;
  for (const Submission& s : batch) commands += s.commands;
  std::unique_lock lock(mu_);
  if (queue_.empty()) {
    if (period_.count() > 0) first_arrival_ = std::chrono::steady_clock::now();
    first_arrival_ticks_ = TickClock::now();
  }
  queue_.insert(queue_.end(), batch.begin(), batch.end());
  queued_commands_ += commands;
  batch.clear();
  if (!running_ && due()) {
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

// Between rounds: a round holds store_mu_ while it changes the store.
std::vector<kv::SlabClassStats> Scheduler::slab_snapshot() const {
  std::lock_guard lock(store_mu_);
  return store_.slab_stats();
}

// The scheduler thread: when requests wait and no receiver is running a round, it runs the round
// once the batch size or the period is reached, whichever comes first; and it writes at once the
// index changes a receiver's round left behind (drain).
void Scheduler::run() {
  std::vector<Connection*> none;
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || (!running_ && (!queue_.empty() || unfinished_)); });
    if (stopping_ && queue_.empty() && !unfinished_ && !running_) return;
    if (running_) continue;
    if (!unfinished_) {
      cv_.wait_until(lock, first_arrival_ + period_, [&] { return stopping_ || running_ || queued_commands_ >= threshold_; });
      if (running_ || queue_.empty()) continue;
    }
    drain(lock, nullptr, none);
  }
}

// Runs rounds while they are due (called with the lock held; returns with it held), and when none
// is due, or when a large round's waiters would wait long for the next (KvStore::commit_alone_pays),
// moves the store's work in hand on (KvStore::step), so nothing waits once the queue is empty.
// A receiver (self) runs until the round it started is resolved, then at most extra_rounds_ more
// rounds or steps (requests other receivers queued meanwhile, changes its round left in hand), and
// goes back to its connections, whose replies wait until it does; the rest is the scheduler
// thread's. Handing each to that thread cost a wake-up and a hand-off: on the 2-core VM (CPU
// engine, 8 connections, one request in flight each, 4 alternating runs of 3 s) 32-byte gets went
// from 70-77 K to 85-91 K ops/s and 50% sets of 512-byte values from 55-65 K to 72-103 K with 2 or 4
// extra rounds (--receiver-rounds). On the GPU machine's 16 cores (8 receivers, 128 connections)
// 0 and 4 measured alike with the CPU engine (bench/results/2026-11-29-server-16-cores). A
// pipelined store (the GPU index in cache mode) keeps 0 by default: it was measured with the
// scheduler thread running those rounds. Results for `self`'s connections go to `own_done`, the
// others' to their workers.
void Scheduler::drain(std::unique_lock<std::mutex>& lock, Worker* self, std::vector<Connection*>& own_done) {
  running_ = true;
  uint64_t own_round = 0;  // the receiver's round, numbered as runs_ counts them
  int extra_left = extra_rounds_;
  for (;;) {
    const bool round_due = due() || (stopping_ && !queue_.empty());
    const bool in_hand = store_.has_pending();
    if (self && own_round && store_.rounds_resolved() >= own_round && (round_due || in_hand) && extra_left-- == 0) break;
    if (round_due && !store_.commit_alone_pays()) {
      const bool by_size = queued_commands_ >= threshold_;
      const uint64_t arrived = first_arrival_ticks_;
      round_.swap(queue_);  // Mega-KV's buffer swap: receivers fill a fresh queue meanwhile
      queued_commands_ = 0;
      lock.unlock();
      const uint64_t start = TickClock::now();
      execute_round(self, own_done);
      if (self && !own_round) own_round = runs_;
      stats_.rounds++;
      (by_size ? stats_.by_size : stats_.by_period)++;
      stats_.wait_ns += TickClock::to_ns(start - arrived);
      stats_.round_ns += TickClock::ns_since(start);
      lock.lock();
    } else if (in_hand) {
      lock.unlock();
      const uint64_t start = TickClock::now();
      {
        std::lock_guard store_lock(store_mu_);
        store_.step();  // a pipelined store resolves a round here
      }
      complete_settled(self, own_done);
      stats_.round_ns += TickClock::ns_since(start);
      lock.lock();
    } else {
      break;
    }
  }
  unfinished_ = store_.has_pending() || !active_.empty();
  running_ = false;
  if (!queue_.empty() || unfinished_) cv_.notify_one();
}

// One round: its commands go to the store (KvStore::run: resolved now, or by the next run when
// the store is pipelined); then every request whose commands are all final is answered.
void Scheduler::execute_round(Worker* self, std::vector<Connection*>& own_done) {
  cmds_.clear();
  for (const Submission& s : round_)
    for (kv::KvCommand& c : s.request->cmds)
      if (c.partition == partition_) cmds_.push_back(&c);
  {
    std::lock_guard store_lock(store_mu_);
    store_.run(cmds_);
  }
  ++runs_;
  active_.insert(active_.end(), round_.begin(), round_.end());
  complete_settled(self, own_done);
  stats_.commands += cmds_.size();
  if (cmds_.size() > stats_.max_round) stats_.max_round = cmds_.size();
  round_.clear();
}

// Hands the requests whose commands (in this partition) are all final (KvCommand::settled) to
// their workers, once no other partition still works on them.
void Scheduler::complete_settled(Worker* self, std::vector<Connection*>& own_done) {
  size_t kept = 0, others = 0;  // others: workers other than self with answered requests
  for (const Submission& s : active_) {
    const auto& cmds = s.request->cmds;
    if (!std::all_of(cmds.begin(), cmds.end(), [&](const kv::KvCommand& c) { return c.partition != partition_ || c.settled; })) {
      active_[kept++] = s;
      continue;
    }
    // acq_rel: the last partition to finish sees the others' results before it publishes `done`.
    // One left (a request of one partition, which single-key ones are, or the others done): no
    // other partition touches the count again, so no locked decrement; the acquire load reads
    // the others' decrements and so sees their results.
    if (s.request->parts_left.load(std::memory_order_acquire) != 1 &&
        s.request->parts_left.fetch_sub(1, std::memory_order_acq_rel) != 1)
      continue;
    s.request->done.store(true, std::memory_order_release);
    if (s.worker == self) {
      own_done.push_back(s.conn);
      continue;
    }
    auto it = std::find_if(done_.begin(), done_.end(), [&](const auto& d) { return d.first == s.worker; });
    if (it == done_.end()) it = done_.emplace(done_.end(), s.worker, std::vector<Connection*>{});
    if (it->second.empty()) ++others;
    it->second.push_back(s.conn);
    stats_.handoffs++;
  }
  active_.resize(kept);
  if (others == 0) return;
  for (auto& [worker, conns] : done_) {
    if (conns.empty()) continue;
    worker->complete(conns);
    conns.clear();
  }
}

}  // namespace gphash::server
