// How the CPU-side engines (the GPHash CPU engine and HMEH) spread one batch over threads.
//
// Every operation has an owner thread chosen from its key's hash, so all operations on one key run
// on one thread, in batch order, and the batch gives the results of running it in order
// (gphash/ops.h). Thread t runs positions [next(t), end(t)) of a stable counting sort by owner.
//
// A batch of searches only changes nothing, so any thread may run any of it. An engine whose owners
// bring no locality (the GPHash CPU engine: a key's candidate buckets lie all over the table) asks
// for such batches in order (Searches::kInOrder): thread t runs a contiguous share, reading keys
// and writing results in order, with no sort (the GPU machine's 16-core Xeon, 16 M keys, medians
// of six runs: search 70 -> 78 M/s, YCSB C 58 -> 73). HMEH keeps its owners: by hash prefix a
// thread owns a range of segments, whose directory entries and handles stay in its core's caches
// (in order, its searches fell from 118-138 M/s to 102 at 16 threads and from 66 to 54 at 8).
//
// Everything proportional to the batch runs on all of its threads. The first drivers sorted and
// scanned serially and zero-filled their arrays: at 16 threads that serial part of a 2^20-operation
// batch took more time than the operations themselves (HMEH searched at 90 M/s where Dash-EH,
// which has no batches, did 107).
//
// Results are written in place, although neighbouring operations' statuses and values share cache
// lines between threads: writing them by position and gathering them afterwards (HMEH's first
// driver) was slower in every measurement, on 2 threads and on 16 (H100 machine, 16 M keys: YCSB
// A/B 50/62 M/s in place, 41/43 gathered).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "gphash/ops.h"

namespace gphash::engine {

class BatchShards {
 public:
  static constexpr int kMaxThreads = 255;  // owners are bytes
  // A calling thread keeps its arrays for its next batch up to this size. Fresh arrays each batch
  // came from fresh mappings, and faulting their pages in took longer than the batch's searches
  // (a 2^20-operation batch: 5 MB, 1,300 page faults).
  static constexpr size_t kKeptScratchBytes = size_t{256} << 20;

  enum class Searches { kByOwner, kInOrder };  // how a batch of searches only is shared out

  // `run(threads, f)` calls f(t) for every t in [0, threads) on its own thread and waits for all;
  // `owner(i)` is the thread of operation i, below `threads` (at most kMaxThreads).
  template <class Run, class Owner>
  BatchShards(const Batch& b, int threads, Run&& run, Owner&& owner, Searches searches = Searches::kByOwner)
      : b_(b), threads_(std::clamp(threads, 1, kMaxThreads)) {
    const size_t n = b.size;
    if (threads_ == 1) {
      next_[0] = 0;
      end_[0] = n;
      adds_ = count_adds(0, n);
      writes_ = adds_ > 0 || has_write(0, n);
      return;
    }
    if (searches == Searches::kInOrder && !(b.ops ? any_write(run) : b.op != Op::kSearch)) {
      for (int t = 0; t < threads_; ++t) next_[t] = first(t), end_[t] = first(t + 1);
      return;
    }
    std::byte* at = scratch(5 * n + 64);
    auto* owners = reinterpret_cast<uint8_t*>(at);  // operation -> thread
    order_ = reinterpret_cast<uint32_t*>(at + (n + 63) / 64 * 64);
    const size_t t2 = static_cast<size_t>(threads_) * threads_;
    std::vector<size_t> cursor(t2);  // [t][s]: where thread t's first operation for shard s goes
    std::vector<uint8_t> wrote(threads_);
    std::vector<size_t> adds(threads_);
    run(threads_, [&](int t) {
      std::vector<size_t> count(threads_, 0);
      const Op* ops = b.ops;
      bool w = !ops && b.op != Op::kSearch;
      size_t a = 0;
      for (size_t i = first(t), last = first(t + 1); i < last; ++i) {
        const uint32_t s = owner(i);
        owners[i] = static_cast<uint8_t>(s);
        ++count[s];
        if (ops) {
          w |= ops[i] != Op::kSearch;
          a += adds_item(ops[i]);
        }
      }
      std::copy(count.begin(), count.end(), cursor.begin() + static_cast<ptrdiff_t>(t) * threads_);
      wrote[t] = w;
      adds[t] = ops ? a : (adds_item(b.op) ? first(t + 1) - first(t) : 0);
    });
    for (size_t a : adds) adds_ += a;
    size_t pos = 0;
    for (int s = 0; s < threads_; ++s) {
      next_[s] = pos;
      for (int t = 0; t < threads_; ++t) {
        size_t& c = cursor[static_cast<size_t>(t) * threads_ + s];
        const size_t count = c;
        c = pos;
        pos += count;
      }
      end_[s] = pos;
    }
    writes_ = std::find(wrote.begin(), wrote.end(), 1) != wrote.end();
    uint32_t* order = order_;
    run(threads_, [&](int t) {
      std::vector<size_t> at(cursor.begin() + static_cast<ptrdiff_t>(t) * threads_,
                             cursor.begin() + static_cast<ptrdiff_t>(t + 1) * threads_);
      for (size_t i = first(t), last = first(t + 1); i < last; ++i) {
        const size_t p = at[owners[i]]++;
        order[p] = static_cast<uint32_t>(i);
      }
    });
  }

  BatchShards(const BatchShards&) = delete;
  BatchShards& operator=(const BatchShards&) = delete;

  int threads() const { return threads_; }
  // Positions thread t runs: [next(t), end(t)). A driver advances next(t) as it goes.
  size_t& next(int t) { return next_[t]; }
  size_t end(int t) const { return end_[t]; }
  // The operation at position p.
  size_t index(size_t p) const { return order_ ? order_[p] : p; }
  // Whether the shards run in an order of their own, not the batch's (then reading the batch's
  // keys in shard order jumps around the batch).
  bool permuted() const { return order_ != nullptr; }
  // Whether any operation is not a search (the batch needs its durability point).
  bool writes() const { return writes_; }
  // How many operations may add an item (inserts and upserts): a bound on the batch's growth.
  size_t adds() const { return adds_; }

  // Where the result of the operation at position p goes.
  OpStatus& status(size_t p) const { return b_.status[index(p)]; }
  std::byte* value_out(size_t p) const {
    return b_.values_out ? static_cast<std::byte*>(b_.values_out) + index(p) * b_.value_width : nullptr;
  }

  static Op op_of(const Batch& b, size_t i) { return b.ops ? b.ops[i] : b.op; }
  static bool adds_item(Op op) { return op == Op::kInsert || op == Op::kUpsert; }

 private:
  // Thread t's contiguous share of the batch, for the passes in batch order. (Loops take it once:
  // their byte-wide stores may alias b_, so the compiler would recompute it every iteration.)
  size_t first(int t) const {
    const size_t per = (b_.size + threads_ - 1) / threads_;
    return std::min(b_.size, per * static_cast<size_t>(t));
  }
  // Whether any operation of the batch is not a search, each thread scanning its share.
  template <class Run>
  bool any_write(Run&& run) const {
    std::vector<uint8_t> wrote(threads_);
    run(threads_, [&](int t) { wrote[t] = has_write(first(t), first(t + 1)); });
    return std::find(wrote.begin(), wrote.end(), 1) != wrote.end();
  }
  size_t count_adds(size_t begin, size_t end) const {
    if (!b_.ops) return adds_item(b_.op) ? end - begin : 0;
    size_t a = 0;
    for (size_t i = begin; i < end; ++i) a += adds_item(b_.ops[i]);
    return a;
  }
  bool has_write(size_t begin, size_t end) const {
    if (!b_.ops) return b_.op != Op::kSearch;
    for (size_t i = begin; i < end; ++i)
      if (b_.ops[i] != Op::kSearch) return true;
    return false;
  }

  const Batch& b_;
  int threads_;
  // In the object, not allocated: a batch of a few operations (gphash-server's rounds) paid two
  // allocations for them.
  size_t next_[kMaxThreads], end_[kMaxThreads];
  bool writes_ = false;
  size_t adds_ = 0;
  uint32_t* order_ = nullptr;  // position -> operation; null on one thread
  // Where the arrays live: the calling thread's reused block, or one of this batch's own.
  struct Scratch {
    std::unique_ptr<std::byte[]> data;
    size_t bytes = 0;
    bool busy = false;
  };
  static Scratch& thread_scratch() {
    static thread_local Scratch s;
    return s;
  }
  std::byte* scratch(size_t bytes) {
    Scratch& s = thread_scratch();
    if (s.busy || bytes > kKeptScratchBytes) {
      own_ = std::make_unique_for_overwrite<std::byte[]>(bytes);
      return own_.get();
    }
    if (s.bytes < bytes) {
      s.data.reset();
      s.data = std::make_unique_for_overwrite<std::byte[]>(bytes);
      s.bytes = bytes;
    }
    s.busy = true;
    lease_.scratch = &s;
    return s.data.get();
  }
  std::unique_ptr<std::byte[]> own_;
  struct Lease {  // gives the thread's block back, also when the constructor throws
    Scratch* scratch = nullptr;
    ~Lease() {
      if (scratch) scratch->busy = false;
    }
  } lease_;
};

}  // namespace gphash::engine
