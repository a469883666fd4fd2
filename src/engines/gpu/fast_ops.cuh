// The batch kernel. The warp takes the plan positions of its 32 lanes. Runs of one operation
// (almost all of them in practice) go through a pipelined path:
//   phase 1, GPHash's one-shot warp access: for each operation in turn every lane reads one
//     candidate slot's tag (or state word) and ballots name the candidates, the empty slots and
//     the least-loaded bucket; the loads of 8 operations are issued before any is used, so a
//     warp has 8 operations' reads in flight instead of one;
//   phase 2: each lane, as its operation's activated thread, confirms candidates, claims a slot
//     and performs the ordered stores, all lanes together, so the fences of 32 operations are
//     one fence of the warp.
// Whatever the pipelined path cannot finish simply (runs of several operations, duplicates, a
// lost claim, no free slot or cell) goes through the serial warp-cooperative path (warp_ops).
#pragma once

#include "engines/gpu/warp_ops.cuh"

namespace gphash::engine::gpu {

// Cells for the lanes in `need`, one atomic per warp: from the reserve of free cells first, then
// never-used cells; kNoCell when the heap is exhausted.
template <class T>
__device__ uint64_t allocate_cells_warp(const T& t, const BatchContext& ctx, uint32_t need, int lane) {
  if (!need) return kNoCell;
  const int leader = __ffs(need) - 1;
  const unsigned count = __popc(need), rank = __popc(need & ((1u << lane) - 1));
  unsigned long long base = 0, fresh = 0;
  if (lane == leader) {
    base = atomicAdd(&ctx.counters->cells_taken, static_cast<unsigned long long>(count));
    const unsigned long long from_stack = base < ctx.free_count ? ctx.free_count - base : 0;
    if (from_stack < count) fresh = atomicAdd(&ctx.counters->fresh_next, count - from_stack);
  }
  base = __shfl_sync(kFullMask, base, leader);
  fresh = __shfl_sync(kFullMask, fresh, leader);
  if (!(need >> lane & 1)) return kNoCell;
  const unsigned long long k = base + rank;
  if (k < ctx.free_count) return ctx.free_cells[ctx.free_count - 1 - k];
  const unsigned long long from_stack = base < ctx.free_count ? ctx.free_count - base : 0;
  const unsigned long long f = fresh + (rank - from_stack);
  return f < t.heap.capacity ? f : kNoCell;
}

// What phase 1 found for one operation: the lanes whose slot word matches its probe (candidates
// to confirm) and, when asked, its insert target: the first empty slot of the least-loaded bucket
// (format::target_score), as a lane number, or -1 when all are full.
struct Candidates {
  uint32_t lanes = 0;
  int target = -1;
  uint64_t target_bucket = 0;
  uint32_t target_word = 0;  // with the mirror: the 4 tags around the target as phase 1 read them
};

// GPHash's one-shot warp access for the operations of the lanes in `ops`: for each in turn every
// lane reads one of its 32 candidate slot words (the tag mirror's, or the pool's state word), and
// ballots name candidates, empty slots and the least-loaded bucket. The loads of 8 operations are
// issued before any is used, so a warp has 8 operations' reads in flight instead of one. Each lane
// of `ops` gets its own operation's result.
template <Access A, class T>
__device__ __forceinline__ Candidates scan_candidates(const T& t, const KeyProbe<T>& mine, uint32_t ops, bool find_targets,
                                                      int lane) {
  constexpr int kInFlight = 8;
  const format::CandidatePosition c = format::candidate_position(lane, T::L, T::S);
  const int s = c.slot, d = c.d, j = c.j;
  const uint32_t level = t.bottom + d;
  Candidates mine_found;
  for (int base = 0; base < 32; base += kInFlight) {
    if (!((ops >> base) & ((1u << kInFlight) - 1))) continue;
    uint64_t seen[kInFlight], bucket_of[kInFlight];
    bool live[kInFlight];
#pragma unroll
    for (int k = 0; k < kInFlight; ++k) {
      uint64_t h[T::H];
#pragma unroll
      for (int x = 0; x < T::H; ++x) h[x] = __shfl_sync(kFullMask, mine.hash[x], base + k);
      const uint64_t b = format::bucket_at(pick(h, j), level);
      bucket_of[k] = b;
      live[k] = ((ops >> (base + k)) & 1) && !format::repeated_bucket(h, level, j, b);
      if constexpr (A == Access::kMirror)
        seen[k] = live[k] ? __ldcg(t.tags + t.tag_index(level, b, s)) : 1;
      else
        seen[k] = live[k] ? __ldcg(reinterpret_cast<const unsigned long long*>(T::state_word(t.bucket(level, b), s))) : 1;
    }
#pragma unroll
    for (int k = 0; k < kInFlight; ++k) {
      uint64_t want;
      if constexpr (A == Access::kMirror)
        want = __shfl_sync(kFullMask, uint32_t(mine.tag), base + k);
      else
        want = __shfl_sync(kFullMask, mine.published, base + k);
      Candidates found;
      found.lanes = __ballot_sync(kFullMask, live[k] && seen[k] == want);
      if (find_targets) {
        const uint32_t occupied = __ballot_sync(kFullMask, live[k] && seen[k] != 0);
        const uint32_t empty = __ballot_sync(kFullMask, live[k] && seen[k] == 0);
        found.target = pick_target<T>(live[k], occupied, empty, lane, d, j);
        if (found.target >= 0)
          found.target_bucket = __shfl_sync(kFullMask, bucket_of[k], found.target - found.target % T::S);
        if constexpr (A == Access::kMirror) {
          // The mirror word holding the target's tag holds its bucket's slots s & ~3 .. s | 3, the
          // lanes around it: the claim's CAS starts from it instead of reading the word again.
          uint32_t word = uint32_t(seen[k] & 0xFF) << (8 * (lane & 3));
          word |= __shfl_xor_sync(kFullMask, word, 1);
          word |= __shfl_xor_sync(kFullMask, word, 2);
          found.target_word = __shfl_sync(kFullMask, word, found.target < 0 ? 0 : found.target);
        }
      }
      if (lane == base + k) mine_found = found;
    }
  }
  return mine_found;
}

// A bucket's S tags in one load (tag_index(level, b, 0) is S-aligned).
template <class T>
__device__ __forceinline__ uint64_t bucket_tags(const T& t, uint32_t level, uint64_t b) {
  static_assert(T::S == 4 || T::S == 8, "a bucket's tags in one load");
  const uint8_t* tags = t.tags + t.tag_index(level, b, 0);
  return T::S == 8 ? __ldcg(reinterpret_cast<const unsigned long long*>(tags)) : __ldcg(reinterpret_cast<const unsigned int*>(tags));
}

// The first slot of a bucket whose tag is p's and whose slot holds p's key, or -1.
template <class T>
__device__ __forceinline__ int confirm_in_bucket(const T& t, const KeyProbe<T>& p, uint64_t tags, std::byte* b, uint64_t& value) {
#pragma unroll
  for (int s = 0; s < T::S; ++s) {
    if (uint8_t(tags >> (8 * s)) != p.tag) continue;
    if constexpr (T::Layout::kKeyIsState) {
      const SlotWords w = load_volatile_slot(T::state_word(b, s));
      if (w.state != p.published) continue;
      value = w.value;
    } else {
      const uint64_t* k = T::key_words(b, s);
      bool match = true;
#pragma unroll
      for (int x = 0; x < T::kKeyWords; ++x) match &= k[x] == p.key[x];
      if (!match) continue;
      value = load_volatile(T::value_word(b, s));
    }
    return s;
  }
  return -1;
}

// A search in GPU memory by its own lane: the lane reads its candidate buckets' tags and confirms
// matches in the valid-copy order (format/probe.h: top level first, then the lowest bucket), so
// its first confirmed match is the copy a probe of all candidates would call valid. Phase 1 reads
// the same tags with a warp per operation, 8 operations in flight, in four rounds; here the 32
// operations of a warp are in flight at once. The first bucket of that order (the top level's
// lowest) is read alone first: it holds about half the keys, and those need no other read.
// H100, 100.7 M slots, 2^24 searches (2026-11-28, against phase 1 in the same call): positive
// 7.38 -> 8.03 G/s at load 0.5, 7.11 -> 8.01 at 0.9; negative 8.21 -> 13.55 and 7.81 -> 12.28. All
// buckets at once: positive 7.46-7.51, negative alike.
template <class T>
__device__ __forceinline__ bool find_by_lane(const T& t, const KeyProbe<T>& p, uint32_t& level, uint64_t& bucket, int& slot,
                                             uint64_t& value) {
  constexpr int L = T::L, H = T::H;
  uint64_t b[L][H], tags[L][H];
#pragma unroll
  for (int d = 0; d < L; ++d) {
#pragma unroll
    for (int j = 0; j < H; ++j) b[d][j] = format::bucket_at(p.hash[j], t.bottom + d);
#pragma unroll
    for (int x = 0; x < H; ++x)  // ascending: the valid-copy order within a level
#pragma unroll
      for (int j = 0; j + 1 < H - x; ++j)
        if (b[d][j] > b[d][j + 1]) {
          const uint64_t tmp = b[d][j];
          b[d][j] = b[d][j + 1];
          b[d][j + 1] = tmp;
        }
  }
  auto load = [&](int d, int j) {
    // A bucket two hashes name is read once.
    tags[d][j] = j > 0 && b[d][j] == b[d][j - 1] ? 0 : bucket_tags(t, t.bottom + d, b[d][j]);
  };
  auto look = [&](int d, int j) {
    const int s = confirm_in_bucket(t, p, tags[d][j], t.bucket(t.bottom + d, b[d][j]), value);
    if (s < 0) return false;
    level = t.bottom + d, bucket = b[d][j], slot = s;
    return true;
  };
  load(L - 1, 0);
  if (look(L - 1, 0)) return true;
#pragma unroll
  for (int d = L - 1; d >= 0; --d)
#pragma unroll
    for (int j = 0; j < H; ++j)
      if (d != L - 1 || j != 0) load(d, j);
#pragma unroll
  for (int d = L - 1; d >= 0; --d)
#pragma unroll
    for (int j = 0; j < H; ++j)
      if ((d != L - 1 || j != 0) && look(d, j)) return true;
  return false;
}

// Bit 8k+7 set for each zero byte k of x (bytes past S are not looked at by the callers).
__device__ __forceinline__ uint64_t zero_bytes(uint64_t x) {
  constexpr uint64_t kLow7 = 0x7F7F7F7F7F7F7F7Full;
  return ~(((x & kLow7) + kLow7) | x | kLow7);
}

// Any operation in GPU memory by its own lane (a write's probe; searches beside no writes take
// find_by_lane): the lane reads all its candidate buckets' tags at once and finds, as phase 1 and
// phase 2 would for it, its key's copies (the valid one, by copy rank, and how many) and its
// insert target (format::target_score: the least-loaded bucket with a free slot, its first free
// slot, as a candidate lane number with the 4-tag word around it). Returns the number of copies.
// Phase 1 spends the whole warp's instructions on one operation at a time (ballots for the target,
// shuffles of its bucket and tag word): with it an insert batch's kernel executed 135 warp
// instructions per insert. By lane, the kernel of a 2^24 insert batch took 5.22 ms instead of
// 6.09 (H200, load 0.33 -> 0.5; bench/results/2026-11-28-writes-by-lane): what remains looks
// bound by its random accesses, not by issue.
template <class T>
__device__ __forceinline__ int probe_by_lane(const T& t, const KeyProbe<T>& p, Candidates& target, uint32_t& level,
                                             uint64_t& bucket, int& slot, uint64_t& value) {
  constexpr int L = T::L, H = T::H, S = T::S;
  constexpr uint64_t kSlots = S == 8 ? ~0ull : 0xFFFFFFFFull;
  // Bucket numbers are recomputed where used (a shift each) rather than kept: registers are what
  // bounds the kernel (80 a thread for 3 blocks an SM; more spilled and slowed its searches).
  uint64_t tags[L][H];
#pragma unroll
  for (int d = 0; d < L; ++d)
#pragma unroll
    for (int j = 0; j < H; ++j) tags[d][j] = bucket_tags(t, t.bottom + d, format::bucket_at(p.hash[j], t.bottom + d));
  target = Candidates{};
  int copies = 0;
  uint64_t best_rank = ~0ull;
  uint32_t best_score = ~0u;
#pragma unroll
  for (int d = 0; d < L; ++d)
#pragma unroll
    for (int j = 0; j < H; ++j) {
      const uint32_t lvl = t.bottom + d;
      const uint64_t b = format::bucket_at(p.hash[j], lvl);
      if (format::repeated_bucket(p.hash, lvl, j, b)) continue;
      for (uint64_t m = zero_bytes(tags[d][j] ^ (0x0101010101010101ull * p.tag)) & kSlots; m; m &= m - 1) {
        const int s = (__ffsll(static_cast<long long>(m)) - 1) / 8;
        std::byte* bk = t.bucket(lvl, b);
        uint64_t v;
        bool match;
        if constexpr (T::Layout::kKeyIsState) {
          const SlotWords w = load_volatile_slot(T::state_word(bk, s));
          match = w.state == p.published;
          v = w.value;
        } else {
          const uint64_t* k = T::key_words(bk, s);
          match = true;
#pragma unroll
          for (int x = 0; x < T::kKeyWords; ++x) match &= k[x] == p.key[x];
          v = match ? load_volatile(T::value_word(bk, s)) : 0;
        }
        if (!match) continue;
        ++copies;
        const uint64_t rank = format::copy_rank(lvl, b, s);
        if (rank < best_rank) best_rank = rank, level = lvl, bucket = b, slot = s, value = v;
      }
      const uint64_t empty = zero_bytes(tags[d][j]) & kSlots;
      if (!empty) continue;
      const uint32_t score = format::target_score(S - __popcll(empty), d, j, L);
      if (score < best_score) {
        const int s = (__ffsll(static_cast<long long>(empty)) - 1) / 8;
        best_score = score;
        target.target = j * (S * L) + d * S + s;
        target.target_bucket = b;
        target.target_word = uint32_t(tags[d][j] >> (32 * (s / 4)));
      }
    }
  return copies;
}

// 3 blocks of 256 per SM (80 registers). At 4 (64 registers, some spills) searches gained 4% and
// inserts lost 11% (H100, gpu_bench --sections hbm, 2026-11-25).
// kInlineSerial: the warp finishes its own serial runs (below) instead of listing them for
// serial_kernel. Host-mapped tables run it: their serial runs' PCIe round trips overlap the other
// warps' work there (YCSB A and B 1-14% faster than with serial_kernel); in GPU memory the kernel
// without the inlined warp path searches 9% faster and runs YCSB 8-26% faster (H100, 2026-11-27).
template <Access A, class T, bool kInlineSerial>
__global__ void __launch_bounds__(256, 3) batch_kernel(const __grid_constant__ T t, const __grid_constant__ BatchContext ctx,
                                                       const __grid_constant__ BatchView bv) {
  const int lane = threadIdx.x & 31;
  const size_t pos = size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const bool head = pos < bv.n && (!bv.sort_keys || pos == 0 || bv.sort_keys[pos] != bv.sort_keys[pos - 1]);
  const bool single = head && (!bv.sort_keys || pos + 1 >= bv.n || bv.sort_keys[pos + 1] != bv.sort_keys[pos]);
  const uint32_t i = single ? bv.op_index(pos) : 0;
  KeyProbe<T> mine{};
  if (single) make_probe(t, bv.keys + size_t{i} * T::kKeyWords, mine);
  const Op op = single ? bv.op(i) : Op::kSearch;
  bool skipped = single && !is_valid_op(op);
  if constexpr (T::Layout::kKeyIsState) skipped |= single && format::is_reserved_key(mine.key[0]);
  if (skipped) bv.status[i] = static_cast<uint8_t>(is_valid_op(op) ? OpStatus::kReservedKey : OpStatus::kInvalidOp);
  const uint32_t simple = __ballot_sync(kFullMask, single && !skipped);
  // A one-word key is its own state word, which every reader compares, so a new slot can take its
  // tag at the claim: a reader that sees the tag before the publish reads EMPTY and moves on. Wider
  // keys are confirmed by their key words, which may still be an erased item's: their claim is
  // tag 1 until the slot is published.
  constexpr bool kTagAtClaim = A == Access::kMirror && T::Layout::kKeyIsState;
  // A warp of searches needs no insert targets: skip the occupancy ballots.
  const bool any_writes = __any_sync(kFullMask, single && op != Op::kSearch);
  bool defer = false, found = false;
  uint32_t f_level = 0;
  uint64_t f_bucket = 0, f_value = 0;
  int f_slot = 0, matches = 0;
  std::byte* f_line = nullptr;  // the found bucket's BktCache line, if it is cached
  // In GPU memory every operation probes by its own lane: a warp of searches with find_by_lane,
  // any other warp with probe_by_lane (one code path for the whole warp). Not in a host-mapped
  // table: its reads are the slots' PCIe reads, which phase 1 reads no more of than this does.
  const bool by_lane = A == Access::kMirror && !t.writes.persistent && (simple >> lane & 1);
  // Phase 1 (every lane calls it: it is warp-synchronous; it skips the lanes that probe by lane).
  Candidates found_slots = scan_candidates<A>(t, mine, simple & ~__ballot_sync(kFullMask, by_lane), any_writes, lane);
  if (by_lane) {
    if (!any_writes) {
      found = find_by_lane(t, mine, f_level, f_bucket, f_slot, f_value);
    } else {
      matches = probe_by_lane(t, mine, found_slots, f_level, f_bucket, f_slot, f_value);
      found = matches > 0;
    }
  }
  const uint32_t my_candidates = found_slots.lanes;
  const int my_target = found_slots.target;

  // Phase 2: each lane its own operation.
  if (simple >> lane & 1) {
    uint64_t best_rank = ~0ull;
    for (uint32_t c = my_candidates; c; c &= c - 1) {
      const format::CandidatePosition cp = format::candidate_position(__ffs(c) - 1, T::L, T::S);
      const uint32_t clevel = t.bottom + cp.d;
      const uint64_t cb = format::bucket_at(pick(mine.hash, cp.j), clevel);
      std::byte* line = t.writes.cache.cached(clevel, cb);
      std::byte* bucket = line ? line : t.bucket(clevel, cb);
      bool match;
      uint64_t value_word = 0;
      if constexpr (T::Layout::kKeyIsState && A == Access::kMirror) {
        static_assert(T::Layout::kValueOffset == T::Layout::kStateOffset + 8 && T::Layout::kStateStride == 16);
        const SlotWords w = load_volatile_slot(T::state_word(bucket, cp.slot));
        match = w.state == mine.published;
        value_word = w.value;
      } else if constexpr (T::Layout::kKeyIsState) {
        match = true;  // kDirect: phase 1 compared the state word itself
      } else {
        const uint64_t* k = T::key_words(bucket, cp.slot);
        match = true;
#pragma unroll
        for (int w = 0; w < T::kKeyWords; ++w) match &= (line ? __ldcg(k + w) : k[w]) == mine.key[w];
      }
      if (!match) continue;
      ++matches;
      const uint64_t rank = format::copy_rank(clevel, cb, cp.slot);
      if (rank < best_rank)
        best_rank = rank, f_level = clevel, f_bucket = cb, f_slot = cp.slot, f_line = line, f_value = value_word;
    }
    if (!by_lane) found = matches > 0;
    if (matches > 1) defer = true;  // duplicates: the serial path removes them
    // The value word, unless it came with the state word (a key of one word, read through the mirror).
    constexpr bool kValueRead = T::Layout::kKeyIsState && A == Access::kMirror;
    if (found && !defer && !kValueRead && !by_lane)
      f_value = load_volatile(T::value_word(f_line ? f_line : t.bucket(f_level, f_bucket), f_slot));
    if (found && !defer) t.writes.cache.record(pos, f_level, f_bucket);
    if (!defer) {
      if (op == Op::kSearch || (found && op == Op::kInsert) || (!found && (op == Op::kUpdate || op == Op::kErase)))
        bv.status[i] = static_cast<uint8_t>(status_of(op, found));
      else if (!found && my_target < 0)
        defer = true;  // no free slot: the serial path hands it to the slow path
    }
  }
  if (t.writes.cache.counters) {  // BktCache's hit rate: one atomic per warp, not per lane
    const uint32_t looked = __ballot_sync(kFullMask, (simple >> lane & 1) && found && !defer);
    const uint32_t hit = __ballot_sync(kFullMask, (simple >> lane & 1) && found && !defer && f_line);
    if (lane == 0 && looked) atomicAdd(&t.writes.cache.counters->lookups, static_cast<unsigned long long>(__popc(looked)));
    if (lane == 0 && hit) atomicAdd(&t.writes.cache.counters->hits, static_cast<unsigned long long>(__popc(hit)));
  }
  const bool writes_new = (simple >> lane & 1) && !defer && !found && (op == Op::kInsert || op == Op::kUpsert);
  const bool writes_value = (simple >> lane & 1) && !defer && found && (op == Op::kUpdate || op == Op::kUpsert);
  const bool erases = (simple >> lane & 1) && !defer && found && op == Op::kErase;

  // New value words: inline values, or cells allocated for the warp at once and filled together
  // (with their checksums), then persisted.
  uint64_t word = 0;
  if (writes_new || writes_value) word = t.has_heap ? 0 : read_inline_value(bv.value(i), bv.value_width);
  if (t.has_heap) {
    word = allocate_cells_warp(t, ctx, __ballot_sync(kFullMask, writes_new || writes_value), lane);
    if ((writes_new || writes_value) && word == kNoCell) defer = true;
    const bool fills = (writes_new || writes_value) && word != kNoCell;
    const uint32_t filling = __ballot_sync(kFullMask, fills);
    warp_copy_lanes(filling, fills ? bv.value(i) : nullptr, fills ? t.cell(word) : nullptr, bv.value_width, lane, &t.writes);
    if (fills && t.value_checksums) t.writes.store(t.cell_checksum(word), t.checksum_of(bv.value(i), mine.hash[0]));
    // Fences only in warps that wrote: in YCSB A at 2^16 (host-mapped, complete cache) 39% of
    // batch_kernel's stalls were fences (H200, ncu), most warps of B ran three without a write,
    // and a fence costs a warp a round trip whatever it wrote. With the two below: B at 2^16
    // 181 -> 219 M ops/s of device time, A 70 -> 75, B at 2^20 490 -> 537 (two calls apart,
    // bench/results/2026-11-30-long-runs).
    if (filling) t.writes.barrier();
  }
  // Claims and new slots. With the mirror, an insert that finds its target slot taken by another
  // warp takes the next free slot of the same mirror word, if any, instead of deferring.
  const format::CandidatePosition tp = format::candidate_position(my_target < 0 ? 0 : my_target, T::L, T::S);
  const uint32_t t_level = t.bottom + tp.d;
  const uint64_t t_bucket = found_slots.target_bucket;
  int t_slot = tp.slot;
  bool claimed = false;
  if (writes_new && !defer) {
    LaneSlot<T> ls;
    ls.level = t_level, ls.bucket = t_bucket, ls.slot = t_slot;
    if constexpr (A == Access::kMirror) {
      const uint64_t first = t.tag_index(t_level, t_bucket, 0);
      const uint64_t taken = claim_free_tag(t, first + t_slot, found_slots.target_word, kTagAtClaim ? mine.tag : uint8_t{1});
      claimed = taken != ~uint64_t{0};
      if (claimed) t_slot = int(taken - first);
    } else {
      claimed = claim_slot<A>(t, ls);
    }
    if (!claimed) {
      defer = true;
      if (t.has_heap) release_cell(ctx, word);
    }
  }
  // Stores into the target's and the found bucket go to their BktCache lines, looked up once here
  // (the found one's in phase 2).
  std::byte* tb = claimed ? t.bucket(t_level, t_bucket) : nullptr;
  const uint64_t t_id = claimed && t.writes.cache.on ? t.writes.cache.bucket_id(t_level, t_bucket) : 0;
  std::byte* t_line = claimed ? t.writes.cache.cached(t_level, t_bucket) : nullptr;
  if (claimed) {
    if constexpr (!T::Layout::kKeyIsState) {
      uint64_t* k = T::key_words(tb, t_slot);
#pragma unroll
      for (int w = 0; w < T::kKeyWords; ++w) t.writes.store_in(k + w, mine.key[w], tb, t_id, t_line);
    }
    t.writes.store_in(T::value_word(tb, t_slot), word, tb, t_id, t_line);
    if (t.has_heap) t.writes.cache.put_value_bytes(t_line, t_slot, bv.value(i), bv.value_width);  // its reference after the commit barrier
    t.writes.cache.record(pos, t_level, t_bucket);
  }
  // Updates and erases of found copies.
  std::byte* fb = (writes_value || erases) && !defer ? t.bucket(f_level, f_bucket) : nullptr;
  const uint64_t f_id = fb && t.writes.cache.on ? t.writes.cache.bucket_id(f_level, f_bucket) : 0;
  if (writes_value && !defer) {
    t.writes.store_in(T::value_word(fb, f_slot), word, fb, f_id, f_line);
    if (t.has_heap) t.writes.cache.put_value_bytes(f_line, f_slot, bv.value(i), bv.value_width);
  }
  if (erases) t.writes.store_in(T::state_word(fb, f_slot), format::kSlotEmpty, fb, f_id, f_line);
  // Key and value words before the state word that publishes them: only a warp that claimed.
  if (__any_sync(kFullMask, claimed)) t.writes.publish_barrier(A == Access::kMirror);
  if (claimed) t.writes.store_in(T::state_word(tb, t_slot), mine.published, tb, t_id, t_line);
  // The durability point of a pool's commit writes (DESIGN.md section 3), in a warp that made any.
  // In GPU memory a fence after the publish orders it before what hands a slot to other warps: an
  // erase's tag clear, or a tag written after the publish.
  const bool committed = __any_sync(kFullMask, claimed || (writes_value && !defer) || erases);
  const bool commit_barrier = (t.writes.persistent && committed) || erases || (claimed && A == Access::kMirror && !kTagAtClaim);
  if (commit_barrier) t.writes.barrier();
  // The cached values' references, behind the barrier that also orders their bytes before them.
  if (t.has_heap && (claimed || (writes_value && !defer))) {
    if (!commit_barrier) __threadfence();
    if (claimed) t.writes.cache.put_value_ref(t_line, t_slot, word);
    else t.writes.cache.put_value_ref(f_line, f_slot, word);
  }
  if constexpr (A == Access::kMirror) {
    if (claimed && !kTagAtClaim) {
      unsigned shift;
      uint32_t* w = tag_word(t, t.tag_index(t_level, t_bucket, t_slot), &shift);
      atomicXor(w, uint32_t(1u ^ mine.tag) << shift);
    }
    if (erases) {
      unsigned shift;
      uint32_t* w = tag_word(t, t.tag_index(f_level, f_bucket, f_slot), &shift);
      atomicXor(w, uint32_t(mine.tag) << shift);
    }
  }
  if (t.has_heap && ((writes_value && !defer) || erases)) release_cell(ctx, f_value);
  if ((claimed || ((writes_value && !defer)) || erases) && (simple >> lane & 1)) bv.status[i] = static_cast<uint8_t>(OpStatus::kOk);
  long long delta = int(claimed) - int(erases);

  // Search results: inline values by each lane, heap cells copied by the warp together (and, with
  // value checksums, verified by each lane against its copy).
  if ((simple >> lane & 1) && op == Op::kSearch && found && !defer && bv.out(i) && !t.has_heap)
    write_inline_value(bv.out(i), f_value, bv.value_width);
  if (t.has_heap) {
    const bool copies = (simple >> lane & 1) && op == Op::kSearch && found && !defer && bv.out(i);
    // A hot value cached with its bucket (verified when it was loaded, or written from its source).
    const std::byte* cached_value =
        copies && f_line && t.writes.cache.value_bytes && __ldcg(&t.writes.cache.value_refs(f_line)[f_slot]) == f_value
            ? t.writes.cache.value_bytes_of(f_line, f_slot)
            : nullptr;
    warp_copy_lanes(__ballot_sync(kFullMask, copies), copies ? (cached_value ? cached_value : t.cell(f_value)) : nullptr,
                    copies ? bv.out(i) : nullptr, bv.value_width, lane, nullptr);
    if (t.value_checksums) {
      __syncwarp();
      if (copies && !cached_value && !value_verifies(t, f_value, bv.out(i), mine.hash[0]))
        bv.status[i] = static_cast<uint8_t>(OpStatus::kCorruptValue);
    }
  }

  // Runs of several operations and deferred ones: the serial warp-cooperative path, here or in
  // serial_kernel.
  const bool serial = (head && !single) || ((simple >> lane & 1) && defer);
  uint32_t serial_lanes = __ballot_sync(kFullMask, serial);
  if constexpr (kInlineSerial) {
    WarpOps<A, T> ops{t, ctx, bv, lane, delta};
    ops.skip_long_runs = true;
    ops.defer_commit = true;
    __shared__ typename WarpOps<A, T>::PendingWrite pending[256 / 32][WarpOps<A, T>::kMaxPending];
    ops.pending = pending[threadIdx.x / 32];
    while (serial_lanes) {
      const int leader = __ffs(serial_lanes) - 1;
      serial_lanes &= serial_lanes - 1;
      const size_t begin = __shfl_sync(kFullMask, pos, leader);
      size_t resume = begin;
      const RunResult r = ops.run(begin, run_end(bv, begin, lane), SlowPathFlags{}, &resume);
      if (r != RunResult::kDone && lane == 0) hand_to_slow_path(ctx, bv, resume, r);
    }
    ops.commit();
  } else if (serial_lanes) {
    unsigned long long first = 0;
    if (lane == __ffs(serial_lanes) - 1)
      first = atomicAdd(&ctx.counters->serial_runs, static_cast<unsigned long long>(__popc(serial_lanes)));
    first = __shfl_sync(kFullMask, first, __ffs(serial_lanes) - 1);
    if (serial) bv.serial[first + __popc(serial_lanes & ((1u << lane) - 1))] = static_cast<uint32_t>(pos);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) delta += __shfl_xor_sync(kFullMask, delta, o);
  if (lane == 0 && delta) atomicAdd(reinterpret_cast<unsigned long long*>(&ctx.counters->item_delta), static_cast<unsigned long long>(delta));
}

// The serial pass: the runs batch_kernel left (runs of several operations, and operations it
// deferred), a warp per run, through the warp-cooperative path. Launched with a fixed grid after
// batch_kernel, in stream order; warps take runs from a shared counter until none are left, so a
// long run (a Zipf-hot key's) holds one warp while the others go on. What needs a free slot or
// cell that this pass cannot find goes to the slow path.
template <Access A, class T>
__global__ void __launch_bounds__(256) serial_kernel(const __grid_constant__ T t, const __grid_constant__ BatchContext ctx,
                                                     const __grid_constant__ BatchView bv) {
  const int lane = threadIdx.x & 31;
  const unsigned long long runs = *reinterpret_cast<volatile unsigned long long*>(&ctx.counters->serial_runs);
  if (runs == 0) return;
  long long delta = 0;
  WarpOps<A, T> ops{t, ctx, bv, lane, delta};
  ops.skip_long_runs = true;
  ops.defer_commit = true;
  __shared__ typename WarpOps<A, T>::PendingWrite pending[256 / 32][WarpOps<A, T>::kMaxPending];
  ops.pending = pending[threadIdx.x / 32];
  for (;;) {
    unsigned long long k = 0;
    if (lane == 0) k = atomicAdd(&ctx.counters->serial_taken, 1ull);
    k = __shfl_sync(kFullMask, k, 0);
    if (k >= runs) break;
    const size_t begin = bv.serial[k];
    size_t resume = begin;
    const RunResult r = ops.run(begin, run_end(bv, begin, lane), SlowPathFlags{}, &resume);
    if (r != RunResult::kDone && lane == 0) hand_to_slow_path(ctx, bv, resume, r);
  }
  ops.commit();
  if (lane == 0 && delta) atomicAdd(reinterpret_cast<unsigned long long*>(&ctx.counters->item_delta), static_cast<unsigned long long>(delta));
}

// The long-run pass: the runs that cover a whole window of kLongRunWindow plan positions (Zipf-hot
// keys'), beside the batch and serial passes or after them (GpuEngine::launch_long_runs). The
// passes skip these runs; their keys are the runs' alone, and what the passes share, slots, cells
// and counters, they take atomically, as warps of one pass do.
//
// After the passes the run's length is on the batch's critical path: a block per window. (Beside
// them what counts is the SM time the pass takes from them, and a window's fixed costs, the probe,
// the look-back and the waits, cost more than the rounds they save: `whole_runs`, a block per run,
// as if each run were one window.) A run's first window also takes the run's positions before
// it, its last those after it. A block's warps each compose the transitions of a span of the
// window (warp 0 meanwhile probes the key); the block publishes the window's (LongWindow), then
// composes those of the run's windows before it (look_back), answers its positions and says it
// is done. Blocks take windows in order and publish before they wait, so every window a block
// waits for is held by a block that is running and does not wait for it. The run's last window
// waits until the others are done (their answers read the value's cached bytes, which the write
// replaces) and makes the run's one write, as WarpOps::group does (a failure hands the run to the
// slow path, whose rerun walks it with one warp and answers every operation again). A run whose
// prefix two keys share, or of a reserved key, is left to the last window's block, which regroups
// it by key and combines each key's part (walk_by_key), after the others are done. Transitions
// hold batch positions, not run positions (a chunk < 2^30).
inline constexpr int kLongRunWarps = 16;
static_assert(kLongRunWarps * 32 >= kLongRunWindow, "a thread per position of a window");

// One window's part of its run, published for the windows after it; valid when `ready` (or
// `done`) holds the launch's epoch, so the records need no clearing between batches.
struct LongWindow {
  Transition total;  // the window's positions' composed transition
  uint32_t ref;      // the operation whose key the window's keys were compared with
  uint32_t begin;    // the run's first position (a first window's)
  uint32_t differs;  // a key in the window other than ref's
  uint32_t ready;    // the epoch once the fields above are written
  uint32_t done;     // the epoch once the window's answers are written
};

// The run's windows before window `a`, composed in order, read by warp 0 of a's block 32 at a
// time (lane l: window hi - 1 - l); window w is the run's if its first sort key is the run's (the
// keys are sorted and a is the run's).
struct LookBack {
  Transition before = kIdentity;
  bool differs = false;
  uint32_t begin = 0;  // the run's first position
  size_t first = 0;    // the run's first window
};
template <class T>
__device__ LookBack look_back(const BatchView& bv, const LongWindow* windows, uint32_t epoch, size_t a, uint32_t sort_key,
                              const KeyProbe<T>& p, int lane) {
  LookBack lb;
  lb.first = a;
  for (size_t hi = a;; hi -= 32) {
    const size_t w = hi - 1 - lane;
    const bool in_run = hi > size_t(lane) && bv.sort_keys[w * kLongRunWindow] == sort_key;
    const uint32_t lanes = __ballot_sync(kFullMask, in_run);  // lanes 0 .. k - 1
    Transition x = kIdentity;
    bool other = false;
    uint32_t begin = 0;
    if (in_run) {
      const LongWindow& r = windows[w];
      while (load_volatile(&r.ready) != epoch) {
      }
      __threadfence();
      x = load_volatile(&r.total);
      begin = load_volatile(&r.begin);
      other = load_volatile(&r.differs) != 0;
      const uint64_t* k = bv.keys + size_t{load_volatile(&r.ref)} * T::kKeyWords;
#pragma unroll
      for (int i = 0; i < T::kKeyWords; ++i) other |= k[i] != p.key[i];
    }
    // Lane 0 composes lanes 0..31, the earlier windows in the higher lanes.
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const Transition earlier = __shfl_down_sync(kFullMask, x, o);
      if (lane + o < 32) x = compose(earlier, x);
    }
    lb.before = compose(__shfl_sync(kFullMask, x, 0), lb.before);
    lb.differs |= __any_sync(kFullMask, other);
    const int k = __popc(lanes);
    if (k) lb.begin = __shfl_sync(kFullMask, begin, k - 1), lb.first = hi - k;
    if (lanes != kFullMask) return lb;
  }
}

// WarpOps::regroup with a block of long_run_kernel: each thread takes a contiguous share of
// [begin, end); `warp_matches` is shared memory for a count per warp. Every thread calls it and
// gets the end of p's part.
template <class T>
__device__ size_t block_regroup(const BatchView& bv, const KeyProbe<T>& p, size_t begin, size_t end, uint32_t* warp_matches) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  const size_t share = (end - begin + blockDim.x - 1) / blockDim.x;
  const size_t from = min(end, begin + threadIdx.x * share), to = min(end, from + share);
  uint32_t mine = 0;
#pragma unroll 8
  for (size_t pos = from; pos < to; ++pos) mine += has_key(bv, pos, p);
  const uint32_t up_to = warp_inclusive_sum(mine, lane);
  if (lane == 31) warp_matches[warp] = up_to;
  __syncthreads();
  size_t before = up_to - mine, matches = 0;
  for (int w = 0; w < kLongRunWarps; ++w) {
    if (w < warp) before += warp_matches[w];
    matches += warp_matches[w];
  }
  if (matches < end - begin) {
    regroup_share(bv, p, begin, from, to, before, matches);
    __syncthreads();
    for (size_t pos = begin + threadIdx.x; pos < end; pos += blockDim.x) bv.perm[pos] = bv.regroup_scratch[pos];
  }
  __syncthreads();  // the permutation is whole again, and warp_matches free
  return begin + matches;
}

// A long run of several keys (or of a reserved key), with the whole block: regrouped by key, and
// each key's part combined as the windows combine a run of one key (warp 0 reads the key's state
// while every warp composes its share's transitions, each warp answers its share, warp 0 makes the
// one write); a part shorter than kLongRunBeside, or of a reserved key, by warp 0 as WarpOps::group
// does. A part that cannot complete leaves the rest of the run to the slow path, from its first
// position. The shared arguments are the kernel's.
template <Access A, class T>
__device__ void walk_by_key(WarpOps<A, T>& ops, const BatchContext& ctx, const BatchView& bv, size_t begin, size_t end,
                            uint32_t* warp_matches, Transition* totals, bool& present, uint64_t& stored,
                            const std::byte*& cached_value, int& part_result) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  for (size_t s = begin; s < end;) {
    KeyProbe<T> q;
    make_probe(ops.t, bv.keys + size_t{bv.op_index(s)} * T::kKeyWords, q);
    const size_t e = block_regroup(bv, q, s, end, warp_matches);
    if (e - s < kLongRunBeside || WarpOps<A, T>::reserved(q)) {
      if (warp == 0) {
        const RunResult r = ops.group(q, s, e, SlowPathFlags{});
        if (lane == 0) part_result = static_cast<int>(r);
      }
    } else {
      const size_t per_warp = ((e - s + 31) / 32 + kLongRunWarps - 1) / kLongRunWarps * 32;
      const size_t from = min(e, s + warp * per_warp), to = min(e, from + per_warp);
      typename WarpOps<A, T>::RunStart start{};
      if (warp == 0) {
        start = ops.start_run(q, e - s);
        if (lane == 0) present = start.present, stored = start.stored, cached_value = start.cached_value;
      }
      bool other = false;
      const Transition span = ops.span_transition(0, from, to, q, &other);
      if (lane == 0) totals[warp] = span;
      __syncthreads();
      KeyState carry{present, kFromTable};
      for (int w = 0; w < warp; ++w) carry = apply(totals[w], carry);
      ops.answer_span(0, from, to, carry, stored, cached_value, q.hash[0]);
      __syncthreads();  // every answer has read the value the write replaces
      if (warp == 0) {
        Transition all = kIdentity;
        for (int w = 0; w < kLongRunWarps; ++w) all = compose(all, totals[w]);
        const RunResult r = ops.finish_run(q, start, apply(all, KeyState{start.present, kFromTable}), 0, e, SlowPathFlags{});
        if (lane == 0) part_result = static_cast<int>(r);
      }
    }
    __syncthreads();
    const RunResult r = static_cast<RunResult>(part_result);
    __syncthreads();  // part_result is read before the next part writes it
    if (r != RunResult::kDone) {
      if (threadIdx.x == 0) hand_to_slow_path(ctx, bv, s, r);
      return;
    }
    s = e;
  }
}

// One block an SM: 128 registers hold span_transition's four rounds (capped at 64 they spilled
// 650 bytes).
template <Access A, class T>
__global__ void __launch_bounds__(kLongRunWarps * 32, 1)
    long_run_kernel(const __grid_constant__ T t, const __grid_constant__ BatchContext ctx,
                    const __grid_constant__ BatchView bv, LongWindow* windows, uint32_t epoch, bool whole_runs) {
  constexpr size_t P = kLongRunWindow;
  if (*reinterpret_cast<volatile unsigned long long*>(&ctx.counters->long_windows) == 0) return;
  __shared__ unsigned long long taken;
  __shared__ Transition totals[kLongRunWarps], before;
  __shared__ bool present, walk;
  __shared__ uint64_t stored;
  __shared__ const std::byte* cached_value;
  __shared__ uint32_t run_begin;
  __shared__ unsigned long long first_window;
  __shared__ uint32_t warp_matches[kLongRunWarps];
  __shared__ int part_result;
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  long long delta = 0;
  WarpOps<A, T> ops{t, ctx, bv, lane, delta};
  for (;;) {
    __syncthreads();  // every thread has read the shared state of the block's last window
    if (threadIdx.x == 0) taken = atomicAdd(&ctx.counters->long_windows_taken, 1ull);
    __syncthreads();
    const size_t a = taken, w0 = a * P;
    if (w0 + P > bv.n) break;
    const uint32_t sort_key = bv.sort_keys[w0];
    if (bv.sort_keys[w0 + P - 1] != sort_key) continue;  // not wholly one run's
    const bool first = a == 0 || bv.sort_keys[w0 - P] != sort_key;
    if (whole_runs && !first) continue;  // the run's first window's block walks it
    // The block's last window: this one, or with whole_runs the run's (a thread per window after
    // it; those in the run come first, the keys being sorted).
    size_t end_window = a;
    for (int more = whole_runs; more;) {
      const size_t w = end_window + 1 + threadIdx.x;
      more = __syncthreads_count((w + 1) * P <= bv.n && bv.sort_keys[w * P + P - 1] == sort_key);
      end_window += more;
      if (more < kLongRunWarps * 32) more = 0;
    }
    const size_t after = (end_window + 1) * P;  // the window after the block's last
    const bool last = after + P > bv.n || bv.sort_keys[after + P - 1] != sort_key;
    // A thread per position of the window before (first) and after (last): which are the run's.
    const bool head = first && threadIdx.x + 1 < P && threadIdx.x < w0 && bv.sort_keys[w0 - 1 - threadIdx.x] == sort_key;
    const bool tail = last && threadIdx.x < P && after + threadIdx.x < bv.n && bv.sort_keys[after + threadIdx.x] == sort_key;
    const size_t from = w0 - __syncthreads_count(head), to = after + __syncthreads_count(tail);
    if (whole_runs && !is_long_run(from, to, /*beside=*/true)) continue;  // the batch kernel's
    const uint32_t ref = bv.op_index(w0);
    KeyProbe<T> p;
    make_probe(t, bv.keys + size_t{ref} * T::kKeyWords, p);
    const bool reserved = WarpOps<A, T>::reserved(p);
    const size_t rounds_per_warp = ((to - from + 31) / 32 + kLongRunWarps - 1) / kLongRunWarps;
    const size_t span_begin = from + warp * rounds_per_warp * 32;
    const size_t span_from = span_begin < to ? span_begin : to;
    const size_t span_to = span_from + rounds_per_warp * 32 < to ? span_from + rounds_per_warp * 32 : to;
    typename WarpOps<A, T>::RunStart start{};
    if (warp == 0 && !reserved) {
      start = ops.start_run(p, to - from, /*writer=*/last);
      if (lane == 0) present = start.present, stored = start.stored, cached_value = start.cached_value;
    }
    bool differs = false;
    const Transition span = ops.span_transition(0, span_from, span_to, p, &differs);
    if (lane == 0) totals[warp] = span;
    const bool window_differs = __syncthreads_or(differs);
    Transition total = kIdentity;
    for (int w = 0; w < kLongRunWarps; ++w) total = compose(total, totals[w]);
    if (warp == 0) {
      if (lane == 0) {
        LongWindow& r = windows[a];
        r.total = total;
        r.ref = ref;
        r.begin = static_cast<uint32_t>(from);
        r.differs = window_differs;
        __threadfence();
        store_volatile(&r.ready, epoch);
      }
      LookBack lb;
      lb.begin = static_cast<uint32_t>(from);
      lb.first = a;
      if (!first) lb = look_back(bv, windows, epoch, a, sort_key, p, lane);
      if (lane == 0) {
        before = lb.before;
        run_begin = lb.begin;
        first_window = lb.first;
        walk = reserved || window_differs || lb.differs;
      }
    }
    __syncthreads();
    if (!walk) {
      KeyState carry = apply(before, KeyState{present, kFromTable});
      for (int w = 0; w < warp; ++w) carry = apply(totals[w], carry);
      ops.answer_span(0, span_from, span_to, carry, stored, cached_value, p.hash[0]);
    }
    __syncthreads();  // every answer is written before the window is done
    if (threadIdx.x == 0) {
      __threadfence();
      store_volatile(&windows[a].done, epoch);
    }
    if (!last) continue;
    if (warp == 0) {
      for (size_t w = first_window + lane; w < a; w += 32)
        while (load_volatile(&windows[w].done) != epoch) {
        }
      __syncwarp();
      __threadfence();
    }
    if (walk) {  // the same in every thread of the block
      __syncthreads();  // warp 0 saw the run's other windows done
      walk_by_key(ops, ctx, bv, run_begin, to, warp_matches, totals, present, stored, cached_value, part_result);
      continue;
    }
    if (warp != 0) continue;
    const KeyState final_state = apply(compose(before, total), KeyState{start.present, kFromTable});
    const RunResult r = ops.finish_run(p, start, final_state, 0, to, SlowPathFlags{});
    if (r != RunResult::kDone && lane == 0) hand_to_slow_path(ctx, bv, run_begin, r);
  }
  if (lane == 0 && delta) atomicAdd(reinterpret_cast<unsigned long long*>(&ctx.counters->item_delta), static_cast<unsigned long long>(delta));
}

}  // namespace gphash::engine::gpu

namespace gphash::engine::gpu {

// A rehashed item's own bucket at the new top level: the child of its old bucket for the hash that
// put it there, as the CPU engine's stream_bottom places it. Claims the bucket's first free slot in
// the mirror and fills it; false when the bucket is full, which a healthy table never has (the new
// level starts empty, and at most S items of one old bucket share its 2^L children). Taken in
// thread order, these writes reach the new level in address order, where the least-loaded rule
// sent about half the items to their other hash's bucket, anywhere in it: a host-mapped level's
// random writes are bound by translating its pages (DESIGN.md section 2).
template <class T>
__device__ bool fill_own_bucket(const T& upper, const KeyProbe<T>& mine, uint32_t old_level, uint64_t old_bucket,
                                uint64_t value) {
  static_assert(T::S % 4 == 0, "a bucket's mirror tags are whole 32-bit words");
  const uint32_t top = upper.bottom + T::L - 1;
  uint64_t hash = mine.hash[0];
#pragma unroll
  for (int x = T::H - 1; x > 0; --x)
    if (format::bucket_at(mine.hash[x], old_level) == old_bucket) hash = mine.hash[x];
  if (format::bucket_at(mine.hash[0], old_level) == old_bucket) hash = mine.hash[0];
  const uint64_t b = format::bucket_at(hash, top);
  const uint64_t first = upper.tag_index(top, b, 0);
  for (int w = 0; w < T::S / 4; ++w) {
    unsigned shift;
    const uint32_t word = load_volatile(tag_word(upper, first + 4 * w, &shift));
    const uint64_t at = claim_free_tag(upper, first + 4 * w, word, 1);
    if (at == ~uint64_t{0}) continue;
    link_slot<Access::kMirror>(upper, top, b, static_cast<int>(at - first), at, mine.key, mine.published, mine.tag, value);
    return true;
  }
  return false;
}

// Resize with the tag mirror: every item of the old bottom level moves into the levels above it.
// `upper` is the table seen from one level up, its mirror already built (the new top level's
// tags are all empty). Items go to their own bucket at the new top level (fill_own_bucket); any
// left (a damaged table) are pipelined like batch_kernel: the warp probes 8 items' candidates at a
// time, then every lane claims and fills its item's new slot. Placed items are cleared below. Only
// for a fresh resize (its new top level empty: no copy of an item can be above it yet); a resumed
// one goes through rehash_kernel, which looks for copies first.
template <class T>
__global__ void __launch_bounds__(256) rehash_mirror_kernel(const __grid_constant__ T upper, uint32_t old_level, ScanCounters* out) {
  const int lane = threadIdx.x & 31;
  const uint64_t slot_index = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const uint64_t slots = format::level_buckets(old_level) * T::S;
  std::byte* old_bucket = nullptr;
  int old_slot = 0;
  uint64_t state = 0;
  if (slot_index < slots) {
    old_bucket = upper.level[old_level] + (slot_index / T::S) * T::Layout::kBytes;
    old_slot = static_cast<int>(slot_index % T::S);
    state = load_volatile(T::state_word(old_bucket, old_slot));
  }
  const bool item = format::is_published(state);
  KeyProbe<T> mine{};
  uint64_t value = 0;
  bool claimed = false;  // the item is above
  if (item) {
    uint64_t key[T::kKeyWords];
#pragma unroll
    for (int w = 0; w < T::kKeyWords; ++w)
      key[w] = T::Layout::kKeyIsState ? format::decode_key_word(state) : T::key_words(old_bucket, old_slot)[w];
    make_probe(upper, key, mine);
    value = load_volatile(T::value_word(old_bucket, old_slot));
    claimed = fill_own_bucket(upper, mine, old_level, slot_index / T::S, value);
  }
  const bool pending = item && !claimed;
  const uint32_t items = __ballot_sync(kFullMask, pending);
  if (!items) {
    if (item) {
      upper.writes.store(T::state_word(old_bucket, old_slot), format::kSlotEmpty);
      upper.writes.barrier();
    }
    return;
  }
  const Candidates found_slots = scan_candidates<Access::kMirror>(upper, mine, items, true, lane);
  const uint32_t my_candidates = found_slots.lanes;
  const int my_target = found_slots.target;
  const uint64_t my_target_bucket = found_slots.target_bucket;
  // Already above? (Never in a fresh resize; checked as rehash_kernel does, so none is copied twice.)
  bool copied = false;
  if (pending) {
    for (uint32_t c = my_candidates; c && !copied; c &= c - 1) {
      const int cl = __ffs(c) - 1;
      const format::CandidatePosition cp = format::candidate_position(cl, T::L, T::S);
      const int cs = cp.slot, cd = cp.d, cj = cp.j;
      std::byte* bucket = upper.bucket(upper.bottom + cd, format::bucket_at(pick(mine.hash, cj), upper.bottom + cd));
      if constexpr (T::Layout::kKeyIsState) {
        copied = load_volatile(T::state_word(bucket, cs)) == mine.published;
      } else {
        bool eq = true;
#pragma unroll
        for (int w = 0; w < T::kKeyWords; ++w) eq &= T::key_words(bucket, cs)[w] == mine.key[w];
        copied = eq;
      }
    }
  }
  const uint32_t t_level = upper.bottom + format::candidate_position(my_target < 0 ? 0 : my_target, T::L, T::S).d;
  const int t_slot = my_target % T::S;
  if (pending && !copied && my_target >= 0) {
    LaneSlot<T> ls;
    ls.tag_index = upper.tag_index(t_level, my_target_bucket, t_slot);
    claimed = claim_slot<Access::kMirror>(upper, ls);
    if (claimed)
      link_slot<Access::kMirror>(upper, t_level, my_target_bucket, t_slot, ls.tag_index, mine.key, mine.published, mine.tag,
                                 value);
  }
  // What the pipelined pass could not place goes one at a time through the warp path.
  uint32_t work = __ballot_sync(kFullMask, pending && !copied && !claimed);
  while (work) {
    const int src = __ffs(work) - 1;
    work &= work - 1;
    KeyProbe<T> p;
#pragma unroll
    for (int w = 0; w < T::kKeyWords; ++w) p.key[w] = __shfl_sync(kFullMask, mine.key[w], src);
#pragma unroll
    for (int x = 0; x < T::H; ++x) p.hash[x] = __shfl_sync(kFullMask, mine.hash[x], src);
    p.published = __shfl_sync(kFullMask, mine.published, src);
    p.tag = static_cast<uint8_t>(__shfl_sync(kFullMask, uint32_t(mine.tag), src));
    const uint64_t v = __shfl_sync(kFullMask, value, src);
    LaneSlot<T> ls = lane_slot(upper, p, lane);
    bool placed = false;
    for (;;) {
      const WarpProbe r = warp_probe<Access::kMirror>(upper, p, ls, lane);
      if (r.found) {
        placed = true;
        break;
      }
      if (r.target < 0) break;
      const bool won = lane == r.target && claim_slot<Access::kMirror>(upper, ls);
      if (won) link_slot<Access::kMirror>(upper, ls.level, ls.bucket, ls.slot, ls.tag_index, p.key, p.published, p.tag, v);
      if (__any_sync(kFullMask, won)) {
        placed = true;
        break;
      }
    }
    if (lane == src) claimed = placed;
    if (!placed && lane == 0) atomicAdd(&out->corrupt, 1ull);
  }
  if (item && (copied || claimed)) {
    upper.writes.store(T::state_word(old_bucket, old_slot), format::kSlotEmpty);
    upper.writes.barrier();
  }
}

}  // namespace gphash::engine::gpu
