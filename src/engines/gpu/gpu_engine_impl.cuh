// The GPU engine's host side: maps the pool for the GPU (the GPM layer), plans and launches
// batches, runs the exclusive slow paths (displacement, resize, heap growth) and recovery.
// Instantiated per shape in gpu_engine_<shape>.cu, so the instantiations compile in parallel.
#pragma once

#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engines/common/move_record.h"
#include "engines/common/table_meta.h"
#include "engines/engine.h"
#include "engines/gpu/cuda_util.h"
#include "engines/gpu/kernels.cuh"
#include "gphash/config.h"
#include "pool/pool.h"

namespace gphash::engine::gpu {

inline constexpr size_t kMaxChunk = size_t{1} << 24;  // operations per launch sequence
inline constexpr uint64_t kSerialLimit = 256;         // runs the one-warp displacement path takes on
inline constexpr int kBlock = 256;

inline unsigned blocks_for(uint64_t n) { return static_cast<unsigned>((n + kBlock - 1) / kBlock); }

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

template <class ShapeT, int KeyWidth>
class GpuEngine final : public Engine {
  using T = DeviceTable<ShapeT, KeyWidth>;

 public:
  GpuEngine(pool::Pool& pool, const OpenOptions& options)
      : pool_(pool), meta_(pool), options_(options), gpu_memory_(options.placement == Placement::kGpuMemory) {
    const auto t0 = std::chrono::steady_clock::now();
    if (pool.kind() == pool::PoolKind::kFile)
      throw Error(ErrorCode::kNotMappable,
                  "the GPU cannot map pool " + pool.path() +
                      ": it is a file on a regular file system, whose shared mappings cudaHostRegister refuses. "
                      "Keep GPU pools in /dev/shm (a bare name), on hugetlbfs or device-DAX, or open this one "
                      "with the CPU engine");
    GPHASH_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    GPHASH_CUDA(cudaMalloc(&counters_, sizeof(BatchCounters)));
    GPHASH_CUDA(cudaMemsetAsync(counters_, 0, sizeof(BatchCounters), stream_));
    GPHASH_CUDA(cudaMallocHost(&host_counters_, sizeof(BatchCounters)));
    GPHASH_CUDA(cudaMalloc(&scan_, sizeof(ScanCounters)));
    GPHASH_CUDA(cudaMallocHost(&host_scan_, sizeof(ScanCounters)));
    for (cudaEvent_t* e : {&start_, &planned_, &ran_, &stop_}) GPHASH_CUDA(cudaEventCreate(e));
    if (const char* crash = std::getenv("GPHASH_GPU_CRASH_AFTER")) {  // crash-injection tests
      const unsigned long long after = std::strtoull(crash, nullptr, 10);
      GPHASH_CUDA(cudaMemcpyAsync(&counters_->crash_after, &after, sizeof after, cudaMemcpyHostToDevice, stream_));
    }

    const format::PoolHeader& h = meta_.header();
    if (format::has_value_checksums(h))
      throw Error(ErrorCode::kUnsupportedFeature,
                  "pool " + pool.path() + " has value checksums, which the GPU engine does not verify yet; open it "
                  "with the CPU engine");
    const bool dirty = h.clean_shutdown == 0;
    if (dirty && pool.read_only())
      throw Error(ErrorCode::kNeedsRecovery,
                  "pool " + pool.path() + " was not shut down cleanly; open it writable once so recovery can run");
    dt_ = T{};
    for (int j = 0; j < T::H; ++j) dt_.seed[j] = format::hash_seed_for(h.gphash.hash_seed, j);
    dt_.bottom = h.gphash.bottom_level;
    dt_.value_width = h.gphash.value_width;
    dt_.has_heap = meta_.has_heap();
    dt_.persistent = true;
    dt_.family_bytes = T::family_bytes_for();
    dt_.counters = counters_;
    dt_.heap.geometry = format::heap_geometry(h);
    dt_.heap.cell_size = h.gphash.cell_size;
    attach_pool();
    stats_.open_map_seconds = seconds_since(t0);

    if (dirty) {
      const auto r0 = std::chrono::steady_clock::now();
      recover();
      stats_.recovery_seconds = seconds_since(r0);
    }
    if (!pool.read_only()) meta_.mark_open_dirty();
    if (gpu_memory_) move_table_to_gpu();
    const auto c0 = std::chrono::steady_clock::now();
    rebuild_mirror_and_counts(/*count=*/true);
    if (dirty) stats_.recovery_seconds += seconds_since(c0);  // the recount and heap rebuild belong to recovery
    stats_.recovered = dirty;
    stats_.open_seconds = seconds_since(t0);
  }

  ~GpuEngine() override {
    try {
      close();
    } catch (...) {
      // A destructor cannot report; the pool stays marked dirty and the next open recovers it.
    }
    cudaStreamSynchronize(stream_);
    for (auto& [offset, ext] : registered_) cudaHostUnregister(pool_.base() + offset);
    cudaFree(counters_);
    cudaFreeHost(host_counters_);
    cudaFree(scan_);
    cudaFreeHost(host_scan_);
    for (cudaEvent_t e : {start_, planned_, ran_, stop_}) cudaEventDestroy(e);
    cudaStreamDestroy(stream_);
  }

  size_t export_items(uint64_t& position, const ExportChunk& chunk, uint64_t& damaged) override {
    std::lock_guard lock(execute_mutex_);
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
    export_kernel<<<blocks_for(window), kBlock, 0, stream_>>>(dt_, position, window, keys, values, scan_);
    GPHASH_CUDA(cudaGetLastError());
    read_scan();
    const uint64_t n = host_scan_->items;
    if (chunk.memory == MemorySpace::kHost && n) {
      GPHASH_CUDA(cudaMemcpy(chunk.keys, keys, n * KeyWidth, cudaMemcpyDeviceToHost));
      if (values) GPHASH_CUDA(cudaMemcpy(chunk.values, values, n * dt_.value_width, cudaMemcpyDeviceToHost));
    }
    position += window;
    if (position >= total) position = ~uint64_t{0};
    (void)damaged;  // value checksums are refused at open until the GPU engine verifies them
    return n;
  }

  std::vector<uint64_t> level_items() override {
    std::lock_guard lock(execute_mutex_);
    std::vector<uint64_t> counts;
    for (uint32_t l = dt_.bottom; l < dt_.bottom + T::L; ++l) {
      reset_scan();
      scan_level_kernel<<<blocks_for(format::level_buckets(l) * T::S), kBlock, 0, stream_>>>(dt_, l, false, false,
                                                                                             nullptr, scan_);
      GPHASH_CUDA(cudaGetLastError());
      read_scan();
      counts.push_back(host_scan_->items);
    }
    return counts;
  }

  std::string name() const override {
    std::string n = gpu_memory_ ? "gpu-memory" : "gpu-mapped";
    if (options_.gpu_kernels == GpuKernels::kWarpDirect) n += "/warp-direct";
    if (options_.gpu_kernels == GpuKernels::kThread) n += "/thread";
    return n;
  }
  uint64_t item_count() const override { return items_; }
  EngineStats stats() const override {
    EngineStats s = stats_;
    s.slots = slot_capacity();
    s.bottom_level = dt_.bottom;
    return s;
  }

  void execute(const Batch& batch) override {
    // Batches share this engine's stream and staging buffers, so even searching batches (which
    // the facade lets overlap) run one at a time here.
    std::lock_guard lock(execute_mutex_);
    for (size_t offset = 0; offset < batch.size; offset += kMaxChunk)
      execute_chunk(batch, offset, std::min(kMaxChunk, batch.size - offset));
  }

  void save() override {
    if (!gpu_memory_ || pool_.read_only()) return;
    GPHASH_CUDA(cudaStreamSynchronize(stream_));
    // Into fresh extents, then one header write switches to them: a crash during the save
    // leaves the previous saved state intact.
    const format::PoolHeader old = meta_.header();
    format::PoolHeader h = old;
    for (uint32_t l = 0; l <= format::kMaxLevel; ++l) h.gphash.level_offset[l] = 0;
    for (uint32_t l = dt_.bottom; l < dt_.bottom + T::L; ++l) {
      const uint64_t bytes = format::level_bytes(h, l);
      h.gphash.level_offset[l] = pool_.allocate_extent(h, bytes);
      GPHASH_CUDA(cudaMemcpy(pool_.base() + h.gphash.level_offset[l], dt_.level[l], bytes, cudaMemcpyDeviceToHost));
    }
    for (uint32_t c = 0; c < heap_chunks_; ++c) {
      const uint64_t bytes = dt_.heap.geometry.chunk_cells(c) * h.gphash.cell_size;
      h.gphash.heap_chunk_offset[c] = pool_.allocate_extent(h, bytes);
      GPHASH_CUDA(cudaMemcpy(pool_.base() + h.gphash.heap_chunk_offset[c], dt_.heap.chunk[c], bytes, cudaMemcpyDeviceToHost));
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

  void close() override {
    if (closed_ || pool_.read_only()) return;
    GPHASH_CUDA(cudaStreamSynchronize(stream_));
    save();
    meta_.mark_clean(items_);
    closed_ = true;
  }

 private:
  // ---- the GPM layer: pool extents registered with CUDA, used by kernels in place ----------

  std::byte* register_extent(uint64_t offset, uint64_t bytes) {
    void* host = pool_.base() + offset;
    unsigned flags = cudaHostRegisterMapped | cudaHostRegisterPortable;
    if (pool_.read_only()) flags |= cudaHostRegisterReadOnly;
    const cudaError_t err = cudaHostRegister(host, bytes, flags);
    if (err != cudaSuccess) {
      cudaGetLastError();
      throw Error(ErrorCode::kNotMappable,
                  "the GPU cannot map pool " + pool_.path() + " (cudaHostRegister: " + cudaGetErrorString(err) +
                      "). The GPU maps pools in /dev/shm, hugetlbfs, device-DAX or anonymous memory: move the pool "
                      "there or use the CPU engine");
    }
    void* device = nullptr;
    GPHASH_CUDA(cudaHostGetDevicePointer(&device, host, 0));
    registered_[offset] = bytes;
    return static_cast<std::byte*>(device);
  }
  void unregister_extent(uint64_t offset) {
    if (registered_.erase(offset)) GPHASH_CUDA(cudaHostUnregister(pool_.base() + offset));
  }

  void attach_pool() {
    const format::PoolHeader& h = meta_.header();
    std::byte* prefix = register_extent(0, format::kReservedPrefixBytes);
    dt_.maintenance = reinterpret_cast<uint64_t*>(prefix + format::kMaintenanceOffset);
    for (uint32_t l = h.gphash.bottom_level; l <= meta_.highest_level(); ++l)
      dt_.level[l] = register_extent(h.gphash.level_offset[l], format::level_bytes(h, l));
    heap_chunks_ = h.gphash.heap_chunk_count;
    for (uint32_t c = 0; c < heap_chunks_; ++c)
      dt_.heap.chunk[c] = register_extent(h.gphash.heap_chunk_offset[c], dt_.heap.geometry.chunk_cells(c) * h.gphash.cell_size);
    dt_.heap.capacity = meta_.heap_cells();
  }

  // ---- open ---------------------------------------------------------------------------------

  // The pool was not shut down cleanly: finish or undo an interrupted move, clear slots left
  // INSERTING, finish an interrupted resize. All in the pool, before anything else reads it.
  void recover() {
    resolve_move_record(meta_);
    for (uint32_t l = dt_.bottom; l <= meta_.highest_level(); ++l)
      scan_level_kernel<<<blocks_for(format::level_buckets(l) * T::S), kBlock, 0, stream_>>>(dt_, l, true, false, nullptr,
                                                                                             scan_);
    GPHASH_CUDA(cudaGetLastError());
    if (meta_.header().gphash.resize_state == format::kResizeRehashing) rehash_and_finish(/*with_mirror=*/false);
    GPHASH_CUDA(cudaStreamSynchronize(stream_));
  }

  void move_table_to_gpu() {
    const format::PoolHeader& h = meta_.header();
    for (uint32_t l = dt_.bottom; l < dt_.bottom + T::L; ++l) {
      const uint64_t bytes = format::level_bytes(h, l);
      device_levels_[l].resize(bytes);
      GPHASH_CUDA(cudaMemcpy(device_levels_[l].get(), pool_.base() + h.gphash.level_offset[l], bytes, cudaMemcpyHostToDevice));
      unregister_extent(h.gphash.level_offset[l]);
      dt_.level[l] = device_levels_[l].get();
    }
    for (uint32_t c = 0; c < heap_chunks_; ++c) {
      const uint64_t bytes = dt_.heap.geometry.chunk_cells(c) * h.gphash.cell_size;
      device_chunks_[c].resize(bytes);
      GPHASH_CUDA(cudaMemcpy(device_chunks_[c].get(), pool_.base() + h.gphash.heap_chunk_offset[c], bytes, cudaMemcpyHostToDevice));
      unregister_extent(h.gphash.heap_chunk_offset[c]);
      dt_.heap.chunk[c] = device_chunks_[c].get();
    }
    dt_.persistent = false;
    dt_.maintenance = nullptr;  // nothing of the pool changes until save()
  }

  // One pass over the table: the tag mirror (if used), the item count and the heap's free cells.
  void rebuild_mirror_and_counts(bool count) {
    const bool mirror = options_.gpu_kernels == GpuKernels::kWarp;
    if (mirror) {
      const uint64_t bytes = format::level_buckets(dt_.bottom) * dt_.family_bytes;
      tags_.reserve(bytes);
      GPHASH_CUDA(cudaMemsetAsync(tags_.get(), 0, bytes, stream_));
      dt_.tags = tags_.get();
    } else {
      dt_.tags = nullptr;
    }
    if (!mirror && !count) return;
    DeviceBuffer<uint32_t> bits;
    if (count && dt_.has_heap) {
      bits.resize((dt_.heap.capacity + 31) / 32);
      GPHASH_CUDA(cudaMemsetAsync(bits.get(), 0, bits.size() * 4, stream_));
    }
    reset_scan();
    for (uint32_t l = dt_.bottom; l < dt_.bottom + T::L; ++l)
      scan_level_kernel<<<blocks_for(format::level_buckets(l) * T::S), kBlock, 0, stream_>>>(dt_, l, false, mirror,
                                                                                             bits.get(), scan_);
    GPHASH_CUDA(cudaGetLastError());
    read_scan();
    if (!count) return;
    if (host_scan_->corrupt)
      throw Error(ErrorCode::kCorruptTable,
                  std::to_string(host_scan_->corrupt) +
                      " slots reference value cells outside the heap or shared with another slot; run `gphash check`");
    items_ = host_scan_->items;
    if (!dt_.has_heap) return;
    const uint64_t highest = host_scan_->highest_cell;
    free_cells_.reserve(highest + 1024);
    if (highest)
      collect_free_cells_kernel<<<blocks_for(highest), kBlock, 0, stream_>>>(bits.get(), highest, free_cells_.get(),
                                                                            &scan_->found);
    GPHASH_CUDA(cudaGetLastError());
    read_scan();
    free_count_ = host_scan_->found;
    fresh_next_ = highest;
  }

  void reset_scan() { GPHASH_CUDA(cudaMemsetAsync(scan_, 0, sizeof(ScanCounters), stream_)); }
  void read_scan() {
    GPHASH_CUDA(cudaMemcpyAsync(host_scan_, scan_, sizeof(ScanCounters), cudaMemcpyDeviceToHost, stream_));
    GPHASH_CUDA(cudaStreamSynchronize(stream_));
  }

  // ---- batches ------------------------------------------------------------------------------

  void reset_counters(uint64_t fresh_next) {
    BatchCounters c{};
    c.fresh_next = fresh_next;
    GPHASH_CUDA(cudaMemcpyAsync(counters_, &c, offsetof(BatchCounters, stores), cudaMemcpyHostToDevice, stream_));
  }
  void read_counters() {
    GPHASH_CUDA(cudaMemcpyAsync(host_counters_, counters_, sizeof(BatchCounters), cudaMemcpyDeviceToHost, stream_));
    GPHASH_CUDA(cudaStreamSynchronize(stream_));
  }

  template <class U>
  static const U* offset_ptr(const void* base, size_t bytes) {
    return reinterpret_cast<const U*>(static_cast<const std::byte*>(base) + bytes);
  }

  void execute_chunk(const Batch& b, size_t offset, size_t n) {
    const uint32_t vw = dt_.value_width;
    const bool on_device = b.memory == MemorySpace::kDevice;
    bool search_only = !b.ops && b.op == Op::kSearch;
    if (b.ops && !on_device)
      search_only = std::all_of(b.ops + offset, b.ops + offset + n, [](Op op) { return op == Op::kSearch; });
    BatchView bv{};
    bv.n = n;
    bv.uniform_op = static_cast<uint8_t>(b.op);
    bv.value_width = vw;
    if (on_device) {
      bv.keys = offset_ptr<uint64_t>(b.keys, offset * KeyWidth);
      bv.ops = b.ops ? reinterpret_cast<const uint8_t*>(b.ops + offset) : nullptr;
      bv.values = b.values ? offset_ptr<std::byte>(b.values, offset * vw) : nullptr;
      bv.values_out = b.values_out ? static_cast<std::byte*>(b.values_out) + offset * vw : nullptr;
      bv.status = reinterpret_cast<uint8_t*>(b.status + offset);
    } else {
      keys_.reserve(n * T::kKeyWords);
      GPHASH_CUDA(cudaMemcpyAsync(keys_.get(), offset_ptr<std::byte>(b.keys, offset * KeyWidth), n * KeyWidth,
                                  cudaMemcpyHostToDevice, stream_));
      bv.keys = keys_.get();
      if (b.ops) {
        ops_.reserve(n);
        GPHASH_CUDA(cudaMemcpyAsync(ops_.get(), b.ops + offset, n, cudaMemcpyHostToDevice, stream_));
        bv.ops = ops_.get();
      }
      if (b.values && !search_only) {
        values_.reserve(n * vw);
        GPHASH_CUDA(cudaMemcpyAsync(values_.get(), offset_ptr<std::byte>(b.values, offset * vw), n * vw,
                                    cudaMemcpyHostToDevice, stream_));
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
    if (dt_.has_heap) {
      const uint64_t freed_capacity = 2 * n + 1024;
      freed_.reserve(freed_capacity);
      ensure_free_stack(free_count_ + freed_capacity);
      dt_.heap.free_cells = free_cells_.get();
      dt_.heap.free_count = free_count_;
      dt_.heap.freed = freed_.get();
      dt_.heap.freed_capacity = freed_capacity;
    }
    reset_counters(fresh_next_);
    GPHASH_CUDA(cudaEventRecord(start_, stream_));
    // Writing batches are always planned (per-key order). Searching batches too when the table is
    // host-mapped: there combining a Zipf-hot key's reads into one PCIe access is worth the sort;
    // in GPU memory the sort would cost more than it saves.
    if (!search_only || !gpu_memory_) plan(bv);
    GPHASH_CUDA(cudaEventRecord(planned_, stream_));
    launch_batch(bv);
    GPHASH_CUDA(cudaEventRecord(ran_, stream_));
    read_counters();
    if (host_counters_->pending) slow_path(bv);
    GPHASH_CUDA(cudaEventRecord(stop_, stream_));
    if (!on_device) {
      GPHASH_CUDA(cudaMemcpyAsync(b.status + offset, bv.status, n, cudaMemcpyDeviceToHost, stream_));
      if (b.values_out)
        GPHASH_CUDA(cudaMemcpyAsync(static_cast<std::byte*>(b.values_out) + offset * vw, bv.values_out, n * vw,
                                    cudaMemcpyDeviceToHost, stream_));
    }
    read_counters();  // also waits for the outputs: the batch is acknowledged after this
    auto seconds = [](cudaEvent_t a, cudaEvent_t b) {
      float ms = 0;
      GPHASH_CUDA(cudaEventElapsedTime(&ms, a, b));
      return ms / 1e3;
    };
    stats_.last_batch_device_seconds = seconds(start_, stop_);
    stats_.last_plan_seconds = seconds(start_, planned_);
    stats_.last_kernel_seconds = seconds(planned_, ran_);
    stats_.last_slow_seconds = seconds(ran_, stop_);
    items_ = static_cast<uint64_t>(static_cast<long long>(items_) + host_counters_->item_delta);
    if (dt_.has_heap) settle_heap();
  }

  // Sorts operation indices by hash prefix so all operations on one key are adjacent, in batch
  // order (the radix sort is stable), and each run goes to one warp.
  void plan(BatchView& bv) {
    const size_t n = bv.n;
    prefix_in_.reserve(n), prefix_out_.reserve(n), index_in_.reserve(n), index_out_.reserve(n);
    plan_kernel<<<blocks_for(n), kBlock, 0, stream_>>>(dt_, bv.keys, n, prefix_in_.get(), index_in_.get());
    GPHASH_CUDA(cudaGetLastError());
    size_t temp = 0;
    GPHASH_CUDA(cub::DeviceRadixSort::SortPairs(nullptr, temp, prefix_in_.get(), prefix_out_.get(), index_in_.get(),
                                                index_out_.get(), static_cast<int>(n), 0, 32, stream_));
    sort_temp_.reserve(temp);
    GPHASH_CUDA(cub::DeviceRadixSort::SortPairs(sort_temp_.get(), temp, prefix_in_.get(), prefix_out_.get(),
                                                index_in_.get(), index_out_.get(), static_cast<int>(n), 0, 32, stream_));
    bv.sort_keys = prefix_out_.get();
    bv.perm = index_out_.get();
  }

  void launch_batch(const BatchView& bv) {
    switch (options_.gpu_kernels) {
      case GpuKernels::kWarp:
        batch_kernel<Access::kMirror><<<blocks_for(bv.n), kBlock, 0, stream_>>>(dt_, bv);
        break;
      case GpuKernels::kWarpDirect:
        batch_kernel<Access::kDirect><<<blocks_for(bv.n), kBlock, 0, stream_>>>(dt_, bv);
        break;
      case GpuKernels::kThread:
        thread_batch_kernel<<<blocks_for(bv.n), kBlock, 0, stream_>>>(dt_, bv);
        break;
    }
    GPHASH_CUDA(cudaGetLastError());
  }

  // Finishes the runs the parallel pass handed over. Few runs without a free slot at a moderate
  // load: one warp, alone, moves items aside for them (displacement). Otherwise the table or heap
  // grows and the runs go through a parallel pass again. When the pool cannot grow, runs fail
  // with kTableFull / kHeapFull one operation at a time.
  void slow_path(BatchView& bv) {
    SlowPathFlags flags;
    int current = 0;  // pending_[current] holds the entries to finish
    uint64_t count = host_counters_->pending;
    uint64_t need_slot = host_counters_->pending_slot, need_cell = host_counters_->pending_cell;
    while (count) {
      bool grew = false;
      // Cells freed earlier in this batch are safe to reuse now: the parallel pass is over and no
      // pending run has freed anything. Only if there are none does the heap grow.
      if (need_cell && !flags.heap_exhausted)
        grew |= reclaim_freed_cells() || try_grow(&GpuEngine::grow_heap, &flags.heap_exhausted);
      const double load = static_cast<double>(items_ + host_counters_->item_delta) / static_cast<double>(slot_capacity());
      // Without resizing, displacement is the only way: it takes any number of runs then.
      const bool displace = need_slot && !flags.table_exhausted &&
                            (!options_.auto_resize || (need_slot <= kSerialLimit && load < options_.max_load_factor));
      if (need_slot && !displace && !flags.table_exhausted) {
        if (options_.auto_resize)
          grew |= try_grow(&GpuEngine::resize, &flags.table_exhausted);
        else
          flags.table_exhausted = true;
      }
      if (displace) {
        // One warp, in order; it stops at a run it cannot serve and says why.
        flags.allow_displacement = true;
        launch_slow(bv, pending_[current].get(), 0, count, flags);
        flags.allow_displacement = false;
        const auto result = static_cast<RunResult>(host_counters_->slow_result);
        if (result == RunResult::kDone) break;
        // Keep the unfinished entries [stopped_at, count) and let the loop grow what they need.
        const uint64_t first = host_counters_->stopped_at;
        std::vector<uint32_t> rest(count - first);
        GPHASH_CUDA(cudaMemcpy(rest.data(), pending_[current].get() + first, rest.size() * 4, cudaMemcpyDeviceToHost));
        GPHASH_CUDA(cudaMemcpy(pending_[current].get(), rest.data(), rest.size() * 4, cudaMemcpyHostToDevice));
        count = rest.size();
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
      // Again in parallel; what still fails is collected in the other buffer.
      const int next = 1 - current;
      bv.pending = pending_[next].get();
      GPHASH_CUDA(cudaMemsetAsync(&counters_->pending, 0, 3 * sizeof(unsigned long long), stream_));
      launch_rerun(bv, pending_[current].get(), count, flags);
      read_counters();
      current = next;
      count = host_counters_->pending;
      need_slot = host_counters_->pending_slot;
      need_cell = host_counters_->pending_cell;
    }
    stats_.displacements += host_counters_->moves;
  }

  // Runs a growth step; a pool that cannot grow sets `exhausted` instead of failing the batch.
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

  void launch_slow(const BatchView& bv, uint32_t* entries, uint64_t first, uint64_t count, const SlowPathFlags& flags) {
    if (options_.gpu_kernels == GpuKernels::kWarp)
      slow_path_kernel<Access::kMirror><<<1, 32, 0, stream_>>>(dt_, bv, entries, first, count, flags);
    else
      slow_path_kernel<Access::kDirect><<<1, 32, 0, stream_>>>(dt_, bv, entries, first, count, flags);
    GPHASH_CUDA(cudaGetLastError());
    read_counters();
  }

  void launch_rerun(const BatchView& bv, const uint32_t* entries, uint64_t count, const SlowPathFlags& flags) {
    if (options_.gpu_kernels == GpuKernels::kWarp)
      rerun_kernel<Access::kMirror><<<blocks_for(count), kBlock, 0, stream_>>>(dt_, bv, entries, count, flags);
    else
      rerun_kernel<Access::kDirect><<<blocks_for(count), kBlock, 0, stream_>>>(dt_, bv, entries, count, flags);
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
    const uint32_t new_top = dt_.bottom + T::L;
    if (new_top > format::kMaxLevel)
      throw Error(ErrorCode::kNoSpace, "table cannot grow past level " + std::to_string(format::kMaxLevel));
    if (gpu_memory_) {
      const uint64_t bytes = format::level_buckets(new_top) * T::Layout::kBytes;
      DeviceBuffer<std::byte> level;
      try {
        level.resize(bytes);
      } catch (const Error&) {
        cudaGetLastError();
        throw Error(ErrorCode::kNoSpace, "GPU memory is full: the table cannot grow");
      }
      GPHASH_CUDA(cudaMemsetAsync(level.get(), 0, bytes, stream_));
      device_levels_[new_top] = std::move(level);
      dt_.level[new_top] = device_levels_[new_top].get();
      rehash(dt_.bottom);
      device_levels_[dt_.bottom].release();
      dt_.level[dt_.bottom] = nullptr;
      ++dt_.bottom;
    } else {
      meta_.begin_resize();
      dt_.level[new_top] = register_extent(meta_.header().gphash.level_offset[new_top], format::level_bytes(meta_.header(), new_top));
      rehash_and_finish();
    }
    if (options_.gpu_kernels != GpuKernels::kWarp) rebuild_mirror_and_counts(/*count=*/false);
    ++stats_.resizes;
    stats_.last_resize_seconds = seconds_since(t0);
  }

  // Resize step 2 on the pool (also resumes an interrupted one), then the header's last step.
  void rehash_and_finish(bool with_mirror = true) {
    const uint32_t old_bottom = dt_.bottom;
    if (!dt_.level[old_bottom + T::L])
      dt_.level[old_bottom + T::L] = register_extent(meta_.header().gphash.level_offset[old_bottom + T::L],
                                                     format::level_bytes(meta_.header(), old_bottom + T::L));
    rehash(old_bottom, with_mirror);
    unregister_extent(meta_.header().gphash.level_offset[old_bottom]);
    dt_.level[old_bottom] = nullptr;
    meta_.finish_resize();
    ++dt_.bottom;
  }

  // Resize step 2. With the mirror: the mirror is first rebuilt for the table one level up (the
  // new top level is empty), then items move through it, claims in GPU memory; the result is
  // also the mirror of the resized table. Without it (other kernel variants, or recovery before
  // any mirror exists), claims are CAS of the pool's state words.
  void rehash(uint32_t old_bottom, bool with_mirror = true) {
    T upper = dt_;
    upper.bottom = old_bottom + 1;
    upper.tags = nullptr;
    reset_scan();
    const unsigned blocks = blocks_for(format::level_buckets(old_bottom) * T::S);
    if (with_mirror && options_.gpu_kernels == GpuKernels::kWarp) {
      const uint64_t bytes = format::level_buckets(upper.bottom) * dt_.family_bytes;
      tags_.resize(bytes);
      GPHASH_CUDA(cudaMemsetAsync(tags_.get(), 0, bytes, stream_));
      upper.tags = tags_.get();
      for (uint32_t l = upper.bottom; l < upper.bottom + T::L - 1; ++l)
        scan_level_kernel<<<blocks_for(format::level_buckets(l) * T::S), kBlock, 0, stream_>>>(upper, l, false, true,
                                                                                               nullptr, scan_);
      reset_scan();
      rehash_mirror_kernel<<<blocks, kBlock, 0, stream_>>>(upper, old_bottom, scan_);
      dt_.tags = upper.tags;
    } else {
      rehash_kernel<<<blocks, kBlock, 0, stream_>>>(upper, old_bottom, scan_);
    }
    GPHASH_CUDA(cudaGetLastError());
    read_scan();
    if (host_scan_->corrupt)
      throw Error(ErrorCode::kCorruptTable, "resize could not place " + std::to_string(host_scan_->corrupt) +
                                                " items of level " + std::to_string(old_bottom) +
                                                "; the pool stays in resize state and reopening it retries");
  }

  void grow_heap() {
    if (heap_chunks_ >= format::kMaxHeapChunks) throw Error(ErrorCode::kNoSpace, "the value heap has its maximum size");
    const uint64_t cells = dt_.heap.geometry.chunk_cells(heap_chunks_);
    if (gpu_memory_) {
      try {
        device_chunks_[heap_chunks_].resize(cells * dt_.heap.cell_size);
      } catch (const Error&) {
        cudaGetLastError();
        throw Error(ErrorCode::kNoSpace, "GPU memory is full: the value heap cannot grow");
      }
      dt_.heap.chunk[heap_chunks_] = device_chunks_[heap_chunks_].get();
    } else {
      meta_.grow_heap();
      dt_.heap.chunk[heap_chunks_] =
          register_extent(meta_.header().gphash.heap_chunk_offset[heap_chunks_], cells * dt_.heap.cell_size);
    }
    ++heap_chunks_;
    dt_.heap.capacity += cells;
    ++stats_.heap_grows;
  }

  void ensure_free_stack(uint64_t capacity) {
    if (capacity <= free_cells_.size()) return;
    DeviceBuffer<uint64_t> bigger(std::max<uint64_t>(capacity, 2 * free_cells_.size()));
    if (free_count_)
      GPHASH_CUDA(cudaMemcpyAsync(bigger.get(), free_cells_.get(), free_count_ * 8, cudaMemcpyDeviceToDevice, stream_));
    free_cells_ = std::move(bigger);
  }

  // In the slow path: the cells this batch freed join the free stack at once. True if any did.
  bool reclaim_freed_cells() {
    read_counters();
    if (host_counters_->cells_freed == 0) return false;
    settle_heap();
    ensure_free_stack(free_count_ + dt_.heap.freed_capacity);
    dt_.heap.free_cells = free_cells_.get();
    dt_.heap.free_count = free_count_;
    const unsigned long long restart[3] = {0, fresh_next_, 0};  // cells_taken, fresh_next, cells_freed
    GPHASH_CUDA(cudaMemcpyAsync(counters_, restart, sizeof restart, cudaMemcpyHostToDevice, stream_));
    read_counters();
    return true;
  }

  // After a batch: cells taken from the stack are gone from its top, freed cells join it.
  void settle_heap() {
    const BatchCounters& c = *host_counters_;
    const uint64_t remaining = free_count_ - std::min<uint64_t>(c.cells_taken, free_count_);
    const uint64_t freed = std::min<uint64_t>(c.cells_freed, dt_.heap.freed_capacity);
    if (freed)
      append_cells_kernel<<<blocks_for(freed), kBlock, 0, stream_>>>(free_cells_.get(), remaining, freed_.get(), freed);
    GPHASH_CUDA(cudaGetLastError());
    free_count_ = remaining + freed;
    fresh_next_ = std::min<uint64_t>(c.fresh_next, dt_.heap.capacity);
  }

  pool::Pool& pool_;
  TableMeta meta_;
  OpenOptions options_;
  bool gpu_memory_;
  std::mutex execute_mutex_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, planned_ = nullptr, ran_ = nullptr, stop_ = nullptr;
  BatchCounters* counters_ = nullptr;
  BatchCounters* host_counters_ = nullptr;
  ScanCounters* scan_ = nullptr;
  ScanCounters* host_scan_ = nullptr;
  T dt_{};
  std::map<uint64_t, uint64_t> registered_;  // pool offset -> bytes
  DeviceBuffer<std::byte> device_levels_[format::kMaxLevel + 1];
  DeviceBuffer<std::byte> device_chunks_[format::kMaxHeapChunks];
  uint32_t heap_chunks_ = 0;
  DeviceBuffer<uint8_t> tags_;
  DeviceBuffer<uint64_t> free_cells_, freed_;
  uint64_t free_count_ = 0, fresh_next_ = 0;
  DeviceBuffer<uint64_t> keys_;
  DeviceBuffer<std::byte> values_, out_, sort_temp_;
  DeviceBuffer<uint8_t> ops_, status_;
  DeviceBuffer<uint32_t> prefix_in_, prefix_out_, index_in_, index_out_, pending_[2];
  uint64_t items_ = 0;
  EngineStats stats_;
  bool closed_ = false;
};

// The engine for one shape, any key width.
template <class ShapeT>
std::unique_ptr<Engine> make_gpu_engine_for(pool::Pool& pool, const OpenOptions& options, uint32_t key_width) {
  switch (key_width) {
    case 8: return std::make_unique<GpuEngine<ShapeT, 8>>(pool, options);
    case 16: return std::make_unique<GpuEngine<ShapeT, 16>>(pool, options);
    case 32: return std::make_unique<GpuEngine<ShapeT, 32>>(pool, options);
  }
  throw Error(ErrorCode::kInvalidArgument, "key width " + std::to_string(key_width) + " is not compiled in");
}

}  // namespace gphash::engine::gpu
