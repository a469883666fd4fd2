// GpuLookup: the GPU side of an EmbeddingStore (built with CUDA only). Per lookup, three or four
// kernels on the caller's stream (gpu_lookup.cu says what each does): dedup of the batch's IDs,
// a warp per unique ID that probes the row cache in GPU memory and, on a miss, finds the ID
// through a device session on the Table and gathers its row from the registered row file with
// 16-byte loads over stride-aligned rows; the pooling/expansion into the caller's output; then
// admission of missed rows into the cache. Nothing here waits for the device except pause(),
// invalidate() and counters(), which writes and stats() call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "embedding/embedding_store.h"

namespace gphash::embedding {

struct GpuLookupConfig {
  uint32_t dim, stride;
  RowType dtype;
  float default_value;
  uint64_t cache_bytes;
  uint32_t cache_ways, aging_interval;
};

struct GpuCounters {
  uint64_t hits = 0, misses = 0, missing = 0, unique = 0;
};

class GpuLookup {
 public:
  GpuLookup(Table& table, std::byte* rows, size_t rows_bytes, const GpuLookupConfig& config);
  ~GpuLookup();
  void lookup(const int64_t* ids, size_t n, const int64_t* offsets, size_t n_offsets, bool include_last,
              Pooling pooling, void* out, CUstream_st* stream);
  // Ends the device session the lookups keep open (after the lookups in flight), so the Table
  // takes host batches again; the next lookup opens a new one. Call before any other use of the
  // Table.
  void pause();
  // Drops the cached rows of these IDs (host array); waits for the device first.
  void invalidate(const int64_t* ids, size_t n);
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
