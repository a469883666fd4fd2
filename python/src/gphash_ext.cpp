// gphash._gphash: the bindings. Thin on purpose (DESIGN.md section 7): arrays arrive through
// DLPack / the buffer protocol as nb::ndarray, are checked for shape, dtype and device, and go
// to the same gphash::Table and EmbeddingStore the C++ API uses. Outputs are allocated by the
// Python layer (python/gphash/__init__.py) with the caller's array library, so a torch CUDA
// tensor stays a torch CUDA tensor and nothing is copied.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "embedding/embedding_store.h"
#include "embedding/file_tier.h"
#include "gphash/table.h"

namespace nb = nanobind;
using namespace nb::literals;
using Array = nb::ndarray<nb::c_contig>;

namespace {

PyObject* g_error = nullptr;

const char* code_name(gphash::ErrorCode c) {
  using E = gphash::ErrorCode;
  switch (c) {
    case E::kNotAPool: return "NotAPool";
    case E::kUnsupportedVersion: return "UnsupportedVersion";
    case E::kUnsupportedFeature: return "UnsupportedFeature";
    case E::kChecksumMismatch: return "ChecksumMismatch";
    case E::kTruncated: return "Truncated";
    case E::kCorruptHeader: return "CorruptHeader";
    case E::kCorruptTable: return "CorruptTable";
    case E::kKeyWidthMismatch: return "KeyWidthMismatch";
    case E::kValueWidthMismatch: return "ValueWidthMismatch";
    case E::kInvalidArgument: return "InvalidArgument";
    case E::kNotFound: return "NotFound";
    case E::kPoolExists: return "PoolExists";
    case E::kPoolInUse: return "PoolInUse";
    case E::kNoSpace: return "NoSpace";
    case E::kIo: return "Io";
    case E::kNotMappable: return "NotMappable";
    case E::kNoGpu: return "NoGpu";
    case E::kReadOnly: return "ReadOnly";
    case E::kCorruptFile: return "CorruptFile";
    case E::kCuda: return "Cuda";
    case E::kNeedsRecovery: return "NeedsRecovery";
    case E::kTableFailed: return "TableFailed";
    case E::kShardMismatch: return "ShardMismatch";
  }
  return "Unknown";
}

[[noreturn]] void bad(const std::string& message, const std::string& field) {
  throw gphash::Error(gphash::ErrorCode::kInvalidArgument, message, field);
}

bool on_cuda(const Array& a) { return a.device_type() == nb::device::cuda::value; }
bool on_cpu(const Array& a) { return a.device_type() == nb::device::cpu::value; }

// n rows of `width` bytes each (a 1-D array of 8-byte items, or [n, width] bytes).
size_t rows_of(const Array& a, uint32_t width, const char* field) {
  if (a.ndim() == 0) bad(std::string(field) + " must be an array with one row per operation", field);
  const size_t n = a.shape(0);
  if (a.nbytes() != n * width)
    bad(std::string(field) + " must hold " + std::to_string(width) + " bytes per row (" + std::to_string(n) +
            " rows have " + std::to_string(a.nbytes()) + " bytes)", field);
  return n;
}

void require_int64(const Array& a, const char* field) {
  if (a.dtype() != nb::dtype<int64_t>() || a.ndim() != 1)
    bad(std::string(field) + " must be a 1-D int64 array", field);
}

// BktCache from Python: policy "off", "lfu", "lru" or "random"; a budget (bytes) sizes the cache by
// itself, complete when it holds every bucket; without one, `fraction` of the buckets (1: complete).
struct CacheArgs {
  std::string policy = "off";
  double fraction = 0.2;
  uint64_t bytes = 0;
};

gphash::OpenOptions open_options(const std::string& engine, const std::string& placement, bool read_only, bool replace,
                                 int threads, const std::vector<int>& shards = {}, const CacheArgs& cache = {}) {
  gphash::OpenOptions o;
  if (cache.policy == "off") o.cache.policy = gphash::CachePolicy::kOff;
  else if (cache.policy == "lfu") o.cache.policy = gphash::CachePolicy::kLfu;
  else if (cache.policy == "lru") o.cache.policy = gphash::CachePolicy::kLru;
  else if (cache.policy == "random") o.cache.policy = gphash::CachePolicy::kRandom;
  else bad("cache must be off, lfu, lru or random, not " + cache.policy, "cache");
  if (!(cache.fraction >= 0 && cache.fraction <= 1)) bad("cache_fraction must be in [0, 1]", "cache_fraction");
  o.cache.fraction = cache.fraction;
  o.cache.gpu_bytes = cache.bytes;
  if (engine == "cpu") o.engine = gphash::EngineKind::kCpu;
  else if (engine == "gpu") o.engine = gphash::EngineKind::kGpu;
  else bad("engine must be cpu or gpu, not " + engine, "engine");
  if (placement == "host") o.placement = gphash::Placement::kHostMapped;
  else if (placement == "gpu") o.placement = gphash::Placement::kGpuMemory;
  else bad("placement must be host or gpu, not " + placement, "placement");
  o.read_only = read_only;
  o.replace = replace;
  o.threads = threads;
  o.shards = shards;
  return o;
}

struct PyBatchEvent {
  gphash::BatchEvent event;
  void wait() {
    nb::gil_scoped_release release;
    event.wait();
  }
  bool ready() const { return event.ready(); }
};

struct PyTable {
  std::optional<gphash::Table> table;
  gphash::Table& get() {
    if (!table) bad("the table is closed", "table");
    return *table;
  }

  // One batch. Host arrays run now (execute); CUDA arrays are enqueued on `stream` (execute_async)
  // and the returned event completes with them; the host does not wait for the device.
  std::optional<PyBatchEvent> execute(int op, const Array& keys, std::optional<Array> values,
                                      std::optional<Array> values_out, const Array& status, uintptr_t stream) {
    gphash::Table& t = get();
    if (op < 0 || op > 4) bad("unknown op " + std::to_string(op), "op");
    const size_t n = rows_of(keys, t.key_width(), "keys");
    if (status.nbytes() != n || status.dtype() != nb::dtype<uint8_t>()) bad("status must be n uint8 entries", "status");
    const bool cuda = on_cuda(keys);
    if (!cuda && !on_cpu(keys)) bad("keys must be in host memory or on a CUDA device", "keys");
    auto same_place = [&](const Array& a, const char* field) {
      if (on_cuda(a) != cuda) bad(std::string(field) + " must be on the same device as keys", field);
    };
    same_place(status, "status");
    gphash::Batch b{.size = n, .key_width = t.key_width(), .value_width = t.value_width(),
                    .op = static_cast<gphash::Op>(op), .keys = keys.data(),
                    .status = reinterpret_cast<gphash::OpStatus*>(status.data()),
                    .memory = cuda ? gphash::MemorySpace::kDevice : gphash::MemorySpace::kHost};
    if (values) {
      if (rows_of(*values, t.value_width(), "values") != n) bad("values must have one row per key", "values");
      same_place(*values, "values");
      b.values = values->data();
    }
    if (values_out) {
      if (rows_of(*values_out, t.value_width(), "values_out") != n) bad("values_out must have one row per key", "values_out");
      same_place(*values_out, "values_out");
      b.values_out = values_out->data();
    }
    if (cuda) {
      gphash::BatchEvent e;
      {
        nb::gil_scoped_release release;
        e = t.execute_async(b, reinterpret_cast<CUstream_st*>(stream));
      }
      return PyBatchEvent{e};
    }
    nb::gil_scoped_release release;
    t.execute(b);
    return std::nullopt;
  }

  nb::dict info() {
    const gphash::TableInfo i = get().info();
    nb::dict d;
    d["path"] = i.path;
    d["pool_kind"] = i.pool_kind;
    d["engine"] = i.engine;
    d["key_width"] = i.key_width;
    d["value_width"] = i.value_width;
    d["shape"] = gphash::to_string(i.shape);
    d["items"] = i.items;
    d["slots"] = i.slots;
    d["load_factor"] = i.load_factor;
    d["pool_bytes"] = i.pool_bytes;
    d["recovered"] = i.recovered;
    d["resizes"] = i.resizes;
    d["format_version"] = i.format_version;
    d["uuid"] = i.uuid;
    d["shard_count"] = i.shard_count;  // 0: one pool; else the shards', summed above
    // BktCache (GPU engine, host placement): buckets cached now, GPU memory held, and since open
    // operations on existing keys, those served from GPU memory, loading phases.
    d["cache_lines"] = i.cache_lines;
    d["cache_gpu_bytes"] = i.cache_gpu_bytes;
    d["cache_lookups"] = i.cache_lookups;
    d["cache_hits"] = i.cache_hits;
    d["cache_phases"] = i.cache_phases;
    d["cache_lines_loaded"] = i.cache_lines_loaded;
    d["last_batch_cache_loading"] = i.last_batch_cache_loading;
    return d;
  }

  // Exports into caller arrays of `capacity` rows; returns how many rows were filled.
  size_t export_items(const Array& keys, const Array& values) {
    gphash::Table& t = get();
    const size_t cap = rows_of(keys, t.key_width(), "keys");
    if (rows_of(values, t.value_width(), "values") != cap) bad("values must have as many rows as keys", "values");
    if (!on_cpu(keys) || !on_cpu(values)) bad("export writes host arrays", "keys");
    gphash::ExportCursor cursor;
    size_t total = 0;
    std::vector<std::byte> spare_key(t.key_width()), spare_value(t.value_width());
    while (!cursor.done()) {
      if (total == cap) {  // full: the cursor may still have to learn that it is at the end
        if (t.export_items(cursor, spare_key.data(), spare_value.data(), 1) != 0)
          bad("export needs room for every item (the table grew during the export)", "capacity");
        continue;
      }
      total += t.export_items(cursor, static_cast<std::byte*>(keys.data()) + total * t.key_width(),
                              static_cast<std::byte*>(values.data()) + total * t.value_width(), cap - total);
    }
    return total;
  }
};

nb::dict check_dict(const gphash::CheckResult& r) {
  nb::dict d;
  d["ok"] = r.ok;
  d["violation"] = r.violation;
  d["violations"] = r.violations;
  d["items"] = r.items;
  d["recovered"] = r.recovered;
  return d;
}

namespace emb = gphash::embedding;

void require_rows(const Array& a, emb::RowType t, uint32_t dim, const char* field) {
  const nb::dlpack::dtype d = a.dtype();
  bool ok = false;
  if (t == emb::RowType::kFloat32) ok = d == nb::dtype<float>();
  else if (t == emb::RowType::kFloat16) ok = d.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Float) && d.bits == 16;
  else ok = (d.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat) && d.bits == 16) ||
            d == nb::dtype<uint16_t>();  // NumPy has no bfloat16: raw bits as uint16
  if (!ok) bad(std::string(field) + " must be " + emb::to_string(t) + ", the store's dtype", field);
  if (a.ndim() != 2 || a.shape(1) != dim)
    bad(std::string(field) + " must be [n, " + std::to_string(dim) + "] (the store's dim)", field);
}

struct PyStore {
  std::optional<emb::EmbeddingStore> store;
  emb::EmbeddingStore& get() {
    if (!store) bad("the embedding store is closed", "store");
    return *store;
  }
  void insert_or_assign(const Array& ids, const Array& rows) {
    emb::EmbeddingStore& s = get();
    require_int64(ids, "ids");
    require_rows(rows, s.dtype(), s.dim(), "rows");
    if (!on_cpu(ids) || !on_cpu(rows)) bad("insert_or_assign takes host arrays", "ids");
    if (rows.shape(0) != ids.shape(0)) bad("rows must have one row per id", "rows");
    nb::gil_scoped_release release;
    s.insert_or_assign(static_cast<const int64_t*>(ids.data()), ids.shape(0), rows.data());
  }
  size_t erase(const Array& ids) {
    emb::EmbeddingStore& s = get();
    require_int64(ids, "ids");
    if (!on_cpu(ids)) bad("erase takes a host array", "ids");
    nb::gil_scoped_release release;
    return s.erase(static_cast<const int64_t*>(ids.data()), ids.shape(0));
  }
  size_t find_or_insert(const Array& ids, const Array& out, const std::string& init, float scale, uint64_t seed) {
    emb::EmbeddingStore& s = get();
    require_int64(ids, "ids");
    require_rows(out, s.dtype(), s.dim(), "out");
    if (!on_cpu(ids) || !on_cpu(out)) bad("find_or_insert takes host arrays", "ids");
    if (out.shape(0) != ids.shape(0)) bad("out must have one row per id", "out");
    const emb::Initializer i = emb::parse_initializer(init);
    nb::gil_scoped_release release;
    return s.find_or_insert(static_cast<const int64_t*>(ids.data()), ids.shape(0), out.data(), i, scale, seed);
  }
  // Lookup into `out` (allocated by the caller). Host arrays: the CPU path, now. CUDA arrays: the
  // GPU path, enqueued on `stream`.
  void lookup(const Array& ids, std::optional<Array> offsets, bool include_last, const std::string& pooling,
              const Array& out, std::optional<Array> found, uintptr_t stream) {
    emb::EmbeddingStore& s = get();
    require_int64(ids, "ids");
    require_rows(out, s.dtype(), s.dim(), "out");
    const emb::Pooling p = emb::parse_pooling(pooling);
    const size_t n = ids.shape(0);
    const int64_t* off = nullptr;
    size_t n_off = 0;
    if (offsets) {
      require_int64(*offsets, "offsets");
      off = static_cast<const int64_t*>(offsets->data());
      n_off = offsets->shape(0);
      if (on_cuda(*offsets) != on_cuda(ids)) bad("offsets must be on the same device as ids", "offsets");
    }
    const size_t rows_needed = off ? (include_last ? (n_off ? n_off - 1 : 0) : n_off) : n;
    if (out.shape(0) != rows_needed)
      bad("out must have " + std::to_string(rows_needed) + " rows (one per " + (off ? "bag" : "id") + ")", "out");
    if (on_cuda(ids)) {
      if (!on_cuda(out)) bad("out must be on the same device as ids", "out");
      nb::gil_scoped_release release;
      s.lookup_device(static_cast<const int64_t*>(ids.data()), n, off, n_off, include_last, p, out.data(),
                      reinterpret_cast<CUstream_st*>(stream));
      return;
    }
    if (!on_cpu(out)) bad("out must be on the same device as ids", "out");
    uint8_t* f = nullptr;
    if (found) {
      if (found->nbytes() != n || found->dtype() != nb::dtype<uint8_t>()) bad("found must be n uint8 entries", "found");
      f = static_cast<uint8_t*>(found->data());
    }
    nb::gil_scoped_release release;
    s.lookup_host(static_cast<const int64_t*>(ids.data()), n, off, n_off, include_last, p, out.data(), f);
  }
  // CUDA tensors by address: the Python side has checked their dtype, shape and device. A lookup
  // of a small batch costs what the host spends on it, and taking three tensors through DLPack
  // costs more than the lookup's kernel launches.
  void lookup_cuda(uintptr_t ids, size_t n, uintptr_t offsets, size_t n_offsets, bool include_last,
                   const std::string& pooling, uintptr_t out, uintptr_t stream) {
    emb::EmbeddingStore& s = get();
    const emb::Pooling p = emb::parse_pooling(pooling);
    if (n && !ids) bad("ids must be allocated", "ids");
    nb::gil_scoped_release release;
    s.lookup_device(reinterpret_cast<const int64_t*>(ids), n, offsets ? reinterpret_cast<const int64_t*>(offsets) : nullptr,
                    n_offsets, include_last, p, reinterpret_cast<void*>(out), reinterpret_cast<CUstream_st*>(stream));
  }
  size_t export_rows(const Array& ids, const Array& rows) {
    emb::EmbeddingStore& s = get();
    require_int64(ids, "ids");
    require_rows(rows, s.dtype(), s.dim(), "rows");
    if (rows.shape(0) != ids.shape(0)) bad("rows must have one row per id", "rows");
    return s.export_rows(static_cast<int64_t*>(ids.data()), rows.data(), ids.shape(0));
  }
  nb::dict stats() {
    const emb::StoreStats st = get().stats();
    nb::dict d;
    d["items"] = st.items;
    d["capacity"] = st.capacity;
    d["rows_used"] = st.rows_used;
    d["lookups"] = st.lookups;
    d["ids_looked_up"] = st.ids_looked_up;
    d["unique_ids"] = st.unique_ids;
    d["cache_hits"] = st.cache_hits;
    d["cache_misses"] = st.cache_misses;
    d["missing_ids"] = st.missing_ids;
    d["cache_rows"] = st.cache_rows;
    d["rows_reclaimed"] = st.rows_reclaimed;
    d["host_rows"] = st.host_rows;
    d["tier_reads"] = st.tier_reads;
    d["tier_promotions"] = st.tier_promotions;
    return d;
  }
};

emb::StoreOptions store_options(const std::string& engine, uint64_t cache_bytes, uint32_t ways, uint32_t aging,
                                bool replace, int threads, bool tier_promotion) {
  emb::StoreOptions o;
  o.tier_promotion = tier_promotion;
  if (engine == "cpu") o.engine = gphash::EngineKind::kCpu;
  else if (engine == "gpu") o.engine = gphash::EngineKind::kGpu;
  else bad("engine must be cpu or gpu, not " + engine, "engine");
  o.cache_bytes = cache_bytes;
  o.cache_ways = ways;
  o.aging_interval = aging;
  o.replace = replace;
  o.threads = threads;
  return o;
}

struct PyFileTier {
  std::optional<emb::FileTier> tier;
  emb::FileTier& get() {
    if (!tier) bad("the file tier is closed", "tier");
    return *tier;
  }
  size_t check(const Array& rows, const Array& data) {
    emb::FileTier& t = get();
    if (rows.ndim() != 1 || (rows.dtype() != nb::dtype<uint64_t>() && rows.dtype() != nb::dtype<int64_t>()))
      bad("rows must be a 1-D array of 64-bit row indices", "rows");
    if (!on_cpu(rows) || !on_cpu(data)) bad("the file tier works on host arrays (pinned ones for the GPU)", "rows");
    const size_t n = rows.shape(0);
    if (data.nbytes() != n * t.row_bytes())
      bad("data must hold " + std::to_string(t.row_bytes()) + " bytes per row", "data");
    return n;
  }
  void write_rows(const Array& rows, const Array& data) {
    const size_t n = check(rows, data);
    nb::gil_scoped_release release;
    get().write_rows(static_cast<const uint64_t*>(rows.data()), n, data.data());
  }
  void read_rows(const Array& rows, const Array& out, bool use_io_uring) {
    const size_t n = check(rows, out);
    nb::gil_scoped_release release;
    get().read_rows(static_cast<const uint64_t*>(rows.data()), n, out.data(), use_io_uring);
  }
};

}  // namespace

NB_MODULE(_gphash, m) {
  m.doc() = "gphash: persistent GPU hash index and embedding store (extension module)";
  g_error = PyErr_NewException("gphash.Error", PyExc_RuntimeError, nullptr);
  m.attr("Error") = nb::handle(g_error);
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const gphash::Error& e) {
      nb::object inst = nb::borrow(g_error)(nb::str(e.what()));
      inst.attr("code") = nb::str(code_name(e.code()));
      inst.attr("field") = nb::str(e.field().c_str());
      PyErr_SetObject(g_error, inst.ptr());
    }
  });
#ifdef GPHASH_HAVE_CUDA
  m.attr("has_cuda") = true;
#else
  m.attr("has_cuda") = false;
#endif

  nb::class_<PyBatchEvent>(m, "BatchEvent")
      .def("wait", &PyBatchEvent::wait, "Blocks until the batch is done and durable.")
      .def("ready", &PyBatchEvent::ready);

  nb::class_<PyTable>(m, "Table")
      .def_static("create",
                  [](const std::string& pool, uint32_t kw, uint32_t vw, uint64_t capacity, const std::string& shape,
                     std::optional<uint64_t> seed, const std::string& engine, const std::string& placement,
                     bool replace, int threads, const std::vector<int>& shards, const std::string& cache,
                     double cache_fraction, uint64_t cache_bytes) {
                    gphash::TableConfig c{.key_width = kw, .value_width = vw, .shape = gphash::parse_shape(shape),
                                          .capacity = capacity, .hash_seed = seed};
                    const CacheArgs ca{cache, cache_fraction, cache_bytes};
                    auto t = std::make_unique<PyTable>();
                    t->table.emplace(
                        gphash::Table::create(pool, c, open_options(engine, placement, false, replace, threads, shards, ca)));
                    return t.release();
                  },
                  "pool"_a, "key_width"_a, "value_width"_a, "capacity"_a, "shape"_a, "hash_seed"_a.none(), "engine"_a,
                  "placement"_a, "replace"_a, "threads"_a, "shards"_a, "cache"_a, "cache_fraction"_a, "cache_bytes"_a,
                  nb::rv_policy::take_ownership)
      .def_static("open",
                  [](const std::string& pool, const std::string& engine, const std::string& placement, bool read_only,
                     int threads, const std::vector<int>& shards, const std::string& cache, double cache_fraction,
                     uint64_t cache_bytes) {
                    const CacheArgs ca{cache, cache_fraction, cache_bytes};
                    auto t = std::make_unique<PyTable>();
                    t->table.emplace(
                        gphash::Table::open(pool, open_options(engine, placement, read_only, false, threads, shards, ca)));
                    return t.release();
                  },
                  "pool"_a, "engine"_a, "placement"_a, "read_only"_a, "threads"_a, "shards"_a, "cache"_a,
                  "cache_fraction"_a, "cache_bytes"_a, nb::rv_policy::take_ownership)
      .def("execute", &PyTable::execute, "op"_a, "keys"_a, "values"_a.none(), "values_out"_a.none(), "status"_a,
           "stream"_a)
      .def("info", &PyTable::info)
      .def("check", [](PyTable& t, int threads) { return check_dict(t.get().check(threads)); }, "threads"_a = 0)
      .def("export_items", &PyTable::export_items)
      .def("size", [](PyTable& t) { return t.get().size(); })
      .def("key_width", [](PyTable& t) { return t.get().key_width(); })
      .def("value_width", [](PyTable& t) { return t.get().value_width(); })
      .def("close", [](PyTable& t) {
        if (t.table) t.table->close();
        t.table.reset();
      });

  m.def("check_pool", [](const std::string& pool, int threads) { return check_dict(gphash::Table::check_pool(pool, threads)); },
        "pool"_a, "threads"_a = 0);
  m.def("inspect", [](const std::string& pool) {
    const gphash::TableInfo i = gphash::Table::inspect(pool);
    nb::dict d;
    d["items"] = i.items;
    d["key_width"] = i.key_width;
    d["value_width"] = i.value_width;
    d["clean_shutdown"] = i.clean_shutdown;
    d["format_version"] = i.format_version;
    d["shard_index"] = i.shard_index;
    d["shard_count"] = i.shard_count;
    return d;
  });

  nb::class_<PyFileTier>(m, "FileTier")
      .def_static("create",
                  [](const std::string& path, uint32_t row_bytes, uint64_t capacity) {
                    auto t = std::make_unique<PyFileTier>();
                    t->tier.emplace(emb::FileTier::create(path, row_bytes, capacity));
                    return t.release();
                  },
                  nb::rv_policy::take_ownership)
      .def("write_rows", &PyFileTier::write_rows)
      .def("read_rows", &PyFileTier::read_rows, "rows"_a, "out"_a, "use_io_uring"_a = true)
      .def("uses_io_uring", [](PyFileTier& t) { return t.get().uses_io_uring(); })
      .def("direct", [](PyFileTier& t) { return t.get().direct(); })
      .def("close", [](PyFileTier& t) { t.tier.reset(); });

  nb::class_<PyStore>(m, "EmbeddingStore")
      .def_static("create",
                  [](const std::string& pool, uint32_t dim, const std::string& dtype, uint64_t capacity, float dflt,
                     const std::string& engine, uint64_t cache_bytes, uint32_t ways, uint32_t aging, bool replace,
                     int threads, uint64_t host_rows, const std::string& tier_path, bool tier_promotion) {
                    emb::StoreConfig c{.dim = dim, .dtype = emb::parse_row_type(dtype), .capacity = capacity,
                                       .default_value = dflt, .host_rows = host_rows, .tier_path = tier_path};
                    auto s = std::make_unique<PyStore>();
                    s->store.emplace(emb::EmbeddingStore::create(pool, c, store_options(engine, cache_bytes, ways, aging, replace, threads, tier_promotion)));
                    return s.release();
                  },
                  "pool"_a, "dim"_a, "dtype"_a, "capacity"_a, "default_value"_a, "engine"_a, "cache_bytes"_a,
                  "cache_ways"_a, "aging_interval"_a, "replace"_a, "threads"_a, "host_rows"_a, "tier_path"_a,
                  "tier_promotion"_a, nb::rv_policy::take_ownership)
      .def_static("open",
                  [](const std::string& pool, const std::string& engine, uint64_t cache_bytes, uint32_t ways,
                     uint32_t aging, int threads, bool tier_promotion) {
                    auto s = std::make_unique<PyStore>();
                    s->store.emplace(emb::EmbeddingStore::open(
                        pool, store_options(engine, cache_bytes, ways, aging, false, threads, tier_promotion)));
                    return s.release();
                  },
                  "pool"_a, "engine"_a, "cache_bytes"_a, "cache_ways"_a, "aging_interval"_a, "threads"_a,
                  "tier_promotion"_a, nb::rv_policy::take_ownership)
      .def("insert_or_assign", &PyStore::insert_or_assign)
      .def("erase", &PyStore::erase)
      .def("find_or_insert", &PyStore::find_or_insert)
      .def("lookup", &PyStore::lookup, "ids"_a, "offsets"_a.none(), "include_last"_a, "pooling"_a, "out"_a,
           "found"_a.none(), "stream"_a)
      .def("lookup_cuda", &PyStore::lookup_cuda)
      .def("export_rows", &PyStore::export_rows)
      .def("stats", &PyStore::stats)
      .def("size", [](PyStore& s) { return s.get().size(); })
      .def("dim", [](PyStore& s) { return s.get().dim(); })
      .def("dtype", [](PyStore& s) { return std::string(emb::to_string(s.get().dtype())); })
      .def("close", [](PyStore& s) {
        if (s.store) s.store->close();
        s.store.reset();
      });
}
