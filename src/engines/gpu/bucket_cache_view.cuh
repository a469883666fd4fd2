// BktCache (GPHash section 3.4), as kernels see it: GPU-memory copies of hot buckets of a
// host-mapped table, chosen in periodic loading phases (bucket_cache.cuh) and frozen between them.
//
// A cached bucket is a line: the bucket's bytes exactly as in the pool, then, beyond the paper,
// its slots' heap values: per slot the value word (cell reference) whose bytes are cached, or
// kNoValue, then the bytes. A hit on a hot key then touches no host memory at all.
//
// The pool stays the one truth. Every store a kernel makes goes to the pool first and then, through
// the same write path (PoolWrites::store calls mirror()), to the cached copy; a store to a slot's
// value word also forgets the slot's cached value until the writer that knows the new bytes puts
// them (put_value). While a loading phase fills the lines of new members, writes also set a bit
// per bucket (`written`), and the switch fills those written meanwhile again from the pool.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace gphash::engine::gpu {

inline constexpr int kMaxCachedLevels = 4;  // the shapes have at most 4 levels
inline constexpr uint64_t kNoValue = ~0ull;

enum class CachePolicyCode : uint8_t { kLfu = 0, kLru = 1, kRandom = 2 };

// Hits are counted per warp (one atomic per warp and batch), not per lane.
struct CacheCounters {
  unsigned long long hits;          // operations on an existing key served from a cached line
  unsigned long long lookups;       // operations that found their key (the hit rate's denominator)
  unsigned long long lines_loaded;  // lines that phases and their switches read from the pool
};

struct BucketCacheView {
  bool on;                  // writes mirror (levels known); lines may still be absent
  const int32_t* index;     // bucket id -> line, or -1; null: no lines
  std::byte* lines;
  uint32_t line_bytes;
  uint32_t bucket_bytes;
  uint32_t slots;
  uint32_t levels;
  uint32_t bottom;
  std::byte* level_base[kMaxCachedLevels];  // pool address of levels bottom .. bottom + levels - 1
  uint32_t value_offset, value_stride;      // where slot s's value word lies in a bucket
  uint32_t value_bytes;                     // cached bytes per slot (0: values are not cached)
  uint32_t* written;                        // loading phase: a bit per bucket id written since it began
  uint32_t* stats;                          // access statistics per bucket id (count, or last epoch)
  CacheCounters* counters;
  uint32_t epoch;                           // batches run (LRU's clock, the sampling phase)
  uint8_t policy;                           // CachePolicyCode

  // Bucket ids are dense: family f (a bottom-level bucket and the 2^levels - 1 buckets above it)
  // holds ids f * (2^levels - 1) .. ; level d above the bottom takes 2^d of them.
  __host__ __device__ uint64_t bucket_id(uint32_t level, uint64_t b) const {
    const uint32_t d = level - bottom;
    return (b >> d) * ((1u << levels) - 1) + ((1u << d) - 1) + (b & ((1ull << d) - 1));
  }
  __host__ __device__ void bucket_of(uint64_t id, uint32_t* level, uint64_t* b) const {
    const uint64_t per = (1u << levels) - 1, family = id / per, r = id % per;
    uint32_t d = 0;
    while ((2u << d) - 1 <= r) ++d;
    *level = bottom + d;
    *b = (family << d) + (r - ((1u << d) - 1));
  }

  __device__ std::byte* line(int32_t l) const { return lines + size_t(l) * line_bytes; }
  __device__ uint64_t* value_refs(std::byte* line) const { return reinterpret_cast<uint64_t*>(line + bucket_bytes); }
  __device__ std::byte* value_bytes_of(std::byte* line, int s) const {
    return line + bucket_bytes + slots * 8 + size_t(s) * value_bytes;
  }

  // The cached line of bucket b of `level`, or null.
  __device__ std::byte* cached(uint32_t level, uint64_t b) const {
    if (!index) return nullptr;
    const int32_t l = __ldg(index + bucket_id(level, b));
    return l < 0 ? nullptr : line(l);
  }

  // The bucket id and line of a pool address inside a level, or false if it is not in one.
  __device__ bool locate(const void* p, uint64_t* id, uint32_t* offset) const {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    for (uint32_t k = 0; k < levels; ++k) {
      const uintptr_t base = reinterpret_cast<uintptr_t>(level_base[k]);
      const uint64_t bytes = (uint64_t{1} << (bottom + k)) * bucket_bytes;
      if (a >= base && a - base < bytes) {
        const uint64_t b = (a - base) / bucket_bytes;
        *offset = static_cast<uint32_t>(a - base - b * bucket_bytes);
        *id = bucket_id(bottom + k, b);
        return true;
      }
    }
    return false;
  }

  // After a store to the pool at `p`: the line (if the bucket is cached) and the loading phase's
  // record of written buckets. The line's copy is then written by `copy(dst)`.
  template <class Copy>
  __device__ void mirror(const void* p, Copy copy) const {
    uint64_t id;
    uint32_t offset;
    if (!locate(p, &id, &offset)) return;  // the value heap or the maintenance record
    const int32_t l = index ? __ldg(index + id) : -1;
    mirror_in(id, l < 0 ? nullptr : line(l), offset, copy);
  }
  // mirror() for a store at `offset` in bucket `id` whose line (or null) the caller already holds:
  // the batch kernel's writers found it when they probed, and an address search and an index load
  // for each store cost host-mapped YCSB A at 2^16 a sixth of its stall samples (H200, ncu).
  template <class Copy>
  __device__ void mirror_in(uint64_t id, std::byte* l, uint32_t offset, Copy copy) const {
    if (written) atomicOr(&written[id / 32], 1u << (id % 32));  // fire and forget (a reduction)
    if (!l) return;
    copy(l + offset);
    if (value_bytes && offset >= value_offset && (offset - value_offset) % value_stride == 0) {
      const uint32_t s = (offset - value_offset) / value_stride;
      if (s < slots) *reinterpret_cast<volatile uint64_t*>(&value_refs(l)[s]) = kNoValue;
    }
  }
  __device__ void mirror_word(const uint64_t* p, uint64_t v) const {
    mirror(p, [v](std::byte* dst) { *reinterpret_cast<volatile uint64_t*>(dst) = v; });
  }
  __device__ void mirror_bytes(const std::byte* p, const std::byte* src, uint32_t n) const {
    mirror(p, [src, n](std::byte* dst) {
      for (uint32_t k = 0; k < n; ++k) dst[k] = src[k];
    });
  }

  // After a writer stored value word `ref` for slot `s` of the pool bucket at `bucket`: the value's
  // bytes (from the writer's GPU-memory source) into the cached line, so later hits skip the heap.
  __device__ void put_value(const std::byte* bucket, int s, uint64_t ref, const std::byte* src, uint32_t width) const {
    if (!index || !value_bytes) return;
    uint64_t id;
    uint32_t offset;
    if (!locate(bucket, &id, &offset)) return;
    const int32_t l = __ldg(index + id);
    if (l >= 0) put_value_in(line(l), s, ref, src, width);
  }
  // put_value() into a line the caller holds (or null).
  __device__ void put_value_in(std::byte* l, int s, uint64_t ref, const std::byte* src, uint32_t width) const {
    put_value_bytes(l, s, src, width);
    __threadfence();  // the bytes before the reference that vouches for them
    put_value_ref(l, s, ref);
  }
  // put_value_in() in two halves, for a writer that makes a barrier between them anyway (batch_kernel).
  // The copy issues four loads before its four stores: in a plain loop each store waited for its
  // load (the compiler cannot prove `src` and `dst` apart), and those waits were 23% of
  // batch_kernel's stall samples in YCSB A at 2^16 (H200, ncu, host-mapped, complete cache).
  __device__ void put_value_bytes(std::byte* l, int s, const std::byte* src, uint32_t width) const {
    if (!l || !value_bytes) return;
    std::byte* dst = value_bytes_of(l, s);
    if (width % 8 == 0 && (reinterpret_cast<uintptr_t>(src) & 7) == 0) {
      for (uint32_t k = 0; k < width; k += 32) {
        uint64_t w[4];
#pragma unroll
        for (int u = 0; u < 4; ++u)
          if (k + 8 * u < width) w[u] = *reinterpret_cast<const uint64_t*>(src + k + 8 * u);
#pragma unroll
        for (int u = 0; u < 4; ++u)
          if (k + 8 * u < width) *reinterpret_cast<uint64_t*>(dst + k + 8 * u) = w[u];
      }
    } else {
      for (uint32_t k = 0; k < width; ++k) dst[k] = src[k];
    }
  }
  __device__ void put_value_ref(std::byte* l, int s, uint64_t ref) const {
    if (l && value_bytes) *reinterpret_cast<volatile uint64_t*>(&value_refs(l)[s]) = ref;
  }

  // Access statistics without an atomic per lane per operation. A single operation's lane records
  // its bucket only when its plan position falls in this batch's sample (one in kSampleEvery); a
  // run (all operations of one key in the batch: the hot keys of a skewed workload) records once,
  // weighted by its length. LFU counts in units of kSampleWeight, so the halving at every loading
  // phase forgets a bucket over a few phases rather than at once.
  static constexpr uint32_t kSampleEvery = 4;
  static constexpr uint32_t kSampleWeight = 16;
  // LFU keeps a cached bucket unless a newcomer scores more than two samples above it: below that
  // the difference is sampling noise, and replacing it costs a line read from host memory for no
  // hit (H200, YCSB C, scrambled Zipf 0.99, 16.8 M items, 20% of the buckets: 35% of the lines
  // were new each phase without this, 2.3% with it; hit rate 55.5 and 52.6%).
  static constexpr uint32_t kKeepBonus = 2 * kSampleWeight;
  __device__ void record(size_t pos, uint32_t level, uint64_t b) const {
    if (stats && (pos % kSampleEvery) == (epoch % kSampleEvery)) count(level, b, kSampleWeight);
  }
  __device__ void record_run(uint32_t level, uint64_t b, size_t operations) const {
    if (stats) count(level, b, static_cast<uint32_t>(operations < 4096 ? operations : 4096) * kSampleEvery * kSampleWeight);
  }
  __device__ void count(uint32_t level, uint64_t b, uint32_t weight) const {
    const uint64_t id = bucket_id(level, b);
    if (policy == static_cast<uint8_t>(CachePolicyCode::kLru))
      stats[id] = epoch + 1;  // 0: never seen
    else
      atomicAdd(&stats[id], weight);  // unused result: a reduction
  }
  // Hits of a run: one atomic for all its operations.
  __device__ void count_hits(unsigned long long operations, bool hit) const {
    if (!counters) return;
    atomicAdd(&counters->lookups, operations);
    if (hit) atomicAdd(&counters->hits, operations);
  }
};

}  // namespace gphash::engine::gpu
