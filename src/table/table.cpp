#include "gphash/table.h"

#include <fmt/format.h>
#include <omp.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <type_traits>

#include "engines/common/checker.h"
#include "engines/common/move_record.h"
#include "engines/common/table_meta.h"
#include "engines/cpu/cpu_engine.h"
#include "engines/engine.h"
#include "format/header.h"
#include "format/hmeh/layout.h"
#include "indexes/hmeh/hmeh.h"
#include "pool/pool.h"
#include "snapshot/auto_snapshots.h"
#include "snapshot/restore.h"
#include "snapshot/snapshotter.h"
#include "table/shard_set.h"
#include "table/table_impl.h"
#if GPHASH_HAVE_CUDA
#include <cuda_runtime.h>

#include "engines/gpu/gpu_engine.h"
#endif

namespace gphash {


namespace {

[[noreturn]] void refuse_gpu_on_hmeh() {
  throw Error(ErrorCode::kInvalidArgument,
              "the GPU engine works on GPHash pools only; this pool holds an HMEH index: use the CPU engine", "engine");
}

std::unique_ptr<engine::Engine> make_engine(pool::Pool& pool, const OpenOptions& options) {
  if (pool.header().index_kind == format::kIndexGpm)
    throw Error(ErrorCode::kInvalidArgument,
                "pool " + pool.path() + " is a GPM pool (regions, logs, checkpoints), not an index: open it with gpm::GpmPool",
                "index_kind");
  if (pool.header().index_kind == format::kIndexHmeh) {
    if (options.engine != EngineKind::kCpu) refuse_gpu_on_hmeh();
    return hmeh::open_engine(pool, hmeh::engine_options(options));
  }
  if (options.engine == EngineKind::kCpu) return engine::make_cpu_engine(pool, options);
#if GPHASH_HAVE_CUDA
  return engine::make_gpu_engine(pool, options);
#else
  throw Error(ErrorCode::kNoGpu, "this build of gphash has no GPU engine (built without CUDA); use the CPU engine");
#endif
}

void check_options(const OpenOptions& o) {
  if (o.threads < 0 || o.threads > kMaxThreads)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("threads {} is not in 0..{} (0 = all hardware threads)", o.threads, kMaxThreads), "threads");
  if (o.max_pool_bytes && o.reserve_pool_bytes > o.max_pool_bytes)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("reserve_pool_bytes {} is over max_pool_bytes {}", o.reserve_pool_bytes, o.max_pool_bytes),
                "reserve_pool_bytes");
  if (!(o.max_load_factor > 0 && o.max_load_factor <= 1))
    throw Error(ErrorCode::kInvalidArgument, fmt::format("max_load_factor {} is not in (0, 1]", o.max_load_factor),
                "max_load_factor");
  const SnapshotOptions& s = o.snapshots;
  if (!(s.every_seconds >= 0 && s.every_seconds <= 1e9))
    throw Error(ErrorCode::kInvalidArgument, fmt::format("snapshots.every_seconds {} is not in 0..1e9", s.every_seconds),
                "snapshots.every_seconds");
  if ((s.every_seconds > 0 || s.every_batches > 0) && s.path.empty())
    throw Error(ErrorCode::kInvalidArgument, "automatic snapshots need a file: set snapshots.path", "snapshots.path");
  if (s.file_mode > 0777)
    throw Error(ErrorCode::kInvalidArgument, fmt::format("snapshots.file_mode {:o} is not in 0..0777", s.file_mode),
                "snapshots.file_mode");
}

bool needs_value(Op op) { return op == Op::kInsert || op == Op::kUpsert || op == Op::kUpdate; }

bool is_hmeh(const format::PoolHeader& h) { return h.index_kind == format::kIndexHmeh; }

// The widths of the pool's index, whichever it is.
uint32_t key_width_of(const format::PoolHeader& h) {
  return h.index_kind == format::kIndexHmeh ? h.hmeh.key_width : h.gphash.key_width;
}
uint32_t value_width_of(const format::PoolHeader& h) {
  return h.index_kind == format::kIndexHmeh ? h.hmeh.value_width : h.gphash.value_width;
}

}  // namespace

Table::Table(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Table::Table(Table&&) noexcept = default;
Table& Table::operator=(Table&&) noexcept = default;
Table::~Table() {
  if (impl_ && impl_->engine && !impl_->failure.empty()) {
    impl_->auto_snapshots.reset();
    impl_->engine->abandon();
  }
  if (impl_ && impl_->engine && impl_->failure.empty()) {
    try {
      impl_->shut_down();
    } catch (...) {
      // The pool stays marked dirty (the next open recovers it), or the last snapshot was not
      // taken (the previous one stands).
    }
  }
}

Table::Impl::~Impl() = default;

Table Table::create(const std::string& pool_spec, const TableConfig& config, const OpenOptions& options) {
  check_options(options);
  if (config.index == IndexKind::kHmeh && options.engine != EngineKind::kCpu) refuse_gpu_on_hmeh();
  if (!options.shards.empty()) return Table(ShardSet::create(pool_spec, config, options));
  return Table(Impl::create_pool(pool_spec, config, options, {}));
}

Table Table::open(const std::string& pool_spec, const OpenOptions& options) {
  check_options(options);
  if (!options.shards.empty()) return Table(ShardSet::open(pool_spec, options));
  return Table(Impl::open_pool(pool_spec, options, {}));
}

namespace {

// Refuses a pool that is not what `member` says it must be, before an engine opens it.
void check_membership(const pool::Pool& pool, const Table::Impl::Member& member) {
  using Member = Table::Impl::Member;
  const format::PoolHeader& h = pool.header();
  if (member.kind == Member::kAny) return;
  if (member.kind == Member::kOwn) {
    if (h.shard_count != 0)
      throw Error(ErrorCode::kShardMismatch,
                  fmt::format("{} is shard {} of {} of a sharded table: open the table (its name without .shard{}) "
                              "with {} shards (OpenOptions::shards, --shards)",
                              pool.path(), h.shard_index, h.shard_count, h.shard_index, h.shard_count),
                  "shards");
    return;
  }
  if (h.shard_count == 0)
    throw Error(ErrorCode::kShardMismatch,
                fmt::format("{} is a table of its own, not shard {} of {} of a sharded table", pool.path(),
                            member.index, member.count),
                "shards");
  if (h.shard_count != member.count)
    throw Error(ErrorCode::kShardMismatch,
                fmt::format("{} is shard {} of {}, but the table was opened with {} shards: open it with {}",
                            pool.path(), h.shard_index, h.shard_count, member.count, h.shard_count),
                "shards");
  if (h.shard_index != member.index)
    throw Error(ErrorCode::kShardMismatch,
                fmt::format("{} holds shard {} of {}, not shard {}: was it renamed?", pool.path(), h.shard_index,
                            h.shard_count, member.index),
                "shards");
}

}  // namespace

std::unique_ptr<Table::Impl> Table::Impl::create_pool(const std::string& pool_spec, const TableConfig& config,
                                                      const OpenOptions& options, const Member& member) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->pool = pool::Pool::create(
      pool_spec, {options.max_pool_bytes, 0, options.replace, options.pool_file_mode, options.reserve_pool_bytes});
  if (config.index == IndexKind::kHmeh)
    hmeh::initialize(*impl->pool, config);
  else
    engine::TableMeta::initialize(*impl->pool, config);
  if (member.kind == Member::kExact) {  // before publish(): no one ever sees the shard unstamped
    format::PoolHeader h = impl->pool->header();
    std::memcpy(h.shard_set_id, member.set_id, sizeof h.shard_set_id);
    h.shard_count = member.count;
    h.shard_index = member.index;
    impl->pool->write_header(h);
  }
  impl->pool->publish();
  impl->engine = make_engine(*impl->pool, options);
  impl->start_snapshots();
  return impl;
}

std::unique_ptr<Table::Impl> Table::Impl::open_pool(const std::string& pool_spec, const OpenOptions& options,
                                                    const Member& member) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  const pool::OpenOptions pool_options{options.read_only, options.max_pool_bytes, options.force_flush};
  try {
    impl->pool = pool::Pool::open(pool_spec, pool_options);
  } catch (const Error& e) {
    // A pool that no longer exists (a reboot emptied /dev/shm) comes back from its snapshot.
    const std::string& file = options.snapshots.path;
    if (e.code() != ErrorCode::kNotFound || file.empty() || !snapshot::posix_file_system().exists(file)) throw;
    RestoreOptions restore;
    restore.pool_file_mode = options.pool_file_mode;
    restore.threads = options.threads;
    try {
      Table::restore(file, pool_spec, restore);
    } catch (const Error& again) {
      if (again.code() != ErrorCode::kPoolExists) throw;  // another process restored it first
    }
    impl->pool = pool::Pool::open(pool_spec, pool_options);
  }
  check_membership(*impl->pool, member);
  impl->engine = make_engine(*impl->pool, options);
  impl->start_snapshots();
  return impl;
}

// Checks a batch before it reaches an engine; returns how many of its operations may write (0: a
// searching batch). The arrays of a batch in GPU memory are never read here (the engine reports
// unknown ops per entry, kInvalidOp): all of a mixed one count as writes.
uint64_t validate_batch(const Batch& b, uint32_t key_width, uint32_t value_width, const pool::Pool& pool,
                        const OpenOptions& options) {
  if (!b.status) throw Error(ErrorCode::kInvalidArgument, "malformed batch: no status array");
  if (!b.keys) throw Error(ErrorCode::kInvalidArgument, "malformed batch: no keys");
  if (b.key_width != key_width)
    throw Error(ErrorCode::kKeyWidthMismatch,
                fmt::format("key width mismatch: pool has {}, batch gives {}", key_width, b.key_width), "key_width");
  if (b.memory == MemorySpace::kDevice && options.engine != EngineKind::kGpu)
    throw Error(ErrorCode::kInvalidArgument, "batch arrays in GPU memory need the GPU engine");
  bool writes = false, values_needed = false;
  uint64_t write_ops = 0;
  if (b.ops && b.memory == MemorySpace::kDevice) {
    writes = true;  // unknown on the host; entries that need a value read `values`
    values_needed = true;
    write_ops = b.size;
  } else {
    for (size_t i = 0; i < b.size; ++i) {
      const Op op = b.ops ? b.ops[i] : b.op;
      if (static_cast<uint8_t>(op) > static_cast<uint8_t>(Op::kErase))
        throw Error(ErrorCode::kInvalidArgument,
                    fmt::format("malformed batch: unknown op {} at index {}", static_cast<int>(op), i), "ops");
      writes |= op != Op::kSearch;
      write_ops += op != Op::kSearch ? 1 : 0;
      values_needed |= needs_value(op);
      if (!b.ops) {  // one op for all entries
        write_ops *= b.size;
        break;
      }
    }
  }
  if (values_needed && !b.values)
    throw Error(ErrorCode::kInvalidArgument,
                b.ops && b.memory == MemorySpace::kDevice
                    ? "malformed batch: a mixed batch in GPU memory needs a values array (its ops are not read on the host)"
                    : "malformed batch: insert, upsert and update need values");
  if ((values_needed || b.values_out) && b.value_width != value_width)
    throw Error(ErrorCode::kValueWidthMismatch,
                fmt::format("value width mismatch: pool has {}, batch gives {}", value_width, b.value_width),
                "value_width");
  if (writes && pool.read_only() && !(b.ops && b.memory == MemorySpace::kDevice))
    throw Error(ErrorCode::kReadOnly, fmt::format("pool {} is open read-only", pool.path()));
  if (reinterpret_cast<uintptr_t>(b.keys) % 8 != 0)
    throw Error(ErrorCode::kInvalidArgument, "malformed batch: keys must be 8-byte aligned", "keys");
  return write_ops;
}

void Table::Impl::check_usable() const {
  if (!engine && !shards) throw Error(ErrorCode::kInvalidArgument, "this table was closed; open its pool again to use it");
  if (!failure.empty())
    throw Error(ErrorCode::kTableFailed,
                "an earlier call failed (" + failure +
                    "): this table cannot be used any more; reopen the pool, whose recovery restores a consistent "
                    "state with every acknowledged write");
}

template <class F>
auto Table::Impl::guarded(F&& f) -> decltype(f()) {
  check_usable();
  try {
    return f();
  } catch (const Error& e) {
    // Failures the engine may have left half done poison the table (its pool stays dirty, so the
    // next open recovers it); errors about the call itself do not.
    switch (e.code()) {
      case ErrorCode::kIo:
      case ErrorCode::kCuda:
      case ErrorCode::kCorruptTable:
      case ErrorCode::kNotMappable:
      case ErrorCode::kTableFailed:
        failure = e.what();
        break;
      default:
        break;
    }
    throw;
  }
}

// A writing batch holds the table alone and is counted for the snapshots before it runs, so a
// crash in the middle leaves it counted (the count bounds what a restart from the last snapshot
// loses); an automatic snapshot it wakes waits for the engine to finish it
// (Engine::prepare_snapshot). Searches share the table.
template <class F>
auto Table::Impl::run_batch(const Batch& b, F&& f) -> decltype(f()) {
  const uint64_t writes = validate_batch(b, key_width, value_width, *pool, options);
  if (!writes) {
    std::shared_lock lock(batches);
    return guarded(f);
  }
  auto run = [&] {
    std::unique_lock lock(batches);
    return guarded([&] {
      snapshot::count_pool_writes(*pool, writes);
      return f();
    });
  };
  if constexpr (std::is_void_v<decltype(f())>) {
    run();
    after_writing_batch();
  } else {
    auto result = run();
    after_writing_batch();
    return result;
  }
}

namespace {

// Whether a batch may write (a batch in GPU memory: its ops are not read on the host, so yes).
bool may_write(const Batch& b) {
  if (b.memory == MemorySpace::kDevice) return true;
  if (!b.ops) return b.op != Op::kSearch;
  for (size_t i = 0; i < b.size; ++i)
    if (b.ops[i] != Op::kSearch) return true;
  return false;
}

}  // namespace

void Table::execute(const Batch& b) {
  impl_->check_usable();
  if (b.size == 0) return;
  if (impl_->shards) {  // writing batches hold the whole set, as they hold one table
    if (may_write(b)) {
      std::unique_lock lock(impl_->batches);
      impl_->shards->execute(b);
    } else {
      std::shared_lock lock(impl_->batches);
      impl_->shards->execute(b);
    }
    return;
  }
  impl_->run_batch(b, [&] { impl_->engine->execute(b); });
}

BatchEvent Table::submit(const Batch& b) {
  impl_->check_usable();
  if (b.size == 0) return {};
  if (impl_->shards || b.memory == MemorySpace::kDevice) {  // a sharded batch spans several GPUs
    execute(b);
    return {};
  }
  return BatchEvent(impl_->run_batch(b, [&] { return impl_->engine->submit(b); }));
}

void Table::prefetch(const void* keys, size_t count) const {
  // A hint may be dropped: while a writing batch holds the table (it may be resizing), none.
  std::shared_lock lock(impl_->batches, std::try_to_lock);
  if (lock.owns_lock() && impl_->engine && impl_->failure.empty()) impl_->engine->prefetch(keys, count);
}

BatchEvent Table::execute_async(const Batch& b, CUstream_st* stream) {
  impl_->check_usable();
  if (b.size == 0) return {};
  if (impl_->shards) {
    // Run before returning, as the CPU engine does: a sharded table's batch spans several GPUs'
    // streams. A batch in GPU memory comes after the work already on `stream`.
#if GPHASH_HAVE_CUDA
    if (b.memory == MemorySpace::kDevice && cudaStreamSynchronize(stream) != cudaSuccess)
      throw Error(ErrorCode::kCuda, std::string("the batch's stream failed before it: ") +
                                        cudaGetErrorString(cudaGetLastError()));
#endif
    execute(b);
    return {};
  }
  if (impl_->options.engine == EngineKind::kGpu && b.memory != MemorySpace::kDevice)
    throw Error(ErrorCode::kInvalidArgument,
                "execute_async needs the batch's arrays in GPU memory (MemorySpace::kDevice); use execute for host arrays");
  return BatchEvent(impl_->run_batch(b, [&] { return impl_->engine->execute_async(b, stream); }));
}

namespace {

void refuse_on_shards(const Table::Impl& impl, const char* what) {
  if (impl.shards)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{} needs one table: a sharded table's items are spread over several pools and GPUs", what));
}

}  // namespace

DeviceSession Table::begin_device_session(CUstream_st* stream, const DeviceSessionOptions& options) {
  refuse_on_shards(*impl_, "a device session");
  std::unique_lock lock(impl_->batches);
  engine::DeviceSession s = impl_->guarded([&] {
    engine::DeviceSession opened = impl_->engine->begin_device_session(options.max_new_items, stream);
    // The host cannot count a session's writes: it counts as one write operation, so the pool
    // reads as written since its last snapshot (TableInfo::writes_since_snapshot is then a lower
    // bound).
    snapshot::count_pool_writes(*impl_->pool, 1);
    return opened;
  });
  DeviceSession r;
  r.shape = s.shape;
  r.key_width = s.key_width;
  r.bytes = std::move(s.ref);
  return r;
}

BatchEvent Table::end_device_session(CUstream_st* stream) {
  refuse_on_shards(*impl_, "a device session");
  BatchEvent done;
  {
    std::unique_lock lock(impl_->batches);
    done = BatchEvent(impl_->guarded([&] { return impl_->engine->end_device_session(stream); }));
  }
  impl_->after_writing_batch();
  return done;
}

void BatchEvent::wait() const {
  if (completion_) completion_->wait();
}
bool BatchEvent::ready() const { return !completion_ || completion_->ready(); }
CUevent_st* BatchEvent::cuda_event() const {
  return completion_ ? static_cast<CUevent_st*>(completion_->cuda_event()) : nullptr;
}

uint32_t Table::key_width() const {
  impl_->check_usable();
  if (impl_->shards) return impl_->shards->key_width();
  return impl_->key_width;
}
uint32_t Table::value_width() const {
  impl_->check_usable();
  if (impl_->shards) return impl_->shards->value_width();
  return impl_->value_width;
}
uint64_t Table::size() const {
  impl_->check_usable();
  if (impl_->shards) return impl_->shards->size();
  return impl_->engine->item_count();
}

namespace {

// An HMEH pool: the shape and levels say nothing (left zero); slots counts the segment arena's
// slots (inspect) or the directory's segments' (an open table), heap cells the heap arena's.
TableInfo info_from_hmeh_header(const format::PoolHeader& h, TableInfo i) {
  const format::HmehMeta& m = h.hmeh;
  auto units = [](uint64_t first, uint32_t chunks) { return format::HeapGeometry{first, 0}.chunk_begin(chunks); };
  i.index = "hmeh";
  i.key_width = m.key_width;
  i.value_width = m.value_width;
  i.shape = {0, 0, 0};
  i.hash_seed = m.hash_seed;
  i.items = h.item_count;
  i.slots = units(m.segment_first_chunk, m.segment_chunk_count) * (uint64_t{1} << m.segment_bytes_log2) /
            format::hmeh::slot_bytes(m.key_width);
  i.load_factor = i.slots ? static_cast<double>(i.items) / static_cast<double>(i.slots) : 0;
  i.heap_cells = format::value_is_inline(m.value_width) ? 0 : units(m.heap_first_chunk_cells, m.heap_chunk_count);
  i.cell_size = m.cell_size;
  return i;
}

TableInfo info_from_header(const format::PoolHeader& h, const std::string& path, pool::PoolKind kind, uint64_t file_size) {
  TableInfo i;
  i.path = path;
  i.pool_kind = pool::to_string(kind);
  i.pool_bytes = file_size;
  i.clean_shutdown = h.clean_shutdown != 0;
  i.generation = h.generation;
  i.format_version = fmt::format("{}.{}", h.version_major, h.version_minor);
  i.value_checksums = format::has_value_checksums(h);
  for (unsigned char b : h.uuid) i.uuid += fmt::format("{:02x}", b);
  i.last_snapshot_unix_ns = h.snapshot_unix_ns;
  i.shard_index = h.shard_index;
  i.shard_count = h.shard_count;
  if (h.index_kind == format::kIndexHmeh) return info_from_hmeh_header(h, i);
  i.index = h.index_kind == format::kIndexGphash ? "gphash" : "unknown";
  i.key_width = h.gphash.key_width;
  i.value_width = h.gphash.value_width;
  i.shape = format::shape_of(h);
  i.hash_seed = h.gphash.hash_seed;
  i.items = h.item_count;
  i.slots = format::slot_capacity(h);
  i.load_factor = i.slots ? static_cast<double>(i.items) / static_cast<double>(i.slots) : 0;
  i.bottom_level = h.gphash.bottom_level;
  i.top_level = format::top_level(h);
  i.heap_cells = format::heap_cell_capacity(h);
  i.cell_size = h.gphash.cell_size;
  i.resizing = h.gphash.resize_state != format::kResizeNone;
  return i;
}

void set_writes(TableInfo& i, const format::PoolHeader& h, uint64_t counter) {
  i.writes = counter;
  i.writes_since_snapshot = counter >= h.snapshot_writes ? counter - h.snapshot_writes : counter;
}

}  // namespace

TableInfo Table::inspect(const std::string& pool_spec) {
  const pool::HeaderSnapshot snap = pool::read_header(pool_spec);
  TableInfo i = info_from_header(snap.header, snap.path, snap.kind, snap.file_size);
  i.in_use = snap.in_use;
  set_writes(i, snap.header, snap.write_counter);
  return i;
}

TableInfo Table::info() const {
  impl_->check_usable();
  std::shared_lock lock(impl_->batches);
  if (impl_->shards) return impl_->shards->info();
  engine::EngineStats s = impl_->engine->stats();
  const pool::Pool& pool = *impl_->pool;
  TableInfo i = info_from_header(pool.header(), pool.path(), pool.kind(), pool.file_size());
  i.engine = impl_->engine->name();
  i.items = impl_->engine->item_count();
  if (s.slots) {
    i.slots = s.slots;
    if (i.index == "gphash") {
      i.bottom_level = s.bottom_level;
      i.top_level = s.bottom_level + i.shape.levels - 1;
    }
  }
  i.load_factor = i.slots ? static_cast<double>(i.items) / static_cast<double>(i.slots) : 0;
  i.recovered = s.recovered;
  i.open_seconds = s.open_seconds;
  i.resizes = s.resizes;
  i.displacements = s.displacements;
  i.heap_grows = s.heap_grows;
  i.last_resize_seconds = s.last_resize_seconds;
  i.resize_seconds = s.resize_seconds;
  i.rehash_seconds = s.rehash_seconds;
  i.heap_grow_seconds = s.heap_grow_seconds;
  i.last_batch_device_seconds = s.last_batch_device_seconds;
  i.last_plan_seconds = s.last_plan_seconds;
  i.last_kernel_seconds = s.last_kernel_seconds;
  i.last_batch_planned = s.last_batch_planned;
  i.last_slow_seconds = s.last_slow_seconds;
  i.open_map_seconds = s.open_map_seconds;
  i.recovery_seconds = s.recovery_seconds;
  i.cache_lines = s.cache_lines;
  i.cache_gpu_bytes = s.cache_gpu_bytes;
  i.cache_lookups = s.cache_lookups;
  i.cache_hits = s.cache_hits;
  i.cache_phases = s.cache_phases;
  i.cache_lines_loaded = s.cache_lines_loaded;
  i.last_batch_cache_loading = s.last_batch_cache_loading;
  set_writes(i, pool.header(), snapshot::pool_writes(pool));
  i.snapshot_path = impl_->options.snapshots.path;
  std::lock_guard status(impl_->snapshot_status);
  i.snapshots_taken = impl_->snapshots_taken;
  i.last_snapshot = impl_->last_snapshot;
  i.snapshot_error = impl_->snapshot_error;
  return i;
}

void Table::save() {
  std::unique_lock lock(impl_->batches);
  if (impl_->shards) return impl_->shards->save();
  impl_->guarded([&] { impl_->engine->save(); });
}

namespace {

int check_threads(int threads, const char* what) {
  if (threads < 0 || threads > kMaxThreads)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{} {} is not in 0..{} (0 = all hardware threads)", what, threads, kMaxThreads), "threads");
  return threads > 0 ? threads : std::max(1, omp_get_max_threads());
}

CheckResult to_result(const engine::CheckReport& r) {
  CheckResult c;
  c.ok = r.ok;
  c.violation = r.violation;
  c.violations = r.violations;
  c.items = r.items;
  c.values_verified = r.values_verified;
  return c;
}

}  // namespace

CheckResult Table::check(int threads) const {
  threads = check_threads(threads, "check threads");
  impl_->check_usable();
  std::unique_lock lock(impl_->batches);
  if (impl_->shards) return impl_->shards->check(threads);
  impl_->engine->save();  // a GPU-memory table is checked as saved
  if (is_hmeh(impl_->pool->header())) return to_result(hmeh::check_index(*impl_->pool, threads, impl_->engine->item_count()));
  return to_result(engine::check_table(*impl_->pool, {threads, impl_->engine->item_count(), false}));
}

namespace {

// check_pool on an HMEH pool: a dirty pool is recovered in the private view (the engine's open
// runs HMEH's recovery) and checked as recovery leaves it; a recovery that finds corruption
// leaves the view as it is, and the checker reports it.
CheckResult check_hmeh_pool(pool::Pool& pool, int threads) {
  const bool dirty = pool.header().clean_shutdown == 0;
  std::optional<uint64_t> expected;
  if (dirty) {
    try {
      hmeh::EngineOptions o;
      o.threads = threads;
      hmeh::open_engine(pool, o)->abandon();  // nothing of it reaches the file (copy on write)
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kCorruptTable && e.code() != ErrorCode::kCorruptHeader) throw;
    }
  } else {
    expected = pool.header().item_count;
  }
  CheckResult r = to_result(hmeh::check_index(pool, threads, expected));
  r.recovered = dirty;
  return r;
}

// repair on an HMEH pool: recovery (at open) and a check. HMEH's checker does not yet say which
// slots to drop, so a pool that still breaks an invariant is refused, unchanged beyond recovery.
RepairResult repair_hmeh_pool(pool::Pool& pool, int threads) {
  RepairResult result;
  result.recovered = pool.header().clean_shutdown == 0;
  hmeh::EngineOptions o;
  o.threads = threads;
  std::unique_ptr<hmeh::Index> engine = hmeh::open_engine(pool, o);
  const engine::CheckReport found = hmeh::check_index(pool, threads, engine->item_count());
  if (!found.ok) {
    engine->abandon();  // the pool stays dirty: its next open recovers it again
    throw Error(ErrorCode::kCorruptTable,
                "this HMEH pool breaks an invariant after recovery (" + found.violation +
                    "), and repair cannot drop damaged HMEH items yet: copy what is readable with `gphash dump` "
                    "into a new pool");
  }
  engine->close();  // marks the pool clean
  result.items = found.items;
  return result;
}

}  // namespace

CheckResult Table::check_pool(const std::string& pool_spec, int threads) {
  threads = check_threads(threads, "check threads");
  pool::OpenOptions view;
  view.copy_on_write = true;
  auto pool = pool::Pool::open(pool_spec, view);
  if (is_hmeh(pool->header())) return check_hmeh_pool(*pool, threads);
  const bool dirty = pool->header().clean_shutdown == 0;
  std::optional<uint64_t> expected;
  if (dirty) {
    try {
      engine::recover_pool(*pool, threads, /*clear_damaged_move_record=*/false);
    } catch (const Error& e) {
      // Recovery stops at what it may not act on (a damaged maintenance record): check the table
      // as it is, which reports that first.
      if (e.code() != ErrorCode::kCorruptTable) throw;
    }
  } else {
    expected = pool->header().item_count;
  }
  CheckResult r = to_result(engine::check_table(*pool, {threads, expected, false}));
  r.recovered = dirty;
  return r;
}

RepairResult Table::repair(const std::string& pool_spec, int threads) {
  threads = check_threads(threads, "repair threads");
  auto pool = pool::Pool::open(pool_spec, {});
  if (is_hmeh(pool->header())) return repair_hmeh_pool(*pool, threads);
  RepairResult result;
  result.recovered = pool->header().clean_shutdown == 0;
  const format::MaintenanceRecord& rec = *pool->maintenance();
  try {
    engine::validate_move_record(pool->header(), rec.move_state, rec.move_from, rec.move_to, rec.move_checksum);
  } catch (const Error&) {
    result.cleared_move_record = true;
  }
  engine::recover_pool(*pool, threads, /*clear_damaged_move_record=*/true);
  const engine::CheckReport found = engine::check_table(*pool, {threads, std::nullopt, true});
  const format::BucketLayout layout = format::bucket_layout(pool->header());
  engine::TableMeta meta(*pool);
  for (const engine::DamagedSlot& d : found.damaged) {
    auto* state = reinterpret_cast<uint64_t*>(meta.bucket(d.at.level, d.at.bucket) + layout.state_offset(d.at.slot));
    __atomic_store_n(state, format::kSlotEmpty, __ATOMIC_RELEASE);
    pool->persist(state, 8);
    result.dropped.push_back(fmt::format("key {} at {}: {}", d.key_hex, engine::describe(d.at), d.reason));
  }
  pool->sync();
  const engine::CheckReport after = engine::check_table(*pool, {threads, std::nullopt, false});
  if (!after.ok)
    throw Error(ErrorCode::kCorruptTable, "repair could not make the pool consistent: " + after.violation);
  meta.mark_clean(after.items);
  result.items = after.items;
  return result;
}

bool Table::convert(const std::string& pool_spec) { return pool::convert_pool(pool_spec); }

size_t Table::export_items(ExportCursor& cursor, void* keys, void* values, size_t capacity, MemorySpace memory) {
  impl_->check_usable();
  if (cursor.done()) return 0;
  if (!keys) throw Error(ErrorCode::kInvalidArgument, "export needs a keys array", "keys");
  if (memory == MemorySpace::kDevice && impl_->options.engine != EngineKind::kGpu)
    throw Error(ErrorCode::kInvalidArgument, "exporting into GPU memory needs the GPU engine");
  std::unique_lock lock(impl_->batches);
  if (impl_->shards) return impl_->shards->export_items(cursor, keys, values, capacity, memory);
  const engine::EngineStats s = impl_->engine->stats();
  if (cursor.position == 0 && cursor.exported == 0) {
    cursor.resizes = s.resizes;
    cursor.displacements = s.displacements;
  } else if (cursor.resizes != s.resizes || cursor.displacements != s.displacements) {
    throw Error(ErrorCode::kInvalidArgument,
                "the table was resized or an item moved since this export began, so items may have been skipped "
                "or repeated: start the export again");
  }
  const size_t n = impl_->engine->export_items(
      cursor.position, {static_cast<std::byte*>(keys), static_cast<std::byte*>(values), capacity, memory}, cursor.damaged);
  cursor.exported += n;
  return n;
}

TableStats Table::stats() {
  impl_->check_usable();
  std::unique_lock lock(impl_->batches);
  if (impl_->shards) return impl_->shards->stats();
  const format::PoolHeader& h = impl_->pool->header();
  const engine::EngineStats s = impl_->engine->stats();
  TableStats r;
  if (is_hmeh(h)) {  // no levels: segments, and the value heap
    const auto& index = dynamic_cast<const hmeh::Index&>(*impl_->engine);
    r.segments = index.hmeh_stats().segments;
    if (!format::value_is_inline(h.hmeh.value_width)) {
      r.heap_cells = info_from_header(h, impl_->pool->path(), impl_->pool->kind(), impl_->pool->file_size()).heap_cells;
      r.heap_cells_used = impl_->engine->item_count();
    }
    return r;
  }
  const std::vector<uint64_t> items = impl_->engine->level_items();
  const uint32_t bottom = s.slots ? s.bottom_level : h.gphash.bottom_level;
  for (size_t i = 0; i < items.size(); ++i) {
    const uint32_t level = bottom + static_cast<uint32_t>(i);
    r.levels.push_back({level, format::level_buckets(level) * h.gphash.slots, items[i]});
  }
  if (!format::value_is_inline(h.gphash.value_width)) {
    r.heap_cells = format::heap_cell_capacity(h);
    r.heap_cells_used = impl_->engine->item_count();
  }
  return r;
}

void Table::close() {
  if (impl_->shards) {
    impl_->shards->close();
    impl_->shards.reset();
    return;
  }
  if (!impl_->engine) return;
  impl_->shut_down();
}

// ---- snapshots ---------------------------------------------------------------------------------

void Table::Impl::start_snapshots() {
  key_width = key_width_of(pool->header());
  value_width = value_width_of(pool->header());
  // The engine finishes its writes in flight and reports the pages it wrote whenever the snapshot
  // holds writers off (engine.h, Engine::prepare_snapshot).
  snapshotter = std::make_unique<snapshot::Snapshotter>(
      *pool, batches, snapshot::posix_file_system(), [this] { engine->prepare_snapshot(); }, &attachment_writers);
  const SnapshotOptions& s = options.snapshots;
  if (s.every_seconds > 0 || s.every_batches > 0)
    auto_snapshots = std::make_unique<snapshot::AutoSnapshots>(
        [this] {
          try {
            // A device session's kernels may be writing: wait for a later round.
            if (engine->device_session_open()) return;
            const bool attachment_changed = attachment_written.exchange(false);
            try {
              take_snapshot(options.snapshots.path, /*skip_if_unchanged=*/!attachment_changed);
            } catch (...) {
              if (attachment_changed) attachment_written = true;
              throw;
            }
          } catch (const std::exception& e) {
            std::lock_guard status(snapshot_status);
            snapshot_error = e.what();
          }
        },
        s.every_seconds, s.every_batches);
}

SnapshotResult Table::Impl::take_snapshot(const std::string& path, bool skip_if_unchanged) {
  check_usable();
  // Refused before the snapshot starts, so the chain stays as it was and the next snapshot can
  // still be a delta (the engine's own check, mid-snapshot, would make it start a new chain).
  if (!engine_closed && engine->device_session_open())
    throw Error(ErrorCode::kInvalidArgument,
                "a device session is open on this table (its kernels may be writing): end it before taking a snapshot");
  snapshot::TakeOptions take;
  if (options.engine == EngineKind::kGpu && options.placement == Placement::kGpuMemory && !engine_closed) {
    std::unique_lock lock(batches);
    guarded([&] { engine->save(); });  // the pool must hold the table before it is copied
    // Batches after this lock is released change only GPU memory, but count in the pool's write
    // counter: the snapshot stands for the count at the save, so they are not taken as saved
    // (an automatic snapshot would skip them, and info() would understate what a restart loses).
    take.captured_writes = snapshot::pool_writes(*pool);
  }
  take.file_mode = options.snapshots.file_mode;
  take.skip_if_unchanged = skip_if_unchanged;
  SnapshotResult r = snapshotter->take(path, take);
  if (r.skipped) return r;
  std::lock_guard status(snapshot_status);
  ++snapshots_taken;
  last_snapshot = r;
  snapshot_error.clear();
  return r;
}

void Table::Impl::shut_down() {
  if (auto_snapshots) auto_snapshots->stop();
  {
    std::unique_lock lock(batches);
    guarded([&] { engine->close(); });
    engine_closed = true;
  }
  // With automatic snapshots, what the last one missed goes into a final one: a clean shutdown
  // then loses nothing to a reboot. Its failure is reported after the pool is let go of (the pool
  // is closed cleanly either way; the previous snapshot stands).
  std::exception_ptr last_failed;
  if (auto_snapshots && !pool->read_only()) {
    auto_snapshots.reset();  // once only, also if it fails
    try {
      take_snapshot(options.snapshots.path, /*skip_if_unchanged=*/true);
    } catch (...) {
      last_failed = std::current_exception();
    }
  }
  auto_snapshots.reset();
  {
    // A closed table lets go of its pool (lock, mapping, GPU memory), so this process can open,
    // check or copy it while the Table object still exists.
    std::unique_lock lock(batches);
    snapshotter.reset();
    engine.reset();
    pool.reset();
  }
  if (last_failed) std::rethrow_exception(last_failed);
}

SnapshotResult Table::snapshot(const std::string& path) {
  impl_->check_usable();
  const std::string& file = path.empty() ? impl_->options.snapshots.path : path;
  if (file.empty())
    throw Error(ErrorCode::kInvalidArgument, "snapshot: no file given and no OpenOptions::snapshots.path", "path");
  if (impl_->shards) {
    // One file per shard (FILE.shard<k>), all taken while writing batches are held off: together
    // they are one consistent cut of the table.
    std::unique_lock lock(impl_->batches);
    return impl_->shards->snapshot(file);
  }
  return impl_->take_snapshot(file);
}

// ---- the attachment ----------------------------------------------------------------------------

// A sharded table keeps its attachment in shard 0's pool (no GPU call: any thread may use it).
std::span<std::byte> Table::attachment() const {
  if (impl_->shards) return impl_->shards->shard(0).attachment();
  impl_->check_usable();
  return impl_->pool->attachment();
}

std::span<std::byte> Table::create_attachment(uint64_t bytes) {
  if (impl_->shards) return impl_->shards->shard(0).create_attachment(bytes);
  impl_->check_usable();
  if (impl_->options.read_only) throw Error(ErrorCode::kReadOnly, "the table is open read-only: no attachment can be made");
  if (bytes == 0) throw Error(ErrorCode::kInvalidArgument, "an attachment needs at least one byte", "bytes");
  std::unique_lock hold(impl_->attachment_writers);  // before batches, as a snapshot takes them
  std::unique_lock lock(impl_->batches);
  format::PoolHeader h = impl_->pool->header();
  if (h.attachment_bytes != 0)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("pool {} already has an attachment ({} bytes)", impl_->pool->path(), h.attachment_bytes));
  h.attachment_offset = impl_->pool->allocate_extent(h, bytes);
  h.attachment_bytes = bytes;
  snapshot::count_pool_writes(*impl_->pool, 1);  // the pool changed since its last snapshot
  impl_->pool->write_header(h);
  return impl_->pool->attachment();
}

void Table::persist_attachment(const void* p, size_t n) const {
  if (impl_->shards) return impl_->shards->shard(0).persist_attachment(p, n);
  const std::span<std::byte> a = impl_->pool->attachment();
  const auto* b = static_cast<const std::byte*>(p);
  if (b < a.data() || n > a.size() || b > a.data() + (a.size() - n))
    throw Error(ErrorCode::kInvalidArgument, "persist_attachment: the range is not inside the attachment");
  impl_->pool->persist(p, n);
  impl_->attachment_written.store(true, std::memory_order_relaxed);
}

std::shared_lock<SnapshotGate> Table::hold_snapshots() const {
  if (impl_->shards) return impl_->shards->shard(0).hold_snapshots();
  return std::shared_lock<SnapshotGate>(impl_->attachment_writers);
}

RestoreResult Table::restore(const std::string& snapshot_file, const std::string& pool_spec,
                             const RestoreOptions& options) {
  check_threads(options.threads, "restore threads");
  RestoreResult r = snapshot::restore_pool(snapshot_file, pool_spec, options);
  // The capture saw the pool open for writing: recover (recount) it once and close it cleanly.
  OpenOptions open;
  open.threads = options.threads;
  Impl::Member any;
  any.kind = Impl::Member::kAny;  // a shard's pool too (a sharded table's open restores its missing shards)
  Table t(Impl::open_pool(pool_spec, open, any));
  r.items = t.size();
  t.close();
  return r;
}

const char* to_string(Op op) noexcept {
  switch (op) {
    case Op::kSearch: return "search";
    case Op::kInsert: return "insert";
    case Op::kUpsert: return "upsert";
    case Op::kUpdate: return "update";
    case Op::kErase: return "erase";
  }
  return "?";
}

const char* to_string(OpStatus s) noexcept {
  switch (s) {
    case OpStatus::kOk: return "ok";
    case OpStatus::kNotFound: return "not found";
    case OpStatus::kExists: return "exists";
    case OpStatus::kHeapFull: return "heap full";
    case OpStatus::kTableFull: return "table full";
    case OpStatus::kReservedKey: return "reserved key";
    case OpStatus::kCorruptValue: return "corrupt value";
    case OpStatus::kInvalidOp: return "invalid op";
  }
  return "?";
}

}  // namespace gphash
