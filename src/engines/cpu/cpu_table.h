// The CPU engine's operations on one key, and the table-wide steps of resize and recovery. All
// pool stores go through Memory (memory.h), and every operation is lock-free on the pool: slot
// states change by 8-byte CAS (EMPTY -> INSERTING -> published, published -> EMPTY) and values by
// one CAS of the value word, so a crash leaves each slot old or new, never torn.
#pragma once

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engines/common/crash_point.h"
#include "engines/common/move_record.h"
#include "engines/common/table_meta.h"
#include "engines/cpu/cell_allocator.h"
#include "engines/cpu/memory.h"
#include "engines/cpu/tag_mirror.h"
#include "format/cell.h"
#include "format/hash.h"
#include "format/layout.h"
#include "format/shape.h"
#include "format/probe.h"
#include "format/slot.h"
#include "gphash/error.h"
#include "gphash/ops.h"

namespace gphash::engine::cpu {

enum class Outcome : uint8_t {
  kOk,
  kNotFound,
  kExists,
  kReservedKey,
  kNeedSlot,  // no free candidate slot: needs displacement or a resize (exclusive)
  kNeedCell,  // the heap has no free cell: needs heap growth (exclusive)
  kCorruptValue,  // search: the value fails its checksum (pools with value checksums)
};

template <class ShapeT, int KeyWidth, class Memory = DirectMemory>
class CpuTable {
 public:
  static constexpr int L = ShapeT::kLevels;
  static constexpr int H = ShapeT::kHashes;
  static constexpr int S = ShapeT::kSlots;
  static constexpr int kKeyWords = KeyWidth / 8;
  using Layout = format::StaticBucketLayout<KeyWidth, S>;
  static constexpr uint64_t kNoCell = CellAllocator::kNoCell;

  using Mirror = TagMirror<S>;
  using TagWord = typename Mirror::Word;

  // A key with its hashes, the state word its published copies carry and their tag.
  struct Probe {
    uint64_t key[kKeyWords];
    uint64_t hash[H];
    uint64_t published;
    uint8_t tag;
  };

  struct SlotRef {
    std::byte* bucket;
    uint32_t level;
    uint64_t index;
    uint32_t slot;
    format::SlotAddress address() const { return {level, index, slot}; }
  };

  CpuTable(TableMeta& meta, Memory memory, CellAllocator& cells) : meta_(meta), mem_(memory), cells_(cells) {
    refresh();
  }

  // Reloads level and heap addresses after the header changed (resize, heap growth).
  void refresh() {
    const format::PoolHeader& h = meta_.header();
    for (int j = 0; j < H; ++j) seed_[j] = format::hash_seed_for(h.gphash.hash_seed, j);
    bottom_ = meta_.bottom_level();
    top_ = meta_.top_level();
    highest_ = meta_.highest_level();
    for (uint32_t l = 0; l <= format::kMaxLevel; ++l) levels_[l] = h.gphash.level_offset[l] ? meta_.level(l) : nullptr;
    value_width_ = h.gphash.value_width;
    has_heap_ = meta_.has_heap();
    cell_size_ = h.gphash.cell_size;
    value_checksums_ = format::has_value_checksums(h);
    heap_ = format::heap_geometry(h);
    heap_cells_ = meta_.heap_cells();
    for (uint32_t c = 0; c < h.gphash.heap_chunk_count; ++c) chunk_[c] = meta_.pool().template at<std::byte>(h.gphash.heap_chunk_offset[c]);
    if (mirror_.on()) mirror_.keep_levels(bottom_, highest_);
  }

  // Builds the tag mirror from the pool and turns it on (after recovery: until then every path
  // reads the pool). One pass over the active levels' state words.
  void build_mirror(int threads) {
    mirror_.keep_levels(bottom_, highest_);
    for_each_slot(threads, [&](const SlotRef& at) {
      mirror_.set(at.level, at.index, at.slot, mirror_byte(Memory::load(state_word(at))));
    });
    mirror_.set_on(true);
  }

  // Slots whose mirror byte disagrees with the pool (tests: must be 0 between batches).
  uint64_t mirror_mismatches(int threads) {
    if (!mirror_.on()) return 0;
    std::atomic<uint64_t> bad{0};
    for_each_slot(threads, [&](const SlotRef& at) {
      if (mirror_.get(at.level, at.index, at.slot) != mirror_byte(Memory::load(state_word(at)))) bad.fetch_add(1);
    });
    return bad.load();
  }

  void prepare(Probe& p, const void* key) const {
    std::memcpy(p.key, key, KeyWidth);
    for (int j = 0; j < H; ++j) p.hash[j] = format::xxh64_words<kKeyWords>(p.key, seed_[j]);
    if constexpr (Layout::kKeyIsState)
      p.published = format::encode_key_word(p.key[0]);
    else
      p.published = format::fingerprint(p.hash[0], p.hash[H - 1]);
    p.tag = Mirror::tag_of_state(p.published);
  }

  // The first hash alone (what the batch driver shards by), without the rest of prepare().
  uint64_t first_hash(const void* key) const {
    uint64_t words[kKeyWords];
    std::memcpy(words, key, KeyWidth);
    return format::xxh64_words<kKeyWords>(words, seed_[0]);
  }

  void prefetch(const Probe& p) const { prefetch(p, bottom_, top_); }
  // p's candidate buckets in levels [lo, hi], and their tag words when the mirror is on.
  void prefetch(const Probe& p, uint32_t lo, uint32_t hi) const {
    prefetch_tags(p, lo, hi);
    for (uint32_t level = lo; level <= hi; ++level)
      for (int j = 0; j < H; ++j) {
        const std::byte* b = bucket(level, format::bucket_at(p.hash[j], level));
        prefetch_line(b);
        if constexpr (Layout::kKeyIsState && Layout::kBytes > 64) prefetch_line(b + 64);
      }
  }

  // The batch driver's two prefetch stages (the mirror on): first the tag words of p's
  // candidate buckets; a few operations later (the tags cached by then) the pool's lines that the
  // operation will read: the slots whose tag matches, and for a write that matches none, the slot
  // the insert rule would take and its tag word, both for writing. The insert's claim is a locked
  // instruction on that tag word, which other threads read too (a key's second-hash buckets lie
  // in every thread's range): fetched for reading only, the claim waited for the line to be given
  // up, 37% of apply()'s samples in a 16-thread load of 16 M keys (perf, H200 machine's Xeon).
  void prefetch_tags(const Probe& p, uint32_t lo, uint32_t hi) const {
    if (!mirror_.on()) return;
    for (uint32_t level = lo; level <= hi; ++level)
      for (int j = 0; j < H; ++j) prefetch_line(mirror_.address(level, format::bucket_at(p.hash[j], level)));
  }
  void prefetch_tags(const Probe& p) const { prefetch_tags(p, bottom_, top_); }
  // Every line of p's candidate buckets in the top level (Engine::prefetch of a key or two).
  void prefetch_top_buckets(const Probe& p) const {
    for (int j = 0; j < H; ++j) {
      const std::byte* b = bucket(top_, format::bucket_at(p.hash[j], top_));
      for (uint32_t at = 0; at < Layout::kBytes; at += 64) prefetch_line(b + at);
    }
  }
  bool mirror_on() const { return mirror_.on(); }
  void prefetch_slots(const Probe& p, bool may_add) const {
    const uint32_t lo = bottom_, hi = top_;
    uint32_t best_score = ~0u;
    const std::byte* target = nullptr;
    const void* target_tags = nullptr;
    int target_slot = 0;
    bool matched = false;
    for_each_bucket_by_rank(p, lo, hi, [&](uint32_t level, uint64_t index, int j) {
      const TagWord tags = mirror_.word(level, index);
      const std::byte* b = bucket(level, index);
      for (TagWord m = Mirror::match_mask(tags, p.tag); m; m &= m - 1) {
        const SlotRef at{const_cast<std::byte*>(b), level, index, static_cast<uint32_t>(Mirror::first_slot(m))};
        prefetch_line(state_word(at));
        if constexpr (!Layout::kKeyIsState) prefetch_line(key_bytes(at));
        matched = true;
      }
      if (may_add && !matched) {
        const TagWord empty = Mirror::match_mask(tags, Mirror::kEmpty);
        const uint32_t score = format::target_score(S - Mirror::count(empty), static_cast<int>(level - lo), j,
                                                    static_cast<int>(hi - lo + 1));
        if (empty && score < best_score) {
          best_score = score;
          target = b;
          target_tags = mirror_.address(level, index);
          target_slot = Mirror::first_slot(empty);
        }
      }
      return false;
    });
    if (target && !matched) {
      const SlotRef at{const_cast<std::byte*>(target), 0, 0, static_cast<uint32_t>(target_slot)};
      prefetch_for_write(state_word(at));
      if constexpr (!Layout::kKeyIsState) prefetch_for_write(key_bytes(at));
      prefetch_for_write(target_tags);
    }
  }

  // One operation on one key. `count_delta` accumulates the change in the number of items.
  Outcome apply(Op op, const Probe& p, const std::byte* value_in, std::byte* value_out, int tid, int64_t& count_delta) {
    if constexpr (Layout::kKeyIsState)
      if (format::is_reserved_key(p.key[0])) return Outcome::kReservedKey;
    uint64_t cell = kNoCell;  // a cell written for this call but not yet linked to a slot
    auto finish = [&](Outcome o) {
      if (cell != kNoCell) cells_.release(tid, cell);
      return o;
    };
    if (op == Op::kSearch) {
      SlotRef at;
      if (!find_valid(p, at)) return Outcome::kNotFound;
      if (value_out && !read_value(at, p, value_out)) return Outcome::kCorruptValue;
      return Outcome::kOk;
    }
    for (;;) {
      // The key's copy is looked for in valid-copy rank order and the look stops there, usually
      // after the first bucket or two, without waiting for every candidate bucket's miss: at most
      // one published slot holds a key once recovery ran (docs/FORMAT.md; any other duplicate is
      // damage, which repair drops). Only an absent key has every candidate bucket read, which
      // picks the insert target in the same pass. Stopping at the copy, 16-core Xeon, 16 M 8-byte
      // keys, 16 threads: deletes 45-48 -> 77-84 M/s, YCSB A 53-57 -> 65-74 against scanning every
      // bucket (bench/results/2026-11-29-cpu-engine-writes, measured with a find_valid pass before
      // the scan; the one pass was measured on the 2-core VM only); checking the other buckets for
      // a second copy kept under half the gain.
      const Scan s = scan(p, bottom_, top_, /*stop_at_match=*/true);
      if (s.found) {
        if (op == Op::kInsert) return finish(Outcome::kExists);
        if (op != Op::kErase) return finish(write_value(s.match, p, value_in, tid, cell));  // update, upsert
        uint64_t expected = p.published;
        const uint64_t old_cell = has_heap_ ? Memory::load(value_word(s.match)) : kNoCell;
        if (!Memory::cas(state_word(s.match), expected, format::kSlotEmpty)) continue;  // changed under us: look again
        mem_.persist(state_word(s.match), 8);
        GPHASH_CRASH_POINT("erase.after_cas");
        if (mirror_.on()) mirror_.set(s.match.level, s.match.index, s.match.slot, Mirror::kEmpty);
        if (has_heap_) cells_.release(tid, old_cell);
        --count_delta;
        return finish(Outcome::kOk);
      }
      if (op == Op::kErase || op == Op::kUpdate) return finish(Outcome::kNotFound);
      if (!s.has_free) return finish(Outcome::kNeedSlot);
      uint64_t word;
      if (has_heap_) {
        if (cell == kNoCell && (cell = new_cell(value_in, p, tid)) == kNoCell) return Outcome::kNeedCell;
        word = cell;
      } else {
        word = inline_word(value_in);
      }
      if (!claim(s.free)) continue;  // another insert took it
      GPHASH_CRASH_POINT("insert.after_claim");
      link(s.free, p, word);
      cell = kNoCell;
      ++count_delta;
      return Outcome::kOk;
    }
  }

  // Makes room among p's candidates by moving one item to a free slot among its own candidates.
  // Exclusive: no other operation may run. The move is bracketed by the maintenance record so
  // recovery can drop the second copy if a crash leaves both.
  bool displace_for(const Probe& p) { return displace_for(p, bottom_, top_); }
  // The same among p's candidate buckets in levels [lo, hi] (a rehash: the levels above the bottom).
  bool displace_for(const Probe& p, uint32_t lo, uint32_t hi) {
    return for_each_item_to_displace(p, lo, hi, [&](const SlotRef& from, const Probe& other) {
      const Scan os = scan(other, lo, hi, /*stop_at_match=*/false);  // other's own slot matches
      if (!os.has_free) return false;
      move(from, os.free, other);
      return true;
    });
  }

  // Prefetches the candidate buckets of the item displace_for(p) tries first (p's buckets should be
  // cached already: this reads them).
  void prefetch_displacement(const Probe& p) const {
    for_each_item_to_displace(p, bottom_, top_, [&](const SlotRef&, const Probe& other) {
      prefetch(other);
      return true;
    });
  }

  // Resize, step 2: moves every item of the bottom level into the levels above it (the new top
  // included). Idempotent: an item already copied up is only cleared below, so a resize
  // interrupted by a crash resumes by calling this again (`fresh` false).
  //
  // A fresh resize streams (stream_bottom). A resumed one may meet items copied up already, so it
  // looks for each item's copy first and places the rest by the insert rule, with claims, software-
  // pipelined like the batch driver: an item's candidate buckets above (and their tag words) are
  // prefetched kRehashAhead items before it is copied. The source slot is cleared by a plain
  // store: nothing else runs during a rehash, and each bottom bucket is one thread's.
  void rehash_bottom(int threads, bool fresh) {
    if (fresh && stream_bottom(threads)) return;
    rehash_by_rule(threads);
  }

  // A fresh resize: nothing above holds a bottom item yet, and the new top level is empty. An item
  // goes to its bucket in the new top under the hash that placed it in its bottom bucket: the items
  // of bottom bucket i have those buckets in [i << d, (i + 1) << d) (d levels apart), which no other
  // bottom bucket's items map to, and at most S of them go to one bucket (bucket i holds S). So each
  // thread fills a range of the new top of its own, in order, with plain stores: no claim, no look
  // at any other candidate, no random line. By the insert rule instead (rehash_by_rule) each item
  // read its four candidates' tags, prefetched their lines and claimed its slot with a locked
  // instruction. 16-core Xeon, a load of 16 M keys from 64 K slots (eight resizes): one thread
  // 0.80 -> 0.40 s of resizes (two machines alike in one-thread searches); 16 threads 0.10-0.13 ->
  // 0.08-0.11 s, so there the time goes elsewhere (not yet measured apart: faulting the new level
  // in, freeing the old one; bench/results/2026-11-29-load-factor). Returns false when an item
  // found its bucket full or is in no bucket of its own (a damaged table): the rest is left to
  // rehash_by_rule.
  bool stream_bottom(int threads) {
    const uint32_t level = bottom_, top = highest_;
    const uint64_t buckets = format::level_buckets(level);
    constexpr uint64_t kChunk = 256;  // bottom buckets a thread takes at a time
    const uint64_t chunks = (buckets + kChunk - 1) / kChunk;
    std::atomic<bool> unplaced{false};
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
    for (uint64_t c = 0; c < chunks; ++c) {
      const uint64_t end = std::min(buckets, (c + 1) * kChunk);
      for (uint64_t index = c * kChunk; index < end; ++index) {
        std::byte* b = bucket(level, index);
        for (int s = 0; s < S; ++s) {
          const SlotRef from{b, level, index, static_cast<uint32_t>(s)};
          const uint64_t state = Memory::load(state_word(from));
          if (!format::is_published(state)) continue;
          Probe item;
          load_probe(from, state, item);
          int j = 0;
          while (j < H && format::bucket_at(item.hash[j], level) != index) ++j;
          SlotRef to;
          if (j == H || !empty_slot(top, format::bucket_at(item.hash[j], top), to)) {
            unplaced.store(true, std::memory_order_relaxed);
            continue;
          }
          link(to, item, Memory::load(value_word(from)));
          clear_below(from);
        }
      }
    }
    return !unplaced.load();
  }

  // The first empty slot of a bucket (by its tags when the mirror is on).
  bool empty_slot(uint32_t level, uint64_t index, SlotRef& out) const {
    std::byte* b = bucket(level, index);
    if (mirror_.on()) {
      const TagWord empty = Mirror::match_mask(mirror_.word(level, index), Mirror::kEmpty);
      if (!empty) return false;
      out = SlotRef{b, level, index, static_cast<uint32_t>(Mirror::first_slot(empty))};
      return true;
    }
    for (int s = 0; s < S; ++s) {
      const SlotRef at{b, level, index, static_cast<uint32_t>(s)};
      if (Memory::load(state_word(at)) == format::kSlotEmpty) {
        out = at;
        return true;
      }
    }
    return false;
  }

  // The rehash of a resumed resize (and of what stream_bottom could not place): by the insert rule.
  void rehash_by_rule(int threads) {
    const uint32_t level = bottom_;
    std::atomic<bool> unplaced{false};
    constexpr uint64_t kChunk = 256;  // buckets a thread takes at a time
    const uint64_t chunks = (format::level_buckets(level) + kChunk - 1) / kChunk;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
    for (uint64_t c = 0; c < chunks; ++c) {
      struct Pending {
        SlotRef from;
        Probe item;
      } ring[kRehashAhead];
      size_t staged = 0, done = 0;
      auto copy = [&](Pending& q) {
        if (!copy_up(q.from, q.item)) {
          unplaced.store(true);
          return;
        }
        clear_below(q.from);
      };
      const uint64_t end = std::min(format::level_buckets(level), (c + 1) * kChunk);
      for (uint64_t index = c * kChunk; index < end; ++index) {
        std::byte* b = bucket(level, index);
        for (int s = 0; s < S; ++s) {
          SlotRef from{b, level, index, static_cast<uint32_t>(s)};
          const uint64_t state = Memory::load(state_word(from));
          if (!format::is_published(state)) continue;
          if (staged - done == kRehashAhead) copy(ring[done++ % kRehashAhead]);
          Pending& q = ring[staged++ % kRehashAhead];
          q.from = from;
          load_probe(from, state, q.item);
          prefetch(q.item, level + 1, highest_);
        }
      }
      while (done < staged) copy(ring[done++ % kRehashAhead]);
    }
    if (unplaced.load()) place_by_displacement();
  }

  // What the insert rule left in the bottom level because every candidate slot above it was full
  // (a resumed resize of a small table, where the items placed by rule took the slots others
  // needed): one item at a time, after moving an item out of its candidate buckets above to a free
  // slot among that item's own, as an insert's displacement does (alone: nothing else runs during
  // a rehash; the maintenance record brackets the move). Before, the open failed with
  // kCorruptTable and every reopen met the same full slots.
  void place_by_displacement() {
    const uint32_t level = bottom_;
    for (uint64_t index = 0; index < format::level_buckets(level); ++index) {
      std::byte* b = bucket(level, index);
      for (int s = 0; s < S; ++s) {
        const SlotRef from{b, level, index, static_cast<uint32_t>(s)};
        const uint64_t state = Memory::load(state_word(from));
        if (!format::is_published(state)) continue;
        Probe item;
        load_probe(from, state, item);
        if (!copy_up(from, item) && !(displace_for(item, level + 1, highest_) && copy_up(from, item)))
          throw Error(ErrorCode::kCorruptTable,
                      "resize could not place every item of the bottom level, not even by displacement; the pool "
                      "stays in resize state");
        clear_below(from);
      }
    }
  }

  // Rehash: an item's bottom copy, once it is copied up, is dropped.
  void clear_below(const SlotRef& from) {
    GPHASH_CRASH_POINT("rehash.after_copy_up");
    Memory::store(state_word(from), format::kSlotEmpty);
    mem_.persist(state_word(from), 8);
    GPHASH_CRASH_POINT("rehash.after_clear");
  }

  // Recovery: a slot left INSERTING was never published, so it is empty.
  void clear_inserting(int threads) {
    for_each_slot(threads, [&](const SlotRef& at) {
      if (Memory::load(state_word(at)) == format::kSlotInserting) {
        Memory::store(state_word(at), format::kSlotEmpty);
        mem_.persist(state_word(at), 8);
        GPHASH_CRASH_POINT("recovery.after_clear_inserting_slot");
      }
    });
  }

  // Recovery: finishes or undoes the move the maintenance record names.
  void resolve_move_record() {
    format::MaintenanceRecord* rec = meta_.pool().maintenance();
    const auto move = validate_move_record(meta_.header(), Memory::load(&rec->move_state), Memory::load(&rec->move_from),
                                           Memory::load(&rec->move_to), Memory::load(&rec->move_checksum));
    if (!move) return;
    const format::SlotAddress from = move->from, to = move->to;
    SlotRef f = ref(from), t = ref(to);
    uint64_t fs = Memory::load(state_word(f)), ts = Memory::load(state_word(t));
    if (format::is_published(fs) && fs == ts && same_key(f, t)) {
      Memory::store(state_word(f), format::kSlotEmpty);  // the copy is complete: drop the original
      mem_.persist(state_word(f), 8);
      GPHASH_CRASH_POINT("recovery.after_drop_move_source");
    }
    Memory::store(&rec->move_state, format::kMoveIdle);
    mem_.persist(&rec->move_state, 8);
    GPHASH_CRASH_POINT("recovery.after_move_record_idle");
  }

  // Export (Engine::export_items): published items of the slots from `position` on, in slot order,
  // into `keys` / `values` (host memory) until `capacity` are written.
  size_t export_items(uint64_t& position, std::byte* keys, std::byte* values, size_t capacity, uint64_t& damaged) const {
    size_t n = 0;
    uint64_t first = 0;  // slot index of the first slot of `level`
    for (uint32_t level = bottom_; level <= top_ && n < capacity; ++level) {
      const uint64_t slots = format::level_buckets(level) * S;
      for (uint64_t k = std::max(position, first); k < first + slots && n < capacity; ++k) {
        const SlotRef at{bucket(level, (k - first) / S), level, (k - first) / S, static_cast<uint32_t>((k - first) % S)};
        position = k + 1;
        const uint64_t state = Memory::load(state_word(at));
        if (!format::is_published(state)) continue;
        Probe p;
        load_probe(at, state, p);
        if (values && !read_value(at, p, values + n * value_width_)) {
          ++damaged;
          continue;
        }
        std::memcpy(keys + n * KeyWidth, p.key, KeyWidth);
        ++n;
      }
      first += slots;
    }
    if (n < capacity) position = ~uint64_t{0};  // the table ended
    return n;
  }

  // Published slots of each active level, bottom first.
  std::vector<uint64_t> level_items(int threads) {
    std::vector<uint64_t> counts;
    for (uint32_t level = bottom_; level <= top_; ++level) {
      uint64_t items = 0;
      const uint64_t n = format::level_buckets(level);
#pragma omp parallel for num_threads(threads) schedule(static, 4096) reduction(+ : items)
      for (uint64_t index = 0; index < n; ++index)
        for (int s = 0; s < S; ++s)
          items += format::is_published(Memory::load(state_word(SlotRef{bucket(level, index), level, index, static_cast<uint32_t>(s)})));
      counts.push_back(items);
    }
    return counts;
  }

  // Counts published slots and marks the heap cells they reference (one bit per cell). A
  // reference outside the heap, or two slots sharing a cell, is corruption. With
  // `clear_inserting` (recovery) the same pass empties slots left INSERTING.
  uint64_t count_and_mark_cells(int threads, std::vector<uint64_t>* used, bool clear_inserting = false) {
    if (has_heap_) used->assign((heap_cells_ + 63) / 64, 0);
    // One counter per thread: a shared atomic per bucket made this pass three times slower.
    struct alignas(64) Count {
      uint64_t n = 0;
    };
    std::vector<Count> items(static_cast<size_t>(std::max(threads, 1)));
    std::atomic<bool> bad{false};
    for_each_bucket(threads, [&](std::byte* b, uint32_t level, uint64_t index) {
      uint64_t local = 0;
      for (int s = 0; s < S; ++s) {
        SlotRef at{b, level, index, static_cast<uint32_t>(s)};
        const uint64_t state = Memory::load(state_word(at));
        if (clear_inserting && state == format::kSlotInserting) {
          Memory::store(state_word(at), format::kSlotEmpty);
          mem_.persist(state_word(at), 8);
          GPHASH_CRASH_POINT("recovery.after_clear_inserting_slot");
        }
        if (!format::is_published(state)) continue;
        ++local;
        if (!has_heap_) continue;
        uint64_t cell = Memory::load(value_word(at));
        if (cell >= heap_cells_) {
          bad.store(true);
          continue;
        }
        uint64_t bit = uint64_t{1} << (cell % 64);
        if (__atomic_fetch_or(&(*used)[cell / 64], bit, __ATOMIC_RELAXED) & bit) bad.store(true);
      }
      items[static_cast<size_t>(omp_get_thread_num())].n += local;
    });
    if (bad.load())
      throw Error(ErrorCode::kCorruptTable,
                  "a slot references a value cell outside the heap or shared with another slot; run `gphash check`");
    uint64_t total = 0;
    for (const Count& c : items) total += c.n;
    return total;
  }

 private:
  static constexpr size_t kRehashAhead = 8;

  struct Scan {
    SlotRef match;          // the key's valid copy (the first in rank order), when found
    bool found = false;
    SlotRef free;           // the insert target: first empty slot of the best candidate bucket
    bool has_free = false;  // (over every candidate bucket only when no copy stopped the scan)
  };

  std::byte* bucket(uint32_t level, uint64_t index) const { return levels_[level] + index * Layout::kBytes; }
  SlotRef ref(format::SlotAddress a) const { return {bucket(a.level, a.bucket), a.level, a.bucket, a.slot}; }
  static uint64_t* state_word(const SlotRef& r) {
    return reinterpret_cast<uint64_t*>(r.bucket + Layout::kStateOffset + r.slot * Layout::kStateStride);
  }
  static std::byte* key_bytes(const SlotRef& r) { return r.bucket + Layout::kKeyOffset + r.slot * Layout::kKeyStride; }
  static uint64_t* value_word(const SlotRef& r) {
    return reinterpret_cast<uint64_t*>(r.bucket + Layout::kValueOffset + r.slot * Layout::kValueStride);
  }
  std::byte* cell_at(uint64_t cell) const {
    uint32_t c = heap_.chunk_of(cell);
    return chunk_[c] + (cell - heap_.chunk_begin(c)) * cell_size_;
  }

  static bool repeated_bucket(const Probe& p, uint32_t level, int j) { return format::repeated_bucket(p.hash, level, j); }

  bool key_matches(const SlotRef& at, const Probe& p) const {
    if constexpr (Layout::kKeyIsState) return true;  // the state word is the key
    else return std::memcmp(key_bytes(at), p.key, KeyWidth) == 0;
  }
  bool same_key(const SlotRef& a, const SlotRef& b) const {
    if constexpr (Layout::kKeyIsState) return true;
    else return std::memcmp(key_bytes(a), key_bytes(b), KeyWidth) == 0;
  }

  // The items in p's candidate buckets of levels [lo, hi], in the order displacement tries them:
  // f(slot, item) until it returns true (then this does too).
  template <class F>
  bool for_each_item_to_displace(const Probe& p, uint32_t lo, uint32_t hi, F&& f) const {
    for (uint32_t level = hi + 1; level-- > lo;)
      for (int j = 0; j < H; ++j) {
        if (repeated_bucket(p, level, j)) continue;
        const uint64_t index = format::bucket_at(p.hash[j], level);
        std::byte* b = bucket(level, index);
        for (int s = 0; s < S; ++s) {
          const SlotRef at{b, level, index, static_cast<uint32_t>(s)};
          const uint64_t state = Memory::load(state_word(at));
          if (!format::is_published(state)) continue;
          Probe item;
          load_probe(at, state, item);
          if (f(at, item)) return true;
        }
      }
    return false;
  }

  // p's candidate buckets in levels [lo, hi] in the order of the valid-copy rank (format/probe.h:
  // highest level first, then lowest bucket; a bucket two hash functions name is visited once, as
  // the lower one's): f(level, index, j) until it returns true (then this does too). So the first
  // copy of p met is the valid one, and a look that stops there reads no further bucket.
  template <class F>
  bool for_each_bucket_by_rank(const Probe& p, uint32_t lo, uint32_t hi, F&& f) const {
    for (uint32_t level = hi + 1; level-- > lo;) {
      if constexpr (H == 2) {  // the shapes in use: no sort
        const uint64_t i0 = format::bucket_at(p.hash[0], level), i1 = format::bucket_at(p.hash[1], level);
        if (i1 < i0) {
          if (f(level, i1, 1) || f(level, i0, 0)) return true;
        } else if (f(level, i0, 0) || (i1 != i0 && f(level, i1, 1))) {
          return true;
        }
      } else {
        struct Candidate {
          uint64_t index;
          int j;
        } c[H];
        for (int j = 0; j < H; ++j) c[j] = {format::bucket_at(p.hash[j], level), j};
        std::sort(c, c + H, [](const Candidate& x, const Candidate& y) { return x.index != y.index ? x.index < y.index : x.j < y.j; });
        for (int k = 0; k < H; ++k) {
          if (k > 0 && c[k].index == c[k - 1].index) continue;
          if (f(level, c[k].index, c[k].j)) return true;
        }
      }
    }
    return false;
  }

  // Reads p's candidate buckets in levels [lo, hi] for its valid copy and the insert target (by
  // the probe rules, format/probe.h). With stop_at_match it stops at the copy, and `free` is then
  // the best target among the buckets read so far only.
  Scan scan(const Probe& p, uint32_t lo, uint32_t hi, bool stop_at_match) const {
    Scan r;
    uint32_t best_score = ~0u;
    for_each_bucket_by_rank(p, lo, hi, [&](uint32_t level, uint64_t index, int j) {
      std::byte* b = bucket(level, index);
      int load = 0, first_empty = -1;
      if (mirror_.on()) {
        const TagWord tags = mirror_.word(level, index);
        if (!r.found)
          for (TagWord m = Mirror::match_mask(tags, p.tag); m; m &= m - 1) {
            const SlotRef at{b, level, index, static_cast<uint32_t>(Mirror::first_slot(m))};
            if (Memory::load(state_word(at)) == p.published && key_matches(at, p)) {
              r.match = at;
              r.found = true;
              if (stop_at_match) return true;
              break;
            }
          }
        const TagWord empty = Mirror::match_mask(tags, Mirror::kEmpty);
        load = S - Mirror::count(empty);
        if (empty) first_empty = Mirror::first_slot(empty);
      } else {
        for (int s = 0; s < S; ++s) {
          const SlotRef at{b, level, index, static_cast<uint32_t>(s)};
          const uint64_t state = Memory::load(state_word(at));
          if (state == format::kSlotEmpty) {
            if (first_empty < 0) first_empty = s;
            continue;
          }
          ++load;
          if (!r.found && state == p.published && key_matches(at, p)) {
            r.match = at;
            r.found = true;
            if (stop_at_match) return true;
          }
        }
      }
      const uint32_t score = format::target_score(load, static_cast<int>(level - lo), j, static_cast<int>(hi - lo + 1));
      if (first_empty >= 0 && score < best_score) {
        best_score = score;
        r.free = SlotRef{b, level, index, static_cast<uint32_t>(first_empty)};
        r.has_free = true;
      }
      return false;
    });
    return r;
  }

  // Search: the valid copy of p (scan() without the target's bookkeeping). A key in the top level
  // is found after one or two buckets instead of all L*H; a miss reads all.
  bool find_valid(const Probe& p, SlotRef& out) const {
    return for_each_bucket_by_rank(p, bottom_, top_, [&](uint32_t level, uint64_t index, int) {
      std::byte* b = bucket(level, index);
      if (mirror_.on()) {
        for (TagWord m = Mirror::match_mask(mirror_.word(level, index), p.tag); m; m &= m - 1) {
          const SlotRef at{b, level, index, static_cast<uint32_t>(Mirror::first_slot(m))};
          if (Memory::load(state_word(at)) == p.published && key_matches(at, p)) {
            out = at;
            return true;
          }
        }
        return false;
      }
      for (int s = 0; s < S; ++s) {
        const SlotRef at{b, level, index, static_cast<uint32_t>(s)};
        if (Memory::load(state_word(at)) == p.published && key_matches(at, p)) {
          out = at;
          return true;
        }
      }
      return false;
    });
  }

  uint64_t inline_word(const std::byte* value) const {
    uint64_t w = 0;
    std::memcpy(&w, value, value_width_);
    return w;
  }

  // A cell holding `value` (and, with value checksums, its checksum for key p), persisted before
  // any slot can reference it.
  uint64_t new_cell(const std::byte* value, const Probe& p, int tid) {
    uint64_t cell = cells_.allocate(tid);
    if (cell == kNoCell) return kNoCell;
    std::byte* dst = cell_at(cell);
    Memory::copy(dst, value, value_width_);
    if (value_checksums_) {
      const uint64_t sum = format::value_checksum(value, value_width_, p.hash[0]);
      Memory::copy(dst + format::cell_checksum_offset(cell_size_), &sum, 8);
      mem_.persist(dst, cell_size_);
    } else {
      mem_.persist(dst, value_width_);
    }
    GPHASH_CRASH_POINT("heap.after_cell_write");
    return cell;
  }

  // Out-of-place update: the new value is durable before one CAS makes it the slot's value.
  Outcome write_value(const SlotRef& at, const Probe& p, const std::byte* value, int tid, uint64_t& cell) {
    uint64_t* vw = value_word(at);
    uint64_t desired;
    if (has_heap_) {
      if (cell == kNoCell && (cell = new_cell(value, p, tid)) == kNoCell) return Outcome::kNeedCell;
      desired = cell;
    } else {
      desired = inline_word(value);
    }
    uint64_t old = Memory::load(vw);
    while (!Memory::cas(vw, old, desired)) {
    }
    mem_.persist(vw, 8);
    GPHASH_CRASH_POINT("update.after_value_cas");
    if (has_heap_) {
      cells_.release(tid, old);
      cell = kNoCell;
    }
    return Outcome::kOk;
  }

  // Copies the value of the slot to `out`; false when it fails its checksum (then `out` holds the
  // damaged bytes, which the caller must not report as the value).
  bool read_value(const SlotRef& at, const Probe& p, std::byte* out) const {
    uint64_t w = Memory::load(value_word(at));
    if (!has_heap_) {
      std::memcpy(out, &w, value_width_);
      return true;
    }
    const std::byte* c = cell_at(w);
    std::memcpy(out, c, value_width_);
    if (!value_checksums_) return true;
    uint64_t stored;
    std::memcpy(&stored, c + format::cell_checksum_offset(cell_size_), 8);
    return stored == format::value_checksum(out, value_width_, p.hash[0]);
  }

  // Fills a claimed slot (claim()) and publishes it: key and value word are durable before the
  // state word says the slot holds them.
  void link(const SlotRef& at, const Probe& p, uint64_t value_word_bits) {
    if constexpr (!Layout::kKeyIsState) {
      Memory::copy(key_bytes(at), p.key, KeyWidth);
      mem_.persist(key_bytes(at), KeyWidth);
      GPHASH_CRASH_POINT("link.after_key");
    }
    Memory::store(value_word(at), value_word_bits);
    mem_.persist(value_word(at), 8);
    GPHASH_CRASH_POINT("link.after_value_word");
    Memory::store(state_word(at), p.published);
    mem_.persist(state_word(at), 8);
    GPHASH_CRASH_POINT("link.after_publish");
    if (mirror_.on()) mirror_.set(at.level, at.index, at.slot, p.tag);
  }

  // Takes an empty slot for link(). With the mirror on, inserts race for it there, in DRAM, and
  // the pool's state word stays EMPTY until link() publishes it: no locked instruction on a pool
  // line (a CAS waits for the line; a store does not), and a crash before the publish leaves an
  // empty slot either way. (A pool slot that is not empty under an empty mirror byte would be a
  // mirror out of step with the pool: the byte is set from the pool again and the claim fails, so
  // the caller looks again.) Without it, EMPTY -> INSERTING by CAS in the pool.
  bool claim(const SlotRef& at) {
    if (mirror_.on()) {
      if (!mirror_.claim(at.level, at.index, at.slot)) return false;
      const uint64_t state = Memory::load(state_word(at));
      if (state == format::kSlotEmpty) return true;
      mirror_.set(at.level, at.index, at.slot, mirror_byte(state));
      return false;
    }
    uint64_t expected = format::kSlotEmpty;
    return Memory::cas(state_word(at), expected, format::kSlotInserting);
  }

  // A slot's mirror byte as its state word says.
  static uint8_t mirror_byte(uint64_t state) {
    if (state == format::kSlotEmpty) return Mirror::kEmpty;
    if (state == format::kSlotInserting) return Mirror::kClaimed;
    return Mirror::tag_of_state(state);
  }

  void load_probe(const SlotRef& at, uint64_t state, Probe& p) const {
    if constexpr (Layout::kKeyIsState) {
      uint64_t key = format::decode_key_word(state);
      prepare(p, &key);
    } else {
      uint64_t key[kKeyWords];
      std::memcpy(key, key_bytes(at), KeyWidth);
      prepare(p, key);
    }
  }

  // Resize helper: puts `item` into the levels above the bottom unless a copy is already there.
  bool copy_up(const SlotRef& from, const Probe& item) {
    for (;;) {
      const Scan s = scan(item, bottom_ + 1, highest_, /*stop_at_match=*/true);
      if (s.found) return true;  // copied by an interrupted earlier attempt
      if (!s.has_free) return false;
      if (!claim(s.free)) continue;
      GPHASH_CRASH_POINT("rehash.after_claim");
      link(s.free, item, Memory::load(value_word(from)));
      return true;
    }
  }

  void move(const SlotRef& from, const SlotRef& to, const Probe& item) {
    format::MaintenanceRecord* rec = meta_.pool().maintenance();
    Memory::store(&rec->move_from, format::pack(from.address()));
    Memory::store(&rec->move_to, format::pack(to.address()));
    Memory::store(&rec->move_checksum, format::move_record_checksum(format::pack(from.address()), format::pack(to.address())));
    mem_.persist(rec, sizeof *rec);
    GPHASH_CRASH_POINT("move.after_addresses");
    Memory::store(&rec->move_state, format::kMoveInProgress);
    mem_.persist(&rec->move_state, 8);
    GPHASH_CRASH_POINT("move.after_record");
    if (!claim(to)) throw Error(ErrorCode::kCorruptTable, "a displacement target changed during an exclusive move");
    GPHASH_CRASH_POINT("move.after_claim");
    link(to, item, Memory::load(value_word(from)));
    GPHASH_CRASH_POINT("move.after_link");
    uint64_t expected = item.published;
    Memory::cas(state_word(from), expected, format::kSlotEmpty);
    mem_.persist(state_word(from), 8);
    GPHASH_CRASH_POINT("move.after_clear_source");
    if (mirror_.on()) mirror_.set(from.level, from.index, from.slot, Mirror::kEmpty);
    Memory::store(&rec->move_state, format::kMoveIdle);
    mem_.persist(&rec->move_state, 8);
    GPHASH_CRASH_POINT("move.after_record_idle");
  }

  template <class F>
  void for_each_bucket(int threads, F&& f) {
    for (uint32_t level = bottom_; level <= highest_; ++level) {
      const uint64_t n = format::level_buckets(level);
#pragma omp parallel for num_threads(threads) schedule(static, 4096)
      for (uint64_t index = 0; index < n; ++index) f(bucket(level, index), level, index);
    }
  }
  template <class F>
  void for_each_slot(int threads, F&& f) {
    for_each_bucket(threads, [&](std::byte* b, uint32_t level, uint64_t index) {
      for (int s = 0; s < S; ++s) f(SlotRef{b, level, index, static_cast<uint32_t>(s)});
    });
  }

  TableMeta& meta_;
  Memory mem_;
  CellAllocator& cells_;
  uint64_t seed_[H] = {};
  uint32_t bottom_ = 0, top_ = 0, highest_ = 0;
  std::byte* levels_[format::kMaxLevel + 1] = {};
  uint32_t value_width_ = 0;
  bool has_heap_ = false;
  uint32_t cell_size_ = 0;
  bool value_checksums_ = false;
  format::HeapGeometry heap_{};
  uint64_t heap_cells_ = 0;
  std::byte* chunk_[format::kMaxHeapChunks] = {};
  Mirror mirror_;
};

}  // namespace gphash::engine::cpu
