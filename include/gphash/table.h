// gphash::Table: a persistent hash table in a pool, operated on in batches by the CPU or the GPU.
//
//   auto table = gphash::Table::create("orders", {.key_width = 16, .value_width = 64});
//   table.execute({.size = n, .key_width = 16, .value_width = 64, .op = gphash::Op::kUpsert,
//                  .keys = keys, .values = values, .status = status});
//
// Durability (DESIGN.md section 3): when execute() returns, every write of the batch is
// durable as the pool's kind promises: on /dev/shm it survives the death of the process (not a
// reboot); on a regular file it has been msync'ed. A batch cut short by a crash may have applied
// any subset of its operations, each wholly or not at all.
#pragma once

#include <cstdint>
#include <memory>
#include <shared_mutex>
#include <span>
#include <string>
#include <vector>

#include "gphash/config.h"
#include "gphash/error.h"
#include "gphash/ops.h"

struct CUstream_st;  // cudaStream_t is CUstream_st*: no CUDA header needed here
struct CUevent_st;

namespace gphash {

struct TableInfo {
  std::string path;
  std::string pool_kind;  // shm, hugetlbfs, file, memory
  std::string index;      // the index the pool holds: gphash
  std::string engine;     // cpu, gpu-mapped, gpu-memory
  uint32_t key_width = 0;
  uint32_t value_width = 0;
  TableShape shape{};
  uint64_t hash_seed = 0;
  uint64_t items = 0;
  uint64_t slots = 0;
  double load_factor = 0;
  uint32_t bottom_level = 0;
  uint32_t top_level = 0;
  uint64_t pool_bytes = 0;
  uint64_t heap_cells = 0;
  uint32_t cell_size = 0;
  bool recovered = false;  // this open ran crash recovery
  double open_seconds = 0;
  uint64_t resizes = 0;
  uint64_t displacements = 0;
  uint64_t heap_grows = 0;
  double last_resize_seconds = 0;
  double resize_seconds = 0, heap_grow_seconds = 0;  // all resizes and heap growth since open
  // CPU engine: of resize_seconds, moving the bottom level's items up (the rest: adding the new
  // level, freeing the old one).
  double rehash_seconds = 0;
  double last_batch_device_seconds = 0;  // GPU engine: device time of the last batch
  // GPU engine, by stage: plan (hash, repeated-key check, sort), the parallel kernel, the exclusive
  // slow path. A host batch of up to 64 KiB (staged through pinned memory) is timed on the host,
  // without the events that would cost it several microseconds: plan 0, and as kernel time the
  // host's time from its launch to its results (for Table::submit, to the wait).
  double last_plan_seconds = 0, last_kernel_seconds = 0, last_slow_seconds = 0;
  // GPU engine: the last batch was planned (sorted by key). Batches of searches are not; batches
  // that write are, unless a check found that they repeat no key (GPU memory, host-driven batches
  // of 2^15 operations or more; either placement, host batches of up to 64 KiB, checked by the host).
  bool last_batch_planned = false;
  double open_map_seconds = 0;  // GPU engine: registering the pool's memory with CUDA at open
  double recovery_seconds = 0;  // the recovery steps of the last open (0 if the pool was clean)
  // GPU engine, BktCache (OpenOptions::cache): buckets cached in GPU memory now, the GPU memory the
  // cache holds, and since open: operations on existing keys, those served from a cached bucket,
  // loading phases completed, and the lines they read from host memory (a bucket that stays cached
  // from one phase to the next keeps its line and is not read again).
  uint64_t cache_lines = 0, cache_gpu_bytes = 0, cache_lookups = 0, cache_hits = 0, cache_phases = 0;
  uint64_t cache_lines_loaded = 0;
  // The last batch ran while a loading phase filled lines beside it, or switched to the lines a
  // phase loaded (copying the buckets written meanwhile): what issue 17 compares with the steady state.
  bool last_batch_cache_loading = false;
  double cache_hit_rate() const { return cache_lookups ? static_cast<double>(cache_hits) / static_cast<double>(cache_lookups) : 0; }
  // From the header (also filled by inspect()).
  bool clean_shutdown = true;
  bool in_use = false;    // inspect(): another open holds the pool for writing right now
  bool value_checksums = false;
  bool resizing = false;  // a resize was interrupted and has not been finished yet
  uint64_t generation = 0;
  std::string format_version;
  std::string uuid;
  // Snapshots (also filled by inspect()): when the last completed snapshot of the pool was
  // captured (0: never), and the write operations begun since: what a restart from it would lose
  // (at most: an operation that changed nothing counts too). `writes` counts them since creation.
  uint64_t last_snapshot_unix_ns = 0;
  uint64_t writes_since_snapshot = 0;
  uint64_t writes = 0;
  // This Table's snapshots (info() only).
  std::string snapshot_path;    // OpenOptions::snapshots.path
  uint64_t snapshots_taken = 0;
  SnapshotResult last_snapshot;  // the last one this Table took (automatic or not)
  std::string snapshot_error;   // the last automatic snapshot's failure, empty once one succeeds
  // Sharded tables (OpenOptions::shards). A shard's pool (inspect): which shard of how many
  // (shard_count 0: a table of its own). A sharded table (info): shard_count, and each shard's
  // own info in `shards`; the fields above are then the set's: items, slots, bytes and counters
  // summed, times the slowest shard's, hash_seed 0 (each shard has its own).
  uint32_t shard_index = 0;
  uint32_t shard_count = 0;
  std::vector<TableInfo> shards;
};

struct CheckResult {
  bool ok = true;
  std::string violation;    // the first violation with its location (slot, heap cell, header), empty when ok
  uint64_t violations = 0;  // how many were found
  uint64_t items = 0;
  uint64_t values_verified = 0;  // heap values whose checksum was verified (pools with value checksums)
  bool recovered = false;   // check_pool: the pool was not shut down cleanly; it was checked as recovery leaves it
};

struct RepairResult {
  std::vector<std::string> dropped;  // one line per item removed: its key (hex), where it was, why
  bool recovered = false;            // the pool was not shut down cleanly and recovery ran first
  bool cleared_move_record = false;  // a damaged maintenance record was cleared
  uint64_t items = 0;                // items after the repair
};

struct LevelStats {
  uint32_t level = 0;
  uint64_t slots = 0;
  uint64_t items = 0;
};

struct TableStats {
  std::vector<LevelStats> levels;  // active levels, bottom first (GPHash; none for HMEH)
  uint64_t segments = 0;           // HMEH: segments in the directory (0 for GPHash)
  uint64_t heap_cells = 0;         // cells in the value heap (0: values are inline)
  uint64_t heap_cells_used = 0;
};

// A position in an export of every item (Table::export_items). Start with a default-constructed
// cursor and call export_items until done().
struct ExportCursor {
  bool done() const { return position == ~uint64_t{0}; }
  uint64_t exported = 0;  // items returned so far
  uint64_t damaged = 0;   // items left out because their values fail their checksums
  // Internal: the next slot, and the table's layout when the export began.
  uint64_t position = 0;
  uint64_t resizes = 0, displacements = 0;
  // A sharded table: the shard being exported, and the items of it returned so far.
  uint32_t shard = 0;
  uint64_t shard_exported = 0;
};

namespace engine {
class Completion;
}

// The completion of a batch run with Table::execute_async (or of a device session). Copyable;
// default-constructed it is complete.
class BatchEvent {
 public:
  BatchEvent() = default;
  // Blocks until the batch is done: its statuses and values written and its writes durable (as
  // the pool's kind promises, as for execute()). Throws what failed (kCuda, kTableFailed, ...).
  void wait() const;
  bool ready() const;
  // The CUDA event (a cudaEvent_t) recorded on the batch's stream after all of the batch's work:
  // other streams can wait for it with cudaStreamWaitEvent. Null when the batch already ran.
  CUevent_st* cuda_event() const;

 private:
  friend class Table;
  explicit BatchEvent(std::shared_ptr<engine::Completion> c) : completion_(std::move(c)) {}
  std::shared_ptr<engine::Completion> completion_;
};

// User kernels on the table (GPU engine): see include/gphash/gpu/table_ref.cuh.
struct DeviceSessionOptions {
  // New items the session's kernels may insert: their heap cells are reserved up front (a session
  // cannot grow the table or the heap).
  uint64_t max_new_items = 0;
};

class DeviceSession {
 public:
  // The view for kernels compiled for the pool's shape and key width; throws kInvalidArgument if
  // the pool has another. (Defined in gphash/gpu/table_ref.cuh: call it from CUDA code.)
  template <class Ref>
  Ref ref() const;
  TableShape shape;
  uint32_t key_width = 0;
  std::vector<std::byte> bytes;  // the view, as the engine built it
};

class ShardSet;  // src/table/shard_set.h

class Table {
 public:
  // Creates a pool at `pool` ("NAME" = /dev/shm/NAME, "mem:" = anonymous memory, or a path); with
  // OpenOptions::shards, one pool per shard, NAME.shard0 .. NAME.shard<n-1>.
  static Table create(const std::string& pool, const TableConfig& config, const OpenOptions& options = {});
  // Opens an existing pool; runs recovery first if it was not shut down cleanly. A sharded table
  // opens every shard's pool (OpenOptions::shards with as many entries as it was created with):
  // a missing shard throws kNotFound, a wrong count or a pool of another set kShardMismatch; each
  // shard recovers on its own. A shard's pool opened alone throws kShardMismatch.
  static Table open(const std::string& pool, const OpenOptions& options = {});

  Table(Table&&) noexcept;
  Table& operator=(Table&&) noexcept;
  ~Table();  // closes cleanly

  // Runs a batch (semantics in gphash/ops.h). Throws gphash::Error for a malformed batch (wrong
  // key or value width, missing arrays, unknown op) before touching the table. A batch in GPU
  // memory runs after the work already on the legacy default stream (a cudaMemcpy that filled its
  // arrays, kernels launched without a stream); one filled on another stream needs that stream
  // synchronized first, or execute_async on it.
  void execute(const Batch& batch);

  // Enqueues a batch on a CUDA stream and returns at once (GPU engine; the CPU engine runs it
  // before returning). The batch's arrays must be in GPU memory (MemorySpace::kDevice) and stay
  // valid until it is done; they are never read by the host (an unknown op in `ops` is reported
  // per entry as kInvalidOp). The batch is ordered after earlier work on `stream`; work enqueued on
  // `stream` afterwards sees it complete; it is durable once `stream` passes the returned event.
  // The host does not wait for the device, except that a table runs one batch at a time: a call
  // while the previous batch is still in flight waits until that one is settled. Batches of more
  // than 2^24 operations run in parts, and the call returns when all but the last are done. Room
  // for the batch's inserts is made before it is enqueued (heap cells, a resize past the load
  // factor); an insert that displacement still cannot place gets kTableFull.
  BatchEvent execute_async(const Batch& batch, CUstream_st* stream);

  // Runs a batch of host arrays as execute() does, in two halves, so the caller can work while
  // the GPU does (Mega-KV's overlap of the index batch with the CPU's work: gphash-server): it
  // returns once the batch is on its way, and wait() on the returned event finishes it (outputs
  // written, writes durable, as when execute returns; errors thrown there). GPU engine, batches
  // small enough to stage through pinned memory (64 KiB of inputs); other batches and engines run
  // in submit(). The arrays must stay valid until wait() returns. The table runs one batch at a
  // time: any other call on it finishes the submitted batch first, so waiting is optional.
  BatchEvent submit(const Batch& batch);

  // A hint: starts fetching what a batch on these keys (`count` keys of the table's key width,
  // side by side) reads first, so the caller's work until it runs the batch overlaps those cache
  // misses (CPU engine: the first few keys' candidate tag words or buckets; other engines and
  // sharded tables: nothing). Changes nothing, never fails or waits, and may be called from any
  // thread: while a writing batch holds the table it does nothing.
  void prefetch(const void* keys, size_t count) const;

  // Device sessions (GPU engine): user kernels on `stream` work on the table through a
  // gphash::gpu::TableRef (include/gphash/gpu/table_ref.cuh). While a session is open, host
  // batches on this table are refused (kInvalidArgument). The session's writes are durable once
  // the event end_device_session returns is done.
  DeviceSession begin_device_session(CUstream_st* stream, const DeviceSessionOptions& options = {});
  BatchEvent end_device_session(CUstream_st* stream);

  // Reads a pool's header without opening an engine, running recovery or taking the pool's lock
  // (`gphash info` works while a writer runs). items and load_factor are as of the last clean
  // close when clean_shutdown is false.
  static TableInfo inspect(const std::string& pool);
  // Verifies a pool's invariants without changing it (`gphash check`): a pool that was not shut
  // down cleanly is recovered in a private copy-on-write view first, so the result is what the
  // next open would see, and the file stays exactly as it was. Refused (kPoolInUse) while a writer
  // holds the pool.
  static CheckResult check_pool(const std::string& pool, int threads = 0);
  // Makes a damaged pool consistent (`gphash repair`): recovers it, clears a damaged maintenance
  // record, and empties every slot that breaks an invariant (a damaged key, a value that fails
  // its checksum, a reference outside the heap, a heap cell several slots claim, a duplicate
  // copy), reporting each item dropped; then marks the pool clean.
  static RepairResult repair(const std::string& pool, int threads = 0);
  // Rewrites a pool of an older format version in the current one (`gphash convert`); false if it
  // already is current.
  static bool convert(const std::string& pool);

  uint32_t key_width() const;
  uint32_t value_width() const;
  uint64_t size() const;  // items
  TableInfo info() const;
  // Copies up to `capacity` items into `keys` (capacity * key width bytes) and `values` (capacity
  // * value width bytes; null for keys only), in host or GPU memory (GPU memory: GPU engine only),
  // and returns how many; fewer than `capacity` does not mean the end: call until cursor.done().
  // Every item present for the whole export is returned exactly once. Batches may run between
  // calls; an item they write may or may not be returned, and if one of them resizes the table or
  // moves an item, the next call throws kInvalidArgument (start again).
  size_t export_items(ExportCursor& cursor, void* keys, void* values, size_t capacity,
                      MemorySpace memory = MemorySpace::kHost);
  // Live statistics: items per level and the value heap's use (scans the table).
  TableStats stats();
  // Verifies the invariants of the table in its pool (see `gphash check`); a GPU-memory table
  // is saved first, so what is checked is what a reopen would see.
  CheckResult check(int threads = 0) const;
  // GPU-memory placement: writes the table back to its pool (crash-safely: the previous saved
  // state stays until the new one is complete). Other engines work in the pool: nothing to do.
  void save();
  // Makes everything durable (saving a GPU-memory table), marks the pool clean and lets go of it
  // (the pool may be opened again at once); with automatic snapshots, first takes a last one if
  // anything was written since the previous. Later calls on this Table throw kInvalidArgument.
  void close();

  // Writes a consistent snapshot of the table to `path` (default: OpenOptions::snapshots.path), a
  // file on a real file system, and returns when it is durable (gphash/snapshot.h). Writing
  // batches wait only while the changed pages are copied into memory (on the GPU engine, also
  // for a batch still running on a stream); searches go on. A GPU-memory table is saved to its
  // pool first. Throws kInvalidArgument while a device session is open (end it first).
  SnapshotResult snapshot(const std::string& path = {});
  // Creates the pool `pool` from the last snapshot in `snapshot_file` and recovers it (a recount)
  // once, leaving it shut down cleanly with exactly the snapshot's items. A damaged, truncated or
  // foreign file throws kCorruptFile and creates nothing; an existing pool is kept unless
  // options.replace.
  static RestoreResult restore(const std::string& snapshot_file, const std::string& pool,
                               const RestoreOptions& options = {});

  // The application region: bytes of the pool that the index never reads or writes, kept,
  // snapshotted and restored with the table (gphash-server keeps its items there). A pool has at
  // most one; it is zero-filled when created and never moves. Empty when the pool has none.
  std::span<std::byte> attachment() const;
  // Creates it (kInvalidArgument if the pool already has one; kNoSpace if the pool cannot grow).
  std::span<std::byte> create_attachment(uint64_t bytes);
  // Makes writes to [p, p + n) of the attachment durable as the pool's own writes are (DESIGN.md
  // section 3) and marks them for the next snapshot. Writes not persisted this way may be missing
  // from a snapshot.
  void persist_attachment(const void* p, size_t n) const;
  // While the returned lock is held, snapshots wait: hold it across writes to the attachment and
  // the batches that publish them, so a snapshot never captures half of such a step. Batches may
  // run while it is held; take it before a batch's call, never inside one.
  [[nodiscard]] std::shared_lock<SnapshotGate> hold_snapshots() const;

 // Internal (table_impl.h).
  struct Impl;

 private:
  friend class ShardSet;
  explicit Table(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gphash
