// The device view of a table: trivially copyable, passed by value to every kernel (the way
// cuCollections separates static_map from static_map_ref). The host GpuEngine owns the memory.
//
// Tag mirror. Next to the table, GPU memory holds one byte per slot: 0 = empty, 1 = claimed by
// an insert in flight, >= 2 = the tag (8 bits of the fingerprint) of a published slot. Tags are
// grouped by family: all buckets that share one bottom-level bucket (levels bottom..top), so the
// L candidate buckets one hash function gives a key lie in one small run of bytes and one warp
// reads all L*H*S candidate tags in H requests. Operations read the table itself only for
// slots whose tag matches, and claim slots with a CAS on the mirror: the GPU engine is the only
// writer of a pool while it has it open, so a claim in GPU memory needs no atomic over PCIe.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "format/hash.h"
#include "format/header.h"
#include "format/layout.h"
#include "format/shape.h"
#include "format/slot.h"

namespace gphash::engine::gpu {

inline constexpr uint64_t kNoCell = ~0ull;
inline constexpr unsigned kFullMask = 0xFFFFFFFFu;

// Slot words that other warps change during a kernel are read through volatile loads, so a
// retry sees the newest value instead of a stale L1 line.
__device__ __forceinline__ uint64_t load_volatile(const uint64_t* p) { return *reinterpret_cast<const volatile uint64_t*>(p); }
__device__ __forceinline__ uint8_t load_volatile(const uint8_t* p) { return *reinterpret_cast<const volatile uint8_t*>(p); }
__device__ __forceinline__ void store_volatile(uint64_t* p, uint64_t v) { *reinterpret_cast<volatile uint64_t*>(p) = v; }

// Counters a batch accumulates on the device; read back once per batch.
// The fields up to `stores` are reset before every batch; the crash-injection fields persist.
struct BatchCounters {
  unsigned long long cells_taken;   // from the free-cell stack
  unsigned long long fresh_next;    // next never-used cell
  unsigned long long cells_freed;   // appended to the freed list
  long long item_delta;
  unsigned long long pending;       // runs handed to the slow path
  unsigned long long pending_slot;  // ... of which found no free slot
  unsigned long long pending_cell;  // ... of which found no free heap cell
  unsigned long long moves;         // displacement moves
  unsigned long long stopped_at;    // slow path: the pending entry it stopped at
  int slow_result;                  // slow path: a RunResult
  int unused;
  unsigned long long stores;        // crash injection: persistent stores so far
  unsigned long long crash_after;   // crash injection: trap at this store (0 = off)
};

// Results of table-wide passes (open, recovery, resize), kept apart from a batch's counters
// because a resize can run in the middle of a batch.
struct ScanCounters {
  unsigned long long corrupt;       // slots that break an invariant, or items a resize could not place
  unsigned long long items;         // published slots
  unsigned long long highest_cell;  // 1 + the highest referenced cell
  unsigned long long found;         // free cells collected
};

// The value heap as the device sees it: chunk addresses plus the free-cell state of this batch.
struct DeviceHeap {
  std::byte* chunk[format::kMaxHeapChunks];
  format::HeapGeometry geometry;
  uint32_t cell_size;
  uint64_t capacity;      // cells in all chunks
  uint64_t* free_cells;   // stack of free cells at batch start, [0, free_count)
  uint64_t free_count;
  uint64_t* freed;        // cells released during this batch
  uint64_t freed_capacity;
};

template <class ShapeT, int KeyWidth>
struct DeviceTable {
  static constexpr int L = ShapeT::kLevels;
  static constexpr int H = ShapeT::kHashes;
  static constexpr int S = ShapeT::kSlots;
  static constexpr int kKeyWords = KeyWidth / 8;
  static constexpr int kKeyWidth = KeyWidth;
  using Layout = format::StaticBucketLayout<KeyWidth, S>;
  static_assert(L * H * S == 32, "one lane per candidate slot");

  std::byte* level[format::kMaxLevel + 1];  // device-usable address of each level (or null)
  uint32_t bottom;  // operations use levels [bottom, bottom + L - 1]
  uint64_t seed[H];
  uint32_t value_width;
  bool has_heap;
  bool persistent;  // host-mapped pool: order stores with system-scope fences (the persist barrier)
  uint8_t* tags;    // the tag mirror (null when an operation works without it)
  uint32_t family_bytes;
  DeviceHeap heap;
  BatchCounters* counters;
  uint64_t* maintenance;  // the pool's maintenance record (MaintenanceRecord words), or null

  __host__ __device__ static constexpr uint32_t family_bytes_for() {
    uint32_t n = ((1u << L) - 1) * S, p = 1;
    while (p < n) p <<= 1;
    return p;
  }

  __device__ std::byte* bucket(uint32_t lvl, uint64_t b) const { return level[lvl] + b * Layout::kBytes; }
  __device__ static uint64_t* state_word(std::byte* bucket, int s) {
    return reinterpret_cast<uint64_t*>(bucket + Layout::kStateOffset + s * Layout::kStateStride);
  }
  __device__ static uint64_t* key_words(std::byte* bucket, int s) {
    return reinterpret_cast<uint64_t*>(bucket + Layout::kKeyOffset + s * Layout::kKeyStride);
  }
  __device__ static uint64_t* value_word(std::byte* bucket, int s) {
    return reinterpret_cast<uint64_t*>(bucket + Layout::kValueOffset + s * Layout::kValueStride);
  }
  __device__ std::byte* cell(uint64_t ref) const {
    uint32_t c = heap.geometry.chunk_of(ref);
    return heap.chunk[c] + (ref - heap.geometry.chunk_begin(c)) * heap.cell_size;
  }
  // Byte index of a slot's tag: families are bottom-level buckets; inside one, level d above the
  // bottom holds 2^d buckets of S tags after the 2^d - 1 buckets of the levels below.
  __device__ uint64_t tag_index(uint32_t lvl, uint64_t b, int s) const {
    const uint32_t d = lvl - bottom;
    const uint64_t family = b >> d;
    return family * family_bytes + (((1u << d) - 1) + (b & ((1u << d) - 1))) * S + s;
  }

  // The persist barrier of the GPM model: a system-scope fence for a host-mapped pool. In GPU
  // memory (volatile) a device-scope fence still orders a slot's stores before the tag update
  // that hands the slot to other warps: without it an erase's EMPTY could land after another
  // warp's insert into the freed slot.
  __device__ void persist_barrier() const {
    if (persistent)
      __threadfence_system();
    else
      __threadfence();
  }
  // Crash injection (tests): counts persistent stores and traps at the chosen one.
  __device__ void before_persistent_store() const {
    if (counters->crash_after == 0) return;
    if (atomicAdd(&counters->stores, 1ull) + 1 >= counters->crash_after) __trap();
  }
};

// a[i] for a run-time i without indexing the register array (which would move it to local
// memory): a compare-and-select over the compile-time indices.
template <int N>
__device__ __forceinline__ uint64_t pick(const uint64_t (&a)[N], int i) {
  uint64_t r = a[0];
#pragma unroll
  for (int x = 1; x < N; ++x)
    if (x == i) r = a[x];
  return r;
}

// A key as the kernels handle it: its words, hashes, tag and the state word of its copies.
template <class T>
struct KeyProbe {
  uint64_t key[T::kKeyWords];
  uint64_t hash[T::H];
  uint64_t published;  // fingerprint (wide keys) or ~key (8-byte keys)
  uint8_t tag;
};

template <class T>
__device__ __forceinline__ void make_probe(const T& t, const uint64_t* key_words, KeyProbe<T>& p) {
#pragma unroll
  for (int w = 0; w < T::kKeyWords; ++w) p.key[w] = key_words[w];
#pragma unroll
  for (int j = 0; j < T::H; ++j) p.hash[j] = format::xxh64_words<T::kKeyWords>(p.key, t.seed[j]);
  const uint64_t fp = format::fingerprint(p.hash[0], p.hash[T::H - 1]);
  p.published = T::Layout::kKeyIsState ? format::encode_key_word(p.key[0]) : fp;
  p.tag = format::tag_of(fp);
}

}  // namespace gphash::engine::gpu
