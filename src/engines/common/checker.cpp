#include "engines/common/checker.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "engines/common/move_record.h"
#include "format/cell.h"
#include "format/hash.h"
#include "format/header.h"
#include "format/probe.h"
#include "gphash/error.h"

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
  const std::byte* cell(uint64_t ref) const {
    const uint32_t c = heap.chunk_of(ref);
    return pool.at<std::byte>(h.gphash.heap_chunk_offset[c]) + (ref - heap.chunk_begin(c)) * h.gphash.cell_size;
  }
};

uint64_t order_of(SlotAddress a) { return (uint64_t{a.level} << 58) | (a.bucket << 6) | a.slot; }

std::string hex(const unsigned char* bytes, uint32_t n) {
  std::string s;
  for (uint32_t i = 0; i < n; ++i) s += fmt::format("{:02x}", bytes[i]);
  return s;
}

// Violations found by the threads: the first by address, how many, and (on request) every
// damaged slot.
class Findings {
 public:
  explicit Findings(bool collect) : collect_(collect) {}

  void add(SlotAddress at, const std::string& key_hex, std::string text, bool damages_slot = true) {
    std::lock_guard lock(mutex_);
    ++count_;
    if (order_of(at) < first_order_) {
      first_order_ = order_of(at);
      first_ = fmt::format("{}: {}", describe(at), text);
    }
    if (collect_ && damages_slot) damaged_.push_back({at, key_hex, std::move(text)});
  }
  // A violation that is about the table as a whole: reported before any slot's.
  void add_global(std::string text) {
    std::lock_guard lock(mutex_);
    ++count_;
    if (!global_) first_ = std::move(text), first_order_ = 0, global_ = true;
  }
  void finish(CheckReport& r) {
    r.violations = count_;
    r.violation = first_;
    r.ok = count_ == 0;
    std::sort(damaged_.begin(), damaged_.end(),
              [](const DamagedSlot& a, const DamagedSlot& b) { return order_of(a.at) < order_of(b.at); });
    r.damaged = std::move(damaged_);
  }

 private:
  bool collect_;
  std::mutex mutex_;
  uint64_t count_ = 0;
  uint64_t first_order_ = ~uint64_t{0};
  bool global_ = false;
  std::string first_;
  std::vector<DamagedSlot> damaged_;
};

}  // namespace

std::string describe(SlotAddress at) {
  return fmt::format("slot (level {}, bucket {}, slot {})", at.level, at.bucket, at.slot);
}

CheckReport check_table(const pool::Pool& pool, const CheckOptions& options) {
  const PoolHeader& h = pool.header();
  const format::GphashMeta& g = h.gphash;
  View v{pool, h, format::bucket_layout(h), format::heap_geometry(h), {}};
  for (int j = 0; j < g.hashes; ++j) v.seeds[j] = format::hash_seed_for(g.hash_seed, j);
  CheckReport report;
  report.slots = format::slot_capacity(h);
  Findings findings(options.collect_damage);
  const int threads = std::max(1, options.threads);

  if (g.resize_state != format::kResizeNone)
    findings.add_global("header: a resize is in progress (the next writable open finishes it)");
  const format::MaintenanceRecord& rec = *pool.maintenance();
  try {
    if (validate_move_record(h, rec.move_state, rec.move_from, rec.move_to, rec.move_checksum))
      findings.add_global("maintenance record (pool offset 8192): a displacement move is in progress (the next "
                          "writable open finishes it)");
  } catch (const Error& e) {
    findings.add_global(e.what());
    report.move_record_damaged = true;
  }

  const bool heap = !format::value_is_inline(g.value_width);
  const bool checksums = format::has_value_checksums(h);
  const uint64_t heap_cells = heap ? format::heap_cell_capacity(h) : 0;
  // Heap cells referenced once (bit in `used`) and more than once (bit in `shared`).
  std::vector<uint64_t> used(heap ? (heap_cells + 63) / 64 : 0, 0), shared(used.size(), 0);
  std::atomic<uint64_t> items{0}, inserting{0}, verified{0};
  // Slots that are damage for a reason of their own: they do not count as owners of a cell.
  std::vector<uint64_t> damaged_orders;
  std::mutex damaged_mutex;
  auto scan_levels = [&](auto&& per_slot) {
    for (uint32_t level = g.bottom_level; level <= format::highest_level(h); ++level) {
      const int64_t buckets = static_cast<int64_t>(format::level_buckets(level));
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1024)
      for (int64_t bi = 0; bi < buckets; ++bi) {
        const std::byte* bucket = v.bucket(level, static_cast<uint64_t>(bi));
        for (uint32_t s = 0; s < g.slots; ++s) per_slot(bucket, SlotAddress{level, static_cast<uint64_t>(bi), s});
      }
    }
  };

  scan_levels([&](const std::byte* bucket, SlotAddress at) {
    const uint64_t state = v.state(bucket, at.slot);
    if (state == format::kSlotInserting) {
      inserting.fetch_add(1, std::memory_order_relaxed);
      findings.add(at, "", "slot is INSERTING (an insert was interrupted; the next writable open empties it)");
      return;
    }
    if (!format::is_published(state)) return;
    items.fetch_add(1, std::memory_order_relaxed);
    unsigned char key[32];
    v.key(bucket, at.slot, state, key);
    const std::string key_hex = hex(key, g.key_width);
    uint64_t hash[32];
    for (int j = 0; j < g.hashes; ++j) hash[j] = format::xxh64(key, g.key_width, v.seeds[j]);
    bool damaged = false;
    auto damage = [&](std::string text) {
      findings.add(at, key_hex, std::move(text));
      damaged = true;
    };
    if (v.layout.key_is_state()) {
      if (format::is_reserved_key(format::decode_key_word(state))) damage("holds a reserved key");
    } else if (state != format::fingerprint(hash[0], hash[g.hashes - 1])) {
      damage("fingerprint does not match its key");
    }
    bool placed = false;
    for (int j = 0; j < g.hashes; ++j) placed |= format::bucket_at(hash[j], at.level) == at.bucket;
    if (!placed) damage("is not a candidate bucket of its key, so lookups cannot reach it");
    // Lookup: every candidate slot of the key; only the valid copy may be published.
    int copies = 0;
    SlotAddress valid = at;
    for (uint32_t l = g.bottom_level; l <= format::highest_level(h); ++l)
      for (int j = 0; j < g.hashes; ++j) {
        const uint64_t cb = format::bucket_at(hash[j], l);
        bool repeat = false;  // (the checker reads any shape, so it cannot use the templated rule)
        for (int i = 0; i < j; ++i) repeat |= format::bucket_at(hash[i], l) == cb;
        if (repeat) continue;
        const std::byte* other = v.bucket(l, cb);
        for (uint32_t os = 0; os < g.slots; ++os) {
          const uint64_t ostate = v.state(other, os);
          if (ostate != state) continue;
          unsigned char okey[32];
          v.key(other, os, ostate, okey);
          if (std::memcmp(okey, key, g.key_width) != 0) continue;
          ++copies;
          const SlotAddress o{l, cb, os};
          if (format::preferred_copy(o, valid)) valid = o;
        }
      }
    if (copies > 1 && !(valid.level == at.level && valid.bucket == at.bucket && valid.slot == at.slot))
      damage(fmt::format("duplicate of its key's valid copy at {} ({} published copies)", describe(valid), copies));
    if (heap) {
      const uint64_t cell = v.value_word(bucket, at.slot);
      if (cell >= heap_cells) {
        damage(fmt::format("references value cell {} outside the heap of {} cells", cell, heap_cells));
      } else {
        if (checksums) {
          const std::byte* c = v.cell(cell);
          uint64_t stored;
          std::memcpy(&stored, c + format::cell_checksum_offset(g.cell_size), 8);
          if (stored != format::value_checksum(c, g.value_width, hash[0]))
            damage(fmt::format("its value in cell {} (pool offset {}) fails its checksum", cell,
                               static_cast<uint64_t>(c - pool.base())));
          else
            verified.fetch_add(1, std::memory_order_relaxed);
        }
        if (!damaged) {
          const uint64_t bit = uint64_t{1} << (cell % 64);
          if (__atomic_fetch_or(&used[cell / 64], bit, __ATOMIC_RELAXED) & bit)
            __atomic_fetch_or(&shared[cell / 64], bit, __ATOMIC_RELAXED);
        }
      }
    }
    if (damaged) {
      std::lock_guard lock(damaged_mutex);
      damaged_orders.push_back(order_of(at));
    }
  });

  // Cells referenced by several intact slots: every such slot is reported (the owner cannot be
  // told apart without checksums; with them, only a slot whose value verifies could own it, and
  // then another key's slot points at it, which its own checksum already reported).
  const bool any_shared = std::any_of(shared.begin(), shared.end(), [](uint64_t w) { return w != 0; });
  if (any_shared) {
    std::sort(damaged_orders.begin(), damaged_orders.end());
    scan_levels([&](const std::byte* bucket, SlotAddress at) {
      const uint64_t state = v.state(bucket, at.slot);
      if (!format::is_published(state)) return;
      const uint64_t cell = v.value_word(bucket, at.slot);
      if (cell >= heap_cells || !(shared[cell / 64] >> (cell % 64) & 1)) return;
      if (std::binary_search(damaged_orders.begin(), damaged_orders.end(), order_of(at))) return;
      unsigned char key[32];
      v.key(bucket, at.slot, state, key);
      findings.add(at, hex(key, g.key_width), fmt::format("shares value cell {} with another slot", cell));
    });
  }

  report.items = items.load();
  report.inserting = inserting.load();
  report.values_verified = verified.load();
  findings.finish(report);
  if (report.ok && options.expected_items && *options.expected_items != report.items) {
    report.ok = false;
    report.violations = 1;
    report.violation =
        fmt::format("header: item count disagrees: {} published slots, {} expected", report.items, *options.expected_items);
  }
  return report;
}

}  // namespace gphash::engine
