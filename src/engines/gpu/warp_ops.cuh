// Warp-cooperative operations (GPHash section 3.2). A warp works on one key at a time: all 32
// lanes read the key's 32 candidate slots at once (one lane per slot), ballots find the key,
// the empty slots and the least-loaded bucket, and one lane performs the ordered stores of the
// persistent protocol. Two ways to read candidates share this code:
//   Access::kMirror - the tag mirror in GPU memory first, the table only where a tag matches;
//   Access::kDirect - the table's state words themselves (used by resize, and as a variant).
// Every store to the pool goes through the table's write path (PoolWrites).
#pragma once

#include <cstdint>

#include "engines/gpu/device_table.cuh"
#include "engines/gpu/group.h"

namespace gphash::engine::gpu {

enum class Access { kMirror, kDirect };

enum class RunResult : int { kDone = 0, kNeedSlot = 1, kNeedCell = 2 };

// A run that covers a whole window of this many plan positions (windows start at its multiples)
// is a Zipf-hot key's (~56,000 operations of a 2^20 YCSB batch): the plan counts such windows, the
// batch and serial passes skip their runs and long_run_kernel shares each among the warps of a
// block, or of a block per window (fast_ops.cuh). A warp walking one alone bounded the whole
// batch: H200, host-mapped, complete cache, Zipf 0.99, 2^20 (bench/results/2026-11-30-long-runs):
// B 233 -> 490 M ops/s of device time (4.5 -> 2.2 ms a batch), A 145-158 -> 225-249; in GPU
// memory, 8-byte keys, B 295 -> 1,018 and A 279 -> 1,052. Every run of 511 or more covers a
// window of 256, so the batch kernel's warps walk none longer (windows of 512 left runs of up to
// 1,022 to them: bench/results/2026-11-30-long-windows).
inline constexpr size_t kLongRunWindow = 256;

__host__ __device__ constexpr bool covers_long_window(size_t begin, size_t end) {
  return (begin + kLongRunWindow - 1) / kLongRunWindow * kLongRunWindow + kLongRunWindow <= end;
}
// Beside the batch kernel long_run_kernel walks a run with a block of its own, which costs the
// batch passes a whole SM for as long: only runs of kLongRunBeside or more go there (a run that
// long always covers a window), the shorter ones stay with the batch kernel's warps. Against
// every run that covers a window, same build, same call (H200, YCSB Zipf 0.99, 16.8 M items,
// bench/results/2026-11-30-long-runs-choice): GPU memory 8-byte keys 2^20 B 1,676 -> 1,768 M
// ops/s of device time, A 1,431 -> 1,641; host-mapped 2^20 B 682-736 -> 740, A alike.
inline constexpr size_t kLongRunBeside = 2 * kLongRunWindow;
__host__ __device__ constexpr bool is_long_run(size_t begin, size_t end, bool beside) {
  return beside ? end - begin >= kLongRunBeside : covers_long_window(begin, end);
}

// What the slow path allows (it runs between the batch's parallel passes: one warp alone, or in
// GPU memory first a warp per run; GpuEngine::slow_path).
struct SlowPathFlags {
  bool allow_displacement = false;
  bool parallel_moves = false;   // displacement by many warps at once (GpuEngine::slow_path says when)
  bool heap_exhausted = false;   // fail kHeapFull instead of asking for a larger heap
  bool table_exhausted = false;  // fail kTableFull instead of asking for a resize
};

struct BatchView {
  size_t n;
  const uint8_t* ops;  // per-operation Op, or null: every operation is uniform_op
  uint8_t uniform_op;
  const uint64_t* keys;
  const std::byte* values;  // inputs of insert/upsert/update
  std::byte* values_out;    // search results, or null
  uint8_t* status;
  uint32_t* perm;             // sorted position -> operation index, or null (identity)
  const uint32_t* sort_keys;  // sorted hash prefixes marking runs, or null (every op alone)
  uint32_t* regroup_scratch;  // as long as perm, unused after the plan (the sort's input): WarpOps::regroup's
  uint32_t* pending;          // positions handed to the slow path
  uint32_t* serial;           // positions the batch kernel leaves to the serial pass
  uint32_t value_width;
  bool long_runs_beside;  // long_run_kernel runs beside the batch kernel (is_long_run)

  __device__ uint32_t op_index(size_t pos) const { return perm ? perm[pos] : static_cast<uint32_t>(pos); }
  __device__ Op op(uint32_t i) const { return static_cast<Op>(ops ? ops[i] : uniform_op); }
  __device__ const std::byte* value(uint32_t i) const { return values + size_t{i} * value_width; }
  __device__ std::byte* out(uint32_t i) const { return values_out ? values_out + size_t{i} * value_width : nullptr; }
};

// ---- byte copies -------------------------------------------------------------------------

// The warp copies n bytes, each lane a slice; with `pool` the destination is in the pool and the
// stores go through its write path.
__device__ inline void warp_copy(std::byte* dst, const std::byte* src, uint32_t n, int lane, const PoolWrites* pool) {
  if (pool && lane == 0) pool->count();
  if (n % 16 == 0 && aligned(dst, 16) && aligned(src, 16)) {
    for (uint32_t k = lane * 16; k < n; k += 32 * 16)
      *reinterpret_cast<uint4*>(dst + k) = *reinterpret_cast<const uint4*>(src + k);
  } else if (n % 4 == 0 && aligned(dst, 4) && aligned(src, 4)) {
    for (uint32_t k = lane * 4; k < n; k += 32 * 4)
      *reinterpret_cast<uint32_t*>(dst + k) = *reinterpret_cast<const uint32_t*>(src + k);
  } else {
    for (uint32_t k = lane; k < n; k += 32) dst[k] = src[k];
  }
  if (pool && lane == 0) pool->mark(dst, n);
}

// For every lane in `lanes`, copies `width` bytes from that lane's `src` to its `dst` (with `pool`:
// into the pool, through its write path). Values of up to 128 bytes go four at a time (8 lanes of
// 16 bytes each), so the reads of four copies are in flight together instead of one after the
// other.
__device__ inline void warp_copy_lanes(uint32_t lanes, const std::byte* src, std::byte* dst, uint32_t width, int lane,
                                       const PoolWrites* pool) {
  const bool mine = (lanes >> lane) & 1;
  if (pool && mine) {
    pool->count();
    pool->mark(dst, width);
  }
  const bool narrow = __all_sync(kFullMask, !mine || (width <= 128 && width % 16 == 0 && aligned(src, 16) && aligned(dst, 16)));
  if (!narrow) {
    while (lanes) {
      const int from = __ffs(lanes) - 1;
      lanes &= lanes - 1;
      warp_copy(reinterpret_cast<std::byte*>(__shfl_sync(kFullMask, reinterpret_cast<uintptr_t>(dst), from)),
                reinterpret_cast<const std::byte*>(__shfl_sync(kFullMask, reinterpret_cast<uintptr_t>(src), from)),
                width, lane, nullptr);
    }
    return;
  }
  const int group = lane / 8, part = lane % 8;
  while (lanes) {
    uint32_t rest = lanes;
    for (int g = 0; g < group && rest; ++g) rest &= rest - 1;
    const int from = rest ? __ffs(rest) - 1 : 0;
    const auto s = reinterpret_cast<const std::byte*>(__shfl_sync(kFullMask, reinterpret_cast<uintptr_t>(src), from));
    const auto d = reinterpret_cast<std::byte*>(__shfl_sync(kFullMask, reinterpret_cast<uintptr_t>(dst), from));
    if (rest && part * 16u < width) *reinterpret_cast<uint4*>(d + part * 16) = *reinterpret_cast<const uint4*>(s + part * 16);
    for (int g = 0; g < 4 && lanes; ++g) lanes &= lanes - 1;
  }
}

__device__ inline uint64_t read_inline_value(const std::byte* src, uint32_t width) {
  if (width == 8 && aligned(src, 8)) return *reinterpret_cast<const uint64_t*>(src);
  uint64_t v = 0;
  for (uint32_t k = 0; k < width; ++k) v |= uint64_t(static_cast<uint8_t>(src[k])) << (8 * k);
  return v;
}
__device__ inline void write_inline_value(std::byte* dst, uint64_t v, uint32_t width) {
  if (width == 8 && aligned(dst, 8)) {
    *reinterpret_cast<uint64_t*>(dst) = v;
    return;
  }
  for (uint32_t k = 0; k < width; ++k) dst[k] = static_cast<std::byte>(v >> (8 * k));
}

// ---- value heap ---------------------------------------------------------------------------

template <class T>
__device__ uint64_t allocate_cell(const T& t, const BatchContext& ctx) {
  unsigned long long k = atomicAdd(&ctx.counters->cells_taken, 1ull);
  if (k < ctx.free_count) return ctx.free_cells[ctx.free_count - 1 - k];
  unsigned long long f = atomicAdd(&ctx.counters->fresh_next, 1ull);
  return f < t.heap.capacity ? f : kNoCell;
}
// Freed cells become allocatable after the batch, so no operation of this batch can still
// be reading a cell that another one overwrites.
__device__ inline void release_cell(const BatchContext& ctx, uint64_t cell) {
  unsigned long long k = atomicAdd(&ctx.counters->cells_freed, 1ull);
  if (k < ctx.freed_capacity) ctx.freed[k] = cell;  // past it: reclaimed at the next open
}

// A value read from the heap: with value checksums, whether `out` (the copy just made) matches the
// cell's checksum for the key whose first hash is `hash0`. One lane.
template <class T>
__device__ bool value_verifies(const T& t, uint64_t cell, const std::byte* out, uint64_t hash0) {
  if (!t.value_checksums) return true;
  return load_volatile(t.cell_checksum(cell)) == t.checksum_of(out, hash0);
}

// The answer to operation i of the run of one key that starts at plan position `begin`, given
// the key's state before it: the status and, for a search that finds the key, the value (written
// by an earlier operation of the run, or the table's value word `stored`).
template <class T>
__device__ void answer_in_run(const T& t, const BatchView& bv, uint32_t i, Op op, const KeyState& s, size_t begin,
                              uint64_t stored, const std::byte* cached_value, uint64_t hash0) {
  OpStatus status = status_of(op, s.present);
  std::byte* out = bv.out(i);
  if (op == Op::kSearch && s.present && out) {
    if (s.source != kFromTable) {
      lane_copy(out, bv.value(bv.op_index(begin + s.source)), bv.value_width);
    } else if (cached_value) {  // BktCache: the stored value's bytes, cached with its bucket
      lane_copy(out, cached_value, bv.value_width);
    } else if (t.has_heap) {
      lane_copy(out, t.cell(stored), bv.value_width);
      if (!value_verifies(t, stored, out, hash0)) status = OpStatus::kCorruptValue;
    } else {
      write_inline_value(out, stored, bv.value_width);
    }
  }
  bv.status[i] = static_cast<uint8_t>(status);
}

// ---- candidate geometry and probing ------------------------------------------------------

template <class T>
struct LaneSlot {
  uint32_t level;
  uint64_t bucket;
  int slot, d, j;
  bool live;  // false when an earlier hash function names the same bucket at this level
  uint64_t tag_index;
  std::byte* line;  // the bucket's BktCache line, or null: reads go there, writes to the pool
  __device__ std::byte* read_bucket(const T& t) const { return line ? line : t.bucket(level, bucket); }
};

template <class T>
__device__ LaneSlot<T> lane_slot(const T& t, const KeyProbe<T>& p, int lane) {
  const format::CandidatePosition c = format::candidate_position(lane, T::L, T::S);
  LaneSlot<T> ls;
  ls.slot = c.slot;
  ls.d = c.d;
  ls.j = c.j;
  ls.level = t.bottom + ls.d;
  ls.bucket = format::bucket_at(pick(p.hash, ls.j), ls.level);
  ls.live = !format::repeated_bucket(p.hash, ls.level, ls.j, ls.bucket);
  ls.tag_index = t.tags ? t.tag_index(ls.level, ls.bucket, ls.slot) : 0;
  ls.line = t.writes.cache.cached(ls.level, ls.bucket);
  return ls;
}

struct WarpProbe {
  uint32_t found;  // lanes whose slot holds the key
  int valid;       // lane of the preferred copy, or -1
  int target;      // lane of the insert target (first empty slot of the best bucket), or -1
};

template <int S>
__device__ __forceinline__ uint32_t bucket_lanes(int lane) {
  const uint32_t group = S >= 32 ? 0xFFFFFFFFu : ((1u << S) - 1);
  return group << (lane - lane % S);
}

// The insert target among the candidates the lanes see (format::target_score): each bucket's
// first lane scores it, the smallest score wins, and its first empty slot is the target.
template <class T>
__device__ __forceinline__ int pick_target(bool live, uint32_t occupied, uint32_t empty, int lane, int d, int j) {
  const uint32_t lanes = bucket_lanes<T::S>(lane);
  unsigned score = ~0u;
  if (lane % T::S == 0 && live && (empty & lanes)) score = format::target_score(__popc(occupied & lanes), d, j, T::L);
  const unsigned best = __reduce_min_sync(kFullMask, score);
  if (best == ~0u) return -1;
  const int leader = __ffs(__ballot_sync(kFullMask, score == best)) - 1;
  return leader + __ffs((empty >> leader) & (T::S >= 32 ? ~0u : ((1u << T::S) - 1))) - 1;
}

template <Access A, class T>
__device__ WarpProbe warp_probe(const T& t, const KeyProbe<T>& p, const LaneSlot<T>& ls, int lane) {
  std::byte* b = ls.read_bucket(t);
  bool occupied, candidate, empty;
  if constexpr (A == Access::kMirror) {
    const uint8_t tag = load_volatile(t.tags + ls.tag_index);
    occupied = tag != 0;
    candidate = tag == p.tag;
    empty = tag == 0;
  } else {
    const uint64_t state = load_volatile(T::state_word(b, ls.slot));
    occupied = state != format::kSlotEmpty;
    candidate = state == p.published;
    empty = state == format::kSlotEmpty;
  }
  occupied &= ls.live;
  candidate &= ls.live;
  empty &= ls.live;
  bool match = false;
  if (candidate) {
    if constexpr (T::Layout::kKeyIsState) {
      match = A == Access::kDirect || load_volatile(T::state_word(b, ls.slot)) == p.published;
    } else {
      const uint64_t* k = T::key_words(b, ls.slot);
      match = true;
#pragma unroll
      for (int w = 0; w < T::kKeyWords; ++w) match &= (ls.line ? __ldcg(k + w) : k[w]) == p.key[w];
    }
  }
  WarpProbe r;
  r.found = __ballot_sync(kFullMask, match);
  r.valid = -1;
  if (r.found) {
    if (__popc(r.found) == 1) {
      r.valid = __ffs(r.found) - 1;
    } else {  // duplicates: the smallest copy rank is valid
      const uint64_t mine = match ? format::copy_rank(ls.level, ls.bucket, ls.slot) : ~0ull;
      uint64_t rank = mine;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        const uint64_t other = __shfl_xor_sync(kFullMask, rank, o);
        rank = other < rank ? other : rank;
      }
      r.valid = __ffs(__ballot_sync(kFullMask, mine == rank)) - 1;
    }
  }
  const uint32_t occ = __ballot_sync(kFullMask, occupied);
  const uint32_t emp = __ballot_sync(kFullMask, empty);
  r.target = pick_target<T>(ls.live, occ, emp, lane, ls.d, ls.j);
  return r;
}

// ---- slot protocol steps (called by one lane) --------------------------------------------

template <class T>
__device__ uint32_t* tag_word(const T& t, uint64_t tag_index, unsigned* shift) {
  *shift = unsigned(tag_index & 3) * 8;
  return reinterpret_cast<uint32_t*>(t.tags + (tag_index & ~uint64_t{3}));
}

// A mirror tag 0 -> `tag` by CAS of its 32-bit word, starting from `expected` (the word as the
// caller last saw it; a wrong guess costs one more CAS).
template <class T>
__device__ bool claim_tag(const T& t, uint64_t tag_index, uint32_t expected, uint8_t tag) {
  unsigned shift;
  uint32_t* w = tag_word(t, tag_index, &shift);
  uint32_t old = expected;
  for (;;) {
    if ((old >> shift) & 0xFF) return false;
    const uint32_t seen = atomicCAS(w, old, old | (uint32_t(tag) << shift));
    if (seen == old) return true;
    old = seen;
  }
}

// The first free tag of a mirror word -> `tag` by CAS, starting from `expected`: the tag at
// `tag_index` if it is still free, else the next free one of its word (a later slot of the same
// bucket: the slot the insert rule picks once the first is taken). Returns the slot's tag index,
// or ~0 when the word has no free tag left.
template <class T>
__device__ uint64_t claim_free_tag(const T& t, uint64_t tag_index, uint32_t expected, uint8_t tag) {
  unsigned shift;
  uint32_t* w = tag_word(t, tag_index, &shift);
  uint32_t old = expected;
  for (;;) {
    constexpr uint32_t kLow7 = 0x7F7F7F7Fu;
    const uint32_t free = ~(((old & kLow7) + kLow7) | old | kLow7) >> shift << shift;  // at or after the target
    if (!free) return ~uint64_t{0};
    const unsigned at = unsigned(__ffs(free) - 1) & ~7u;
    const uint32_t seen = atomicCAS(w, old, old | (uint32_t(tag) << at));
    if (seen == old) return (tag_index & ~uint64_t{3}) + at / 8;
    old = seen;
  }
}

// EMPTY -> claimed. With the mirror the claim is a CAS in GPU memory (the GPU engine is the
// pool's only writer) to tag 1; without it, a CAS of the slot's state word EMPTY -> INSERTING.
template <Access A, class T>
__device__ bool claim_slot(const T& t, const LaneSlot<T>& ls) {
  if constexpr (A == Access::kMirror) {
    unsigned shift;
    const uint32_t* w = tag_word(t, ls.tag_index, &shift);
    return claim_tag(t, ls.tag_index, *reinterpret_cast<const volatile uint32_t*>(w), 1);
  } else {
    return t.writes.claim(T::state_word(t.bucket(ls.level, ls.bucket), ls.slot));
  }
}

// Fills a claimed slot and publishes it: key and value word are persistent before the state
// word says the slot holds them. (With the mirror the pool slot goes EMPTY -> published, the
// claim living in GPU memory; a crash before the publish leaves an EMPTY slot.)
template <Access A, class T>
__device__ void link_slot(const T& t, uint32_t level, uint64_t bucket, int slot, uint64_t tag_index,
                          const uint64_t* key, uint64_t published, uint8_t tag, uint64_t value_word) {
  std::byte* b = t.bucket(level, bucket);
  if constexpr (!T::Layout::kKeyIsState) {
    uint64_t* k = T::key_words(b, slot);
#pragma unroll
    for (int w = 0; w < T::kKeyWords; ++w) t.writes.store(k + w, key[w]);
  }
  t.writes.store(T::value_word(b, slot), value_word);
  t.writes.publish_barrier(A == Access::kMirror);
  t.writes.store(T::state_word(b, slot), published);
  t.writes.barrier();
  if constexpr (A == Access::kMirror) {
    unsigned shift;
    uint32_t* w = tag_word(t, tag_index, &shift);
    atomicXor(w, uint32_t(1u ^ tag) << shift);  // claimed (1) -> tag
  }
}

template <Access A, class T>
__device__ void clear_slot(const T& t, uint32_t level, uint64_t bucket, int slot, uint64_t tag_index, uint8_t tag) {
  t.writes.store(T::state_word(t.bucket(level, bucket), slot), format::kSlotEmpty);
  t.writes.barrier();
  if constexpr (A == Access::kMirror) {
    unsigned shift;
    uint32_t* w = tag_word(t, tag_index, &shift);
    atomicXor(w, uint32_t(tag) << shift);  // tag -> 0
  }
}

// ---- operations on one key (the whole warp) ----------------------------------------------

// Whether the operation at plan position `pos` is on p's key.
template <class T>
__device__ inline bool has_key(const BatchView& bv, size_t pos, const KeyProbe<T>& p) {
  const uint64_t* k = bv.keys + size_t{bv.op_index(pos)} * T::kKeyWords;
  bool same = true;
#pragma unroll
  for (int w = 0; w < T::kKeyWords; ++w) same &= k[w] == p.key[w];
  return same;
}

__device__ inline uint32_t warp_inclusive_sum(uint32_t x, int lane) {
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t v = __shfl_up_sync(kFullMask, x, o);
    if (lane >= o) x += v;
  }
  return x;
}

// Where regroup (below) puts the positions of one thread's share [from, to) of [begin, end): p's
// key's to `front` on, the others to `back` on (`before`: p's positions in the shares before it),
// in order, through regroup_scratch.
template <class T>
__device__ inline void regroup_share(const BatchView& bv, const KeyProbe<T>& p, size_t begin, size_t from, size_t to,
                                     size_t before, size_t matches) {
  size_t front = begin + before, back = begin + matches + (from - begin - before);
#pragma unroll 8
  for (size_t pos = from; pos < to; ++pos) bv.regroup_scratch[has_key(bv, pos, p) ? front++ : back++] = bv.perm[pos];
}

template <Access A, class T>
struct WarpOps {
  const T& t;
  const BatchContext& ctx;
  const BatchView& bv;
  int lane;
  long long& item_delta;  // kept by lane 0
  bool skip_long_runs = false;  // run(): leave runs that cover a long-run window to long_run_kernel
  // write_value(): leave the barrier after the value word's store to commit(), which the caller
  // runs once after all its runs. Runs are of different keys, and a value word only ever points to
  // a cell made persistent before it, so the last barrier is the only one the batch's durability
  // needs; a warp walking k runs with writes then waits for k + 1 PCIe round trips, not 2k.
  bool defer_commit = false;
  bool commit_pending = false;  // this lane stored a value word since the last barrier
  // With `pending` (batch_kernel's inlined runs, serial_kernel), a run's update (finish_run) only
  // fills its new cell; the value word's store waits here until flush_writes(), whose one barrier
  // makes every pending cell persistent first. A warp with k updating runs then waits for 2 round
  // trips, not k + 1 (H200, host-mapped YCSB A at 2^16: see bench/results/2026-11-30-plan-graph).
  // Only runs' updates: each key is in one run, so no two pending writes touch one slot, and these
  // kernels never displace an item, so a pending slot still holds its key at the flush.
  struct PendingWrite {
    std::byte* bucket;
    std::byte* line;
    const std::byte* src;
    uint64_t id, word, old;
    int slot;
  };
  static constexpr int kMaxPending = 32;
  PendingWrite* pending = nullptr;  // the warp's kMaxPending entries (shared memory), or null
  int pending_count = 0;            // the same in every lane

  __device__ static bool reserved(const KeyProbe<T>& p) {
    if constexpr (T::Layout::kKeyIsState) return format::is_reserved_key(p.key[0]);
    return false;
  }

  // Empties every copy of the key but the preferred one. A duplicate left by an interrupted
  // move shares its cell with the preferred copy, so only cells nobody else holds are freed.
  __device__ void remove_duplicates(const WarpProbe& r, const LaneSlot<T>& ls, const KeyProbe<T>& p) {
    std::byte* b = t.bucket(ls.level, ls.bucket);
    const uint64_t keep = __shfl_sync(kFullMask, load_volatile(T::value_word(b, ls.slot)), r.valid);
    if ((r.found >> lane & 1) && lane != r.valid) {
      const uint64_t cell = load_volatile(T::value_word(b, ls.slot));
      clear_slot<A>(t, ls.level, ls.bucket, ls.slot, ls.tag_index, p.tag);
      if (t.has_heap && cell != keep) release_cell(ctx, cell);
    }
    if (lane == 0) item_delta -= __popc(r.found) - 1;
    __syncwarp();
  }

  // The value word of the preferred copy (all lanes get it).
  __device__ uint64_t value_word_at(const WarpProbe& r, const LaneSlot<T>& ls) {
    uint64_t v = 0;
    if (lane == r.valid) v = load_volatile(T::value_word(ls.read_bucket(t), ls.slot));
    return __shfl_sync(kFullMask, v, r.valid);
  }

  // BktCache: the bytes of the preferred copy's value (word `vw`) if its line caches them, else
  // null (all lanes get it); and the run's statistics and hits, once for the run.
  __device__ const std::byte* cached_value_at(const WarpProbe& r, const LaneSlot<T>& ls, uint64_t vw) {
    const BucketCacheView& c = t.writes.cache;
    uint64_t at = 0;
    if (lane == r.valid && ls.line && c.value_bytes && __ldcg(&c.value_refs(ls.line)[ls.slot]) == vw)
      at = reinterpret_cast<uintptr_t>(c.value_bytes_of(ls.line, ls.slot));
    return reinterpret_cast<const std::byte*>(__shfl_sync(kFullMask, at, r.valid));
  }
  __device__ void note_run(const WarpProbe& r, const LaneSlot<T>& ls, size_t operations) {
    if (lane != r.valid) return;
    t.writes.cache.record_run(ls.level, ls.bucket, operations);
    t.writes.cache.count_hits(operations, ls.line != nullptr);
  }

  // Copies the stored value (word `vw`) to `out`, warp-cooperatively; false when it fails its
  // checksum (all lanes get the answer).
  __device__ bool copy_stored_value(uint64_t vw, const std::byte* cached_value, std::byte* out, uint64_t hash0) {
    if (!out) return true;
    if (!t.has_heap) {
      if (lane == 0) write_inline_value(out, vw, bv.value_width);
      return true;
    }
    warp_copy(out, cached_value ? cached_value : t.cell(vw), bv.value_width, lane, nullptr);
    if (!t.value_checksums || cached_value) return true;  // cached values were verified when loaded
    __syncwarp();
    bool ok = true;
    if (lane == 0) ok = value_verifies(t, vw, out, hash0);
    return __shfl_sync(kFullMask, ok, 0);
  }

  // A value word for input value `src`: the inline value, or a new cell holding it (and its
  // checksum), persisted. kNoCell when the heap is exhausted.
  __device__ uint64_t new_value_word(const std::byte* src, uint64_t hash0, bool persist = true) {
    if (!t.has_heap) return read_inline_value(src, bv.value_width);
    uint64_t cell = 0;
    if (lane == 0) cell = allocate_cell(t, ctx);
    cell = __shfl_sync(kFullMask, cell, 0);
    if (cell == kNoCell) return kNoCell;
    warp_copy(t.cell(cell), src, bv.value_width, lane, &t.writes);
    if (t.value_checksums && lane == 0) t.writes.store(t.cell_checksum(cell), t.checksum_of(src, hash0));
    if (persist) t.writes.barrier();
    __syncwarp();
    return cell;
  }

  // Out-of-place update of the preferred copy, whose value word is `old` (value_word_at): the new
  // value is persistent before one 8-byte write of the value word switches to it (the plan makes
  // this warp the key's only writer, so `old` is still current; reading it again from a host-mapped
  // pool would cost a PCIe round trip).
  __device__ RunResult write_value(const WarpProbe& r, const LaneSlot<T>& ls, uint64_t old, const std::byte* src,
                                   uint64_t hash0) {
    const uint64_t word = new_value_word(src, hash0);
    if (t.has_heap && word == kNoCell) return RunResult::kNeedCell;
    if (lane == r.valid) {
      std::byte* b = t.bucket(ls.level, ls.bucket);
      const uint64_t id = t.writes.cache.on ? t.writes.cache.bucket_id(ls.level, ls.bucket) : 0;
      t.writes.store_in(T::value_word(b, ls.slot), word, b, id, ls.line);
      // The new value's bytes into the BktCache line, as batch_kernel's writers put them: without
      // them a hot key updated by its run read its value from host memory until the next phase.
      if (t.has_heap) t.writes.cache.put_value_in(ls.line, ls.slot, word, src, bv.value_width);
      if (defer_commit) commit_pending = true;
      else t.writes.barrier();
      if (t.has_heap) release_cell(ctx, old);
    }
    __syncwarp();
    return RunResult::kDone;
  }
  // write_value() for a run's update with `pending`: the cell now, the word at flush_writes().
  __device__ RunResult write_value_pending(const WarpProbe& r, const LaneSlot<T>& ls, uint64_t old, const std::byte* src,
                                           uint64_t hash0) {
    if (pending_count == kMaxPending) flush_writes();
    const uint64_t word = new_value_word(src, hash0, /*persist=*/false);
    if (t.has_heap && word == kNoCell) return RunResult::kNeedCell;
    if (lane == r.valid)
      pending[pending_count] = {t.bucket(ls.level, ls.bucket), ls.line, src,
                                t.writes.cache.on ? t.writes.cache.bucket_id(ls.level, ls.bucket) : 0, word, old, ls.slot};
    __syncwarp();
    ++pending_count;
    return RunResult::kDone;
  }
  // The pending writes: one barrier for every lane's part of their cells, then lane k stores
  // pending write k's value word (and its bytes into the cached line) and frees the old cell.
  __device__ void flush_writes() {
    if (pending_count == 0) return;
    t.writes.barrier();
    __syncwarp();
    if (lane < pending_count) {
      const PendingWrite w = pending[lane];
      t.writes.store_in(T::value_word(w.bucket, w.slot), w.word, w.bucket, w.id, w.line);
      if (t.has_heap) t.writes.cache.put_value_in(w.line, w.slot, w.word, w.src, bv.value_width);
      commit_pending = true;
      if (t.has_heap) release_cell(ctx, w.old);
    }
    pending_count = 0;
    __syncwarp();
  }
  // The barrier write_value() left (defer_commit), in the lanes whose stores it covers.
  __device__ void commit() {
    flush_writes();
    if (commit_pending) t.writes.barrier();
    commit_pending = false;
    __syncwarp();
  }

  __device__ void erase(const WarpProbe& r, const LaneSlot<T>& ls, const KeyProbe<T>& p) {
    if (lane == r.valid) {
      const uint64_t cell = load_volatile(T::value_word(t.bucket(ls.level, ls.bucket), ls.slot));
      clear_slot<A>(t, ls.level, ls.bucket, ls.slot, ls.tag_index, p.tag);
      if (t.has_heap) release_cell(ctx, cell);
    }
    if (lane == 0) --item_delta;
    __syncwarp();
  }

  // Moves one item out of the key's candidate buckets to a free slot among its own candidates.
  // The one-warp slow path runs alone; the maintenance record brackets the move so recovery can
  // drop a second copy if a crash leaves both. With `parallel` (a table in GPU memory, no
  // maintenance record, mirror access) many warps displace at once: a warp first locks the item's
  // slot by turning its tag into 1 (claimed), so no other warp moves the same item, and checks that
  // the slot still holds it. The item is invisible while it moves, which is why the parallel pass
  // only runs runs of one absent key (run()): none of them looks for an item that exists.
  __device__ bool displace(const KeyProbe<T>& p, const LaneSlot<T>& ls, bool parallel) {
    std::byte* b = t.bucket(ls.level, ls.bucket);
    const uint64_t state = ls.live ? load_volatile(T::state_word(b, ls.slot)) : 0;
    uint32_t items = __ballot_sync(kFullMask, format::is_published(state));
    while (items) {
      const int src = __ffs(items) - 1;
      items &= items - 1;
      // The item's key, from its slot.
      uint64_t key[T::kKeyWords];
#pragma unroll
      for (int w = 0; w < T::kKeyWords; ++w) {
        uint64_t v = 0;
        if (lane == src) v = T::Layout::kKeyIsState ? format::decode_key_word(state) : T::key_words(b, ls.slot)[w];
        key[w] = __shfl_sync(kFullMask, v, src);
      }
      KeyProbe<T> q;
      make_probe(t, key, q);
      const LaneSlot<T> qs = lane_slot(t, q, lane);
      const WarpProbe qr = warp_probe<A>(t, q, qs, lane);
      if (qr.target < 0) continue;
      if (parallel && !__any_sync(kFullMask, lane == src && lock_item(b, ls, q))) continue;
      const uint32_t from_level = __shfl_sync(kFullMask, ls.level, src);
      const uint64_t from_bucket = __shfl_sync(kFullMask, ls.bucket, src);
      const int from_slot = __shfl_sync(kFullMask, ls.slot, src);
      const uint64_t from_tag = __shfl_sync(kFullMask, ls.tag_index, src);
      const uint64_t value = __shfl_sync(kFullMask, lane == src ? load_volatile(T::value_word(b, ls.slot)) : 0, src);
      bool moved = false;
      if (lane == qr.target && claim_slot<A>(t, qs)) {
        if (t.maintenance) {
          const uint64_t from_word = format::pack({from_level, from_bucket, static_cast<uint32_t>(from_slot)});
          const uint64_t to_word = format::pack({qs.level, qs.bucket, static_cast<uint32_t>(qs.slot)});
          t.writes.store(&t.maintenance[1], from_word);
          t.writes.store(&t.maintenance[2], to_word);
          t.writes.store(&t.maintenance[3], format::move_record_checksum(from_word, to_word));
          t.writes.barrier();
          t.writes.store(&t.maintenance[0], format::kMoveInProgress);
          t.writes.barrier();
        }
        link_slot<A>(t, qs.level, qs.bucket, qs.slot, qs.tag_index, q.key, q.published, q.tag, value);
        // A locked slot's tag is 1: clearing it is the same as clearing tag 1.
        clear_slot<A>(t, from_level, from_bucket, from_slot, from_tag, parallel ? uint8_t{1} : q.tag);
        if (t.maintenance) {
          t.writes.store(&t.maintenance[0], format::kMoveIdle);
          t.writes.barrier();
        }
        atomicAdd(&ctx.counters->moves, 1ull);
        moved = true;
      }
      if (__any_sync(kFullMask, moved)) return true;
      if (parallel && lane == src) unlock_item(ls, q);  // another warp took q's free slot
    }
    return false;
  }

  // Parallel displacement's lock on an item's slot: its tag q.tag -> 1 by CAS, kept only if the
  // slot still holds q (it may have moved away and another item with the same tag come in).
  __device__ bool lock_item(std::byte* b, const LaneSlot<T>& ls, const KeyProbe<T>& q) {
    if constexpr (A != Access::kMirror) {
      return false;  // the host runs parallel displacement with the mirror only
    } else {
      unsigned shift;
      uint32_t* w = tag_word(t, ls.tag_index, &shift);
      uint32_t word = *reinterpret_cast<const volatile uint32_t*>(w);
      for (;;) {
        if (((word >> shift) & 0xFF) != q.tag) return false;
        const uint32_t seen = atomicCAS(w, word, (word & ~(0xFFu << shift)) | (1u << shift));
        if (seen == word) break;
        word = seen;  // a neighbouring tag changed
      }
      // The tag's writer fenced the slot's words before it; this fence keeps the loads below after
      // the CAS that saw it.
      __threadfence();
      bool holds = load_volatile(T::state_word(b, ls.slot)) == q.published;
      if constexpr (!T::Layout::kKeyIsState) {
#pragma unroll
        for (int w = 0; w < T::kKeyWords; ++w) holds &= load_volatile(T::key_words(b, ls.slot) + w) == q.key[w];
      }
      if (!holds) unlock_item(ls, q);
      return holds;
    }
  }
  __device__ void unlock_item(const LaneSlot<T>& ls, const KeyProbe<T>& q) {
    unsigned shift;
    uint32_t* w = tag_word(t, ls.tag_index, &shift);
    atomicXor(w, uint32_t(1u ^ q.tag) << shift);  // 1 -> q.tag
  }

  // Inserts a key known to be absent, with the value of operation `i`.
  __device__ RunResult insert_new(const KeyProbe<T>& p, LaneSlot<T>& ls, WarpProbe r, uint32_t i,
                                  const SlowPathFlags& flags, bool* failed_full) {
    uint64_t word = 0;
    bool have_word = false;
    // Parallel displacement can hand a freed slot to another warp's key, or move an item back:
    // after a few moves the run goes to the one-warp path instead of chasing slots.
    int moves_left = 8;
    for (;;) {
      if (r.target < 0) {
        if (flags.allow_displacement && (!flags.parallel_moves || moves_left-- > 0) &&
            displace(p, ls, flags.parallel_moves)) {
          r = warp_probe<A>(t, p, ls, lane);
          continue;
        }
        if (flags.table_exhausted) {
          *failed_full = true;
          if (have_word && t.has_heap && lane == 0) release_cell(ctx, word);
          return RunResult::kDone;
        }
        if (have_word && t.has_heap && lane == 0) release_cell(ctx, word);
        return RunResult::kNeedSlot;
      }
      if (!have_word) {
        word = new_value_word(bv.value(i), p.hash[0]);
        if (t.has_heap && word == kNoCell) return RunResult::kNeedCell;
        have_word = true;
      }
      bool claimed = lane == r.target && claim_slot<A>(t, ls);
      if (__any_sync(kFullMask, claimed)) {
        if (claimed) link_slot<A>(t, ls.level, ls.bucket, ls.slot, ls.tag_index, p.key, p.published, p.tag, word);
        if (lane == 0) ++item_delta;
        __syncwarp();
        return RunResult::kDone;
      }
      r = warp_probe<A>(t, p, ls, lane);  // another warp took the slot: look again
    }
  }

  // One operation (a run of length one, or the slow path's one-at-a-time fallback).
  __device__ RunResult single(const KeyProbe<T>& p, uint32_t i, const SlowPathFlags& flags) {
    const Op op = bv.op(i);
    if (!is_valid_op(op) || reserved(p)) {
      if (lane == 0) bv.status[i] = static_cast<uint8_t>(is_valid_op(op) ? OpStatus::kReservedKey : OpStatus::kInvalidOp);
      return RunResult::kDone;
    }
    LaneSlot<T> ls = lane_slot(t, p, lane);
    WarpProbe r = warp_probe<A>(t, p, ls, lane);
    if (op != Op::kSearch && __popc(r.found) > 1) remove_duplicates(r, ls, p);
    const bool present = r.found != 0;
    OpStatus status = status_of(op, present);
    RunResult result = RunResult::kDone;
    bool failed_full = false;
    if (present) note_run(r, ls, 1);
    if (op == Op::kSearch && present) {
      const uint64_t vw = value_word_at(r, ls);
      if (!copy_stored_value(vw, cached_value_at(r, ls, vw), bv.out(i), p.hash[0])) status = OpStatus::kCorruptValue;
    } else if (present && (op == Op::kUpsert || op == Op::kUpdate)) {
      result = write_value(r, ls, value_word_at(r, ls), bv.value(i), p.hash[0]);
      if (result == RunResult::kNeedCell && flags.heap_exhausted) result = RunResult::kDone, status = OpStatus::kHeapFull;
    } else if (present && op == Op::kErase) {
      erase(r, ls, p);
    } else if (!present && (op == Op::kInsert || op == Op::kUpsert)) {
      result = insert_new(p, ls, r, i, flags, &failed_full);
      if (failed_full) status = OpStatus::kTableFull;
      if (result == RunResult::kNeedCell && flags.heap_exhausted) result = RunResult::kDone, status = OpStatus::kHeapFull;
    }
    if (result == RunResult::kDone && lane == 0) bv.status[i] = static_cast<uint8_t>(status);
    return result;
  }

  // The key's state before the batch, from one probe by the warp. Only the key's writer (`writer`)
  // removes duplicates: readers take the preferred copy, which removing the others leaves alone.
  struct RunStart {
    LaneSlot<T> ls;
    WarpProbe r;
    bool present;
    uint64_t stored;                  // its value word
    const std::byte* cached_value;    // its value's BktCache copy, or null
  };
  __device__ RunStart start_run(const KeyProbe<T>& p, size_t operations, bool writer = true) {
    RunStart s;
    s.ls = lane_slot(t, p, lane);
    s.r = warp_probe<A>(t, p, s.ls, lane);
    if (writer && __popc(s.r.found) > 1) remove_duplicates(s.r, s.ls, p);
    s.present = s.r.found != 0;
    s.stored = s.present ? value_word_at(s.r, s.ls) : 0;
    s.cached_value = s.present ? cached_value_at(s.r, s.ls, s.stored) : nullptr;
    if (s.present) note_run(s.r, s.ls, operations);
    return s;
  }

  // Answers positions [from, to) of the run that starts at `begin`, the key in state `carry`
  // before `from`: a scan over the composed transitions, 32 positions at a time. Returns the
  // state after `to`.
  __device__ KeyState answer_span(size_t begin, size_t from, size_t to, KeyState carry, uint64_t stored,
                                  const std::byte* cached_value, uint64_t hash0) {
    for (size_t base = from; base < to; base += 32) {
      const size_t pos = base + lane;
      const bool active = pos < to;
      const uint32_t i = active ? bv.op_index(pos) : 0;
      const Op op = active ? bv.op(i) : Op::kSearch;
      Transition inclusive = active ? transition_of(op, uint32_t(pos - begin)) : kIdentity;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const Transition before = __shfl_up_sync(kFullMask, inclusive, o);
        if (lane >= o) inclusive = compose(before, inclusive);
      }
      Transition exclusive = __shfl_up_sync(kFullMask, inclusive, 1);
      if (lane == 0) exclusive = kIdentity;
      const KeyState s = apply(exclusive, carry);
      if (active) answer_in_run(t, bv, i, op, s, begin, stored, cached_value, hash0);
      carry = apply(__shfl_sync(kFullMask, inclusive, 31), carry);
    }
    return carry;
  }

  // The composed transition of positions [from, to) of the run that starts at `begin` (all lanes
  // get it), and in *differs whether a key there is not p's. Four rounds' loads at a time: the
  // walk waits for memory once per four rounds (long_run_kernel only, so its registers cost no
  // other kernel occupancy).
  __device__ Transition span_transition(size_t begin, size_t from, size_t to, const KeyProbe<T>& p, bool* differs) {
    constexpr int kRounds = 4;
    Transition total = kIdentity;
    bool other = false;
    for (size_t base = from; base < to; base += 32 * kRounds) {
      Transition x[kRounds];
#pragma unroll
      for (int u = 0; u < kRounds; ++u) {
        const size_t pos = base + u * 32 + lane;
        x[u] = kIdentity;
        if (pos < to) {
          const uint32_t i = bv.op_index(pos);
          const uint64_t* k = bv.keys + size_t{i} * T::kKeyWords;
#pragma unroll
          for (int w = 0; w < T::kKeyWords; ++w) other |= k[w] != p.key[w];
          x[u] = transition_of(bv.op(i), uint32_t(pos - begin));
        }
      }
#pragma unroll
      for (int u = 0; u < kRounds; ++u) {
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
          const Transition before = __shfl_up_sync(kFullMask, x[u], o);
          if (lane >= o) x[u] = compose(before, x[u]);
        }
        total = compose(total, __shfl_sync(kFullMask, x[u], 31));
      }
    }
    *differs = __any_sync(kFullMask, other);
    return total;
  }

  // The run's one write, decided by the key's final state. On failure nothing of the run was
  // applied (see fallback).
  __device__ RunResult finish_run(const KeyProbe<T>& p, RunStart& s, KeyState final_state, size_t begin, size_t end,
                                  const SlowPathFlags& flags) {
    if (s.present && !final_state.present) {
      erase(s.r, s.ls, p);
    } else if (s.present && final_state.present && final_state.source != kFromTable) {
      const std::byte* src = bv.value(bv.op_index(begin + final_state.source));
      RunResult res = pending ? write_value_pending(s.r, s.ls, s.stored, src, p.hash[0]) : write_value(s.r, s.ls, s.stored, src, p.hash[0]);
      if (res != RunResult::kDone) return fallback(begin, end, flags, res);
    } else if (!s.present && final_state.present) {
      bool failed_full = false;
      RunResult res = insert_new(p, s.ls, s.r, bv.op_index(begin + final_state.source), flags, &failed_full);
      if (res != RunResult::kDone || failed_full) return fallback(begin, end, flags, failed_full ? RunResult::kNeedSlot : res);
    }
    return RunResult::kDone;
  }

  // All operations of one key, positions [begin, end) of the plan: one probe, a scan over the
  // composed transitions, one final write.
  __device__ RunResult group(const KeyProbe<T>& p, size_t begin, size_t end, const SlowPathFlags& flags) {
    if (end - begin == 1) return single(p, bv.op_index(begin), flags);
    if (reserved(p)) {
      for (size_t pos = begin + lane; pos < end; pos += 32) {
        const uint32_t i = bv.op_index(pos);
        bv.status[i] = static_cast<uint8_t>(is_valid_op(bv.op(i)) ? OpStatus::kReservedKey : OpStatus::kInvalidOp);
      }
      return RunResult::kDone;
    }
    RunStart s = start_run(p, end - begin);
    const KeyState final_state = answer_span(begin, begin, end, KeyState{s.present, kFromTable}, s.stored, s.cached_value, p.hash[0]);
    __syncwarp();
    return finish_run(p, s, final_state, begin, end, flags);
  }

  // A combined write that cannot complete: nothing of the run was applied. With the resource
  // exhausted the run is replayed one operation at a time so each gets its own status.
  __device__ RunResult fallback(size_t begin, size_t end, const SlowPathFlags& flags, RunResult why) {
    const bool exhausted = why == RunResult::kNeedCell ? flags.heap_exhausted : flags.table_exhausted;
    if (!exhausted) return why;
    for (size_t pos = begin; pos < end; ++pos) {
      KeyProbe<T> q;
      make_probe(t, bv.keys + size_t{bv.op_index(pos)} * T::kKeyWords, q);
      RunResult res = single(q, bv.op_index(pos), flags);
      if (res != RunResult::kDone) return res;  // cannot happen with both exhausted flags set
    }
    return RunResult::kDone;
  }

  // Moves the positions in [begin, end) whose key is p's to the front of the range, both parts in
  // their order (a stable partition of the run's permutation, through regroup_scratch); returns the
  // end of p's part. Each lane takes a contiguous share of the range, so its loads are independent
  // of one another and the shares, written in lane order, keep the order. (long_run_kernel's
  // block_regroup does the same with a block.)
  __device__ size_t regroup(const KeyProbe<T>& p, size_t begin, size_t end) {
    const size_t share = (end - begin + 31) / 32;
    const size_t from = min(end, begin + lane * share), to = min(end, from + share);
    uint32_t mine = 0;
#pragma unroll 8
    for (size_t pos = from; pos < to; ++pos) mine += has_key(bv, pos, p);
    const uint32_t up_to = warp_inclusive_sum(mine, lane), matches = __shfl_sync(kFullMask, up_to, 31);
    if (matches == end - begin) return end;
    regroup_share(bv, p, begin, from, to, up_to - mine, matches);
    __syncwarp();
    for (size_t pos = begin + lane; pos < end; pos += 32) bv.perm[pos] = bv.regroup_scratch[pos];
    __syncwarp();
    return begin + matches;
  }

  // A run of the plan: positions with one hash prefix. Almost always one key (two keys share a
  // 32-bit prefix with a chance of about items / 2^32 a key); a run of several is regrouped by key,
  // a key's operations in their order, and each key's group is combined as a run of its own, so a
  // hot key that meets another key's prefix costs a few passes over its run, not a walk of its
  // thousands of operations one at a time. A group that cannot complete leaves the run from its
  // first position to the slow path, which regroups what is left (already grouped: unchanged).
  // Returns kDone, or the reason and (in *resume) the position the slow path continues at.
  __device__ RunResult run(size_t begin, size_t end, const SlowPathFlags& flags, size_t* resume) {
    if (skip_long_runs && is_long_run(begin, end, bv.long_runs_beside)) return RunResult::kDone;  // long_run_kernel's
    KeyProbe<T> p;
    make_probe(t, bv.keys + size_t{bv.op_index(begin)} * T::kKeyWords, p);
    bool uniform = true;
    if (end - begin > 1) {
      bool differs = false;
      for (size_t pos = begin + 1 + lane; pos < end; pos += 32) {
        const uint64_t* k = bv.keys + size_t{bv.op_index(pos)} * T::kKeyWords;
#pragma unroll
        for (int w = 0; w < T::kKeyWords; ++w) differs |= k[w] != p.key[w];
      }
      uniform = !__any_sync(kFullMask, differs);
    }
    *resume = begin;
    if (uniform) return group(p, begin, end, flags);
    // Runs of several keys may touch items that exist, which parallel displacement may be moving.
    if (flags.parallel_moves) return RunResult::kNeedSlot;
    for (size_t from = begin; from < end;) {
      KeyProbe<T> q;
      make_probe(t, bv.keys + size_t{bv.op_index(from)} * T::kKeyWords, q);
      const size_t to = regroup(q, from, end);
      *resume = from;
      const RunResult res = group(q, from, to, flags);
      if (res != RunResult::kDone) return res;
      from = to;
    }
    return RunResult::kDone;
  }
};

}  // namespace gphash::engine::gpu
