#include "verifier.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "format/header.h"
#include "format/hmeh/layout.h"
#include "format/layout.h"
#include "format/slot.h"
#include "gphash/table.h"
#include "indexes/hmeh/radix_tree.h"
#include "pool/pool.h"
#include "workload/records.h"

namespace gphash::crashtest {
namespace {

constexpr size_t kMaxViolations = 20;

class Violations {
 public:
  explicit Violations(std::vector<std::string>& out) : out_(out) {}
  template <class... A>
  void add(fmt::format_string<A...> f, A&&... args) {
    if (out_.size() < kMaxViolations) out_.push_back(fmt::format(f, std::forward<A>(args)...));
  }

 private:
  std::vector<std::string>& out_;
};

// Looks every record of the key space up through the table.
std::vector<KeyState> read_all(Table& table, uint64_t key_space, Violations& v, const char* when) {
  const uint32_t kw = table.key_width(), vw = table.value_width();
  const uint64_t mask = CrashModel(vw).version_mask();
  std::vector<KeyState> observed(key_space);
  constexpr uint64_t kChunk = 8192;
  std::vector<std::byte> keys(kChunk * kw), out(kChunk * vw);
  std::vector<OpStatus> status(kChunk);
  for (uint64_t first = 0; first < key_space; first += kChunk) {
    const uint64_t n = std::min(kChunk, key_space - first);
    for (uint64_t i = 0; i < n; ++i) workload::make_key(first + i, kw, keys.data() + i * kw);
    Batch b;
    b.size = n;
    b.key_width = kw;
    b.value_width = vw;
    b.op = Op::kSearch;
    b.keys = keys.data();
    b.values_out = out.data();
    b.status = status.data();
    table.execute(b);
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t r = first + i;
      if (status[i] == OpStatus::kNotFound) continue;
      if (status[i] != OpStatus::kOk) {
        v.add("{}: search of record {} returned {}", when, r, to_string(status[i]));
        continue;
      }
      const uint64_t version = read_version(r, out.data() + i * vw, vw);
      if (version == kTorn) v.add("{}: record {} holds a torn or misplaced value (fails its check)", when, r);
      observed[r] = {true, version == kTorn ? kTorn : version & mask};
    }
  }
  return observed;
}

uint64_t count_present(const std::vector<KeyState>& s) {
  return static_cast<uint64_t>(std::count_if(s.begin(), s.end(), [](const KeyState& k) { return k.present; }));
}

// The checks a raw scan makes of every published slot, whatever the index: the key is one the
// workload wrote (no phantom), stored once, with the value a lookup returned.
class ScanTally {
 public:
  ScanTally(const std::vector<KeyState>& observed, uint32_t key_width, uint32_t value_width, Violations& v)
      : observed_(observed), kw_(key_width), vw_(value_width), mask_(CrashModel(value_width).version_mask()), v_(v),
        seen_(observed.size(), 0) {}

  void published() { ++count_; }
  void check(const std::string& where, const std::byte* key, const std::byte* value) {
    std::byte expected_key[32];
    uint64_t first_word;
    std::memcpy(&first_word, key, 8);
    const std::optional<uint64_t> record = workload::record_of_key_word(first_word);
    if (record && *record < observed_.size()) workload::make_key(*record, kw_, expected_key);
    if (!record || *record >= observed_.size() || std::memcmp(key, expected_key, kw_) != 0) {
      v_.add("raw scan: {} holds a phantom key (no write of the workload produced it)", where);
      return;
    }
    if (seen_[*record]++) v_.add("raw scan: record {} is stored twice (a visible duplicate)", *record);
    uint64_t version = read_version(*record, value, vw_);
    if (version != kTorn) version &= mask_;
    const KeyState& looked_up = observed_[*record];
    if (!looked_up.present || looked_up.version != version)
      v_.add("raw scan: record {} holds {} in its slot but a lookup returned {}", *record,
             version == kTorn ? std::string("a torn value") : to_string(KeyState{true, version}), to_string(looked_up));
  }
  uint64_t count() const { return count_; }

 private:
  const std::vector<KeyState>& observed_;
  uint32_t kw_, vw_;
  uint64_t mask_;
  Violations& v_;
  std::vector<uint8_t> seen_;
  uint64_t count_ = 0;
};

// GPHash: every slot of the active levels (docs/FORMAT.md section 3).
void raw_scan_gphash(const pool::Pool& pool, ScanTally& tally, Violations& v) {
  const format::PoolHeader& h = pool.header();
  if (h.gphash.resize_state != format::kResizeNone) v.add("raw scan: a resize is still in progress after recovery");
  if (pool.maintenance()->move_state != format::kMoveIdle) v.add("raw scan: the move record is not idle after recovery");
  const format::BucketLayout layout = format::bucket_layout(h);
  const format::HeapGeometry heap = format::heap_geometry(h);
  const bool inline_values = format::value_is_inline(h.gphash.value_width);
  const uint64_t heap_cells = inline_values ? 0 : format::heap_cell_capacity(h);
  std::byte key[32];
  std::vector<std::byte> value(h.gphash.value_width);
  for (uint32_t level = h.gphash.bottom_level; level <= format::top_level(h); ++level) {
    const std::byte* base = pool.at<std::byte>(h.gphash.level_offset[level]);
    for (uint64_t b = 0; b < format::level_buckets(level); ++b) {
      const std::byte* bucket = base + b * h.gphash.bucket_bytes;
      for (uint32_t s = 0; s < h.gphash.slots; ++s) {
        uint64_t state;
        std::memcpy(&state, bucket + layout.state_offset(s), 8);
        if (state == format::kSlotInserting)
          v.add("raw scan: slot ({}, {}, {}) is INSERTING after recovery", level, b, s);
        if (!format::is_published(state)) continue;
        tally.published();
        if (layout.key_is_state()) {
          const uint64_t k = format::decode_key_word(state);
          std::memcpy(key, &k, 8);
        } else {
          std::memcpy(key, bucket + layout.key_offset(s), h.gphash.key_width);
        }
        uint64_t word;
        std::memcpy(&word, bucket + layout.value_offset(s), 8);
        if (inline_values) {
          std::memcpy(value.data(), &word, h.gphash.value_width);
        } else if (word >= heap_cells) {
          v.add("raw scan: slot ({}, {}, {}) references cell {} outside the heap of {} cells", level, b, s, word,
                heap_cells);
          continue;
        } else {
          const uint32_t c = heap.chunk_of(word);
          std::memcpy(value.data(),
                      pool.at<std::byte>(h.gphash.heap_chunk_offset[c]) + (word - heap.chunk_begin(c)) * h.gphash.cell_size,
                      h.gphash.value_width);
        }
        tally.check(fmt::format("slot ({}, {}, {})", level, b, s), key, value.data());
      }
    }
  }
}

// HMEH: every slot of the segments the radix tree reaches (format/hmeh/layout.h).
void raw_scan_hmeh(const pool::Pool& pool, ScanTally& tally, Violations& v) {
  namespace fh = format::hmeh;
  const format::HmehMeta& m = pool.header().hmeh;
  const hmeh::Arenas arenas(pool);
  const hmeh::RadixScan scan = hmeh::scan_radix_tree(arenas);
  const uint32_t slot_words = fh::slot_bytes(m.key_width) / 8, per_bucket = fh::slots_per_bucket(m.key_width);
  const uint32_t buckets = (1u << m.segment_bytes_log2) / fh::kBucketBytes;
  const bool inline_values = format::value_is_inline(m.value_width);
  const uint64_t heap_cells = inline_values ? 0 : arenas.heap.capacity();
  std::vector<std::byte> value(m.value_width);
  std::byte key[16];
  for (const hmeh::LiveSegment& seg : scan.segments) {
    const auto* words = reinterpret_cast<const uint64_t*>(arenas.segments.address(seg.id));
    for (uint64_t slot = 0; slot < uint64_t{buckets} * per_bucket; ++slot) {
      const uint64_t* w = words + slot * slot_words;
      if (w[0] == fh::kSlotClaimed) v.add("raw scan: segment {} slot {} is CLAIMED after recovery", seg.id, slot);
      if (!fh::is_published(w[0])) continue;
      tally.published();
      uint64_t value_word;
      if (m.key_width == 8) {
        const uint64_t k = fh::decode_key_word(w[0]);
        std::memcpy(key, &k, 8);
        value_word = w[fh::SlotLayout<8>::kValueWord];
      } else {
        for (int i = 0; i < 2; ++i) std::memcpy(key + 8 * i, &w[fh::SlotLayout<16>::kKeyWords[i]], 8);
        value_word = w[fh::SlotLayout<16>::kValueWord];
      }
      if (inline_values) {
        std::memcpy(value.data(), &value_word, m.value_width);
      } else if (value_word >= heap_cells) {
        v.add("raw scan: segment {} slot {} references cell {} outside the heap of {} cells", seg.id, slot, value_word,
              heap_cells);
        continue;
      } else {
        std::memcpy(value.data(), arenas.heap.address(value_word), m.value_width);
      }
      tally.check(fmt::format("segment {} slot {}", seg.id, slot), key, value.data());
    }
  }
}

// Reads every slot of the pool with the format's definitions only (not the engine's lookup), so
// that keys a lookup of the key space cannot see (phantoms) and second copies are found too.
void raw_scan(const std::string& path, const std::vector<KeyState>& observed, Violations& v) {
  auto pool = pool::Pool::open(path, {true, 0, false});
  const format::PoolHeader& h = pool->header();
  if (h.clean_shutdown != 1) v.add("raw scan: the header is not marked clean after close");
  const bool hmeh = h.index_kind == format::kIndexHmeh;
  ScanTally tally(observed, hmeh ? h.hmeh.key_width : h.gphash.key_width,
                  hmeh ? h.hmeh.value_width : h.gphash.value_width, v);
  if (hmeh)
    raw_scan_hmeh(*pool, tally, v);
  else
    raw_scan_gphash(*pool, tally, v);
  const uint64_t present = count_present(observed);
  if (tally.count() != present)
    v.add("raw scan: {} published slots, but lookups found {} records", tally.count(), present);
  if (h.item_count != tally.count())
    v.add("raw scan: the clean header counts {} items, the slots {}", h.item_count, tally.count());
}

}  // namespace

std::string VerifyReport::summary() const {
  std::string s;
  for (const std::string& v : violations) s += "  " + v + "\n";
  return s;
}

void mark_dirty(const std::string& path) {
  auto pool = pool::Pool::open(path, {false, 0, false});
  format::PoolHeader h = pool->header();
  h.clean_shutdown = 0;
  pool->write_header(h);
}

VerifyReport verify_pool(const std::string& path, const Expectation& expect, const VerifyOptions& options) {
  VerifyReport report;
  Violations v(report.violations);
  try {
    CheckResult check;
    {  // the Table holds the pool's lock until it is destroyed
      Table table = Table::open(path, options.open);
      const TableInfo info = table.info();
      report.recovered = info.recovered;
      report.open_seconds = info.open_seconds;
      check = table.check();
      if (!check.ok) v.add("check after recovery: {}", check.violation);
      report.observed = read_all(table, expect.key_space, v, "after recovery");
      report.items = table.size();
    }

    // Every record: its acknowledged state, or one the batch in flight could leave.
    const auto outcomes = expect.in_flight ? in_flight_outcomes(*expect.acked, *expect.in_flight)
                                           : std::unordered_map<uint64_t, std::vector<KeyState>>{};
    report.in_flight_records = outcomes.size();
    for (uint64_t r = 0; r < expect.key_space; ++r) {
      const KeyState& got = report.observed[r];
      const KeyState& acked = expect.acked->state(r);
      auto it = outcomes.find(r);
      if (it == outcomes.end()) {
        if (got == acked) continue;
        if (!acked.present)
          v.add("record {}: acknowledged absent (never written or erased) but holds {}", r, to_string(got));
        else if (!got.present)
          v.add("record {}: lost: acknowledged {} but absent", r, to_string(acked));
        else
          v.add("record {}: acknowledged {} but holds {}", r, to_string(acked), to_string(got));
        continue;
      }
      const std::vector<KeyState>& allowed = it->second;
      if (std::find(allowed.begin(), allowed.end(), got) == allowed.end()) {
        std::string list;
        for (const KeyState& a : allowed) list += (list.empty() ? "" : ", ") + to_string(a);
        v.add("record {}: holds {}; the acknowledged state and the batch in flight allow only {}", r, to_string(got),
              list);
      }
      if (!(got == acked)) ++report.in_flight_applied;
    }
    const uint64_t present = count_present(report.observed);
    if (report.items != present) v.add("the engine counts {} items, lookups find {}", report.items, present);
    if (check.items != present) v.add("check counts {} published slots, lookups find {}", check.items, present);

    if (options.raw_scan) raw_scan(path, report.observed, v);

    if (options.idempotence) {
      mark_dirty(path);
      Table again = Table::open(path, options.open);
      if (!again.info().recovered) v.add("second recovery: a pool marked dirty did not run recovery");
      const CheckResult check2 = again.check();
      if (!check2.ok) v.add("check after a second recovery: {}", check2.violation);
      if (read_all(again, expect.key_space, v, "after a second recovery") != report.observed)
        v.add("a second recovery changed the contents (recovery is not idempotent)");
      if (again.size() != report.items)
        v.add("a second recovery counts {} items, the first {}", again.size(), report.items);
      again.close();
    }
    if (options.clean_reopen) {
      Table clean = Table::open(path, options.open);
      if (clean.info().recovered) v.add("clean reopen: recovery ran on a cleanly closed pool");
      if (read_all(clean, expect.key_space, v, "after a clean reopen") != report.observed)
        v.add("closing and reopening changed the contents");
      if (clean.size() != report.items) v.add("clean reopen counts {} items, recovery {}", clean.size(), report.items);
      clean.close();
    }
  } catch (const std::exception& e) {
    v.add("recovery or verification failed: {}", e.what());
  }
  return report;
}

}  // namespace gphash::crashtest
