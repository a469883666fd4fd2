#include "embedding/embedding_store.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "embedding/file_tier.h"
#include "embedding/gpu_lookup.h"
#include "embedding/row_file.h"

namespace gphash::embedding {

const char* to_string(RowType t) noexcept {
  switch (t) {
    case RowType::kFloat32: return "float32";
    case RowType::kFloat16: return "float16";
    case RowType::kBFloat16: return "bfloat16";
  }
  return "?";
}

RowType parse_row_type(const std::string& n) {
  if (n == "float32") return RowType::kFloat32;
  if (n == "float16") return RowType::kFloat16;
  if (n == "bfloat16") return RowType::kBFloat16;
  throw Error(ErrorCode::kInvalidArgument, "row dtype must be float32, float16 or bfloat16, not " + n, "dtype");
}

Pooling parse_pooling(const std::string& n) {
  if (n == "none") return Pooling::kNone;
  if (n == "sum") return Pooling::kSum;
  if (n == "mean") return Pooling::kMean;
  throw Error(ErrorCode::kInvalidArgument, "pooling must be sum, mean or none, not " + n, "pooling");
}

Initializer parse_initializer(const std::string& n) {
  if (n == "default") return Initializer::kDefault;
  if (n == "uniform") return Initializer::kUniform;
  if (n == "normal") return Initializer::kNormal;
  throw Error(ErrorCode::kInvalidArgument, "initializer must be default, uniform or normal, not " + n, "initializer");
}

uint32_t row_stride(uint32_t row_bytes) {
  if (row_bytes <= 32) return 32;
  if (row_bytes <= 64) return 64;
  return (row_bytes + 127) / 128 * 128;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: value = man * 2^-24
      float f = std::ldexp(static_cast<float>(man), -24);
      std::memcpy(&bits, &f, 4);
      bits |= sign;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0);  // inf / nan
  if (ax >= 0x477ff000u) return sign | 0x7c00;                                    // overflow to inf
  if (ax < 0x38800000u) {  // subnormal or zero in half: round value * 2^24 to nearest even
    float a;
    std::memcpy(&a, &ax, 4);
    return sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f));
  }
  const uint32_t rounded = ax + 0x0fffu + ((ax >> 13) & 1);  // round to nearest even on bit 13
  return sign | static_cast<uint16_t>((rounded - (112u << 23)) >> 13);
}

float bfloat16_to_float(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_bfloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet nan
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

namespace {

float load(RowType t, const std::byte* row, uint32_t j) {
  if (t == RowType::kFloat32) {
    float f;
    std::memcpy(&f, row + 4 * j, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, row + 2 * j, 2);
  return t == RowType::kFloat16 ? half_to_float(h) : bfloat16_to_float(h);
}

void store(RowType t, std::byte* row, uint32_t j, float v) {
  if (t == RowType::kFloat32) {
    std::memcpy(row + 4 * j, &v, 4);
    return;
  }
  const uint16_t h = t == RowType::kFloat16 ? float_to_half(v) : float_to_bfloat16(v);
  std::memcpy(row + 2 * j, &h, 2);
}

uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

void check_ids(const int64_t* ids, size_t n) {
  if (n && !ids) throw Error(ErrorCode::kInvalidArgument, "ids are missing", "ids");
  for (size_t i = 0; i < n; ++i)
    if (ids[i] == -1 || ids[i] == -2)
      throw Error(ErrorCode::kInvalidArgument,
                  "ids -1 and -2 are reserved (the index's empty and busy markers): map them to other ids", "ids");
}

}  // namespace

struct EmbeddingStore::Impl {
  Impl(Table t, RowFile r, const StoreOptions& o) : table(std::move(t)), rows(std::move(r)), options(o) {}
  Table table;
  RowFile rows;
  std::optional<FileTier> tier;  // every row of a tiered store (host memory holds copies)
  StoreOptions options;
  std::vector<uint64_t> free_rows;  // reusable rows: in the row file, or in the tier if there is one
  StoreStats counts;
  std::unique_ptr<GpuLookup> gpu;
  std::mutex mu;  // writes and host lookups of one store run one at a time
  bool closed = false;

  RowType dtype() const { return static_cast<RowType>(rows.header().dtype); }
  uint32_t dim() const { return rows.header().dim; }
  uint32_t row_bytes() const { return dim() * element_bytes(dtype()); }

  void check_open() const {
    if (closed) throw Error(ErrorCode::kInvalidArgument, "the embedding store is closed", "store");
  }

  // A tiered store (host_rows below capacity) keeps every row in the tier file and copies of the
  // rows lookups read most in host memory, in host_rows slots. An ID's index value says both:
  // its tier row in the low kSlotShift bits, and 1 + its slot above them (0: no copy). Without a
  // tier the value is the row's index in the row file, which the GPU lookup reads directly.
  static constexpr int kSlotShift = kTierSlotShift;
  static constexpr uint64_t kRowMask = (uint64_t{1} << kSlotShift) - 1;
  static constexpr uint64_t kNoSlot = ~uint64_t{0};
  static constexpr int64_t kNoOwner = -1;         // a reserved ID (check_ids): never stored
  static constexpr uint8_t kPromoteHeat = 2;      // a row read from the tier by two lookups moves up
  static constexpr size_t kMaxPromotions = 4096;  // per lookup, to bound its latency
  std::vector<uint64_t> free_slots;
  std::vector<int64_t> slot_owner;   // slot -> the ID whose copy it holds (to drop the copy)
  std::vector<uint64_t> slot_row;    // slot -> the tier row it copies
  std::vector<uint8_t> slot_heat;    // lookups that read the slot, up to 255; the clock takes one off
  std::vector<uint8_t> row_heat;     // lookups that read the row from the tier
  uint64_t clock_hand = 0;

  bool tiered() const { return tier.has_value(); }
  uint64_t row_of(uint64_t value) const { return tiered() ? value & kRowMask : value; }
  uint64_t slot_of(uint64_t value) const {
    if (!tiered()) return value;
    const uint64_t s = value >> kSlotShift;
    return s ? s - 1 : kNoSlot;
  }
  static uint64_t with_slot(uint64_t row, uint64_t slot) { return slot == kNoSlot ? row : row | (slot + 1) << kSlotShift; }

  uint64_t allocate_row() {
    if (!free_rows.empty()) {
      const uint64_t r = free_rows.back();
      free_rows.pop_back();
      return r;
    }
    RowFileHeader& h = rows.header();
    if (h.next_row >= h.capacity)
      throw Error(ErrorCode::kNoSpace,
                  "the row file is full (" + std::to_string(h.capacity) + " rows): create the store with a larger capacity",
                  "capacity");
    // The bump is visible before the row is used, so a crash never hands a row out twice.
    return h.next_row++;
  }
  // An index value no ID holds any more: its row, and its slot, are free.
  void release(uint64_t value) {
    free_rows.push_back(row_of(value));
    const uint64_t slot = tiered() ? slot_of(value) : kNoSlot;
    if (slot != kNoSlot) {
      free_slots.push_back(slot);
      slot_owner[slot] = kNoOwner;
    }
  }

  // Where each value of `where` (~0: missing) can be read: host rows and slots in place, rows
  // without a copy read from the tier (each once) into `buffer`, missing ones at `fallback`. Call
  // with `mu` held (the tier's reader is shared).
  std::vector<const std::byte*> row_pointers(const std::vector<uint64_t>& where, const std::byte* fallback,
                                             std::vector<std::byte>& buffer) {
    std::vector<const std::byte*> at(where.size());
    std::vector<uint64_t> from_tier;
    for (size_t i = 0; i < where.size(); ++i) {
      if (where[i] == ~uint64_t{0}) at[i] = fallback;
      else if (slot_of(where[i]) == kNoSlot) from_tier.push_back(row_of(where[i]));
      else at[i] = rows.row(slot_of(where[i]));
    }
    if (from_tier.empty()) return at;
    std::sort(from_tier.begin(), from_tier.end());  // file order, and each row once
    from_tier.erase(std::unique(from_tier.begin(), from_tier.end()), from_tier.end());
    const uint32_t rb = row_bytes();
    buffer.resize(from_tier.size() * rb);
    tier->read_rows(from_tier.data(), from_tier.size(), buffer.data());
    counts.tier_reads += from_tier.size();
    for (size_t i = 0; i < where.size(); ++i)
      if (where[i] != ~uint64_t{0} && slot_of(where[i]) == kNoSlot)
        at[i] = buffer.data() +
                static_cast<size_t>(std::lower_bound(from_tier.begin(), from_tier.end(), row_of(where[i])) - from_tier.begin()) * rb;
    return at;
  }

  // After a lookup of `where` (under `mu`; `at` as row_pointers gave it, still valid): counts
  // what it read, and copies the tier's rows read by kPromoteHeat lookups into host memory, in
  // free slots or in place of the coldest copies (a clock over the slots' counts). Dropping a copy
  // is only repointing its ID to its tier row, which holds the same bytes; the order (drop the
  // old copies, write the new ones, then point the IDs at them) leaves every ID on whole bytes if
  // the process dies between any two steps.
  void promote_hot_rows(const std::vector<uint64_t>& where, const std::vector<const std::byte*>& at,
                        const int64_t* ids) {
    if (!tiered()) return;
    struct Hot {
      uint64_t row;
      size_t i;  // a position of the lookup that read it
    };
    std::vector<Hot> hot;
    for (size_t i = 0; i < where.size(); ++i) {
      if (where[i] == ~uint64_t{0}) continue;
      const uint64_t slot = slot_of(where[i]), row = row_of(where[i]);
      if (slot != kNoSlot) {
        if (slot_heat[slot] < 255) ++slot_heat[slot];
      } else {
        if (row_heat[row] < 255) ++row_heat[row];
        if (row_heat[row] >= kPromoteHeat) hot.push_back({row, i});
      }
    }
    std::sort(hot.begin(), hot.end(), [](const Hot& a, const Hot& b) { return a.row < b.row; });
    hot.erase(std::unique(hot.begin(), hot.end(), [](const Hot& a, const Hot& b) { return a.row == b.row; }), hot.end());
    if (hot.size() > kMaxPromotions) hot.resize(kMaxPromotions);
    const uint64_t slots = rows.host_rows();
    std::vector<int64_t> dropped_ids, hot_ids;
    std::vector<uint64_t> dropped_values, hot_values;
    std::vector<std::pair<uint64_t, size_t>> copies;  // slot, lookup position of its bytes
    uint64_t steps = 64 * hot.size() + 1024;         // the clock's budget for this lookup
    for (const Hot& h : hot) {
      uint64_t slot = kNoSlot;
      if (!free_slots.empty()) {
        slot = free_slots.back();
        free_slots.pop_back();
      } else {
        while (steps > 0 && slot == kNoSlot) {
          --steps;
          const uint64_t s = clock_hand;
          clock_hand = clock_hand + 1 < slots ? clock_hand + 1 : 0;
          if (slot_owner[s] == kNoOwner) continue;  // taken by this lookup already
          if (slot_heat[s] == 0) {
            slot = s;
            dropped_ids.push_back(slot_owner[s]);
            dropped_values.push_back(slot_row[s]);
          } else {
            --slot_heat[s];
          }
        }
        if (slot == kNoSlot) break;  // the copies in host memory are all warmer
      }
      slot_owner[slot] = kNoOwner;
      copies.emplace_back(slot, h.i);
      hot_ids.push_back(ids[h.i]);
      hot_values.push_back(with_slot(h.row, slot));
    }
    if (copies.empty()) return;
    if (!dropped_ids.empty()) repoint(dropped_ids, dropped_values);
    const uint32_t rb = row_bytes();
    for (const auto& [slot, i] : copies) {
      std::memcpy(rows.row(slot), at[i], rb);
      std::memset(rows.row(slot) + rb, 0, rows.header().stride - rb);
    }
    std::atomic_thread_fence(std::memory_order_seq_cst);
    rows.persist();
    repoint(hot_ids, hot_values);
    for (size_t k = 0; k < copies.size(); ++k) {
      const uint64_t slot = copies[k].first;
      slot_owner[slot] = hot_ids[k];
      slot_row[slot] = row_of(hot_values[k]);
      slot_heat[slot] = kPromoteHeat;
      row_heat[slot_row[slot]] = 0;
    }
    counts.tier_promotions += copies.size();
  }
  // Points each ID at a new index value holding the same bytes (the Table's upsert: the commit of
  // a move), and the GPU's copy of the index after it.
  void repoint(const std::vector<int64_t>& ids, const std::vector<uint64_t>& values) {
    std::vector<OpStatus> status(ids.size());
    table.execute({.size = ids.size(), .key_width = 8, .value_width = 8, .op = Op::kUpsert, .keys = ids.data(),
                   .values = values.data(), .status = status.data()});
    for (size_t k = 0; k < ids.size(); ++k)
      if (status[k] != OpStatus::kOk)
        throw Error(ErrorCode::kNoSpace, "the index refused to move id " + std::to_string(ids[k]) + ": " + to_string(status[k]), "ids");
    if (gpu) gpu->index_changed(ids.data(), values.data(), ids.size(), /*same_bytes=*/true);
  }

  // A tiered store's GPU lookup, between its launches (GpuLookupConfig::tier_rows): reads the rows
  // of `values` without a copy from the tier into `tier_rows`, in order, then counts and promotes
  // as a host lookup does. The positions here are the lookup's unique IDs; ~0 marks one whose row
  // the GPU did not read from host memory (a hit in its cache, or missing). Under `mu`.
  void read_tier_for_gpu(const int64_t* ids, const uint64_t* values, size_t n, std::byte* tier_rows) {
    const std::vector<uint64_t> where(values, values + n);
    std::vector<const std::byte*> at(n, nullptr);
    std::vector<uint64_t> from_tier;
    const uint32_t rb = row_bytes();
    for (size_t i = 0; i < n; ++i) {
      if (where[i] == ~uint64_t{0}) continue;
      if (slot_of(where[i]) != kNoSlot) {
        at[i] = rows.row(slot_of(where[i]));
      } else {
        at[i] = tier_rows + from_tier.size() * rb;
        from_tier.push_back(row_of(where[i]));
      }
    }
    if (!from_tier.empty()) tier->read_rows(from_tier.data(), from_tier.size(), tier_rows);
    counts.tier_reads += from_tier.size();
    if (!options.tier_promotion) return;
    try {
      promote_hot_rows(where, at, ids);
    } catch (const Error&) {
      options.tier_promotion = false;  // as in lookup_host
    }
  }

  // Searches `n` ids; index value per id, ~0 when missing.
  std::vector<uint64_t> find_rows(const int64_t* ids, size_t n) {
    std::vector<uint64_t> where(n, ~uint64_t{0});
    std::vector<OpStatus> status(n);
    if (n == 0) return where;
    table.execute({.size = n, .key_width = 8, .value_width = 8, .op = Op::kSearch, .keys = ids,
                   .values_out = where.data(), .status = status.data()});
    for (size_t i = 0; i < n; ++i)
      if (status[i] != OpStatus::kOk) where[i] = ~uint64_t{0};
    return where;
  }

  void default_row(std::byte* out) const {
    for (uint32_t j = 0; j < dim(); ++j) store(dtype(), out, j, rows.header().default_value);
  }

  // Rebuilds the free lists from the index: rows below next_row (and slots) that no ID points to
  // (a crash between writing a row and publishing its ID, or between repointing an ID and freeing
  // its old row), and a tiered store's slot owners.
  void rebuild_free_list() {
    const uint64_t used = rows.header().next_row, slots = tiered() ? rows.host_rows() : 0;
    std::vector<uint8_t> referenced(used, 0);
    if (tiered()) {
      slot_owner.assign(slots, kNoOwner);
      slot_row.assign(slots, 0);
      slot_heat.assign(slots, 0);
      row_heat.assign(rows.header().capacity, 0);
    }
    ExportCursor cursor;
    std::vector<int64_t> keys(1 << 16);
    std::vector<uint64_t> where(1 << 16);
    while (!cursor.done()) {
      const size_t got = table.export_items(cursor, keys.data(), where.data(), keys.size());
      for (size_t i = 0; i < got; ++i) {
        if (row_of(where[i]) < used) referenced[row_of(where[i])] = 1;
        const uint64_t slot = tiered() ? slot_of(where[i]) : kNoSlot;
        if (slot < slots) slot_owner[slot] = keys[i], slot_row[slot] = row_of(where[i]);
      }
    }
    free_rows.clear();
    for (uint64_t r = used; r-- > 0;)
      if (!referenced[r]) free_rows.push_back(r);
    counts.rows_reclaimed = free_rows.size();
    free_slots.clear();
    for (uint64_t s = slots; s-- > 0;)
      if (slot_owner[s] == kNoOwner) free_slots.push_back(s);
  }

  void open_tier(bool create) {
    if (!rows.has_tier()) return;
    const uint64_t capacity = rows.header().capacity;
    tier.emplace(create ? FileTier::create(rows.tier_path(), row_bytes(), capacity)
                        : FileTier::open(rows.tier_path(), row_bytes(), capacity));
  }

  void start_gpu() {
    if (options.engine != EngineKind::kGpu) return;
    if (!gpu_lookup_available())
      throw Error(ErrorCode::kNoGpu, "this build of gphash has no CUDA: the embedding store's GPU lookup is not available", "engine");
    const RowFileHeader& h = rows.header();
    TierRows tier_rows;
    if (tiered())
      tier_rows = [this](const int64_t* ids, const uint64_t* values, size_t n, std::byte* out) {
        read_tier_for_gpu(ids, values, n, out);
      };
    gpu = make_gpu_lookup(table, rows.data(), rows.data_bytes(),
                          {h.dim, h.stride, dtype(), h.default_value, options.cache_bytes, options.cache_ways,
                           options.aging_interval, std::move(tier_rows)});
  }
};

EmbeddingStore::EmbeddingStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
EmbeddingStore::EmbeddingStore(EmbeddingStore&&) noexcept = default;
EmbeddingStore& EmbeddingStore::operator=(EmbeddingStore&&) noexcept = default;
EmbeddingStore::~EmbeddingStore() {
  if (impl_ && !impl_->closed) {
    try {
      close();
    } catch (...) {
    }
  }
}

static OpenOptions table_options(const StoreOptions& o) {
  if (o.cache_ways == 0 || o.cache_ways > 32)
    throw Error(ErrorCode::kInvalidArgument, "cache_ways must be 1..32", "cache_ways");
  if (o.aging_interval == 0) throw Error(ErrorCode::kInvalidArgument, "aging_interval must be at least 1", "aging_interval");
  OpenOptions t;
  t.engine = o.engine;
  t.threads = o.threads;
  t.replace = o.replace;
  return t;
}

EmbeddingStore EmbeddingStore::create(const std::string& pool, const StoreConfig& c, const StoreOptions& o) {
  if (c.dim < 1 || c.dim > 1024)
    throw Error(ErrorCode::kInvalidArgument, "dim must be 1..1024, not " + std::to_string(c.dim), "dim");
  if (c.capacity == 0) throw Error(ErrorCode::kInvalidArgument, "capacity must be at least 1 row", "capacity");
  // The tier's settings, before anything is created (RowFile::create checks them again).
  if (c.host_rows > c.capacity)
    throw Error(ErrorCode::kInvalidArgument, "host_rows must be at most capacity", "host_rows");
  const bool tiered = c.host_rows != 0 && c.host_rows < c.capacity;
  if (tiered == c.tier_path.empty())
    throw Error(ErrorCode::kInvalidArgument,
                tiered ? "host_rows below capacity needs a tier file (every row lives there): give tier_path"
                       : "tier_path needs host_rows below capacity",
                "tier_path");
  if (tiered && (c.host_rows >= (uint64_t{1} << 27) || c.capacity > Impl::kRowMask))
    throw Error(ErrorCode::kInvalidArgument, "a store with a tier holds at most 2^36 rows, below 2^27 of them in host memory",
                "host_rows");
  const OpenOptions topt = table_options(o);
  Table table = Table::create(pool, {.key_width = 8, .value_width = 8, .capacity = c.capacity}, topt);
  const uint32_t stride = row_stride(c.dim * element_bytes(c.dtype));
  const uint64_t host_rows = c.host_rows ? c.host_rows : c.capacity;
  // Absolute, so that the store reopens from any working directory.
  const std::string tier_path = c.tier_path.empty() ? "" : std::filesystem::absolute(c.tier_path).string();
  auto impl = std::make_unique<Impl>(std::move(table),
                                     RowFile::create(pool, static_cast<uint32_t>(c.dtype), c.dim, stride, c.capacity,
                                                     host_rows, tier_path, c.default_value, true),
                                     o);
  impl->open_tier(true);
  impl->rebuild_free_list();
  impl->start_gpu();
  return EmbeddingStore(std::move(impl));
}

EmbeddingStore EmbeddingStore::open(const std::string& pool, const StoreOptions& o) {
  const OpenOptions topt = table_options(o);
  Table table = Table::open(pool, topt);
  if (table.key_width() != 8 || table.value_width() != 8)
    throw Error(ErrorCode::kKeyWidthMismatch, "pool " + pool + " is not an embedding store's index (key and value width must be 8)", "pool");
  auto impl = std::make_unique<Impl>(std::move(table), RowFile::open(pool), o);
  impl->open_tier(false);
  impl->rebuild_free_list();
  impl->counts.reclaimed_rows = impl->counts.rows_reclaimed > 0;
  impl->start_gpu();
  return EmbeddingStore(std::move(impl));
}

uint32_t EmbeddingStore::dim() const { return impl_->dim(); }
RowType EmbeddingStore::dtype() const { return impl_->dtype(); }
uint64_t EmbeddingStore::size() const { return impl_->table.size(); }
const Table& EmbeddingStore::table() const { return impl_->table; }

StoreStats EmbeddingStore::stats() const {
  impl_->check_open();
  std::lock_guard lock(impl_->mu);
  StoreStats s = impl_->counts;
  s.items = impl_->table.size();
  s.capacity = impl_->rows.header().capacity;
  s.rows_used = impl_->rows.header().next_row - impl_->free_rows.size();
  s.host_rows = impl_->rows.host_rows();
  if (impl_->gpu) {
    const GpuCounters g = impl_->gpu->counters();
    s.cache_hits = g.hits;
    s.cache_misses = g.misses;
    s.missing_ids += g.missing;
    s.unique_ids += g.unique;
    s.cache_rows = impl_->gpu->cache_rows();
  }
  return s;
}

void EmbeddingStore::insert_or_assign(const int64_t* ids, size_t n, const void* rows_in) {
  Impl& m = *impl_;
  m.check_open();
  check_ids(ids, n);
  if (n && !rows_in) throw Error(ErrorCode::kInvalidArgument, "rows are missing", "rows");
  std::lock_guard lock(m.mu);
  // The last row of a repeated ID wins: keep one entry per ID, at its last position.
  std::unordered_map<int64_t, size_t> last;
  last.reserve(n);
  for (size_t i = 0; i < n; ++i) last[ids[i]] = i;
  std::vector<int64_t> keys;
  std::vector<size_t> from;
  keys.reserve(last.size());
  for (size_t i = 0; i < n; ++i)
    if (last[ids[i]] == i) keys.push_back(ids[i]), from.push_back(i);
  const std::vector<uint64_t> old = m.find_rows(keys.data(), keys.size());
  std::vector<uint64_t> fresh(keys.size());  // index values: rows (and slots) of the new bytes
  const uint32_t rb = m.row_bytes();
  size_t allocated = 0;
  try {
    // A tiered store: every row goes to the tier file, and a copy to a free slot while there is one.
    std::vector<uint64_t> tier_rows;
    for (size_t k = 0; k < keys.size(); ++k, ++allocated) {
      const uint64_t row = m.allocate_row();
      const std::byte* src = static_cast<const std::byte*>(rows_in) + from[k] * rb;
      uint64_t slot = row;
      if (m.tiered()) {
        tier_rows.push_back(row);
        slot = Impl::kNoSlot;
        if (!m.free_slots.empty()) {
          slot = m.free_slots.back();
          m.free_slots.pop_back();
        }
      }
      fresh[k] = m.tiered() ? Impl::with_slot(row, slot) : row;
      if (slot == Impl::kNoSlot) continue;
      std::byte* dst = m.rows.row(slot);
      std::memcpy(dst, src, rb);
      std::memset(dst + rb, 0, m.rows.header().stride - rb);
    }
    if (!tier_rows.empty()) {
      std::vector<std::byte> data(tier_rows.size() * rb);
      for (size_t k = 0; k < keys.size(); ++k)
        std::memcpy(data.data() + k * rb, static_cast<const std::byte*>(rows_in) + from[k] * rb, rb);
      m.tier->write_rows(tier_rows.data(), tier_rows.size(), data.data());  // fsyncs
    }
  } catch (...) {
    for (size_t k = 0; k < allocated; ++k) m.release(fresh[k]);
    throw;
  }
  // Rows first, then the index entries that point to them (DESIGN.md section 3: the Table's
  // upsert is the commit; an ID is never published before its row).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  m.rows.persist();
  std::vector<OpStatus> status(keys.size());
  if (!keys.empty())
    m.table.execute({.size = keys.size(), .key_width = 8, .value_width = 8, .op = Op::kUpsert, .keys = keys.data(),
                     .values = fresh.data(), .status = status.data()});
  if (m.gpu) {  // what the Table took, the GPU's copy of it takes too
    std::vector<int64_t> taken;
    std::vector<uint64_t> taken_rows;
    for (size_t k = 0; k < keys.size(); ++k)
      if (status[k] == OpStatus::kOk) taken.push_back(keys[k]), taken_rows.push_back(fresh[k]);
    m.gpu->index_changed(taken.data(), taken_rows.data(), taken.size());
  }
  for (size_t k = 0; k < keys.size(); ++k) {
    if (status[k] != OpStatus::kOk) {
      m.release(fresh[k]);
      throw Error(ErrorCode::kNoSpace, std::string("the index refused id ") + std::to_string(keys[k]) + ": " + to_string(status[k]), "ids");
    }
    if (old[k] != ~uint64_t{0}) m.release(old[k]);
    if (m.tiered() && m.slot_of(fresh[k]) != Impl::kNoSlot) {
      const uint64_t slot = m.slot_of(fresh[k]);
      m.slot_owner[slot] = keys[k];
      m.slot_row[slot] = m.row_of(fresh[k]);
      m.slot_heat[slot] = 0;
    }
  }
}

size_t EmbeddingStore::erase(const int64_t* ids, size_t n) {
  Impl& m = *impl_;
  m.check_open();
  check_ids(ids, n);
  std::lock_guard lock(m.mu);
  std::vector<int64_t> keys(ids, ids + n);
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  const std::vector<uint64_t> old = m.find_rows(keys.data(), keys.size());
  std::vector<OpStatus> status(keys.size());
  if (!keys.empty())
    m.table.execute({.size = keys.size(), .key_width = 8, .value_width = 8, .op = Op::kErase, .keys = keys.data(),
                     .status = status.data()});
  size_t erased = 0;
  for (size_t k = 0; k < keys.size(); ++k)
    if (status[k] == OpStatus::kOk) {
      ++erased;
      if (old[k] != ~uint64_t{0}) m.release(old[k]);
    }
  if (m.gpu) m.gpu->index_changed(keys.data(), nullptr, keys.size());
  return erased;
}

size_t EmbeddingStore::find_or_insert(const int64_t* ids, size_t n, void* rows_out, Initializer init, float scale,
                                      uint64_t seed) {
  Impl& m = *impl_;
  m.check_open();
  check_ids(ids, n);
  const uint32_t rb = m.row_bytes();
  std::vector<int64_t> missing;
  {
    std::lock_guard lock(m.mu);
    const std::vector<uint64_t> where = m.find_rows(ids, n);
    for (size_t i = 0; i < n; ++i)
      if (where[i] == ~uint64_t{0}) missing.push_back(ids[i]);
  }
  std::sort(missing.begin(), missing.end());
  missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
  if (!missing.empty()) {
    std::vector<std::byte> fill(missing.size() * rb);
    for (size_t k = 0; k < missing.size(); ++k) {
      std::byte* row = fill.data() + k * rb;
      for (uint32_t j = 0; j < m.dim(); ++j) {
        float v = m.rows.header().default_value;
        // Reproducible per (seed, id, element), so a replay gives the same rows.
        const uint64_t r1 = mix(seed ^ mix(static_cast<uint64_t>(missing[k]) * 1315423911ull + j));
        const double u1 = (static_cast<double>(r1 >> 11) + 0.5) / 9007199254740992.0;
        if (init == Initializer::kUniform) {
          v = static_cast<float>((2 * u1 - 1) * scale);
        } else if (init == Initializer::kNormal) {
          const double u2 = (static_cast<double>(mix(r1) >> 11) + 0.5) / 9007199254740992.0;
          v = static_cast<float>(std::sqrt(-2 * std::log(u1)) * std::cos(6.283185307179586 * u2) * scale);
        }
        store(m.dtype(), row, j, v);
      }
    }
    insert_or_assign(missing.data(), missing.size(), fill.data());
  }
  if (rows_out) lookup_host(ids, n, nullptr, 0, false, Pooling::kNone, rows_out);
  return missing.size();
}

void EmbeddingStore::lookup_host(const int64_t* ids, size_t n, const int64_t* offsets, size_t n_offsets,
                                 bool include_last, Pooling pooling, void* out, uint8_t* found) {
  Impl& m = *impl_;
  m.check_open();
  if (n && !ids) throw Error(ErrorCode::kInvalidArgument, "ids are missing", "ids");
  if (!out) throw Error(ErrorCode::kInvalidArgument, "the output array is missing", "out");
  const bool bags = offsets != nullptr;
  if (pooling == Pooling::kNone && bags)
    throw Error(ErrorCode::kInvalidArgument, "offsets need pooling sum or mean", "offsets");
  if (pooling != Pooling::kNone && !bags)
    throw Error(ErrorCode::kInvalidArgument, "pooling sum or mean needs offsets (bags)", "offsets");
  size_t n_bags = 0;
  if (bags) {
    if (include_last && n_offsets == 0)
      throw Error(ErrorCode::kInvalidArgument, "include_last_offset needs at least one offset", "offsets");
    n_bags = include_last ? n_offsets - 1 : n_offsets;
    if (n_offsets > 0 && offsets[0] != 0) throw Error(ErrorCode::kInvalidArgument, "offsets[0] must be 0", "offsets");
    for (size_t b = 0; b < n_offsets; ++b)
      if (offsets[b] < 0 || static_cast<uint64_t>(offsets[b]) > n || (b && offsets[b] < offsets[b - 1]))
        throw Error(ErrorCode::kInvalidArgument,
                    "offsets must be non-decreasing, within 0..len(ids); offsets[" + std::to_string(b) + "] = " +
                        std::to_string(offsets[b]), "offsets");
    if (include_last && static_cast<uint64_t>(offsets[n_offsets - 1]) != n)
      throw Error(ErrorCode::kInvalidArgument, "with include_last_offset the last offset must be len(ids)", "offsets");
  }
  const RowType t = m.dtype();
  const uint32_t d = m.dim(), rb = m.row_bytes();
  std::vector<std::byte> fallback(rb), from_tier;
  m.default_row(fallback.data());
  std::unique_lock lock(m.mu);
  const std::vector<uint64_t> where = m.find_rows(ids, n);
  const std::vector<const std::byte*> at = m.row_pointers(where, fallback.data(), from_tier);
  // Host rows are read without the lock; a tiered store's lookup keeps it, since its copies in
  // host memory change (promote_hot_rows, below).
  if (!m.tiered()) lock.unlock();
  auto row_of = [&](size_t i) { return at[i]; };
  size_t missing = 0;
  for (size_t i = 0; i < n; ++i) {
    missing += where[i] == ~uint64_t{0};
    if (found) found[i] = where[i] != ~uint64_t{0};
  }
  auto* dst = static_cast<std::byte*>(out);
  if (!bags) {
    for (size_t i = 0; i < n; ++i) std::memcpy(dst + i * rb, row_of(i), rb);
  } else {
    std::vector<float> acc(d);
    for (size_t b = 0; b < n_bags; ++b) {
      const size_t begin = offsets[b], end = b + 1 < n_offsets ? offsets[b + 1] : n;
      std::fill(acc.begin(), acc.end(), 0.f);
      for (size_t i = begin; i < end; ++i)
        for (uint32_t j = 0; j < d; ++j) acc[j] += load(t, row_of(i), j);
      const float scale = pooling == Pooling::kMean && end > begin ? 1.f / static_cast<float>(end - begin) : 1.f;
      for (uint32_t j = 0; j < d; ++j) store(t, dst + b * rb, j, acc[j] * scale);
    }
  }
  if (!lock.owns_lock()) lock.lock();
  if (m.options.tier_promotion) {
    try {
      m.promote_hot_rows(where, at, ids);
    } catch (const Error&) {
      // The lookup's rows are right and every ID still points to whole bytes: promotion stops
      // for this store (what failed would fail again); slots it had taken are free at open.
      m.options.tier_promotion = false;
    }
  }
  m.counts.lookups++;
  m.counts.ids_looked_up += n;
  m.counts.missing_ids += missing;
}

void EmbeddingStore::lookup_device(const int64_t* ids, size_t n, const int64_t* offsets, size_t n_offsets,
                                   bool include_last, Pooling pooling, void* out, CUstream_st* stream) {
  Impl& m = *impl_;
  m.check_open();
  if (!m.gpu)
    throw Error(ErrorCode::kInvalidArgument, "lookups on GPU arrays need a store opened with the GPU engine", "engine");
  const bool bags = offsets != nullptr;
  if (pooling == Pooling::kNone && bags)
    throw Error(ErrorCode::kInvalidArgument, "offsets need pooling sum or mean", "offsets");
  if (pooling != Pooling::kNone && !bags)
    throw Error(ErrorCode::kInvalidArgument, "pooling sum or mean needs offsets (bags)", "offsets");
  if (bags && include_last && n_offsets == 0)
    throw Error(ErrorCode::kInvalidArgument, "include_last_offset needs at least one offset", "offsets");
  std::lock_guard lock(m.mu);
  m.gpu->lookup(ids, n, offsets, n_offsets, include_last, pooling, out, stream);
  m.counts.lookups++;
  m.counts.ids_looked_up += n;
}

size_t EmbeddingStore::export_rows(int64_t* ids, void* rows_out, size_t capacity) {
  Impl& m = *impl_;
  m.check_open();
  std::lock_guard lock(m.mu);
  const uint32_t rb = m.row_bytes();
  ExportCursor cursor;
  std::vector<uint64_t> where(capacity);
  size_t total = 0;
  while (!cursor.done()) {
    if (total == capacity) {  // full: the cursor may still have to learn that it is at the end
      int64_t spare_id;
      uint64_t spare_row;
      if (m.table.export_items(cursor, &spare_id, &spare_row, 1) != 0)
        throw Error(ErrorCode::kInvalidArgument, "export needs room for every item: capacity " + std::to_string(capacity) +
                                                     " < " + std::to_string(m.table.size()), "capacity");
      continue;
    }
    total += m.table.export_items(cursor, ids + total, where.data() + total, capacity - total);
  }
  where.resize(total);
  std::vector<std::byte> from_tier;
  const std::vector<const std::byte*> at = m.row_pointers(where, nullptr, from_tier);
  for (size_t i = 0; i < total; ++i) std::memcpy(static_cast<std::byte*>(rows_out) + i * rb, at[i], rb);
  return total;
}

void EmbeddingStore::close() {
  Impl& m = *impl_;
  if (m.closed) return;
  std::lock_guard lock(m.mu);
  m.gpu.reset();
  m.rows.persist();
  m.table.close();
  m.closed = true;
}

}  // namespace gphash::embedding
