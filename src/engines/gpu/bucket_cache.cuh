// BktCache's loading phases and its host side (the lines themselves: bucket_cache_view.cuh).
//
// Two sets of lines: kernels read and write the current one while a loading phase fills the other
// on the cache's own stream, concurrently with batches; nothing that readers use is ever replaced
// in place. A phase, all on the device (the host never waits for it):
//   score      each bucket's score from the access statistics (LFU: sampled counts, halved every
//              phase; LRU: the epoch of the last sampled access; random: a hash, among buckets
//              accessed since the last phase);
//   select     the K best scores by a two-pass radix select over the scores' high and low 16 bits;
//   fill       a warp per line: a bucket cached now is copied from its current line (GPU memory),
//              a new one from the pool with its slots' heap values (verified against their
//              checksums when the pool keeps them). One block per SM: the fill is bound by its
//              host reads, and with a block per 8 lines it took the SMs from the batches beside
//              it (H200, YCSB B with LFU 20%: 97 -> 123 M ops/s with the narrow fill).
// The switch comes at the start of the first batch after the phase is done, in that batch's
// stream: buckets written since the phase began (the `written` bits) are copied again, from their
// current line if they have one, else from the pool; then kernels use the new lines. A resize
// drops everything (bucket ids change).
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
  uint32_t lines;        // lines chosen
};

__device__ __forceinline__ uint32_t mix32(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

__global__ inline void cache_score_kernel(uint32_t* stats, uint64_t ids, uint8_t policy, uint32_t salt, uint32_t* scores,
                                   uint32_t* hist) {
  for (uint64_t id = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; id < ids; id += uint64_t{gridDim.x} * blockDim.x) {
    uint32_t s = stats[id];
    if (policy == static_cast<uint8_t>(CachePolicyCode::kLfu)) {
      stats[id] = s >> 1;  // aging: what was hot long ago fades
    } else if (policy == static_cast<uint8_t>(CachePolicyCode::kRandom)) {
      stats[id] = 0;
      s = s ? (mix32(id * 0x9e3779b97f4a7c15ull + salt) | 1u) : 0;
    }
    scores[id] = s;
    if (s) atomicAdd(&hist[s >> 16], 1u);
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
  for (uint64_t id = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; id < ids; id += uint64_t{gridDim.x} * blockDim.x) {
    const uint32_t s = scores[id];
    if (s && (s >> 16) == sel->hi_bin) atomicAdd(&hist[s & 0xFFFF], 1u);
  }
}

__global__ inline void cache_select_kernel(const uint32_t* scores, uint64_t ids, CacheSelection* sel, int32_t* index,
                                    uint32_t* line_ids) {
  for (uint64_t id = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; id < ids; id += uint64_t{gridDim.x} * blockDim.x) {
    const uint32_t s = scores[id];
    bool take = s && (sel->all || s > sel->threshold);
    if (s && !take && s == sel->threshold) take = atomicAdd(&sel->equal_taken, 1u) < sel->need_equal;
    int32_t line = -1;
    if (take) {
      line = static_cast<int32_t>(atomicAdd(&sel->lines, 1u));
      line_ids[line] = static_cast<uint32_t>(id);
    }
    index[id] = line;
  }
}

// A complete cache's selection: bucket id k is line k.
__global__ inline void cache_take_all_kernel(uint64_t ids, CacheSelection* sel, int32_t* index, uint32_t* line_ids) {
  for (uint64_t id = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; id < ids; id += uint64_t{gridDim.x} * blockDim.x) {
    index[id] = static_cast<int32_t>(id);
    line_ids[id] = static_cast<uint32_t>(id);
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) sel->all = 1, sel->lines = static_cast<uint32_t>(ids);
}

// A warp fills line `line` of `to` with bucket `id`: from its line in `from` if it has one, else
// from the pool (bucket bytes, then the slots' heap values).
template <class T>
__device__ void fill_line(const T& t, const BucketCacheView& to, int32_t line, uint64_t id, const BucketCacheView& from,
                          int lane) {
  std::byte* dst = to.line(line);
  if (from.index) {
    const int32_t old = from.index[id];
    if (old >= 0) {
      const std::byte* src = from.line(old);
      for (uint32_t k = lane * 16; k < to.line_bytes; k += 32 * 16)
        *reinterpret_cast<uint4*>(dst + k) = __ldcg(reinterpret_cast<const uint4*>(src + k));
      return;
    }
  }
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

template <class T>
__global__ void __launch_bounds__(256) cache_fill_kernel(const __grid_constant__ T t, const __grid_constant__ BucketCacheView to,
                                                         const __grid_constant__ BucketCacheView from,
                                                         const uint32_t* line_ids, const CacheSelection* sel,
                                                         uint32_t max_lines) {
  const int lane = threadIdx.x & 31;
  const uint32_t warps = gridDim.x * blockDim.x / 32;
  for (uint32_t line = (blockIdx.x * blockDim.x + threadIdx.x) / 32; line < max_lines && line < sel->lines; line += warps)
    fill_line(t, to, static_cast<int32_t>(line), line_ids[line], from, lane);
}

// The switch: lines of buckets written since the phase began are copied again, from the current
// set's line where the bucket has one (every write reached it after the pool, and no batch runs
// now, so it equals the pool) and from the pool otherwise.
template <class T>
__global__ void __launch_bounds__(256) cache_fixup_kernel(const __grid_constant__ T t, const __grid_constant__ BucketCacheView to,
                                                          const __grid_constant__ BucketCacheView from,
                                                          const uint32_t* written, const uint32_t* line_ids,
                                                          const CacheSelection* sel, uint32_t max_lines) {
  const int lane = threadIdx.x & 31;
  const uint32_t warps = gridDim.x * blockDim.x / 32;
  for (uint32_t line = (blockIdx.x * blockDim.x + threadIdx.x) / 32; line < max_lines && line < sel->lines; line += warps) {
    const uint32_t id = line_ids[line];
    if (written[id / 32] >> (id % 32) & 1) fill_line(t, to, static_cast<int32_t>(line), id, from, lane);
  }
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
      const BucketCacheView next = view(dt, staging_, false);
      cache_fixup_kernel<<<fill_blocks(), 256, 0, stream>>>(dt, next, view(dt, current_, false), written_.get(),
                                                            line_ids_[staging_].get(), selection_.get(), lines_max_);
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
    s.last_batch_cache_loading = batch_in_phase_;
  }

 private:
  // Lines per set for the table's current size: the configured fraction of its buckets, or what
  // the GPU-memory budget holds (both sets of lines, the index of each, the statistics and the
  // scores). A complete cache needs one set and neither statistics nor scores.
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
      lines = complete_ ? ids : options_.gpu_bytes > fixed ? (options_.gpu_bytes - fixed) / (2 * (line_bytes_ + 4)) : 0;
    } else {
      complete_ = options_.fraction >= 1.0 && ids <= (uint64_t{1} << 30);
      lines = complete_ ? ids : static_cast<uint64_t>(options_.fraction * static_cast<double>(ids));
    }
    lines = std::min<uint64_t>({lines, ids, uint64_t{1} << 30});
    lines_max_ = static_cast<uint32_t>(lines);
    // The first phase soon; a complete cache's at once (it is the only one).
    since_phase_ = std::max<uint64_t>(options_.reload_operations, 1) / (complete_ ? 1 : 2);
    const int sets = complete_ ? 1 : 2;
    for (int k = 0; k < 2; ++k) index_[k].release(), line_ids_[k].release(), lines_[k].release();
    stats_.release(), scores_.release();
    if (!lines_max_) return false;
    try {
      for (int k = 0; k < sets; ++k) {
        index_[k].resize(ids);
        line_ids_[k].resize(lines_max_);
        lines_[k].resize(size_t{lines_max_} * line_bytes_);
      }
      if (!complete_) {
        stats_.resize(ids);
        scores_.resize(ids);
        hist_.resize(2 * kScoreBins);
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
      for (int k = 0; k < 2; ++k) index_[k].release(), line_ids_[k].release(), lines_[k].release();
      stats_.release(), scores_.release(), written_.release();
      return false;
    }
    if (!complete_) GPHASH_CUDA(cudaMemsetAsync(stats_.get(), 0, ids * 4, stream));  // in the batch's stream, before its kernels
    gpu_bytes_ = sets * (ids * 4 + uint64_t{lines_max_} * (line_bytes_ + 4)) + written_.size() * 4 +
                 (complete_ ? 0 : ids * 8 + hist_.size() * 4);
    return true;
  }

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
    v.lines = set >= 0 ? lines_[set].get() : nullptr;
    v.written = tracking ? written_.get() : nullptr;
    v.stats = complete_ ? nullptr : stats_.get();
    v.counters = counters_.get();
    v.epoch = epoch_;
    v.policy = static_cast<uint8_t>(policy_);
    return v;
  }

  // The loading phase's fill, beside batches: one block per SM (header comment).
  unsigned load_blocks() const {
    int device = 0, sms = 1;
    GPHASH_CUDA(cudaGetDevice(&device));
    GPHASH_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    return std::min(static_cast<unsigned>(sms), fill_blocks());
  }
  unsigned fill_blocks() const { return static_cast<unsigned>(std::min<uint64_t>((uint64_t{lines_max_} + 7) / 8, 4096)); }
  unsigned id_blocks() const { return static_cast<unsigned>(std::min<uint64_t>((ids_ + 255) / 256, 8192)); }

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
                                                           line_ids_[staging_].get());
    } else {
      GPHASH_CUDA(cudaMemsetAsync(hist_.get(), 0, hist_.size() * 4, load));
      cache_score_kernel<<<id_blocks(), 256, 0, load>>>(stats_.get(), ids_, static_cast<uint8_t>(policy_),
                                                        static_cast<uint32_t>(epoch_), scores_.get(), hist_.get());
      cache_threshold_kernel<<<1, 1024, 0, load>>>(hist_.get(), lines_max_, selection_.get(), false);
      cache_hist_low_kernel<<<id_blocks(), 256, 0, load>>>(scores_.get(), ids_, selection_.get(), hist_.get() + kScoreBins);
      cache_threshold_kernel<<<1, 1024, 0, load>>>(hist_.get() + kScoreBins, 0, selection_.get(), true);
      cache_select_kernel<<<id_blocks(), 256, 0, load>>>(scores_.get(), ids_, selection_.get(), index_[staging_].get(),
                                                         line_ids_[staging_].get());
    }
    cache_fill_kernel<<<load_blocks(), 256, 0, load>>>(dt, view(dt, staging_, false), view(dt, current_, false),
                                                       line_ids_[staging_].get(), selection_.get(), lines_max_);
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
  DeviceBuffer<int32_t> index_[2];
  DeviceBuffer<uint32_t> line_ids_[2];
  DeviceBuffer<std::byte> lines_[2];
  DeviceBuffer<uint32_t> stats_, scores_, written_, hist_;
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
