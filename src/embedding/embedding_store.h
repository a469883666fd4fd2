// gphash::embedding::EmbeddingStore: embedding rows of int64 IDs for recommendation inference
// (the GDRec design): a gphash Table maps each ID to a row index, the rows live in a row file
// beside the table's pool, and lookups run on the GPU (dedup, index, aligned warp gather from
// host memory, a GPU-memory cache of hot rows) or, without a GPU, on the CPU.
//
// Why two files: the Table's pool format belongs to the index (its value heap is internal), and
// the gather wants rows at 128-byte-aligned offsets it controls. So the Table (key = ID, value =
// 8-byte row index, inline in the slot) answers "where", and the row file (RowFile) holds "what".
// Both live in the same place (/dev/shm for a pool name), so both survive a crash of the process.
//
// Crash consistency: a row is written before the index entry that points to it is published
// (one 8-byte value store in the Table, which is atomic); an assignment to an existing ID writes
// a fresh row and then repoints the ID (out of place), so a reader never sees a torn row. A crash
// between the two leaves an unreferenced row: reopening rebuilds the free list from the index
// (export), which reclaims it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gphash/config.h"
#include "gphash/table.h"

struct CUstream_st;

namespace gphash::embedding {

enum class RowType : uint32_t { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };
const char* to_string(RowType t) noexcept;
RowType parse_row_type(const std::string& name);  // "float32", "float16", "bfloat16"
inline uint32_t element_bytes(RowType t) { return t == RowType::kFloat32 ? 4 : 2; }

enum class Pooling : uint32_t { kNone = 0, kSum = 1, kMean = 2 };
Pooling parse_pooling(const std::string& name);  // "none", "sum", "mean"

// The distance between rows in the row file and in the cache: a row never straddles more 128-byte
// segments than its size needs (GDRec's access aligning): rows of up to 128 bytes get a power of
// two (32, 64, 128), longer rows a multiple of 128. Row file data starts 4096-byte aligned.
uint32_t row_stride(uint32_t row_bytes);

struct StoreConfig {
  uint32_t dim = 0;                  // 1..1024
  RowType dtype = RowType::kFloat32;
  uint64_t capacity = 1 << 20;       // rows the store holds (fixed at creation)
  float default_value = 0;           // every element of the row a missing ID gets
  // A tier below host memory (GDRec's NVMe tier; file_tier.h says why a file read by the CPU):
  // every row lives in the file at `tier_path` (written through, fsync'd; read with io_uring),
  // and host memory holds copies of `host_rows` of them: the rows written while it has room,
  // then those lookups read most (StoreOptions::tier_promotion). 0: every row in host memory
  // only, no tier. host_rows below 2^27 with a tier. The GPU engine's lookup of such a store
  // waits for the host half way, which reads the rows without a copy (no CUDA graph capture).
  uint64_t host_rows = 0;
  std::string tier_path;
};

struct StoreOptions {
  EngineKind engine = EngineKind::kCpu;  // kGpu: lookups on the GPU (needs a GPU and a shm pool)
  uint64_t cache_bytes = 0;              // GPU-memory row cache budget (GPU engine); 0: no cache
  uint32_t cache_ways = 8;               // associativity of the cache (1..32)
  uint32_t aging_interval = 64;          // lookups between halvings of the cache's frequency counts
  bool replace = false;                  // create: replace an existing store at the path
  int threads = 0;                       // CPU engine threads
  // A store with a file tier: rows that lookups read from the tier twice get a copy in host
  // memory, in place of the copies read least (a clock over their lookup counts).
  bool tier_promotion = true;
};

// How a missing ID is filled by find_or_insert.
enum class Initializer : uint32_t { kDefault = 0, kUniform = 1, kNormal = 2 };
Initializer parse_initializer(const std::string& name);  // "default", "uniform", "normal"

struct StoreStats {
  uint64_t items = 0, capacity = 0, rows_used = 0;
  uint64_t lookups = 0, ids_looked_up = 0, unique_ids = 0;
  uint64_t cache_hits = 0, cache_misses = 0, missing_ids = 0;  // cache counts: GPU engine
  uint64_t cache_rows = 0;  // rows the cache holds at most
  bool reclaimed_rows = false;
  uint64_t rows_reclaimed = 0;  // unreferenced rows found at open (a crash between row and index)
  uint64_t host_rows = 0;       // rows in host memory; capacity - host_rows are in the tier file
  uint64_t tier_reads = 0;      // rows read from the tier file (a row looked up twice in one call: once)
  uint64_t tier_promotions = 0; // rows copied from the tier into host memory by lookups
};

class RowFile;
class GpuLookup;

class EmbeddingStore {
 public:
  static EmbeddingStore create(const std::string& pool, const StoreConfig& config, const StoreOptions& options = {});
  static EmbeddingStore open(const std::string& pool, const StoreOptions& options = {});
  EmbeddingStore(EmbeddingStore&&) noexcept;
  EmbeddingStore& operator=(EmbeddingStore&&) noexcept;
  ~EmbeddingStore();

  uint32_t dim() const;
  RowType dtype() const;
  uint32_t row_bytes() const { return dim() * element_bytes(dtype()); }
  uint64_t size() const;
  StoreStats stats() const;
  const Table& table() const;

  // Host arrays. `ids`: n int64. `rows`: n * row_bytes, in the store's dtype.
  // insert_or_assign: the last row of an ID repeated in one call wins (as if one by one).
  void insert_or_assign(const int64_t* ids, size_t n, const void* rows);
  // Erases the IDs; returns how many were present.
  size_t erase(const int64_t* ids, size_t n);
  // Rows of the IDs into `rows_out` (n rows); missing IDs are inserted, filled by `init`
  // (kDefault: default_value; kUniform: U(-scale, scale); kNormal: N(0, scale)), reproducibly
  // from `seed` and the ID. Returns how many were inserted.
  size_t find_or_insert(const int64_t* ids, size_t n, void* rows_out, Initializer init, float scale, uint64_t seed);
  // Plain lookup on the CPU (host arrays): with offsets (n_bags + 1 entries, or n_bags entries
  // and `include_last` false, as torch's EmbeddingBag), pools each bag; without, one row per ID.
  // `found` (optional, n bytes) gets 1 for present IDs.
  void lookup_host(const int64_t* ids, size_t n, const int64_t* offsets, size_t n_offsets, bool include_last,
                   Pooling pooling, void* out, uint8_t* found = nullptr);
  // The GPU lookup (GPU engine): every array in GPU memory, enqueued on `stream`; the host never
  // waits for the device. `out` has n rows (pooling none) or n_bags rows, in the store's dtype.
  void lookup_device(const int64_t* ids, size_t n, const int64_t* offsets, size_t n_offsets, bool include_last,
                     Pooling pooling, void* out, CUstream_st* stream);
  // Every (ID, row); returns how many. Call with capacity >= size().
  size_t export_rows(int64_t* ids, void* rows, size_t capacity);
  void close();

 private:
  struct Impl;
  explicit EmbeddingStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Half-precision conversions on the host (round to nearest even), used by the CPU paths.
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bfloat16_to_float(uint16_t b);
uint16_t float_to_bfloat16(float f);

}  // namespace gphash::embedding
