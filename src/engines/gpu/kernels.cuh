// The GPU engine's kernels. Host code launches them from gpu_engine.cu.
#pragma once

#include "engines/gpu/thread_ops.cuh"
#include "engines/gpu/warp_ops.cuh"

namespace gphash::engine::gpu {

inline constexpr uint64_t kPendingCount = ~0ull;

// End of the run starting at sorted position `begin`: the first position with another prefix.
// The prefixes ascend, so the warp searches 32 positions at a time with a stride that grows 32x
// until a lane passes the run, then shrinks back to 1: a run of 56,000 takes 7 rounds, not 1,750.
__device__ inline size_t run_end(const BatchView& bv, size_t begin, int lane) {
  if (!bv.sort_keys) return begin + 1;
  const uint32_t key = bv.sort_keys[begin];
  if (begin + 1 >= bv.n || bv.sort_keys[begin + 1] != key) return begin + 1;
  const auto past = [&](size_t pos) { return pos >= bv.n || bv.sort_keys[pos] != key; };
  size_t in_run = begin + 1, stride = 1;  // in_run + stride * 32 is past the run once a lane sees it
  for (;;) {
    const uint32_t m = __ballot_sync(kFullMask, past(in_run + (lane + 1) * stride));
    if (m) {
      in_run += (__ffs(m) - 1) * stride;  // in the run; in_run + stride is past it
      break;
    }
    in_run += 32 * stride;
    stride *= 32;
  }
  while (stride > 1) {
    stride /= 32;
    const uint32_t m = __ballot_sync(kFullMask, past(in_run + (lane + 1) * stride));
    in_run += (__ffs(m) - 1) * stride;
  }
  return in_run + 1;
}

__device__ inline void hand_to_slow_path(const BatchContext& ctx, const BatchView& bv, size_t resume, RunResult why) {
  const unsigned long long k = atomicAdd(&ctx.counters->pending, 1ull);
  bv.pending[k] = static_cast<uint32_t>(resume);
  atomicAdd(why == RunResult::kNeedCell ? &ctx.counters->pending_cell : &ctx.counters->pending_slot, 1ull);
}

}  // namespace gphash::engine::gpu

#include "engines/gpu/fast_ops.cuh"

namespace gphash::engine::gpu {

// After the table or heap grew: the runs handed to the slow path, again in parallel, one run per
// warp. The runs that come back are mostly Zipf-hot keys' long runs (they finish last, when the
// cells ran out); a warp per 32 of them serialized the hottest ones: YCSB A's rerun at 2^20 took
// 17 ms host-mapped and 13-19 ms in GPU memory, 8 and 5.6 ms this way (H100). New failures go to
// bv.pending (the other buffer).
template <Access A, class T>
__global__ void __launch_bounds__(256) rerun_kernel(const __grid_constant__ T t, const __grid_constant__ BatchContext ctx,
                                                    const __grid_constant__ BatchView bv, const uint32_t* entries,
                                                    uint64_t count, SlowPathFlags flags) {
  const int lane = threadIdx.x & 31;
  const uint64_t k = (uint64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32;
  if (k >= count) return;  // the whole warp
  long long delta = 0;
  WarpOps<A, T> ops{t, ctx, bv, lane, delta};
  const size_t begin = entries[k];
  size_t resume = begin;
  const RunResult r = ops.run(begin, run_end(bv, begin, lane), flags, &resume);
  if (r != RunResult::kDone && lane == 0) hand_to_slow_path(ctx, bv, resume, r);
  if (lane == 0 && delta) atomicAdd(reinterpret_cast<unsigned long long*>(&ctx.counters->item_delta), static_cast<unsigned long long>(delta));
}

template <class T>
__global__ void __launch_bounds__(256) thread_batch_kernel(const __grid_constant__ T t, const __grid_constant__ BatchContext ctx,
                                                           const __grid_constant__ BatchView bv) {
  const size_t pos = size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (pos >= bv.n) return;
  if (bv.sort_keys && pos > 0 && bv.sort_keys[pos] == bv.sort_keys[pos - 1]) return;
  size_t end = pos + 1;
  if (bv.sort_keys)
    while (end < bv.n && bv.sort_keys[end] == bv.sort_keys[pos]) ++end;
  long long delta = 0;
  ThreadOps<T> ops{t, ctx, bv, delta};
  const RunResult r = ops.run(pos, end);
  if (r != RunResult::kDone) hand_to_slow_path(ctx, bv, pos, r);
  if (delta) atomicAdd(reinterpret_cast<unsigned long long*>(&ctx.counters->item_delta), static_cast<unsigned long long>(delta));
}

// The exclusive slow path: one warp works through the pending runs in order, displacing items
// where allowed. It stops at the first run that needs a resize or a larger heap and reports
// where; the host provides that and launches it again from there. With count == kPendingCount
// it takes the number of pending runs from the counters (launched in stream order, with no host
// in between: execute_async).
template <Access A, class T>
__global__ void slow_path_kernel(const __grid_constant__ T t, const __grid_constant__ BatchContext ctx,
                                 const __grid_constant__ BatchView bv, uint32_t* entries, uint64_t first, uint64_t count,
                                 SlowPathFlags flags) {
  const int lane = threadIdx.x & 31;
  long long delta = 0;
  WarpOps<A, T> ops{t, ctx, bv, lane, delta};
  int result = static_cast<int>(RunResult::kDone);
  if (count == kPendingCount) count = *reinterpret_cast<volatile unsigned long long*>(&ctx.counters->pending);
  for (uint64_t k = first; k < count; ++k) {
    const size_t begin = entries[k];
    const size_t end = run_end(bv, begin, lane);
    size_t resume = begin;
    const RunResult r = ops.run(begin, end, flags, &resume);
    if (r != RunResult::kDone) {
      if (lane == 0) {
        entries[k] = static_cast<uint32_t>(resume);
        ctx.counters->stopped_at = k;
      }
      result = static_cast<int>(r);
      break;
    }
  }
  if (lane == 0) {
    ctx.counters->slow_result = result;
    if (delta) atomicAdd(reinterpret_cast<unsigned long long*>(&ctx.counters->item_delta), static_cast<unsigned long long>(delta));
  }
}

// Whether a batch repeats a key: each key's first hash goes into an exact open-addressing set
// (note_key). For a small batch the set fits in L2 and one pass does it. A large one is checked in
// two passes that leave most of the work to L2: the single pass over a set twice the batch's size
// (256 MB for 2^24 keys) cost 1.24 ms of a 2^24 insert batch on the H200, more than the 0.65 ms
// sort it saves.
// 1. check_bits_kernel: each key's first hash picks one of 8 bits per operation in `once` (16 MB
//    for 2^24 keys, held in L2); a key that finds its bit set already also sets it in `twice`.
// 2. check_exact_kernel: the keys whose bit is in `twice` (about 1 in 8) go to the exact set. Two
//    equal keys pick one bit, so the second sets it in `twice` and both reach the exact set: a
//    repeat is never missed. Two keys with one 64-bit hash, or a probe longer than kMaxProbe,
//    count as a repeat: that batch is then planned, slower, never wrong.
struct RepeatCheck {
  uint32_t* once;     // null: one pass, every key to the exact set
  uint32_t* twice;
  uint64_t bit_mask;  // bits in each bitmap - 1
  uint64_t* seen;     // the exact set (0: empty entry)
  uint64_t seen_mask;
  int* repeats;
};

__device__ inline void note_key(const RepeatCheck& c, uint64_t hash) {
  constexpr int kMaxProbe = 64;
  const unsigned long long mark = hash | 1;
  uint64_t k = (hash >> 32) & c.seen_mask;
  for (int probe = 0; probe < kMaxProbe; ++probe, k = (k + 1) & c.seen_mask) {
    const unsigned long long was = atomicCAS(reinterpret_cast<unsigned long long*>(c.seen + k), 0ull, mark);
    if (was == 0) return;
    if (was == mark) break;
  }
  *reinterpret_cast<volatile int*>(c.repeats) = 1;
}

// Whether a batch in GPU memory (`ops`, never read by the host) holds anything but searches, an
// unknown op included: *writes |= 1, one atomic per warp.
__device__ inline void note_writes(const uint8_t* ops, size_t i, size_t n, uint32_t* writes) {
  if (__any_sync(kFullMask, i < n && ops[i] != static_cast<uint8_t>(Op::kSearch)) && (threadIdx.x & 31) == 0)
    atomicOr(writes, 1u);
}

template <class T>
__device__ inline uint64_t first_hash(const T& t, const uint64_t* keys, size_t i) {
  uint64_t key[T::kKeyWords];
#pragma unroll
  for (int w = 0; w < T::kKeyWords; ++w) key[w] = keys[i * T::kKeyWords + w];
  return format::xxh64_words<T::kKeyWords>(key, t.seed[0]);
}

template <class T>
__global__ void check_bits_kernel(const __grid_constant__ T t, const uint64_t* keys, size_t n, const uint8_t* ops,
                                  uint32_t* writes, const __grid_constant__ RepeatCheck c) {
  const size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (writes) note_writes(ops, i, n, writes);
  if (i >= n) return;
  const uint64_t bit = first_hash(t, keys, i) & c.bit_mask;
  const uint32_t mask = 1u << (bit & 31);
  if (atomicOr(c.once + (bit >> 5), mask) & mask) atomicOr(c.twice + (bit >> 5), mask);
}

template <class T>
__global__ void check_exact_kernel(const __grid_constant__ T t, const uint64_t* keys, size_t n, const uint8_t* ops,
                                   uint32_t* writes, const __grid_constant__ RepeatCheck c) {
  const size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (writes) note_writes(ops, i, n, writes);
  if (i >= n || *reinterpret_cast<volatile int*>(c.repeats)) return;
  const uint64_t hash = first_hash(t, keys, i);
  const uint64_t bit = hash & c.bit_mask;
  if (!c.once || __ldcg(c.twice + (bit >> 5)) >> (bit & 31) & 1) note_key(c, hash);
}

// The plan: each operation's hash prefix, so equal keys sort next to each other. With
// `by_bucket` (host-mapped tables) it is the high half of the first hash, the bits a level's
// bucket index is taken from, so that warps reach the table in address order: the GPU's reads of
// host memory are bound by address translation once a table outgrows about 512 MiB (H200: random
// 128-byte reads at 200 M/s within 512 MiB, 61 M/s over 2 GiB, 43 M/s over 8 GiB; a batch of 2^20
// in address order over 8 GiB, 200 M/s again: bench/host_pages_bench.cu), and YCSB on a
// host-mapped table of 16 M items ran 1.7x (Zipf) to 2.4x (uniform) faster so. In GPU memory
// it is the low half, which no bucket index uses (it was chosen so that inserts in neighbouring
// buckets would not race for the same slots; GPU memory has no translation to save).
template <class T>
__global__ void plan_kernel(const __grid_constant__ T t, const uint64_t* keys, size_t n, uint32_t* prefix, uint32_t* index,
                            const uint8_t* ops, uint32_t* writes, bool by_bucket) {
  const size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (writes) note_writes(ops, i, n, writes);
  if (i >= n) return;
  const uint64_t hash = first_hash(t, keys, i);
  prefix[i] = static_cast<uint32_t>(by_bucket ? hash >> 32 : hash);
  index[i] = static_cast<uint32_t>(i);
}

// A pass over every slot of one level: recovery clears INSERTING slots; it counts items, marks
// the heap cells they reference (a reference outside the heap or a shared cell is corruption)
// and writes the tag mirror.
template <class T>
__global__ void scan_level_kernel(const __grid_constant__ T t, uint32_t level, bool recover, bool build_mirror, uint32_t* cell_bits,
                                  ScanCounters* out) {
  const uint64_t slot_index = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const uint64_t slots = format::level_buckets(level) * T::S;
  const bool in_range = slot_index < slots;
  bool published = false;
  if (in_range) {
    const uint64_t b = slot_index / T::S;
    const int s = static_cast<int>(slot_index % T::S);
    std::byte* bucket = t.bucket(level, b);
    uint64_t state = load_volatile(T::state_word(bucket, s));
    if (recover && state == format::kSlotInserting) {
      t.writes.store(T::state_word(bucket, s), format::kSlotEmpty);
      t.writes.barrier();
      state = format::kSlotEmpty;
    }
    published = format::is_published(state);
    if (published && t.has_heap && cell_bits) {
      const uint64_t cell = load_volatile(T::value_word(bucket, s));
      if (cell >= t.heap.capacity) {
        atomicAdd(&out->corrupt, 1ull);
      } else {
        const uint32_t bit = 1u << (cell % 32);
        if (atomicOr(&cell_bits[cell / 32], bit) & bit) atomicAdd(&out->corrupt, 1ull);
        atomicMax(&out->highest_cell, cell + 1);
      }
    }
    if (build_mirror) {
      uint8_t tag = 0;
      if (published) {
        uint64_t fp = state;
        if constexpr (T::Layout::kKeyIsState) {
          const uint64_t key = format::decode_key_word(state);
          fp = format::fingerprint(format::xxh64_words<1>(&key, t.seed[0]), format::xxh64_words<1>(&key, t.seed[T::H - 1]));
        }
        tag = format::tag_of(fp);
      }
      t.tags[t.tag_index(level, b, s)] = tag;
    }
  }
  const uint32_t count = __popc(__ballot_sync(kFullMask, published));
  if ((threadIdx.x & 31) == 0 && count) atomicAdd(&out->items, static_cast<unsigned long long>(count));
}

// Resize: every item of the old bottom level moves into the levels above it. `upper` is the
// table seen from one level up (bottom = old bottom + 1, the new top included). Idempotent: an
// item already copied up is only cleared below, so an interrupted resize resumes by running
// this again.
template <class T>
__global__ void rehash_kernel(const __grid_constant__ T upper, uint32_t old_level, ScanCounters* out) {
  const int lane = threadIdx.x & 31;
  const uint64_t slot_index = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const uint64_t slots = format::level_buckets(old_level) * T::S;
  std::byte* bucket = nullptr;
  int s = 0;
  uint64_t state = 0;
  if (slot_index < slots) {
    bucket = upper.level[old_level] + (slot_index / T::S) * T::Layout::kBytes;
    s = static_cast<int>(slot_index % T::S);
    state = load_volatile(T::state_word(bucket, s));
  }
  uint32_t work = __ballot_sync(kFullMask, format::is_published(state));
  while (work) {
    const int src = __ffs(work) - 1;
    work &= work - 1;
    uint64_t key[T::kKeyWords];
#pragma unroll
    for (int w = 0; w < T::kKeyWords; ++w) {
      uint64_t v = 0;
      if (lane == src) v = T::Layout::kKeyIsState ? format::decode_key_word(state) : T::key_words(bucket, s)[w];
      key[w] = __shfl_sync(kFullMask, v, src);
    }
    const uint64_t value = __shfl_sync(kFullMask, lane == src ? load_volatile(T::value_word(bucket, s)) : 0, src);
    KeyProbe<T> p;
    make_probe(upper, key, p);
    LaneSlot<T> ls = lane_slot(upper, p, lane);
    bool placed = false;
    for (;;) {
      const WarpProbe r = warp_probe<Access::kDirect>(upper, p, ls, lane);
      if (r.found) {
        placed = true;  // copied by an earlier, interrupted attempt
        break;
      }
      if (r.target < 0) break;
      const bool claimed = lane == r.target && claim_slot<Access::kDirect>(upper, ls);
      if (claimed) link_slot<Access::kDirect>(upper, ls.level, ls.bucket, ls.slot, 0, p.key, p.published, p.tag, value);
      if (__any_sync(kFullMask, claimed)) {
        placed = true;
        break;
      }
    }
    if (!placed) {
      if (lane == 0) atomicAdd(&out->corrupt, 1ull);
      continue;
    }
    if (lane == src) {
      upper.writes.store(T::state_word(bucket, s), format::kSlotEmpty);
      upper.writes.barrier();
    }
  }
}

// Resize step 2's last resort, for the items rehash_kernel or rehash_mirror_kernel left in the
// old bottom level (every candidate slot above them full). list_items_kernel lists their slots;
// rehash_displace_kernel, one warp, places them one at a time, each after moving an item out of
// its candidate buckets to a free slot among that item's own (WarpOps::displace: the inserts'
// protocol, maintenance record included), then clears the old slot. What still cannot be placed
// is counted in out->corrupt and stays below, so a resumed resize meets it again.
template <class T>
__global__ void list_items_kernel(const __grid_constant__ T t, uint32_t level, uint64_t* list, uint64_t capacity,
                                  ScanCounters* out) {
  const uint64_t slot_index = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (slot_index >= format::level_buckets(level) * T::S) return;
  std::byte* bucket = t.level[level] + (slot_index / T::S) * T::Layout::kBytes;
  if (!format::is_published(load_volatile(T::state_word(bucket, static_cast<int>(slot_index % T::S))))) return;
  const unsigned long long k = atomicAdd(&out->items, 1ull);
  if (k < capacity) list[k] = slot_index;
}

template <Access A, class T>
__global__ void rehash_displace_kernel(const __grid_constant__ T upper, const __grid_constant__ BatchContext ctx,
                                       uint32_t old_level, const uint64_t* list, uint64_t capacity, ScanCounters* out) {
  const int lane = threadIdx.x & 31;
  const uint64_t count = min(capacity, static_cast<uint64_t>(*reinterpret_cast<volatile unsigned long long*>(&out->items)));
  long long unused_delta = 0;  // moves leave the item count as it is
  const BatchView no_batch{};
  WarpOps<A, T> ops{upper, ctx, no_batch, lane, unused_delta};
  for (uint64_t k = 0; k < count; ++k) {
    std::byte* bucket = upper.level[old_level] + (list[k] / T::S) * T::Layout::kBytes;
    const int s = static_cast<int>(list[k] % T::S);
    const uint64_t state = load_volatile(T::state_word(bucket, s));
    uint64_t key[T::kKeyWords];
#pragma unroll
    for (int w = 0; w < T::kKeyWords; ++w)
      key[w] = T::Layout::kKeyIsState ? format::decode_key_word(state) : load_volatile(T::key_words(bucket, s) + w);
    const uint64_t value = load_volatile(T::value_word(bucket, s));
    KeyProbe<T> p;
    make_probe(upper, key, p);
    LaneSlot<T> ls = lane_slot(upper, p, lane);
    bool placed = false;
    // The warp is alone in the table: a displacement frees one of p's slots and the claim of a free
    // slot succeeds, so two rounds do; the bound only guards against a slot that cannot be claimed.
    for (int round = 0; round < 4 && !placed; ++round) {
      const WarpProbe r = warp_probe<A>(upper, p, ls, lane);
      if (r.found) {
        placed = true;  // copied by an earlier, interrupted attempt
        break;
      }
      if (r.target < 0) {
        if (ops.displace(p, ls, /*parallel=*/false)) continue;
        break;
      }
      const bool claimed = lane == r.target && claim_slot<A>(upper, ls);
      if (claimed) link_slot<A>(upper, ls.level, ls.bucket, ls.slot, ls.tag_index, p.key, p.published, p.tag, value);
      placed = __any_sync(kFullMask, claimed);
    }
    if (!placed) {
      if (lane == 0) atomicAdd(&out->corrupt, 1ull);
      continue;
    }
    if (lane == 0) {
      upper.writes.store(T::state_word(bucket, s), format::kSlotEmpty);
      upper.writes.barrier();
    }
    __syncwarp();
  }
}

// Export: the published items of slots [first, first + count) (a slot index over the active
// levels, bottom first) are compacted into keys / values; out->items counts them.
template <class T>
__global__ void export_kernel(const __grid_constant__ T t, uint64_t first, uint64_t count, std::byte* keys,
                              std::byte* values, ScanCounters* out) {
  const uint64_t i = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= count) return;
  uint64_t k = first + i;
  uint32_t level = t.bottom;
  while (k >= format::level_buckets(level) * T::S) k -= format::level_buckets(level++) * T::S;
  std::byte* bucket = t.bucket(level, k / T::S);
  const int s = static_cast<int>(k % T::S);
  const uint64_t state = load_volatile(T::state_word(bucket, s));
  if (!format::is_published(state)) return;
  const uint64_t word = load_volatile(T::value_word(bucket, s));
  if (values && t.has_heap && t.value_checksums) {
    KeyProbe<T> p;
    uint64_t key[T::kKeyWords];
#pragma unroll
    for (int w = 0; w < T::kKeyWords; ++w)
      key[w] = T::Layout::kKeyIsState ? format::decode_key_word(state) : T::key_words(bucket, s)[w];
    make_probe(t, key, p);
    if (load_volatile(t.cell_checksum(word)) != t.checksum_of(t.cell(word), p.hash[0])) {
      atomicAdd(&out->found, 1ull);  // left out: its value fails its checksum
      return;
    }
  }
  const uint64_t at = atomicAdd(&out->items, 1ull);
  if constexpr (T::Layout::kKeyIsState) {
    const uint64_t key = format::decode_key_word(state);
    lane_copy(keys + at * 8, reinterpret_cast<const std::byte*>(&key), 8);
  } else {
    lane_copy(keys + at * T::kKeyWidth, reinterpret_cast<const std::byte*>(T::key_words(bucket, s)), T::kKeyWidth);
  }
  if (!values) return;
  if (t.has_heap)
    lane_copy(values + at * t.value_width, t.cell(word), t.value_width);
  else
    write_inline_value(values + at * t.value_width, word, t.value_width);
}

// At open: every heap cell below `limit` that no slot references is free.
__global__ inline void collect_free_cells_kernel(const uint32_t* bits, uint64_t limit, uint64_t* out,
                                                 unsigned long long* count) {
  const uint64_t i = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i < limit && !((bits[i / 32] >> (i % 32)) & 1)) out[atomicAdd(count, 1ull)] = i;
}

// After a batch: the cells it freed join those waiting for the reserve (GpuEngine::refill_reserve).
__global__ inline void append_cells_kernel(uint64_t* list, uint64_t at, const uint64_t* cells, uint64_t count) {
  const uint64_t i = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i < count) list[at + i] = cells[i];
}

}  // namespace gphash::engine::gpu
