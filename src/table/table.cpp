#include "gphash/table.h"

#include <fmt/format.h>
#include <omp.h>

#include <mutex>
#include <shared_mutex>

#include "engines/common/checker.h"
#include "engines/common/table_meta.h"
#include "engines/cpu/cpu_engine.h"
#include "engines/engine.h"
#include "format/header.h"
#include "format/hmeh/layout.h"
#include "indexes/hmeh/hmeh.h"
#include "pool/pool.h"
#if GPHASH_HAVE_CUDA
#include "engines/gpu/gpu_engine.h"
#endif

namespace gphash {

struct Table::Impl {
  std::unique_ptr<pool::Pool> pool;
  std::unique_ptr<engine::Engine> engine;
  OpenOptions options;
  // Writing batches run alone; searching batches may share the table.
  mutable std::shared_mutex batches;
};

namespace {

[[noreturn]] void refuse_gpu_on_hmeh() {
  throw Error(ErrorCode::kInvalidArgument,
              "the GPU engine works on GPHash pools only; this pool holds an HMEH index: use the CPU engine", "engine");
}

std::unique_ptr<engine::Engine> make_engine(pool::Pool& pool, const OpenOptions& options) {
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

bool needs_value(Op op) { return op == Op::kInsert || op == Op::kUpsert || op == Op::kUpdate; }

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
  if (impl_ && impl_->engine) {
    try {
      impl_->engine->close();
    } catch (...) {
      // The pool stays marked dirty; the next open recovers it.
    }
  }
}

Table Table::create(const std::string& pool_spec, const TableConfig& config, const OpenOptions& options) {
  if (config.index == IndexKind::kHmeh && options.engine != EngineKind::kCpu) refuse_gpu_on_hmeh();
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->pool = pool::Pool::create(pool_spec, {options.max_pool_bytes, 0, options.replace});
  if (config.index == IndexKind::kHmeh)
    hmeh::initialize(*impl->pool, config);
  else
    engine::TableMeta::initialize(*impl->pool, config);
  impl->pool->publish();
  impl->engine = make_engine(*impl->pool, options);
  return Table(std::move(impl));
}

Table Table::open(const std::string& pool_spec, const OpenOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->pool = pool::Pool::open(pool_spec, {options.read_only, options.max_pool_bytes, options.force_flush});
  impl->engine = make_engine(*impl->pool, options);
  return Table(std::move(impl));
}

void Table::execute(const Batch& b) {
  const format::PoolHeader& h = impl_->pool->header();
  if (b.size == 0) return;
  if (!b.status) throw Error(ErrorCode::kInvalidArgument, "malformed batch: no status array");
  if (!b.keys) throw Error(ErrorCode::kInvalidArgument, "malformed batch: no keys");
  if (b.key_width != key_width_of(h))
    throw Error(ErrorCode::kKeyWidthMismatch,
                fmt::format("key width mismatch: pool has {}, batch gives {}", key_width_of(h), b.key_width), "key_width");
  bool writes = false, values_needed = false;
  for (size_t i = 0; i < b.size; ++i) {
    const Op op = b.ops ? b.ops[i] : b.op;
    if (static_cast<uint8_t>(op) > static_cast<uint8_t>(Op::kErase))
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("malformed batch: unknown op {} at index {}", static_cast<int>(op), i), "ops");
    writes |= op != Op::kSearch;
    values_needed |= needs_value(op);
    if (!b.ops) break;  // one op for all entries
  }
  if (values_needed && !b.values)
    throw Error(ErrorCode::kInvalidArgument, "malformed batch: insert, upsert and update need values");
  if ((values_needed || b.values_out) && b.value_width != value_width_of(h))
    throw Error(ErrorCode::kValueWidthMismatch,
                fmt::format("value width mismatch: pool has {}, batch gives {}", value_width_of(h), b.value_width),
                "value_width");
  if (writes && impl_->pool->read_only())
    throw Error(ErrorCode::kReadOnly, fmt::format("pool {} is open read-only", impl_->pool->path()));
  if (b.memory == MemorySpace::kDevice && impl_->options.engine != EngineKind::kGpu)
    throw Error(ErrorCode::kInvalidArgument, "batch arrays in GPU memory need the GPU engine");
  if (reinterpret_cast<uintptr_t>(b.keys) % 8 != 0)
    throw Error(ErrorCode::kInvalidArgument, "malformed batch: keys must be 8-byte aligned", "keys");
  if (writes) {
    std::unique_lock lock(impl_->batches);
    impl_->engine->execute(b);
  } else {
    std::shared_lock lock(impl_->batches);
    impl_->engine->execute(b);
  }
}

uint32_t Table::key_width() const { return key_width_of(impl_->pool->header()); }
uint32_t Table::value_width() const { return value_width_of(impl_->pool->header()); }
uint64_t Table::size() const { return impl_->engine->item_count(); }

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

}  // namespace

TableInfo Table::inspect(const std::string& pool_spec) {
  const pool::HeaderSnapshot snap = pool::read_header(pool_spec);
  TableInfo i = info_from_header(snap.header, snap.path, snap.kind, snap.file_size);
  i.in_use = snap.in_use;
  return i;
}

TableInfo Table::info() const {
  std::shared_lock lock(impl_->batches);
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
  i.last_batch_device_seconds = s.last_batch_device_seconds;
  i.last_plan_seconds = s.last_plan_seconds;
  i.last_kernel_seconds = s.last_kernel_seconds;
  i.last_slow_seconds = s.last_slow_seconds;
  i.open_map_seconds = s.open_map_seconds;
  i.recovery_seconds = s.recovery_seconds;
  return i;
}

void Table::save() {
  std::unique_lock lock(impl_->batches);
  impl_->engine->save();
}

CheckResult Table::check(int threads) const {
  std::unique_lock lock(impl_->batches);
  impl_->engine->save();  // a GPU-memory table is checked as saved
  if (threads <= 0) threads = std::max(1, omp_get_max_threads());
  const engine::CheckReport r = impl_->pool->header().index_kind == format::kIndexHmeh
                                    ? hmeh::check_index(*impl_->pool, threads, impl_->engine->item_count())
                                    : engine::check_table(*impl_->pool, threads, impl_->engine->item_count());
  return {r.ok, r.violation, r.items};
}

void Table::close() {
  std::unique_lock lock(impl_->batches);
  impl_->engine->close();
}

std::string to_string(TableShape s) { return fmt::format("{}L-{}H-{}S", s.levels, s.hashes, s.slots); }

TableShape parse_shape(const std::string& text) {
  unsigned l = 0, h = 0, s = 0;
  char tail = 0;
  if (std::sscanf(text.c_str(), "%uL-%uH-%uS%c", &l, &h, &s, &tail) != 3 || l > 255 || h > 255 || s > 255)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("cannot read shape '{}': write it like 2L-2H-8S (levels, hashes, slots)", text), "shape");
  return {static_cast<uint8_t>(l), static_cast<uint8_t>(h), static_cast<uint8_t>(s)};
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
  }
  return "?";
}

}  // namespace gphash
