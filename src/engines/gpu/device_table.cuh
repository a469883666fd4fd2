// What kernels see of a table, in three trivially copyable parts passed by value:
//   PoolWrites   - the one write path: every store a kernel makes to the pool goes through it
//                  (the persist barrier, dirty-page marks for snapshots, crash injection);
//   DeviceTable  - the table: levels, hash seeds, widths, the value heap's chunks, the tag mirror
//                  (the way cuCollections separates static_map from static_map_ref);
//   BatchContext - the state of one batch: counters and the heap's free cells.
// The host GpuEngine owns the memory behind them.
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

#include "engines/gpu/bucket_cache_view.cuh"
#include "format/cell.h"
#include "format/hash.h"
#include "format/header.h"
#include "format/layout.h"
#include "format/probe.h"
#include "format/shape.h"
#include "format/slot.h"
#include "gpm/persist.cuh"

namespace gphash::engine::gpu {

inline constexpr uint64_t kNoCell = ~0ull;
inline constexpr unsigned kFullMask = 0xFFFFFFFFu;
inline constexpr uint32_t kDirtyPageShift = 12;  // dirty marks are per 4 KiB page of the pool

// Slot words that other warps change during a kernel are read through volatile loads, so a
// retry sees the newest value instead of a stale L1 line.
__device__ __forceinline__ uint64_t load_volatile(const uint64_t* p) { return *reinterpret_cast<const volatile uint64_t*>(p); }
__device__ __forceinline__ uint8_t load_volatile(const uint8_t* p) { return *reinterpret_cast<const volatile uint8_t*>(p); }
__device__ __forceinline__ uint32_t load_volatile(const uint32_t* p) { return *reinterpret_cast<const volatile uint32_t*>(p); }
__device__ __forceinline__ void store_volatile(uint32_t* p, uint32_t v) { *reinterpret_cast<volatile uint32_t*>(p) = v; }

// A slot's state word and value word where they share 16 aligned bytes (8-byte keys): one load,
// so one request (over PCIe for a host-mapped table) instead of two.
struct SlotWords {
  uint64_t state, value;
};
__device__ __forceinline__ SlotWords load_volatile_slot(const uint64_t* state_word) {
  SlotWords w;
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(w.state), "=l"(w.value) : "l"(state_word));
  return w;
}

__device__ __forceinline__ bool aligned(const void* p, unsigned a) { return (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0; }

// One lane copies n bytes (outputs in GPU memory; into the pool only through PoolWrites::copy).
__device__ inline void lane_copy(std::byte* dst, const std::byte* src, uint32_t n) {
  if (n % 16 == 0 && aligned(dst, 16) && aligned(src, 16)) {
    for (uint32_t k = 0; k < n; k += 16) *reinterpret_cast<uint4*>(dst + k) = *reinterpret_cast<const uint4*>(src + k);
  } else if (n % 8 == 0 && aligned(dst, 8) && aligned(src, 8)) {
    for (uint32_t k = 0; k < n; k += 8) *reinterpret_cast<uint64_t*>(dst + k) = *reinterpret_cast<const uint64_t*>(src + k);
  } else {
    for (uint32_t k = 0; k < n; ++k) dst[k] = src[k];
  }
}

#if GPHASH_CRASH_POINTS
// Crash injection (crash-test builds only): a trap after the N-th store to the pool.
struct CrashCountdown {
  unsigned long long stores;
  unsigned long long trap_at;  // 0 = off
};

// Out of line: inlined at every store to the pool, it made each GPU engine unit of a crash-test
// build take 22% longer to compile than a normal one (7.5 against 6.2 min on the 2-core VM), past
// what one call of the GPU machine allows.
inline __device__ __noinline__ void count_pool_store(CrashCountdown* countdown) {
  if (countdown && countdown->trap_at && atomicAdd(&countdown->stores, 1ull) + 1 >= countdown->trap_at) __trap();
}
#endif

// The one write path to the pool. A host-mapped pool is persistent: the barrier is a system-scope
// fence (the GPM model's persist barrier, gpm::barrier). A table kept in GPU memory is volatile; a device-scope
// fence still orders a slot's stores before the tag update that hands the slot to other warps
// (without it an erase's EMPTY could land after another warp's insert into the freed slot).
struct PoolWrites {
  bool persistent;
  // Snapshots (pool/dirty_pages.h): a bitmap in GPU memory with one bit per 4 KiB page of the pool
  // (bit b of 32-bit word w: page 32 * w + b, so on the host it reads as DirtyPages' 64-bit
  // words), set for every page written; null: off. Pool memory is registered so that device and
  // host addresses agree (PoolMapping::same_addresses); pool_base is offset 0. A page at or past
  // dirty_page_limit (the pool grew and the bitmap did not: must not happen) sets the word at
  // dirty_bits[dirty_page_limit / 32 rounded up], which makes the engine mark every page.
  uint32_t* dirty_bits;
  uint64_t dirty_page_limit;
  uintptr_t pool_base;
  BucketCacheView cache;  // BktCache: stores into cached buckets also go to their GPU-memory copy
#if GPHASH_CRASH_POINTS
  CrashCountdown* countdown;
#endif

  __device__ __forceinline__ void count() const {
#if GPHASH_CRASH_POINTS
    count_pool_store(countdown);
#endif
  }
  __device__ __forceinline__ void mark(const void* p, size_t n) const {
    if (!dirty_bits) return;
    const uint64_t first = (reinterpret_cast<uintptr_t>(p) - pool_base) >> kDirtyPageShift;
    const uint64_t last = (reinterpret_cast<uintptr_t>(p) + n - 1 - pool_base) >> kDirtyPageShift;
    for (uint64_t page = first; page <= last; ++page) {
      if (page >= dirty_page_limit) {
        atomicOr(&dirty_bits[(dirty_page_limit + 31) / 32], 1u);
        return;
      }
      // Fire and forget: an atomic whose result is unused compiles to a reduction (RED), which the
      // lane does not wait for. Loading the word first to skip pages already marked made the lane
      // wait for that load after every store, which cost host-mapped inserts about 11%.
      atomicOr(&dirty_bits[page / 32], 1u << (page % 32));
    }
  }
  __device__ __forceinline__ void store(uint64_t* p, uint64_t v) const {
    count();
    *reinterpret_cast<volatile uint64_t*>(p) = v;
    mark(p, 8);
    if (cache.on) cache.mirror_word(p, v);
  }
  // store() into bucket `id` (BktCache numbering) at pool address `bucket`, whose cached line (or
  // null) the caller holds.
  __device__ __forceinline__ void store_in(uint64_t* p, uint64_t v, const std::byte* bucket, uint64_t id, std::byte* line) const {
    count();
    *reinterpret_cast<volatile uint64_t*>(p) = v;
    mark(p, 8);
    if (cache.on)
      cache.mirror_in(id, line, static_cast<uint32_t>(reinterpret_cast<const std::byte*>(p) - bucket),
                      [v](std::byte* dst) { *reinterpret_cast<volatile uint64_t*>(dst) = v; });
  }
  // EMPTY -> INSERTING by CAS (claims in the pool itself, where no tag mirror holds them).
  __device__ __forceinline__ bool claim(uint64_t* state) const {
    count();
    const bool won = atomicCAS(reinterpret_cast<unsigned long long*>(state), format::kSlotEmpty,
                               format::kSlotInserting) == format::kSlotEmpty;
    if (won) mark(state, 8);
    if (won && cache.on) cache.mirror_word(state, format::kSlotInserting);
    return won;
  }
  // One lane copies n bytes into the pool.
  __device__ void copy(std::byte* dst, const std::byte* src, uint32_t n) const {
    count();
    lane_copy(dst, src, n);
    mark(dst, n);
    if (cache.on) cache.mirror_bytes(dst, src, n);
  }
  // The persist barrier: stores before it reach the persistence domain before stores after it
  // (libGPM's primitive, include/gpm/persist.cuh; a device-scope fence for a table in GPU memory).
  __device__ __forceinline__ void barrier() const { gpm::barrier(persistent); }
  // The barrier between a slot's key and value and its state word (the publish). Only a crash
  // needs it where readers reach slots through the tag mirror, which is updated after the barrier
  // that follows the publish: a table in GPU memory read that way skips it.
  __device__ __forceinline__ void publish_barrier(bool through_mirror) const {
    if (persistent || !through_mirror) barrier();
  }
};

// Counters a batch accumulates on the device; read back once per batch.
struct BatchCounters {
  unsigned long long cells_taken;   // from the reserve of free cells
  unsigned long long fresh_next;    // next never-used cell
  unsigned long long cells_freed;   // appended to the freed list
  long long item_delta;
  unsigned long long pending;       // runs handed to the slow path
  unsigned long long pending_slot;  // ... of which found no free slot
  unsigned long long pending_cell;  // ... of which found no free heap cell
  unsigned long long moves;         // displacement moves
  unsigned long long stopped_at;    // slow path: the pending entry it stopped at
  int slow_result;                  // slow path: a RunResult
  int repeats;                      // plan: the batch repeats a key (plan_kernel's check)
  unsigned long long serial_runs;   // runs the batch kernel left to the serial pass
  unsigned long long serial_taken;  // ... of which a warp of the serial pass has taken
  unsigned long long long_windows;        // windows wholly in one run, which the plan counted
  unsigned long long long_windows_taken;  // windows (any) a block of long_run_kernel has taken
};

// Results of table-wide passes (open, recovery, resize, export), kept apart from a batch's
// counters because a resize can run in the middle of a batch.
struct ScanCounters {
  unsigned long long corrupt;       // slots that break an invariant, or items a resize could not place
  unsigned long long items;         // published slots (export: items written)
  unsigned long long highest_cell;  // 1 + the highest referenced cell
  unsigned long long found;         // free cells collected; export: values left out (checksum)
};

// One batch's state: its counters and the value heap's free cells.
struct BatchContext {
  BatchCounters* counters;
  const uint64_t* free_cells;  // the reserve of free cells at batch start, [0, free_count), taken from the top
  uint64_t free_count;
  uint64_t* freed;             // cells released during this batch
  uint64_t freed_capacity;
};

// The value heap's chunks as the device sees them.
struct DeviceHeap {
  std::byte* chunk[format::kMaxHeapChunks];
  format::HeapGeometry geometry;
  uint32_t cell_size;
  uint64_t capacity;  // cells in all chunks
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
  bool value_checksums;  // heap cells end with a checksum of their value (format/cell.h)
  uint8_t* tags;         // the tag mirror (null when an operation works without it)
  uint32_t family_bytes;
  DeviceHeap heap;
  uint64_t* maintenance;  // the pool's maintenance record (MaintenanceRecord words), or null
  PoolWrites writes;

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
  // The checksum a cell holding `value` for the key whose first hash is `hash0` must carry.
  __device__ uint64_t checksum_of(const std::byte* value, uint64_t hash0) const {
    return format::value_checksum(value, value_width, hash0);
  }
  __device__ uint64_t* cell_checksum(uint64_t ref) const {
    return reinterpret_cast<uint64_t*>(cell(ref) + format::cell_checksum_offset(heap.cell_size));
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
