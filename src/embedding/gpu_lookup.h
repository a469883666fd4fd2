// GpuLookup: the GPU side of an EmbeddingStore (built with CUDA only). Per lookup, one cooperative
// kernel on the caller's stream, in steps (gpu_lookup.cu says what each does): dedup of the IDs,
// a warp per unique ID that probes the row cache in GPU memory and, on a miss, finds the ID in a
// GPU-memory copy of the store's index (a gphash Table of its own) and gathers its row from the
// registered row file with 16-byte loads over stride-aligned rows; the pooling/expansion into the
// caller's output; then admission of missed rows into the cache. Nothing here waits for the
// device except index_changed() and counters(), which writes and stats() call, and the lookup of
// a store with a file tier, which the host joins half way (GpuLookupConfig::tier_rows).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "embedding/embedding_store.h"

namespace gphash::embedding {

// A tiered store's index value: its tier row, and 1 + its host-memory slot from this bit up (0: no
// copy in host memory).
inline constexpr int kTierSlotShift = 36;

// What a tiered store's lookup found in its index, per unique ID (cache hits and missing IDs
// have no value: ~0), and where the rows it must read from the tier go: row_bytes each, packed, in
// the order of the IDs whose value has no copy in host memory.
using TierRows = std::function<void(const int64_t* ids, const uint64_t* values, size_t n, std::byte* tier_rows)>;

struct GpuLookupConfig {
  uint32_t dim, stride;
  RowType dtype;
  float default_value;
  uint64_t cache_bytes;
  uint32_t cache_ways, aging_interval;
  // A store with a file tier (EmbeddingStore's index values carry the host-memory slot above bit
  // 36, 0 for none): each lookup runs in two kernels, and between them the host reads the rows
  // without a copy from the tier (and may promote some) through this callback.
  TierRows tier_rows;
};

struct GpuCounters {
  uint64_t hits = 0, misses = 0, missing = 0, unique = 0;
};

class GpuLookup {
 public:
  // Copies `table` (the store's index, ID -> row) into GPU memory.
  GpuLookup(Table& table, std::byte* rows, size_t rows_bytes, const GpuLookupConfig& config);
  ~GpuLookup();
  void lookup(const int64_t* ids, size_t n, const int64_t* offsets, size_t n_offsets, bool include_last,
              Pooling pooling, void* out, CUstream_st* stream);
  // The store has changed these IDs in its Table (host arrays; rows: their new row indexes, null
  // when erased): the GPU's copy of the index follows, and the cache drops their rows (unless
  // `same_bytes`: the IDs point to other copies of the bytes they had). Waits for the lookups in
  // flight first.
  void index_changed(const int64_t* ids, const uint64_t* rows, size_t n, bool same_bytes = false);
  GpuCounters counters() const;  // waits for the device
  uint64_t cache_rows() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Whether this build has the GPU lookup (false: EmbeddingStore refuses EngineKind::kGpu).
bool gpu_lookup_available();
std::unique_ptr<GpuLookup> make_gpu_lookup(Table& table, std::byte* rows, size_t rows_bytes, const GpuLookupConfig& config);

}  // namespace gphash::embedding
