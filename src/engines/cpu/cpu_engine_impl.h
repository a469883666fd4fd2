// The CPU engine's batch driver: shards a batch by key across threads, runs each shard in batch
// order, and resolves the exclusive slow paths (heap growth, displacement, resize) one
// operation at a time. Recovery runs in the constructor.
#pragma once

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

#include "engines/common/batch_shards.h"
#include "engines/common/crash_point.h"
#include "engines/common/table_meta.h"
#include "engines/cpu/cpu_table.h"
#include "engines/engine.h"
#include "gphash/config.h"
#include "gphash/error.h"

namespace gphash::engine::cpu {

inline OpStatus to_status(Outcome o) {
  switch (o) {
    case Outcome::kOk: return OpStatus::kOk;
    case Outcome::kNotFound: return OpStatus::kNotFound;
    case Outcome::kExists: return OpStatus::kExists;
    case Outcome::kReservedKey: return OpStatus::kReservedKey;
    case Outcome::kCorruptValue: return OpStatus::kCorruptValue;
    default: break;
  }
  return OpStatus::kTableFull;  // slow-path outcomes never reach a caller unresolved
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Per-thread counters on their own cache lines.
struct alignas(64) Padded {
  int64_t value = 0;
};

// Recovery's first steps, before any operation: resolve an interrupted move and finish an
// interrupted resize. (Slots left INSERTING elsewhere are emptied afterwards.)
template <class Table>
void finish_interrupted_steps(TableMeta& meta, Table& table, int threads) {
  GPHASH_CRASH_POINT("recovery.begin");
  table.resolve_move_record();
  GPHASH_CRASH_POINT("recovery.after_resolve_move");
  if (meta.header().gphash.resize_state == format::kResizeRehashing) {
    // The rehash must not meet INSERTING slots; otherwise the recount empties them in its pass.
    table.clear_inserting(threads);
    GPHASH_CRASH_POINT("recovery.after_clear_inserting");
    table.rehash_bottom(threads, /*fresh=*/false);
    GPHASH_CRASH_POINT("recovery.after_rehash");
    meta.finish_resize();
    table.refresh();
  }
}

// Recovery of a pool without opening an engine (check's private view, repair): the steps above,
// then INSERTING slots emptied. Heap references are not validated here (the checker reports
// them). A damaged maintenance record throws kCorruptTable, unless `clear_damaged_move_record`.
template <class ShapeT, int KeyWidth>
void recover_pool(pool::Pool& pool, int threads, bool clear_damaged_move_record) {
  TableMeta meta(pool);
  meta.mark_open_dirty();
  CellAllocator unused_cells;  // recovery allocates no cells
  CpuTable<ShapeT, KeyWidth> table(meta, DirectMemory(&pool), unused_cells);
  format::MaintenanceRecord* rec = pool.maintenance();
  try {
    validate_move_record(meta.header(), rec->move_state, rec->move_from, rec->move_to, rec->move_checksum);
  } catch (const Error& e) {
    if (!clear_damaged_move_record || e.code() != ErrorCode::kCorruptTable) throw;
    __atomic_store_n(&rec->move_state, format::kMoveIdle, __ATOMIC_RELEASE);
    pool.persist(&rec->move_state, 8);
  }
  finish_interrupted_steps(meta, table, threads);
  table.clear_inserting(threads);
  pool.sync();
}

// The batch driver. Memory is the pool-access seam (memory.h); tests instantiate it with a
// recording implementation.
template <class ShapeT, int KeyWidth, class Memory = DirectMemory>
class CpuEngine final : public Engine {
  using Table = CpuTable<ShapeT, KeyWidth, Memory>;
  using Probe = typename Table::Probe;

 public:
  CpuEngine(pool::Pool& pool, const OpenOptions& options)
      : pool_(pool),
        meta_(pool),
        threads_(options.threads > 0 ? options.threads : std::max(1, omp_get_max_threads())),
        auto_resize_(options.auto_resize),
        max_load_factor_(options.max_load_factor),
        table_(meta_, Memory(&pool), cells_) {
    const auto t0 = std::chrono::steady_clock::now();
    const bool dirty = meta_.header().clean_shutdown == 0;
    if (dirty && pool.read_only())
      throw Error(ErrorCode::kNeedsRecovery,
                  "pool " + pool.path() + " was not shut down cleanly; open it writable once so recovery can run");
    const bool resumed_resize = dirty && meta_.header().gphash.resize_state == format::kResizeRehashing;
    if (dirty) recover();
    if (!pool.read_only()) meta_.mark_open_dirty();
    if (dirty || meta_.has_heap()) {
      std::vector<uint64_t> used;
      items_ = table_.count_and_mark_cells(threads_, &used, /*clear_inserting=*/dirty);
      if (dirty && !resumed_resize) GPHASH_CRASH_POINT("recovery.after_clear_inserting");
      if (meta_.has_heap()) cells_.reset(meta_.heap_cells(), used, threads_);
    } else {
      items_ = meta_.header().item_count;
    }
    if (options.tag_mirror) table_.build_mirror(threads_);
    if (dirty) stats_.recovery_seconds = seconds_since(t0);
    stats_.recovered = dirty;
    stats_.open_seconds = seconds_since(t0);
  }

  ~CpuEngine() override {
    try {
      close();
    } catch (...) {
      // A destructor cannot report; the pool stays marked dirty and the next open recovers it.
    }
  }

  std::string name() const override { return "cpu"; }
  uint64_t item_count() const override { return items_; }
  size_t export_items(uint64_t& position, const ExportChunk& chunk, uint64_t& damaged) override {
    if (chunk.memory != MemorySpace::kHost)
      throw Error(ErrorCode::kInvalidArgument, "the CPU engine exports into host memory only");
    return table_.export_items(position, chunk.keys, chunk.values, chunk.capacity, damaged);
  }
  std::vector<uint64_t> level_items() override { return table_.level_items(threads_); }
  // Tests: slots whose tag mirror byte disagrees with the pool (0 between batches).
  uint64_t mirror_mismatches() { return table_.mirror_mismatches(threads_); }
  EngineStats stats() const override { return stats_; }

  void abandon() override { closed_ = true; }
  void close() override {
    if (closed_ || pool_.read_only()) return;
    pool_.sync();
    meta_.mark_clean(items_);
    closed_ = true;
  }

  void execute(const Batch& batch) override {
    const size_t n = batch.size;
    if (n == 0) return;
    const int threads = static_cast<int>(std::min<size_t>(std::min(threads_, BatchShards::kMaxThreads),
                                                          (n + kMinOpsPerThread - 1) / kMinOpsPerThread));
    // Shard by key so all operations on one key run on one thread, in batch order; searches alone
    // run in order (an owner gives no locality here: a key's buckets lie all over the table).
    BatchShards shards(
        batch, threads, run_threads,
        [&](size_t i) {
          return static_cast<uint32_t>(((table_.first_hash(key_of(batch, i)) >> 32) * static_cast<uint64_t>(threads)) >> 32);
        },
        BatchShards::Searches::kInOrder);
    Exhausted exhausted;
    grow_for(shards.adds(), exhausted);
    // The calling thread's scratch, reused (searches may run on several threads at once): a small
    // batch's allocations were about a tenth of its cost (gphash-server's rounds of a few keys).
    // References, so the worker threads below use the caller's, not thread_locals of their own.
    thread_local Scratch scratch;
    std::vector<Padded>& deltas = scratch.deltas;
    std::vector<Deferred>& deferred = scratch.deferred;
    std::vector<size_t>& serial = scratch.serial;  // positions for the exclusive slow path, in the order they run
    deltas.assign(threads_, Padded{});
    deferred.resize(std::max<size_t>(deferred.size(), threads));
    for (Deferred& d : deferred) d.clear();
    for (;;) {
      auto run_shard = [&](int t) {
        shards.next(t) = run_range(batch, shards, shards.next(t), shards.end(t), t, deltas[t].value, deferred[t]);
      };
      // One thread (every batch under kMinOpsPerThread operations) calls it directly: made into
      // run_threads' std::function, the lambda's captures took a heap allocation and a free per
      // batch (kv_round_bench on 16 hot keys, 2-core VM: rounds of one command 218 -> 196 ns).
      if (threads == 1) run_shard(0);
      else run_threads(threads, run_shard);
      bool any_stopped = false;
      serial.clear();
      for (int t = 0; t < threads; ++t) {
        // Different threads' keys differ, so their set-aside operations may run in any order.
        serial.insert(serial.end(), deferred[t].positions.begin(), deferred[t].positions.end());
        deferred[t].clear();
        if (shards.next(t) == shards.end(t)) continue;
        any_stopped = true;
        serial.push_back(shards.next(t)++);
      }
      resolve_serially(batch, shards, serial, deltas, exhausted);
      if (!any_stopped) break;
    }
    // Searching batches may run together and beside Table::info: they change no shared state (an
    // unconditional store of an unchanged count here was a data race under ThreadSanitizer).
    if (!shards.writes()) return;
    int64_t delta = 0;
    for (const Padded& d : deltas) delta += d.value;
    items_ = static_cast<uint64_t>(static_cast<int64_t>(items_) + delta);
    if (auto_resize_) meta_.reserve_growth_ahead(items_, max_load_factor_);
    pool_.sync();  // the durability point: the batch is acknowledged after this
  }

  // The first keys' candidate tag words (buckets without the mirror), as run_range's first stage
  // fetches them: a batch's first operations read them soon after that stage (kSlotDistance),
  // so for a small batch (gphash-server's rounds of a few keys) the driver's own set-up and the
  // caller's bookkeeping before execute() otherwise ran before the first miss even started.
  // With the mirror, the keys of a batch of a few also have their top-level candidate buckets
  // fetched whole: little else overlaps their misses, and the tag word, then the slot it picks,
  // are two in a row; a key in the top level (which holds 2/3 of the slots) then finds its slot's
  // lines on their way. kv_round_bench --keys 100000, 2-core VM, alternating pairs pinned to a
  // core: rounds of 1 and 2 command(s) -18% and -15% (6 pairs); up to 4 keys rather than 2,
  // rounds of 3 and 4 -10% more (4 pairs); up to 8, nothing more for rounds of 6 and 8. Fetching
  // the bottom level's buckets whole too (16 lines a key) was 6% slower than the top level's alone.
  // Larger batches get nothing: their own pipeline overlaps their misses (rounds of 16: no gain
  // measured), and the hashing here was pure overhead (kv_round_bench on 16 hot keys, rounds of
  // 16: +8% a command).
  void prefetch(const void* keys, size_t count) const override {
    constexpr size_t kWholeBucketKeys = 4;
    if (count > kWholeBucketKeys) return;
    const auto* k = static_cast<const std::byte*>(keys);
    for (size_t i = 0; i < count; ++i) {
      Probe p;
      table_.prepare(p, k + i * KeyWidth);
      if (!table_.mirror_on()) {
        table_.prefetch(p);
        continue;
      }
      table_.prefetch_tags(p);
      table_.prefetch_top_buckets(p);
    }
  }

 private:
  static constexpr size_t kMinOpsPerThread = 256;
  // Operations ahead: with the tag mirror, the candidates' tag words are prefetched
  // kTagDistance operations ahead and the pool lines their tags point at kSlotDistance ahead;
  // without it, the candidate buckets kBucketDistance ahead. (16-core Xeon, 16 M keys, 16 threads:
  // tags 20 / slots 8 was the best of 12/5, 20/8 and 32/12, bench/results/2026-11-29-tag-mirror.)
  static constexpr size_t kTagDistance = 20;
  static constexpr size_t kSlotDistance = 8;
  static constexpr size_t kBucketDistance = 8;
  // The batch's key and value of an operation are fetched this many operations before its first
  // stage: a write batch runs in its owners' order, a permutation of the batch, so each key read
  // was a cache miss of its own (perf, 16-thread load of 16 M keys: three quarters of prepare()'s
  // samples on that load).
  static constexpr size_t kInputLead = 8;
  static constexpr size_t kRing = 32;  // a power of two above each distance
  static_assert(kTagDistance < kRing && kBucketDistance < kRing);

  static Op op_of(const Batch& b, size_t i) { return BatchShards::op_of(b, i); }
  // Calls f(t) for t in [0, threads) on that many threads and waits for all.
  static void run_threads(int threads, const std::function<void(int)>& f) {
    if (threads == 1) return f(0);
#pragma omp parallel num_threads(threads)
    f(omp_get_thread_num());
  }
  static const std::byte* key_of(const Batch& b, size_t i) {
    return static_cast<const std::byte*>(b.keys) + i * b.key_width;
  }
  static const std::byte* value_in(const Batch& b, size_t i) {
    return b.values ? static_cast<const std::byte*>(b.values) + i * b.value_width : nullptr;
  }

  // Operations of one thread's shard set aside for the exclusive slow path during a round: those
  // that found no free slot or cell, and every later one on the same key (batch order per key).
  // Setting them aside instead of stopping keeps the thread busy: a thread that stopped waited for
  // the whole round, and near a resize most threads stopped early (16 threads, H100 machine: 10.8
  // M inserts/s stopping, 15.3 setting aside).
  struct Deferred {
    static constexpr size_t kMax = 64;  // then the thread stops, as before
    std::vector<size_t> positions;
    std::vector<uint64_t> hashes;  // their keys' first hash: a match is deferred too (a hash match
                                   // of different keys only defers an operation needlessly)
    bool holds(uint64_t hash) const { return std::find(hashes.begin(), hashes.end(), hash) != hashes.end(); }
    void clear() {
      positions.clear();
      hashes.clear();
    }
  };

  struct Scratch {
    std::vector<Padded> deltas;
    std::vector<Deferred> deferred;
    std::vector<size_t> serial;
  };

  // Runs positions [begin, end) of one shard, setting aside those that need the exclusive slow path;
  // stops at one when `deferred` is full and returns its position (end when all ran or were set
  // aside).
  size_t run_range(const Batch& b, BatchShards& shards, size_t begin, size_t end, int tid, int64_t& delta,
                   Deferred& deferred) {
    Probe ring[kRing];
    const size_t count = end - begin;
    const bool mirror = table_.mirror_on();
    const size_t ahead = mirror ? kTagDistance : kBucketDistance;
    auto stage = [&](size_t k) {
      Probe& p = ring[k % kRing];
      table_.prepare(p, key_of(b, shards.index(begin + k)));
      if (mirror) table_.prefetch_tags(p);
      else table_.prefetch(p);
    };
    auto stage_slots = [&](size_t k) {
      const Op op = op_of(b, shards.index(begin + k));
      table_.prefetch_slots(ring[k % kRing], op == Op::kInsert || op == Op::kUpsert);
    };
    auto stage_input = [&](size_t k) {
      const size_t i = shards.index(begin + k);
      prefetch_line(key_of(b, i));
      const Op op = op_of(b, i);
      if (op != Op::kSearch && op != Op::kErase && b.values) prefetch_line(value_in(b, i));
    };
    // In batch order (searches) the hardware prefetcher has the keys already.
    const bool fetch_input = shards.permuted();
    const size_t input_ahead = ahead + kInputLead;
    if (fetch_input)
      for (size_t k = ahead; k < std::min(count, input_ahead); ++k) stage_input(k);
    for (size_t k = 0; k < std::min(count, ahead); ++k) stage(k);
    if (mirror)
      for (size_t k = 0; k < std::min(count, kSlotDistance); ++k) stage_slots(k);
    for (size_t k = 0; k < count; ++k) {
      const size_t p = begin + k, i = shards.index(p);
      const Probe& probe = ring[k % kRing];
      const bool after_deferred = !deferred.positions.empty() && deferred.holds(probe.hash[0]);
      const Outcome o = after_deferred ? Outcome::kNeedSlot
                                       : table_.apply(op_of(b, i), probe, value_in(b, i), shards.value_out(p), tid, delta);
      if (o == Outcome::kNeedSlot || o == Outcome::kNeedCell) {
        if (deferred.positions.size() == Deferred::kMax) return p;
        deferred.positions.push_back(p);
        deferred.hashes.push_back(probe.hash[0]);
      } else {
        shards.status(p) = to_status(o);
      }
      if (fetch_input && k + input_ahead < count) stage_input(k + input_ahead);
      if (k + ahead < count) stage(k + ahead);
      if (mirror && k + kSlotDistance < count) stage_slots(k + kSlotDistance);
    }
    return end;
  }

  // Runs one operation that found no free slot or no free cell, alone: reclaims cached cells,
  // grows the heap, displaces an item or resizes, and retries until it completes or the pool
  // cannot grow (then it fails with kHeapFull / kTableFull and changes nothing).
  // What could not grow during this batch: later operations fail at once instead of retrying the
  // growth (on a full file system each retry would allocate and roll back a whole extent).
  struct Exhausted {
    bool heap = false, table = false;
  };

  // Runs resolve_slow_path on the operations at `positions`, in order, on this thread alone, with
  // the next ones' candidate buckets prefetched and, a few operations later, those of the item a
  // displacement would move first: near a resize nearly every one of them displaces, one at a time
  // (16-core Xeon, a 16-thread load of 16 M keys: 188 K displacements; their time 0.11-0.12 ->
  // 0.08-0.10 s with these prefetches).
  void resolve_serially(const Batch& b, BatchShards& shards, const std::vector<size_t>& positions,
                        std::vector<Padded>& deltas, Exhausted& exhausted) {
    constexpr size_t kBuckets = 8, kItem = 4;  // operations ahead
    Probe ring[kBuckets];
    const size_t n = positions.size();
    auto stage_buckets = [&](size_t k) {
      table_.prepare(ring[k % kBuckets], key_of(b, shards.index(positions[k])));
      table_.prefetch(ring[k % kBuckets]);
    };
    for (size_t k = 0; k < std::min(n, kBuckets); ++k) stage_buckets(k);
    for (size_t k = 0; k < n; ++k) {
      if (k + kItem < n) table_.prefetch_displacement(ring[(k + kItem) % kBuckets]);
      resolve_slow_path(b, shards, positions[k], deltas, exhausted);
      if (k + kBuckets < n) stage_buckets(k + kBuckets);
    }
  }

  void resolve_slow_path(const Batch& b, BatchShards& shards, size_t position, std::vector<Padded>& deltas,
                         Exhausted& exhausted) {
    int64_t& delta = deltas[0].value;
    const size_t i = shards.index(position);
    OpStatus& status = shards.status(position);
    Probe p;
    table_.prepare(p, key_of(b, i));
    bool reclaimed = false;
    for (;;) {
      Outcome o = table_.apply(op_of(b, i), p, value_in(b, i), shards.value_out(position), 0, delta);
      if (o == Outcome::kNeedCell) {
        if (!reclaimed) {
          cells_.reclaim_local_caches();
          reclaimed = true;
          continue;
        }
        const auto t0 = std::chrono::steady_clock::now();
        try {
          if (exhausted.heap) throw Error(ErrorCode::kNoSpace, "the heap could not grow earlier in this batch");
          meta_.grow_heap(kGrowth);
        } catch (const Error& e) {
          if (e.code() != ErrorCode::kNoSpace) throw;
          exhausted.heap = true;
          status = OpStatus::kHeapFull;
          return;
        }
        cells_.grow(meta_.heap_cells());
        stats_.heap_grow_seconds += seconds_since(t0);
        table_.refresh();
        ++stats_.heap_grows;
        continue;
      }
      if (o == Outcome::kNeedSlot) {
        int64_t items = static_cast<int64_t>(items_);
        for (const Padded& d : deltas) items += d.value;
        const double load = static_cast<double>(items) / static_cast<double>(meta_.slot_capacity());
        if ((load < max_load_factor_ || !auto_resize_) && table_.displace_for(p)) {
          ++stats_.displacements;
          continue;
        }
        if (!auto_resize_) {
          status = OpStatus::kTableFull;
          return;
        }
        try {
          if (exhausted.table) throw Error(ErrorCode::kNoSpace, "the table could not grow earlier in this batch");
          resize();
        } catch (const Error& e) {
          if (e.code() != ErrorCode::kNoSpace) throw;
          exhausted.table = true;
          status = OpStatus::kTableFull;
          return;
        }
        continue;
      }
      status = to_status(o);
      return;
    }
  }

  // Resizes until the batch's inserts and upserts fit under the maximum load factor, before any of
  // them runs (the GPU engine does the same with the batch's size, as its operations may be in GPU
  // memory). Otherwise a growing table met each resize inside a batch: the inserts that found
  // their candidates full went to the exclusive slow path, displacing one item at a time while
  // every other thread waited, until one of them resized. 16-core Xeon, 16 M keys from 64 K slots,
  // batches of 2^20, 16 threads, three interleaved rounds: 188 K displacements -> 6 K, inserts
  // 17.1, 21.6, 24.2 -> 32.3, 29.2, 27.4 M/s (bench/results/2026-11-29-cpu-engine-growth). A
  // table that cannot grow is left to displacement.
  void grow_for(size_t adds, Exhausted& exhausted) {
    if (!auto_resize_ || adds == 0) return;
    while (static_cast<double>(items_ + adds) > max_load_factor_ * static_cast<double>(meta_.slot_capacity())) {
      try {
        resize();
      } catch (const Error& e) {
        if (e.code() != ErrorCode::kNoSpace) throw;
        exhausted.table = true;
        return;
      }
    }
  }

  // A new level or heap chunk inside the pool's reservation is not faulted in up front: the threads
  // that first write it do, most of them in the rehash. Measured as a patch that skipped it (16-core
  // Xeon, 1 GiB reserved, 16 M keys, 16 threads, three rounds): resizes 0.175-0.202 -> 0.126-0.140
  // s, inserts 28.9-31.1 -> 34.0-35.1 M/s (bench/results/2026-11-29-pool-reservation, call 6). The
  // GPU engine populates first: registering a range with CUDA faults it in on one thread.
  static constexpr pool::Pool::Populate kGrowth = pool::Pool::Populate::kUnlessReserved;

  void resize() {
    const auto t0 = std::chrono::steady_clock::now();
    const bool fresh = meta_.header().gphash.resize_state == format::kResizeNone;
    meta_.begin_resize(kGrowth);
    table_.refresh();
    const auto t1 = std::chrono::steady_clock::now();
    table_.rehash_bottom(threads_, fresh);
    stats_.rehash_seconds += seconds_since(t1);
    meta_.finish_resize();
    table_.refresh();
    ++stats_.resizes;
    stats_.last_resize_seconds = seconds_since(t0);
    stats_.resize_seconds += stats_.last_resize_seconds;
  }

  void recover() { finish_interrupted_steps(meta_, table_, threads_); }

  pool::Pool& pool_;
  TableMeta meta_;
  CellAllocator cells_;
  int threads_;
  bool auto_resize_;
  double max_load_factor_;
  Table table_;
  uint64_t items_ = 0;
  EngineStats stats_;
  bool closed_ = false;
};

}  // namespace gphash::engine::cpu
