#include "gpm/examples/workloads.h"

#include <algorithm>
#include <cstring>

#include "gphash/error.h"
#include "gpm/device_memory.cuh"

namespace gphash::gpm::workloads {

namespace {

void check(cudaError_t err, const char* what) { mapping_check(err, what); }

LogInfo make_or_open_log(GpmPool& gp, const std::string& name, bool create, LogChoice c, uint32_t entries,
                         uint64_t max_batch, Launch launch) {
  if (!create) return gp.log(name);
  LogOptions o;
  o.layout = c.layout;
  o.mode = c.mode;
  o.slots = launch.slots();
  o.entries_per_slot = entries;
  o.partition_threads = launch.threads;
  // Conventional: one launch's transactions of a block, with room for an uneven spread.
  const uint64_t per_thread = (max_batch + o.slots - 1) / o.slots;
  o.partition_entries = (per_thread + 2) * launch.threads * entries;
  return gp.create_log(name, o);
}

uint64_t* region_words(GpmPool& gp, DeviceGpm& dev, const std::string& name, bool create, uint64_t bytes) {
  const Region r = create ? gp.create_region(name, bytes) : gp.region(name);
  if (r.bytes < bytes)
    throw Error(ErrorCode::kInvalidArgument, "region \"" + name + "\" is smaller than the workload needs", name);
  return reinterpret_cast<uint64_t*>(dev.map(r));
}

void finish(GpmPool& gp, DeviceGpm& dev, cudaStream_t stream, const char* what) {
  check(cudaGetLastError(), what);
  drain(gp, stream);
  if (dev.log_full())
    throw Error(ErrorCode::kNoSpace, std::string(what) + ": a conventional log partition was full; size the log for the batch");
}

// ---- gpKVS ----

__global__ void kvs_set(LogView log, DeviceMemory mem, uint64_t* table, unsigned long long* mirror, uint64_t buckets,
                        const uint64_t* keys, const uint64_t* values, uint64_t n, unsigned long long* no_room) {
  const uint64_t slot = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x;
  const uint64_t stride = uint64_t{gridDim.x} * blockDim.x;
  uint64_t k = 0;
  for (uint64_t i = slot; i < n; i += stride, ++k) {
    const uint64_t key = keys[i];
    const uint64_t cand[2] = {Kvs::bucket_of(key, buckets, 0), Kvs::bucket_of(key, buckets, 1)};
    uint64_t b = cand[0];
    int way = -1, used[2] = {0, 0};
    bool fresh = false;
    for (int c = 0; c < 2 && way < 0; ++c)
      for (int w = 0; w < static_cast<int>(kWays) && way < 0; ++w) {
        const unsigned long long held = reinterpret_cast<volatile unsigned long long*>(mirror + cand[c] * kWays)[w];
        used[c] += held != 0;
        if (held == key) {
          way = w;
          b = cand[c];
        }
      }
    // New: the emptier bucket first, then the other (a race may have filled it).
    for (int t = 0; t < 2 && way < 0; ++t) {
      const uint64_t c = (used[1] < used[0]) != (t == 1) ? cand[1] : cand[0];
      for (int w = 0; w < static_cast<int>(kWays) && way < 0; ++w)
        if (atomicCAS(&mirror[c * kWays + w], 0ull, static_cast<unsigned long long>(key)) == 0ull) {
          way = w;
          b = c;
          fresh = true;
        }
    }
    if (way < 0) {
      atomicAdd(no_room, 1ull);
      continue;
    }
    auto tx = begin<2>(log, slot, k);
    if (fresh) tx.write(&table[b * 2 * kWays + way], key);
    tx.write(&table[b * 2 * kWays + kWays + way], values[i]);
    commit(log, mem, tx);  // false only when a conventional partition is full: the host reports it
  }
}

__global__ void kvs_get(const uint64_t* table, const unsigned long long* mirror, uint64_t buckets, const uint64_t* keys,
                        uint64_t* values, uint64_t n) {
  for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < n; i += uint64_t{gridDim.x} * blockDim.x) {
    const uint64_t key = keys[i];
    uint64_t v = 0;
    for (int c = 0; c < 2; ++c) {
      const uint64_t b = Kvs::bucket_of(key, buckets, c);
      for (uint32_t w = 0; w < kWays; ++w)
        if (mirror[b * kWays + w] == key) {
          v = *reinterpret_cast<const volatile uint64_t*>(&table[b * 2 * kWays + kWays + w]);
          c = 2;
          break;
        }
    }
    values[i] = v;
  }
}

__global__ void kvs_mirror(const uint64_t* table, unsigned long long* mirror, uint64_t buckets) {
  for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < buckets * kWays; i += uint64_t{gridDim.x} * blockDim.x)
    mirror[i] = table[(i / kWays) * 2 * kWays + i % kWays];
}

// ---- gpDB ----

__global__ void db_insert(LogView log, DeviceMemory mem, uint64_t* table, uint64_t first, uint64_t n, uint64_t stamp) {
  const uint64_t slot = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x;
  uint64_t k = 0;
  for (uint64_t i = slot; i < n; i += uint64_t{gridDim.x} * blockDim.x, ++k) {
    const uint64_t row = first + i;
    auto tx = begin<Db::kColumns>(log, slot, k);
    for (uint32_t c = 0; c < Db::kColumns; ++c) tx.write(&table[row * Db::kColumns + c], Db::row_value(row, c, stamp));
    commit(log, mem, tx);
  }
}

__global__ void db_update(LogView log, DeviceMemory mem, uint64_t* table, uint64_t rows, uint64_t first, uint64_t stride,
                          uint64_t n, uint64_t stamp) {
  const uint64_t slot = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x;
  uint64_t k = 0;
  for (uint64_t i = slot; i < n; i += uint64_t{gridDim.x} * blockDim.x, ++k) {
    const uint64_t row = (first + i * stride) & (rows - 1);
    auto tx = begin<4>(log, slot, k);
    for (uint32_t c = 0; c < 4; ++c) tx.write(&table[row * Db::kColumns + c], Db::row_value(row, c, stamp));
    commit(log, mem, tx);
  }
}

// ---- prefix sums ----

__host__ __device__ uint64_t input_of(uint64_t i) { return (i * 0x9E3779B97F4A7C15ull >> 40) % 1000; }

// Inclusive scan of each 1024-element block into `local`, the block's total into `sums`.
__global__ void scan_blocks(uint64_t n, uint64_t* local, uint64_t* sums) {
  __shared__ uint64_t s[kScanBlock];
  const uint64_t i = blockIdx.x * kScanBlock + threadIdx.x;
  s[threadIdx.x] = i < n ? input_of(i) : 0;
  __syncthreads();
  for (unsigned d = 1; d < kScanBlock; d <<= 1) {
    const uint64_t add = threadIdx.x >= d ? s[threadIdx.x - d] : 0;
    __syncthreads();
    s[threadIdx.x] += add;
    __syncthreads();
  }
  if (i < n) local[i] = s[threadIdx.x];
  if (threadIdx.x == kScanBlock - 1) sums[blockIdx.x] = s[threadIdx.x];
}

// Native persistence: block j writes its results into the pool, persists them, then its done flag.
__global__ void scan_write_pool(uint64_t n, const uint64_t* local, const uint64_t* offsets, uint64_t* out, uint64_t* done,
                                uint64_t run, DeviceWrites w, unsigned long long* computed) {
  if (*reinterpret_cast<volatile uint64_t*>(&done[blockIdx.x]) == run) return;  // done before a crash
  const uint64_t i = blockIdx.x * kScanBlock + threadIdx.x;
  if (i < n) w.store(&out[i], local[i] + offsets[blockIdx.x]);
  w.barrier();
  __syncthreads();
  if (threadIdx.x == 0) {
    w.store(&done[blockIdx.x], run);
    w.barrier();
    atomicAdd(computed, 1ull);
  }
}

__global__ void scan_write_gpu(uint64_t n, const uint64_t* local, const uint64_t* offsets, uint64_t* out) {
  const uint64_t i = blockIdx.x * kScanBlock + threadIdx.x;
  if (i < n) out[i] = local[i] + offsets[blockIdx.x];
}

// Both variants' GPU part: local scans and block offsets (exclusive sums of the blocks' totals).
struct ScanScratch {
  uint64_t* local = nullptr;
  uint64_t* offsets = nullptr;
  uint64_t blocks = 0;
  ScanScratch(uint64_t n, cudaStream_t stream) {
    blocks = (n + kScanBlock - 1) / kScanBlock;
    check(cudaMalloc(&local, std::max<uint64_t>(n, 1) * 8), "cudaMalloc");
    check(cudaMalloc(&offsets, blocks * 8), "cudaMalloc");
    scan_blocks<<<static_cast<unsigned>(blocks), kScanBlock, 0, stream>>>(n, local, offsets);
    check(cudaGetLastError(), "scan_blocks");
    std::vector<uint64_t> sums(blocks);
    check(cudaMemcpyAsync(sums.data(), offsets, blocks * 8, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync");
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    uint64_t run = 0;
    for (uint64_t& s : sums) run += std::exchange(s, run);
    check(cudaMemcpyAsync(offsets, sums.data(), blocks * 8, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  }
  ~ScanScratch() {
    cudaFree(local);
    cudaFree(offsets);
  }
};

// ---- solver ----

__global__ void stencil(const uint64_t* x, uint64_t* y, uint64_t n, uint64_t t) {
  for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < n; i += uint64_t{gridDim.x} * blockDim.x)
    y[i] = x[(i + n - 1) % n] + 2 * x[i] + x[(i + 1) % n] + t;
}

uint64_t initial_x(uint64_t i) { return i * 0x9E3779B97F4A7C15ull; }

}  // namespace

const char* to_string(const LogChoice& c) {
  if (c.layout == kLayoutHcl) return c.mode == kModeUndo ? "hcl-undo" : "hcl-redo";
  return c.mode == kModeUndo ? "conventional-undo" : "conventional-redo";
}

Kvs::Kvs(GpmPool& gp, DeviceGpm& dev, const std::string& name, bool create, uint64_t buckets, LogChoice log,
         uint64_t max_batch, Launch launch)
    : gp_(gp), dev_(dev), launch_(launch), buckets_(buckets) {
  log_ = make_or_open_log(gp, name + ".log", create, log, 2, max_batch, launch);
  table_ = region_words(gp, dev, name + ".table", create, buckets * kWays * 16);
  check(cudaMalloc(&mirror_, buckets * kWays * 8), "cudaMalloc");
  check(cudaMalloc(&counters_, 8), "cudaMalloc");
  kvs_mirror<<<1024, 256>>>(table_, reinterpret_cast<unsigned long long*>(mirror_), buckets);
  check(cudaGetLastError(), "kvs_mirror");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

Kvs::~Kvs() {
  cudaFree(mirror_);
  cudaFree(counters_);
}

uint64_t Kvs::set(const uint64_t* d_keys, const uint64_t* d_values, uint64_t n, cudaStream_t stream) {
  check(cudaMemsetAsync(counters_, 0, 8, stream), "cudaMemsetAsync");
  const LogView view = dev_.launch(log_, stream);
  kvs_set<<<launch_.blocks, launch_.threads, 0, stream>>>(view, DeviceMemory{dev_.writes()}, table_,
                                                          reinterpret_cast<unsigned long long*>(mirror_), buckets_,
                                                          d_keys, d_values, n, counters_);
  finish(gp_, dev_, stream, "gpKVS set");
  unsigned long long no_room = 0;
  check(cudaMemcpy(&no_room, counters_, 8, cudaMemcpyDeviceToHost), "cudaMemcpy");
  return no_room;
}

void Kvs::get(const uint64_t* d_keys, uint64_t* d_values, uint64_t n, cudaStream_t stream) {
  kvs_get<<<launch_.blocks, launch_.threads, 0, stream>>>(table_, reinterpret_cast<const unsigned long long*>(mirror_),
                                                          buckets_, d_keys, d_values, n);
  check(cudaGetLastError(), "gpKVS get");
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

Db::Db(GpmPool& gp, DeviceGpm& dev, const std::string& name, bool create, uint64_t rows, LogChoice log,
       uint64_t max_batch, Launch launch)
    : gp_(gp), dev_(dev), launch_(launch), rows_(rows) {
  if (rows == 0 || (rows & (rows - 1)))
    throw Error(ErrorCode::kInvalidArgument, "gpDB rows must be a power of two", "rows");
  log_ = make_or_open_log(gp, name + ".log", create, log, kColumns, max_batch, launch);
  table_ = region_words(gp, dev, name + ".table", create, rows * kColumns * 8);
}

void Db::insert(uint64_t first, uint64_t n, uint64_t stamp, cudaStream_t stream) {
  if (first + n > rows_) throw Error(ErrorCode::kInvalidArgument, "gpDB insert past the table's rows", "n");
  const LogView view = dev_.launch(log_, stream);
  db_insert<<<launch_.blocks, launch_.threads, 0, stream>>>(view, DeviceMemory{dev_.writes()}, table_, first, n, stamp);
  finish(gp_, dev_, stream, "gpDB insert");
}

void Db::update(uint64_t first, uint64_t stride, uint64_t n, uint64_t stamp, cudaStream_t stream) {
  if (n > rows_ || stride % 2 == 0) throw Error(ErrorCode::kInvalidArgument, "gpDB update: n > rows or an even stride", "n");
  const LogView view = dev_.launch(log_, stream);
  db_update<<<launch_.blocks, launch_.threads, 0, stream>>>(view, DeviceMemory{dev_.writes()}, table_, rows_, first,
                                                            stride, n, stamp);
  finish(gp_, dev_, stream, "gpDB update");
}

uint64_t scan_input(uint64_t i) { return input_of(i); }

uint64_t prefix_sum_native(GpmPool& gp, DeviceGpm& dev, const std::string& name, uint64_t n, uint64_t run,
                           cudaStream_t stream) {
  const uint64_t blocks = (n + kScanBlock - 1) / kScanBlock;
  const auto open_or_create = [&](const std::string& r, uint64_t bytes) {
    try {
      return gp.region(r);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kNotFound) throw;
      return gp.create_region(r, bytes);
    }
  };
  const Region out = open_or_create(name + ".out", n * 8), done = open_or_create(name + ".done", blocks * 8);
  ScanScratch scratch(n, stream);
  unsigned long long* computed = nullptr;
  check(cudaMalloc(&computed, 8), "cudaMalloc");
  check(cudaMemsetAsync(computed, 0, 8, stream), "cudaMemsetAsync");
  scan_write_pool<<<static_cast<unsigned>(blocks), kScanBlock, 0, stream>>>(
      n, scratch.local, scratch.offsets, reinterpret_cast<uint64_t*>(dev.map(out)), reinterpret_cast<uint64_t*>(dev.map(done)),
      run, dev.writes(), computed);
  check(cudaGetLastError(), "scan_write_pool");
  drain(gp, stream);
  unsigned long long c = 0;
  check(cudaMemcpy(&c, computed, 8, cudaMemcpyDeviceToHost), "cudaMemcpy");
  cudaFree(computed);
  return c;
}

void prefix_sum_cpu_assisted(GpmPool& gp, const std::string& name, uint64_t n, cudaStream_t stream) {
  Region out;
  try {
    out = gp.region(name + ".out");
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kNotFound) throw;
    out = gp.create_region(name + ".out", n * 8);
  }
  ScanScratch scratch(n, stream);
  uint64_t* result = nullptr;
  uint64_t* pinned = nullptr;
  check(cudaMalloc(&result, n * 8), "cudaMalloc");
  check(cudaMallocHost(&pinned, n * 8), "cudaMallocHost");
  scan_write_gpu<<<static_cast<unsigned>(scratch.blocks), kScanBlock, 0, stream>>>(n, scratch.local, scratch.offsets, result);
  check(cudaGetLastError(), "scan_write_gpu");
  check(cudaMemcpyAsync(pinned, result, n * 8, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync");
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  std::memcpy(out.host, pinned, n * 8);  // the CPU writes the results into the pool
  gp.pool().persist(out.host, n * 8);    // and persists them
  gp.pool().sync();
  cudaFree(result);
  cudaFreeHost(pinned);
}

Solver::Solver(GpmPool& gp, DeviceGpm& dev, const std::string& name, bool create, uint64_t n) : gp_(gp), n_(n) {
  const GroupInfo g = create ? gp.create_group(name, {n * 8, 8}) : gp.group(name);
  if (g.header.element_bytes[0] != n * 8)
    throw Error(ErrorCode::kInvalidArgument, "checkpoint group \"" + name + "\" holds another size", "n");
  cp_ = std::make_unique<DeviceCheckpoint>(gp, dev, g);
  check(cudaMalloc(&x_, n * 8), "cudaMalloc");
  check(cudaMalloc(&y_, n * 8), "cudaMalloc");
  check(cudaMalloc(&it_, 8), "cudaMalloc");
  std::vector<uint64_t> x(n);
  for (uint64_t i = 0; i < n; ++i) x[i] = initial_x(i);
  check(cudaMemcpy(x_, x.data(), n * 8, cudaMemcpyHostToDevice), "cudaMemcpy");
  check(cudaMemset(it_, 0, 8), "cudaMemset");
}

Solver::~Solver() {
  cudaFree(x_);
  cudaFree(y_);
  cudaFree(it_);
}

uint64_t Solver::restore(cudaStream_t stream) {
  cp_->attach(0, x_);
  cp_->attach(1, it_);
  if (cp_->restore(stream).sequence == 0) return iteration_ = 0;
  check(cudaMemcpy(&iteration_, it_, 8, cudaMemcpyDeviceToHost), "cudaMemcpy");
  return iteration_;
}

uint64_t Solver::run(uint64_t iterations, uint64_t every, cudaStream_t stream) {
  uint64_t taken = 0;
  while (iteration_ < iterations) {
    stencil<<<1024, 256, 0, stream>>>(x_, y_, n_, iteration_);
    check(cudaGetLastError(), "stencil");
    std::swap(x_, y_);
    ++iteration_;
    if (every && iteration_ % every == 0) {
      check(cudaMemcpyAsync(it_, &iteration_, 8, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
      cp_->attach(0, x_);
      cp_->attach(1, it_);
      cp_->checkpoint(stream);
      ++taken;
    }
  }
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  return taken;
}

std::vector<uint64_t> Solver::state() const {
  std::vector<uint64_t> x(n_);
  check(cudaMemcpy(x.data(), x_, n_ * 8, cudaMemcpyDeviceToHost), "cudaMemcpy");
  return x;
}

std::vector<uint64_t> Solver::reference(uint64_t n, uint64_t iterations) {
  std::vector<uint64_t> x(n), y(n);
  for (uint64_t i = 0; i < n; ++i) x[i] = initial_x(i);
  for (uint64_t t = 0; t < iterations; ++t) {
    for (uint64_t i = 0; i < n; ++i) y[i] = x[(i + n - 1) % n] + 2 * x[i] + x[(i + 1) % n] + t;
    std::swap(x, y);
  }
  return x;
}

}  // namespace gphash::gpm::workloads
