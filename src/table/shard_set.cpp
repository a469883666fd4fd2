#include "table/shard_set.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <random>

#include "format/shard_of.h"
#include "table/table_impl.h"
#if GPHASH_HAVE_CUDA
#include <cuda_runtime.h>

#include "engines/gpu/cuda_util.h"
#include "engines/gpu/shard_route.h"
#endif

namespace gphash {

uint32_t shard_of(const void* key, uint32_t key_width, uint32_t n) { return format::shard_of(key, key_width, n); }

std::string shard_pool(const std::string& pool, uint32_t k) {
  if (pool == "mem:" || pool == "mem") return "mem:";
  return fmt::format("{}.shard{}", pool, k);
}

// ---- workers -----------------------------------------------------------------------------------

namespace {

void use_gpu(int ordinal) {
#if GPHASH_HAVE_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return;  // the GPU engine's open reports that there is no GPU (kNoGpu)
  }
  if (ordinal >= count)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("GPU {} does not exist: {} GPU(s) are visible (CUDA_VISIBLE_DEVICES)", ordinal, count),
                "shards");
  const cudaError_t err = cudaSetDevice(ordinal);
  if (err != cudaSuccess)
    throw Error(ErrorCode::kCuda, fmt::format("cudaSetDevice({}): {}", ordinal, cudaGetErrorString(err)));
#else
  (void)ordinal;  // the GPU engine's open reports that this build has none (kNoGpu)
#endif
}

}  // namespace

ShardWorker::ShardWorker(std::optional<int> gpu) : thread_([this, gpu] { run(gpu); }) {}

ShardWorker::~ShardWorker() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

std::future<void> ShardWorker::submit(std::function<void()> task) {
  Task t{std::move(task), {}};
  std::future<void> done = t.done.get_future();
  {
    std::lock_guard lock(mutex_);
    tasks_.push_back(std::move(t));
  }
  wake_.notify_one();
  return done;
}

void ShardWorker::run(std::optional<int> gpu) {
  std::exception_ptr device_failure;  // a GPU that cannot be made current fails every task
  if (gpu) {
    try {
      use_gpu(*gpu);
    } catch (...) {
      device_failure = std::current_exception();
    }
  }
  for (;;) {
    Task task;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping, and nothing left to run
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    try {
      if (device_failure) std::rethrow_exception(device_failure);
      task.run();
      task.done.set_value();
    } catch (...) {
      task.done.set_exception(std::current_exception());
    }
  }
}

// ---- the arrays of device batches -----------------------------------------------------------------

#if GPHASH_HAVE_CUDA
struct ShardSet::PeerStage {
  engine::gpu::DeviceBuffer<std::byte> keys, values, values_out;
  engine::gpu::DeviceBuffer<Op> ops;
  engine::gpu::DeviceBuffer<OpStatus> status;
  engine::gpu::Stream stream;
};
struct ShardSet::DeviceRouting {
  int device = -1;
  engine::gpu::DeviceRouter router;
  engine::gpu::Stream stream;
  engine::gpu::Event legacy_done{false};  // engine::gpu::wait_for_legacy_stream
};

namespace {

// Makes `device` current on the calling thread for its lifetime (the caller's own stays as it was).
class CurrentDevice {
 public:
  explicit CurrentDevice(int device) {
    GPHASH_CUDA(cudaGetDevice(&saved_));
    if (device != saved_) GPHASH_CUDA(cudaSetDevice(device));
  }
  ~CurrentDevice() { cudaSetDevice(saved_); }
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;

 private:
  int saved_ = 0;
};

// Lets the current GPU, `self`, reach the others' memory directly (NVLink or PCIe peer to peer)
// where the hardware can, so peer copies need no staging through the host.
void enable_peer_access(int self, const std::vector<int>& others) {
  for (int other : others) {
    int can = 0;
    if (other == self || cudaDeviceCanAccessPeer(&can, self, other) != cudaSuccess || !can) continue;
    const cudaError_t err = cudaDeviceEnablePeerAccess(other, 0);
    if (err == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();
    else GPHASH_CUDA(err);
  }
}

int device_of(const void* p) {
  cudaPointerAttributes a{};
  GPHASH_CUDA(cudaPointerGetAttributes(&a, p));
  if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)
    throw Error(ErrorCode::kInvalidArgument, "a batch marked MemorySpace::kDevice has its keys outside GPU memory",
                "memory");
  return a.device;
}

}  // namespace
#else
struct ShardSet::PeerStage {};
struct ShardSet::DeviceRouting {};
#endif

// ---- opening -----------------------------------------------------------------------------------

namespace {

void check_shard_options(const OpenOptions& o) {
  if (o.shards.size() > 1024)
    throw Error(ErrorCode::kInvalidArgument, fmt::format("{} shards: at most 1024", o.shards.size()), "shards");
  for (int gpu : o.shards)
    if (gpu < 0) throw Error(ErrorCode::kInvalidArgument, fmt::format("shard GPU {} is negative", gpu), "shards");
}

// The options of one shard's Table: no shards of its own, the CPU engine's threads divided among
// the shards (they run at once), and automatic snapshots to a file of its own.
OpenOptions shard_options(const OpenOptions& o, uint32_t k) {
  OpenOptions s = o;
  s.shards.clear();
  const auto n = static_cast<int>(o.shards.size());
  const int threads = o.threads > 0 ? o.threads : std::max(1, omp_get_max_threads());
  s.threads = std::max(1, threads / n);
  if (!o.snapshots.path.empty()) s.snapshots.path = shard_pool(o.snapshots.path, k);
  return s;
}

}  // namespace

ShardSet::ShardSet(std::string pool, const OpenOptions& options) : pool_(std::move(pool)), options_(options) {
  for (int gpu : options.shards) {
    Shard s;
    s.worker = std::make_unique<ShardWorker>(options.engine == EngineKind::kGpu ? std::optional<int>(gpu) : std::nullopt);
    shards_.push_back(std::move(s));
  }
}

ShardSet::~ShardSet() {
  try {
    on_each([this](uint32_t k, std::optional<Table>& t) {  // each closes on its own GPU
      t.reset();
      shards_[k].peer.reset();
    });
#if GPHASH_HAVE_CUDA
    if (routing_) {
      CurrentDevice current(routing_->device);
      routing_.reset();
    }
#endif
  } catch (...) {
    // A shard that cannot close cleanly stays marked dirty: its next open recovers it.
  }
}

void ShardSet::on_each(const std::function<void(uint32_t, std::optional<Table>&)>& f) {
  std::vector<std::future<void>> done;
  done.reserve(shards_.size());
  for (uint32_t k = 0; k < count(); ++k) done.push_back(shards_[k].worker->submit([&f, this, k] { f(k, shards_[k].table); }));
  std::exception_ptr first, mismatch;
  for (auto& d : done) {
    try {
      d.get();
    } catch (const Error& e) {
      if (!first) first = std::current_exception();
      if (!mismatch && e.code() == ErrorCode::kShardMismatch) mismatch = std::current_exception();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (mismatch) std::rethrow_exception(mismatch);
  if (first) std::rethrow_exception(first);
}

std::unique_ptr<Table::Impl> ShardSet::create(const std::string& pool, const TableConfig& config,
                                              const OpenOptions& options) {
  check_shard_options(options);
  const uint32_t n = static_cast<uint32_t>(options.shards.size());
  std::unique_ptr<ShardSet> set(new ShardSet(pool, options));
  TableConfig each = config;
  each.capacity = (config.capacity + n - 1) / n;
  Table::Impl::Member member;
  member.kind = Table::Impl::Member::kExact;
  member.count = n;
  std::random_device random;
  for (auto& byte : member.set_id) byte = static_cast<unsigned char>(random());
  set->on_each([&](uint32_t k, std::optional<Table>& t) {
    Table::Impl::Member m = member;
    m.index = k;
    t.emplace(Table(Table::Impl::create_pool(shard_pool(pool, k), each, shard_options(options, k), m)));
  });
  auto impl = std::make_unique<Table::Impl>();
  impl->options = options;
  impl->shards = std::move(set);
  return impl;
}

std::unique_ptr<Table::Impl> ShardSet::open(const std::string& pool, const OpenOptions& options) {
  check_shard_options(options);
  const uint32_t n = static_cast<uint32_t>(options.shards.size());
  std::unique_ptr<ShardSet> set(new ShardSet(pool, options));
  set->on_each([&](uint32_t k, std::optional<Table>& t) {
    Table::Impl::Member m;
    m.kind = Table::Impl::Member::kExact;
    m.index = k;
    m.count = n;
    try {
      t.emplace(Table(Table::Impl::open_pool(shard_pool(pool, k), shard_options(options, k), m)));
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kNotFound) throw;
      throw Error(ErrorCode::kNotFound,
                  fmt::format("shard {} of {} of {} is missing ({}): a sharded table needs every shard's pool", k, n,
                              pool, e.what()),
                  "shards");
    }
  });
  // Every shard must come from the same creation: a pool of another set at a shard's name is refused.
  const format::PoolHeader& first = set->shards_[0].table->impl_->pool->header();
  for (uint32_t k = 1; k < n; ++k) {
    const Table::Impl& s = *set->shards_[k].table->impl_;
    if (std::memcmp(s.pool->header().shard_set_id, first.shard_set_id, sizeof first.shard_set_id) != 0)
      throw Error(ErrorCode::kShardMismatch,
                  fmt::format("{} is shard {} of another sharded table than {} (created apart): the pools of one "
                              "sharded table are created together",
                              s.pool->path(), k, shard_pool(pool, 0)),
                  "shards");
  }
  auto impl = std::make_unique<Table::Impl>();
  impl->options = options;
  impl->shards = std::move(set);
  return impl;
}

// ---- batches -----------------------------------------------------------------------------------

void ShardSet::execute(const Batch& b) {
  {
    const Table::Impl& first = *shards_[0].table->impl_;
    first.check_usable();
    validate_batch(b, first.key_width, first.value_width, *first.pool, first.options);  // the whole batch, before any shard runs
  }
  if (b.memory == MemorySpace::kDevice) execute_on_device(b);  // the GPU engine: validate_batch checked
  else execute_on_host(b);
}

void ShardSet::execute_on_host(const Batch& b) {
  const uint32_t n = count();
  if (n == 1) {
    shards_[0].worker->submit([&] { shards_[0].table->execute(b); }).get();
    return;
  }
  // Route: the shard of every entry, then the entries grouped by shard, in batch order within
  // each shard (a stable counting sort over the threads' contiguous chunks).
  const size_t size = b.size;
  std::vector<uint32_t> shard(size);
  // Hashing costs a few ns per key: a thread per 64 Ki keys at most, so small batches (the
  // server's) stay on the calling thread.
  const int threads = static_cast<int>(std::clamp<size_t>(size >> 16, 1, std::max(1, omp_get_max_threads())));
  std::vector<size_t> counts(static_cast<size_t>(threads) * n, 0);  // [thread][shard]
  std::vector<size_t> order(size);
  std::vector<size_t> begin(n + 1, 0);  // shard k's entries are order[begin[k] .. begin[k+1])
  const auto* keys = static_cast<const std::byte*>(b.keys);
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num();
    const size_t lo = size * t / threads, hi = size * (t + 1) / threads;
    for (size_t i = lo; i < hi; ++i) {
      shard[i] = shard_of(keys + i * b.key_width, b.key_width, n);
      ++counts[static_cast<size_t>(t) * n + shard[i]];
    }
#pragma omp barrier
#pragma omp single
    {
      size_t at = 0;
      for (uint32_t k = 0; k < n; ++k) {
        begin[k] = at;
        for (int u = 0; u < threads; ++u) {
          const size_t c = counts[static_cast<size_t>(u) * n + k];
          counts[static_cast<size_t>(u) * n + k] = at;  // now where thread u writes its first entry of shard k
          at += c;
        }
      }
      begin[n] = at;
    }
    for (size_t i = lo; i < hi; ++i) order[counts[static_cast<size_t>(t) * n + shard[i]]++] = i;
  }
  // Each worker gathers its entries into arrays of its own, runs them, and scatters the results.
  const uint32_t kw = b.key_width, vw = b.value_width;
  on_each([&](uint32_t k, std::optional<Table>& table) {
    const size_t from = begin[k], m = begin[k + 1] - begin[k];
    if (m == 0) return;
    std::vector<uint64_t> sub_keys((m * kw + 7) / 8);  // 8-byte aligned, as batches need
    std::vector<std::byte> sub_values(b.values ? m * vw : 0), sub_out(b.values_out ? m * vw : 0);
    std::vector<Op> sub_ops(b.ops ? m : 0);
    std::vector<OpStatus> sub_status(m);
    auto* kdst = reinterpret_cast<std::byte*>(sub_keys.data());
    const auto* vsrc = static_cast<const std::byte*>(b.values);
    for (size_t j = 0; j < m; ++j) {
      const size_t i = order[from + j];
      std::memcpy(kdst + j * kw, keys + i * kw, kw);
      if (b.values) std::memcpy(sub_values.data() + j * vw, vsrc + i * vw, vw);
      if (b.ops) sub_ops[j] = b.ops[i];
    }
    Batch sub = b;
    sub.size = m;
    sub.keys = sub_keys.data();
    sub.values = b.values ? sub_values.data() : nullptr;
    sub.values_out = b.values_out ? sub_out.data() : nullptr;
    sub.ops = b.ops ? sub_ops.data() : nullptr;
    sub.status = sub_status.data();
    table->execute(sub);
    auto* vout = static_cast<std::byte*>(b.values_out);
    for (size_t j = 0; j < m; ++j) {
      const size_t i = order[from + j];
      b.status[i] = sub_status[j];
      if (b.values_out) std::memcpy(vout + i * vw, sub_out.data() + j * vw, vw);
    }
  });
}

#if GPHASH_HAVE_CUDA
void ShardSet::execute_on_device(const Batch& b) {
  std::lock_guard lock(device_batches_);
  const int home = device_of(b.keys);
  const uint32_t n = count();
  if (n == 1 && options_.shards[0] == home) {
    shards_[0].worker->submit([&] { shards_[0].table->execute(b); }).get();
    return;
  }
  CurrentDevice current(home);
  if (!routing_ || routing_->device != home) {
    routing_.reset();
    routing_ = std::make_unique<DeviceRouting>();
    routing_->device = home;
    enable_peer_access(home, options_.shards);
  }
  engine::gpu::DeviceRouter& router = routing_->router;
  engine::gpu::wait_for_legacy_stream(routing_->stream, routing_->legacy_done);
  const engine::gpu::Routes routes = router.route(b, n, routing_->stream);
  const std::vector<size_t>& begin = routes.begin;
  const uint32_t kw = b.key_width, vw = b.value_width;
  on_each([&](uint32_t k, std::optional<Table>& table) {
    const size_t from = begin[k], m = begin[k + 1] - begin[k];
    if (m == 0) return;
    Batch sub = b;
    sub.size = m;
    sub.keys = router.keys() + from * kw;
    sub.values = b.values ? router.values() + from * vw : nullptr;
    sub.values_out = b.values_out ? router.values_out() + from * vw : nullptr;
    sub.ops = b.ops ? router.ops() + from : nullptr;
    sub.status = router.status() + from;
    const int gpu = options_.shards[k];
    if (gpu == home) {  // its part is already on its GPU
      table->execute(sub);
      return;
    }
    // Its part to its GPU and its results back: peer copies, on the shard's own stream.
    if (!shards_[k].peer) {
      enable_peer_access(gpu, {home});
      shards_[k].peer = std::make_unique<PeerStage>();
    }
    PeerStage& p = *shards_[k].peer;
    const auto copy = [&](void* to, int to_device, const void* from_ptr, int from_device, size_t bytes) {
      GPHASH_CUDA(cudaMemcpyPeerAsync(to, to_device, from_ptr, from_device, bytes, p.stream));
    };
    p.keys.reserve(m * kw), p.status.reserve(m);
    copy(p.keys.get(), gpu, sub.keys, home, m * kw);
    sub.keys = p.keys.get();
    // Values go over only for parts with inserts or updates (none for YCSB C), and come back only
    // for parts with searches (none for a LOAD). An unread array is still given, as a mixed batch
    // in GPU memory needs one.
    if (sub.values) {
      const bool read = routes.value_inputs[k] != 0;
      p.values.reserve(read ? m * vw : vw);
      if (read) copy(p.values.get(), gpu, sub.values, home, m * vw);
      sub.values = p.values.get();
    }
    if (sub.values_out) {
      p.values_out.reserve(m * vw);
      sub.values_out = p.values_out.get();
    }
    if (sub.ops) {
      p.ops.reserve(m);
      copy(p.ops.get(), gpu, sub.ops, home, m);
      sub.ops = p.ops.get();
    }
    sub.status = p.status.get();
    GPHASH_CUDA(cudaStreamSynchronize(p.stream));  // the engine runs on a stream of its own
    table->execute(sub);
    copy(router.status() + from, home, p.status.get(), gpu, m);
    if (b.values_out && routes.searches[k]) copy(router.values_out() + from * vw, home, p.values_out.get(), gpu, m * vw);
    GPHASH_CUDA(cudaStreamSynchronize(p.stream));
  });
  router.scatter(b, routing_->stream);
  GPHASH_CUDA(cudaStreamSynchronize(routing_->stream));
}
#else
void ShardSet::execute_on_device(const Batch&) {
  throw Error(ErrorCode::kNoGpu, "this build has no CUDA: batches in GPU memory need the GPU engine", "memory");
}
#endif

// ---- everything else, shard by shard ------------------------------------------------------------

uint64_t ShardSet::size() {
  std::vector<uint64_t> items(count());
  on_each([&](uint32_t k, std::optional<Table>& t) { items[k] = t->size(); });
  uint64_t total = 0;
  for (uint64_t i : items) total += i;
  return total;
}

uint32_t ShardSet::key_width() { return shards_[0].table->key_width(); }
uint32_t ShardSet::value_width() { return shards_[0].table->value_width(); }

TableInfo ShardSet::info() {
  std::vector<TableInfo> each(count());
  on_each([&](uint32_t k, std::optional<Table>& t) { each[k] = t->info(); });
  // Identity and configuration from shard 0; sizes and counters summed; times the slowest shard's
  // (the shards run at once); flags true when true of any shard (clean_shutdown: of all).
  TableInfo i = each[0];
  i.path = pool_;
  i.hash_seed = 0;  // each shard has its own: see shards[k].hash_seed
  i.shard_index = 0;
  i.shard_count = count();
  i.snapshot_path = options_.snapshots.path;
  for (size_t k = 1; k < each.size(); ++k) {
    const TableInfo& s = each[k];
    i.items += s.items;
    i.slots += s.slots;
    i.pool_bytes += s.pool_bytes;
    i.heap_cells += s.heap_cells;
    i.bottom_level = std::min(i.bottom_level, s.bottom_level);
    i.top_level = std::max(i.top_level, s.top_level);
    i.recovered |= s.recovered;
    i.open_seconds = std::max(i.open_seconds, s.open_seconds);
    i.resizes += s.resizes;
    i.displacements += s.displacements;
    i.heap_grows += s.heap_grows;
    i.last_resize_seconds = std::max(i.last_resize_seconds, s.last_resize_seconds);
    i.resize_seconds += s.resize_seconds;
    i.rehash_seconds += s.rehash_seconds;
    i.heap_grow_seconds += s.heap_grow_seconds;
    i.last_batch_device_seconds = std::max(i.last_batch_device_seconds, s.last_batch_device_seconds);
    i.last_plan_seconds = std::max(i.last_plan_seconds, s.last_plan_seconds);
    i.last_kernel_seconds = std::max(i.last_kernel_seconds, s.last_kernel_seconds);
    i.last_batch_planned = i.last_batch_planned || s.last_batch_planned;
    i.last_slow_seconds = std::max(i.last_slow_seconds, s.last_slow_seconds);
    i.open_map_seconds = std::max(i.open_map_seconds, s.open_map_seconds);
    i.recovery_seconds = std::max(i.recovery_seconds, s.recovery_seconds);
    i.cache_lines += s.cache_lines;
    i.cache_gpu_bytes += s.cache_gpu_bytes;
    i.cache_lookups += s.cache_lookups;
    i.cache_hits += s.cache_hits;
    i.cache_phases += s.cache_phases;
    i.cache_lines_loaded += s.cache_lines_loaded;
    i.last_batch_cache_loading |= s.last_batch_cache_loading;
    i.clean_shutdown &= s.clean_shutdown;
    i.in_use |= s.in_use;
    i.resizing |= s.resizing;
    i.last_snapshot_unix_ns = std::min(i.last_snapshot_unix_ns, s.last_snapshot_unix_ns);
    i.writes_since_snapshot += s.writes_since_snapshot;
    i.writes += s.writes;
    i.snapshots_taken = std::min(i.snapshots_taken, s.snapshots_taken);
    if (i.snapshot_error.empty() && !s.snapshot_error.empty())
      i.snapshot_error = fmt::format("shard {}: {}", k, s.snapshot_error);
  }
  i.load_factor = i.slots ? static_cast<double>(i.items) / static_cast<double>(i.slots) : 0;
  i.shards = std::move(each);
  return i;
}

size_t ShardSet::export_items(ExportCursor& cursor, void* keys, void* values, size_t capacity, MemorySpace memory) {
  // The shards one after the other; the cursor holds the current shard's own position.
  size_t n = 0;
  while (!cursor.done() && n == 0) {
    ExportCursor c;
    c.position = cursor.position;
    c.resizes = cursor.resizes;
    c.displacements = cursor.displacements;
    c.exported = cursor.shard_exported;
    const uint32_t k = cursor.shard;
    shards_[k].worker->submit([&] { n = shards_[k].table->export_items(c, keys, values, capacity, memory); }).get();
    cursor.exported += n;
    cursor.damaged += c.damaged;
    cursor.position = c.position;
    cursor.resizes = c.resizes;
    cursor.displacements = c.displacements;
    cursor.shard_exported = c.exported;
    if (c.done()) {  // on to the next shard, from its start
      cursor.shard = k + 1;
      cursor.shard_exported = 0;
      cursor.resizes = cursor.displacements = 0;
      cursor.position = cursor.shard == count() ? ~uint64_t{0} : 0;
    }
  }
  return n;
}

TableStats ShardSet::stats() {
  std::vector<TableStats> each(count());
  on_each([&](uint32_t k, std::optional<Table>& t) { each[k] = t->stats(); });
  TableStats r;
  for (const TableStats& s : each) {
    for (const LevelStats& l : s.levels) {  // levels of the same number summed over the shards
      auto at = std::find_if(r.levels.begin(), r.levels.end(), [&](const LevelStats& x) { return x.level == l.level; });
      if (at == r.levels.end()) {
        r.levels.push_back(l);
      } else {
        at->slots += l.slots;
        at->items += l.items;
      }
    }
    r.segments += s.segments;
    r.heap_cells += s.heap_cells;
    r.heap_cells_used += s.heap_cells_used;
  }
  std::sort(r.levels.begin(), r.levels.end(), [](const LevelStats& a, const LevelStats& b) { return a.level < b.level; });
  return r;
}

CheckResult ShardSet::check(int threads) {
  std::vector<CheckResult> each(count());
  const int per_shard = threads > 0 ? std::max(1, threads / static_cast<int>(count())) : 0;
  on_each([&](uint32_t k, std::optional<Table>& t) { each[k] = t->check(per_shard); });
  CheckResult r;
  for (uint32_t k = 0; k < count(); ++k) {
    const CheckResult& s = each[k];
    if (r.ok && !s.ok) r.violation = fmt::format("{}: {}", shard_pool(pool_, k), s.violation);
    r.ok &= s.ok;
    r.violations += s.violations;
    r.items += s.items;
    r.values_verified += s.values_verified;
  }
  return r;
}

void ShardSet::save() {
  on_each([](uint32_t, std::optional<Table>& t) { t->save(); });
}

void ShardSet::close() {
  on_each([](uint32_t, std::optional<Table>& t) { t->close(); });
}

SnapshotResult ShardSet::snapshot(const std::string& path) {
  std::vector<SnapshotResult> each(count());
  on_each([&](uint32_t k, std::optional<Table>& t) { each[k] = t->snapshot(shard_pool(path, k)); });
  SnapshotResult r = each[0];
  r.path = path;
  for (size_t k = 1; k < each.size(); ++k) {
    const SnapshotResult& s = each[k];
    r.full &= s.full;
    r.pages_written += s.pages_written;
    r.bytes_written += s.bytes_written;
    r.file_bytes += s.file_bytes;
    r.pool_bytes += s.pool_bytes;
    r.captured_unix_ns = std::min(r.captured_unix_ns, s.captured_unix_ns);
    r.pool_writes += s.pool_writes;
    r.seconds = std::max(r.seconds, s.seconds);
    r.writers_held_seconds = std::max(r.writers_held_seconds, s.writers_held_seconds);
  }
  return r;
}

}  // namespace gphash
