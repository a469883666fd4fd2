// The GPU lookup of an EmbeddingStore (GDRec's design on the gphash index). Per lookup, all on
// the caller's stream, with no host synchronisation:
//   1. dedup: every position finds its ID's slot in an open-addressing table in the workspace
//      (the first position to claim a slot owns it), the owners number the unique IDs, and each
//      position gets its unique index (inverse); the unique count stays in GPU memory (kernels
//      read it; grids are sized for the worst case, all IDs unique). Three small kernels: the
//      radix sort this replaced took about 15 launches, a fixed cost of ~0.1 ms per lookup that
//      made small batches slower than the CPU path (H100, 2,048 IDs);
//   2. locate: a warp per unique ID probes the row cache (one set, its ways read by one lane
//      each); on a miss the warp finds the ID through a device session on the Table (one-shot
//      warp probe); gather: a group of stride/16 lanes per row copies it from the cache or from
//      the registered row file: rows are stride-aligned (32/64/128*k bytes) and read with
//      16-byte loads, so each 128-byte segment a group touches is read whole by one instruction
//      (access coalescing and aligning), and a warp has several small rows in flight;
//   3. admission (cache on): missed rows enter the cache when their estimated frequency (a
//      count sketch of misses) beats the victim's, the way with the fewest hits in its set
//      (TinyLFU-like); every `aging_interval` lookups all counts are halved, so the cache
//      follows a drifting hot set (the refresh policy). Membership changes only here, between
//      the fetches of two lookups, so a fetch never reads a row being replaced;
//   4. output: each position (pooling none) or bag (sum, mean) is written from the unique rows.
// Lookups are ordered after the previous lookup's end (an event), whatever their streams, since
// they share the cache.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "embedding/gpu_lookup.h"
#include "gphash/gpu/table_ref.cuh"

namespace gphash::embedding {
namespace {

using Ref = gpu::TableRef<gpu::Shape2L2H8S, 8>;
constexpr uint64_t kNoId = ~uint64_t{0};  // id -1 is reserved by the index, so it marks an empty way
constexpr int kBlock = 256, kWarpsPerBlock = kBlock / 32;
constexpr unsigned kFull = 0xffffffffu;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(ErrorCode::kCuda, std::string("embedding lookup: ") + what + ": " + cudaGetErrorString(e));
}

struct DeviceCounters {
  unsigned long long hits, misses, missing, unique;
};

struct CacheView {
  uint64_t* ids = nullptr;     // sets * ways; kNoId = empty
  uint32_t* scores = nullptr;  // hits of each way since admission (halved by aging)
  uint32_t* sketch = nullptr;  // miss counts by hash: the admission frequency estimate
  int* locks = nullptr;        // one per set, taken by admission only
  std::byte* rows = nullptr;   // sets * ways rows of `stride` bytes
  uint32_t sets = 0, ways = 0, sketch_mask = 0;
};

__host__ __device__ inline uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

// Copies one stride-aligned row (stride a multiple of 32 bytes) with 16-byte loads by the warp.
__device__ inline void copy_row(std::byte* dst, const std::byte* src, uint32_t stride, int lane) {
  const uint4* s = reinterpret_cast<const uint4*>(src);
  uint4* d = reinterpret_cast<uint4*>(dst);
  for (uint32_t v = lane; v < stride / 16; v += 32) d[v] = s[v];
}

constexpr uint32_t kFreeSlot = ~0u;

// Dedup, step 1: the slot of each position's ID, by linear probing from its hash. A free slot is
// claimed by CAS with the position's index; a taken one holds the ID at ids[owner].
__global__ void find_slots(const uint64_t* ids, uint32_t n, uint32_t* owners, uint32_t mask, uint32_t* slot_of) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const uint64_t id = ids[i];
    uint32_t s = static_cast<uint32_t>(mix64(id)) & mask;
    for (;;) {
      uint32_t owner = owners[s];
      if (owner == kFreeSlot && (owner = atomicCAS(&owners[s], kFreeSlot, i)) == kFreeSlot) break;
      if (ids[owner] == id) break;
      s = (s + 1) & mask;
    }
    slot_of[i] = s;
  }
}

// Step 2: the owner of each slot numbers its ID.
__global__ void number_unique(const uint64_t* ids, uint32_t n, const uint32_t* owners, const uint32_t* slot_of,
                              uint32_t* unique_of_slot, uint64_t* unique_ids, uint32_t* n_unique) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const uint32_t s = slot_of[i];
    if (owners[s] != i) continue;
    const uint32_t u = atomicAdd(n_unique, 1u);
    unique_of_slot[s] = u;
    unique_ids[u] = ids[i];
  }
}

// Step 3: each position's unique index.
__global__ void map_positions(const uint32_t* slot_of, const uint32_t* unique_of_slot, uint32_t n, uint32_t* inverse,
                              const uint32_t* n_unique, DeviceCounters* counters) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    inverse[i] = unique_of_slot[slot_of[i]];
    if (i == 0) atomicAdd(&counters->unique, static_cast<unsigned long long>(*n_unique));
  }
}

// Where each unique ID's row comes from: a cache way (kFromCache | slot), a row of the row file
// (its index), or nowhere (kMissing: the default row).
constexpr uint64_t kFromCache = uint64_t{1} << 63, kMissing = ~uint64_t{0};

// A warp per unique ID: the cache's set (a lane per way), then, on a miss, the index (the
// TableRef's one-shot warp probe). Only 8-byte words move here; the rows move in gather_rows.
__global__ void locate_rows(Ref ref, CacheView cache, const uint64_t* unique_ids, const uint32_t* n_unique_p,
                            uint64_t row_capacity, uint64_t* source, uint8_t* admit, DeviceCounters* counters) {
  __shared__ uint64_t where[kWarpsPerBlock];
  const int lane = threadIdx.x & 31, wib = threadIdx.x / 32;
  const uint32_t warps = gridDim.x * kWarpsPerBlock;
  const uint32_t n_unique = *n_unique_p;
  unsigned long long hits = 0, misses = 0, missing = 0;
  for (uint32_t u = blockIdx.x * kWarpsPerBlock + wib; u < n_unique; u += warps) {
    const uint64_t id = unique_ids[u];
    if (cache.sets && id != kNoId) {
      const uint64_t set = mix64(id) & (cache.sets - 1);
      const bool match = lane < cache.ways && cache.ids[set * cache.ways + lane] == id;
      const unsigned mask = __ballot_sync(kFull, match);
      if (mask) {
        const uint64_t slot = set * cache.ways + (__ffs(mask) - 1);
        if (lane == 0) {
          atomicAdd(&cache.scores[slot], 1u);
          source[u] = kFromCache | slot;
          admit[u] = 0;
          ++hits;
        }
        continue;
      }
    }
    uint64_t key = id;
    if (lane == 0) where[wib] = kNoId;
    __syncwarp();
    const OpStatus s = ref.find(&key, reinterpret_cast<std::byte*>(&where[wib]));
    __syncwarp();
    const uint64_t row = where[wib];
    const bool found = s == OpStatus::kOk && row < row_capacity;
    if (lane == 0) {
      source[u] = found ? row : kMissing;
      admit[u] = found;
      found ? ++misses : ++missing;
    }
    __syncwarp();
  }
  if (lane == 0) {
    if (hits) atomicAdd(&counters->hits, hits);
    if (misses) atomicAdd(&counters->misses, misses);
    if (missing) atomicAdd(&counters->missing, missing);
  }
}

// The gather: a group of `lanes` lanes (stride / 16, at most 32) per row, each lane a 16-byte
// load, so a group reads its row's aligned 32/64/128-byte segments whole, and a warp keeps
// 32 / lanes rows in flight at once (small rows do not leave most of the warp idle).
__global__ void gather_rows(CacheView cache, const uint64_t* source, const uint32_t* n_unique_p,
                            const std::byte* host_rows, const std::byte* default_row, uint32_t stride,
                            uint32_t lanes, std::byte* unique_rows) {
  const uint32_t groups_per_block = blockDim.x / lanes;
  const uint32_t group = threadIdx.x / lanes, lane = threadIdx.x % lanes;
  if (group >= groups_per_block) return;
  const uint32_t n_unique = *n_unique_p;
  const uint32_t vectors = stride / 16;
  for (uint32_t u = blockIdx.x * groups_per_block + group; u < n_unique; u += gridDim.x * groups_per_block) {
    const uint64_t from = source[u];
    const std::byte* src = from == kMissing ? default_row
                           : (from & kFromCache) ? cache.rows + (from & ~kFromCache) * stride
                                                 : host_rows + from * stride;
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(unique_rows + static_cast<size_t>(u) * stride);
    for (uint32_t v = lane; v < vectors; v += lanes) d[v] = s[v];
  }
}

__global__ void admit_rows(CacheView cache, const uint64_t* unique_ids, const uint32_t* n_unique_p, const uint8_t* admit,
                           const std::byte* unique_rows, uint32_t stride) {
  const int lane = threadIdx.x & 31, wib = threadIdx.x / 32;
  const uint32_t warps = gridDim.x * kWarpsPerBlock;
  const uint32_t n_unique = *n_unique_p;
  for (uint32_t u = blockIdx.x * kWarpsPerBlock + wib; u < n_unique; u += warps) {
    if (!admit[u]) continue;  // the same for every lane of the warp
    const uint64_t id = unique_ids[u];
    const uint64_t h = mix64(id);
    const uint64_t set = h & (cache.sets - 1);
    uint32_t freq = 0;
    int got = 0;
    if (lane == 0) {
      freq = atomicAdd(&cache.sketch[(h >> 32) & cache.sketch_mask], 1u) + 1;
      got = atomicCAS(&cache.locks[set], 0, 1) == 0;  // busy: skip (a cache may decline)
    }
    freq = __shfl_sync(kFull, freq, 0);
    if (!__shfl_sync(kFull, got, 0)) continue;
    // Victim: an empty way (score 0), else the way with the fewest hits (score hits + 1).
    uint64_t key = ~uint64_t{0};
    if (lane < cache.ways) {
      const uint64_t slot = set * cache.ways + lane;
      const uint64_t score = cache.ids[slot] == kNoId ? 0 : uint64_t{cache.scores[slot]} + 1;
      key = (score << 5) | lane;
    }
    for (int o = 16; o; o >>= 1) key = min(key, __shfl_xor_sync(kFull, key, o));
    const uint32_t way = key & 31;
    const uint64_t victim = key >> 5;
    const uint64_t slot = set * cache.ways + way;
    if (victim == 0 || freq > victim - 1) {
      if (lane == 0) cache.ids[slot] = kNoId;
      __syncwarp();
      copy_row(cache.rows + slot * stride, unique_rows + static_cast<size_t>(u) * stride, stride, lane);
      __syncwarp();
      if (lane == 0) {
        cache.scores[slot] = freq;
        cache.ids[slot] = id;
      }
    }
    if (lane == 0) {
      __threadfence();
      atomicExch(&cache.locks[set], 0);
    }
    __syncwarp();
  }
}

__global__ void age_counts(uint32_t* scores, uint64_t n_scores, uint32_t* sketch, uint64_t n_sketch) {
  for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < n_scores + n_sketch; i += gridDim.x * uint64_t{blockDim.x}) {
    if (i < n_scores) scores[i] >>= 1;
    else sketch[i - n_scores] >>= 1;
  }
}

__global__ void invalidate_ids(CacheView cache, const uint64_t* ids, uint32_t n) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const uint64_t set = mix64(ids[i]) & (cache.sets - 1);
    for (uint32_t w = 0; w < cache.ways; ++w)
      if (cache.ids[set * cache.ways + w] == ids[i]) {
        cache.ids[set * cache.ways + w] = kNoId;
        cache.scores[set * cache.ways + w] = 0;
      }
  }
}

template <class T> __device__ inline float to_f(T v);
template <> __device__ inline float to_f(float v) { return v; }
template <> __device__ inline float to_f(__half v) { return __half2float(v); }
template <> __device__ inline float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T> __device__ inline T from_f(float v);
template <> __device__ inline float from_f(float v) { return v; }
template <> __device__ inline __half from_f(float v) { return __float2half_rn(v); }
template <> __device__ inline __nv_bfloat16 from_f(float v) { return __float2bfloat16_rn(v); }

// One warp per position: out[i] = unique_rows[inverse[i]].
template <class T>
__global__ void expand_rows(const std::byte* unique_rows, uint32_t stride, const uint32_t* inverse, uint32_t n,
                            uint32_t dim, T* out) {
  const int lane = threadIdx.x & 31;
  const uint32_t warps = gridDim.x * kWarpsPerBlock;
  for (uint32_t i = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32; i < n; i += warps) {
    const T* src = reinterpret_cast<const T*>(unique_rows + static_cast<size_t>(inverse[i]) * stride);
    for (uint32_t j = lane; j < dim; j += 32) out[static_cast<size_t>(i) * dim + j] = src[j];
  }
}

// One warp per bag, lanes across the row; sums in float32, as torch's EmbeddingBag on half does.
template <class T>
__global__ void pool_bags(const std::byte* unique_rows, uint32_t stride, const uint32_t* inverse, uint32_t n,
                          const int64_t* offsets, uint32_t n_offsets, uint32_t n_bags, bool mean, uint32_t dim, T* out) {
  const int lane = threadIdx.x & 31;
  const uint32_t warps = gridDim.x * kWarpsPerBlock;
  for (uint32_t b = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32; b < n_bags; b += warps) {
    int64_t begin = offsets[b], end = b + 1 < n_offsets ? offsets[b + 1] : int64_t{n};
    begin = begin < 0 ? 0 : (begin > n ? n : begin);
    end = end < begin ? begin : (end > n ? n : end);
    const float scale = mean && end > begin ? 1.f / static_cast<float>(end - begin) : 1.f;
    for (uint32_t j = lane; j < dim; j += 32) {
      float acc = 0;
      for (int64_t p = begin; p < end; ++p)
        acc += to_f(reinterpret_cast<const T*>(unique_rows + static_cast<size_t>(inverse[p]) * stride)[j]);
      out[static_cast<size_t>(b) * dim + j] = from_f<T>(acc * scale);
    }
  }
}

uint32_t blocks_for(uint64_t work_items, uint32_t per_block) {
  return static_cast<uint32_t>(std::clamp<uint64_t>((work_items + per_block - 1) / per_block, 1, 132 * 32));
}

}  // namespace

struct GpuLookup::Impl {
  Table& table;
  GpuLookupConfig config;
  std::byte* host_rows = nullptr;      // the row file's data, as mapped by this process
  std::byte* device_rows = nullptr;    // the same memory, as the GPU addresses it
  uint64_t row_capacity = 0;
  std::byte* default_row = nullptr;    // GPU memory, one stride
  DeviceCounters* counters = nullptr;  // GPU memory
  CacheView cache;
  cudaEvent_t last_done = nullptr;     // the previous lookup's end
  uint64_t lookups = 0;
  // One device session serves every lookup until a write needs the table (pause()): beginning a
  // session waits for the table's previous work to settle and prepares the engine, which per
  // lookup would cost a host wait and a few calls. Lookups only search, so the frozen layout of a
  // session is all they need.
  cudaStream_t session_stream = nullptr;
  cudaEvent_t session_ready = nullptr;
  bool session_open = false;
  Ref ref{};

  void open_session() {
    if (session_open) return;
    DeviceSession session = table.begin_device_session(session_stream);
    ref = session.ref<Ref>();
    check(cudaEventRecord(session_ready, session_stream), "cudaEventRecord");
    session_open = true;
  }
  void close_session() {
    if (!session_open) return;
    session_open = false;
    check(cudaStreamWaitEvent(session_stream, last_done, 0), "cudaStreamWaitEvent");
    table.end_device_session(session_stream).wait();
  }

  Impl(Table& t, std::byte* rows, size_t rows_bytes, const GpuLookupConfig& c) : table(t), config(c), host_rows(rows) {
    row_capacity = rows_bytes / c.stride;
    check(cudaHostRegister(rows, rows_bytes, cudaHostRegisterMapped), "cudaHostRegister of the row file");
    void* dev = nullptr;
    check(cudaHostGetDevicePointer(&dev, rows, 0), "cudaHostGetDevicePointer of the row file");
    device_rows = static_cast<std::byte*>(dev);
    std::vector<std::byte> row(c.stride, std::byte{0});
    for (uint32_t j = 0; j < c.dim; ++j) {
      if (c.dtype == RowType::kFloat32) {
        std::memcpy(row.data() + 4 * j, &c.default_value, 4);
      } else {
        const uint16_t h = c.dtype == RowType::kFloat16 ? float_to_half(c.default_value) : float_to_bfloat16(c.default_value);
        std::memcpy(row.data() + 2 * j, &h, 2);
      }
    }
    check(cudaMalloc(&default_row, c.stride), "cudaMalloc");
    check(cudaMemcpy(default_row, row.data(), c.stride, cudaMemcpyHostToDevice), "cudaMemcpy");
    check(cudaMalloc(&counters, sizeof(DeviceCounters)), "cudaMalloc");
    check(cudaMemset(counters, 0, sizeof(DeviceCounters)), "cudaMemset");
    check(cudaEventCreateWithFlags(&last_done, cudaEventDisableTiming), "cudaEventCreate");
    check(cudaEventCreateWithFlags(&session_ready, cudaEventDisableTiming), "cudaEventCreate");
    check(cudaStreamCreateWithFlags(&session_stream, cudaStreamNonBlocking), "cudaStreamCreate");
    // The cache: as many ways as the budget pays for (row + id + score), in power-of-two sets.
    const uint64_t per_row = c.stride + sizeof(uint64_t) + sizeof(uint32_t);
    const uint64_t rows_budget = c.cache_bytes / per_row;
    uint64_t sets = 1;
    while (sets * 2 * c.cache_ways <= rows_budget) sets *= 2;
    if (rows_budget >= c.cache_ways) {
      cache.sets = static_cast<uint32_t>(sets);
      cache.ways = c.cache_ways;
      const uint64_t slots = sets * c.cache_ways;
      uint64_t sketch = 1024;
      while (sketch < 4 * slots) sketch *= 2;
      cache.sketch_mask = static_cast<uint32_t>(sketch - 1);
      check(cudaMalloc(&cache.ids, slots * sizeof(uint64_t)), "cudaMalloc of the row cache");
      check(cudaMemset(cache.ids, 0xff, slots * sizeof(uint64_t)), "cudaMemset");
      check(cudaMalloc(&cache.scores, slots * sizeof(uint32_t)), "cudaMalloc of the row cache");
      check(cudaMemset(cache.scores, 0, slots * sizeof(uint32_t)), "cudaMemset");
      check(cudaMalloc(&cache.sketch, sketch * sizeof(uint32_t)), "cudaMalloc of the row cache");
      check(cudaMemset(cache.sketch, 0, sketch * sizeof(uint32_t)), "cudaMemset");
      check(cudaMalloc(&cache.locks, sets * sizeof(int)), "cudaMalloc of the row cache");
      check(cudaMemset(cache.locks, 0, sets * sizeof(int)), "cudaMemset");
      check(cudaMalloc(&cache.rows, slots * c.stride), "cudaMalloc of the row cache");
    }
  }

  ~Impl() {
    try {
      close_session();
    } catch (...) {
    }
    cudaDeviceSynchronize();  // kernels of earlier lookups may still read these
    if (session_ready) cudaEventDestroy(session_ready);
    if (session_stream) cudaStreamDestroy(session_stream);
    cudaFree(cache.ids);
    cudaFree(cache.scores);
    cudaFree(cache.sketch);
    cudaFree(cache.locks);
    cudaFree(cache.rows);
    cudaFree(default_row);
    cudaFree(counters);
    if (last_done) cudaEventDestroy(last_done);
    cudaHostUnregister(host_rows);
  }
};

GpuLookup::GpuLookup(Table& table, std::byte* rows, size_t rows_bytes, const GpuLookupConfig& config)
    : impl_(std::make_unique<Impl>(table, rows, rows_bytes, config)) {}
GpuLookup::~GpuLookup() = default;

uint64_t GpuLookup::cache_rows() const { return uint64_t{impl_->cache.sets} * impl_->cache.ways; }

GpuCounters GpuLookup::counters() const {
  DeviceCounters d{};
  check(cudaDeviceSynchronize(), "waiting for lookups");
  check(cudaMemcpy(&d, impl_->counters, sizeof d, cudaMemcpyDeviceToHost), "cudaMemcpy of the counters");
  return {d.hits, d.misses, d.missing, d.unique};
}

void GpuLookup::pause() { impl_->close_session(); }

void GpuLookup::invalidate(const int64_t* ids, size_t n) {
  Impl& m = *impl_;
  if (!m.cache.sets || n == 0) return;
  // Writes are host-driven and synchronous: wait for lookups in flight, which may admit rows.
  check(cudaDeviceSynchronize(), "waiting for lookups before a write");
  uint64_t* dev = nullptr;
  check(cudaMalloc(&dev, n * sizeof(uint64_t)), "cudaMalloc");
  check(cudaMemcpy(dev, ids, n * sizeof(uint64_t), cudaMemcpyHostToDevice), "cudaMemcpy");
  invalidate_ids<<<blocks_for(n, kBlock), kBlock>>>(m.cache, dev, static_cast<uint32_t>(n));
  const cudaError_t e = cudaDeviceSynchronize();
  cudaFree(dev);
  check(e, "invalidating cached rows");
}

void GpuLookup::lookup(const int64_t* ids, size_t n, const int64_t* offsets, size_t n_offsets, bool include_last,
                       Pooling pooling, void* out, CUstream_st* stream) {
  Impl& m = *impl_;
  const GpuLookupConfig& c = m.config;
  const uint32_t row_bytes = c.dim * element_bytes(c.dtype);
  const size_t n_bags = offsets ? (include_last ? n_offsets - 1 : n_offsets) : n;
  if (n >= (uint64_t{1} << 31)) throw Error(ErrorCode::kInvalidArgument, "a lookup takes fewer than 2^31 ids", "ids");
  if (n == 0) {
    if (n_bags) check(cudaMemsetAsync(out, 0, n_bags * row_bytes, stream), "cudaMemsetAsync");
    return;
  }
  check(cudaStreamWaitEvent(stream, m.last_done, 0), "cudaStreamWaitEvent");
  const uint32_t n32 = static_cast<uint32_t>(n);

  // Workspace, stream-ordered (cudaMallocAsync: no device-wide synchronisation).
  uint64_t slots = 1024;  // the dedup table: at most half full
  while (slots < 2 * uint64_t{n32}) slots *= 2;
  auto round = [](size_t b) { return (b + 255) / 256 * 256; };
  size_t total = 0;
  const size_t o_owners = total; total += round(4 * slots);
  const size_t o_count = total; total += 256;
  const size_t o_unique_of_slot = total; total += round(4 * slots);
  const size_t o_slot_of = total; total += round(4 * n);
  const size_t o_unique = total; total += round(8 * n);
  const size_t o_inverse = total; total += round(4 * n);
  const size_t o_admit = total; total += round(n);
  const size_t o_source = total; total += round(8 * n);
  const size_t o_rows = total; total += round(n * size_t{c.stride});
  std::byte* ws = nullptr;
  check(cudaMallocAsync(reinterpret_cast<void**>(&ws), total, stream), "cudaMallocAsync of the lookup's workspace");
  auto at = [&](size_t o) { return ws + o; };
  auto* owners = reinterpret_cast<uint32_t*>(at(o_owners));
  auto* n_unique = reinterpret_cast<uint32_t*>(at(o_count));
  auto* unique_of_slot = reinterpret_cast<uint32_t*>(at(o_unique_of_slot));
  auto* slot_of = reinterpret_cast<uint32_t*>(at(o_slot_of));
  auto* unique_ids = reinterpret_cast<uint64_t*>(at(o_unique));
  auto* inverse = reinterpret_cast<uint32_t*>(at(o_inverse));
  auto* admit = reinterpret_cast<uint8_t*>(at(o_admit));
  auto* source = reinterpret_cast<uint64_t*>(at(o_source));
  std::byte* unique_rows = at(o_rows);

  const uint32_t grid = blocks_for(n, kBlock);
  check(cudaMemsetAsync(owners, 0xff, 4 * slots, stream), "cudaMemsetAsync");
  check(cudaMemsetAsync(n_unique, 0, 4, stream), "cudaMemsetAsync");
  find_slots<<<grid, kBlock, 0, stream>>>(reinterpret_cast<const uint64_t*>(ids), n32, owners, static_cast<uint32_t>(slots - 1), slot_of);
  number_unique<<<grid, kBlock, 0, stream>>>(reinterpret_cast<const uint64_t*>(ids), n32, owners, slot_of,
                                             unique_of_slot, unique_ids, n_unique);
  map_positions<<<grid, kBlock, 0, stream>>>(slot_of, unique_of_slot, n32, inverse, n_unique, m.counters);

  // The index, through a device session on the Table: the fetch kernel's warps find the IDs.
  const uint32_t warp_grid = blocks_for(n, kWarpsPerBlock);
  m.open_session();
  check(cudaStreamWaitEvent(stream, m.session_ready, 0), "cudaStreamWaitEvent");
  locate_rows<<<warp_grid, kBlock, 0, stream>>>(m.ref, m.cache, unique_ids, n_unique, m.row_capacity, source, admit,
                                                 m.counters);
  check(cudaGetLastError(), "launching the locate kernel");
  const uint32_t lanes = std::min<uint32_t>(32, c.stride / 16);
  gather_rows<<<blocks_for(n * lanes, kBlock), kBlock, 0, stream>>>(m.cache, source, n_unique, m.device_rows,
                                                                   m.default_row, c.stride, lanes, unique_rows);
  if (m.cache.sets) {
    admit_rows<<<warp_grid, kBlock, 0, stream>>>(m.cache, unique_ids, n_unique, admit, unique_rows, c.stride);
    if (++m.lookups % c.aging_interval == 0) {
      const uint64_t slots = uint64_t{m.cache.sets} * m.cache.ways;
      age_counts<<<blocks_for(slots, kBlock), kBlock, 0, stream>>>(m.cache.scores, slots, m.cache.sketch,
                                                                    uint64_t{m.cache.sketch_mask} + 1);
    }
  }
  auto output = [&](auto* typed_out) {
    using T = std::remove_pointer_t<decltype(typed_out)>;
    if (!offsets) {
      expand_rows<T><<<warp_grid, kBlock, 0, stream>>>(unique_rows, c.stride, inverse, n32, c.dim, typed_out);
    } else if (n_bags) {
      pool_bags<T><<<blocks_for(n_bags, kWarpsPerBlock), kBlock, 0, stream>>>(
          unique_rows, c.stride, inverse, n32, offsets, static_cast<uint32_t>(n_offsets), static_cast<uint32_t>(n_bags),
          pooling == Pooling::kMean, c.dim, typed_out);
    }
  };
  if (c.dtype == RowType::kFloat32) output(static_cast<float*>(out));
  else if (c.dtype == RowType::kFloat16) output(static_cast<__half*>(out));
  else output(static_cast<__nv_bfloat16*>(out));
  check(cudaGetLastError(), "launching the lookup's kernels");
  check(cudaFreeAsync(ws, stream), "cudaFreeAsync");
  check(cudaEventRecord(m.last_done, stream), "cudaEventRecord");
}

bool gpu_lookup_available() {
  int devices = 0;
  return cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
}

std::unique_ptr<GpuLookup> make_gpu_lookup(Table& table, std::byte* rows, size_t rows_bytes, const GpuLookupConfig& config) {
  return std::make_unique<GpuLookup>(table, rows, rows_bytes, config);
}

}  // namespace gphash::embedding
