// The interface the facade (gphash::Table) drives. Engines share the on-pool format and the
// batch semantics stated in gphash/ops.h; they differ in where the work runs.
#pragma once

#include <cstdint>
#include <cstddef>
#include <string>
#include <vector>

#include <memory>

#include "gphash/config.h"
#include "gphash/error.h"
#include "gphash/ops.h"

namespace gphash::engine {

struct EngineStats {
  uint64_t resizes = 0;        // new levels added in this session
  uint64_t displacements = 0;  // items moved to make room for an insert
  uint64_t heap_grows = 0;     // heap chunks added in this session
  bool recovered = false;      // the pool was not shut down cleanly and recovery ran at open
  double open_seconds = 0;     // time to open (recovery included)
  double last_resize_seconds = 0;
  // All resizes and heap growth of this session (HMEH: its splits' time, summed over the threads).
  double resize_seconds = 0, heap_grow_seconds = 0;
  double rehash_seconds = 0;  // of resize_seconds: moving the bottom level's items up (GPHash engines)
  double last_batch_device_seconds = 0;  // GPU engine: device time of the last batch (events)
  // GPU engine: the last batch's device time by stage (plan = hash + sort; kernel = the parallel
  // pass; slow = displacement, resize and heap growth), and the open's mapping time.
  double last_plan_seconds = 0, last_kernel_seconds = 0, last_slow_seconds = 0;
  bool last_batch_planned = false;  // GPU engine: the last batch was sorted by key (it repeated one, or was not checked)
  double open_map_seconds = 0;
  double recovery_seconds = 0;  // open: the recovery steps alone (zero when the pool was clean)
  // The live table's geometry (a GPU-memory table can be ahead of its pool until saved).
  uint64_t slots = 0;
  uint32_t bottom_level = 0;
  // GPU engine, BktCache: lines cached now, the GPU memory the cache holds, operations on existing
  // keys served from a cached bucket out of all of them, loading phases completed.
  uint64_t cache_lines = 0, cache_gpu_bytes = 0, cache_hits = 0, cache_lookups = 0, cache_phases = 0;
  uint64_t cache_lines_loaded = 0;
  bool last_batch_cache_loading = false;  // the last batch ran beside a loading phase (TableInfo)
};

// Where an export writes one chunk of items (Table::export_items).
struct ExportChunk {
  std::byte* keys;    // capacity * key width bytes
  std::byte* values;  // capacity * value width bytes, or null (keys only)
  size_t capacity;
  MemorySpace memory;
};

// The completion of an asynchronous batch or device session: durable and answered once done.
class Completion {
 public:
  virtual ~Completion() = default;
  // Blocks until done; rethrows what failed (kCuda, kTableFailed, ...).
  virtual void wait() = 0;
  virtual bool ready() = 0;
  virtual void* cuda_event() = 0;  // a cudaEvent_t recorded on the caller's stream after the work
};

// What a device session hands to user kernels (the bytes of a gphash::gpu::TableRef), with the
// configuration the kernels must have been compiled for.
struct DeviceSession {
  TableShape shape;
  uint32_t key_width = 0;
  std::vector<std::byte> ref;
};

class Engine {
 public:
  virtual ~Engine() = default;
  // Runs a batch whose widths and arrays the facade has checked. Mutating batches are not run
  // concurrently with any other batch (the facade serialises them).
  virtual void execute(const Batch& batch) = 0;
  virtual uint64_t item_count() const = 0;
  virtual EngineStats stats() const = 0;
  virtual std::string name() const = 0;
  // Writes a table kept outside the pool (GPU-memory placement) back to it, crash-safely.
  // Engines that work in the pool have nothing to do.
  virtual void save() {}
  // Clean shutdown: makes everything durable and marks the pool clean. Idempotent.
  virtual void close() = 0;
  // After a failure that may have left work half done: the engine must not mark the pool clean
  // (not at close, not when destroyed), so the next open recovers it.
  virtual void abandon() = 0;
  // Copies the items of the slots from `position` on (a slot index over the active levels, bottom
  // level first) into `chunk` until it is full or the table ends, advancing `position` (past the
  // last slot of the table when done). Values that fail their checksum are left out and counted
  // in `damaged`. Runs with no writing batch in flight (the facade's lock).
  virtual size_t export_items(uint64_t& position, const ExportChunk& chunk, uint64_t& damaged) = 0;
  // Published slots of each active level, bottom first.
  virtual std::vector<uint64_t> level_items() = 0;
  // Enqueues a batch on `stream` (a cudaStream_t) and returns without waiting for it. Engines
  // without streams run it at once and return null (done).
  virtual std::shared_ptr<Completion> execute_async(const Batch& batch, void* stream) {
    (void)stream;
    execute(batch);
    return nullptr;
  }
  // Table::prefetch: a hint, called with the table's batches shared (no writing batch runs).
  virtual void prefetch(const void* keys, size_t count) const {
    (void)keys;
    (void)count;
  }
  // Starts a batch of host arrays (Table::submit) and returns a completion whose wait() finishes
  // it, or runs it at once and returns null (engines that cannot split a batch).
  virtual std::shared_ptr<Completion> submit(const Batch& batch) {
    execute(batch);
    return nullptr;
  }
  // Device sessions: user kernels on `stream` operate on the table through a view (GPU engine).
  virtual DeviceSession begin_device_session(uint64_t max_new_items, void* stream);
  virtual std::shared_ptr<Completion> end_device_session(void* stream);
  virtual bool device_session_open() const { return false; }

  // Snapshots (src/snapshot): called while a snapshot holds writing batches off (the facade's
  // lock held shared, so searches may run), each time before it takes the pool's dirty-page
  // marks. The engine finishes the writes it has in flight (asynchronous batches) and reports
  // every page it wrote to the pool other than through Pool::persist / write_header into
  // pool.dirty_pages() (pool/dirty_pages.h), so the pool is at a batch boundary and its marks are
  // complete. Throws kInvalidArgument while a device session is open (user kernels may be
  // writing), and what a failed batch left (kTableFailed). Engines whose every write the pool
  // sees have nothing to do.
  virtual void prepare_snapshot() {}
};

inline DeviceSession Engine::begin_device_session(uint64_t, void*) {
  throw Error(ErrorCode::kInvalidArgument, "device sessions need the GPU engine (open the table with EngineKind::kGpu)");
}
inline std::shared_ptr<Completion> Engine::end_device_session(void*) {
  throw Error(ErrorCode::kInvalidArgument, "no device session is open");
}

}  // namespace gphash::engine
