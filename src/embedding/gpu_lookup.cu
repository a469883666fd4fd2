// The GPU lookup of an EmbeddingStore (GDRec's design on the gphash index). Per lookup, one
// cooperative kernel on the caller's stream, with no host synchronisation, in three steps (four
// with the cache) separated by grid barriers:
//   1. dedup: every position finds its ID's slot in an open-addressing table (the first position
//      to claim a slot owns it and numbers its ID as the next unique one); the unique count stays
//      in GPU memory;
//   2. locate and gather: a warp per unique ID frees its dedup slot and probes the row cache (one
//      set, its ways read by one lane each); a hit is used where it lies. On a miss the warp finds
//      the ID in the GPU-memory copy of the index (a device session, one-shot warp probe) and
//      copies the row from the registered row file into a staging row: rows are stride-aligned
//      (32/64/128*k bytes) and read with 16-byte loads, so each 128-byte segment is read whole by
//      one instruction (access coalescing and aligning);
//   3. output: each position (pooling none) or bag (sum, mean) is written from its unique row;
//   4. admission (cache on): missed rows enter the cache when their estimated frequency (a count
//      sketch of misses) beats the victim's, the way with the fewest hits in its set
//      (TinyLFU-like); every `aging_interval` lookups all counts are halved, so the cache follows a
//      drifting hot set (the refresh policy). It runs after the output, so membership never
//      changes while a lookup reads the cache.
// A store with a file tier runs steps 1-2 and 3-4 as two launches, and the host reads the rows that
// have no copy in host memory from the tier between them (GpuLookupConfig::tier_rows): the GPU
// cannot read that file, and a kernel cannot wait for the host.
// Why one launch: at small batches a lookup's cost is the host's (each launch or stream call is
// microseconds), so the workspace persists between lookups (grown stream-ordered when a batch is
// larger), lookups hand each other their state in GPU memory (LookupState), and the dedup table
// is left empty behind each: nothing is cleared or decided on the host per lookup, which is also
// what lets a lookup be captured in a CUDA graph. Lookups are ordered after the previous
// lookup's end, whatever their streams, since they share the cache and the workspace.
#include <cooperative_groups.h>
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
constexpr uint64_t kSketchPerRow = 4;  // admission-frequency counters per cached row

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(ErrorCode::kCuda, std::string("embedding lookup: ") + what + ": " + cudaGetErrorString(e));
}

struct DeviceCounters {
  unsigned long long hits, misses, missing, unique;
};

// What one lookup passes on to the next in GPU memory, so that a lookup needs nothing from the
// host per call (and can be captured in a CUDA graph and replayed).
struct LookupState {
  uint32_t n_unique;  // counted by the dedup, zeroed once every thread has read it
  uint32_t lookups;   // lookups so far: every aging_interval-th one ages the cache's counts
};

struct CacheView {
  uint64_t* ids = nullptr;     // sets * ways; kNoId = empty
  uint32_t* scores = nullptr;  // hits of each way since admission (halved by aging)
  uint32_t* sketch = nullptr;  // miss counts by hash: the admission frequency estimate
  int* locks = nullptr;        // one per set, taken by admission only
  std::byte* rows = nullptr;   // sets * ways rows of `stride` bytes
  uint32_t sets = 0, ways = 0;
  uint64_t sketch_size = 0;   // kSketchPerRow counters per cached row
  // Any number of sets and counters (the budget is used whole): the high half of hash * count.
  __device__ uint64_t set_of(uint64_t hash) const { return __umul64hi(hash, sets); }
  __device__ uint32_t& count_of(uint64_t hash) const { return sketch[__umul64hi(hash * 0x9e3779b97f4a7c15ull, sketch_size)]; }
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

template <class T> __device__ inline float to_f(T v);
template <> __device__ inline float to_f(float v) { return v; }
template <> __device__ inline float to_f(__half v) { return __half2float(v); }
template <> __device__ inline float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T> __device__ inline T from_f(float v);
template <> __device__ inline float from_f(float v) { return v; }
template <> __device__ inline __half from_f(float v) { return __float2half_rn(v); }
template <> __device__ inline __nv_bfloat16 from_f(float v) { return __float2bfloat16_rn(v); }

// Everything one lookup's kernel works on.
struct LookupArgs {
  const Ref* ref;  // GPU memory: a captured lookup reads the copy's view as of its replay
  CacheView cache;
  LookupState* state;
  DeviceCounters* counters;
  // the batch
  const uint64_t* ids;
  uint32_t n;
  const int64_t* offsets;  // null: one output row per position
  uint32_t n_offsets, n_bags;
  bool mean;
  void* out;
  // the rows
  bool tiered;                   // index values: 1 + host-memory slot above bit 36 (0: in the tier only)
  const std::byte* host_rows;    // the row file, as the GPU addresses it
  const std::byte* default_row;  // GPU memory
  uint64_t row_capacity;
  uint32_t stride, dim, aging_interval;
  // the workspace
  uint32_t* owners;  // the dedup table: kFreeSlot, or the position that claimed the slot
  uint32_t slot_mask;
  uint32_t* slot_of;         // per position
  uint32_t* unique_of_slot;  // per dedup slot
  uint64_t* unique_ids;      // per unique ID, as are the next four
  uint32_t* slot_of_unique;
  const std::byte** row_of;  // a cache way, a staging row or the default row
  uint8_t* admit;
  std::byte* staged_rows;
  // a tiered store: each unique ID's index value (~0: a cache hit or missing), for the host; then
  // the rows the host read from the tier (tier_count, with their unique IDs' numbers)
  uint64_t* read_values;
  uint32_t tier_count;
  const uint32_t* tier_unique;
  const std::byte* tier_rows;  // tier_count rows, `stride` apart
  bool abandon;                // the host could not read them: the second launch only resets the state
};

// Dedup: the slot of each position's ID, by linear probing from its hash. A free slot is claimed
// by CAS with the position's index (a taken one holds the ID at ids[owner]); the claiming position
// numbers its ID. locate() frees the claimed slots again, so the table is never cleared.
__device__ void dedup(const LookupArgs& a) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += gridDim.x * blockDim.x) {
    const uint64_t id = a.ids[i];
    uint32_t s = static_cast<uint32_t>(mix64(id)) & a.slot_mask;
    for (;;) {
      uint32_t owner = a.owners[s];
      if (owner == kFreeSlot && (owner = atomicCAS(&a.owners[s], kFreeSlot, i)) == kFreeSlot) {
        const uint32_t u = atomicAdd(&a.state->n_unique, 1u);
        a.unique_of_slot[s] = u;
        a.unique_ids[u] = id;
        a.slot_of_unique[u] = s;
        break;
      }
      if (a.ids[owner] == id) break;
      s = (s + 1) & a.slot_mask;
    }
    a.slot_of[i] = s;
  }
}

// A warp per unique ID: the cache's set (a lane per way); on a miss, the index (the TableRef's
// one-shot warp probe), then the row from the row file into its staging row, 16 bytes a lane.
__device__ void locate(const LookupArgs& a, uint32_t n_unique) {
  __shared__ uint64_t where[kWarpsPerBlock];
  const CacheView& cache = a.cache;
  const int lane = threadIdx.x & 31, wib = threadIdx.x / 32;
  const uint32_t warps = gridDim.x * kWarpsPerBlock;
  unsigned long long hits = 0, misses = 0, missing = 0;
  for (uint32_t u = blockIdx.x * kWarpsPerBlock + wib; u < n_unique; u += warps) {
    const uint64_t id = a.unique_ids[u];
    if (lane == 0) a.owners[a.slot_of_unique[u]] = kFreeSlot;  // the dedup is done with it
    if (cache.sets && id != kNoId) {
      const uint64_t set = cache.set_of(mix64(id));
      const bool match = lane < cache.ways && cache.ids[set * cache.ways + lane] == id;
      const unsigned mask = __ballot_sync(kFull, match);
      if (mask) {
        const uint64_t slot = set * cache.ways + (__ffs(mask) - 1);
        if (lane == 0) {
          atomicAdd(&cache.scores[slot], 1u);
          if (a.tiered) a.read_values[u] = kNoId;
          a.row_of[u] = cache.rows + slot * a.stride;
          a.admit[u] = 0;
          ++hits;
        }
        continue;
      }
    }
    uint64_t key = id;
    if (lane == 0) where[wib] = kNoId;
    __syncwarp();
    const OpStatus s = a.ref->find(&key, reinterpret_cast<std::byte*>(&where[wib]));
    __syncwarp();
    const uint64_t value = where[wib];
    // A tiered store's row without a copy in host memory: the host reads it from the tier, and
    // the second launch points row_of at it.
    const bool tier_only = a.tiered && s == OpStatus::kOk && value >> kTierSlotShift == 0;
    const uint64_t row = a.tiered ? (value >> kTierSlotShift) - 1 : value;
    const bool found = s == OpStatus::kOk && (tier_only || row < a.row_capacity);
    std::byte* staged = a.staged_rows + static_cast<size_t>(u) * a.stride;
    if (found && !tier_only) copy_row(staged, a.host_rows + row * a.stride, a.stride, lane);
    if (lane == 0) {
      if (a.tiered) a.read_values[u] = found ? value : kNoId;
      a.row_of[u] = found ? staged : a.default_row;
      a.admit[u] = found && cache.sets;
      found ? ++misses : ++missing;
    }
    __syncwarp();
  }
  if (lane == 0) {
    if (hits) atomicAdd(&a.counters->hits, hits);
    if (misses) atomicAdd(&a.counters->misses, misses);
    if (missing) atomicAdd(&a.counters->missing, missing);
  }
}

// Position i's row: the row of its ID's unique index.
__device__ inline const std::byte* row_at(const LookupArgs& a, uint32_t i) {
  return a.row_of[a.unique_of_slot[a.slot_of[i]]];
}

// Without bags, a warp per position copies its row; with bags, a warp per bag sums its rows
// (lanes across the row, in float32, as torch's EmbeddingBag on half does).
template <class T>
__device__ void output(const LookupArgs& a) {
  const int lane = threadIdx.x & 31;
  const uint32_t warps = gridDim.x * kWarpsPerBlock;
  T* out = static_cast<T*>(a.out);
  const uint32_t first = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  if (!a.offsets) {
    for (uint32_t i = first; i < a.n; i += warps) {
      const T* src = reinterpret_cast<const T*>(row_at(a, i));
      for (uint32_t j = lane; j < a.dim; j += 32) out[static_cast<size_t>(i) * a.dim + j] = src[j];
    }
    return;
  }
  for (uint32_t b = first; b < a.n_bags; b += warps) {
    int64_t begin = a.offsets[b], end = b + 1 < a.n_offsets ? a.offsets[b + 1] : int64_t{a.n};
    begin = begin < 0 ? 0 : (begin > a.n ? a.n : begin);
    end = end < begin ? begin : (end > a.n ? a.n : end);
    const float scale = a.mean && end > begin ? 1.f / static_cast<float>(end - begin) : 1.f;
    for (uint32_t j = lane; j < a.dim; j += 32) {
      float acc = 0;
      for (int64_t p = begin; p < end; ++p) acc += to_f(reinterpret_cast<const T*>(row_at(a, static_cast<uint32_t>(p)))[j]);
      out[static_cast<size_t>(b) * a.dim + j] = from_f<T>(acc * scale);
    }
  }
}

// Admission of the missed rows; on an aging lookup it first halves every count (the refresh
// policy), racing benignly with other blocks' admissions: the counts only guide.
__device__ void admit_rows(const LookupArgs& a, uint32_t n_unique, bool age) {
  const CacheView& cache = a.cache;
  const int lane = threadIdx.x & 31, wib = threadIdx.x / 32;
  const uint32_t warps = gridDim.x * kWarpsPerBlock;
  if (age) {
    const uint64_t n_scores = uint64_t{cache.sets} * cache.ways, n_sketch = cache.sketch_size;
    for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < n_scores + n_sketch;
         i += gridDim.x * uint64_t{blockDim.x}) {
      if (i < n_scores) cache.scores[i] >>= 1;
      else cache.sketch[i - n_scores] >>= 1;
    }
  }
  for (uint32_t u = blockIdx.x * kWarpsPerBlock + wib; u < n_unique; u += warps) {
    if (!a.admit[u]) continue;  // the same for every lane of the warp
    const uint64_t id = a.unique_ids[u];
    const uint64_t h = mix64(id);
    const uint64_t set = cache.set_of(h);
    uint32_t freq = 0;
    int got = 0;
    if (lane == 0) {
      freq = atomicAdd(&cache.count_of(h), 1u) + 1;
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
      copy_row(cache.rows + slot * a.stride, a.row_of[u], a.stride, lane);
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

// Which steps a launch runs: all of them, or (a tiered store) dedup and locate, then the rest.
enum class Steps { kAll, kFind, kFinish };

// The whole lookup in one cooperative launch: the steps depend on each other through the grid
// (dedup before locate, every row located before the output reads it, the output done before
// admission replaces cached rows), so they are separated by grid barriers rather than launches,
// each of which costs the host microseconds.
template <class T, Steps S>
__global__ void __launch_bounds__(kBlock) lookup_kernel(LookupArgs a) {
  cooperative_groups::grid_group grid = cooperative_groups::this_grid();
  if constexpr (S != Steps::kFinish) {
    dedup(a);
    grid.sync();
  }
  const uint32_t n_unique = a.state->n_unique;
  const uint32_t lookups = a.state->lookups;
  if constexpr (S != Steps::kFinish) {
    if (blockIdx.x == 0 && threadIdx.x == 0) atomicAdd(&a.counters->unique, static_cast<unsigned long long>(n_unique));
    locate(a, n_unique);
  }
  if constexpr (S == Steps::kFind) return;
  if constexpr (S == Steps::kFinish) {
    if (a.abandon) {  // nothing is written or admitted; the next lookup finds the state as usual
      if (blockIdx.x == 0 && threadIdx.x == 0) a.state->n_unique = 0, a.state->lookups = lookups + 1;
      return;
    }
    for (uint32_t k = blockIdx.x * blockDim.x + threadIdx.x; k < a.tier_count; k += gridDim.x * blockDim.x)
      a.row_of[a.tier_unique[k]] = a.tier_rows + static_cast<size_t>(k) * a.stride;
  }
  grid.sync();  // every thread has read the count: the next lookup's dedup starts it from zero
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    a.state->n_unique = 0;
    a.state->lookups = lookups + 1;
  }
  output<T>(a);
  if (!a.cache.sets) return;
  grid.sync();
  admit_rows(a, n_unique, (lookups + 1) % a.aging_interval == 0);
}

__global__ void invalidate_ids(CacheView cache, const uint64_t* ids, uint32_t n) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const uint64_t set = cache.set_of(mix64(ids[i]));
    for (uint32_t w = 0; w < cache.ways; ++w)
      if (cache.ids[set * cache.ways + w] == ids[i]) {
        cache.ids[set * cache.ways + w] = kNoId;
        cache.scores[set * cache.ways + w] = 0;
      }
  }
}

template <Steps S>
const void* kernel_for(RowType dtype) {
  if (dtype == RowType::kFloat32) return reinterpret_cast<const void*>(&lookup_kernel<float, S>);
  if (dtype == RowType::kFloat16) return reinterpret_cast<const void*>(&lookup_kernel<__half, S>);
  return reinterpret_cast<const void*>(&lookup_kernel<__nv_bfloat16, S>);
}

// Host memory the GPU copies from or to, grown by doubling (pinned: copies are asynchronous).
template <class E>
struct PinnedArray {
  E* data = nullptr;
  size_t capacity = 0;
  void reserve(size_t n) {
    if (n <= capacity) return;
    const size_t c = std::max<size_t>(n, 2 * capacity);
    E* p = nullptr;
    check(cudaHostAlloc(reinterpret_cast<void**>(&p), c * sizeof(E), cudaHostAllocDefault), "cudaHostAlloc");
    cudaFreeHost(data);
    data = p, capacity = c;
  }
  ~PinnedArray() { cudaFreeHost(data); }
};

uint32_t blocks_for(uint64_t work_items, uint32_t per_block) {
  return static_cast<uint32_t>(std::clamp<uint64_t>((work_items + per_block - 1) / per_block, 1, 132 * 32));
}

}  // namespace

// The copy refused a write the truth took (it has no size limit but GPU memory).
void check_copied(const OpStatus* status, size_t n, bool erasing) {
  for (size_t i = 0; i < n; ++i)
    if (status[i] != OpStatus::kOk && !(erasing && status[i] == OpStatus::kNotFound))
      throw Error(ErrorCode::kNoSpace, std::string("the GPU copy of the embedding index refused an id: ") + to_string(status[i]),
                  "index");
}

// The GPU-memory copy of the store's index (ID -> row index): a gphash Table of its own in GPU
// memory, over an anonymous pool. The store's Table in its pool stays the one truth (written
// first, read back at every open); the copy makes a cache miss cost one read of host memory (the
// row) instead of two dependent ones (the index's slot, then the row). Made at open from an
// export of the truth.
Table copy_index(Table& truth) {
  OpenOptions o;
  o.engine = EngineKind::kGpu;
  o.placement = Placement::kGpuMemory;
  Table copy = Table::create("mem:", {.key_width = 8, .value_width = 8, .capacity = std::max<uint64_t>(truth.size(), 1024)}, o);
  constexpr size_t kChunk = size_t{1} << 20;
  std::vector<int64_t> ids(kChunk);
  std::vector<uint64_t> rows(kChunk);
  std::vector<OpStatus> status(kChunk);
  ExportCursor cursor;
  while (!cursor.done()) {
    const size_t got = truth.export_items(cursor, ids.data(), rows.data(), kChunk);
    if (!got) continue;
    copy.execute({.size = got, .key_width = 8, .value_width = 8, .op = Op::kUpsert, .keys = ids.data(),
                  .values = rows.data(), .status = status.data()});
    check_copied(status.data(), got, false);
  }
  return copy;
}

struct GpuLookup::Impl {
  Table index;  // the GPU-memory copy (copy_index)
  GpuLookupConfig config;
  std::byte* host_rows = nullptr;      // the row file's data, as mapped by this process
  std::byte* device_rows = nullptr;    // the same memory, as the GPU addresses it
  uint64_t row_capacity = 0;
  std::byte* default_row = nullptr;    // GPU memory, one stride
  DeviceCounters* counters = nullptr;  // GPU memory
  LookupState* state = nullptr;        // GPU memory
  CacheView cache;
  cudaEvent_t last_done = nullptr;     // the previous lookup's end
  cudaStream_t last_stream = nullptr;  // the previous lookup's stream (a lookup on it needs no wait)
  bool waited_for_session = false;     // a lookup has been ordered after session_ready
  uint32_t max_blocks = 0;             // of the lookup kernel, resident at once on the GPU
  // The workspace every lookup reuses, sized for `ids_capacity` IDs (grown, stream-ordered, by a
  // larger lookup).
  struct Workspace {
    std::byte* base = nullptr;
    uint32_t ids_capacity = 0;
    uint32_t slots = 0;              // the dedup table: a power of two, at most half full
    uint32_t* owners = nullptr;      // kFreeSlot, or the position that claimed the slot
    uint32_t* unique_of_slot = nullptr;
    uint32_t* slot_of = nullptr;     // per position
    uint64_t* unique_ids = nullptr;  // per unique ID, and below too
    uint32_t* slot_of_unique = nullptr;
    const std::byte** row_of = nullptr;
    uint8_t* admit = nullptr;
    std::byte* staged_rows = nullptr;
    uint64_t* read_values = nullptr;  // a tiered store's
  } ws;
  // A tiered store's lookup, between its two launches: what the host reads back (the unique count,
  // IDs and index values), the rows it reads from the tier, and their copies in GPU memory.
  PinnedArray<uint32_t> host_unique_count;
  PinnedArray<int64_t> host_ids;
  PinnedArray<uint64_t> host_values;
  PinnedArray<std::byte> host_tier_rows;
  PinnedArray<uint32_t> host_tier_unique;
  std::byte* tier_rows = nullptr;  // GPU memory, `stride` apart, and the unique numbers after them
  size_t tier_rows_capacity = 0;
  // One device session on the copy serves every lookup until a write changes it
  // (index_changed()): beginning a session waits for the table's previous work to settle and
  // prepares the engine, which per lookup would cost a host wait and a few calls. Lookups only
  // search, so the frozen layout of a session is all they need.
  cudaStream_t session_stream = nullptr;
  cudaEvent_t session_ready = nullptr;
  bool session_open = false;
  Ref ref{};
  Ref* device_ref = nullptr;  // `ref` in GPU memory, for the kernel (and the graphs it is captured in)

  void open_session() {
    if (session_open) return;
    DeviceSession session = index.begin_device_session(session_stream);
    ref = session.ref<Ref>();
    check(cudaMemcpyAsync(device_ref, &ref, sizeof ref, cudaMemcpyHostToDevice, session_stream), "cudaMemcpyAsync");
    check(cudaEventRecord(session_ready, session_stream), "cudaEventRecord");
    session_open = true;
    waited_for_session = false;
  }
  void close_session() {
    if (!session_open) return;
    session_open = false;
    check(cudaStreamWaitEvent(session_stream, last_done, 0), "cudaStreamWaitEvent");
    index.end_device_session(session_stream).wait();
  }

  Impl(Table& truth, std::byte* rows, size_t rows_bytes, const GpuLookupConfig& c)
      : index(copy_index(truth)), config(c), host_rows(rows) {
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
    // The fewest co-resident blocks of the kernels this store launches bounds the cooperative grid.
    int device = 0, sms = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
    int per_sm = 1 << 30;
    for (const void* k : {kernel_for<Steps::kAll>(c.dtype), kernel_for<Steps::kFind>(c.dtype), kernel_for<Steps::kFinish>(c.dtype)}) {
      int blocks = 0;
      check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, k, kBlock, 0), "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
      per_sm = std::min(per_sm, blocks);
    }
    if (per_sm < 1) throw Error(ErrorCode::kCuda, "embedding lookup: the lookup kernel does not fit on this GPU");
    max_blocks = static_cast<uint32_t>(per_sm * sms);
    check(cudaMalloc(&state, sizeof(LookupState)), "cudaMalloc");
    check(cudaMalloc(&device_ref, sizeof(Ref)), "cudaMalloc");
    check(cudaMemset(state, 0, sizeof(LookupState)), "cudaMemset");
    check(cudaEventCreateWithFlags(&last_done, cudaEventDisableTiming), "cudaEventCreate");
    check(cudaEventCreateWithFlags(&session_ready, cudaEventDisableTiming), "cudaEventCreate");
    check(cudaStreamCreateWithFlags(&session_stream, cudaStreamNonBlocking), "cudaStreamCreate");
    // The cache: as many sets of ways as the budget pays for (per row: the row, its id, its score
    // and kSketchPerRow sketch counters; per set: a lock).
    const uint64_t per_row = c.stride + sizeof(uint64_t) + sizeof(uint32_t) + kSketchPerRow * sizeof(uint32_t);
    const uint64_t sets = std::min<uint64_t>(c.cache_bytes / (per_row * c.cache_ways + sizeof(int)), UINT32_MAX);
    if (sets) {
      cache.sets = static_cast<uint32_t>(sets);
      cache.ways = c.cache_ways;
      const uint64_t slots = sets * c.cache_ways;
      const uint64_t sketch = kSketchPerRow * slots;
      cache.sketch_size = sketch;
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

  // Makes the workspace hold n IDs, on `stream`, which is already ordered after every earlier
  // lookup (so the old workspace can be freed there).
  void reserve(uint32_t n, cudaStream_t stream) {
    if (n <= ws.ids_capacity) return;
    uint32_t ids = 1024;
    while (ids < n) ids *= 2;
    const uint32_t slots = 2 * ids;
    auto round = [](size_t b) { return (b + 255) / 256 * 256; };
    size_t total = 0;
    const size_t o_owners = total; total += round(4 * size_t{slots});
    const size_t o_unique_of_slot = total; total += round(4 * size_t{slots});
    const size_t o_slot_of = total; total += round(4 * size_t{ids});
    const size_t o_unique_ids = total; total += round(8 * size_t{ids});
    const size_t o_slot_of_unique = total; total += round(4 * size_t{ids});
    const size_t o_row_of = total; total += round(8 * size_t{ids});
    const size_t o_admit = total; total += round(size_t{ids});
    const size_t o_staged = total; total += round(size_t{ids} * config.stride);
    const size_t o_read_values = total; total += config.tier_rows ? round(8 * size_t{ids}) : 0;
    if (ws.base) check(cudaFreeAsync(ws.base, stream), "cudaFreeAsync of the lookup's workspace");
    ws = {};
    check(cudaMallocAsync(reinterpret_cast<void**>(&ws.base), total, stream), "cudaMallocAsync of the lookup's workspace");
    ws.ids_capacity = ids;
    ws.slots = slots;
    ws.owners = reinterpret_cast<uint32_t*>(ws.base + o_owners);
    ws.unique_of_slot = reinterpret_cast<uint32_t*>(ws.base + o_unique_of_slot);
    ws.slot_of = reinterpret_cast<uint32_t*>(ws.base + o_slot_of);
    ws.unique_ids = reinterpret_cast<uint64_t*>(ws.base + o_unique_ids);
    ws.slot_of_unique = reinterpret_cast<uint32_t*>(ws.base + o_slot_of_unique);
    ws.row_of = reinterpret_cast<const std::byte**>(ws.base + o_row_of);
    ws.admit = reinterpret_cast<uint8_t*>(ws.base + o_admit);
    ws.staged_rows = ws.base + o_staged;
    if (config.tier_rows) ws.read_values = reinterpret_cast<uint64_t*>(ws.base + o_read_values);
    check(cudaMemsetAsync(ws.owners, 0xff, 4 * size_t{slots}, stream), "cudaMemsetAsync");  // all kFreeSlot
  }

  // A tiered store's lookup between its launches: reads back what the first found, lets the store
  // read the rows without a copy from the tier (TierRows), and copies them to GPU memory for the
  // second launch, which `a` is then set up for.
  void read_tier_rows(LookupArgs& a, cudaStream_t stream) {
    host_unique_count.reserve(1);
    check(cudaMemcpyAsync(host_unique_count.data, &state->n_unique, 4, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync");
    check(cudaStreamSynchronize(stream), "waiting for the lookup's first launch");
    const uint32_t n_unique = *host_unique_count.data;
    host_ids.reserve(n_unique);
    host_values.reserve(n_unique);
    check(cudaMemcpyAsync(host_ids.data, ws.unique_ids, 8 * size_t{n_unique}, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync");
    check(cudaMemcpyAsync(host_values.data, ws.read_values, 8 * size_t{n_unique}, cudaMemcpyDeviceToHost, stream),
          "cudaMemcpyAsync");
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    uint32_t count = 0;
    host_tier_unique.reserve(n_unique);
    for (uint32_t u = 0; u < n_unique; ++u)
      if (host_values.data[u] != kNoId && host_values.data[u] >> kTierSlotShift == 0) host_tier_unique.data[count++] = u;
    const uint32_t row_bytes = config.dim * element_bytes(config.dtype);
    host_tier_rows.reserve(size_t{count} * row_bytes);
    config.tier_rows(host_ids.data, host_values.data, n_unique, host_tier_rows.data);
    a.tier_count = count;
    if (!count) return;
    const size_t rows_bytes = size_t{count} * config.stride, needed = rows_bytes + 4 * size_t{count};
    if (needed > tier_rows_capacity) {  // stream-ordered, after every earlier lookup
      if (tier_rows) check(cudaFreeAsync(tier_rows, stream), "cudaFreeAsync");
      tier_rows_capacity = std::max(needed, 2 * tier_rows_capacity);
      check(cudaMallocAsync(reinterpret_cast<void**>(&tier_rows), tier_rows_capacity, stream), "cudaMallocAsync");
    }
    check(cudaMemcpy2DAsync(tier_rows, config.stride, host_tier_rows.data, row_bytes, row_bytes, count,
                            cudaMemcpyHostToDevice, stream), "cudaMemcpy2DAsync of the tier's rows");
    check(cudaMemcpyAsync(tier_rows + rows_bytes, host_tier_unique.data, 4 * size_t{count}, cudaMemcpyHostToDevice, stream),
          "cudaMemcpyAsync");
    a.tier_rows = tier_rows;
    a.tier_unique = reinterpret_cast<const uint32_t*>(tier_rows + rows_bytes);
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
    cudaFree(ws.base);
    cudaFree(tier_rows);
    cudaFree(default_row);
    cudaFree(counters);
    cudaFree(state);
    cudaFree(device_ref);
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

void GpuLookup::index_changed(const int64_t* ids, const uint64_t* rows, size_t n, bool same_bytes) {
  Impl& m = *impl_;
  if (n == 0) return;
  // Writes are host-driven and synchronous: lookups in flight read the copy and may admit rows.
  check(cudaDeviceSynchronize(), "waiting for lookups before a write");
  m.close_session();
  std::vector<OpStatus> status(n);
  m.index.execute({.size = n, .key_width = 8, .value_width = 8, .op = rows ? Op::kUpsert : Op::kErase, .keys = ids,
                   .values = rows, .status = status.data()});
  check_copied(status.data(), n, !rows);
  // The session again at once, and its view in GPU memory before this returns: lookups captured in
  // CUDA graphs replay without the host, and must find the copy where the write left it.
  m.open_session();
  check(cudaStreamSynchronize(m.session_stream), "cudaStreamSynchronize");
  if (!m.cache.sets || same_bytes) return;
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
  // Ordered after the previous lookup (implicit on its own stream) and after the session began.
  // Under CUDA graph capture neither wait can be captured (the events are recorded outside the
  // graph): the capture must follow a lookup of the same size on the same stream (a warm-up,
  // which torch.cuda.graph's users run anyway), and replays are ordered by their own stream.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(stream, &capture), "cudaStreamIsCapturing");
  const bool capturing = capture != cudaStreamCaptureStatusNone;
  if (capturing && (!m.session_open || !m.waited_for_session || n > m.ws.ids_capacity))
    throw Error(ErrorCode::kInvalidArgument,
                "capturing a lookup in a CUDA graph needs a lookup of at least its size before it (a warm-up)", "ids");
  if (capturing && c.tier_rows)
    throw Error(ErrorCode::kInvalidArgument,
                "a lookup of a store with a file tier waits for the host half way: it cannot be captured in a CUDA graph", "ids");
  m.open_session();
  if (!capturing && m.last_stream != stream) check(cudaStreamWaitEvent(stream, m.last_done, 0), "cudaStreamWaitEvent");
  if (!m.waited_for_session) {
    check(cudaStreamWaitEvent(stream, m.session_ready, 0), "cudaStreamWaitEvent");
    m.waited_for_session = true;
  }
  const uint32_t n32 = static_cast<uint32_t>(n);
  m.reserve(n32, stream);
  const Impl::Workspace& w = m.ws;

  LookupArgs args{.ref = m.device_ref, .cache = m.cache, .state = m.state, .counters = m.counters,
                  .ids = reinterpret_cast<const uint64_t*>(ids), .n = n32, .offsets = offsets,
                  .n_offsets = static_cast<uint32_t>(n_offsets), .n_bags = static_cast<uint32_t>(n_bags),
                  .mean = pooling == Pooling::kMean, .out = out, .host_rows = m.device_rows,
                  .default_row = m.default_row, .row_capacity = m.row_capacity, .stride = c.stride, .dim = c.dim,
                  .aging_interval = c.aging_interval, .owners = w.owners, .slot_mask = w.slots - 1,
                  .slot_of = w.slot_of, .unique_of_slot = w.unique_of_slot, .unique_ids = w.unique_ids,
                  .slot_of_unique = w.slot_of_unique, .row_of = w.row_of, .admit = w.admit,
                  .staged_rows = w.staged_rows, .read_values = w.read_values, .tier_count = 0,
                  .tier_unique = nullptr, .tier_rows = nullptr, .abandon = false};
  args.tiered = static_cast<bool>(c.tier_rows);
  // A warp per ID at most, and no more blocks than fit on the GPU at once (a cooperative launch).
  const uint32_t grid = std::min(blocks_for(std::max(n, n_bags), kWarpsPerBlock), m.max_blocks);
  void* params[] = {&args};
  auto launch = [&](const void* kernel) {
    check(cudaLaunchCooperativeKernel(kernel, grid, kBlock, params, 0, stream), "launching the lookup");
  };
  if (!c.tier_rows) {
    launch(kernel_for<Steps::kAll>(c.dtype));
  } else {
    launch(kernel_for<Steps::kFind>(c.dtype));
    try {
      m.read_tier_rows(args, stream);
    } catch (...) {
      args.abandon = true;
      launch(kernel_for<Steps::kFinish>(c.dtype));
      throw;
    }
    launch(kernel_for<Steps::kFinish>(c.dtype));
  }
  if (capturing) return;
  // Recorded every time (not only when the next lookup comes on another stream): by then this
  // stream may have been destroyed.
  check(cudaEventRecord(m.last_done, stream), "cudaEventRecord");
  m.last_stream = stream;
}

bool gpu_lookup_available() {
  int devices = 0;
  return cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
}

std::unique_ptr<GpuLookup> make_gpu_lookup(Table& table, std::byte* rows, size_t rows_bytes, const GpuLookupConfig& config) {
  return std::make_unique<GpuLookup>(table, rows, rows_bytes, config);
}

}  // namespace gphash::embedding
