// BktCache's loading phases and its host side (the lines themselves: bucket_cache_view.cuh).
//
// Two sets of members (bucket id -> line, and the list of ids) over one array of 2K lines for K
// members: kernels read and write the current set while a loading phase builds the other on the
// cache's own stream, concurrently with batches. A bucket in both sets keeps its line (batches keep
// it current, and it is never copied); a new member gets a line the current set does not use, so
// nothing that readers use is ever replaced in place. A phase, all on the device (the host never
// waits for it):
//   score      each bucket's score from the access statistics (LFU: sampled counts, halved every
//              phase, plus kKeepBonus for a bucket cached now; LRU: the epoch of the last sampled
//              access, ties to the bucket cached now; random: a hash, among buckets accessed since
//              the last phase);
//   select     the K best scores by a two-pass radix select over the scores' high and low 16 bits;
//   free       the lines the current set does not use;
//   fill       each new member takes a free line, which a warp fills from the pool with the bucket
//              and its slots' heap values (verified against their checksums when the pool keeps
//              them). One block per SM: the fill is bound by its host reads, and with a block per
//              8 lines it took the SMs from the batches beside it (H200, YCSB B with LFU 20%: 97 ->
//              123 M ops/s with the narrow fill).
// The sweeps over every bucket id (score, select, free) run on a quarter of the SMs, for the same
// reason: with a block per 256 ids (12 K blocks) they filled the GPU, and the 2^16-op batches
// beside a phase ran at 57-59% of the others' rate; on 33 blocks (or 8, 16, 66) at 71-74%, and at
// 2^20 C went 245 -> 265 M ops/s (H200, YCSB C, 16.8 M items, LFU 20%). Giving the batches' stream
// a higher CUDA priority did not help (61%).
// The switch comes at the start of the first batch after the phase is done, in that batch's
// stream: new members written since the phase began (the `written` bits) are filled again from
// the pool; then kernels use the new set. A resize drops everything (bucket ids change).
// A complete cache (fraction 1, or a budget that holds it) has a line for every bucket:
// one set of lines, one phase that takes every bucket (no scores), then no more phases and no
// statistics, since membership cannot change; every write keeps its line current, so after the
// first switch every operation on an existing key is served from GPU memory.
#pragma once

#include <cub/block/block_scan.cuh>

#include <algorithm>
#include <cstdint>

#include "engines/gpu/cuda_util.h"
#include "engines/gpu/device_table.cuh"
#include "gphash/config.h"

namespace gphash::engine::gpu {

inline constexpr uint32_t kScoreBins = 1u << 16;

struct CacheSelection {
  uint32_t all;          // fewer candidates than lines: every bucket with a score is taken
  uint32_t hi_bin;       // pass 1: the high 16 bits of the K-th best score
  uint32_t need_hi;      // ... and how many lines go to that bin
  uint32_t threshold;    // pass 2: the K-th best score
  uint32_t need_equal;   // ... and how many lines go to buckets with exactly that score
  uint32_t equal_taken;
  uint32_t lines;        // members chosen
  uint32_t free_lines;   // lines the current set does not use, listed for the new members
  uint32_t free_taken;
};

inline constexpr int32_t kNewMember = -2;  // index entry of a chosen bucket that has no line yet

__device__ __forceinline__ uint32_t mix32(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

// The phase's kernels count hundreds of thousands of buckets into a few counters: LFU's and LRU's
// scores fall in a handful of histogram bins, and every chosen bucket and free line takes the next
// entry of one list. With one atomic per lane on one address the batches beside a phase ran at
// 36-40% of the others' rate at 2^16 whether the fill read 114 K or 1.8 M lines from the pool
// (H200, YCSB C, 16.8 M items, LFU 20%), so a warp makes one atomic per counter it touches.
// Callers run every lane of the warp (loops over warp-aligned ranges).
__device__ __forceinline__ uint32_t warp_claim(uint32_t* counter, bool want) {  // want: this lane's entry
  const unsigned ballot = __ballot_sync(~0u, want);
  const int lane = threadIdx.x & 31, leader = ballot ? __ffs(ballot) - 1 : 0;
  uint32_t base = 0;
  if (ballot && lane == leader) base = atomicAdd(counter, static_cast<uint32_t>(__popc(ballot)));
  return __shfl_sync(~0u, base, leader) + __popc(ballot & ((1u << lane) - 1));
}
__device__ __forceinline__ void warp_count(uint32_t* hist, uint32_t bin, bool want) {
  const unsigned ballot = __ballot_sync(~0u, want);
  if (!want) return;
  const unsigned peers = __match_any_sync(ballot, bin);
  if (static_cast<int>(threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(&hist[bin], static_cast<uint32_t>(__popc(peers)));
}
// The first index of this warp's lanes in a grid-stride loop, and the stride (both warp-uniform).
__device__ __forceinline__ uint64_t warp_base() { return uint64_t{blockIdx.x} * blockDim.x + (threadIdx.x & ~31u); }
__device__ __forceinline__ uint64_t grid_stride() { return uint64_t{gridDim.x} * blockDim.x; }

// `cached`: the current set's index (null before the first phase): its members keep their lines
// unless clearly beaten (kKeepBonus).
__global__ inline void cache_score_kernel(uint32_t* stats, uint64_t ids, uint8_t policy, uint32_t salt, const int32_t* cached,
                                          uint32_t* scores, uint32_t* hist) {
  constexpr uint32_t keep_bonus = BucketCacheView::kKeepBonus;
  for (uint64_t base = warp_base(); base < ids; base += grid_stride()) {
    const uint64_t id = base + (threadIdx.x & 31);
    uint32_t s = 0;
    if (id < ids) {
      s = stats[id];
      const bool member = cached && cached[id] >= 0;
      if (policy == static_cast<uint8_t>(CachePolicyCode::kLfu)) {
        stats[id] = s >> 1;  // aging: what was hot long ago fades
        if (member) s = s > ~0u - keep_bonus ? ~0u : s + keep_bonus;
      } else if (policy == static_cast<uint8_t>(CachePolicyCode::kLru)) {
        if (s) s = (s < 0x7FFFFFFFu ? s : 0x7FFFFFFFu) << 1 | member;
      } else if (policy == static_cast<uint8_t>(CachePolicyCode::kRandom)) {
        stats[id] = 0;
        s = s ? (mix32(id * 0x9e3779b97f4a7c15ull + salt) | 1u) : 0;
      }
      scores[id] = s;
    }
    warp_count(hist, s >> 16, s != 0);
  }
}

// One block of 1024 threads: the bin, counted from the top, where the running count reaches the
// lines wanted (pass 1: K; pass 2: the lines left for pass 1's bin).
__global__ inline void __launch_bounds__(1024) cache_threshold_kernel(const uint32_t* hist, uint32_t k, CacheSelection* sel,
                                                               bool second) {
  using Scan = cub::BlockScan<uint32_t, 1024>;
  __shared__ typename Scan::TempStorage temp;
  if (second && sel->all) return;
  const uint32_t want = second ? sel->need_hi : k;
  constexpr uint32_t kPer = kScoreBins / 1024;
  const uint32_t first = threadIdx.x * kPer;  // distance from the top bin
  uint32_t sum = 0;
  for (uint32_t x = 0; x < kPer; ++x) sum += hist[kScoreBins - 1 - (first + x)];
  uint32_t before = 0, total = 0;
  Scan(temp).ExclusiveSum(sum, before, total);
  if (!second && threadIdx.x == 0) sel->all = total <= want;
  if (total <= want && !second) return;
  if (before < want && before + sum >= want) {
    uint32_t acc = before;
    for (uint32_t x = 0; x < kPer; ++x) {
      const uint32_t bin = kScoreBins - 1 - (first + x);
      if (acc + hist[bin] >= want) {
        if (second) {
          sel->threshold = (sel->hi_bin << 16) | bin;
          sel->need_equal = want - acc;
        } else {
          sel->hi_bin = bin;
          sel->need_hi = want - acc;
        }
        break;
      }
      acc += hist[bin];
    }
  }
}

__global__ inline void cache_hist_low_kernel(const uint32_t* scores, uint64_t ids, const CacheSelection* sel, uint32_t* hist) {
  if (sel->all) return;
  for (uint64_t base = warp_base(); base < ids; base += grid_stride()) {
    const uint64_t id = base + (threadIdx.x & 31);
    const uint32_t s = id < ids ? scores[id] : 0;
    warp_count(hist, s & 0xFFFF, s && (s >> 16) == sel->hi_bin);
  }
}

// The new set's index: a member of the current set keeps its line, a new member is marked
// kNewMember (the fill gives it a free line); `members` lists the chosen ids.
__global__ inline void cache_select_kernel(const uint32_t* scores, uint64_t ids, CacheSelection* sel, const int32_t* cached,
                                           int32_t* index, uint32_t* members) {
  for (uint64_t base = warp_base(); base < ids; base += grid_stride()) {
    const uint64_t id = base + (threadIdx.x & 31);
    const uint32_t s = id < ids ? scores[id] : 0;
    bool take = s && (sel->all || s > sel->threshold);
    const bool tie = s && !take && s == sel->threshold;
    const uint32_t rank = warp_claim(&sel->equal_taken, tie);
    if (tie) take = rank < sel->need_equal;
    const uint32_t entry = warp_claim(&sel->lines, take);
    if (take) members[entry] = static_cast<uint32_t>(id);
    if (id < ids) index[id] = !take ? -1 : cached && cached[id] >= 0 ? cached[id] : kNewMember;
  }
}

// The lines of the pool's array that the current set's index does not use (`used`: zeroed, a byte
// per line), listed in `free_list`.
__global__ inline void cache_mark_used_kernel(const int32_t* cached, uint64_t ids, uint8_t* used) {
  for (uint64_t id = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; id < ids; id += uint64_t{gridDim.x} * blockDim.x)
    if (cached[id] >= 0) used[cached[id]] = 1;
}
__global__ inline void cache_list_free_kernel(const uint8_t* used, uint32_t lines, CacheSelection* sel, uint32_t* free_list) {
  for (uint64_t base = warp_base(); base < lines; base += grid_stride()) {
    const uint32_t l = static_cast<uint32_t>(base + (threadIdx.x & 31));
    const bool free = l < lines && !used[l];
    const uint32_t entry = warp_claim(&sel->free_lines, free);
    if (free) free_list[entry] = l;
  }
}

// A complete cache's selection: bucket id k is line k.
__global__ inline void cache_take_all_kernel(uint64_t ids, CacheSelection* sel, int32_t* index, uint32_t* members) {
  for (uint64_t id = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; id < ids; id += uint64_t{gridDim.x} * blockDim.x) {
    index[id] = static_cast<int32_t>(id);
    members[id] = static_cast<uint32_t>(id);
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) sel->all = 1, sel->lines = static_cast<uint32_t>(ids);
}

// A warp fills line `line` of `to` with bucket `id` from the pool: the bucket's bytes, then its
// slots' heap values.
template <class T>
__device__ void fill_line(const T& t, const BucketCacheView& to, int32_t line, uint64_t id, int lane) {
  std::byte* dst = to.line(line);
  uint32_t level;
  uint64_t b;
  to.bucket_of(id, &level, &b);
  const std::byte* bucket = t.bucket(level, b);
  for (uint32_t k = lane * 16; k < T::Layout::kBytes; k += 32 * 16)
    *reinterpret_cast<uint4*>(dst + k) = __ldcg(reinterpret_cast<const uint4*>(bucket + k));
  if (!to.value_bytes || lane >= T::S) return;
  // Lane s: slot s's value, if it is published and its cell verifies.
  const uint64_t state = load_volatile(T::state_word(const_cast<std::byte*>(bucket), lane));
  uint64_t ref = kNoValue;
  if (format::is_published(state)) {
    const uint64_t cell = load_volatile(T::value_word(const_cast<std::byte*>(bucket), lane));
    if (cell < t.heap.capacity && t.heap.chunk[t.heap.geometry.chunk_of(cell)]) {
      std::byte* out = to.value_bytes_of(dst, lane);
      lane_copy(out, t.cell(cell), t.value_width);
      bool good = true;
      if (t.value_checksums) {
        uint64_t key[T::kKeyWords];
#pragma unroll
        for (int w = 0; w < T::kKeyWords; ++w)
          key[w] = T::Layout::kKeyIsState ? format::decode_key_word(state)
                                          : T::key_words(const_cast<std::byte*>(bucket), lane)[w];
        const uint64_t hash0 = format::xxh64_words<T::kKeyWords>(key, t.seed[0]);
        good = *t.cell_checksum(cell) == t.checksum_of(out, hash0);
      }
      if (good) ref = cell;
    }
  }
  to.value_refs(dst)[lane] = ref;
}

// Members in groups of 32, a lane each: a new member takes a free line; then the warp fills, one
// after the other, the lines of those that need it: every new member (`index` says kNewMember)
// during a phase; at the switch (`written` set), the new members written since it began.
template <class T>
__device__ void fill_members(const T& t, const BucketCacheView& to, int32_t* index, const int32_t* cached,
                             const uint32_t* members, CacheSelection* sel, const uint32_t* free_list, const uint32_t* written,
                             uint32_t max_members) {
  const int lane = threadIdx.x & 31;
  const uint32_t n = min(max_members, sel->lines);
  for (uint64_t base = warp_base(); base < n; base += grid_stride()) {
    const uint32_t m = static_cast<uint32_t>(base + lane);
    uint32_t id = 0;
    int32_t line = -1;
    if (m < n) id = members[m], line = index[id];
    const bool fresh = line == kNewMember;
    // Enough free lines: two a member, of which the current set uses at most one.
    const uint32_t entry = warp_claim(&sel->free_taken, fresh);
    if (fresh) index[id] = line = static_cast<int32_t>(free_list[entry]);
    bool fill = m < n && !(cached && cached[id] == line);  // a member of both sets keeps its line, which writes keep
    if (written) fill = fill && (written[id / 32] >> (id % 32) & 1);
    unsigned todo = __ballot_sync(~0u, fill);
    if (todo && lane == 0 && to.counters) atomicAdd(&to.counters->lines_loaded, static_cast<unsigned long long>(__popc(todo)));
    for (; todo; todo &= todo - 1) {
      const int k = __ffs(todo) - 1;
      fill_line(t, to, __shfl_sync(~0u, line, k), __shfl_sync(~0u, id, k), lane);
    }
  }
}

template <class T>
__global__ void __launch_bounds__(256) cache_fill_kernel(const __grid_constant__ T t, const __grid_constant__ BucketCacheView to,
                                                         int32_t* index, const int32_t* cached, const uint32_t* members,
                                                         CacheSelection* sel, const uint32_t* free_list, uint32_t max_members) {
  fill_members(t, to, index, cached, members, sel, free_list, nullptr, max_members);
}

// The switch, in the batch's stream (no batch runs now): new members written since the phase began
// are filled again from the pool.
template <class T>
__global__ void __launch_bounds__(256) cache_fixup_kernel(const __grid_constant__ T t, const __grid_constant__ BucketCacheView to,
                                                          int32_t* index, const int32_t* cached, const uint32_t* written,
                                                          const uint32_t* members, CacheSelection* sel, uint32_t max_members) {
  fill_members(t, to, index, cached, members, sel, nullptr, written, max_members);
}

// The engine's cache: options, memory, the phase state machine. Methods run with the engine's lock
// held, at batch boundaries (no batch in flight).
template <class T>
class BucketCache {
 public:
  // Off for a table in GPU memory (nothing to cache) and for kernels without the tag mirror.
  BucketCache(const CacheOptions& options, bool usable) : options_(options) {
    enabled_ = usable && options.policy != CachePolicy::kOff && options.fraction > 0;
    policy_ = options.policy == CachePolicy::kLru      ? CachePolicyCode::kLru
              : options.policy == CachePolicy::kRandom ? CachePolicyCode::kRandom
                                                       : CachePolicyCode::kLfu;
  }
  ~BucketCache() {
    if (load_stream_) cudaStreamSynchronize(load_stream_->get());
  }

  // At the start of a batch of `n` operations on `stream`: switches to freshly loaded lines, or
  // starts a loading phase, and hands kernels the current view (dt.writes.cache).
  void before_batch(T& dt, uint64_t n, cudaStream_t stream) {
    batch_in_phase_ = false;
    if (!enabled_) return;
    if (!ensure_memory(dt, stream)) {
      // ensure_memory released the lines (the table grew and no line, or no GPU memory, is left
      // for them): the batch must not see the view of the released ones.
      dt.writes.cache = BucketCacheView{};
      return;
    }
    if (loading_ && cudaEventQuery(loaded_->get()) == cudaSuccess) {
      cache_fixup_kernel<<<fill_blocks(), 256, 0, stream>>>(dt, view(dt, staging_, false), index_[staging_].get(),
                                                            current_index(), written_.get(), members_[staging_].get(),
                                                            selection_.get(), lines_max_);
      GPHASH_CUDA(cudaGetLastError());
      current_ = staging_;
      loading_ = false;
      ++phases_;
      batch_in_phase_ = true;  // the switch's copies are the phase's cost
    } else if (!loading_ && !(complete_ && current_ >= 0) && since_phase_ >= std::max<uint64_t>(options_.reload_operations, 1)) {
      start_phase(dt, stream);
    }
    batch_in_phase_ |= loading_;
    since_phase_ += n;
    ++epoch_;
    dt.writes.cache = view(dt, current_, loading_);
  }

  // The table's levels are about to change (resize): every line goes, and the statistics with them.
  void drop(T& dt) {
    if (!enabled_) return;
    if (load_stream_) GPHASH_CUDA(cudaStreamSynchronize(load_stream_->get()));
    loading_ = false;
    current_ = -1;
    ids_ = 0;
    dt.writes.cache = BucketCacheView{};
  }

  void report(EngineStats& s) const {
    if (!enabled_ || !counters_.get()) return;
    CacheCounters c{};
    GPHASH_CUDA(cudaMemcpy(&c, counters_.get(), sizeof c, cudaMemcpyDeviceToHost));
    s.cache_lines = current_ >= 0 ? lines_max_ : 0;
    s.cache_gpu_bytes = gpu_bytes_;
    s.cache_hits = c.hits;
    s.cache_lookups = c.lookups;
    s.cache_phases = phases_;
    s.cache_lines_loaded = c.lines_loaded;
    s.last_batch_cache_loading = batch_in_phase_;
  }

 private:
  // Members per set for the table's current size: the configured fraction of its buckets, or what
  // the GPU-memory budget holds (two lines per member, the index and member list of each set, the
  // statistics, the scores and the free-line lists). A complete cache needs one set, a line per
  // member, and neither statistics, scores nor free lines.
  bool ensure_memory(const T& dt, cudaStream_t stream) {
    const uint64_t ids = format::level_buckets(dt.bottom) * ((1u << T::L) - 1);
    if (ids == ids_) return lines_max_ > 0;
    ids_ = ids;
    current_ = -1;
    loading_ = false;
    value_bytes_ = dt.has_heap && options_.values ? (dt.value_width + 15) / 16 * 16 : 0;
    line_bytes_ = T::Layout::kBytes + (value_bytes_ ? T::S * (8 + value_bytes_) : 0);
    const uint64_t per_id = 2 * 4 + 4 + 4;  // two indexes, statistics, scores (+ a bit: written)
    const uint64_t fixed = ids * per_id + ids / 8 + 2 * kScoreBins * 4;
    // A budget sizes the cache by itself: complete if one set of lines fits, else as many lines as
    // two sets and the statistics leave room for. Without one, the fraction decides.
    uint64_t lines;
    if (options_.gpu_bytes) {
      complete_ = ids <= (uint64_t{1} << 30) && options_.gpu_bytes >= ids * (4 + 4 + line_bytes_) + ids / 8;
      lines = complete_ ? ids : options_.gpu_bytes > fixed ? (options_.gpu_bytes - fixed) / (2 * (line_bytes_ + 4 + 5)) : 0;
    } else {
      complete_ = options_.fraction >= 1.0 && ids <= (uint64_t{1} << 30);
      lines = complete_ ? ids : static_cast<uint64_t>(options_.fraction * static_cast<double>(ids));
    }
    lines = std::min<uint64_t>({lines, ids, uint64_t{1} << 30});
    lines_max_ = static_cast<uint32_t>(lines);
    // The first phase soon; a complete cache's at once (it is the only one).
    since_phase_ = std::max<uint64_t>(options_.reload_operations, 1) / (complete_ ? 1 : 2);
    const int sets = complete_ ? 1 : 2;
    release_lines();
    if (!lines_max_) return false;
    try {
      for (int k = 0; k < sets; ++k) {
        index_[k].resize(ids);
        members_[k].resize(lines_max_);
      }
      lines_.resize(size_t{lines_max_} * sets * line_bytes_);
      if (!complete_) {
        stats_.resize(ids);
        scores_.resize(ids);
        hist_.resize(2 * kScoreBins);
        used_.resize(size_t{lines_max_} * sets);
        free_list_.resize(size_t{lines_max_} * sets);
      }
      written_.resize((ids + 31) / 32);
      selection_.resize(1);
      if (!counters_.get()) {
        counters_.resize(1);
        GPHASH_CUDA(cudaMemsetAsync(counters_.get(), 0, sizeof(CacheCounters), stream));
      }
      if (!load_stream_) {
        load_stream_ = std::make_unique<Stream>();
        loaded_ = std::make_unique<Event>(false);
        phase_start_ = std::make_unique<Event>(false);
      }
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kNoSpace) throw;
      enabled_ = false;  // too little GPU memory: run without a cache rather than fail the batch
      release_lines();
      written_.release();
      return false;
    }
    if (!complete_) GPHASH_CUDA(cudaMemsetAsync(stats_.get(), 0, ids * 4, stream));  // in the batch's stream, before its kernels
    gpu_bytes_ = sets * (ids * 4 + uint64_t{lines_max_} * (line_bytes_ + 4)) + written_.size() * 4 +
                 (complete_ ? 0 : ids * 8 + hist_.size() * 4 + uint64_t{lines_max_} * 2 * 5);
    return true;
  }
  void release_lines() {
    for (int k = 0; k < 2; ++k) index_[k].release(), members_[k].release();
    lines_.release(), stats_.release(), scores_.release(), used_.release(), free_list_.release();
  }
  const int32_t* current_index() const { return current_ >= 0 ? index_[current_].get() : nullptr; }

  BucketCacheView view(const T& dt, int set, bool tracking) const {
    BucketCacheView v{};
    v.on = true;
    v.bucket_bytes = T::Layout::kBytes;
    v.slots = T::S;
    v.levels = T::L;
    v.bottom = dt.bottom;
    for (int k = 0; k < T::L; ++k) v.level_base[k] = dt.level[dt.bottom + k];
    v.value_offset = T::Layout::kValueOffset;
    v.value_stride = T::Layout::kValueStride;
    v.value_bytes = value_bytes_;
    v.line_bytes = line_bytes_;
    v.index = set >= 0 ? index_[set].get() : nullptr;
    v.lines = set >= 0 ? lines_.get() : nullptr;
    v.written = tracking ? written_.get() : nullptr;
    v.stats = complete_ ? nullptr : stats_.get();
    v.counters = counters_.get();
    v.epoch = epoch_;
    v.policy = static_cast<uint8_t>(policy_);
    return v;
  }

  // The phase's kernels run beside batches on few blocks (header comment): the fill on one per
  // SM, the sweeps over ids and lines on a quarter of the SMs.
  static unsigned sms() {
    int device = 0, count = 1;
    GPHASH_CUDA(cudaGetDevice(&device));
    GPHASH_CUDA(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
    return static_cast<unsigned>(count);
  }
  unsigned load_blocks() const { return std::min(sms(), fill_blocks()); }
  unsigned fill_blocks() const { return static_cast<unsigned>(std::min<uint64_t>((uint64_t{lines_max_} + 255) / 256, 4096)); }
  static unsigned sweep_blocks(uint64_t items) {
    return static_cast<unsigned>(std::min<uint64_t>((items + 255) / 256, std::max(1u, sms() / 4)));
  }
  unsigned id_blocks() const { return sweep_blocks(ids_); }
  unsigned line_blocks() const { return sweep_blocks(used_.size()); }

  void start_phase(const T& dt, cudaStream_t stream) {
    staging_ = current_ < 0 ? 0 : 1 - current_;
    const cudaStream_t load = load_stream_->get();
    // Writes from this batch on mark the buckets they touch; the phase starts after the marks are cleared.
    GPHASH_CUDA(cudaMemsetAsync(written_.get(), 0, written_.size() * 4, stream));
    GPHASH_CUDA(cudaEventRecord(phase_start_->get(), stream));
    GPHASH_CUDA(cudaStreamWaitEvent(load, phase_start_->get(), 0));
    GPHASH_CUDA(cudaMemsetAsync(selection_.get(), 0, sizeof(CacheSelection), load));
    if (complete_) {
      cache_take_all_kernel<<<id_blocks(), 256, 0, load>>>(ids_, selection_.get(), index_[staging_].get(),
                                                           members_[staging_].get());
    } else {
      GPHASH_CUDA(cudaMemsetAsync(hist_.get(), 0, hist_.size() * 4, load));
      cache_score_kernel<<<id_blocks(), 256, 0, load>>>(stats_.get(), ids_, static_cast<uint8_t>(policy_),
                                                        static_cast<uint32_t>(epoch_), current_index(), scores_.get(),
                                                        hist_.get());
      cache_threshold_kernel<<<1, 1024, 0, load>>>(hist_.get(), lines_max_, selection_.get(), false);
      cache_hist_low_kernel<<<id_blocks(), 256, 0, load>>>(scores_.get(), ids_, selection_.get(), hist_.get() + kScoreBins);
      cache_threshold_kernel<<<1, 1024, 0, load>>>(hist_.get() + kScoreBins, 0, selection_.get(), true);
      cache_select_kernel<<<id_blocks(), 256, 0, load>>>(scores_.get(), ids_, selection_.get(), current_index(),
                                                         index_[staging_].get(), members_[staging_].get());
      GPHASH_CUDA(cudaMemsetAsync(used_.get(), 0, used_.size(), load));
      if (current_ >= 0) cache_mark_used_kernel<<<id_blocks(), 256, 0, load>>>(current_index(), ids_, used_.get());
      cache_list_free_kernel<<<line_blocks(), 256, 0, load>>>(used_.get(), static_cast<uint32_t>(used_.size()),
                                                              selection_.get(), free_list_.get());
    }
    cache_fill_kernel<<<load_blocks(), 256, 0, load>>>(dt, view(dt, staging_, false), index_[staging_].get(),
                                                       current_index(), members_[staging_].get(), selection_.get(),
                                                       free_list_.get(), lines_max_);
    GPHASH_CUDA(cudaGetLastError());
    GPHASH_CUDA(cudaEventRecord(loaded_->get(), load));
    loading_ = true;
    since_phase_ = 0;
  }

  CacheOptions options_;
  bool enabled_ = false;
  bool complete_ = false;  // a line for every bucket (header comment)
  CachePolicyCode policy_ = CachePolicyCode::kLfu;
  uint64_t ids_ = 0;
  uint32_t lines_max_ = 0, line_bytes_ = 0, value_bytes_ = 0;
  uint64_t gpu_bytes_ = 0;
  DeviceBuffer<int32_t> index_[2];     // per set: bucket id -> line, or -1
  DeviceBuffer<uint32_t> members_[2];  // per set: the ids it holds
  DeviceBuffer<std::byte> lines_;      // lines for both sets (a complete cache: one set)
  DeviceBuffer<uint32_t> stats_, scores_, written_, hist_, free_list_;
  DeviceBuffer<uint8_t> used_;         // a phase's scratch: the lines the current set uses
  DeviceBuffer<CacheSelection> selection_;
  DeviceBuffer<CacheCounters> counters_;
  std::unique_ptr<Stream> load_stream_;
  std::unique_ptr<Event> loaded_, phase_start_;
  int current_ = -1, staging_ = 0;
  bool loading_ = false;
  bool batch_in_phase_ = false;  // the last batch ran beside a phase or switched to its lines
  uint64_t since_phase_ = 0, phases_ = 0;
  uint32_t epoch_ = 0;
};

}  // namespace gphash::engine::gpu
