// The GPU engine's benchmark (issue 3, item 7). Every table is much larger than the 50 MB L2.
// Figures: operations over device time (CUDA events around each batch's kernels and
// device-side copies); "wall" figures also include the host call. Sections:
//   platform  HBM random reads (the reference figure of DESIGN.md)
//   hbm       GPU-memory placement, 8-byte keys and values: insert / search / negative search
//             at load factors 0.5, 0.8, 0.9, 0.95 (no resizing: displacement), against cuco
//             figures measured on the same H100
//   mapped    host-mapped placement, 32-byte keys, 128-byte values: each operation against the
//             measured ceiling of the host accesses it makes
//   kernels   YCSB LOAD and A with warp-cooperative, warp-direct and one-thread-per-op kernels
//   cache     BktCache: YCSB LOAD, C, B, A on a host-mapped table, by cache size and policy (opt in)
//   resize    resize time against table size
//   recovery  recovery time against pool size, GPU and CPU engine
//   small     wall time of one small batch from host memory (a server round), by size (opt in)
//   gpu-batches  YCSB and micro workloads whose batches start and end in GPU memory, run by the GPU
//             engine in place or by the CPU engine with keys and results crossing PCIe (opt in)
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "bench_kernels.h"
#include "pcie_counter.h"
#include "gphash/table.h"
#include "workload/records.h"
#include "cli.h"
#include "ycsb_runner.h"

extern char** environ;

namespace gphash::bench {
namespace {

// Where the benchmark's pools live (--pool-dir): a tmpfs by default; hugetlbfs or a tmpfs with
// huge pages to compare page sizes.
std::string pool_dir = "/dev/shm";

using nlohmann::json;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

template <class T>
struct DeviceArray {
  T* ptr = nullptr;
  explicit DeviceArray(size_t n) { check(cudaMalloc(&ptr, n * sizeof(T)), "cudaMalloc"); }
  ~DeviceArray() { cudaFree(ptr); }
};

OpenOptions gpu_options(Placement placement, GpuKernels kernels = GpuKernels::kWarp) {
  OpenOptions o;
  o.engine = EngineKind::kGpu;
  o.placement = placement;
  o.gpu_kernels = kernels;
  return o;
}

std::vector<std::string> summary;  // printed last
void say(const std::string& line) {
  fmt::print("{}\n", line);
  std::fflush(stdout);
  summary.push_back(line);
}

// Runs one batch whose arrays are in GPU memory; returns device seconds.
double device_batch(Table& t, Op op, size_t n, const void* keys, const void* values, void* out, OpStatus* status,
                    double* wall_seconds = nullptr) {
  Batch b;
  b.size = n;
  b.key_width = t.key_width();
  b.value_width = t.value_width();
  b.op = op;
  b.keys = keys;
  b.values = values;
  b.values_out = out;
  b.status = status;
  b.memory = MemorySpace::kDevice;
  const auto t0 = std::chrono::steady_clock::now();
  t.execute(b);
  if (wall_seconds) *wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return t.info().last_batch_device_seconds;
}

size_t count_not(const OpStatus* device_status, size_t n, OpStatus want) {
  std::vector<OpStatus> s(n);
  check(cudaMemcpy(s.data(), device_status, n, cudaMemcpyDeviceToHost), "status");
  size_t bad = 0;
  for (OpStatus x : s) bad += x != want;
  return bad;
}

// ---- hbm: GPU-memory placement, 8-byte keys and values -------------------------------------
json section_hbm(uint32_t bottom_level, size_t batch) {
  const uint64_t slots = uint64_t{24} << bottom_level;  // 2L-2H-8S: 3 * 2^bottom buckets of 8
  const uint64_t capacity = slots * 9 / 10 - 1;
  // No resizing: the load factors measured are the table's; inserts that find no free slot move
  // an item aside (displacement), which the insert rate of the last phase includes.
  OpenOptions options = gpu_options(Placement::kGpuMemory);
  options.auto_resize = false;
  Table t = Table::create("mem:", {8, 8, {2, 2, 8}, capacity, 77}, options);
  TableInfo info = t.info();
  say(fmt::format("hbm: GPU-memory table, 2L-2H-8S, 8-byte keys and values, {} slots = {:.2f} GB (+{:.0f} MB tag mirror)",
                  info.slots, info.slots * 16 / 1e9, (uint64_t{1} << bottom_level) * 32 / 1e6));
  DeviceArray<uint64_t> keys(batch), values(batch), out(batch);
  DeviceArray<OpStatus> status(batch);
  const uint64_t seed = 0xC0FFEE;
  uint64_t inserted = 0;
  json rows = json::array();
  // cuCollections' static_map (linear_probing<1>) with the same slots, keys and batches, run beside
  // this section on the same H100 on 2026-11-27 (bench/results/2026-11-27-h100-displacement): the
  // "x cuco" ratios printed are against those figures, not against a peer run here, and only on an
  // H100 (cuco ran 20-28% faster at load 0.5 on an H200: bench/results/2026-11-28-search-by-lane).
  const double cuco[4][3] = {{9.66, 16.85, 19.05}, {7.03, 7.63, 4.98}, {1.98, 3.13, 1.24}, {0.46, 1.19, 0.27}};
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "device");
  const bool reference_gpu = std::string_view(prop.name).find("H100") != std::string_view::npos;
  auto vs_cuco = [&](double rate, double reference) {
    return reference_gpu ? fmt::format("{:.2f}x cuco", rate / reference) : std::string("cuco's figures are an H100's");
  };
  const double lfs[4] = {0.5, 0.8, 0.9, 0.95};
  for (int phase = 0; phase < 4; ++phase) {
    const uint64_t target = static_cast<uint64_t>(lfs[phase] * slots);
    double insert_seconds = 0;
    uint64_t phase_inserts = 0;
    size_t failed = 0;
    double last_plan = 0, last_kernel = 0, last_slow = 0;
    bool last_planned = false;
    while (inserted < target) {
      const size_t n = std::min<uint64_t>(batch, target - inserted);
      fill_keys(keys.ptr, n, seed, inserted);
      fill_keys(values.ptr, n, seed + 1, inserted);
      insert_seconds += device_batch(t, Op::kInsert, n, keys.ptr, values.ptr, nullptr, status.ptr);
      const TableInfo bi = t.info();
      last_plan = bi.last_plan_seconds, last_kernel = bi.last_kernel_seconds, last_slow = bi.last_slow_seconds;
      last_planned = bi.last_batch_planned;
      failed += count_not(status.ptr, n, OpStatus::kOk);
      inserted += n;
      phase_inserts += n;
    }
    // Positive search: a batch of inserted keys spread over all inserted so far.
    const size_t n = std::min<uint64_t>(batch, inserted);
    fill_keys(keys.ptr, n, seed, inserted - n);
    device_batch(t, Op::kSearch, n, keys.ptr, nullptr, out.ptr, status.ptr);  // warm-up
    double hit_wall = 0;
    const double hit = device_batch(t, Op::kSearch, n, keys.ptr, nullptr, out.ptr, status.ptr, &hit_wall);
    const TableInfo hit_info = t.info();
    const size_t missing = count_not(status.ptr, n, OpStatus::kOk);
    fill_keys(keys.ptr, n, seed, uint64_t{1} << 40);  // never inserted
    const double miss = device_batch(t, Op::kSearch, n, keys.ptr, nullptr, out.ptr, status.ptr);
    const size_t phantom = count_not(status.ptr, n, OpStatus::kNotFound);
    info = t.info();
    const double ins_rate = phase_inserts / insert_seconds / 1e9, hit_rate = n / hit / 1e9, miss_rate = n / miss / 1e9;
    say(fmt::format("hbm: load {:.2f}: insert {:.2f} G/s ({}), search {:.2f} G/s ({}), negative "
                    "{:.2f} G/s ({}); failed inserts {}, missing {}, phantom {}, resizes {}, displacements {}",
                    info.load_factor, ins_rate, vs_cuco(ins_rate, cuco[phase][0]), hit_rate, vs_cuco(hit_rate, cuco[phase][1]),
                    miss_rate, vs_cuco(miss_rate, cuco[phase][2]), failed, missing, phantom, info.resizes, info.displacements));
    say(fmt::format("hbm:   last insert batch: plan {:.2f} ms ({}), kernel {:.2f} ms, slow path {:.2f} ms", 1e3 * last_plan,
                    last_planned ? "sorted" : "no repeated key: unsorted", 1e3 * last_kernel, 1e3 * last_slow));
    say(fmt::format("hbm:   search batch: kernel {:.3f} ms, plan {:.3f} ms, after the kernel {:.3f} ms; wall {:.3f} ms",
                    1e3 * hit_info.last_kernel_seconds, 1e3 * hit_info.last_plan_seconds,
                    1e3 * hit_info.last_slow_seconds, 1e3 * hit_wall));
    rows.push_back({{"load_factor", info.load_factor},
                    {"insert_gops", ins_rate},
                    {"search_gops", hit_rate},
                    {"negative_search_gops", miss_rate},
                    {"cuco_insert_search_negative", {cuco[phase][0], cuco[phase][1], cuco[phase][2]}},
                    {"failed_inserts", failed},
                    {"missing", missing},
                    {"phantom", phantom},
                    {"resizes", info.resizes},
                    {"displacements", info.displacements}});
  }
  return {{"slots", slots}, {"table_bytes", slots * 16}, {"batch", batch}, {"phases", rows}};
}

// ---- mapped: host-mapped placement, 32-byte keys, 128-byte values --------------------------
json section_mapped(size_t items, size_t batch) {
  const std::string pool = pool_dir + "/gphash-bench-mapped";
  std::remove(pool.c_str());
  OpenOptions o = gpu_options(Placement::kHostMapped);
  o.replace = true;
  Table t = Table::create(pool, {32, 128, {2, 2, 8}, items + items / 8, 5}, o);
  const size_t kw = 4, vw = 128;
  DeviceArray<uint64_t> keys(batch * kw);
  DeviceArray<unsigned char> values(batch * vw), out(batch * vw);
  DeviceArray<OpStatus> status(batch);
  // Loaded in record order; measured in a scrambled order (items is a power of two), so heap
  // cells, allocated in load order, are not read sequentially.
  const uint64_t scramble = (items & (items - 1)) == 0 ? items - 1 : 0;
  auto fill = [&](size_t n, uint64_t first, bool scrambled = true) {
    fill_record_keys(keys.ptr, n, kw, 0xABCD, first, scrambled ? scramble : 0);
    fill_keys(reinterpret_cast<uint64_t*>(values.ptr), n * vw / 8, 0xBEEF, first * vw / 8);
  };
  double load_seconds = 0;
  for (size_t at = 0; at < items; at += batch) {
    const size_t n = std::min(batch, items - at);
    fill(n, at, false);
    load_seconds += device_batch(t, Op::kInsert, n, keys.ptr, values.ptr, nullptr, status.ptr);
  }
  TableInfo info = t.info();
  const size_t n = std::min(batch, items);
  auto timed = [&](Op op, uint64_t first, OpStatus want, size_t* bad) {
    fill(n, first);
    const double s = device_batch(t, op, n, keys.ptr, values.ptr, out.ptr, status.ptr);
    *bad = count_not(status.ptr, n, want);
    return n / s;
  };
  size_t bad_hit, bad_update, bad_erase, bad_insert;
  const double hit = timed(Op::kSearch, items - n, OpStatus::kOk, &bad_hit);
  fill_keys(keys.ptr, n * kw, 0x1234, 0);  // keys never inserted
  double miss_seconds = device_batch(t, Op::kSearch, n, keys.ptr, nullptr, out.ptr, status.ptr);
  size_t bad_miss = count_not(status.ptr, n, OpStatus::kNotFound);
  const double miss = n / miss_seconds;
  const double update = timed(Op::kUpdate, items - n, OpStatus::kOk, &bad_update);
  const double erase = timed(Op::kErase, items - n, OpStatus::kOk, &bad_erase);
  const double insert = timed(Op::kInsert, items - n, OpStatus::kOk, &bad_insert);  // re-inserts what was erased

  // The ceiling, measured on shared memory registered like the pool, with the table's and heap's
  // sizes. What each operation reads and writes in host memory (the tag mirror answers the rest
  // in GPU memory): search: key, value word, cell; update: key, value word, new cell, value word;
  // erase: key, value word, state word; insert of an absent key: new cell, key, value word,
  // state word.
  const size_t table_bytes = info.slots * 48 / 4096 * 4096, heap_bytes = info.heap_cells * 128 / 4096 * 4096;
  const size_t bytes = table_bytes + heap_bytes;
  const int fd = memfd_create("gphash-ceiling", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) throw std::runtime_error("memfd for the ceiling buffer");
  void* buffer = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (buffer == MAP_FAILED) throw std::runtime_error("mmap for the ceiling buffer");
  std::memset(buffer, 1, bytes);
  check(cudaHostRegister(buffer, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable), "cudaHostRegister");
  // Rates of each kind of request, then each operation's ceiling: the time its requests take
  // one after the other at those rates. The model counts every request as an independent random
  // one; the table's value and state words share the key's bucket (same page), and new cells
  // are written in allocation order, so an operation can come out above it.
  auto rate = [&](bool heap, uint32_t size, bool write, bool fence) {
    return host_request_rate(buffer, heap ? table_bytes : 0, heap ? heap_bytes : table_bytes, size, write, fence, n);
  };
  const double r_key = rate(false, 32, false, false), r_word = rate(false, 8, false, false),
               r_cell = rate(true, 128, false, false), w_cell = rate(true, 128, true, true),
               w_key = rate(false, 32, true, false), w_word = rate(false, 8, true, true);
  auto serial = [](std::initializer_list<double> rates) {
    double t = 0;
    for (double r : rates) t += 1 / r;
    return 1 / t;
  };
  const double c_hit = serial({r_key, r_word, r_cell});
  const double c_update = serial({r_key, r_word, w_cell, w_word});
  const double c_erase = serial({r_key, r_word, w_word});
  const double c_insert = serial({w_cell, w_key, w_word, w_word});
  say(fmt::format("mapped: host request rates (M/s): read 32 B {:.0f}, 8 B {:.0f}, 128 B {:.0f}; write+fence 128 B {:.0f}, "
                  "8 B {:.0f}; write 32 B {:.0f}",
                  r_key / 1e6, r_word / 1e6, r_cell / 1e6, w_cell / 1e6, w_word / 1e6, w_key / 1e6));
  cudaHostUnregister(buffer);
  munmap(buffer, bytes);
  close(fd);
  say(fmt::format("mapped: host-mapped pool {}, 32-byte keys, 128-byte values, {} items, {:.2f} GB table + {:.2f} GB heap",
                  pool, info.items, info.slots * 48 / 1e9, info.heap_cells * 128 / 1e9));
  say(fmt::format("mapped: load {:.1f} M/s", items / load_seconds / 1e6));
  auto line = [&](const char* op, double rate, double ceiling, size_t bad) {
    say(fmt::format("mapped: {:<7} {:>7.1f} M/s  ceiling {:>7.1f} M/s  = {:>5.1f}%   (status errors {})", op, rate / 1e6,
                    ceiling / 1e6, 100 * rate / ceiling, bad));
  };
  line("search", hit, c_hit, bad_hit);
  say(fmt::format("mapped: {:<7} {:>7.1f} M/s  (no host access: the tag mirror answers)  (status errors {})", "miss",
                  miss / 1e6, bad_miss));
  line("update", update, c_update, bad_update);
  line("erase", erase, c_erase, bad_erase);
  line("insert", insert, c_insert, bad_insert);
  CheckResult c = t.check();
  say(fmt::format("mapped: check {}", c.ok ? "ok" : c.violation));
  t.close();
  std::remove(pool.c_str());
  return {{"items", items},
          {"table_bytes", info.slots * 48},
          {"heap_bytes", info.heap_cells * 128},
          {"load_mops", items / load_seconds / 1e6},
          {"search_mops", hit / 1e6},
          {"search_ceiling_mops", c_hit / 1e6},
          {"negative_search_mops", miss / 1e6},
          {"update_mops", update / 1e6},
          {"update_ceiling_mops", c_update / 1e6},
          {"erase_mops", erase / 1e6},
          {"erase_ceiling_mops", c_erase / 1e6},
          {"insert_mops", insert / 1e6},
          {"insert_ceiling_mops", c_insert / 1e6},
          {"check_ok", c.ok}};
}

// ---- kernels: warp-cooperative against one thread per operation -----------------------------
json section_kernels(uint64_t records, size_t batch, uint32_t kw, uint32_t vw) {
  json out = json::array();
  const std::pair<GpuKernels, const char*> variants[] = {
      {GpuKernels::kWarp, "warp"}, {GpuKernels::kWarpDirect, "warp-direct"}, {GpuKernels::kThread, "thread"}};
  double warp_rate[2] = {0, 0};
  for (auto [kernels, name] : variants) {
    const std::string pool = pool_dir + "/gphash-bench-kernels";
    OpenOptions o = gpu_options(Placement::kHostMapped, kernels);
    o.replace = true;
    Table t = Table::create(pool, {kw, vw, {2, 2, 8}, records / 8, 3}, o);
    cli::RunOptions ro;
    ro.batch_size = batch;
    workload::WorkloadSpec load{workload::Workload::Load, records, 0, std::nullopt, 0.99, 1};
    workload::WorkloadSpec a{workload::Workload::A, records, records, std::nullopt, 0.99, 2};
    cli::RunResult rl = cli::run_workload(t, load, ro);
    cli::RunResult ra = cli::run_workload(t, a, ro);
    const double l = rl.device_ops_per_second(), r = ra.device_ops_per_second();
    if (kernels == GpuKernels::kWarp) warp_rate[0] = l, warp_rate[1] = r;
    say(fmt::format("kernels: {:<12} LOAD {:>7.1f} M/s (wall {:>6.1f}, {} resizes)  A {:>7.1f} M/s (wall {:>6.1f})  "
                    "warp speedup LOAD {:.2f}x A {:.2f}x; not found {}, bad values {}",
                    name, l / 1e6, rl.ops_per_second() / 1e6, rl.resizes, r / 1e6, ra.ops_per_second() / 1e6,
                    warp_rate[0] / l, warp_rate[1] / r, ra.not_found, ra.bad_values));
    out.push_back({{"kernels", name},
                   {"load_mops", l / 1e6},
                   {"load_wall_mops", rl.ops_per_second() / 1e6},
                   {"a_mops", r / 1e6},
                   {"a_wall_mops", ra.ops_per_second() / 1e6},
                   {"a_not_found", ra.not_found},
                   {"a_bad_values", ra.bad_values}});
    t.close();
    std::remove(pool.c_str());
  }
  return {{"records", records}, {"key_width", kw}, {"value_width", vw}, {"batch", batch}, {"variants", out}};
}

// ---- cache: BktCache on a host-mapped table, YCSB ------------------------------------------
// One pool per value width, loaded from a small table (resizes included), then reopened with each
// cache configuration for YCSB C, B and A: Zipf 0.99 (YCSB's scrambled form) at two batch sizes,
// uniform at the larger. Rates over device time and end to end (the Table::execute calls), the
// hit rate (operations on existing keys served from a cached bucket) and the cache's GPU memory.
struct CacheConfig {
  const char* name;
  CachePolicy policy;
  double fraction;
  bool values;
};

json section_cache(uint64_t records, const std::vector<uint32_t>& value_widths, const std::vector<size_t>& batches) {
  const CacheConfig configs[] = {{"off", CachePolicy::kOff, 0.2, true},         {"lfu-10%", CachePolicy::kLfu, 0.1, true},
                                 {"lfu-20%", CachePolicy::kLfu, 0.2, true},     {"lfu-40%", CachePolicy::kLfu, 0.4, true},
                                 {"lru-20%", CachePolicy::kLru, 0.2, true},     {"random-20%", CachePolicy::kRandom, 0.2, true},
                                 {"paper lfu-20%", CachePolicy::kLfu, 0.2, false}, {"complete", CachePolicy::kLfu, 1.0, true}};
  json rows = json::array();
  const std::string pool = pool_dir + "/gphash-bench-cache";
  auto options = [](const CacheConfig& c) {
    OpenOptions o = gpu_options(Placement::kHostMapped);
    o.cache.policy = c.policy;
    o.cache.fraction = c.fraction;
    o.cache.values = c.values;
    return o;
  };
  auto row = [&](const char* config, uint32_t vw, size_t batch, const char* dist, const cli::RunResult& r) {
    say(fmt::format("cache: v{:<4} {:<14} batch 2^{:<2} {:<8} {:<5} {:>7.1f} M/s device {:>7.1f} M/s end to end  "
                    "hit {:>5.1f}%  GPU {:>6.0f} MB  beside loading {:>7.1f} against {:>7.1f}  not found {} bad {}",
                    vw, config, std::countr_zero(batch), dist, r.workload, r.device_ops_per_second() / 1e6,
                    r.ops_per_second() / 1e6, r.cache_hit_rate < 0 ? 0 : 100 * r.cache_hit_rate, r.cache_gpu_bytes / 1e6,
                    r.loading_device_ops_per_second() / 1e6, r.steady_device_ops_per_second() / 1e6, r.not_found,
                    r.bad_values));
    rows.push_back({{"config", config}, {"value_width", vw}, {"batch", batch}, {"distribution", dist},
                    {"workload", r.workload}, {"device_mops", r.device_ops_per_second() / 1e6},
                    {"end_to_end_mops", r.ops_per_second() / 1e6}, {"hit_rate", r.cache_hit_rate},
                    {"cache_gpu_bytes", r.cache_gpu_bytes}, {"cache_lines_loaded", r.cache_lines_loaded},
                    {"loading_operations", r.loading_operations},
                    {"loading_device_mops", r.loading_device_ops_per_second() / 1e6},
                    {"steady_device_mops", r.steady_device_ops_per_second() / 1e6}, {"resizes", r.resizes},
                    {"not_found", r.not_found},
                    {"bad_values", r.bad_values}});
  };
  for (uint32_t vw : value_widths) {
    // LOAD from a small table (8 resizes), with and without the cache.
    for (const CacheConfig& c : {configs[0], configs[2]}) {
      OpenOptions o = options(c);
      o.replace = true;
      Table t = Table::create(pool, {32, vw, {2, 2, 8}, records / 200, 3}, o);
      cli::RunOptions ro;
      ro.batch_size = batches.back();
      row(c.name, vw, ro.batch_size, "-", cli::run_workload(t, {workload::Workload::Load, records, 0, std::nullopt, 0.99, 1}, ro));
    }
    for (size_t batch : batches)
      for (const CacheConfig& c : configs) {
        const bool main_batch = batch == batches.back();
        // Every configuration at the larger batch, Zipf, the first value width; the others off,
        // LFU 20% and the complete cache only.
        const std::string name = c.name;
        const bool main_config = c.policy == CachePolicy::kOff || name == "lfu-20%" || name == "complete";
        if (!main_batch && !main_config) continue;
        if (vw != value_widths.front() && !main_config) continue;
        for (auto dist : {workload::KeyDistribution::Zipfian, workload::KeyDistribution::Uniform}) {
          const bool zipf = dist == workload::KeyDistribution::Zipfian;
          if (!zipf && (!main_batch || !main_config)) continue;
          Table t = Table::open(pool, options(c));
          cli::RunOptions ro;
          ro.batch_size = batch;
          uint64_t seed = 10;
          for (auto w : {workload::Workload::C, workload::Workload::B, workload::Workload::A})
            row(c.name, vw, batch, zipf ? "zipf0.99" : "uniform",
                cli::run_workload(t, {w, records, records, dist, 0.99, seed++}, ro));
        }
      }
    std::remove(pool.c_str());
  }
  return {{"records", records}, {"key_width", 32}, {"rows", rows}};
}

// ---- small: the latency of one small batch from host memory -----------------------------------
// What a server's round or a latency-bound caller pays per Table::execute: 16-byte keys and
// 8-byte values (gphash-server's signature index), arrays in host memory, a table of `records`
// items (far larger than the L2). Searches of present keys; writes: upserts of present keys and
// searches of others, no key twice (a server round's changes and searches); repeats: each key
// upserted then searched (the per-key order the plan keeps). Wall time per call, median and p99.
uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

json section_small(uint64_t records, const std::vector<size_t>& sizes) {
  records = std::bit_floor(records);
  json rows = json::array();
  json floor = json::object();
  for (const size_t bytes : {size_t{256}, size_t{4096}, size_t{65536}}) {
    const double s = small_round_trip_seconds(bytes, 2000, false), timed = small_round_trip_seconds(bytes, 2000, true);
    say(fmt::format("small: floor (copy {} bytes in, one kernel, copy out, wait): p50 {:.1f} us, {:.1f} us with timing events",
                    bytes, 1e6 * s, 1e6 * timed));
    floor[std::to_string(bytes)] = {{"p50_us", 1e6 * s}, {"timed_p50_us", 1e6 * timed}};
  }
  for (const Placement placement : {Placement::kGpuMemory, Placement::kHostMapped}) {
    const bool mapped = placement == Placement::kHostMapped;
    const std::string pool = mapped ? pool_dir + "/gphash-bench-small" : "mem:";
    OpenOptions o = gpu_options(placement);
    o.replace = true;
    Table t = Table::create(pool, {16, 8, {2, 2, 8}, records + records / 4, 9}, o);
    auto key_of = [](uint64_t r, uint64_t* k) { k[0] = mix64(r), k[1] = mix64(r ^ 0x5A5A5A5A5A5A5A5Aull); };
    {
      const size_t load = size_t{1} << 20;
      std::vector<uint64_t> keys(2 * load), values(load);
      std::vector<OpStatus> status(load);
      for (uint64_t at = 0; at < records; at += load) {
        for (size_t i = 0; i < load; ++i) key_of(at + i, &keys[2 * i]), values[i] = at + i;
        t.execute({.size = load, .key_width = 16, .value_width = 8, .op = Op::kInsert, .keys = keys.data(),
                   .values = values.data(), .status = status.data()});
      }
    }
    const size_t largest = *std::max_element(sizes.begin(), sizes.end());
    std::vector<uint64_t> keys(2 * largest), values(largest), out(largest);
    std::vector<Op> ops(largest);
    std::vector<OpStatus> status(largest);
    uint64_t draw = 1;
    for (const char* kind : {"searches", "writes", "repeats"}) {
      const std::string_view k = kind;
      for (const size_t n : sizes) {
        std::vector<double> us;
        size_t bad = 0, planned = 0;
        const int calls = 2000, warm = 100;
        for (int c = 0; c < warm + calls; ++c) {
          // Distinct records: base + i * step (step odd, records a power of two).
          const uint64_t base = mix64(draw++), step = mix64(draw++) | 1;
          for (size_t i = 0; i < n; ++i) {
            const size_t half = n / 2;
            const uint64_t r = (base + (k == "repeats" && i >= half ? i - half : i) * step) & (records - 1);
            key_of(r, &keys[2 * i]);
            values[i] = r;
            ops[i] = k == "searches" || i >= half ? Op::kSearch : Op::kUpsert;
          }
          Batch b{.size = n, .key_width = 16, .value_width = 8, .ops = ops.data(), .keys = keys.data(),
                  .values = values.data(), .values_out = out.data(), .status = status.data()};
          const auto t0 = std::chrono::steady_clock::now();
          t.execute(b);
          const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          if (c < warm) continue;
          us.push_back(1e6 * s);
          planned += t.info().last_batch_planned;
          for (size_t i = 0; i < n; ++i) bad += status[i] != OpStatus::kOk || (ops[i] == Op::kSearch && out[i] != values[i]);
        }
        std::sort(us.begin(), us.end());
        const double p50 = us[us.size() / 2], p99 = us[us.size() * 99 / 100];
        say(fmt::format("small ({}): {} of {}: p50 {:.1f} us, p99 {:.1f} us ({:.1f} M ops/s at p50), planned {}/{}{}",
                        mapped ? "mapped" : "gpu-memory", kind, n, p50, p99, n / p50, planned, calls,
                        bad ? fmt::format(", {} WRONG RESULTS", bad) : std::string()));
        rows.push_back({{"placement", mapped ? "mapped" : "gpu-memory"}, {"kind", kind}, {"n", n}, {"p50_us", p50},
                        {"p99_us", p99}, {"planned", planned}, {"calls", calls}, {"wrong", bad}});
        if (bad) throw std::runtime_error("small: wrong results");
      }
    }
    if (mapped) std::remove(pool.c_str());
  }
  return {{"records", records}, {"key_width", 16}, {"value_width", 8}, {"floor_p50_us", floor}, {"rows", rows}};
}

// ---- resize: time against table size -----------------------------------------------------
json section_resize(uint64_t items, size_t batch, Placement placement) {
  Table t = Table::create("mem:", {8, 8, {2, 2, 8}, 1 << 16, 8}, gpu_options(placement));
  DeviceArray<uint64_t> keys(batch), status_keys(1);
  DeviceArray<OpStatus> status(batch);
  json rows = json::array();
  uint64_t resizes = 0;
  for (uint64_t at = 0; at < items; at += batch) {
    const size_t n = std::min<uint64_t>(batch, items - at);
    fill_keys(keys.ptr, n, 0x5EED, at);
    device_batch(t, Op::kUpsert, n, keys.ptr, keys.ptr, nullptr, status.ptr);
    const TableInfo info = t.info();
    if (info.resizes != resizes) {
      resizes = info.resizes;
      rows.push_back({{"items", info.items}, {"slots_after", info.slots}, {"seconds", info.last_resize_seconds}});
      say(fmt::format("resize ({}): to {} slots with ~{} items: {:.1f} ms", placement == Placement::kGpuMemory ? "gpu-memory" : "mapped",
                      info.slots, info.items, 1e3 * info.last_resize_seconds));
    }
  }
  return rows;
}

// ---- gpu-batches: YCSB and micro workloads whose batches start and end in GPU memory ----------
// GPHash's setting (section 4): a GPU application's batch is in GPU memory and its results must be
// there too. The GPU engine runs it in place (MemorySpace::kDevice). The CPU-assisted system
// copies its operations, keys and (for writes) values over PCIe to pinned host memory, runs the
// CPU engine (GPHash or HMEH index) on all cores, and copies statuses and (for reads) values back.
// Counted: that whole path, as Table::execute on device arrays is for the GPU engine; and, for the
// CPU-assisted system, the index alone. Not counted: placing the generated batch in GPU memory
// first and copying the results back for verification.
class GpuBatchExecutor {
 public:
  GpuBatchExecutor(size_t n, uint32_t kw, uint32_t vw, bool cpu_assisted)
      : kw_(kw), vw_(vw), cpu_assisted_(cpu_assisted), d_ops_(n), d_keys_(n * kw), d_values_(n * vw), d_out_(n * vw),
        d_status_(n) {
    if (!cpu_assisted) return;
    check(cudaHostAlloc(&h_, n * (1 + kw + 2 * vw + 1), cudaHostAllocDefault), "cudaHostAlloc");
    h_ops_ = reinterpret_cast<Op*>(h_), h_keys_ = h_ + n, h_values_ = h_keys_ + n * kw, h_out_ = h_values_ + n * vw;
    h_status_ = reinterpret_cast<OpStatus*>(h_out_ + n * vw);
  }
  ~GpuBatchExecutor() { cudaFreeHost(h_); }
  GpuBatchExecutor(const GpuBatchExecutor&) = delete;
  GpuBatchExecutor& operator=(const GpuBatchExecutor&) = delete;

  double index_seconds = 0;  // CPU-assisted: Table::execute alone
  // The untimed copies that place a batch in GPU memory and fetch its results for checking: not
  // the system's traffic, so they are taken out of the PCIe count.
  double staging_in_bytes = 0, staging_out_bytes = 0;  // host to GPU, GPU to host

  double operator()(Table& t, const Batch& b) {
    const size_t n = b.size;
    bool writes = false, reads = false;
    for (size_t i = 0; i < n; ++i) (b.ops[i] == Op::kSearch ? reads : writes) = true;
    check(cudaMemcpy(d_ops_.ptr, b.ops, n, cudaMemcpyHostToDevice), "ops");
    check(cudaMemcpy(d_keys_.ptr, b.keys, n * kw_, cudaMemcpyHostToDevice), "keys");
    if (writes) check(cudaMemcpy(d_values_.ptr, b.values, n * vw_, cudaMemcpyHostToDevice), "values");
    staging_in_bytes += static_cast<double>(n * (1 + kw_) + (writes ? n * vw_ : 0));
    staging_out_bytes += static_cast<double>(n + (reads ? n * vw_ : 0));
    const auto t0 = std::chrono::steady_clock::now();
    if (cpu_assisted_) {
      run_on_cpu(t, b, writes, reads);
    } else {
      Batch db = b;
      db.ops = reinterpret_cast<const Op*>(d_ops_.ptr), db.keys = d_keys_.ptr, db.values = d_values_.ptr;
      db.values_out = d_out_.ptr, db.status = reinterpret_cast<OpStatus*>(d_status_.ptr);
      db.memory = MemorySpace::kDevice;
      t.execute(db);  // returns when the results are in GPU memory
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    check(cudaMemcpy(b.status, d_status_.ptr, n, cudaMemcpyDeviceToHost), "status");
    if (reads) check(cudaMemcpy(b.values_out, d_out_.ptr, n * vw_, cudaMemcpyDeviceToHost), "values out");
    return seconds;
  }

 private:
  void run_on_cpu(Table& t, const Batch& b, bool writes, bool reads) {
    const size_t n = b.size;
    check(cudaMemcpy(h_ops_, d_ops_.ptr, n, cudaMemcpyDeviceToHost), "ops");
    check(cudaMemcpy(h_keys_, d_keys_.ptr, n * kw_, cudaMemcpyDeviceToHost), "keys");
    if (writes) check(cudaMemcpy(h_values_, d_values_.ptr, n * vw_, cudaMemcpyDeviceToHost), "values");
    Batch hb = b;
    hb.ops = h_ops_, hb.keys = h_keys_, hb.values = h_values_, hb.values_out = h_out_, hb.status = h_status_;
    const auto i0 = std::chrono::steady_clock::now();
    t.execute(hb);
    index_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - i0).count();
    check(cudaMemcpy(d_status_.ptr, h_status_, n, cudaMemcpyHostToDevice), "status");
    if (reads) check(cudaMemcpy(d_out_.ptr, h_out_, n * vw_, cudaMemcpyHostToDevice), "values out");
  }

  uint32_t kw_, vw_;
  bool cpu_assisted_;
  DeviceArray<uint8_t> d_ops_, d_keys_, d_values_, d_out_, d_status_;
  std::byte* h_ = nullptr;
  Op* h_ops_ = nullptr;
  std::byte *h_keys_ = nullptr, *h_values_ = nullptr, *h_out_ = nullptr;
  OpStatus* h_status_ = nullptr;
};

struct GpuBatchesSpec {
  std::string engine = "gpu", index = "gphash", placement = "mapped", cache = "off", cache_values = "on", kernels = "warp";
  std::string shape = "2L-2H-8S", distribution;  // distribution: empty = the workload's default
  std::string devices;  // a sharded table over these GPUs (--devices 0,1); empty: one table on GPU 0
  double cache_fraction = 0.2, theta = 0.99;
  uint64_t records = 0, operations = 0, capacity = 0, cache_reload = 0;  // cache_reload 0: the default
  uint64_t reserve_pool_bytes = 0, cache_bytes = 0;
  int profile_workload = -1;  // the workload (0-based, in --workloads) run between cudaProfilerStart and Stop
  size_t batch = 0;
  uint32_t key_width = 8, value_width = 8;
  std::string workloads = "load,search,negative-search,update,a,b,c,f,delete";
};

OpenOptions options_of(const GpuBatchesSpec& g) {
  OpenOptions o;
  if (g.engine == "gpu") {
    o = gpu_options(g.placement == "gpu-memory" ? Placement::kGpuMemory : Placement::kHostMapped,
                    g.kernels == "thread"        ? GpuKernels::kThread
                    : g.kernels == "warp-direct" ? GpuKernels::kWarpDirect
                                                 : GpuKernels::kWarp);
    o.cache.policy = g.cache == "lfu" ? CachePolicy::kLfu : g.cache == "lru" ? CachePolicy::kLru
                     : g.cache == "random" ? CachePolicy::kRandom : CachePolicy::kOff;
    o.cache.fraction = g.cache_fraction;
    o.cache.gpu_bytes = g.cache_bytes;
    o.cache.values = g.cache_values == "on";
    if (g.cache_reload) o.cache.reload_operations = g.cache_reload;
  }  // else the CPU engine on all cores
  if (!g.devices.empty()) o.shards = cli::shard_list(0, g.devices);
  o.reserve_pool_bytes = g.reserve_pool_bytes;
  o.replace = true;
  return o;
}

// At most 200 evenly spaced samples of a run's per-batch timeline: operations done, seconds of
// batch calls so far, load factor, and the cache hit rate of the batches since the last sample.
json timeline_json(const cli::RunResult& r) {
  json out = json::array();
  const size_t n = r.timeline.size(), step = std::max<size_t>(1, (n + 199) / 200);
  uint64_t lookups = 0, hits = 0;
  for (size_t i = 0; i < n; ++i) {
    lookups += r.timeline[i].cache_lookups, hits += r.timeline[i].cache_hits;
    if ((i + 1) % step != 0 && i + 1 != n) continue;
    const auto& s = r.timeline[i];
    out.push_back({s.operations, s.seconds, s.load_factor, lookups ? json(double(hits) / double(lookups)) : json()});
    lookups = hits = 0;
  }
  return out;
}

json section_gpu_batches(const GpuBatchesSpec& g) {
  const std::string pool = pool_dir + "/gphash-bench-gpu-batches";
  const bool cpu_assisted = g.engine == "cpu";
  TableConfig config{.key_width = g.key_width, .value_width = g.value_width, .shape = parse_shape(g.shape),
                     .capacity = g.capacity ? g.capacity : std::max<uint64_t>(1024, g.records / 16)};
  if (g.index == "hmeh") config.index = IndexKind::kHmeh;
  Table t = Table::create(pool, config, options_of(g));
  // A read-modify-write is two table operations: room for twice the batch.
  GpuBatchExecutor executor(2 * g.batch, g.key_width, g.value_width, cpu_assisted);
  cli::RunOptions ro;
  ro.batch_size = g.batch;
  ro.execute = [&](Table& table, const Batch& b) { return executor(table, b); };
  json rows = json::array();
  uint64_t records_now = 0;
  PcieCounter pcie;
  const std::string name = cpu_assisted ? "cpu-assisted " + g.index : "gpu " + g.placement;
  for (const workload::Workload w : workload::parse_workload_list(g.workloads)) {
    workload::WorkloadSpec spec{w, w == workload::Workload::Load ? g.records : records_now, g.operations, std::nullopt,
                                g.theta, 1 + rows.size()};
    if (!g.distribution.empty()) spec.distribution = workload::parse_distribution(g.distribution);
    executor.index_seconds = 0;
    executor.staging_in_bytes = executor.staging_out_bytes = 0;
    pcie.start();
    const bool profiled = static_cast<int>(rows.size()) == g.profile_workload;
    if (profiled) check(cudaProfilerStart(), "cudaProfilerStart");
    const cli::RunResult r = cli::run_workload(t, spec, ro);
    if (profiled) check(cudaProfilerStop(), "cudaProfilerStop");
    double tx = 0, rx = 0;
    const bool counted = pcie.stop(&tx, &rx);
    records_now = t.size();
    if (r.loading_operations) {
      const double beside = r.loading_device_ops_per_second(), others = r.steady_device_ops_per_second();
      say(fmt::format("gpu-batches ({}): {:<16} beside loading phases: {} ops, {:.2f} M/s device; {}", name, r.workload,
                      r.loading_operations, beside / 1e6,
                      others > 0 ? fmt::format("{:.2f} for the other batches ({:.0f}%)", others / 1e6, 100 * beside / others)
                                 : std::string("every batch ran beside one")));
    }
    say(fmt::format("gpu-batches ({}): {:<16} {:>7.2f} M/s{}; not found {}, bad values {}, failed writes {}, absent "
                    "found {}",
                    name, r.workload, r.ops_per_second() / 1e6,
                    cpu_assisted ? fmt::format(" (index alone {:.2f} M/s)", r.operations / executor.index_seconds / 1e6)
                                 : fmt::format(" (device {:.2f} M/s: plan {:.3f} s, kernel {:.3f}, slow {:.3f} of which "
                                               "resizes {:.3f} ({}, rehash {:.3f}), heap {:.3f} ({}); {} displacements)",
                                               r.device_ops_per_second() / 1e6, r.plan_seconds, r.kernel_seconds,
                                               r.slow_seconds, r.resize_seconds, r.resizes, r.rehash_seconds, r.heap_grow_seconds,
                                               r.heap_grows, r.displacements),
                    r.not_found, r.bad_values, r.failed_writes, r.found_absent));
    json row = {{"workload", r.workload},
                {"distribution", r.distribution},
                {"operations", r.operations},
                {"ops_per_second", r.ops_per_second()},
                {"batch_p50_seconds", r.batch_percentile(0.5)},
                {"batch_p99_seconds", r.batch_percentile(0.99)},
                {"not_found", r.not_found},
                {"bad_values", r.bad_values},
                {"failed_writes", r.failed_writes},
                {"found_absent", r.found_absent},
                {"items_after", r.items_after},
                {"load_factor_after", r.load_factor_after},
                {"resizes", r.resizes},
                {"cache_hit_rate", r.cache_hit_rate >= 0 ? json(r.cache_hit_rate) : json()},
                {"cache_gpu_bytes", r.cache_gpu_bytes},
                {"cache_lines_loaded", r.cache_lines_loaded},
                {"loading_operations", r.loading_operations},
                {"loading_device_ops_per_second", r.loading_device_ops_per_second()},
                {"steady_device_ops_per_second", r.steady_device_ops_per_second()},
                {"timeline", timeline_json(r)}};
    if (counted) {  // NVML's sampled link counters, less the benchmark's own staging copies
      const double ops = static_cast<double>(r.operations);
      row["pcie_in_bytes_per_op"] = std::max(0.0, rx - executor.staging_in_bytes) / ops;
      row["pcie_out_bytes_per_op"] = std::max(0.0, tx - executor.staging_out_bytes) / ops;
    }
    if (cpu_assisted) row["index_ops_per_second"] = r.operations / executor.index_seconds;
    else
      row.update({{"device_ops_per_second", r.device_ops_per_second()},
                  {"plan_seconds", r.plan_seconds},
                  {"kernel_seconds", r.kernel_seconds},
                  {"slow_seconds", r.slow_seconds},
                  {"seconds", r.seconds},
                  {"heap_grows", r.heap_grows},
                  {"resize_seconds", r.resize_seconds},
                  {"rehash_seconds", r.rehash_seconds},
                  {"heap_grow_seconds", r.heap_grow_seconds},
                  {"displacements", r.displacements}});
    rows.push_back(row);
  }
  const uint32_t shards = t.info().shard_count;
  t.close();
  std::remove(pool.c_str());
  for (uint32_t k = 0; k < shards; ++k) std::remove(fmt::format("{}.shard{}", pool, k).c_str());
  return {{"engine", g.engine}, {"index", g.index}, {"placement", g.placement}, {"devices", g.devices}, {"records", g.records},
          {"batch", g.batch}, {"key_width", g.key_width}, {"value_width", g.value_width},
          {"threads", std::thread::hardware_concurrency()}, {"results", rows}};
}

// ---- recovery: time against pool size ------------------------------------------------------
// A child process loads the pool and exits without closing it: the pool is left dirty.
void make_dirty(const std::string& self, const std::string& pool, uint64_t items, bool gpu) {
  std::vector<std::string> args = {self, "--make-dirty", pool, "--items", std::to_string(items), "--dirty-engine",
                                   gpu ? "gpu" : "cpu"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid;
  if (posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv.data(), environ) != 0) throw std::runtime_error("spawn");
  int st = 0;
  waitpid(pid, &st, 0);
}

int make_dirty_main(const std::string& pool, uint64_t items, bool gpu) {
  std::remove(pool.c_str());
  OpenOptions o = gpu ? gpu_options(Placement::kHostMapped) : OpenOptions{};
  Table t = Table::create(pool, {8, 8, {2, 2, 8}, items, 4}, o);
  const size_t batch = 1 << 22;
  std::vector<uint64_t> keys(batch);
  std::vector<OpStatus> status(batch);
  for (uint64_t at = 0; at < items; at += batch) {
    const size_t n = std::min<uint64_t>(batch, items - at);
    for (size_t i = 0; i < n; ++i) keys[i] = workload::key_word(at + i);
    Batch b;
    b.size = n, b.key_width = 8, b.value_width = 8, b.op = Op::kInsert;
    b.keys = keys.data(), b.values = keys.data(), b.status = status.data();
    t.execute(b);
  }
  std::fflush(stdout);
  _exit(0);  // no close: the pool stays marked dirty, as after a crash
}

json section_recovery(const std::string& self, const std::vector<uint64_t>& sizes) {
  json rows = json::array();
  for (uint64_t items : sizes) {
    const std::string pool = pool_dir + "/gphash-bench-recovery";
    json row = {{"items", items}};
    for (bool gpu : {true, false}) {
      make_dirty(self, pool, items, true);
      const auto t0 = std::chrono::steady_clock::now();
      Table t = Table::open(pool, gpu ? gpu_options(Placement::kHostMapped) : OpenOptions{});
      const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const TableInfo info = t.info();
      const bool ok = info.recovered && info.items == items;
      say(fmt::format("recovery ({}): {} items, {:.1f} MB pool: recovery {:.1f} ms; whole open {:.1f} ms (mapping for "
                      "the GPU {:.1f} ms){}",
                      gpu ? "gpu" : "cpu", items, info.pool_bytes / 1e6, 1e3 * info.recovery_seconds, 1e3 * wall,
                      1e3 * info.open_map_seconds, ok ? "" : "  WRONG ITEM COUNT"));
      row[gpu ? "gpu_recovery_seconds" : "cpu_recovery_seconds"] = info.recovery_seconds;
      row[gpu ? "gpu_open_seconds" : "cpu_open_seconds"] = wall;
      row[gpu ? "gpu_ok" : "cpu_ok"] = ok;
    }
    std::remove(pool.c_str());
    rows.push_back(row);
  }
  return rows;
}

}  // namespace
}  // namespace gphash::bench

int main(int argc, char** argv) {
  using namespace gphash::bench;
  CLI::App app{"gphash GPU benchmark"};
  std::string sections = "platform,hbm,mapped,kernels,resize,recovery", json_path, dirty_pool, dirty_engine = "gpu";
  uint32_t hbm_bottom = 22;
  size_t l2_fetch_bytes = 0;
  uint64_t mapped_items = uint64_t{1} << 24, ycsb_records = 16'000'000, resize_items = 100'000'000, dirty_items = 0;
  size_t batch = size_t{1} << 24, ycsb_batch = size_t{1} << 20;
  uint32_t ycsb_key = 32, ycsb_value = 32;
  std::vector<uint64_t> recovery_sizes = {1'000'000, 16'000'000, 64'000'000};
  std::vector<uint32_t> cache_values = {32, 128};
  std::vector<size_t> cache_batches = {size_t{1} << 16, size_t{1} << 20};
  std::vector<size_t> small_sizes = {16, 64, 256, 1024, 4096};
  bool quick = false;
  GpuBatchesSpec gb;
  CLI::App* g = app.add_option_group("gpu-batches", "the gpu-batches section (with --ycsb-records, --ycsb-batch, widths)");
  g->add_option("--engine", gb.engine, "gpu, or cpu: the CPU-assisted system")->check(CLI::IsMember({"gpu", "cpu"}));
  g->add_option("--index", gb.index, "CPU-assisted: gphash or hmeh")->check(CLI::IsMember({"gphash", "hmeh"}));
  g->add_option("--placement", gb.placement)->check(CLI::IsMember({"mapped", "gpu-memory"}));
  g->add_option("--cache", gb.cache)->check(CLI::IsMember({"off", "lfu", "lru", "random"}));
  g->add_option("--cache-values", gb.cache_values)->check(CLI::IsMember({"on", "off"}));
  g->add_option("--cache-fraction", gb.cache_fraction);
  g->add_option("--cache-bytes", gb.cache_bytes, "a GPU-memory budget the cache sizes itself within (0: none)");
  g->add_option("--cache-reload", gb.cache_reload, "operations between loading phases (0: the default)");
  g->add_option("--devices", gb.devices, "GPU engine: shard the table over these GPUs (e.g. 0,1); batches stay on GPU 0");
  g->add_option("--kernels", gb.kernels)->check(CLI::IsMember({"warp", "warp-direct", "thread"}));
  g->add_option("--workloads", gb.workloads)->capture_default_str();
  g->add_option("--shape", gb.shape)->capture_default_str();
  g->add_option("--distribution", gb.distribution, "default: each workload's own");
  g->add_option("--theta", gb.theta)->capture_default_str();
  g->add_option("--operations", gb.operations, "operations per workload (0 = records)");
  g->add_option("--capacity", gb.capacity, "items before the first resize (0 = records / 16)");
  g->add_option("--reserve-pool-bytes", gb.reserve_pool_bytes, "file space the pool gets at creation (0 = none)");
  g->add_option("--profile-workload", gb.profile_workload,
                "profile only this workload (0-based index in --workloads): ncu --profile-from-start off");
  app.add_option("--cache-value-widths", cache_values)->capture_default_str();
  app.add_option("--cache-batches", cache_batches)->capture_default_str();
  app.add_option("--small-sizes", small_sizes)->capture_default_str();
  app.add_option("--sections", sections, "Comma-separated sections")->capture_default_str();
  app.add_option("--json", json_path, "Write all results as JSON here");
  app.add_option("--pool-dir", pool_dir, "Directory of the host-mapped pools (tmpfs or hugetlbfs)")->capture_default_str();
  app.add_option("--l2-fetch-bytes", l2_fetch_bytes,
                 "cudaLimitMaxL2FetchGranularity for the whole run (0: the driver's default)")->check(CLI::Range(0, 128));
  app.add_option("--hbm-bottom-level", hbm_bottom, "hbm: bottom level (22 = 100M slots, 1.6 GB)")->capture_default_str();
  app.add_option("--mapped-items", mapped_items)->capture_default_str();
  app.add_option("--ycsb-records", ycsb_records)->capture_default_str();
  app.add_option("--ycsb-key-width", ycsb_key)->capture_default_str();
  app.add_option("--ycsb-value-width", ycsb_value)->capture_default_str();
  app.add_option("--resize-items", resize_items)->capture_default_str();
  app.add_option("--recovery-sizes", recovery_sizes)->capture_default_str();
  app.add_option("--batch", batch)->capture_default_str();
  app.add_option("--ycsb-batch", ycsb_batch)->capture_default_str();
  app.add_flag("--quick", quick, "Small sizes: a smoke run");
  app.add_option("--make-dirty", dirty_pool)->group("");
  app.add_option("--items", dirty_items)->group("");
  app.add_option("--dirty-engine", dirty_engine)->group("");
  CLI11_PARSE(app, argc, argv);
  if (!dirty_pool.empty()) return make_dirty_main(dirty_pool, dirty_items, dirty_engine == "gpu");
  if (quick) {
    hbm_bottom = 18, mapped_items = uint64_t{1} << 19, ycsb_records = 500'000, resize_items = 2'000'000;
    batch = 1 << 20, ycsb_batch = 1 << 16, recovery_sizes = {100'000, 1'000'000};
  }
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "device");
  if (l2_fetch_bytes) check(cudaDeviceSetLimit(cudaLimitMaxL2FetchGranularity, l2_fetch_bytes), "L2 fetch granularity");
  size_t l2_fetch = 0;
  check(cudaDeviceGetLimit(&l2_fetch, cudaLimitMaxL2FetchGranularity), "L2 fetch granularity");
  say(fmt::format("device: {} ({} SMs, {:.0f} MB L2, {:.1f} GB; L2 fetch granularity {} B)", prop.name,
                  prop.multiProcessorCount, prop.l2CacheSize / 1e6, prop.totalGlobalMem / 1e9, l2_fetch));
  nlohmann::json results = {{"device", prop.name}};
  auto has = [&](const char* s) { return ("," + sections + ",").find(std::string(",") + s + ",") != std::string::npos; };
  try {
    if (has("platform")) {
      const double r64 = device_random_reads(size_t{8} << 30 >> (quick ? 4 : 0), 64, size_t{1} << 28);
      const double r32 = device_random_reads(size_t{8} << 30 >> (quick ? 4 : 0), 32, size_t{1} << 28);
      say(fmt::format("platform: HBM random reads over 8 GB: 64 B {:.1f} G/s, 32 B {:.1f} G/s", r64 / 1e9, r32 / 1e9));
      results["platform"] = {{"hbm_random_64B_gps", r64 / 1e9}, {"hbm_random_32B_gps", r32 / 1e9}};
    }
    if (has("hbm")) results["hbm"] = section_hbm(hbm_bottom, batch);
    if (has("mapped")) results["mapped"] = section_mapped(mapped_items, batch);
    if (has("kernels")) results["kernels"] = section_kernels(ycsb_records, ycsb_batch, ycsb_key, ycsb_value);
    if (has("cache")) results["cache"] = section_cache(ycsb_records, cache_values, cache_batches);
    if (has("resize")) {
      results["resize_gpu_memory"] = section_resize(resize_items, batch, gphash::Placement::kGpuMemory);
      results["resize_mapped"] = section_resize(resize_items / 4, batch, gphash::Placement::kHostMapped);
    }
    if (has("small")) results["small"] = section_small(ycsb_records / 4, small_sizes);
    if (has("recovery")) results["recovery"] = section_recovery(argv[0], recovery_sizes);
    if (has("gpu-batches")) {
      gb.records = ycsb_records, gb.batch = ycsb_batch, gb.key_width = ycsb_key, gb.value_width = ycsb_value;
      if (!gb.operations) gb.operations = ycsb_records;
      results["gpu_batches"] = section_gpu_batches(gb);
    }
  } catch (const std::exception& e) {
    say(fmt::format("FAILED: {}", e.what()));
    results["error"] = e.what();
  }
  if (!json_path.empty()) std::ofstream(json_path) << results.dump(2) << "\n";
  fmt::print("\n==== summary ====\n");
  for (const std::string& line : summary) fmt::print("{}\n", line);
  return results.contains("error") ? 1 : 0;
}
