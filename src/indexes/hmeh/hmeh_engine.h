// The HMEH engine: batches of operations on an HMEH index in a pool, on CPU threads.
//
// Structure (format/hmeh/layout.h): a flat directory in DRAM (2^G segment ids) rebuilt at open
// from the radix-tree directory in the pool; segments of 64-byte buckets; a key lives in one of
// `probe` buckets from its home bucket or in its segment's stash; Cross-KV slots.
//
// Operations (all stores to the pool go through Memory, the seam of engines/cpu/memory.h, so the
// lost-store emulation sees every one):
//   search   lock-free: read the segment's version, scan, read the version again; retry if a
//            split changed the segment meanwhile or the directory entry was stale.
//   insert   claim a free slot by CAS (EMPTY or TOMBSTONE -> CLAIMED), store the value and key
//            words, store the state word (publish), persist the line: one barrier (Cross-KV).
//            Writes persist their last stores after leaving the segment (see complete()).
//   update   inline: one 8-byte store of the value word, persist. Heap: a new cell, persisted,
//            then the value word switched and persisted; the old cell is free.
//   erase    CAS of the state word to TOMBSTONE, persist.
//   split    copy on write: rehash the segment's items into two new segments (more if a half does
//            not fit in one), persist them and a new radix node, publish the node with one 8-byte
//            store, then point the flat directory at the new segments (doubling it if needed).
//            The old segment is never written, so readers still on it read consistent data until
//            they notice, and a crash leaves the old tree or the new one, never a mix.
// Writers hold their segment's lock shared (they race with each other only through slot CAS); a
// split holds it exclusively. Lock order: segment, then the directory mutex, then the metadata
// mutex (arena and heap growth); nothing waits for a segment while holding another lock.
//
// Recovery (at open after an unclean shutdown): read the radix tree (it is always a whole old or
// new tree, see radix_tree.h), rebuild the flat directory, and in one pass over the slots turn
// claims a crash cut short into tombstones, recount the items and rebuild the heap's free cells.
// A second recovery finds nothing to do.
//
// Batches keep GPHash's CPU engine semantics (gphash/ops.h): operations are sharded by key across
// threads, each thread runs its shard in batch order, so all operations on one key run in order
// on one thread and a batch gives the results of running it sequentially.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <vector>

#include "engines/common/batch_shards.h"
#include "engines/common/crash_point.h"
#include "engines/cpu/cell_allocator.h"
#include "engines/cpu/memory.h"
#include "format/hmeh/layout.h"
#include "gphash/error.h"
#include "indexes/hmeh/flat_directory.h"
#include "indexes/hmeh/hmeh.h"
#include "indexes/hmeh/index_meta.h"
#include "indexes/hmeh/parallel.h"
#include "indexes/hmeh/radix_tree.h"

namespace gphash::hmeh {

namespace fh = format::hmeh;
using engine::BatchShards;

enum class Outcome : uint8_t {
  kOk,
  kNotFound,
  kExists,
  kReservedKey,
  kTableFull,  // no room and no split possible (auto_resize off, pool full, depth limit)
  kNeedCell,   // the heap is full and cannot grow: resolved after the parallel phase
  kSplit,      // internal: the segment was split (or someone else split it); look again
};

inline OpStatus to_status(Outcome o) {
  switch (o) {
    case Outcome::kOk: return OpStatus::kOk;
    case Outcome::kNotFound: return OpStatus::kNotFound;
    case Outcome::kExists: return OpStatus::kExists;
    case Outcome::kReservedKey: return OpStatus::kReservedKey;
    case Outcome::kNeedCell: return OpStatus::kHeapFull;
    default: return OpStatus::kTableFull;
  }
}

// Segment and node ids not in the directory. A segment a split replaced is free at once: a
// lock-free reader still looking at it validates what it read by the segment's version, which
// the split changed, and stores into it go word by word (DirectMemory::copy). Reusing it at once
// halves the fresh segments whose pages a load faults in, HMEH's largest cost at 16 threads.
// A radix node a split replaced is retired and becomes free between batches. Ids whose pages this
// session populated or wrote (`written`) are handed out first: they need no populating.
class IdPool {
 public:
  void reset(uint64_t capacity, const std::vector<uint64_t>& used_bits) {
    std::lock_guard lock(mutex_);
    free_.clear();
    written_.clear();
    retired_.clear();
    for (uint64_t id = capacity; id-- > 0;)
      if (!(used_bits[id / 64] >> (id % 64) & 1)) free_.push_back(id);
    next_fresh_ = capacity_ = capacity;
  }
  std::optional<uint64_t> take() {
    std::lock_guard lock(mutex_);
    if (auto id = pop(written_)) return id;
    if (auto id = pop(free_)) return id;
    if (next_fresh_ < capacity_) return next_fresh_++;
    return std::nullopt;
  }
  // An id from the free lists only: one whose pages are there (`written`), else any.
  std::optional<uint64_t> take_free(bool& written) {
    std::lock_guard lock(mutex_);
    written = !written_.empty();
    if (auto id = pop(written_)) return id;
    return pop(free_);
  }
  // Ids never handed out: [first, first + n) with n = min(run_length(first), what is left), n = 0
  // when none is left.
  template <class RunLength>
  std::pair<uint64_t, uint64_t> take_fresh(RunLength&& run_length) {
    std::lock_guard lock(mutex_);
    const uint64_t first = next_fresh_;
    const uint64_t n = first < capacity_ ? std::min<uint64_t>(run_length(first), capacity_ - first) : 0;
    next_fresh_ += n;
    return {first, n};
  }
  void give_back(uint64_t id, bool written = false) {
    std::lock_guard lock(mutex_);
    (written ? written_ : free_).push_back(id);
  }
  void retire(uint64_t id) {
    std::lock_guard lock(mutex_);
    retired_.push_back(id);
  }
  void release_retired() {
    std::lock_guard lock(mutex_);
    free_.insert(free_.end(), retired_.begin(), retired_.end());
    retired_.clear();
  }
  void set_capacity(uint64_t capacity) {
    std::lock_guard lock(mutex_);
    capacity_ = capacity;
  }
  uint64_t capacity() const {
    std::lock_guard lock(mutex_);
    return capacity_;
  }

 private:
  mutable std::mutex mutex_;
  static std::optional<uint64_t> pop(std::vector<uint64_t>& ids) {
    if (ids.empty()) return std::nullopt;
    const uint64_t id = ids.back();
    ids.pop_back();
    return id;
  }

  std::vector<uint64_t> free_, written_, retired_;
  uint64_t next_fresh_ = 0, capacity_ = 0;
};

struct alignas(64) PaddedCount {
  int64_t value = 0;
};

// A thread's run of fresh segment ids [next, end), populated together (HmehEngine::take_segment).
struct alignas(64) FreshRun {
  uint64_t next = 0, end = 0;
};

template <int KeyWidth, class Memory = engine::cpu::DirectMemory>
class HmehEngine final : public Index {
  using Slot = fh::SlotLayout<KeyWidth>;
  static constexpr int kKeyWords = KeyWidth / 8;
  static constexpr uint32_t kSlotWords = Slot::kSlotBytes / 8;
  static constexpr uint32_t kSlotsPerBucket = fh::kBucketBytes / Slot::kSlotBytes;
  static constexpr uint32_t kBucketWords = fh::kBucketBytes / 8;
  static constexpr uint64_t kNoCell = engine::cpu::CellAllocator::kNoCell;
  static constexpr size_t kMinOpsPerThread = 256;
  // Operations ahead (run_range).
  static constexpr size_t kBucketsAhead = 8, kHandleAhead = 16, kDirectoryAhead = 24, kInputAhead = 32;
  static constexpr uint64_t kRunBytes = uint64_t{2} << 20;  // the memory one page-table page maps

  // A key with its hash, the state word its slot carries once published, and its home bucket.
  struct Probe {
    uint64_t key[kKeyWords];
    uint64_t hash;
    uint64_t state;
    uint32_t home;
    bool reserved;
  };

  // The first slot holding the key, and the first free slot in probe order (for an insert).
  struct Found {
    uint64_t* match = nullptr;
    uint64_t* free = nullptr;
    uint64_t free_state = 0;
  };

 public:
  HmehEngine(pool::Pool& pool, const EngineOptions& options)
      : pool_(pool),
        meta_(pool),
        mem_(&pool),
        threads_(std::min(255, options.threads > 0 ? options.threads : default_threads())),  // owners are bytes
        auto_resize_(options.auto_resize),
        cross_kv_(options.cross_kv),
        shard_by_prefix_(options.shard_by_prefix) {
    const auto t0 = std::chrono::steady_clock::now();
    const format::HmehMeta& m = meta_.meta();
    const uint32_t buckets = (1u << m.segment_bytes_log2) / fh::kBucketBytes;
    geo_ = {buckets, buckets - m.stash_buckets, m.probe_buckets, m.stash_buckets, kSlotsPerBucket};
    seed_ = fh::key_seed(m.hash_seed);
    value_width_ = m.value_width;
    has_heap_ = meta_.has_heap();
    const bool dirty = meta_.header().clean_shutdown == 0;
    if (dirty && pool.read_only())
      throw Error(ErrorCode::kNeedsRecovery,
                  "pool " + pool.path() + " was not shut down cleanly; open it writable once so recovery can run");
    if (dirty) GPHASH_CRASH_POINT("hmeh.recovery.begin");

    // Directory recovery: the radix tree gives the segments, the flat directory is built from it.
    RadixScan scan = scan_radix_tree(meta_.arenas());
    const auto t1 = std::chrono::steady_clock::now();
    for (uint32_t c = 0; c < meta_.segments().chunks(); ++c) add_handle_chunk(c);
    flat_.reset(scan.max_depth);
    std::vector<uint64_t> live_segments((meta_.segments().capacity() + 63) / 64, 0);
    for (const LiveSegment& s : scan.segments) {
      handle(s.id).place.store(SegmentHandle::place_of(s.prefix, s.depth), std::memory_order_relaxed);
      flat_.assign(s.prefix, s.depth, static_cast<uint32_t>(s.id));
      live_segments[s.id / 64] |= uint64_t{1} << (s.id % 64);
    }
    segment_ids_.reset(meta_.segments().capacity(), live_segments);
    std::vector<uint64_t> live_nodes((meta_.nodes().capacity() + 63) / 64, 0);
    for (uint64_t n : scan.nodes) live_nodes[n / 64] |= uint64_t{1} << (n % 64);
    node_ids_.reset(meta_.nodes().capacity(), live_nodes);
    live_ = scan.segments.size();
    const auto t2 = std::chrono::steady_clock::now();
    if (dirty) GPHASH_CRASH_POINT("hmeh.recovery.after_directory");

    // The slots: claims cut short become tombstones, items are counted, heap cells marked.
    if (dirty || has_heap_) {
      std::vector<uint64_t> used;
      const uint64_t counted = scan_slots(scan.segments, dirty, &used);
      items_ = dirty ? counted : meta_.header().item_count;
      if (has_heap_) cells_.reset(meta_.heap().capacity(), used, threads_);
    } else {
      items_ = meta_.header().item_count;
    }
    if (!pool.read_only()) meta_.mark_open_dirty();
    const auto t3 = std::chrono::steady_clock::now();
    hstats_.radix_seconds = seconds(t0, t1);
    hstats_.flat_seconds = seconds(t1, t2);
    hstats_.scan_seconds = seconds(t2, t3);
    stats_.recovered = dirty;
    stats_.open_seconds = seconds(t0, t3);
    if (dirty) stats_.recovery_seconds = stats_.open_seconds;
    // Not pool memory, so not through the seam: only the barrier's cost is wanted here.
    if (options.persist_flat_directory) flat_.set_persist([this](const void* p, size_t n) { pool_.persist(p, n); });
  }

  ~HmehEngine() override {
    try {
      close();
    } catch (...) {
      // A destructor cannot report; the pool stays marked dirty and the next open recovers it.
    }
  }

  std::string name() const override { return "cpu"; }
  uint64_t item_count() const override { return items_; }

  engine::EngineStats stats() const override {
    engine::EngineStats s = stats_;
    s.resizes = splits_.load(std::memory_order_relaxed);  // HMEH grows by segment splits
    s.heap_grows = heap_grows_.load(std::memory_order_relaxed);
    s.last_resize_seconds = last_split_seconds_;
    s.resize_seconds = hstats_.split_seconds;  // thread-seconds: splits run in parallel
    s.slots = live_.load(std::memory_order_relaxed) * geo_.slots();
    return s;
  }

  HmehStats hmeh_stats() const override {
    HmehStats s = hstats_;
    s.splits = splits_.load(std::memory_order_relaxed);
    s.doublings = flat_.doublings();
    s.segments = live_.load(std::memory_order_relaxed);
    s.global_depth = flat_.global_depth();
    s.directory_version = flat_.version();
    return s;
  }

  // After a failure: never mark the pool clean, so the next open recovers it.
  void abandon() override { closed_ = true; }

  // Export positions are slot indices over the segment arena (segment id * slots per segment +
  // slot); segments not in the directory are skipped. A split moves items, and the facade
  // restarts an export across one (it counts as a resize).
  size_t export_items(uint64_t& position, const engine::ExportChunk& chunk, uint64_t& damaged) override {
    (void)damaged;  // HMEH has no value checksums: nothing is left out
    if (chunk.memory != MemorySpace::kHost)
      throw Error(ErrorCode::kInvalidArgument, "HMEH has no GPU engine: it exports into host memory only");
    const uint64_t per_segment = geo_.slots();
    const uint64_t capacity = meta_.segments().capacity();
    size_t n = 0;
    for (uint64_t id = position / per_segment; id < capacity && n < chunk.capacity; ++id) {
      const SegmentHandle& h = handle(id);
      if (h.place.load(std::memory_order_acquire) == SegmentHandle::kNoPlace) {
        position = (id + 1) * per_segment;
        continue;
      }
      for (uint64_t k = std::max(position, id * per_segment); k < (id + 1) * per_segment && n < chunk.capacity; ++k) {
        position = k + 1;
        const uint64_t local = k - id * per_segment;
        const uint64_t* slot = bucket(h.base, static_cast<uint32_t>(local / kSlotsPerBucket)) +
                               (local % kSlotsPerBucket) * kSlotWords;
        const uint64_t state = Memory::load(slot);
        if (!fh::is_published(state)) continue;
        uint64_t key[kKeyWords];
        if constexpr (KeyWidth == 8) {
          key[0] = fh::decode_key_word(state);
        } else {
          for (int i = 0; i < kKeyWords; ++i) key[i] = Memory::load(slot + Slot::kKeyWords[i]);
        }
        std::memcpy(chunk.keys + n * KeyWidth, key, KeyWidth);
        if (chunk.values) read_value(Memory::load(slot + Slot::kValueWord), chunk.values + n * value_width_);
        ++n;
      }
    }
    if (n < chunk.capacity) position = ~uint64_t{0};  // the table ended
    return n;
  }

  // HMEH has no levels: one entry, the published slots of the segments in the directory.
  std::vector<uint64_t> level_items() override {
    const uint64_t capacity = meta_.segments().capacity();
    std::vector<PaddedCount> counts(static_cast<size_t>(threads_));
    parallel_for(threads_, capacity, 16, [&](int tid, uint64_t id) {
      const SegmentHandle& h = handle(id);
      if (h.place.load(std::memory_order_acquire) == SegmentHandle::kNoPlace) return;
      int64_t local = 0;
      for (uint32_t b = 0; b < geo_.buckets; ++b)
        for (uint32_t s = 0; s < kSlotsPerBucket; ++s) local += fh::is_published(Memory::load(bucket(h.base, b) + s * kSlotWords));
      counts[static_cast<size_t>(tid)].value += local;
    });
    uint64_t total = 0;
    for (const PaddedCount& c : counts) total += static_cast<uint64_t>(c.value);
    return {total};
  }

  // Like the GPHash CPU engine: runs the batch at once (a stream is not used).
  std::shared_ptr<engine::Completion> execute_async(const Batch& b, void*) override {
    if (b.memory == MemorySpace::kDevice)
      throw Error(ErrorCode::kInvalidArgument, "HMEH has no GPU engine: its batches are in host memory", "engine");
    execute(b);
    return nullptr;
  }
  engine::DeviceSession begin_device_session(uint64_t, void*) override {
    throw Error(ErrorCode::kInvalidArgument, "HMEH has no GPU engine: device sessions need a GPHash pool", "engine");
  }
  std::shared_ptr<engine::Completion> end_device_session(void*) override {
    throw Error(ErrorCode::kInvalidArgument, "HMEH has no GPU engine: no device session is open", "engine");
  }

  void close() override {
    if (closed_ || pool_.read_only()) return;
    pool_.sync();
    meta_.mark_clean(items_);
    closed_ = true;
  }

  void execute(const Batch& b) override {
    const size_t n = b.size;
    if (n == 0) return;
    const int threads = static_cast<int>(std::min<size_t>(threads_, (n + kMinOpsPerThread - 1) / kMinOpsPerThread));
    // By prefix, owners give locality to searches too (batch_shards.h); remixed, they give none.
    BatchShards shards(
        b, threads, [](int k, auto&& f) { run_parallel(k, f); },
        [&](size_t i) {
          Probe p;
          prepare(p, key_of(b, i));
          return owner_of(p.hash, threads);
        },
        shard_by_prefix_ ? BatchShards::Searches::kByOwner : BatchShards::Searches::kInOrder);
    std::vector<PaddedCount> deltas(threads_);
    bool stopped;
    do {  // rounds: each thread runs its shard until an operation needs the heap to grow
      run_parallel(threads, [&](int t) {
        shards.next(t) = run_range(b, shards, shards.next(t), shards.end(t), t, deltas[t].value);
      });
      stopped = false;
      for (int t = 0; t < threads; ++t) {
        if (shards.next(t) == shards.end(t)) continue;
        stopped = true;
        resolve_heap_full(b, shards, shards.next(t)++, deltas[0].value);
      }
    } while (stopped);
    if (!shards.writes()) return;  // searching batches may run together: they change no shared state
    int64_t delta = 0;
    for (const PaddedCount& d : deltas) delta += d.value;
    items_ = static_cast<uint64_t>(static_cast<int64_t>(items_) + delta);
    pool_.sync();  // the durability point: the batch is acknowledged after this
    // No thread runs now (a writing batch runs alone): what splits retired can be reused.
    node_ids_.release_retired();
    flat_.release_retired();
  }

 private:
  static double seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  }
  static Op op_of(const Batch& b, size_t i) { return BatchShards::op_of(b, i); }
  static const std::byte* key_of(const Batch& b, size_t i) {
    return static_cast<const std::byte*>(b.keys) + i * b.key_width;
  }
  static const std::byte* value_in(const Batch& b, size_t i) {
    return b.values ? static_cast<const std::byte*>(b.values) + i * b.value_width : nullptr;
  }

  // ---- addressing ------------------------------------------------------------------------

  SegmentHandle& handle(uint64_t id) const { return handles_.at(meta_.segments().chunk_of(id), id); }
  SegmentHandle& resolve(const Probe& p) const { return handle(flat_.lookup(p.hash)); }
  static uint64_t* bucket(std::byte* segment, uint32_t b) {
    return reinterpret_cast<uint64_t*>(segment + uint64_t{b} * fh::kBucketBytes);
  }
  uint64_t* node_entries(uint64_t node) const { return reinterpret_cast<uint64_t*>(meta_.nodes().address(node)); }

  void add_handle_chunk(uint32_t c) {
    const Arena& a = meta_.segments();
    handles_.add_chunk(a.chunk_begin(c), a.chunk_units(c), [&](uint64_t id) { return a.address(id); });
  }

  void prepare(Probe& p, const void* key) const {
    std::memcpy(p.key, key, KeyWidth);
    p.hash = fh::key_hash<kKeyWords>(p.key, seed_);
    p.home = geo_.home_bucket(p.hash);
    if constexpr (KeyWidth == 8) {
      p.reserved = fh::is_reserved_key(p.key[0]);
      p.state = fh::encode_key_word(p.key[0]);
    } else {
      p.reserved = false;
      p.state = fh::fingerprint(p.hash);
    }
  }

  // ---- slots -----------------------------------------------------------------------------

  static bool key_matches(const uint64_t* slot, const Probe& p) {
    if constexpr (KeyWidth == 8) {
      return true;  // the state word is the key
    } else {
      for (int i = 0; i < kKeyWords; ++i)
        if (Memory::load(slot + Slot::kKeyWords[i]) != p.key[i]) return false;
      return Memory::load(slot) == p.state;  // still the same item after reading its key
    }
  }

  // Scans one bucket into `f`; true when the lookup ends here (a match, or an EMPTY slot, after
  // which the placement rule puts nothing of this key).
  static bool scan_bucket(uint64_t* bucket, const Probe& p, Found& f) {
    bool empty = false;
    for (uint32_t s = 0; s < kSlotsPerBucket; ++s) {
      uint64_t* slot = bucket + s * kSlotWords;
      const uint64_t state = Memory::load(slot);
      if (state == p.state) {
        if (key_matches(slot, p)) {
          f.match = slot;
          return true;
        }
      } else if (fh::is_free(state)) {
        if (!f.free) {
          f.free = slot;
          f.free_state = state;
        }
        empty |= state == fh::kSlotEmpty;
      }
    }
    return empty;
  }

  Found find(std::byte* segment, const Probe& p) const {
    Found f;
    for (uint32_t i = 0; i < geo_.probe; ++i)
      if (scan_bucket(bucket(segment, geo_.probe_bucket(p.home, i)), p, f)) return f;
    for (uint32_t i = 0; i < geo_.stash; ++i)
      if (scan_bucket(bucket(segment, geo_.stash_bucket(i)), p, f)) return f;
    return f;
  }

  uint64_t inline_word(const std::byte* value) const {
    uint64_t w = 0;
    std::memcpy(&w, value, value_width_);
    return w;
  }

  void read_value(uint64_t word, std::byte* out) const {
    if (has_heap_)
      std::memcpy(out, meta_.heap().address(word), value_width_);
    else
      std::memcpy(out, &word, value_width_);
  }

  // A heap cell holding `value`, persisted before a slot can reference it. Grows the heap when it
  // is exhausted; kNoCell when it cannot grow.
  uint64_t new_cell(const std::byte* value, int tid) {
    uint64_t cell = cells_.allocate(tid);
    while (cell == kNoCell) {
      const uint64_t seen = meta_.heap().capacity();
      {
        std::lock_guard lock(meta_mutex_);
        if (meta_.heap().capacity() == seen) {
          try {
            meta_.grow_heap();
          } catch (const Error& e) {
            if (e.code() != ErrorCode::kNoSpace) throw;
            return kNoCell;
          }
          heap_grows_.fetch_add(1, std::memory_order_relaxed);
          cells_.grow(meta_.heap().capacity());
        }
      }
      cell = cells_.allocate(tid);
    }
    std::byte* dst = meta_.heap().address(cell);
    Memory::copy(dst, value, value_width_);
    mem_.persist(dst, value_width_);
    GPHASH_CRASH_POINT("hmeh.heap.after_cell_write");
    return cell;
  }

  // What a write still has to do once it left its segment: persist its last stores, then free
  // the heap cell it unlinked. The segment's lock is not needed for that (a split meanwhile copies
  // what is visible and persists its own copy), and leaving first matters on persistent memory:
  // the locked instruction that leaves the segment would wait for the write-back to finish.
  struct Completion {
    uint64_t* persist = nullptr;
    uint32_t bytes = 0;
    uint64_t freed_cell = kNoCell;
  };
  void complete(const Completion& c, int tid) {
    if (c.persist) mem_.persist(c.persist, c.bytes);
    if (c.freed_cell != kNoCell) cells_.release(tid, c.freed_cell);
  }

  // Fills a claimed slot and publishes it (Cross-KV: value and key words, then the state word, all
  // in one cache line; the persist that follows makes them durable together. The plain protocol
  // persists value and key before publishing).
  Completion link(uint64_t* slot, const Probe& p, uint64_t value_word) {
    Memory::store(slot + Slot::kValueWord, value_word);
    if constexpr (KeyWidth != 8)
      for (int i = 0; i < kKeyWords; ++i) Memory::store(slot + Slot::kKeyWords[i], p.key[i]);
    if (!cross_kv_) mem_.persist(slot + 1, Slot::kSlotBytes - 8);
    GPHASH_CRASH_POINT("hmeh.insert.after_value");
    Memory::store(slot, p.state);
    return {slot, cross_kv_ ? Slot::kSlotBytes : 8};
  }

  Outcome update_slot(uint64_t* slot, const std::byte* value, int tid, uint64_t& cell, Completion& done) {
    uint64_t* word = slot + Slot::kValueWord;
    if (!has_heap_) {
      Memory::store(word, inline_word(value));
      done = {word, 8};
      return Outcome::kOk;
    }
    if (cell == kNoCell && (cell = new_cell(value, tid)) == kNoCell) return Outcome::kNeedCell;
    // The old cell is freed only once the switch is persistent (complete()).
    done = {word, 8, Memory::load(word)};
    Memory::store(word, cell);
    cell = kNoCell;
    return Outcome::kOk;
  }

  Completion erase_slot(uint64_t* slot, const Probe& p) {
    // The cell is read before the slot is given up: once it is a tombstone, another thread may
    // claim it and link a cell of its own.
    const uint64_t cell = has_heap_ ? Memory::load(slot + Slot::kValueWord) : kNoCell;
    uint64_t expected = p.state;
    if (!Memory::cas(slot, expected, fh::kSlotTombstone))
      throw Error(ErrorCode::kCorruptTable, "an HMEH slot changed under the thread that owns its key");
    return {slot, 8, cell};
  }

  // ---- operations ------------------------------------------------------------------------

  Outcome search(const Probe& p, std::byte* out, SegmentHandle* hint) const {
    for (SegmentHandle* h = hint ? hint : &resolve(p);; h = &resolve(p)) {
      const uint64_t v1 = h->lock.load(std::memory_order_acquire);
      if (v1 & SegmentHandle::kSplitting) {
        h->wait_while_splitting();
        continue;
      }
      if (!h->covers(h->place.load(std::memory_order_acquire), p.hash)) continue;
      const Found f = find(h->base, p);
      const uint64_t word = f.match ? Memory::load(f.match + Slot::kValueWord) : 0;
      if ((h->lock.load(std::memory_order_acquire) ^ v1) & ~SegmentHandle::kSharerMask) continue;
      if (!f.match) return Outcome::kNotFound;
      if (out) read_value(word, out);
      return Outcome::kOk;
    }
  }

  Outcome write(Op op, const Probe& p, const std::byte* value, int tid, int64_t& delta, SegmentHandle* hint) {
    uint64_t cell = kNoCell;  // a cell written for this operation and not linked yet
    auto finish = [&](Outcome o) {
      if (cell != kNoCell) cells_.release(tid, cell);
      return o;
    };
    for (SegmentHandle* h = hint ? hint : &resolve(p);; h = &resolve(p)) {
      if (!h->enter_shared()) {
        h->wait_while_splitting();
        continue;
      }
      const uint64_t place = h->place.load(std::memory_order_acquire);
      if (!h->covers(place, p.hash)) {
        h->exit_shared();
        continue;
      }
      const Found f = find(h->base, p);
      if (f.match) {
        Outcome o = Outcome::kOk;
        Completion done;
        if (op == Op::kInsert) {
          o = Outcome::kExists;
        } else if (op == Op::kErase) {
          done = erase_slot(f.match, p);
          --delta;
        } else {
          o = update_slot(f.match, value, tid, cell, done);
        }
        h->exit_shared();
        complete(done, tid);
        if (op == Op::kErase) GPHASH_CRASH_POINT("hmeh.erase.after_tombstone");
        if (done.persist && op != Op::kErase) GPHASH_CRASH_POINT("hmeh.update.after_value");
        return finish(o);
      }
      if (op == Op::kUpdate || op == Op::kErase) {
        h->exit_shared();
        return finish(Outcome::kNotFound);
      }
      if (!f.free) {  // neither the probe buckets nor the stash has room: split, then look again
        h->exit_shared();
        const Outcome o = split(*h, place, tid);
        if (o == Outcome::kSplit) continue;
        return finish(o);
      }
      uint64_t word;
      if (has_heap_) {
        if (cell == kNoCell && (cell = new_cell(value, tid)) == kNoCell) {
          h->exit_shared();
          return Outcome::kNeedCell;
        }
        word = cell;
      } else {
        word = inline_word(value);
      }
      uint64_t expected = f.free_state;
      if (!Memory::cas(f.free, expected, fh::kSlotClaimed)) {  // another insert took it: look again
        h->exit_shared();
        continue;
      }
      GPHASH_CRASH_POINT("hmeh.insert.after_claim");
      const Completion done = link(f.free, p, word);
      cell = kNoCell;
      h->exit_shared();
      complete(done, tid);
      GPHASH_CRASH_POINT("hmeh.insert.after_publish");
      ++delta;
      return Outcome::kOk;
    }
  }

  Outcome apply(Op op, const Probe& p, const std::byte* in, std::byte* out, int tid, int64_t& delta,
                SegmentHandle* hint) {
    if (p.reserved) return Outcome::kReservedKey;
    if (op == Op::kSearch) return search(p, out, hint);
    return write(op, p, in, tid, delta, hint);
  }

  // ---- split -----------------------------------------------------------------------------

  // A published item of a segment being split, and its hash.
  struct Item {
    uint64_t slot[kSlotWords];
    uint64_t hash;
  };
  // A segment being built in private memory: its words and the slots taken in each bucket.
  struct Image {
    std::vector<uint64_t> words;
    std::vector<uint8_t> used;
  };
  // A part of a split segment's hash range and the new segment that holds it, built in
  // SplitScratch::images[image].
  struct Part {
    uint64_t prefix;
    uint32_t depth;
    uint32_t image;
    uint64_t segment = 0;
  };
  // A thread's buffers for its splits, kept from one split to the next: a split allocates nothing
  // once they have grown (allocating and zero-filling them took a third of a split's time).
  struct SplitScratch {
    std::vector<Item> items;
    std::vector<Image> images;
  };
  static SplitScratch& split_scratch() {
    thread_local SplitScratch scratch;
    return scratch;
  }

  Image& empty_image(SplitScratch& scratch, uint32_t i) const {
    if (scratch.images.size() <= i) scratch.images.resize(i + 1);
    Image& image = scratch.images[i];
    image.words.assign(geo_.bytes() / 8, 0);
    image.used.assign(geo_.buckets, 0);
    return image;
  }

  // Places a copy of `slot` in `image` by the placement rule. False when neither its probe
  // buckets nor the stash has room. An image's slots fill in order, so a bucket's count of used
  // slots says where its first free one is.
  bool place_in_image(Image& image, const uint64_t* slot, uint64_t hash) const {
    auto try_bucket = [&](uint32_t b) {
      if (image.used[b] == kSlotsPerBucket) return false;
      std::memcpy(image.words.data() + uint64_t{b} * kBucketWords + image.used[b]++ * kSlotWords, slot,
                  Slot::kSlotBytes);
      return true;
    };
    const uint32_t home = geo_.home_bucket(hash);
    for (uint32_t i = 0; i < geo_.probe; ++i)
      if (try_bucket(geo_.probe_bucket(home, i))) return true;
    for (uint32_t i = 0; i < geo_.stash; ++i)
      if (try_bucket(geo_.stash_bucket(i))) return true;
    return false;
  }

  // Splits the items of `prefix` at `depth` by the next hash bit into two parts. Usually each half
  // fits one segment; when one does not (many of its keys share home buckets: small segments, two
  // slots per bucket), the halves are split further (partition()). Parts come in prefix order.
  bool split_items(SplitScratch& scratch, uint64_t prefix, uint32_t depth, uint32_t max_depth,
                   std::vector<Part>& parts) const {
    if (depth + 1 > max_depth) return false;
    empty_image(scratch, 1);  // first: it may grow `images`
    Image* half[2] = {&empty_image(scratch, 0), &scratch.images[1]};
    bool fits = true;
    for (const Item& it : scratch.items)
      if (!(fits = place_in_image(*half[it.hash >> (63 - depth) & 1], it.slot, it.hash))) break;
    if (fits) {
      parts = {{prefix << 1, depth + 1, 0}, {prefix << 1 | 1, depth + 1, 1}};
      return true;
    }
    std::vector<const Item*> all;
    for (const Item& it : scratch.items) all.push_back(&it);
    return partition(scratch, all, prefix, depth, true, max_depth, parts);
  }

  // Splits `items` (all of `prefix` at `depth`) by the next hash bit until every part fits in one
  // segment, unless `must_split` is false and they fit one already.
  bool partition(SplitScratch& scratch, const std::vector<const Item*>& items, uint64_t prefix, uint32_t depth,
                 bool must_split, uint32_t max_depth, std::vector<Part>& parts) const {
    if (!must_split) {
      const auto i = static_cast<uint32_t>(parts.size());  // a part that does not fit leaves its image to the next
      Image& image = empty_image(scratch, i);
      bool fits = true;
      for (const Item* it : items)
        if (!(fits = place_in_image(image, it->slot, it->hash))) break;
      if (fits) {
        parts.push_back({prefix, depth, i});
        return true;
      }
    }
    if (depth + 1 > max_depth) return false;
    std::vector<const Item*> half[2];
    for (const Item* it : items) half[it->hash >> (63 - depth) & 1].push_back(it);
    return partition(scratch, half[0], prefix << 1, depth + 1, false, max_depth, parts) &&
           partition(scratch, half[1], prefix << 1 | 1, depth + 1, false, max_depth, parts);
  }

  uint64_t hash_of_slot(const uint64_t* slot) const {
    uint64_t key[kKeyWords];
    if constexpr (KeyWidth == 8)
      key[0] = fh::decode_key_word(slot[0]);
    else
      for (int i = 0; i < kKeyWords; ++i) key[i] = slot[Slot::kKeyWords[i]];
    return fh::key_hash<kKeyWords>(key, seed_);
  }

  // An id from `ids`, growing its arena by one chunk (`grow`, which publishes the new ids) when
  // none is free; nullopt when the arena cannot grow.
  //
  // Grow only if no other thread grew the arena since this one found no id: with many threads
  // splitting, several run out of ids at once and queue on meta_mutex_, and each one growing in
  // turn doubled the arena once per thread (a chunk is as large as the arena before it), so a
  // 16-thread load multiplied the segment arena by up to 2^16 and the pool ran past 64 GB. The
  // capacity is read before take(): read after, another thread's growth could slip in between.
  template <class Grow>
  std::optional<uint64_t> take_id(IdPool& ids, Grow&& grow) {
    for (;;) {
      const uint64_t seen = ids.capacity();
      if (auto id = ids.take()) return id;
      std::lock_guard lock(meta_mutex_);
      if (ids.capacity() != seen) continue;  // another thread grew it: take from the new chunk
      try {
        grow();
      } catch (const Error& e) {
        if (e.code() != ErrorCode::kNoSpace) throw;
        return std::nullopt;
      }
    }
  }

  // A segment id whose memory is there to write. The arena's chunks are populated by the splitting
  // threads, not when they are added (a chunk is as large as the arena before it, and populating
  // it at once held every splitting thread up). A thread populates fresh segments a run at a time,
  // each run the segments of one 2 MiB page-table page, and takes its next segments from its run:
  // populated one by one, the 16 threads' fresh segments were neighbours, and their page faults
  // queued on the one page-table lock of those pages (16 threads, 16 M keys: populating took
  // 1.3-2.7 of the splits' 2.2-3.7 thread-seconds, 0.2 of 0.9 at one thread). Runs are shorter
  // while the arena is small, so the threads' unused runs hold at most a quarter of it.
  std::optional<uint64_t> take_segment(int tid) {
    FreshRun& run = fresh_runs_[static_cast<size_t>(tid)];
    const Arena& arena = meta_.segments();
    for (;;) {
      const uint64_t seen = segment_ids_.capacity();
      bool written = false;
      if (auto id = segment_ids_.take_free(written)) {
        if (!written && !populate_segments(*id, 1)) {
          segment_ids_.give_back(*id);
          return std::nullopt;
        }
        return id;
      }
      if (run.next < run.end) return run.next++;
      const auto [first, n] = segment_ids_.take_fresh([&](uint64_t id) {
        const uint64_t chunk_end = arena.chunk_begin(arena.chunk_of(id)) + arena.chunk_units(arena.chunk_of(id));
        const uint64_t to_boundary = kRunBytes - reinterpret_cast<uintptr_t>(arena.address(id)) % kRunBytes;
        const uint64_t share = arena.capacity() / (4 * static_cast<uint64_t>(threads_));
        return std::max<uint64_t>(1, std::min({(to_boundary + geo_.bytes() - 1) / geo_.bytes(), share, chunk_end - id}));
      });
      if (n > 0) {
        if (!populate_segments(first, n)) {  // the file system is full: the ids go back, unwritten
          for (uint64_t id = first; id < first + n; ++id) segment_ids_.give_back(id);
          return std::nullopt;
        }
        run = {first + 1, first + n};
        return first;
      }
      std::lock_guard lock(meta_mutex_);
      if (segment_ids_.capacity() != seen) continue;  // another thread grew the arena (see take_id)
      try {
        meta_.grow_segments();
      } catch (const Error& e) {
        if (e.code() != ErrorCode::kNoSpace) throw;
        return std::nullopt;
      }
      add_handle_chunk(meta_.segments().chunks() - 1);  // handles exist before their ids are handed out
      segment_ids_.set_capacity(meta_.segments().capacity());
    }
  }

  // Gives segments [first, first + n) (contiguous in one chunk) their memory; false when the file
  // system is full.
  bool populate_segments(uint64_t first, uint64_t n) {
    try {
      pool_.populate(meta_.segments().address(first), n * geo_.bytes());
      return true;
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kNoSpace) throw;
      return false;
    }
  }

  std::optional<uint64_t> take_node() {
    return take_id(node_ids_, [&] {
      meta_.grow_nodes();
      node_ids_.set_capacity(meta_.nodes().capacity());
    });
  }

  // Writes and persists a new radix node.
  void write_node(uint64_t node, const uint64_t (&entries)[fh::kNodeEntries]) {
    uint64_t* at = node_entries(node);
    Memory::copy(at, entries, sizeof entries);
    mem_.persist(at, sizeof entries);
    GPHASH_CRASH_POINT("hmeh.split.after_node");
  }

  // The radix entry for hash prefix `q` of `bits` bits, inside the range the parts cover: the
  // part's segment if one part covers q (it fills one entry, or two when one bit shorter), else a
  // new node for the parts below q. New nodes are written and persisted here and listed in `made`.
  std::optional<uint64_t> entry_for(uint64_t q, uint32_t bits, const std::vector<Part>& parts,
                                    std::vector<uint64_t>& made) {
    for (const Part& p : parts)
      if (p.depth <= bits && q >> (bits - p.depth) == p.prefix) return fh::segment_entry(p.segment);
    const std::optional<uint64_t> node = take_node();
    if (!node) return std::nullopt;
    made.push_back(*node);
    uint64_t entries[fh::kNodeEntries];
    for (uint32_t e = 0; e < fh::kNodeEntries; ++e) {
      const auto entry = entry_for(q << fh::kRadixBits | e, bits + fh::kRadixBits, parts, made);
      if (!entry) return std::nullopt;
      entries[e] = *entry;
    }
    write_node(*node, entries);
    return fh::node_entry(*node);
  }

  // Splits the segment of `h`, which the caller saw at `place_seen` and found full. Returns
  // kSplit when the caller should look its key up again (this split or another one happened),
  // kTableFull when the segment cannot split.
  Outcome split(SegmentHandle& h, uint64_t place_seen, int tid) {
    if (!auto_resize_) return Outcome::kTableFull;
    if (!h.enter_exclusive()) {  // another thread is splitting it
      h.wait_while_splitting();
      return Outcome::kSplit;
    }
    if (h.place.load(std::memory_order_acquire) != place_seen) {  // split meanwhile
      h.exit_exclusive(false);
      return Outcome::kSplit;
    }
    const auto t0 = std::chrono::steady_clock::now();
    const uint32_t depth = SegmentHandle::depth_of(place_seen);
    const uint64_t prefix = SegmentHandle::prefix_of(place_seen);
    std::vector<Part> parts;
    std::vector<uint64_t> taken, made;  // new segments and radix nodes
    auto fail = [&] {
      for (uint64_t id : taken) segment_ids_.give_back(id, true);
      for (uint64_t n : made) node_ids_.give_back(n);
      h.exit_exclusive(false);
      return Outcome::kTableFull;
    };

    // Rehash the items into new segments by the next hash bit (or more, see split_items()).
    SplitScratch& scratch = split_scratch();
    std::vector<Item>& items = scratch.items;
    items.clear();
    for (uint32_t b = 0; b < geo_.buckets; ++b) {
      const uint64_t* bk = bucket(h.base, b);
      for (uint32_t s = 0; s < kSlotsPerBucket; ++s) {
        Item it;
        for (uint32_t w = 0; w < kSlotWords; ++w) it.slot[w] = Memory::load(bk + s * kSlotWords + w);
        if (!fh::is_published(it.slot[0])) continue;
        it.hash = hash_of_slot(it.slot);
        items.push_back(it);
      }
    }
    // Only when more than a segment's worth of keys share every hash bit down to the depth limit
    // can this fail; the table is then full for them, and nothing changes.
    if (!split_items(scratch, prefix, depth, fh::max_depth(meta_.segments().capacity()), parts)) return fail();
    for (Part& p : parts) {
      const std::optional<uint64_t> id = take_segment(tid);
      if (!id) return fail();
      taken.push_back(p.segment = *id);
    }
    for (const Part& p : parts) {
      std::byte* at = meta_.segments().address(p.segment);
      Memory::copy(at, scratch.images[p.image].words.data(), geo_.bytes());
      mem_.persist(at, geo_.bytes());
    }
    GPHASH_CRASH_POINT("hmeh.split.after_segments");

    std::optional<uint64_t> replaced_node;
    {
      std::lock_guard lock(dir_mutex_);
      const SegmentPlace where = locate_segment(meta_.arenas(), depth, prefix);
      uint64_t* entries = node_entries(where.node);
      for (uint32_t e = where.first; e < where.first + where.count; ++e)
        if (Memory::load(entries + e) != fh::segment_entry(h.id))
          throw Error(ErrorCode::kCorruptTable, "the radix directory does not hold a segment where its prefix leads");
      // One 8-byte store publishes all parts: a new node (one level down) in place of the
      // segment's one entry, or a copy of its node with its two entries replaced, in place of the
      // parent's entry.
      const std::optional<uint64_t> node = take_node();
      if (!node) return fail();
      made.push_back(*node);
      uint64_t fresh[fh::kNodeEntries];
      for (uint32_t e = 0; e < fh::kNodeEntries; ++e) {
        std::optional<uint64_t> entry;
        if (where.count == 1)
          entry = entry_for(prefix << fh::kRadixBits | e, depth + fh::kRadixBits, parts, made);
        else if (e == where.first || e == where.first + 1)
          entry = entry_for(prefix << 1 | (e - where.first), depth + 1, parts, made);
        else
          entry = Memory::load(entries + e);
        if (!entry) return fail();  // no radix node left: nothing was published
        fresh[e] = *entry;
      }
      write_node(*node, fresh);
      uint64_t* publish = where.count == 1 ? entries + where.first : where.parent_entry;
      if (where.count == 2) replaced_node = where.node;
      Memory::store(publish, fh::node_entry(*node));
      mem_.persist(publish, 8);
      GPHASH_CRASH_POINT("hmeh.split.after_publish");

      for (const Part& p : parts)
        handle(p.segment).place.store(SegmentHandle::place_of(p.prefix, p.depth), std::memory_order_release);
      for (const Part& p : parts) flat_.assign(p.prefix, p.depth, static_cast<uint32_t>(p.segment));
      h.place.store(SegmentHandle::kNoPlace, std::memory_order_release);
      live_.fetch_add(parts.size() - 1, std::memory_order_relaxed);
    }
    if (replaced_node) node_ids_.retire(*replaced_node);
    h.exit_exclusive(true);
    segment_ids_.give_back(h.id, true);  // after the version changed (see IdPool)
    splits_.fetch_add(1, std::memory_order_relaxed);
    {
      std::lock_guard lock(stats_mutex_);
      hstats_.deep_splits += parts.size() > 2;
      hstats_.split_load_sum += static_cast<double>(items.size()) / static_cast<double>(geo_.slots());
      last_split_seconds_ = seconds(t0, std::chrono::steady_clock::now());
      hstats_.split_seconds += last_split_seconds_;
    }
    return Outcome::kSplit;
  }

  // ---- recovery --------------------------------------------------------------------------

  // Maps the live segments' pages in bulk before the scan reads them: a fresh mapping of the pool
  // otherwise takes one page fault per 4 KiB, which made the scan run at 4 GB/s where memory gives
  // 30 (this VM, 160 M items). A hint only: a kernel without MADV_POPULATE_READ (Linux 5.14)
  // falls back to faulting.
  void prefault(const std::vector<uint64_t>& ids) const {
#ifdef MADV_POPULATE_READ
    std::vector<std::pair<std::byte*, uint64_t>> runs;  // adjacent segments of one chunk
    const Arena& a = meta_.segments();
    for (size_t i = 0; i < ids.size();) {
      size_t j = i + 1;
      while (j < ids.size() && ids[j] == ids[j - 1] + 1 && a.chunk_of(ids[j]) == a.chunk_of(ids[i]) &&
             (j - i) * a.unit_bytes() < (uint64_t{64} << 20))
        ++j;
      runs.emplace_back(a.address(ids[i]), (j - i) * a.unit_bytes());
      i = j;
    }
    parallel_for(threads_, runs.size(), 1, [&](int, uint64_t r) {
      (void)madvise(runs[r].first, runs[r].second, MADV_POPULATE_READ);
    });
#else
    (void)ids;
#endif
  }

  // One pass over the slots of the live segments: counts published items, marks the heap cells
  // they reference in `used`, and (after a crash) turns claims cut short into tombstones.
  uint64_t scan_slots(const std::vector<LiveSegment>& segments, bool clear_claims, std::vector<uint64_t>* used) {
    std::vector<uint64_t> ids;  // in arena order: the scan then mostly streams through memory
    ids.reserve(segments.size());
    for (const LiveSegment& s : segments) ids.push_back(s.id);
    std::sort(ids.begin(), ids.end());
    prefault(ids);
    const uint64_t heap_cells = has_heap_ ? meta_.heap().capacity() : 0;
    if (has_heap_) used->assign((heap_cells + 63) / 64, 0);
    std::vector<PaddedCount> counts(static_cast<size_t>(threads_));
    std::atomic<bool> bad{false};
    const bool heap = has_heap_;
    parallel_for(threads_, ids.size(), 16, [&](int tid, uint64_t i) {
      std::byte* base = meta_.segments().address(ids[i]);
      int64_t local = 0;
      for (uint32_t b = 0; b < geo_.buckets; ++b) {
        uint64_t* bk = bucket(base, b);
        // Ahead across page boundaries, where the hardware prefetcher stops.
        __builtin_prefetch(reinterpret_cast<const std::byte*>(bk) + 8 * fh::kBucketBytes);
        for (uint32_t s = 0; s < kSlotsPerBucket; ++s) {
          uint64_t* slot = bk + s * kSlotWords;
          const uint64_t state = Memory::load(slot);
          if (state == fh::kSlotClaimed && clear_claims) [[unlikely]] {
            // A tombstone, not EMPTY: items placed after this slot was claimed rely on its bucket
            // having no EMPTY slot.
            Memory::store(slot, fh::kSlotTombstone);
            mem_.persist(slot, 8);
            GPHASH_CRASH_POINT("hmeh.recovery.after_clear_claim");
          }
          const bool published = fh::is_published(state);
          local += published;
          if (!heap || !published) continue;
          const uint64_t cell = Memory::load(slot + Slot::kValueWord);
          if (cell >= heap_cells) {
            bad.store(true);
            continue;
          }
          const uint64_t bit = uint64_t{1} << (cell % 64);
          if (__atomic_fetch_or(&(*used)[cell / 64], bit, __ATOMIC_RELAXED) & bit) bad.store(true);
        }
      }
      counts[static_cast<size_t>(tid)].value += local;
    });
    if (bad.load())
      throw Error(ErrorCode::kCorruptTable,
                  "an HMEH slot references a value cell outside the heap or shared with another slot; run `gphash check`");
    uint64_t total = 0;
    for (const PaddedCount& c : counts) total += static_cast<uint64_t>(c.value);
    return total;
  }

  // ---- the batch driver ------------------------------------------------------------------

  uint32_t owner_of(uint64_t hash, int threads) const {
    // By prefix, a thread owns a range of segments; otherwise hash bits 32..63 remixed, which
    // neither the home bucket (bits 0..31) nor a shallow directory uses.
    const uint64_t bits = shard_by_prefix_ ? hash >> 32 : format::mix64(hash >> 32) >> 32;
    return static_cast<uint32_t>((bits * static_cast<uint64_t>(threads)) >> 32);
  }

  // Runs the operations at positions [begin, end) with the next ones' memory brought in ahead, in
  // three steps each on what the step before fetched: the directory entry (kDirectoryAhead), the
  // segment's handle (kHandleAhead), the probe buckets (kBucketsAhead). Before them the batch's
  // own key and value (kInputAhead): the shards run in their owners' order, a permutation of the
  // batch, so reading a key missed the cache every time (as in the GPHash CPU engine, whose load
  // profile showed it: cpu_engine_impl.h kInputLead). Stops at one that needs
  // the heap to grow past what the pool allows and returns its position (end when all ran).
  // (Against the buckets alone, 8 ahead: 16 threads, 16 M keys, searches 111-129 -> 137-139 M/s,
  // deletes 67-82 -> 102-107; bench/results/2026-11-29-hmeh-prefetch.)
  size_t run_range(const Batch& b, BatchShards& shards, size_t begin, size_t end, int tid, int64_t& delta) {
    struct Staged {
      Probe probe;
      SegmentHandle* handle;
      uint64_t version;  // the directory version the handle was looked up in
    };
    Staged ring[kDirectoryAhead];
    const size_t count = end - begin;
    auto input_step = [&](size_t k) {
      const size_t i = shards.index(begin + k);
      engine::cpu::prefetch_line(key_of(b, i));
      const Op op = op_of(b, i);
      if (op != Op::kSearch && op != Op::kErase && b.values) engine::cpu::prefetch_line(value_in(b, i));
    };
    auto entry_step = [&](size_t k) {
      Staged& s = ring[k % kDirectoryAhead];
      prepare(s.probe, key_of(b, shards.index(begin + k)));
      flat_.prefetch(s.probe.hash);
    };
    auto handle_step = [&](size_t k) {
      Staged& s = ring[k % kDirectoryAhead];
      s.version = flat_.version();
      s.handle = &resolve(s.probe);
      __builtin_prefetch(s.handle);
    };
    auto buckets_step = [&](size_t k) {
      const Staged& s = ring[k % kDirectoryAhead];
      const std::byte* home = s.handle->base + uint64_t{s.probe.home} * fh::kBucketBytes;
      __builtin_prefetch(home);
      if (geo_.probe > 1) __builtin_prefetch(home + fh::kBucketBytes);
    };
    const bool fetch_input = shards.permuted();  // in batch order the hardware prefetcher has them
    if (fetch_input)
      for (size_t k = kDirectoryAhead; k < std::min(count, kInputAhead); ++k) input_step(k);
    for (size_t k = 0; k < std::min(count, kDirectoryAhead); ++k) entry_step(k);
    for (size_t k = 0; k < std::min(count, kHandleAhead); ++k) handle_step(k);
    for (size_t k = 0; k < std::min(count, kBucketsAhead); ++k) buckets_step(k);
    for (size_t k = 0; k < count; ++k) {
      const size_t p = begin + k, i = shards.index(p);
      Staged& s = ring[k % kDirectoryAhead];
      // A handle looked up before the directory last changed is still safe to try (readers and
      // writers validate it), but would likely fail: look it up again.
      SegmentHandle* hint = s.version == flat_.version() ? s.handle : nullptr;
      const Outcome o = apply(op_of(b, i), s.probe, value_in(b, i), shards.value_out(p), tid, delta, hint);
      if (o == Outcome::kNeedCell) return p;
      shards.status(p) = to_status(o);
      if (fetch_input && k + kInputAhead < count) input_step(k + kInputAhead);
      if (k + kDirectoryAhead < count) entry_step(k + kDirectoryAhead);
      if (k + kHandleAhead < count) handle_step(k + kHandleAhead);
      if (k + kBucketsAhead < count) buckets_step(k + kBucketsAhead);
    }
    return end;
  }

  // An operation that found the heap full, run again with no other thread running: cells cached
  // by other threads are returned first; if none is free it fails with kHeapFull.
  void resolve_heap_full(const Batch& b, BatchShards& shards, size_t p, int64_t& delta) {
    cells_.reclaim_local_caches();
    const size_t i = shards.index(p);
    Probe probe;
    prepare(probe, key_of(b, i));
    shards.status(p) = to_status(apply(op_of(b, i), probe, value_in(b, i), shards.value_out(p), 0, delta, nullptr));
  }

  pool::Pool& pool_;
  IndexMeta meta_;
  Memory mem_;
  int threads_;
  bool auto_resize_, cross_kv_, shard_by_prefix_;
  fh::SegmentGeometry geo_{};
  uint64_t seed_ = 0;
  uint32_t value_width_ = 0;
  bool has_heap_ = false;

  SegmentHandles handles_;
  FlatDirectory flat_;
  IdPool segment_ids_, node_ids_;
  engine::cpu::CellAllocator cells_;
  std::mutex dir_mutex_;   // the radix tree and the flat directory change under it
  std::mutex meta_mutex_;  // arena and heap growth (header writes)

  uint64_t items_ = 0;
  std::atomic<uint64_t> live_{0};
  std::atomic<uint64_t> splits_{0};
  std::atomic<uint64_t> heap_grows_{0};
  std::vector<FreshRun> fresh_runs_ = std::vector<FreshRun>(static_cast<size_t>(threads_));
  std::mutex stats_mutex_;
  double last_split_seconds_ = 0;
  HmehStats hstats_;
  engine::EngineStats stats_;
  bool closed_ = false;
};

}  // namespace gphash::hmeh
