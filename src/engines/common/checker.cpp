#include "engines/common/checker.h"

#include <fmt/format.h>
#include <omp.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <vector>

#include "format/hash.h"
#include "format/header.h"
#include "format/slot.h"

namespace gphash::engine {
namespace {

using format::PoolHeader;
using format::SlotAddress;

struct View {
  const pool::Pool& pool;
  const PoolHeader& h;
  format::BucketLayout layout;
  format::HeapGeometry heap;
  uint64_t seeds[32];

  const std::byte* bucket(uint32_t level, uint64_t b) const {
    return pool.at<std::byte>(h.gphash.level_offset[level]) + b * h.gphash.bucket_bytes;
  }
  uint64_t state(const std::byte* bucket, uint32_t s) const {
    return __atomic_load_n(reinterpret_cast<const uint64_t*>(bucket + layout.state_offset(s)), __ATOMIC_ACQUIRE);
  }
  uint64_t value_word(const std::byte* bucket, uint32_t s) const {
    return *reinterpret_cast<const uint64_t*>(bucket + layout.value_offset(s));
  }
  // The key bytes of a published slot (8-byte keys are decoded from the state word).
  void key(const std::byte* bucket, uint32_t s, uint64_t state, unsigned char* out) const {
    if (layout.key_is_state()) {
      uint64_t k = format::decode_key_word(state);
      std::memcpy(out, &k, 8);
    } else {
      std::memcpy(out, bucket + layout.key_offset(s), h.gphash.key_width);
    }
  }
};

struct Violation {
  uint64_t order = ~uint64_t{0};  // packed address: the lowest wins, so reports are deterministic
  std::string text;
};

}  // namespace

CheckReport check_table(const pool::Pool& pool, int threads, std::optional<uint64_t> expected_items) {
  const PoolHeader& h = pool.header();
  View v{pool, h, format::bucket_layout(h), format::heap_geometry(h), {}};
  for (int j = 0; j < h.gphash.hashes; ++j) v.seeds[j] = format::hash_seed_for(h.gphash.hash_seed, j);
  CheckReport report;
  report.slots = format::slot_capacity(h);

  Violation first;
  std::mutex mutex;
  auto violate = [&](SlotAddress at, std::string text) {
    std::lock_guard lock(mutex);
    uint64_t order = (uint64_t{at.level} << 58) | (at.bucket << 6) | at.slot;
    if (order < first.order) first = {order, fmt::format("slot (level {}, bucket {}, slot {}): {}", at.level, at.bucket, at.slot, std::move(text))};
  };
  if (h.gphash.resize_state != format::kResizeNone) violate({0, 0, 0}, "a resize is in progress (recovery has not run)");
  if (pool.maintenance()->move_state == format::kMoveInProgress)
    violate({0, 0, 0}, "a displacement move is in progress (recovery has not run)");

  const bool heap = !format::value_is_inline(h.gphash.value_width);
  const uint64_t heap_cells = heap ? format::heap_cell_capacity(h) : 0;
  std::vector<uint64_t> used(heap ? (heap_cells + 63) / 64 : 0, 0);
  std::atomic<uint64_t> items{0}, inserting{0};
  const uint32_t top = format::top_level(h);

  for (uint32_t level = h.gphash.bottom_level; level <= top; ++level) {
    const int64_t buckets = static_cast<int64_t>(format::level_buckets(level));
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1024)
    for (int64_t bi = 0; bi < buckets; ++bi) {
      const uint64_t b = static_cast<uint64_t>(bi);
      const std::byte* bucket = v.bucket(level, b);
      for (uint32_t s = 0; s < h.gphash.slots; ++s) {
        const SlotAddress at{level, b, s};
        const uint64_t state = v.state(bucket, s);
        if (state == format::kSlotInserting) {
          inserting.fetch_add(1, std::memory_order_relaxed);
          violate(at, "slot is INSERTING (an insert was interrupted and recovery has not run)");
          continue;
        }
        if (!format::is_published(state)) continue;
        items.fetch_add(1, std::memory_order_relaxed);
        unsigned char key[32];
        v.key(bucket, s, state, key);
        uint64_t hash[32];
        for (int j = 0; j < h.gphash.hashes; ++j) hash[j] = format::xxh64(key, h.gphash.key_width, v.seeds[j]);
        if (v.layout.key_is_state()) {
          if (format::is_reserved_key(format::decode_key_word(state))) violate(at, "holds a reserved key");
        } else if (state != format::fingerprint(hash[0], hash[h.gphash.hashes - 1])) {
          violate(at, "fingerprint does not match its key");
        }
        bool placed = false;
        for (int j = 0; j < h.gphash.hashes; ++j) placed |= format::bucket_at(hash[j], level) == b;
        if (!placed) violate(at, "is not a candidate bucket of its key, so lookups cannot reach it");
        // Lookup: every candidate slot of the key; exactly one published copy must exist.
        int copies = 0;
        for (uint32_t l = h.gphash.bottom_level; l <= top; ++l)
          for (int j = 0; j < h.gphash.hashes; ++j) {
            const uint64_t cb = format::bucket_at(hash[j], l);
            bool repeat = false;
            for (int i = 0; i < j; ++i) repeat |= format::bucket_at(hash[i], l) == cb;
            if (repeat) continue;
            const std::byte* other = v.bucket(l, cb);
            for (uint32_t os = 0; os < h.gphash.slots; ++os) {
              const uint64_t ostate = v.state(other, os);
              if (ostate != state) continue;
              unsigned char okey[32];
              v.key(other, os, ostate, okey);
              if (std::memcmp(okey, key, h.gphash.key_width) == 0) ++copies;
            }
          }
        if (copies > 1) violate(at, fmt::format("its key has {} published copies (a visible duplicate)", copies));
        if (heap) {
          const uint64_t cell = v.value_word(bucket, s);
          if (cell >= heap_cells) {
            violate(at, fmt::format("references value cell {} outside the heap of {} cells", cell, heap_cells));
          } else {
            const uint64_t bit = uint64_t{1} << (cell % 64);
            if (__atomic_fetch_or(&used[cell / 64], bit, __ATOMIC_RELAXED) & bit)
              violate(at, fmt::format("shares value cell {} with another slot", cell));
          }
        }
      }
    }
  }
  report.items = items.load();
  report.inserting = inserting.load();
  if (first.text.empty() && expected_items && *expected_items != report.items)
    first.text = fmt::format("item count disagrees: {} published slots, {} expected", report.items, *expected_items);
  report.ok = first.text.empty();
  report.violation = first.text;
  return report;
}

}  // namespace gphash::engine
