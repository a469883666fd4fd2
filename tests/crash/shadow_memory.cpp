#include "shadow_memory.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>

#include "format/header.h"
#include "format/hmeh/layout.h"
#include "format/layout.h"

namespace gphash::crashtest {

ShadowRecorder* ShadowRecorder::current = nullptr;

namespace {

constexpr uint64_t kLine = 64;
// The header copies are written outside the seam (see shadow_memory.h): snapshots take them live.
constexpr uint64_t kHeaderPages = format::kMaintenanceOffset;

}  // namespace

ShadowRecorder::ShadowRecorder(const pool::Pool& pool) : pool_(pool) {
  persisted_.assign(pool.base(), pool.base() + pool.file_size());
}

void ShadowRecorder::on_store(const void* p, size_t n) {
  std::function<void(uint64_t)> hook;
  uint64_t count;
  {
    std::lock_guard lock(mutex_);
    const auto* base = pool_.base();
    const auto* at = static_cast<const std::byte*>(p);
    if (at < base || at + n > base + pool_.file_size())
      throw std::logic_error("ShadowMemory: a store outside the pool");
    const uint64_t begin = static_cast<uint64_t>(at - base) & ~uint64_t{7};
    const uint64_t end = static_cast<uint64_t>(at - base) + n;
    for (uint64_t off = begin; off < end; off += 8) {
      uint64_t value;
      std::memcpy(&value, base + off, 8);
      pending_.push_back({off, value, sequence_++});
    }
    count = ++stores_;
    hook = hook_;
  }
  if (hook) hook(count);
}

void ShadowRecorder::on_persist(const void* p, size_t n) {
  std::lock_guard lock(mutex_);
  const uint64_t off = static_cast<uint64_t>(static_cast<const std::byte*>(p) - pool_.base());
  const uint64_t lo = off / kLine * kLine, hi = (off + n + kLine - 1) / kLine * kLine;
  if (persisted_.size() < pool_.file_size()) persisted_.resize(pool_.file_size(), std::byte{0});
  // Pending stores are in program order, so the last one to a word wins.
  auto keep = std::remove_if(pending_.begin(), pending_.end(), [&](const PendingStore& s) {
    if (s.offset < lo || s.offset >= hi) return false;
    std::memcpy(persisted_.data() + s.offset, &s.value, 8);
    return true;
  });
  pending_.erase(keep, pending_.end());
}

std::vector<PendingStore> ShadowRecorder::pending() const {
  std::lock_guard lock(mutex_);
  return pending_;
}

Snapshot ShadowRecorder::snapshot(std::string label) const {
  std::lock_guard lock(mutex_);
  Snapshot s;
  s.persisted = persisted_;
  s.persisted.resize(pool_.file_size(), std::byte{0});  // extents allocated since: zeros
  std::memcpy(s.persisted.data(), pool_.base(), kHeaderPages);
  s.pending = pending_;
  s.store_index = stores_;
  s.label = std::move(label);
  return s;
}

std::string ShadowRecorder::describe(uint64_t offset) const { return describe(offset, pool_.header()); }

namespace {

// "segment 3 bucket 17 slot 2 word 1", "radix node 5 entry 2", "heap cell 40 word 0".
std::string describe_hmeh(uint64_t offset, const format::PoolHeader& h) {
  const format::HmehMeta& m = h.hmeh;
  struct Arena {
    const char* name;
    uint32_t count;
    uint64_t first;
    const uint64_t* offsets;
    uint64_t unit;
  };
  const Arena arenas[] = {{"segment", m.segment_chunk_count, m.segment_first_chunk, m.segment_chunk_offset,
                           uint64_t{1} << m.segment_bytes_log2},
                          {"radix node", m.node_chunk_count, m.node_first_chunk, m.node_chunk_offset,
                           format::hmeh::kNodeBytes},
                          {"heap cell", m.heap_chunk_count, m.heap_first_chunk_cells, m.heap_chunk_offset, m.cell_size}};
  for (const Arena& a : arenas) {
    const format::HeapGeometry g{a.first, a.first ? static_cast<uint32_t>(__builtin_ctzll(a.first)) : 0};
    for (uint32_t c = 0; c < a.count; ++c) {
      const uint64_t lo = a.offsets[c], bytes = g.chunk_cells(c) * a.unit;
      if (offset < lo || offset >= lo + bytes) continue;
      const uint64_t id = g.chunk_begin(c) + (offset - lo) / a.unit, in = (offset - lo) % a.unit;
      if (a.offsets == m.segment_chunk_offset) {
        const uint32_t slot_bytes = format::hmeh::slot_bytes(m.key_width);
        return fmt::format("segment {} bucket {} slot {} word {}", id, in / format::hmeh::kBucketBytes,
                           in % format::hmeh::kBucketBytes / slot_bytes, in % slot_bytes / 8);
      }
      return fmt::format("{} {} {} {}", a.name, id, a.offsets == m.node_chunk_offset ? "entry" : "word", in / 8);
    }
  }
  return fmt::format("offset {} (no extent)", offset);
}

}  // namespace

std::string ShadowRecorder::describe(uint64_t offset, const format::PoolHeader& h) {
  if (offset < kHeaderPages) return "header";
  if (h.index_kind == format::kIndexHmeh && offset >= format::kReservedPrefixBytes) return describe_hmeh(offset, h);
  if (offset < format::kReservedPrefixBytes) {
    static const char* kFields[] = {"move_state", "move_from", "move_to"};
    const uint64_t field = (offset - format::kMaintenanceOffset) / 8;
    return fmt::format("move record {}", field < 3 ? kFields[field] : "reserved word");
  }
  const format::BucketLayout layout = format::bucket_layout(h);
  for (uint32_t l = h.gphash.bottom_level; l <= format::kMaxLevel; ++l) {
    if (!h.gphash.level_offset[l]) continue;
    const uint64_t lo = h.gphash.level_offset[l], bytes = format::level_bytes(h, l);
    if (offset < lo || offset >= lo + bytes) continue;
    const uint64_t bucket = (offset - lo) / h.gphash.bucket_bytes;
    const uint32_t in = static_cast<uint32_t>((offset - lo) % h.gphash.bucket_bytes);
    const uint32_t S = h.gphash.slots, kw = h.gphash.key_width;
    if (layout.key_is_state())
      return fmt::format("level {} bucket {} slot {} {}", l, bucket, in / 16,
                         in % 16 < 8 ? "key/state word" : "value word");
    if (in < 8 * S) return fmt::format("level {} bucket {} slot {} state word", l, bucket, in / 8);
    if (in < 8 * S + kw * S)
      return fmt::format("level {} bucket {} slot {} key word {}", l, bucket, (in - 8 * S) / kw, (in - 8 * S) % kw / 8);
    return fmt::format("level {} bucket {} slot {} value word", l, bucket, (in - 8 * S - kw * S) / 8);
  }
  const format::HeapGeometry g = format::heap_geometry(h);
  for (uint32_t c = 0; c < h.gphash.heap_chunk_count; ++c) {
    const uint64_t lo = h.gphash.heap_chunk_offset[c], bytes = g.chunk_cells(c) * h.gphash.cell_size;
    if (offset >= lo && offset < lo + bytes)
      return fmt::format("heap cell {} word {}", g.chunk_begin(c) + (offset - lo) / h.gphash.cell_size,
                         (offset - lo) % h.gphash.cell_size / 8);
  }
  return fmt::format("offset {} (no extent)", offset);
}

namespace {

// The units a crash chooses for independently: words (kWords) or lines (kLines), each with the
// indices of its pending stores in program order.
std::vector<std::vector<size_t>> units_of(const Snapshot& s, ImageMode mode) {
  std::map<uint64_t, std::vector<size_t>> by_unit;
  for (size_t i = 0; i < s.pending.size(); ++i)
    by_unit[mode == ImageMode::kWords ? s.pending[i].offset : s.pending[i].offset / kLine].push_back(i);
  std::vector<std::vector<size_t>> units;
  for (auto& [unit, stores] : by_unit) units.push_back(std::move(stores));
  return units;
}

}  // namespace

std::vector<std::vector<uint32_t>> image_choices(const Snapshot& s, ImageMode mode, size_t max_images,
                                                 std::mt19937_64& rng) {
  const std::vector<std::vector<size_t>> units = units_of(s, mode);
  // Choice per unit: 0 = nothing of it persisted; c = (kWords) the c-th store's value,
  // (kLines) the first c stores to the line.
  double combinations = 1;
  for (const auto& u : units) combinations *= static_cast<double>(u.size() + 1);
  std::vector<std::vector<uint32_t>> out;
  if (combinations <= static_cast<double>(max_images)) {
    std::vector<uint32_t> c(units.size(), 0);
    for (;;) {
      out.push_back(c);
      size_t i = 0;
      while (i < units.size() && ++c[i] > units[i].size()) c[i++] = 0;
      if (i == units.size()) break;
    }
    return out;
  }
  std::set<std::vector<uint32_t>> seen;
  std::vector<uint32_t> none(units.size(), 0), all(units.size());
  for (size_t i = 0; i < units.size(); ++i) all[i] = static_cast<uint32_t>(units[i].size());
  for (auto& c : {none, all})
    if (seen.insert(c).second) out.push_back(c);
  for (size_t tries = 0; out.size() < max_images && tries < max_images * 20; ++tries) {
    std::vector<uint32_t> c(units.size());
    for (size_t i = 0; i < units.size(); ++i) c[i] = static_cast<uint32_t>(rng() % (units[i].size() + 1));
    if (seen.insert(c).second) out.push_back(c);
  }
  return out;
}

void write_image(const Snapshot& s, ImageMode mode, const std::vector<uint32_t>& choice, const std::string& path) {
  std::vector<std::byte> image = s.persisted;
  const std::vector<std::vector<size_t>> units = units_of(s, mode);
  for (size_t u = 0; u < units.size(); ++u) {
    if (choice[u] == 0) continue;
    if (mode == ImageMode::kWords) {
      const PendingStore& st = s.pending[units[u][choice[u] - 1]];
      std::memcpy(image.data() + st.offset, &st.value, 8);
    } else {
      for (uint32_t k = 0; k < choice[u]; ++k) {
        const PendingStore& st = s.pending[units[u][k]];
        std::memcpy(image.data() + st.offset, &st.value, 8);
      }
    }
  }
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot create crash image " + path);
  size_t done = 0;
  while (done < image.size()) {
    ssize_t n = ::write(fd, image.data() + done, image.size() - done);
    if (n <= 0) {
      close(fd);
      throw std::runtime_error("cannot write crash image " + path);
    }
    done += static_cast<size_t>(n);
  }
  close(fd);
}

std::string describe_choice(const ShadowRecorder&, const Snapshot& s, ImageMode mode,
                            const std::vector<uint32_t>& choice) {
  // The layout as the snapshot's header (the newer valid copy) describes it.
  format::PoolHeader copies[2], h{};
  uint64_t generation = 0;
  for (int c = 0; c < 2; ++c) {
    std::memcpy(static_cast<void*>(&copies[c]), s.persisted.data() + format::kHeaderCopyOffset[c], sizeof copies[c]);
    if (format::header_checksum(copies[c]) == copies[c].checksum && copies[c].generation >= generation) {
      h = copies[c];
      generation = copies[c].generation;
    }
  }
  const std::vector<std::vector<size_t>> units = units_of(s, mode);
  std::string out;
  for (size_t u = 0; u < units.size(); ++u) {
    for (size_t k = 0; k < units[u].size(); ++k) {
      const PendingStore& st = s.pending[units[u][k]];
      const bool kept = mode == ImageMode::kWords ? choice[u] == k + 1 : k < choice[u];
      out += fmt::format("    store #{} to {} = {:#018x}: {}\n", st.sequence, ShadowRecorder::describe(st.offset, h),
                         st.value, kept ? "persisted" : "lost");
    }
  }
  return out.empty() ? "    (no pending stores)\n" : out;
}

}  // namespace gphash::crashtest
