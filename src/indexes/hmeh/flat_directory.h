// The DRAM side of HMEH's directory: one handle per segment (its lock, version and place) and the
// flat directory, 2^G entries of segment ids indexed by the top G bits of a key's hash. Neither is
// persistent: both are rebuilt at open from the radix tree in the pool.
//
// Concurrency (HMEH's optimistic scheme):
//   - a segment's lock word counts the writers inside it (inserts, updates, erases; they change
//     slots with CAS) and has a SPLITTING bit a split takes once they have left; its version
//     changes whenever the segment's contents change wholesale (a split retires it), so a lock-free
//     reader validates what it read by the version before and after;
//   - the flat directory changes only under the directory mutex (split publishes, doublings), and
//     carries a version number bumped by each change. A doubling replaces the whole array; the old
//     one stays readable until the end of the batch (no reader can hold it past that point);
//   - a handle's `place` says which hash prefix the segment covers; a reader that reached a
//     segment through a stale entry sees that it does not cover its key and retries.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engines/common/crash_point.h"
#include "format/hmeh/layout.h"
#include "gphash/error.h"

namespace gphash::hmeh {

// A cache line each: writers change `lock` with atomic instructions, and adjacent ids usually
// belong to other threads' segments.
struct alignas(64) SegmentHandle {
  static constexpr uint64_t kSharerMask = 0xFFFFFFFFull;
  static constexpr uint64_t kSplitting = uint64_t{1} << 32;
  static constexpr uint64_t kVersionUnit = uint64_t{1} << 33;
  static constexpr uint64_t kNoPlace = ~uint64_t{0};

  std::atomic<uint64_t> lock{0};
  std::atomic<uint64_t> place{kNoPlace};  // prefix << 8 | depth while in the directory
  std::byte* base = nullptr;              // the segment's memory in the pool
  uint64_t id = 0;

  static uint64_t place_of(uint64_t prefix, uint32_t depth) { return prefix << 8 | depth; }
  static uint32_t depth_of(uint64_t place) { return static_cast<uint32_t>(place & 0xFF); }
  static uint64_t prefix_of(uint64_t place) { return place >> 8; }
  bool covers(uint64_t place_seen, uint64_t hash) const {
    return place_seen != kNoPlace && format::hmeh::prefix_of(hash, depth_of(place_seen)) == prefix_of(place_seen);
  }

  // Writers: false if a split holds the segment (the caller waits for it and looks the key up
  // again, since the split moves it elsewhere).
  bool enter_shared() {
    uint64_t w = lock.load(std::memory_order_relaxed);
    while (!(w & kSplitting))
      if (lock.compare_exchange_weak(w, w + 1, std::memory_order_acquire, std::memory_order_relaxed)) return true;
    return false;
  }
  void exit_shared() { lock.fetch_sub(1, std::memory_order_release); }
  // A split: false if another split holds it. Otherwise waits for the writers inside to leave.
  bool enter_exclusive() {
    uint64_t w = lock.load(std::memory_order_relaxed);
    do {
      if (w & kSplitting) return false;
    } while (!lock.compare_exchange_weak(w, w | kSplitting, std::memory_order_acquire, std::memory_order_relaxed));
    while (lock.load(std::memory_order_acquire) & kSharerMask) pause();
    return true;
  }
  // Ends a split; `changed` bumps the version (the segment left the directory).
  void exit_exclusive(bool changed) {
    const uint64_t w = lock.load(std::memory_order_relaxed);
    lock.store(((w & ~kSharerMask) & ~kSplitting) + (changed ? kVersionUnit : 0), std::memory_order_release);
  }
  void wait_while_splitting() const {
    while (lock.load(std::memory_order_acquire) & kSplitting) pause();
  }
  static void pause() { __builtin_ia32_pause(); }
};

// Handles in chunks that match the segment arena's, so a handle never moves.
class SegmentHandles {
 public:
  void add_chunk(uint64_t first_id, uint64_t count, const std::function<std::byte*(uint64_t)>& base_of) {
    auto chunk = std::make_unique<SegmentHandle[]>(count);
    for (uint64_t i = 0; i < count; ++i) {
      chunk[i].base = base_of(first_id + i);
      chunk[i].id = first_id + i;
    }
    const uint32_t c = chunks_.load(std::memory_order_relaxed);
    first_[c] = first_id;
    ptr_[c].store(chunk.get(), std::memory_order_relaxed);
    owned_[c] = std::move(chunk);
    chunks_.store(c + 1, std::memory_order_release);
  }
  // `chunk` is the arena chunk of `id` (Arena geometry), computed by the caller.
  SegmentHandle& at(uint32_t chunk, uint64_t id) const {
    return ptr_[chunk].load(std::memory_order_relaxed)[id - first_[chunk]];
  }

 private:
  std::atomic<uint32_t> chunks_{0};
  uint64_t first_[format::hmeh::kMaxChunks] = {};
  std::atomic<SegmentHandle*> ptr_[format::hmeh::kMaxChunks] = {};
  std::unique_ptr<SegmentHandle[]> owned_[format::hmeh::kMaxChunks];
};

class FlatDirectory {
 public:
  struct Table {
    uint32_t depth;  // global depth G
    std::unique_ptr<std::atomic<uint32_t>[]> entries;  // 2^G segment ids
  };

  // An empty directory of global depth `depth` (fill it with assign()).
  void reset(uint32_t depth) {
    tables_.clear();
    tables_.push_back(make_table(depth));
    current_.store(tables_.back().get(), std::memory_order_release);
  }

  uint32_t lookup(uint64_t hash) const {
    const Table* t = current_.load(std::memory_order_acquire);
    return t->entries[format::hmeh::prefix_of(hash, t->depth)].load(std::memory_order_acquire);
  }
  // Brings the hash's entry toward the cache (a lookup a few operations later).
  void prefetch(uint64_t hash) const {
    const Table* t = current_.load(std::memory_order_acquire);
    __builtin_prefetch(&t->entries[format::hmeh::prefix_of(hash, t->depth)]);
  }
  uint32_t global_depth() const { return current_.load(std::memory_order_acquire)->depth; }
  // Called with every range of entries a change wrote (the factor analysis's baseline only).
  void set_persist(std::function<void(const void*, size_t)> persist) { persist_ = std::move(persist); }
  uint64_t version() const { return version_.load(std::memory_order_acquire); }
  uint64_t doublings() const { return doublings_; }

  // Under the directory mutex: points the entries of (prefix, depth) at `id`, doubling the
  // directory first when depth exceeds the global depth. Returns true if it doubled.
  bool assign(uint64_t prefix, uint32_t depth, uint32_t id) {
    Table* t = current_.load(std::memory_order_relaxed);
    bool doubled = false;
    while (depth > t->depth) {
      t = grow(*t);
      doubled = true;
      GPHASH_CRASH_POINT("hmeh.split.after_doubling");
    }
    const uint32_t shift = t->depth - depth;
    const uint64_t first = prefix << shift, count = uint64_t{1} << shift;
    for (uint64_t i = 0; i < count; ++i) t->entries[first + i].store(id, std::memory_order_release);
    if (persist_) persist_(&t->entries[first], count * sizeof(uint32_t));
    version_.fetch_add(1, std::memory_order_release);
    return doubled;
  }

  // Frees the arrays doublings replaced. Only when no reader can hold one: between batches.
  void release_retired() {
    if (tables_.size() <= 1) return;
    std::unique_ptr<Table> current = std::move(tables_.back());
    tables_.clear();
    tables_.push_back(std::move(current));
  }

 private:
  static std::unique_ptr<Table> make_table(uint32_t depth) {
    if (depth > format::hmeh::kMaxDepth)
      throw Error(ErrorCode::kNoSpace, "the flat directory cannot grow past 2^" + std::to_string(format::hmeh::kMaxDepth));
    auto t = std::make_unique<Table>();
    t->depth = depth;
    t->entries = std::make_unique<std::atomic<uint32_t>[]>(uint64_t{1} << depth);
    return t;
  }

  // Doubling: each entry becomes two; readers switch to the new array at their next lookup.
  Table* grow(const Table& old) {
    std::unique_ptr<Table> t = make_table(old.depth + 1);
    const uint64_t n = uint64_t{1} << old.depth;
    for (uint64_t i = 0; i < n; ++i) {
      const uint32_t id = old.entries[i].load(std::memory_order_relaxed);
      t->entries[2 * i].store(id, std::memory_order_relaxed);
      t->entries[2 * i + 1].store(id, std::memory_order_relaxed);
    }
    if (persist_) persist_(&t->entries[0], 2 * n * sizeof(uint32_t));
    Table* raw = t.get();
    tables_.push_back(std::move(t));
    current_.store(raw, std::memory_order_release);
    ++doublings_;
    return raw;
  }

  std::atomic<Table*> current_{nullptr};
  std::vector<std::unique_ptr<Table>> tables_;  // the current one last; the others are retired
  // Bumped by every split: on a line of its own, so that bumping it does not evict `current_`,
  // which every operation reads, from the other threads' caches.
  alignas(64) std::atomic<uint64_t> version_{0};
  uint64_t doublings_ = 0;
  std::function<void(const void*, size_t)> persist_;
};

}  // namespace gphash::hmeh
