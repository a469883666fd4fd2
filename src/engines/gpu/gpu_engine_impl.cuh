// The GPU engine's host side: opens a pool for the GPU (through PoolMapping, the GPM layer),
// stages, plans and launches batches on the caller's stream, finishes the exclusive slow paths
// (displacement, resize, heap growth) and recovery. Instantiated per shape in
// gpu_engine_<shape>.cu, so the instantiations compile in parallel.
//
// Two ways to run a batch:
//   execute        host-driven: plan and the parallel pass on the engine's batch stream, then the
//                  host reads the batch's counters and runs the exclusive slow path (displacement,
//                  resize, heap growth) as needed, then copies the results out;
//   execute_async  on the caller's stream, with no host in the middle: the host first grows the
//                  heap and the table as far as the batch could need (a resize here waits for the
//                  device), then enqueues plan, the parallel pass and a one-warp displacement pass
//                  for the runs that found no free slot; an insert that still finds none fails
//                  with kTableFull (possible only near the maximum load factor). The engine's
//                  completion thread settles the batch (item count, freed cells) once it is done.
// One batch is in flight per table: a call waits (on the host) until the previous one is settled.
// (An earlier design held the caller's stream with a gate kernel while the host ran the slow
// path; allocations and registrations the slow path makes synchronize the device, so that
// deadlocked.)
#pragma once

#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engines/common/move_record.h"
#include "engines/common/table_meta.h"
#include "engines/engine.h"
#include "engines/gpu/bucket_cache.cuh"
#include "engines/gpu/cuda_util.h"
#include "engines/gpu/kernels.cuh"
#include "engines/gpu/plan_sort.h"
#include "gpm/pool_mapping.h"
#include "gphash/config.h"
#include "gphash/gpu/table_ref.cuh"
#include "pool/pool.h"

namespace gphash::engine::gpu {

inline constexpr size_t kMaxChunk = size_t{1} << 24;  // operations per launch sequence (32-bit plan indices)
static_assert(kMaxChunk < kFromTable, "long_run_kernel's transitions hold batch positions");
inline constexpr size_t kLongRunsBesideMappedFrom = size_t{1} << 20;  // launch_long_runs
inline constexpr uint64_t kSerialLimit = 256;         // runs the one-warp displacement path takes on
inline constexpr int kBlock = 256;

inline unsigned blocks_for(uint64_t n) { return static_cast<unsigned>((n + kBlock - 1) / kBlock); }

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

namespace {

// After the sort. A batch of searches only needs no plan in GPU memory (searches of one key
// commute): when `writes` says it has none, every plan position becomes a run of its own, so a
// Zipf-hot key's searches spread over all warps instead of one warp walking them all. Otherwise,
// with `long_windows`, it counts the windows of kLongRunWindow positions that lie wholly in one run
// (the keys are sorted: the window's first and last sort keys are equal), so long_run_kernel,
// which may run beside the batch kernel, ends at once when there are none.
__global__ void finish_plan_kernel(uint32_t* sort_keys, size_t n, const uint32_t* writes, unsigned long long* long_windows) {
  const size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if (writes && *writes == 0) {
    sort_keys[i] = static_cast<uint32_t>(i);
    return;
  }
  if (long_windows && i % kLongRunWindow == 0 && i + kLongRunWindow <= n &&
      sort_keys[i] == sort_keys[i + kLongRunWindow - 1])
    atomicAdd(long_windows, 1ull);
}

}  // namespace

// The completion of one batch or device session.
class GpuCompletion final : public Completion {
 public:
  GpuCompletion() : done_(false) {}
  void wait() override {
    GPHASH_CUDA(cudaEventSynchronize(done_));
    std::lock_guard lock(mutex_);
    if (error_) std::rethrow_exception(error_);
  }
  bool ready() override { return cudaEventQuery(done_) == cudaSuccess; }
  void* cuda_event() override { return done_.get(); }
  cudaEvent_t event() const { return done_; }
  void fail(std::exception_ptr e) {
    std::lock_guard lock(mutex_);
    error_ = e;
  }

 private:
  Event done_;
  std::mutex mutex_;
  std::exception_ptr error_;
};

// The completion of a submitted batch (Table::submit): waiting finishes it on the waiting thread.
// The engine settles it before it closes, so `finish` never outlives the engine while needed.
class SubmittedCompletion final : public Completion {
 public:
  explicit SubmittedCompletion(std::function<void()> finish) : finish_(std::move(finish)) {}
  void wait() override {
    if (!done_.load(std::memory_order_acquire)) finish_();
    std::lock_guard lock(mutex_);
    if (error_) std::rethrow_exception(error_);
  }
  bool ready() override { return done_.load(std::memory_order_acquire); }  // finished, not merely run
  void* cuda_event() override { return nullptr; }
  void settle(std::exception_ptr error) {
    {
      std::lock_guard lock(mutex_);
      error_ = error;
    }
    done_.store(true, std::memory_order_release);
  }

 private:
  std::function<void()> finish_;
  std::atomic<bool> done_{false};
  std::mutex mutex_;
  std::exception_ptr error_;
};

template <class ShapeT, int KeyWidth>
class GpuEngine final : public Engine {
  using T = DeviceTable<ShapeT, KeyWidth>;
  using Ref = gphash::gpu::TableRef<ShapeT, KeyWidth>;

 public:
  GpuEngine(pool::Pool& pool, const OpenOptions& options)
      : pool_(pool), meta_(pool), options_(options), gpu_memory_(options.placement == Placement::kGpuMemory),
        mapping_(pool), io_(2 * kStagedBytes + kCountersBytes), scan_(1),
        cache_(options.cache, options.placement == Placement::kHostMapped && options.gpu_kernels == GpuKernels::kWarp) {
    const auto t0 = std::chrono::steady_clock::now();
    if (pool.kind() == pool::PoolKind::kFile)
      throw Error(ErrorCode::kNotMappable,
                  "the GPU cannot map pool " + pool.path() +
                      ": it is a file on a regular file system, whose shared mappings cudaHostRegister refuses. "
                      "Keep GPU pools in /dev/shm (a bare name), on hugetlbfs or device-DAX, or open this one "
                      "with the CPU engine");
    const format::PoolHeader& h = meta_.header();
    const bool dirty = h.clean_shutdown == 0;
    if (dirty && pool.read_only())
      throw Error(ErrorCode::kNeedsRecovery,
                  "pool " + pool.path() + " was not shut down cleanly; open it writable once so recovery can run");
    dt_ = T{};
    for (int j = 0; j < T::H; ++j) dt_.seed[j] = format::hash_seed_for(h.gphash.hash_seed, j);
    dt_.bottom = h.gphash.bottom_level;
    dt_.value_width = h.gphash.value_width;
    dt_.has_heap = meta_.has_heap();
    dt_.value_checksums = format::has_value_checksums(h);
    dt_.family_bytes = T::family_bytes_for();
    dt_.heap.geometry = format::heap_geometry(h);
    dt_.heap.cell_size = h.gphash.cell_size;
    dt_.writes.persistent = true;
    dt_.writes.pool_base = reinterpret_cast<uintptr_t>(pool.base());
#if GPHASH_CRASH_POINTS
    countdown_.resize(1);
    CrashCountdown c{0, 0};
    if (const char* at = std::getenv("GPHASH_GPU_CRASH_AFTER")) c.trap_at = std::strtoull(at, nullptr, 10);
    GPHASH_CUDA(cudaMemcpy(countdown_.get(), &c, sizeof c, cudaMemcpyHostToDevice));
    GPHASH_CUDA(cudaDeviceSynchronize());  // a copy from pageable memory may still be in flight on return
    dt_.writes.countdown = countdown_.get();
#endif
    counters_ = reinterpret_cast<BatchCounters*>(io_.get() + kStagedBytes);
    ctx_.counters = counters_;
    attach_pool();
    start_write_tracking();
    stats_.open_map_seconds = seconds_since(t0);

    if (dirty) {
      const auto r0 = std::chrono::steady_clock::now();
      recover();
      stats_.recovery_seconds = seconds_since(r0);
    }
    // GPU memory is taken before the pool is marked open: a GPU that has too little of it refuses
    // the open (kNoSpace) and leaves a clean pool clean.
    if (gpu_memory_) move_table_to_gpu();
    const auto c0 = std::chrono::steady_clock::now();
    rebuild_mirror_and_counts(/*count=*/true);
    if (dirty) stats_.recovery_seconds += seconds_since(c0);  // the recount and heap rebuild belong to recovery
    if (!pool.read_only()) meta_.mark_open_dirty();
    stats_.recovered = dirty;
    stats_.open_seconds = seconds_since(t0);
    worker_ = std::thread([this] { complete_jobs(); });
  }

  ~GpuEngine() override {
    try {
      close();
    } catch (...) {
      // A destructor cannot report; the pool stays marked dirty and the next open recovers it.
    }
    stop_worker();
    if (plan_graph_.exec) cudaGraphExecDestroy(plan_graph_.exec);
    if (plan_graph_.graph) cudaGraphDestroy(plan_graph_.graph);
  }

  std::string name() const override {
    std::string n = gpu_memory_ ? "gpu-memory" : "gpu-mapped";
    if (options_.gpu_kernels == GpuKernels::kWarpDirect) n += "/warp-direct";
    if (options_.gpu_kernels == GpuKernels::kThread) n += "/thread";
    return n;
  }
  uint64_t item_count() const override {
    std::lock_guard lock(mutex_);
    wait_settled(/*rethrow=*/false);
    return items_;
  }
  EngineStats stats() const override {
    std::lock_guard lock(mutex_);
    wait_settled(/*rethrow=*/false);
    EngineStats s = stats_;
    s.slots = slot_capacity();
    s.bottom_level = dt_.bottom;
    cache_.report(s);
    return s;
  }

  void execute(const Batch& batch) override {
    std::lock_guard lock(mutex_);
    settle();
    if (session_open_)
      throw Error(ErrorCode::kInvalidArgument, "a device session is open on this table: end it before running batches");
    if (batch.memory == MemorySpace::kDevice) wait_for_legacy_stream(batch_stream_, legacy_done_);
    for (size_t offset = 0; offset < batch.size; offset += kMaxChunk)
      execute_chunk(batch, offset, std::min(kMaxChunk, batch.size - offset));
  }

  std::shared_ptr<Completion> execute_async(const Batch& batch, void* stream) override {
    std::lock_guard lock(mutex_);
    if (session_open_)
      throw Error(ErrorCode::kInvalidArgument, "a device session is open on this table: end it before running batches");
    std::shared_ptr<Completion> done;
    for (size_t offset = 0; offset < batch.size; offset += kMaxChunk)
      done = enqueue_chunk(batch, offset, std::min(kMaxChunk, batch.size - offset), static_cast<cudaStream_t>(stream));
    return done;
  }

  // Table::submit: a host batch small enough to stage runs in two halves, begin_chunk now and
  // end_chunk when the caller waits (or the table's next call comes), so the caller works while
  // the GPU does; anything else runs at once.
  std::shared_ptr<Completion> submit(const Batch& batch) override {
    std::lock_guard lock(mutex_);
    settle();
    if (session_open_)
      throw Error(ErrorCode::kInvalidArgument, "a device session is open on this table: end it before running batches");
    if (batch.memory == MemorySpace::kDevice || batch.size > kMaxChunk) {
      if (batch.memory == MemorySpace::kDevice) wait_for_legacy_stream(batch_stream_, legacy_done_);
      for (size_t offset = 0; offset < batch.size; offset += kMaxChunk)
        execute_chunk(batch, offset, std::min(kMaxChunk, batch.size - offset));
      return nullptr;
    }
    ChunkInFlight c = begin_chunk(batch, 0, batch.size);
    if (!c.staged.out_bytes) {
      end_chunk(c);
      return nullptr;
    }
    submitted_ = c;
    submitted_done_ = std::make_shared<SubmittedCompletion>([this] {
      std::lock_guard lock(mutex_);
      finish_submitted();
    });
    return submitted_done_;
  }

  DeviceSession begin_device_session(uint64_t max_new_items, void* stream) override {
    std::lock_guard lock(mutex_);
    settle();
    if (session_open_) throw Error(ErrorCode::kInvalidArgument, "a device session is already open on this table");
    if (pool_.read_only() && max_new_items)
      throw Error(ErrorCode::kReadOnly, "pool " + pool_.path() + " is open read-only: a session can only search");
    if (options_.gpu_kernels != GpuKernels::kWarp)
      throw Error(ErrorCode::kInvalidArgument, "device sessions need the warp kernels with the tag mirror (GpuKernels::kWarp)");
    // Cells for the session's new values, up front: a session cannot grow the heap.
    reserve_cells(max_new_items);
    const uint64_t families = format::level_buckets(dt_.bottom);
    key_locks_.reserve((families + 31) / 32);
    GPHASH_CUDA(cudaMemsetAsync(key_locks_.get(), 0, (families + 31) / 32 * 4, slow_stream_));
    prepare_batch(std::max<uint64_t>(max_new_items, 1 << 16), slow_stream_);
    GPHASH_CUDA(cudaStreamSynchronize(slow_stream_));
    const auto user = static_cast<cudaStream_t>(stream);
    if (last_done_) GPHASH_CUDA(cudaStreamWaitEvent(user, last_done_->event(), 0));
    Ref ref{dt_, ctx_, key_locks_.get()};
    DeviceSession s{ShapeT::value(), KeyWidth, std::vector<std::byte>(sizeof ref)};
    std::memcpy(s.ref.data(), &ref, sizeof ref);
    session_open_ = true;
    return s;
  }

  std::shared_ptr<Completion> end_device_session(void* stream) override {
    std::lock_guard lock(mutex_);
    if (!session_open_) throw Error(ErrorCode::kInvalidArgument, "no device session is open on this table");
    session_open_ = false;
    return hand_over(static_cast<cudaStream_t>(stream));
  }

  void save() override {
    std::lock_guard lock(mutex_);
    settle();
    save_locked();
  }

  bool device_session_open() const override {
    std::lock_guard lock(mutex_);
    return session_open_;
  }

  // A snapshot holds writers off: once the batch in flight (if any) is done, the pages the
  // kernels marked join the pool's own record (collect_marks).
  void prepare_snapshot() override {
    std::lock_guard lock(mutex_);
    if (session_open_)
      throw Error(ErrorCode::kInvalidArgument,
                  "a device session is open on this table (its kernels may be writing): end it before taking a snapshot");
    settle();
    collect_marks();
  }

  void abandon() override {
    std::lock_guard lock(mutex_);
    if (submitted_done_)
      submitted_done_->settle(std::make_exception_ptr(Error(ErrorCode::kTableFailed, "the table was abandoned before this batch finished")));
    submitted_.reset();
    submitted_done_.reset();
    closed_ = true;
  }
  void close() override {
    std::lock_guard lock(mutex_);
    finish_submitted();  // read-only tables too: its completion must not outlive the engine unsettled
    if (closed_ || pool_.read_only()) return;
    settle();  // throws if a batch failed: the pool then stays dirty for the next open
    save_locked();
    meta_.mark_clean(items_);
    closed_ = true;
  }

  size_t export_items(uint64_t& position, const ExportChunk& chunk, uint64_t& damaged) override {
    std::lock_guard lock(mutex_);
    settle();
    const uint64_t total = slot_capacity();
    if (position >= total) {
      position = ~uint64_t{0};
      return 0;
    }
    const uint64_t window = std::min<uint64_t>(chunk.capacity, total - position);
    std::byte* keys = chunk.keys;
    std::byte* values = chunk.values;
    if (chunk.memory == MemorySpace::kHost) {
      keys_.reserve((window * KeyWidth + 7) / 8);
      keys = reinterpret_cast<std::byte*>(keys_.get());
      if (values) {
        out_.reserve(window * dt_.value_width);
        values = out_.get();
      }
    }
    reset_scan();
    export_kernel<<<blocks_for(window), kBlock, 0, slow_stream_>>>(dt_, position, window, keys, values, scan_.get());
    GPHASH_CUDA(cudaGetLastError());
    read_scan();
    const uint64_t n = host_scan_.get()->items;
    damaged += host_scan_.get()->found;
    if (chunk.memory == MemorySpace::kHost && n) {
      GPHASH_CUDA(cudaMemcpy(chunk.keys, keys, n * KeyWidth, cudaMemcpyDeviceToHost));
      if (values) GPHASH_CUDA(cudaMemcpy(chunk.values, values, n * dt_.value_width, cudaMemcpyDeviceToHost));
    }
    position += window;
    if (position >= total) position = ~uint64_t{0};
    return n;
  }

  std::vector<uint64_t> level_items() override {
    std::lock_guard lock(mutex_);
    settle();
    std::vector<uint64_t> counts;
    for (uint32_t l = dt_.bottom; l < dt_.bottom + T::L; ++l) {
      reset_scan();
      scan_level_kernel<<<blocks_for(format::level_buckets(l) * T::S), kBlock, 0, slow_stream_>>>(dt_, l, false, false,
                                                                                                  nullptr, scan_.get());
      GPHASH_CUDA(cudaGetLastError());
      read_scan();
      counts.push_back(host_scan_.get()->items);
    }
    return counts;
  }

 private:
  // ---- open ---------------------------------------------------------------------------------

  void attach_pool() {
    const format::PoolHeader& h = meta_.header();
    std::byte* prefix = mapping_.map(0, format::kReservedPrefixBytes);
    dt_.maintenance = reinterpret_cast<uint64_t*>(prefix + format::kMaintenanceOffset);
    for (uint32_t l = h.gphash.bottom_level; l <= meta_.highest_level(); ++l)
      dt_.level[l] = mapping_.map(h.gphash.level_offset[l], format::level_bytes(h, l));
    heap_chunks_ = h.gphash.heap_chunk_count;
    for (uint32_t c = 0; c < heap_chunks_; ++c)
      dt_.heap.chunk[c] = mapping_.map(h.gphash.heap_chunk_offset[c], dt_.heap.geometry.chunk_cells(c) * h.gphash.cell_size);
    dt_.heap.capacity = meta_.heap_cells();
  }

  // ---- dirty pages for snapshots --------------------------------------------------------------
  //
  // Kernels store to a host-mapped pool over PCIe, which the pool's own dirty-page record never
  // sees; the one write path (PoolWrites::mark) sets a bit per 4 KiB page in GPU memory instead,
  // and a snapshot moves those bits into the pool's record with writers held off
  // (prepare_snapshot), or the engine does before the bitmap grows. With that the engine tracks
  // its writes and snapshots are incremental. If device addresses of the pool differed from host
  // ones (never on 64-bit Linux with unified addressing) the marks would name the wrong pages:
  // the engine then does not track, and every snapshot is a full image (correct, not incremental).

  void start_write_tracking() {
    tracking_ = mapping_.same_addresses();
    if (tracking_ && !pool_.read_only()) cover_pool();
    pool_.dirty_pages().set_engine_tracks_writes(tracking_);
  }

  // Sizes the bitmap to the pool's current size (with room to grow); called before a kernel can
  // write a part of the pool that was just added (resize, heap growth). No kernel is running.
  void cover_pool() {
    if (!tracking_ || pool_.read_only()) return;
    const uint64_t pages = (pool_.file_size() + (uint64_t{1} << kDirtyPageShift) - 1) >> kDirtyPageShift;
    if (dirty_bits_.get() && pages <= dt_.writes.dirty_page_limit) return;
    collect_marks();  // the old bitmap's marks, before it goes
    const uint64_t limit = (std::max<uint64_t>(2 * pages, 1 << 15) + 63) / 64 * 64;  // a multiple of 64
    DeviceBuffer<uint32_t> bits(limit / 32 + 2);  // the bitmap, then the overflow word (and padding)
    clear_marks(bits.get(), bits.size());
    dirty_bits_ = std::move(bits);
    dt_.writes.dirty_page_limit = limit;
    // Kernels mark only while they write the pool itself (not a GPU-memory copy of the table).
    if (dt_.writes.persistent) dt_.writes.dirty_bits = dirty_bits_.get();
  }

  // Moves the kernels' marks into the pool's record and clears them. No kernel may be running.
  void collect_marks() {
    if (!dirty_bits_.get()) return;
    GPHASH_CUDA(cudaStreamSynchronize(batch_stream_));
    GPHASH_CUDA(cudaStreamSynchronize(slow_stream_));
    const uint64_t limit = dt_.writes.dirty_page_limit;
    host_dirty_.resize(dirty_bits_.size() / 2);
    GPHASH_CUDA(cudaMemcpy(host_dirty_.data(), dirty_bits_.get(), dirty_bits_.size() * 4, cudaMemcpyDeviceToHost));
    if (host_dirty_[limit / 64] != 0)
      pool_.dirty_pages().mark(0, pool_.file_size());  // a page past the bitmap: trust nothing
    else
      pool_.dirty_pages().merge(host_dirty_.data(), static_cast<size_t>(limit / 64));
    clear_marks(dirty_bits_.get(), dirty_bits_.size());
  }

  // Done before it returns: a cudaMemset may still be running when it returns, and kernels on the
  // batch streams (non-blocking) would then have marks cleared under them.
  void clear_marks(uint32_t* bits, size_t words) {
    GPHASH_CUDA(cudaMemsetAsync(bits, 0, words * 4, slow_stream_));
    GPHASH_CUDA(cudaStreamSynchronize(slow_stream_));
  }

  // The pool was not shut down cleanly: finish or undo an interrupted move, clear slots left
  // INSERTING, finish an interrupted resize. All in the pool, before anything else reads it.
  void recover() {
    resolve_move_record(meta_);
    for (uint32_t l = dt_.bottom; l <= meta_.highest_level(); ++l)
      scan_level_kernel<<<blocks_for(format::level_buckets(l) * T::S), kBlock, 0, slow_stream_>>>(dt_, l, true, false,
                                                                                                  nullptr, scan_.get());
    GPHASH_CUDA(cudaGetLastError());
    if (meta_.header().gphash.resize_state == format::kResizeRehashing) rehash_and_finish(nullptr);
    GPHASH_CUDA(cudaStreamSynchronize(slow_stream_));
  }

  void move_table_to_gpu() {
    const format::PoolHeader& h = meta_.header();
    for (uint32_t l = dt_.bottom; l < dt_.bottom + T::L; ++l) {
      const uint64_t bytes = format::level_bytes(h, l);
      device_levels_[l].resize(bytes);
      GPHASH_CUDA(cudaMemcpy(device_levels_[l].get(), pool_.base() + h.gphash.level_offset[l], bytes, cudaMemcpyHostToDevice));
      mapping_.unmap(h.gphash.level_offset[l]);
      dt_.level[l] = device_levels_[l].get();
    }
    for (uint32_t c = 0; c < heap_chunks_; ++c) {
      const uint64_t bytes = dt_.heap.geometry.chunk_cells(c) * h.gphash.cell_size;
      device_chunks_[c].resize(bytes);
      GPHASH_CUDA(cudaMemcpy(device_chunks_[c].get(), pool_.base() + h.gphash.heap_chunk_offset[c], bytes, cudaMemcpyHostToDevice));
      mapping_.unmap(h.gphash.heap_chunk_offset[c]);
      dt_.heap.chunk[c] = device_chunks_[c].get();
    }
    dt_.writes.persistent = false;
    dt_.writes.dirty_bits = nullptr;  // the table is no longer the pool's: save_locked marks what it writes
    dt_.maintenance = nullptr;  // nothing of the pool changes until save()
  }

  // One pass over the table: the tag mirror (if used), the item count and the heap's free cells.
  void rebuild_mirror_and_counts(bool count) {
    const bool mirror = options_.gpu_kernels == GpuKernels::kWarp;
    if (mirror) {
      const uint64_t bytes = format::level_buckets(dt_.bottom) * dt_.family_bytes;
      tags_.reserve(bytes);
      GPHASH_CUDA(cudaMemsetAsync(tags_.get(), 0, bytes, slow_stream_));
      dt_.tags = tags_.get();
    } else {
      dt_.tags = nullptr;
    }
    if (!mirror && !count) return;
    DeviceBuffer<uint32_t> bits;
    if (count && dt_.has_heap) {
      bits.resize((dt_.heap.capacity + 31) / 32);
      GPHASH_CUDA(cudaMemsetAsync(bits.get(), 0, bits.size() * 4, slow_stream_));
    }
    reset_scan();
    for (uint32_t l = dt_.bottom; l < dt_.bottom + T::L; ++l)
      scan_level_kernel<<<blocks_for(format::level_buckets(l) * T::S), kBlock, 0, slow_stream_>>>(dt_, l, false, mirror,
                                                                                                  bits.get(), scan_.get());
    GPHASH_CUDA(cudaGetLastError());
    read_scan();
    if (!count) return;
    if (host_scan_.get()->corrupt)
      throw Error(ErrorCode::kCorruptTable,
                  std::to_string(host_scan_.get()->corrupt) +
                      " slots reference value cells outside the heap or shared with another slot: `gphash check` "
                      "locates them and `gphash repair` drops them");
    items_ = host_scan_.get()->items;
    if (!dt_.has_heap) return;
    const uint64_t highest = host_scan_.get()->highest_cell;
    waiting_cells_.reserve(highest + 1024);
    if (highest)
      collect_free_cells_kernel<<<blocks_for(highest), kBlock, 0, slow_stream_>>>(bits.get(), highest, waiting_cells_.get(),
                                                                                 &scan_.get()->found);
    GPHASH_CUDA(cudaGetLastError());
    read_scan();
    free_count_ = 0;  // the holes wait to join the reserve, sorted, when the cells above them run short
    waiting_count_ = host_scan_.get()->found;
    fresh_next_ = highest;
  }

  void reset_scan() { GPHASH_CUDA(cudaMemsetAsync(scan_.get(), 0, sizeof(ScanCounters), slow_stream_)); }
  void read_scan() {
    GPHASH_CUDA(cudaMemcpyAsync(host_scan_.get(), scan_.get(), sizeof(ScanCounters), cudaMemcpyDeviceToHost, slow_stream_));
    GPHASH_CUDA(cudaStreamSynchronize(slow_stream_));
  }

  // ---- batches ------------------------------------------------------------------------------

  template <class U>
  static const U* offset_ptr(const void* base, size_t bytes) {
    return reinterpret_cast<const U*>(static_cast<const std::byte*>(base) + bytes);
  }

  // Small host batches (the server's rounds, latency-bound callers) go through pinned memory: the
  // caller's arrays are packed into it on the host, one copy goes in (with the batch counters) and
  // one comes out (with them again), and the host waits once. Copies from and to pageable memory
  // each stage and wait on their own. Measured on the H100 (16-byte keys, 8-byte values, YCSB C end
  // to end): +20 to +33% host-mapped and +30 to +60% in GPU memory at 128 and 1,024 operations;
  // with a 256 KiB limit 16,384-operation batches were staged too and lost 9 to 27% (the host's
  // packing costs more than the waits it saves), hence 64 KiB.
  static constexpr size_t kStagedBytes = size_t{64} << 10;
  struct Staged {
    size_t values_out_at = 0;  // in the output area: statuses at 0, then the found values
    size_t out_bytes = 0;      // 0: not staged
  };
  static size_t align16(size_t x) { return (x + 15) / 16 * 16; }
  static constexpr size_t kPlanMappedSearchesFrom = size_t{1} << 20;  // launch_parallel_pass
  static constexpr size_t kOrderMappedSearchesFrom = size_t{1} << 16;  // launch_parallel_pass
  static constexpr size_t kCheckRepeatsFrom = size_t{1} << 15;        // launch_parallel_pass
  static constexpr size_t kCheckInOnePassUpTo = size_t{1} << 20;      // check_for_repeats

  // The inputs end where the counters begin, so that one copy carries both; prepare_batch(upload
  // = false) must have filled counters_init_.
  bool stage_through_pinned(const Batch& b, size_t offset, size_t n, bool search_only, cudaStream_t stream, BatchView& bv,
                            Staged& staged) {
    const uint32_t vw = dt_.value_width;
    const size_t keys = align16(n * KeyWidth), ops = b.ops ? align16(n) : 0;
    const size_t values = b.values && !search_only ? align16(n * vw) : 0;
    const size_t statuses = align16(n), found = b.values_out ? n * vw : 0;
    if (keys + ops + values > kStagedBytes || statuses + found > kStagedBytes) return false;
    if (!host_io_) host_io_ = std::make_unique<PinnedBuffer<std::byte>>(io_.size());
    const size_t at = kStagedBytes - (keys + ops + values);
    std::byte* in = host_io_->get() + at;
    std::memcpy(in, offset_ptr<std::byte>(b.keys, offset * KeyWidth), n * KeyWidth);
    if (ops) std::memcpy(in + keys, b.ops + offset, n);
    if (values) std::memcpy(in + keys + ops, offset_ptr<std::byte>(b.values, offset * vw), n * vw);
    std::memcpy(host_io_->get() + kStagedBytes, counters_init_.get(), sizeof(BatchCounters));
    std::byte* device_in = io_.get() + at;
    GPHASH_CUDA(cudaMemcpyAsync(device_in, in, keys + ops + values + sizeof(BatchCounters), cudaMemcpyHostToDevice, stream));
    std::byte* device_out = io_.get() + kStagedBytes + kCountersBytes;
    bv.keys = reinterpret_cast<const uint64_t*>(device_in);
    bv.ops = ops ? reinterpret_cast<const uint8_t*>(device_in + keys) : nullptr;
    bv.values = values ? device_in + keys + ops : nullptr;
    bv.status = reinterpret_cast<uint8_t*>(device_out);
    bv.values_out = found ? device_out + statuses : nullptr;
    staged.values_out_at = statuses;
    staged.out_bytes = statuses + found;
    return true;
  }
  // The counters and the outputs, in one copy; the counters reach host_counters_ once the stream
  // is synchronized (take_staged_counters).
  void copy_staged_outputs(const Staged& staged, cudaStream_t stream) {
    GPHASH_CUDA(cudaMemcpyAsync(host_io_->get() + kStagedBytes, io_.get() + kStagedBytes, kCountersBytes + staged.out_bytes,
                                cudaMemcpyDeviceToHost, stream));
  }
  void take_staged_counters() {
    std::memcpy(host_counters_.get(), host_io_->get() + kStagedBytes, sizeof(BatchCounters));
  }
  void unpack_staged_outputs(const Batch& b, size_t offset, size_t n, const Staged& staged) const {
    const std::byte* out = host_io_->get() + kStagedBytes + kCountersBytes;
    std::memcpy(b.status + offset, out, n);
    if (b.values_out)
      std::memcpy(static_cast<std::byte*>(b.values_out) + offset * dt_.value_width, out + staged.values_out_at,
                  n * dt_.value_width);
  }

  // A chunk's view: the caller's arrays (GPU memory) or staged copies of them (host memory,
  // copied on `stream`).
  BatchView stage(const Batch& b, size_t offset, size_t n, bool search_only, cudaStream_t stream, Staged* staged = nullptr) {
    const uint32_t vw = dt_.value_width;
    BatchView bv{};
    bv.n = n;
    bv.uniform_op = static_cast<uint8_t>(b.op);
    bv.value_width = vw;
    if (b.memory == MemorySpace::kDevice) {  // never read by the host; ops checked on the device
      bv.keys = offset_ptr<uint64_t>(b.keys, offset * KeyWidth);
      bv.ops = b.ops ? reinterpret_cast<const uint8_t*>(b.ops + offset) : nullptr;
      bv.values = b.values ? offset_ptr<std::byte>(b.values, offset * vw) : nullptr;
      bv.values_out = b.values_out ? static_cast<std::byte*>(b.values_out) + offset * vw : nullptr;
      bv.status = reinterpret_cast<uint8_t*>(b.status + offset);
    } else if (staged && stage_through_pinned(b, offset, n, search_only, stream, bv, *staged)) {
      // staged: bv points into io_
    } else {
      keys_.reserve(n * T::kKeyWords);
      GPHASH_CUDA(cudaMemcpyAsync(keys_.get(), offset_ptr<std::byte>(b.keys, offset * KeyWidth), n * KeyWidth,
                                  cudaMemcpyHostToDevice, stream));
      bv.keys = keys_.get();
      if (b.ops) {
        ops_.reserve(n);
        GPHASH_CUDA(cudaMemcpyAsync(ops_.get(), b.ops + offset, n, cudaMemcpyHostToDevice, stream));
        bv.ops = ops_.get();
      }
      if (b.values && !search_only) {
        values_.reserve(n * vw);
        GPHASH_CUDA(cudaMemcpyAsync(values_.get(), offset_ptr<std::byte>(b.values, offset * vw), n * vw,
                                    cudaMemcpyHostToDevice, stream));
        bv.values = values_.get();
      }
      if (b.values_out) {
        out_.reserve(n * vw);
        bv.values_out = out_.get();
      }
      status_.reserve(n);
      bv.status = status_.get();
    }
    pending_[0].reserve(n);
    pending_[1].reserve(n);
    bv.pending = pending_[0].get();
    // The serial pass's list borrows the slow path's second buffer: the slow path starts after it.
    bv.serial = pending_[1].get();
    if (n / kLongRunWindow > long_windows_.size()) {  // long_run_kernel's records start with no epoch
      long_windows_.reserve(n / kLongRunWindow);
      GPHASH_CUDA(cudaMemsetAsync(long_windows_.get(), 0, long_windows_.size() * sizeof(LongWindow), stream));
    }
    return bv;
  }

  static bool ops_unread(const Batch& b) { return b.ops && b.memory == MemorySpace::kDevice; }
  static bool is_search_only(const Batch& b, size_t offset, size_t n) {
    if (!b.ops) return b.op == Op::kSearch;
    if (b.memory == MemorySpace::kDevice) return false;  // unknown: the host does not read them
    return std::all_of(b.ops + offset, b.ops + offset + n, [](Op op) { return op == Op::kSearch; });
  }

  // Plan and the parallel pass, on `stream`, with the start / planned / ran events around them.
  // Batches that write are planned (per-key order). Batches of searches need no order (searches
  // of one key commute) and mostly run unplanned: every operation a run of its own, so a Zipf-hot
  // key's searches spread over all warps instead of one warp walking them. The exception, measured
  // on the H100 (docs/PERFORMANCE.md, "Batches of searches"): a host-mapped table with one-word
  // keys, where one PCIe read answers a search, gains from the plan's combining of a hot key's
  // repeats into one read once a batch holds 2^20 operations (YCSB C, Zipf 0.99: +7 to +30%);
  // below that, and for wider keys at every size, the plan cost 10 to 30%. A batch whose ops the
  // host does not read (`ops_unread`: in GPU memory) is planned and, if it only searches,
  // unplanned on the device (plan()), unless it is large enough to be planned anyway. On a
  // host-mapped table, a batch of searches the host has seen is still sorted into bucket order
  // from kOrderMappedSearchesFrom operations, for the locality of its reads of host memory, every
  // search a run of its own.
  // In GPU memory a batch that writes is planned unless it repeats no key: with `host_waits` (the
  // host-driven execute, which waits for the batch anyway) and from kCheckRepeatsFrom operations,
  // the plan kernel checks, the host waits for the answer, and a batch of distinct keys (or, with
  // ops the host cannot read, one of searches only) skips the sort and runs unplanned, reading its
  // keys and values and writing its statuses in order instead of through the permutation. The
  // wait idles the GPU while the host launches the sort, so a check that finds a repeat makes the
  // next ones rarer (workloads that repeat keys, Zipf-skewed ones, keep doing so): after k such
  // checks in a row the next 2^k - 1 batches (at most 63) are planned unchecked.
  // H200, 8-byte keys (bench/results/2026-11-28-unplanned-writes): 2^24 distinct inserts 2.85 ->
  // 3.81 G/s at load 0.5 (kernel 5.24 -> 3.19 ms; the check 1.24 ms against a 0.65 ms sort, 0.55 ms
  // since it takes two passes, check_for_repeats: 4.58 G/s); YCSB LOAD at 2^16 387-462 -> 585-672
  // M/s. Larger host-mapped batches that write are always
  // planned: there the same change left LOAD's kernel as it was (0.22 s: the slots' PCIe writes
  // bound it) and the YCSB A that followed ran 35% slower with the same PCIe bytes per operation,
  // which is not explained.
  // A small batch staged through pinned memory (`staged`) is one the host has read whole: when
  // `distinct_keys` (the host found no key twice) it runs unplanned in both placements, and its
  // few serial runs (deferred operations) run inline: a small batch's cost is its launches, and
  // this leaves one kernel between the two copies (H200, 16 to 256 writes, wall time per call:
  // 55-59 -> 37-43 us in GPU memory, 58-66 -> 46-51 us host-mapped). A small planned batch is the
  // opposite case, runs of operations on repeated keys that a few warps would walk one after
  // another: serial_kernel spreads its runs over the whole GPU, in both placements (64 operations
  // on 32 keys, host-mapped: 208 us inline, 63 us so).
  // (bench/results/2026-11-28-small-batches; gpu_bench --sections small.)
  void launch_parallel_pass(BatchView& bv, bool search_only, bool ops_unread, bool host_waits, bool staged,
                            bool distinct_keys, cudaStream_t stream) {
    if (!staged) GPHASH_CUDA(cudaEventRecord(start_, stream));
    // BktCache's switch to freshly loaded lines runs here, in the batch's device time.
    cache_.before_batch(dt_, bv.n, stream);
    const bool plan_searches = !gpu_memory_ && KeyWidth == 8 && bv.n >= kPlanMappedSearchesFrom;
    const bool order_searches = search_only && !plan_searches && !gpu_memory_ && mapped_bucket_order_ &&
                                bv.n >= kOrderMappedSearchesFrom;
    stats_.last_batch_planned = (!search_only && !distinct_keys) || plan_searches;
    if (order_searches) {
      // Sorted into bucket order for the reads' locality only: every operation stays a run of its
      // own (no sort keys), so a hot key's searches still spread over all warps. H200, 16.8 M
      // items, 32-byte keys, uniform (bench/results/2026-11-28-bucket-order): hits 24.6 -> 114.6
      // M/s at 2^20, 26.8 -> 33.5 at 2^16, 25.8 -> 29.3 at 2^15; misses, which the tag mirror
      // answers without the host, pay the sort: 532 -> 337 M/s at 2^16 (+1.1 ns an operation
      // against -7.5 for a hit), 474 -> 229 at 2^15. Hence from 2^16.
      plan(bv, false, false, /*count_long_windows=*/false, stream);
      bv.sort_keys = nullptr;
    } else if (stats_.last_batch_planned) {
      bool check_repeats = gpu_memory_ && !search_only && host_waits && bv.n >= kCheckRepeatsFrom;
      if (check_repeats && unchecked_left_ > 0) --unchecked_left_, check_repeats = false;
      stats_.last_batch_planned = plan(bv, ops_unread && !plan_searches, check_repeats, /*count_long_windows=*/true, stream);
      if (check_repeats) {
        repeat_streak_ = stats_.last_batch_planned ? std::min(repeat_streak_ + 1, 6u) : 0;
        unchecked_left_ = (1u << repeat_streak_) - 1;
      }
    }
    if (!staged) GPHASH_CUDA(cudaEventRecord(planned_, stream));
    launch_batch(bv, /*inline_serial=*/staged ? !stats_.last_batch_planned : !gpu_memory_, stream);
    if (!staged) GPHASH_CUDA(cudaEventRecord(ran_, stream));
  }

  // Whether a staged batch's keys (host memory) hold one key twice: an open-addressing set of
  // their indices, compared in full. A probe longer than kMaxProbe (keys made to collide) answers
  // "maybe", which only costs the plan.
  bool may_repeat_a_key(const Batch& b, size_t offset, size_t n) {
    constexpr size_t kMaxProbe = 64;
    const size_t entries = std::bit_ceil(2 * n), mask = entries - 1;
    seen_on_host_.assign(entries, 0);
    const auto* keys = offset_ptr<std::byte>(b.keys, offset * KeyWidth);
    for (size_t i = 0; i < n; ++i) {
      uint64_t words[T::kKeyWords] = {};
      std::memcpy(words, keys + i * KeyWidth, KeyWidth);
      // One multiply a word (1,024 16-byte keys: 2.9 us on the 2-core VM, 7.0 with mix64 a word).
      uint64_t h = repeat_seed_;
      for (uint64_t w : words) h = (h ^ w) * 0x9E3779B97F4A7C15ull;
      h ^= h >> 32;
      for (size_t probe = 0, at = h & mask;; ++probe, at = (at + 1) & mask) {
        if (probe == kMaxProbe) return true;
        const uint32_t other = seen_on_host_[at];
        if (!other) {
          seen_on_host_[at] = static_cast<uint32_t>(i + 1);
          break;
        }
        if (std::memcmp(keys + (other - 1) * KeyWidth, words, KeyWidth) == 0) return true;
      }
    }
    return false;
  }

  double elapsed(cudaEvent_t a, cudaEvent_t b) {
    float ms = 0;
    GPHASH_CUDA(cudaEventElapsedTime(&ms, a, b));
    return ms / 1e3;
  }

  // A host-driven chunk between its two halves (execute runs both at once; submit leaves it here
  // until the caller waits or the table's next call comes).
  struct ChunkInFlight {
    Batch b;
    size_t offset = 0, n = 0;
    Staged staged;
    BatchView bv{};
    std::chrono::steady_clock::time_point launched;
  };

  // execute: the host drives the slow path between the parallel pass and the copy-out.
  void execute_chunk(const Batch& b, size_t offset, size_t n) {
    ChunkInFlight c = begin_chunk(b, offset, n);
    end_chunk(c);
  }

  // Everything up to the first wait: staging, the parallel pass and, for a staged batch, the copy
  // of its outputs.
  ChunkInFlight begin_chunk(const Batch& b, size_t offset, size_t n) {
    const cudaStream_t stream = batch_stream_;
    ChunkInFlight c{b, offset, n};
    const bool search_only = is_search_only(b, offset, n);
    prepare_batch(n, stream, /*upload=*/false);
    c.bv = stage(b, offset, n, search_only, stream, &c.staged);
    if (!c.staged.out_bytes) upload_counters(stream);
    const bool distinct_keys = c.staged.out_bytes && !search_only && !may_repeat_a_key(b, offset, n);
    c.launched = std::chrono::steady_clock::now();  // a staged batch is timed on the host (no events)
    launch_parallel_pass(c.bv, search_only, ops_unread(b), /*host_waits=*/true, c.staged.out_bytes != 0, distinct_keys,
                         stream);
    if (c.staged.out_bytes) copy_staged_outputs(c.staged, stream);
    return c;
  }

  // The rest: one wait for the counters and, for a staged batch, its outputs (needed again only if
  // the slow path runs), the slow path, the outputs.
  void end_chunk(ChunkInFlight& c) {
    const cudaStream_t stream = batch_stream_;
    const Batch& b = c.b;
    const Staged& staged = c.staged;
    if (staged.out_bytes) {
      GPHASH_CUDA(cudaStreamSynchronize(stream));
      take_staged_counters();
    } else {
      read_counters(stream);
    }
    const bool slow = host_counters_.get()->pending != 0;
    double slow_seconds = 0;
    if (slow) {
      const auto slow0 = std::chrono::steady_clock::now();
      slow_path(c.bv, stream);
      slow_seconds = seconds_since(slow0);
      if (staged.out_bytes) {
        copy_staged_outputs(staged, stream);
        read_counters(stream);
      }
    }
    if (b.memory != MemorySpace::kDevice) {
      if (staged.out_bytes) {
        unpack_staged_outputs(b, c.offset, c.n, staged);
      } else {
        GPHASH_CUDA(cudaMemcpyAsync(b.status + c.offset, c.bv.status, c.n, cudaMemcpyDeviceToHost, stream));
        if (b.values_out)
          GPHASH_CUDA(cudaMemcpyAsync(static_cast<std::byte*>(b.values_out) + c.offset * dt_.value_width, c.bv.values_out,
                                      c.n * dt_.value_width, cudaMemcpyDeviceToHost, stream));
        // The final counters and the outputs: the batch is acknowledged after this.
        read_counters(stream);
      }
    }
    // Timing events cost a small batch 6-11 us (H200, gpu_bench --sections small's floor): a staged
    // batch counts the host's time from its launch to its results as kernel time, an upper bound
    // (for a submitted batch it includes the caller's work until it waited).
    stats_.last_plan_seconds = staged.out_bytes ? 0 : elapsed(start_, planned_);
    stats_.last_kernel_seconds = staged.out_bytes ? seconds_since(c.launched) - slow_seconds : elapsed(planned_, ran_);
    stats_.last_slow_seconds = slow_seconds;
    stats_.last_batch_device_seconds = stats_.last_plan_seconds + stats_.last_kernel_seconds + stats_.last_slow_seconds;
    items_ = static_cast<uint64_t>(static_cast<long long>(items_) + host_counters_.get()->item_delta);
    reserve_growth_ahead();
    if (dt_.has_heap) {
      settle_heap(stream);
      GPHASH_CUDA(cudaStreamSynchronize(stream));
    }
  }

  // A host-mapped table's next level and heap chunk get their pool pages on a thread of their own
  // once it is half way to needing them (TableMeta::reserve_growth_ahead); in GPU memory the
  // growth is GPU memory. H200, LOAD of 16.8 M items (32-byte keys and values) into a table made
  // for 84 K (8 resizes, 7 heap growths), pool in /dev/shm, against the same build without it:
  // batches of 2^20 19.1, 22.3 against 16.8, 15.3 M/s end to end, 2^16 18.7 against 14.2; the
  // growths' time 0.47-0.57 s against 0.74-0.83 (bench/results/2026-12-02-round-trip).
  void reserve_growth_ahead() {
    if (gpu_memory_ || !options_.auto_resize || pool_.read_only()) return;
    meta_.reserve_growth_ahead(items_, options_.max_load_factor);
  }

  // The submitted chunk, if any, finished (called with mutex_ held, first thing in every call that
  // uses the table). A failure leaves the table failed, as an asynchronous batch's does.
  void finish_submitted() {
    if (!submitted_) return;
    ChunkInFlight c = *submitted_;
    submitted_.reset();
    std::shared_ptr<SubmittedCompletion> done = std::move(submitted_done_);
    std::exception_ptr error;
    try {
      end_chunk(c);
    } catch (...) {
      error = std::current_exception();
      std::lock_guard lock(jobs_mutex_);
      if (!failure_) failure_ = error;
    }
    if (done) done->settle(error);
  }
  // No batch of this table in flight, submitted or asynchronous.
  void settle() {
    finish_submitted();
    wait_settled();
  }

  // execute_async: everything in stream order on the caller's stream; the host only grows the
  // table beforehand and settles afterwards.
  std::shared_ptr<Completion> enqueue_chunk(const Batch& b, size_t offset, size_t n, cudaStream_t stream) {
    settle();
    const bool search_only = is_search_only(b, offset, n);
    if (!search_only && !pool_.read_only()) {
      reserve_growth_ahead();
      reserve_cells(n);
      // A batch of n operations adds at most n items: grow now so that its inserts find room
      // (displacement in the stream handles the few that find their candidates full).
      while (options_.auto_resize && static_cast<double>(items_ + n) > options_.max_load_factor * static_cast<double>(slot_capacity())) {
        bool exhausted = false;
        try_grow(&GpuEngine::resize, &exhausted);
        if (exhausted) break;
      }
    }
    BatchView bv = stage(b, offset, n, search_only, stream);
    prepare_batch(n, stream);
    launch_parallel_pass(bv, search_only, ops_unread(b), /*host_waits=*/false, /*staged=*/false, /*distinct_keys=*/false,
                         stream);
    SlowPathFlags flags;
    flags.allow_displacement = options_.max_load_factor > 0;
    flags.table_exhausted = true;  // no host in the stream: what displacement cannot place fails
    flags.heap_exhausted = true;
    if (options_.gpu_kernels == GpuKernels::kWarp)
      slow_path_kernel<Access::kMirror><<<1, 32, 0, stream>>>(dt_, ctx_, bv, bv.pending, 0, kPendingCount, flags);
    else
      slow_path_kernel<Access::kDirect><<<1, 32, 0, stream>>>(dt_, ctx_, bv, bv.pending, 0, kPendingCount, flags);
    GPHASH_CUDA(cudaGetLastError());
    return hand_over(stream);
  }

  // The end of an asynchronous batch or a device session on the caller's stream: the counters'
  // read-back and the completion event; the completion thread settles the rest.
  std::shared_ptr<Completion> hand_over(cudaStream_t stream) {
    auto done = std::make_shared<GpuCompletion>();
    GPHASH_CUDA(cudaMemcpyAsync(host_counters_.get(), counters_, sizeof(BatchCounters), cudaMemcpyDeviceToHost, stream));
    GPHASH_CUDA(cudaEventRecord(done->event(), stream));
    last_done_ = done;
    {
      std::lock_guard lock(jobs_mutex_);
      job_ = done;
      busy_ = true;
    }
    jobs_cv_.notify_all();
    return done;
  }

  // The completion thread: once a batch is done, adds its item delta and puts its freed cells with
  // those waiting for the reserve. (It makes no allocation: those happen before a batch is enqueued.)
  void complete_jobs() {
    for (;;) {
      std::shared_ptr<GpuCompletion> job;
      {
        std::unique_lock lock(jobs_mutex_);
        jobs_cv_.wait(lock, [&] { return stopping_ || job_ != nullptr; });
        if (!job_) return;
        job = job_;
      }
      std::exception_ptr error;
      try {
        GPHASH_CUDA(cudaEventSynchronize(job->event()));
        stats_.displacements += host_counters_.get()->moves;
        items_ = static_cast<uint64_t>(static_cast<long long>(items_) + host_counters_.get()->item_delta);
        if (dt_.has_heap) {
          settle_heap(slow_stream_);
          GPHASH_CUDA(cudaStreamSynchronize(slow_stream_));
        }
      } catch (...) {
        error = std::current_exception();
        job->fail(error);
      }
      {
        std::lock_guard lock(jobs_mutex_);
        job_.reset();
        busy_ = false;
        if (error && !failure_) failure_ = error;
      }
      jobs_cv_.notify_all();
    }
  }

  // Waits (on the host) until no asynchronous batch is in flight. Rethrows a failure: the table is
  // then unusable (its pool stays dirty; the next open recovers it).
  void wait_settled(bool rethrow = true) const {
    std::unique_lock lock(jobs_mutex_);
    jobs_cv_.wait(lock, [&] { return !busy_; });
    if (rethrow && failure_) {
      try {
        std::rethrow_exception(failure_);
      } catch (const std::exception& e) {
        throw Error(ErrorCode::kTableFailed,
                    std::string("an earlier batch failed (") + e.what() +
                        "): this table cannot be used any more; reopen the pool, whose recovery restores a "
                        "consistent state with every acknowledged write");
      }
    }
  }

  void stop_worker() {
    {
      std::lock_guard lock(jobs_mutex_);
      stopping_ = true;
    }
    jobs_cv_.notify_all();
    if (worker_.joinable()) worker_.join();
  }

  // Free cells (stack and never-used) for `n` new values: grows the heap first if there are fewer.
  void reserve_cells(uint64_t n) {
    while (dt_.has_heap && available_cells() < n) {
      bool exhausted = false;
      try_grow(&GpuEngine::grow_heap, &exhausted);
      if (exhausted) break;
    }
  }

  // The batch's context: counters reset and the heap's free cells for up to `n` new values.
  // upload = false: the caller sends counters_init_ (a staged batch carries it, or upload_counters).
  void prepare_batch(uint64_t n, cudaStream_t stream, bool upload = true) {
    if (dt_.has_heap) {
      const uint64_t freed_capacity = 2 * n + 1024;
      freed_.reserve(freed_capacity);
      if (free_count_ + never_used_cells() < n) refill_reserve(stream);
      keep_cells(waiting_cells_, waiting_count_, waiting_count_ + freed_capacity, stream);
      ctx_.free_cells = free_cells_.get();
      ctx_.free_count = free_count_;
      ctx_.freed = freed_.get();
      ctx_.freed_capacity = freed_capacity;
    }
    BatchCounters* c = counters_init_.get();
    *c = BatchCounters{};
    c->fresh_next = fresh_next_;
    if (upload) upload_counters(stream);
  }
  void upload_counters(cudaStream_t stream) {
    GPHASH_CUDA(cudaMemcpyAsync(counters_, counters_init_.get(), sizeof(BatchCounters), cudaMemcpyHostToDevice, stream));
  }

  void read_counters(cudaStream_t stream) {
    GPHASH_CUDA(cudaMemcpyAsync(host_counters_.get(), counters_, sizeof(BatchCounters), cudaMemcpyDeviceToHost, stream));
    GPHASH_CUDA(cudaStreamSynchronize(stream));
  }

  // Sets counters_->repeats if the batch may repeat a key (kernels.cuh, RepeatCheck) and, with
  // `ops_unread`, plan_writes_ if it holds anything but searches. One pass up to kCheckInOnePassUpTo
  // operations (a set of at most 16 MB, in L2), two above. H200, 2^24 inserts in GPU memory: the
  // check took 1.23 ms in one pass, 0.55 in two.
  void check_for_repeats(const BatchView& bv, bool ops_unread, cudaStream_t stream) {
    const size_t n = bv.n;
    const bool one_pass = n <= kCheckInOnePassUpTo;
    // Entries of the exact set: twice the keys in one pass, four times the ~n/8 of the second.
    const uint64_t entries = std::max<uint64_t>(std::bit_ceil(one_pass ? 2 * n : n / 2), 1024);
    const uint64_t bits = one_pass ? 0 : std::bit_ceil(8 * n), bitmap_words = bits / 64;  // of 64 bits
    repeat_scratch_.reserve(entries + 2 * bitmap_words);
    GPHASH_CUDA(cudaMemsetAsync(repeat_scratch_.get(), 0, (entries + 2 * bitmap_words) * sizeof(uint64_t), stream));
    RepeatCheck c{nullptr, nullptr, 0, repeat_scratch_.get(), entries - 1, &counters_->repeats};
    uint32_t* const writes = ops_unread ? plan_writes_.get() : nullptr;
    if (!one_pass) {
      c.once = reinterpret_cast<uint32_t*>(repeat_scratch_.get() + entries);
      c.twice = c.once + 2 * bitmap_words;
      c.bit_mask = bits - 1;
      check_bits_kernel<<<blocks_for(n), kBlock, 0, stream>>>(dt_, bv.keys, n, bv.ops, writes, c);
    }
    check_exact_kernel<<<blocks_for(n), kBlock, 0, stream>>>(dt_, bv.keys, n, bv.ops, one_pass ? writes : nullptr, c);
    GPHASH_CUDA(cudaGetLastError());
  }

  // Sorts operation indices by hash prefix so all operations on one key are adjacent, in batch
  // order (the radix sort is stable), and each run goes to one warp; with `count_long_windows`
  // the windows for long_run_kernel are counted. With `check_repeats` the host first learns
  // whether the batch repeats a key, and one that does not is left unplanned. Returns whether the
  // batch was planned.
  bool plan(BatchView& bv, bool ops_unread, bool check_repeats, bool count_long_windows, cudaStream_t stream) {
    const size_t n = bv.n;
    // One graph launch instead of six: the plan of a host-mapped batch of 2^16 takes about 65 us
    // instead of 86 (see launch_plan_graph). Not where check_repeats already waited, nor in a stream
    // a caller is capturing into a graph of its own.
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    if (!check_repeats) GPHASH_CUDA(cudaStreamIsCapturing(stream, &capturing));
    const bool as_graph = !check_repeats && capturing == cudaStreamCaptureStatusNone;
    // A batch of searches the host could not see as one (launch_parallel_pass): the device decides,
    // after the sort.
    if (ops_unread && !as_graph) GPHASH_CUDA(cudaMemsetAsync(plan_writes_.get(), 0, sizeof(uint32_t), stream));
    if (check_repeats) {  // one wait: whether the batch repeats a key and, ops unread, whether it writes
      check_for_repeats(bv, ops_unread, stream);
      GPHASH_CUDA(cudaMemcpyAsync(&host_counters_.get()->repeats, &counters_->repeats, sizeof(int), cudaMemcpyDeviceToHost, stream));
      if (ops_unread) GPHASH_CUDA(cudaMemcpyAsync(host_plan_writes_.get(), plan_writes_.get(), sizeof(uint32_t), cudaMemcpyDeviceToHost, stream));
      GPHASH_CUDA(cudaStreamSynchronize(stream));
      const bool writes = !ops_unread || *host_plan_writes_.get();
      if (!writes || !host_counters_.get()->repeats) return false;  // bv.sort_keys and bv.perm stay null
    }
    prefix_in_.reserve(n), prefix_out_.reserve(n), index_in_.reserve(n), index_out_.reserve(n);
    size_t temp = 0;
    plan_sort_pairs(nullptr, temp, prefix_in_.get(), prefix_out_.get(), index_in_.get(), index_out_.get(), n, !gpu_memory_, stream);
    sort_temp_.reserve(temp);
    count_long_windows = count_long_windows && n >= kLongRunWindow;
    uint32_t* const writes = ops_unread ? plan_writes_.get() : nullptr;
    const bool by_bucket = !gpu_memory_ && mapped_bucket_order_;
    // The plan's launches after the plan kernel (the memset before it only in a graph).
    auto rest = [&](cudaStream_t s) {
      plan_sort_pairs(sort_temp_.get(), temp, prefix_in_.get(), prefix_out_.get(), index_in_.get(), index_out_.get(), n, !gpu_memory_,
                      s);
      if (ops_unread || count_long_windows) {
        finish_plan_kernel<<<blocks_for(n), kBlock, 0, s>>>(prefix_out_.get(), n, writes,
                                                            count_long_windows ? &counters_->long_windows : nullptr);
        GPHASH_CUDA(cudaGetLastError());
      }
    };
    if (as_graph) {
      launch_plan_graph(bv, n, writes, by_bucket, count_long_windows, rest, stream);
    } else {
      plan_kernel<<<blocks_for(n), kBlock, 0, stream>>>(dt_, bv.keys, n, prefix_in_.get(), index_in_.get(), bv.ops, writes,
                                                        by_bucket);
      GPHASH_CUDA(cudaGetLastError());
      rest(stream);
    }
    bv.sort_keys = prefix_out_.get();
    bv.perm = index_out_.get();
    bv.regroup_scratch = index_in_.get();
    return true;
  }

  // The plan's launches (memset, plan kernel, the sort's four kernels, finish_plan_kernel) as one
  // CUDA graph, captured on a private stream once per size, buffers and flags; each batch sets the
  // plan kernel's arguments (its keys, the table's view) and launches the graph. H200, host-mapped,
  // 32-byte keys and values, complete cache, YCSB Zipf 0.99 at 2^16: the launch gaps between the
  // plan's kernels were most of what it saves (bench/results/2026-11-30-plan-graph).
  struct PlanGraph {
    size_t n = 0;
    const void* buffers[7] = {};
    bool flags[3] = {};
    cudaGraph_t graph = nullptr;  // kept while exec lives: plan_node is one of its nodes
    cudaGraphExec_t exec = nullptr;
    cudaGraphNode_t plan_node = nullptr;
    cudaKernelNodeParams params{};
  };
  PlanGraph plan_graph_;
  template <class Rest>
  void launch_plan_graph(const BatchView& bv, size_t n, uint32_t* writes, bool by_bucket, bool count_long_windows, Rest rest,
                         cudaStream_t stream) {
    const void* buffers[7] = {prefix_in_.get(), prefix_out_.get(), index_in_.get(), index_out_.get(), sort_temp_.get(),
                              writes, counters_};
    const bool flags[3] = {by_bucket, count_long_windows, writes != nullptr};
    PlanGraph& g = plan_graph_;
    if (!g.exec || g.n != n || !std::equal(buffers, buffers + 7, g.buffers) || !std::equal(flags, flags + 3, g.flags)) {
      if (g.exec) GPHASH_CUDA(cudaGraphExecDestroy(g.exec)), g.exec = nullptr;
      if (g.graph) GPHASH_CUDA(cudaGraphDestroy(g.graph)), g.graph = nullptr;
      cudaStream_t capture = capture_stream_;
      GPHASH_CUDA(cudaStreamBeginCapture(capture, cudaStreamCaptureModeThreadLocal));
      if (writes) GPHASH_CUDA(cudaMemsetAsync(writes, 0, sizeof(uint32_t), capture));
      plan_kernel<<<blocks_for(n), kBlock, 0, capture>>>(dt_, bv.keys, n, prefix_in_.get(), index_in_.get(), bv.ops, writes,
                                                         by_bucket);
      GPHASH_CUDA(cudaGetLastError());
      rest(capture);
      cudaGraph_t graph = nullptr;
      GPHASH_CUDA(cudaStreamEndCapture(capture, &graph));
      size_t count = 0;
      GPHASH_CUDA(cudaGraphGetNodes(graph, nullptr, &count));
      std::vector<cudaGraphNode_t> nodes(count);
      GPHASH_CUDA(cudaGraphGetNodes(graph, nodes.data(), &count));
      g.plan_node = nullptr;
      for (cudaGraphNode_t node : nodes) {
        cudaGraphNodeType type;
        GPHASH_CUDA(cudaGraphNodeGetType(node, &type));
        if (type != cudaGraphNodeTypeKernel) continue;
        cudaKernelNodeParams p{};
        GPHASH_CUDA(cudaGraphKernelNodeGetParams(node, &p));
        if (p.func == reinterpret_cast<void*>(plan_kernel<T>)) g.plan_node = node, g.params = p;
      }
      if (!g.plan_node) throw std::logic_error("plan graph: no plan kernel node");
      GPHASH_CUDA(cudaGraphInstantiate(&g.exec, graph, 0));
      g.graph = graph;
      g.n = n;
      std::copy(buffers, buffers + 7, g.buffers);
      std::copy(flags, flags + 3, g.flags);
    }
    T t = dt_;
    const uint64_t* keys = bv.keys;
    size_t count = n;
    uint32_t* prefix = prefix_in_.get();
    uint32_t* index = index_in_.get();
    const uint8_t* ops = bv.ops;
    uint32_t* w = writes;
    bool bb = by_bucket;
    void* args[] = {&t, &keys, &count, &prefix, &index, &ops, &w, &bb};
    cudaKernelNodeParams p = g.params;
    p.kernelParams = args;
    p.extra = nullptr;
    GPHASH_CUDA(cudaGraphExecKernelNodeSetParams(g.exec, g.plan_node, &p));
    GPHASH_CUDA(cudaGraphLaunch(g.exec, stream));
  }

  void launch_batch(BatchView bv, bool inline_serial, cudaStream_t stream) {
    switch (options_.gpu_kernels) {
      case GpuKernels::kWarp: {
        const bool beside = launch_long_runs<Access::kMirror>(bv, stream);
        if (inline_serial) {  // host-mapped batches but small planned ones (batch_kernel, launch_parallel_pass say why)
          batch_kernel<Access::kMirror, T, true><<<blocks_for(bv.n), kBlock, 0, stream>>>(dt_, ctx_, bv);
        } else {
          batch_kernel<Access::kMirror, T, false><<<blocks_for(bv.n), kBlock, 0, stream>>>(dt_, ctx_, bv);
          GPHASH_CUDA(cudaGetLastError());
          serial_kernel<Access::kMirror><<<serial_grid(serial_kernel<Access::kMirror, T>, bv.n), kBlock, 0, stream>>>(dt_, ctx_, bv);
        }
        join_long_runs<Access::kMirror>(bv, beside, stream);
        break;
      }
      case GpuKernels::kWarpDirect: {  // a comparison kernel: one variant
        const bool beside = launch_long_runs<Access::kDirect>(bv, stream);
        batch_kernel<Access::kDirect, T, false><<<blocks_for(bv.n), kBlock, 0, stream>>>(dt_, ctx_, bv);
        GPHASH_CUDA(cudaGetLastError());
        serial_kernel<Access::kDirect><<<serial_grid(serial_kernel<Access::kDirect, T>, bv.n), kBlock, 0, stream>>>(dt_, ctx_, bv);
        join_long_runs<Access::kDirect>(bv, beside, stream);
        break;
      }
      case GpuKernels::kThread:
        thread_batch_kernel<<<blocks_for(bv.n), kBlock, 0, stream>>>(dt_, ctx_, bv);
        break;
    }
    GPHASH_CUDA(cudaGetLastError());
  }

  // long_run_kernel, where a batch may hold a run that covers a long-run window (it ends at once if
  // the plan counted none). In GPU memory, and for host-mapped batches from kLongRunsBesideMappedFrom
  // operations, on long_stream_ beside the batch and serial passes, a block per run (whole_runs):
  // launched first and at a higher priority, so its blocks (a whole SM each) find the SMs free,
  // and those that hold no run leave them to the batch kernel at once. H200, YCSB Zipf 0.99, 16.8
  // M items, against the same build in stream order (bench/results/2026-11-30-long-runs-beside):
  // GPU memory, 8-byte keys, 2^20 B 1,118 -> 1,575 M ops/s of device time, A 1,149 -> 1,674;
  // host-mapped, 32-byte keys, complete cache, 2^20 B 604 -> 701, A 384-392 -> 387-437; but at
  // 2^16 host-mapped A loses a fifth beside (173-181 -> 135-144, B 292-300 -> 293-319: bench/
  // results/2026-11-30-long-runs-choice), so smaller host-mapped batches keep the stream order,
  // where the kernel shares a run among blocks, a block per window (2026-11-30-long-windows).
  // Choosing the order per batch by measuring both (8 batches of each every 272) kept B's gain
  // and lost 6% of A: not kept. Returns whether it was launched beside; join_long_runs then
  // makes `stream` wait for it, or launches it in stream order.
  template <Access A>
  bool launch_long_runs(BatchView& bv, cudaStream_t stream) {
    if (!bv.sort_keys || bv.n < kLongRunWindow || (!gpu_memory_ && bv.n < kLongRunsBesideMappedFrom)) return false;
    bv.long_runs_beside = true;  // for the batch passes launched after it (is_long_run)
    GPHASH_CUDA(cudaEventRecord(long_runs_start_, stream));
    GPHASH_CUDA(cudaStreamWaitEvent(long_stream_, long_runs_start_));
    launch_long_run_kernel<A>(bv, long_stream_, /*whole_runs=*/true);
    GPHASH_CUDA(cudaEventRecord(long_runs_done_, long_stream_));
    return true;
  }
  template <Access A>
  void join_long_runs(const BatchView& bv, bool beside, cudaStream_t stream) {
    if (beside) {
      GPHASH_CUDA(cudaStreamWaitEvent(stream, long_runs_done_));
    } else if (bv.sort_keys && bv.n >= kLongRunWindow) {
      GPHASH_CUDA(cudaGetLastError());
      launch_long_run_kernel<A>(bv, stream, /*whole_runs=*/false);
    }
  }
  template <Access A>
  void launch_long_run_kernel(const BatchView& bv, cudaStream_t stream, bool whole_runs) {
    constexpr int block = kLongRunWarps * 32;
    if (++long_windows_epoch_ == 0) ++long_windows_epoch_;  // 0 marks records never written
    long_run_kernel<A><<<grid_of(long_run_kernel<A, T>, block, long_run_blocks_), block, 0, stream>>>(
        dt_, ctx_, bv, long_windows_.get(), long_windows_epoch_, whole_runs);
    GPHASH_CUDA(cudaGetLastError());
  }

  // serial_kernel's grid: as many blocks as the GPU holds at once, but no more warps than the batch
  // has operations (each run holds one at least; warps take runs from a counter, so any grid does
  // all of them). A small batch then leaves the other SMs to the batches that other tables (the
  // server's partitions) run on the GPU at the same time, which a grid over the whole GPU held up.
  template <class Kernel>
  unsigned serial_grid(Kernel kernel, size_t n) {
    constexpr size_t warps_per_block = kBlock / 32;
    const size_t enough = std::max<size_t>(1, (n + warps_per_block - 1) / warps_per_block);
    return static_cast<unsigned>(std::min<size_t>(grid_of(kernel, kBlock, serial_blocks_), enough));
  }

  // The grid of a kernel whose blocks take work from a shared counter until none is left: as many
  // blocks as the GPU holds at once (computed once, into `blocks`).
  template <class Kernel>
  unsigned grid_of(Kernel kernel, int block, unsigned& blocks) {
    if (!blocks) {
      int device = 0, sms = 0, per_sm = 0;
      GPHASH_CUDA(cudaGetDevice(&device));
      GPHASH_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
      GPHASH_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, block, 0));
      blocks = static_cast<unsigned>(sms) * static_cast<unsigned>(std::max(per_sm, 1));
    }
    return blocks;
  }

  // Finishes the runs the parallel pass handed over, on the engine's own stream. Few runs without
  // a free slot at a moderate load: one warp, alone, moves items aside for them (displacement).
  // Otherwise the table or heap grows and the runs go through a parallel pass again. When the
  // pool cannot grow, runs fail with kTableFull / kHeapFull one operation at a time.
  void slow_path(BatchView& bv, cudaStream_t stream) {
    SlowPathFlags flags;
    bool parallel_tried = false;
    int current = 0;  // pending_[current] holds the entries to finish
    uint64_t count = host_counters_.get()->pending;
    uint64_t need_slot = host_counters_.get()->pending_slot, need_cell = host_counters_.get()->pending_cell;
    while (count) {
      bool grew = false;
      if (need_cell && !flags.heap_exhausted) grew |= provide_cells(need_cell, bv.n, stream, &flags.heap_exhausted);
      const double load =
          static_cast<double>(items_ + host_counters_.get()->item_delta) / static_cast<double>(slot_capacity());
      // Without resizing, displacement is the only way: it takes any number of runs then.
      const bool displace = need_slot && !flags.table_exhausted &&
                            (!options_.auto_resize || (need_slot <= kSerialLimit && load < options_.max_load_factor));
      if (need_slot && !displace && !flags.table_exhausted) {
        if (options_.auto_resize)
          grew |= try_grow(&GpuEngine::resize, &flags.table_exhausted);
        else
          flags.table_exhausted = true;
      }
      // Runs that waited for the cells just provided rerun in parallel first, so the one warp below
      // takes only what still needs a slot. It used to take them all: a 2^20 LOAD batch that ran out
      // of heap cells beside a few full candidate sets spent 2.4 s in the one warp (H200, 32-byte
      // values, gpu_bench --sections gpu-batches from a small table).
      if (displace && need_cell && grew) {
        rerun_pending(bv, current, count, count, flags, stream);
        need_slot = host_counters_.get()->pending_slot;
        need_cell = host_counters_.get()->pending_cell;
        continue;
      }
      // In GPU memory (no maintenance record: a crash loses the table anyway) runs that only need
      // slots first displace in parallel, a warp per run (WarpOps::displace); runs of several keys
      // and what still finds no slot then go to the one warp. At load 0.9 the one warp alone took
      // 24 of the last insert batch's 29 ms (H100, gpu_bench --sections hbm).
      if (displace && !parallel_tried && gpu_memory_ && options_.gpu_kernels == GpuKernels::kWarp && !need_cell) {
        parallel_tried = true;
        flags.allow_displacement = flags.parallel_moves = true;
        rerun_pending(bv, current, count, count, flags, stream);
        flags.allow_displacement = flags.parallel_moves = false;
        need_slot = host_counters_.get()->pending_slot;
        need_cell = host_counters_.get()->pending_cell;
        continue;
      }
      if (displace) {
        // One warp, in order; it stops at a run it cannot serve and says why.
        flags.allow_displacement = true;
        launch_slow(bv, pending_[current].get(), 0, count, flags, stream);
        flags.allow_displacement = false;
        const auto result = static_cast<RunResult>(host_counters_.get()->slow_result);
        if (result == RunResult::kDone) break;
        // Keep the unfinished entries [stopped_at, count), moved to the front of the other buffer,
        // and let the loop grow what they need. The move is in stream order: it once went through
        // the host with cudaMemcpy, whose copy from pageable memory may still be in flight when it
        // returns and is not ordered with this non-blocking stream; under GPU contention the rerun
        // read the old entries, ran finished runs twice and lost the unfinished ones.
        const uint64_t first = host_counters_.get()->stopped_at;
        count -= first;
        GPHASH_CUDA(cudaMemcpyAsync(pending_[1 - current].get(), pending_[current].get() + first, count * 4,
                                    cudaMemcpyDeviceToDevice, stream));
        current = 1 - current;
        need_slot = result == RunResult::kNeedSlot ? count : 0;
        need_cell = result == RunResult::kNeedCell ? count : 0;
        if (need_slot) {  // displacement found nothing to move: grow instead
          if (!options_.auto_resize) flags.table_exhausted = true;
          else try_grow(&GpuEngine::resize, &flags.table_exhausted);
          need_slot = 0;
          need_cell = 0;
        }
        grew = true;
      }
      if (!grew && !flags.table_exhausted && !flags.heap_exhausted) break;  // cannot happen; avoids a spin
      // Again in parallel; what still fails is collected in the other buffer. Runs waiting only
      // for cells rerun no more at a time than there are cells (a heap that could not grow):
      // the others are carried to the next round untouched, so the rounds stay linear.
      uint64_t run_now = count;
      if (need_cell && !need_slot && !flags.heap_exhausted) run_now = std::min(count, std::max<uint64_t>(available_cells(), 1));
      rerun_pending(bv, current, count, run_now, flags, stream);
      need_slot = host_counters_.get()->pending_slot;
      need_cell = host_counters_.get()->pending_cell;
    }
    stats_.displacements += host_counters_.get()->moves;
  }

  // Runs the first `run_now` of the `count` entries of pending_[current] again, a warp per run;
  // the rest are carried over untouched (they wait for cells). What still fails is collected in
  // the other buffer, which becomes current, and `count` becomes its size.
  void rerun_pending(BatchView& bv, int& current, uint64_t& count, uint64_t run_now, const SlowPathFlags& flags,
                     cudaStream_t stream) {
    const int next = 1 - current;
    bv.pending = pending_[next].get();
    const uint64_t carried = count - run_now;
    if (carried)
      GPHASH_CUDA(cudaMemcpyAsync(pending_[next].get(), pending_[current].get() + run_now, carried * 4,
                                  cudaMemcpyDeviceToDevice, stream));
    unsigned long long* waiting = reinterpret_cast<unsigned long long*>(&counters_init_.get()->pending);
    waiting[0] = carried, waiting[1] = 0, waiting[2] = carried;  // pending, pending_slot, pending_cell
    GPHASH_CUDA(cudaMemcpyAsync(&counters_->pending, waiting, 3 * sizeof(unsigned long long), cudaMemcpyHostToDevice, stream));
    launch_rerun(bv, pending_[current].get(), run_now, flags, stream);
    read_counters(stream);
    current = next;
    count = host_counters_.get()->pending;
  }

  // Runs a growth step; a pool (or GPU memory) that cannot grow sets `exhausted` instead of
  // failing the batch.
  bool try_grow(void (GpuEngine::*grow)(), bool* exhausted) {
    try {
      (this->*grow)();
      return true;
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kNoSpace) throw;
      *exhausted = true;
      return false;
    }
  }

  void launch_slow(const BatchView& bv, uint32_t* entries, uint64_t first, uint64_t count, const SlowPathFlags& flags,
                   cudaStream_t stream) {
    if (options_.gpu_kernels == GpuKernels::kWarp)
      slow_path_kernel<Access::kMirror><<<1, 32, 0, stream>>>(dt_, ctx_, bv, entries, first, count, flags);
    else
      slow_path_kernel<Access::kDirect><<<1, 32, 0, stream>>>(dt_, ctx_, bv, entries, first, count, flags);
    GPHASH_CUDA(cudaGetLastError());
    read_counters(stream);
  }

  void launch_rerun(const BatchView& bv, const uint32_t* entries, uint64_t count, const SlowPathFlags& flags,
                    cudaStream_t stream) {
    const unsigned blocks = blocks_for(count * 32);  // a warp per run
    if (options_.gpu_kernels == GpuKernels::kWarp)
      rerun_kernel<Access::kMirror><<<blocks, kBlock, 0, stream>>>(dt_, ctx_, bv, entries, count, flags);
    else
      rerun_kernel<Access::kDirect><<<blocks, kBlock, 0, stream>>>(dt_, ctx_, bv, entries, count, flags);
    GPHASH_CUDA(cudaGetLastError());
  }

  uint64_t slot_capacity() const {
    uint64_t buckets = 0;
    for (uint32_t l = dt_.bottom; l < dt_.bottom + T::L; ++l) buckets += format::level_buckets(l);
    return buckets * T::S;
  }

  // ---- resize and heap growth ---------------------------------------------------------------

  void resize() {
    const auto t0 = std::chrono::steady_clock::now();
    cache_.drop(dt_);  // bucket ids change with the levels
    const uint32_t new_top = dt_.bottom + T::L;
    if (new_top > format::kMaxLevel)
      throw Error(ErrorCode::kNoSpace, "table cannot grow past level " + std::to_string(format::kMaxLevel));
    const bool mirror = options_.gpu_kernels == GpuKernels::kWarp;
    // GPU memory first (the new mirror, or the new level in GPU memory): if it is full, nothing of
    // the pool has changed yet and the inserts fail with kTableFull.
    DeviceBuffer<uint8_t> upper_tags;
    if (mirror) upper_tags.resize(format::level_buckets(dt_.bottom + 1) * dt_.family_bytes);
    if (gpu_memory_) {
      const uint64_t bytes = format::level_buckets(new_top) * T::Layout::kBytes;
      DeviceBuffer<std::byte> level(bytes);
      GPHASH_CUDA(cudaMemsetAsync(level.get(), 0, bytes, slow_stream_));
      device_levels_[new_top] = std::move(level);
      dt_.level[new_top] = device_levels_[new_top].get();
      rehash(dt_.bottom, mirror ? &upper_tags : nullptr);
      device_levels_[dt_.bottom].release();
      dt_.level[dt_.bottom] = nullptr;
      ++dt_.bottom;
    } else {
      meta_.begin_resize();
      dt_.level[new_top] = mapping_.map(meta_.header().gphash.level_offset[new_top], format::level_bytes(meta_.header(), new_top));
      rehash_and_finish(mirror ? &upper_tags : nullptr);
    }
    if (!mirror) rebuild_mirror_and_counts(/*count=*/false);
    ++stats_.resizes;
    stats_.last_resize_seconds = seconds_since(t0);
    stats_.resize_seconds += stats_.last_resize_seconds;
  }

  // Resize step 2 on the pool (also resumes an interrupted one), then the header's last step.
  void rehash_and_finish(DeviceBuffer<uint8_t>* upper_tags) {
    const uint32_t old_bottom = dt_.bottom;
    const uint32_t new_top = old_bottom + T::L;
    if (!dt_.level[new_top])
      dt_.level[new_top] = mapping_.map(meta_.header().gphash.level_offset[new_top], format::level_bytes(meta_.header(), new_top));
    cover_pool();  // the new level is pool memory the kernels now write
    rehash(old_bottom, upper_tags);
    mapping_.unmap(meta_.header().gphash.level_offset[old_bottom]);
    dt_.level[old_bottom] = nullptr;
    meta_.finish_resize();
    ++dt_.bottom;
  }

  // Resize step 2. With a mirror (`upper_tags`, allocated by the caller): it is first built for the
  // table one level up (the new top level is empty), then items move through it, claims in GPU
  // memory; the result is also the mirror of the resized table. Without one (other kernel
  // variants, or recovery before any mirror exists), claims are CAS of the pool's state words.
  void rehash(uint32_t old_bottom, DeviceBuffer<uint8_t>* upper_tags) {
    const auto t0 = std::chrono::steady_clock::now();
    T upper = dt_;
    upper.bottom = old_bottom + 1;
    upper.tags = nullptr;
    reset_scan();
    const unsigned blocks = blocks_for(format::level_buckets(old_bottom) * T::S);
    if (upper_tags) {
      GPHASH_CUDA(cudaMemsetAsync(upper_tags->get(), 0, upper_tags->size(), slow_stream_));
      upper.tags = upper_tags->get();
      for (uint32_t l = upper.bottom; l < upper.bottom + T::L - 1; ++l)
        scan_level_kernel<<<blocks_for(format::level_buckets(l) * T::S), kBlock, 0, slow_stream_>>>(upper, l, false, true,
                                                                                                    nullptr, scan_.get());
      reset_scan();
      rehash_mirror_kernel<<<blocks, kBlock, 0, slow_stream_>>>(upper, old_bottom, scan_.get());
      tags_ = std::move(*upper_tags);
      dt_.tags = tags_.get();
    } else {
      rehash_kernel<<<blocks, kBlock, 0, slow_stream_>>>(upper, old_bottom, scan_.get());
    }
    GPHASH_CUDA(cudaGetLastError());
    read_scan();
    if (const uint64_t left = host_scan_.get()->corrupt) place_by_displacement(upper, old_bottom, left);
    stats_.rehash_seconds += seconds_since(t0);
  }

  // The items the rehash kernels left below (every candidate slot above them full), placed one at
  // a time after moving an item aside (list_items_kernel, rehash_displace_kernel). Rare: a
  // resumed resize of a nearly full small table; the CPU engine's rehash does the same.
  void place_by_displacement(const T& upper, uint32_t old_bottom, uint64_t left) {
    DeviceBuffer<uint64_t> list(left);
    reset_scan();
    list_items_kernel<<<blocks_for(format::level_buckets(old_bottom) * T::S), kBlock, 0, slow_stream_>>>(
        upper, old_bottom, list.get(), left, scan_.get());
    if (upper.tags)
      rehash_displace_kernel<Access::kMirror><<<1, 32, 0, slow_stream_>>>(upper, ctx_, old_bottom, list.get(), left, scan_.get());
    else
      rehash_displace_kernel<Access::kDirect><<<1, 32, 0, slow_stream_>>>(upper, ctx_, old_bottom, list.get(), left, scan_.get());
    GPHASH_CUDA(cudaGetLastError());
    read_scan();
    const ScanCounters& r = *host_scan_.get();
    const uint64_t unplaced = r.corrupt + (r.items > left ? r.items - left : 0);
    if (unplaced)
      throw Error(ErrorCode::kCorruptTable,
                  "resize could not place " + std::to_string(unplaced) + " items of level " + std::to_string(old_bottom) +
                      " even by displacement" +
                      (gpu_memory_ ? std::string("; the table in GPU memory is lost") : std::string("; the pool stays in resize state")));
  }

  void grow_heap() {
    if (heap_chunks_ >= format::kMaxHeapChunks) throw Error(ErrorCode::kNoSpace, "the value heap has its maximum size");
    const auto t0 = std::chrono::steady_clock::now();
    const uint64_t cells = dt_.heap.geometry.chunk_cells(heap_chunks_);
    if (gpu_memory_) {
      device_chunks_[heap_chunks_].resize(cells * dt_.heap.cell_size);  // kNoSpace when GPU memory is full
      dt_.heap.chunk[heap_chunks_] = device_chunks_[heap_chunks_].get();
    } else {
      meta_.grow_heap();
      dt_.heap.chunk[heap_chunks_] =
          mapping_.map(meta_.header().gphash.heap_chunk_offset[heap_chunks_], cells * dt_.heap.cell_size);
      cover_pool();
    }
    ++heap_chunks_;
    dt_.heap.capacity += cells;
    reused_freed_cells_ = false;
    ++stats_.heap_grows;
    stats_.heap_grow_seconds += seconds_since(t0);
  }

  // Room for `capacity` cells in `buffer`, keeping its first `used`.
  static void keep_cells(DeviceBuffer<uint64_t>& buffer, uint64_t used, uint64_t capacity, cudaStream_t stream) {
    if (capacity <= buffer.size()) return;
    DeviceBuffer<uint64_t> bigger(std::max<uint64_t>(capacity, 2 * buffer.size()));
    if (used) GPHASH_CUDA(cudaMemcpyAsync(bigger.get(), buffer.get(), used * 8, cudaMemcpyDeviceToDevice, stream));
    GPHASH_CUDA(cudaStreamSynchronize(stream));  // the old buffer is freed on return
    buffer = std::move(bigger);
  }

  // Free cells, on the host's count (current after settle_heap).
  uint64_t never_used_cells() const { return dt_.heap.capacity - std::min(fresh_next_, dt_.heap.capacity); }
  uint64_t available_cells() const { return free_count_ + waiting_count_ + never_used_cells(); }

  // The freed cells that waited (waiting_cells_) join the reserve, sorted by address, below what is
  // left of it (taken first). Kernels take cells from the reserve's top, then never-used ones in
  // order. Why freed cells wait: a host-mapped heap's cells are host pages the GPU must translate,
  // and cells taken in the order they were freed (the old values of random keys) cost a translation
  // each; gathered until the reserve and the never-used cells could fall short, they are many, and
  // consecutive new values share pages (docs/PERFORMANCE.md, "Freed cells come back in address
  // order").
  void refill_reserve(cudaStream_t stream) {
    if (!waiting_count_) return;
    const uint64_t p = waiting_count_, r = free_count_;
    keep_cells(waiting_cells_, p, p + r, stream);
    keep_cells(free_cells_, r, p + r, stream);
    // The reserve's rest moves behind the waiting cells while free_cells_ serves as a sort buffer.
    if (r) GPHASH_CUDA(cudaMemcpyAsync(waiting_cells_.get() + p, free_cells_.get(), r * 8, cudaMemcpyDeviceToDevice, stream));
    cub::DoubleBuffer<uint64_t> cells(waiting_cells_.get(), free_cells_.get());
    const int bits = std::bit_width(dt_.heap.capacity);
    size_t temp = 0;
    GPHASH_CUDA(cub::DeviceRadixSort::SortKeysDescending(nullptr, temp, cells, p, 0, bits, stream));
    sort_temp_.reserve(temp);
    GPHASH_CUDA(cub::DeviceRadixSort::SortKeysDescending(sort_temp_.get(), temp, cells, p, 0, bits, stream));
    if (cells.Current() == waiting_cells_.get())  // descending: the top, taken first, is the lowest cell
      GPHASH_CUDA(cudaMemcpyAsync(free_cells_.get(), waiting_cells_.get(), (p + r) * 8, cudaMemcpyDeviceToDevice, stream));
    else if (r)
      GPHASH_CUDA(cudaMemcpyAsync(free_cells_.get() + p, waiting_cells_.get() + p, r * 8, cudaMemcpyDeviceToDevice, stream));
    free_count_ = p + r;
    waiting_count_ = 0;
  }

  // In the slow path, for runs that found no free cell. The cells this batch freed so far join the
  // reserve at once (safe: the parallel pass is over and no pending run has freed anything),
  // and the heap grows until it could serve the whole batch's demand (the cells it had, plus what
  // its runs still need): a batch that writes more values than the free cells would otherwise
  // rerun its late runs every time. Measured on the H100 (YCSB A, 128-byte values, 4 M records,
  // batches of 2^20): rounds of reruns took 63% of the time; one rerun per batch 49-66%; after one
  // heap growth none. The cost is heap room for one batch's new values (the heap doubles). A few
  // runs that the cells this batch freed can serve take those instead, once between growths:
  // inserts that lost a claim and released their cell, in a heap sized to its last cell, once
  // doubled a 512 MiB heap for a few hundred values (H200, presized LOAD of 16.8 M 32-byte values:
  // 0.29 s of 0.55); a workload short of cells batch after batch still grows at the second. True if
  // a rerun can find cells; sets `exhausted` if none are free and the heap cannot grow.
  bool provide_cells(uint64_t need, uint64_t batch_ops, cudaStream_t stream, bool* exhausted) {
    const uint64_t demand = available_cells() + need;  // the host's counts are still the batch's start
    read_counters(stream);
    settle_heap(stream);
    refill_reserve(stream);
    ctx_.free_cells = free_cells_.get();
    ctx_.free_count = free_count_;
    unsigned long long* restart = reinterpret_cast<unsigned long long*>(counters_init_.get());
    restart[0] = 0, restart[1] = fresh_next_, restart[2] = 0;  // cells_taken, fresh_next, cells_freed
    GPHASH_CUDA(cudaMemcpyAsync(counters_, restart, 3 * sizeof(unsigned long long), cudaMemcpyHostToDevice, stream));
    if (!reused_freed_cells_ && need <= std::max<uint64_t>(batch_ops / 64, 1) && available_cells() >= need) {
      reused_freed_cells_ = true;
      return true;
    }
    reserve_cells(demand);
    if (available_cells() == 0) *exhausted = true;
    return !*exhausted;
  }

  // After a batch: cells taken from the reserve are gone from its top, freed cells wait.
  void settle_heap(cudaStream_t stream) {
    const BatchCounters& c = *host_counters_.get();
    const uint64_t freed = std::min<uint64_t>(c.cells_freed, ctx_.freed_capacity);  // prepare_batch made room
    if (freed)
      append_cells_kernel<<<blocks_for(freed), kBlock, 0, stream>>>(waiting_cells_.get(), waiting_count_, freed_.get(), freed);
    GPHASH_CUDA(cudaGetLastError());
    free_count_ -= std::min<uint64_t>(c.cells_taken, free_count_);
    waiting_count_ += freed;
    fresh_next_ = std::min<uint64_t>(c.fresh_next, dt_.heap.capacity);
  }

  // GPU-memory placement: writes the table back to the pool, into fresh extents, then one header
  // write switches to them, so a crash during the save leaves the previous saved state intact.
  void save_locked() {
    if (!gpu_memory_ || pool_.read_only()) return;
    GPHASH_CUDA(cudaStreamSynchronize(slow_stream_));
    const format::PoolHeader old = meta_.header();
    format::PoolHeader h = old;
    for (uint32_t l = 0; l <= format::kMaxLevel; ++l) h.gphash.level_offset[l] = 0;
    for (uint32_t l = dt_.bottom; l < dt_.bottom + T::L; ++l) {
      const uint64_t bytes = format::level_bytes(h, l);
      h.gphash.level_offset[l] = pool_.allocate_extent(h, bytes);
      GPHASH_CUDA(cudaMemcpy(pool_.base() + h.gphash.level_offset[l], dt_.level[l], bytes, cudaMemcpyDeviceToHost));
      pool_.dirty_pages().mark(h.gphash.level_offset[l], bytes);  // for the next snapshot
    }
    for (uint32_t c = 0; c < heap_chunks_; ++c) {
      const uint64_t bytes = dt_.heap.geometry.chunk_cells(c) * h.gphash.cell_size;
      h.gphash.heap_chunk_offset[c] = pool_.allocate_extent(h, bytes);
      GPHASH_CUDA(cudaMemcpy(pool_.base() + h.gphash.heap_chunk_offset[c], dt_.heap.chunk[c], bytes, cudaMemcpyDeviceToHost));
      pool_.dirty_pages().mark(h.gphash.heap_chunk_offset[c], bytes);
    }
    h.gphash.heap_chunk_count = heap_chunks_;
    h.gphash.bottom_level = dt_.bottom;
    h.gphash.resize_state = format::kResizeNone;
    h.item_count = items_;
    pool_.sync();
    pool_.write_header(h);
    for (uint32_t l = old.gphash.bottom_level; l <= format::top_level(old); ++l)
      pool_.release_extent(old.gphash.level_offset[l], format::level_bytes(old, l));
    for (uint32_t c = 0; c < old.gphash.heap_chunk_count; ++c)
      pool_.release_extent(old.gphash.heap_chunk_offset[c], dt_.heap.geometry.chunk_cells(c) * old.gphash.cell_size);
  }

  pool::Pool& pool_;
  TableMeta meta_;
  OpenOptions options_;
  bool gpu_memory_;
  gpm::PoolMapping mapping_;
  // One caller at a time enqueues, waits or reads the table's host state.
  mutable std::mutex mutex_;
  Stream batch_stream_;  // host batches (execute)
  Stream slow_stream_;   // table-wide passes (open, resize, export) and the completion thread
  Stream long_stream_{/*high_priority=*/true};  // launch_long_runs: long_run_kernel beside the batch kernel
  Stream capture_stream_;                       // launch_plan_graph captures the plan here (nothing runs on it)
  Event start_, planned_, ran_, counted_{false}, long_runs_start_{false}, long_runs_done_{false};
  Event legacy_done_{false};  // execute() of a batch in GPU memory: wait_for_legacy_stream
  std::optional<ChunkInFlight> submitted_;  // Table::submit's chunk between its halves
  std::shared_ptr<SubmittedCompletion> submitted_done_;
  // The batch counters sit between the inputs and the outputs of execute's small batches in one
  // device region, [inputs | counters | outputs], laid out alike in pinned host memory: a staged
  // batch goes in with its counters in one copy and comes out with them in one copy.
  static constexpr size_t kCountersBytes = 256;
  static_assert(sizeof(BatchCounters) <= kCountersBytes);
  DeviceBuffer<std::byte> io_;
  BatchCounters* counters_ = nullptr;  // in io_
  std::unique_ptr<PinnedBuffer<std::byte>> host_io_;  // made at the first staged batch
  PinnedBuffer<BatchCounters> host_counters_, counters_init_;
  DeviceBuffer<ScanCounters> scan_;
  PinnedBuffer<ScanCounters> host_scan_;
  T dt_{};
  BatchContext ctx_{};
  DeviceBuffer<std::byte> device_levels_[format::kMaxLevel + 1];
  DeviceBuffer<std::byte> device_chunks_[format::kMaxHeapChunks];
  uint32_t heap_chunks_ = 0;
  DeviceBuffer<uint8_t> tags_;
  DeviceBuffer<uint32_t> key_locks_;
  // Snapshots: the kernels' dirty-page bitmap (cover_pool) and its host copy (collect_marks).
  bool tracking_ = false;
  DeviceBuffer<uint32_t> dirty_bits_;
  std::vector<uint64_t> host_dirty_;
  DeviceBuffer<uint64_t> free_cells_, freed_, waiting_cells_;  // the reserve, a batch's freed cells, freed cells waiting
  uint64_t free_count_ = 0, waiting_count_ = 0, fresh_next_ = 0;
  bool reused_freed_cells_ = false;  // provide_cells served runs from freed cells since the heap last grew
  DeviceBuffer<uint64_t> keys_;
  DeviceBuffer<std::byte> values_, out_, sort_temp_;
  DeviceBuffer<uint8_t> ops_, status_;
  DeviceBuffer<uint32_t> prefix_in_, prefix_out_, index_in_, index_out_, pending_[2];
  DeviceBuffer<LongWindow> long_windows_;  // long_run_kernel's records, a window each
  uint32_t long_windows_epoch_ = 0;        // ... the last launch's
  DeviceBuffer<uint32_t> plan_writes_{1};  // plan(): whether a batch in GPU memory writes
  PinnedBuffer<uint32_t> host_plan_writes_;  // ... read by the host after a check
  DeviceBuffer<uint64_t> repeat_scratch_;  // check_for_repeats: the exact set of hashes, then the bitmaps
  unsigned repeat_streak_ = 0, unchecked_left_ = 0;  // launch_parallel_pass: checks that found repeats
  // Host-mapped tables: plans in bucket order, and large batches of searches sorted into it
  // (plan_kernel, launch_parallel_pass). GPHASH_PLAN_ORDER=hash restores the order of before
  // (2026-11-28) for comparisons in one run.
  bool mapped_bucket_order_ = [] {
    const char* o = std::getenv("GPHASH_PLAN_ORDER");
    return !(o && std::string(o) == "hash");
  }();
  std::vector<uint32_t> seen_on_host_;                 // may_repeat_a_key
  const uint64_t repeat_seed_ = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  unsigned serial_blocks_ = 0, long_run_blocks_ = 0;  // grid_of()
#if GPHASH_CRASH_POINTS
  DeviceBuffer<CrashCountdown> countdown_;
#endif
  uint64_t items_ = 0;
  EngineStats stats_;
  bool closed_ = false;
  bool session_open_ = false;
  std::shared_ptr<GpuCompletion> last_done_;
  // The completion thread and the one job it may have.
  mutable std::mutex jobs_mutex_;
  mutable std::condition_variable jobs_cv_;
  std::shared_ptr<GpuCompletion> job_;  // the asynchronous batch in flight
  bool busy_ = false, stopping_ = false;
  std::exception_ptr failure_;
  std::thread worker_;
  // Last, so it goes first: its loading stream may still read the pool's mapped memory.
  BucketCache<T> cache_;
};

// The engine for one shape and key width; each is instantiated in a translation unit of its own
// (src/engines/gpu/CMakeLists.txt).
template <int L, int H, int S, int KeyWidth>
std::unique_ptr<Engine> make_gpu_engine_instance(pool::Pool& pool, const OpenOptions& options) {
  return std::make_unique<GpuEngine<format::Shape<L, H, S>, KeyWidth>>(pool, options);
}

}  // namespace gphash::engine::gpu
