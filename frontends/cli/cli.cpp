#include "cli.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <set>
#include <thread>
#include <vector>

#include "gphash/table.h"
#include "progress.h"
#include "workload/ycsb.h"
#include "ycsb_runner.h"

namespace gphash::cli {
namespace {

TableConfig config_of(const PoolConfigFlags& f) {
  TableConfig c;
  c.key_width = f.key_width;
  c.value_width = f.value_width;
  c.shape = parse_shape(f.shape);
  c.capacity = f.capacity;
  c.hash_seed = f.seed;
  c.value_checksums = f.value_checksums;
  c.index = f.index == "hmeh" ? IndexKind::kHmeh : IndexKind::kGphash;
  c.hmeh = {f.segment_bytes, f.probe_buckets, f.stash_buckets};
  return c;
}

OpenOptions options_of(const EngineFlags& f) {
  OpenOptions o;
  o.engine = f.engine == "gpu" ? EngineKind::kGpu : EngineKind::kCpu;
  o.placement = f.placement == "gpu-memory" ? Placement::kGpuMemory : Placement::kHostMapped;
  o.threads = f.threads;
  o.tag_mirror = f.tag_mirror == "on";
  o.max_load_factor = f.max_load_factor;
  o.max_pool_bytes = f.max_pool_bytes;
  o.reserve_pool_bytes = f.reserve_pool_bytes;
  o.pool_file_mode = f.mode;
  o.snapshots = f.snapshots;
  o.shards = shard_list(f.shards, f.devices);
  o.cache.policy = f.cache == "off"      ? CachePolicy::kOff
                   : f.cache == "lru"    ? CachePolicy::kLru
                   : f.cache == "random" ? CachePolicy::kRandom
                                         : CachePolicy::kLfu;
  o.cache.fraction = f.cache_fraction;
  o.cache.gpu_bytes = f.cache_bytes;
  o.cache.reload_operations = f.cache_reload;
  o.cache.values = f.cache_values == "on";
  o.gpu_kernels = f.kernels == "thread"        ? GpuKernels::kThread
                  : f.kernels == "warp-direct" ? GpuKernels::kWarpDirect
                                               : GpuKernels::kWarp;
  return o;
}

workload::WorkloadSpec spec_for(const WorkloadFlags& f, workload::Workload w, uint64_t records_now) {
  workload::WorkloadSpec s;
  s.workload = w;
  s.record_count = records_now;
  s.operation_count = f.operations ? f.operations : records_now;
  if (!f.distribution.empty()) s.distribution = workload::parse_distribution(f.distribution);
  s.theta = f.theta;
  s.seed = f.seed;
  return s;
}

std::string si(double x) {
  if (x >= 1e9) return fmt::format("{:.2f} G", x / 1e9);
  if (x >= 1e6) return fmt::format("{:.2f} M", x / 1e6);
  if (x >= 1e3) return fmt::format("{:.2f} k", x / 1e3);
  return fmt::format("{:.0f} ", x);
}
std::string bytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double x = static_cast<double>(b);
  int u = 0;
  while (x >= 1024 && u < 4) x /= 1024, ++u;
  return fmt::format("{:.1f} {}", x, units[u]);
}

nlohmann::json to_json(const TableInfo& i) {
  nlohmann::json j = {{"path", i.path},
          {"pool_kind", i.pool_kind},
          {"engine", i.engine},
          {"format_version", i.format_version},
          {"uuid", i.uuid},
          {"generation", i.generation},
          {"key_width", i.key_width},
          {"value_width", i.value_width},
          {"shape", to_string(i.shape)},
          {"hash_seed", i.hash_seed},
          {"items", i.items},
          {"slots", i.slots},
          {"load_factor", i.load_factor},
          {"levels", {i.bottom_level, i.top_level}},
          {"pool_bytes", i.pool_bytes},
          {"heap_cells", i.heap_cells},
          {"cell_size", i.cell_size},
          {"index", i.index},
          {"value_checksums", i.value_checksums},
          {"clean_shutdown", i.clean_shutdown},
          {"in_use", i.in_use},
          {"resize_in_progress", i.resizing},
          {"last_snapshot_unix_ns", i.last_snapshot_unix_ns},
          {"writes", i.writes},
          {"writes_since_snapshot", i.writes_since_snapshot}};
  if (i.shard_count) {  // a shard of a sharded table
    j["shard_index"] = i.shard_index;
    j["shard_count"] = i.shard_count;
  }
  if (i.index == "hmeh") {  // no shape and no levels
    j["shape"] = nullptr;
    j["levels"] = nullptr;
  }
  return j;
}

nlohmann::json to_json(const RunResult& r) {
  return {{"workload", r.workload},
          {"distribution", r.distribution},
          {"operations", r.operations},
          {"table_operations", r.table_ops},
          {"seconds", r.seconds},
          {"wall_seconds", r.wall_seconds},
          {"ops_per_second", r.ops_per_second()},
          // GPU engine: the batches' device time (kernels and copies); null on the CPU engine.
          {"device_seconds", r.device_seconds > 0 ? nlohmann::json(r.device_seconds) : nlohmann::json()},
          {"device_ops_per_second", r.device_seconds > 0 ? nlohmann::json(r.device_ops_per_second()) : nlohmann::json()},
          {"batches", r.batch_seconds.size()},
          {"batch_p50_seconds", r.batch_percentile(0.50)},
          {"batch_p99_seconds", r.batch_percentile(0.99)},
          {"not_found", r.not_found},
          {"found_absent", r.found_absent},
          {"bad_values", r.bad_values},
          {"failed_writes", r.failed_writes},
          {"items_after", r.items_after},
          {"load_factor_after", r.load_factor_after},
          {"resizes", r.resizes},
          {"heap_grows", r.heap_grows},
          {"displacements", r.displacements},
          {"plan_seconds", r.plan_seconds},
          {"kernel_seconds", r.kernel_seconds},
          {"slow_seconds", r.slow_seconds},
          {"cache_hit_rate", r.cache_hit_rate >= 0 ? nlohmann::json(r.cache_hit_rate) : nlohmann::json()},
          {"cache_gpu_bytes", r.cache_gpu_bytes},
          {"cache_lines_loaded", r.cache_lines_loaded}};
}

void print_info(const TableInfo& i) {
  fmt::print("pool           {} ({}, {}){}\n", i.path, i.pool_kind, bytes(i.pool_bytes),
             i.in_use ? ", open for writing by another process" : "");
  fmt::print("format         {} (generation {}, uuid {})\n", i.format_version, i.generation, i.uuid);
  if (i.shard_count)
    fmt::print("shard          {} of {} of a sharded table (open it with --shards {})\n", i.shard_index, i.shard_count,
               i.shard_count);
  if (i.index == "hmeh") {  // no shape and no levels: segments in an arena
    fmt::print("table          hmeh, {}-byte keys, {}-byte values, hash seed {:#x}\n", i.key_width, i.value_width,
               i.hash_seed);
    fmt::print("slots          {} (in the segment arena, directory or not)\n", i.slots);
  } else {
    fmt::print("table          {} {}, {}-byte keys, {}-byte values, hash seed {:#x}\n", i.index, to_string(i.shape),
               i.key_width, i.value_width, i.hash_seed);
    fmt::print("levels         {}..{}, {} slots\n", i.bottom_level, i.top_level, i.slots);
  }
  fmt::print("items          {}{} (load factor {:.3f})\n", i.items, i.clean_shutdown ? "" : " (as of the last clean close)",
             i.load_factor);
  if (i.cell_size)
    fmt::print("value heap     {} cells of {} bytes{}\n", i.heap_cells, i.cell_size,
               i.value_checksums ? ", with value checksums" : "");
  fmt::print("state          {}{}\n", i.clean_shutdown ? "clean" : "not shut down cleanly: the next writable open recovers it",
             i.resizing ? ", resize in progress" : "");
  // What a reboot would lose (README "What survives what").
  if (i.last_snapshot_unix_ns == 0)
    fmt::print("snapshot       none: a reboot loses the pool{} ({} writes)\n",
               i.pool_kind == "file" ? " unless its file system keeps it" : "", i.writes);
  else
    fmt::print("snapshot       last one captured {}; a restart from it loses {} writes{}\n",
               describe_time(i.last_snapshot_unix_ns), i.writes_since_snapshot,
               i.in_use ? " so far (a writer is running)" : "");
}

void print_results(const std::vector<RunResult>& results) {
  // The GPU engine also reports the rate over the batches' device time (kernels and copies), beside
  // the end-to-end rate (ops/s: the whole call, host work included).
  const bool device = std::any_of(results.begin(), results.end(), [](const RunResult& r) { return r.device_seconds > 0; });
  fmt::print("\n{:<9}{:<14}{:>12}{}{:>13}{:>13}{:>11}{:>12}{:>8}\n", "workload", "distribution", "ops/s",
             device ? fmt::format("{:>15}", "device ops/s") : "", "batch p50", "batch p99", "not found", "load factor",
             "resizes");
  for (const RunResult& r : results)
    fmt::print("{:<9}{:<14}{:>12}{}{:>10.2f} ms{:>10.2f} ms{:>11}{:>12.3f}{:>8}\n", r.workload, r.distribution,
               si(r.ops_per_second()), device ? fmt::format("{:>15}", si(r.device_ops_per_second())) : "",
               1e3 * r.batch_percentile(0.5), 1e3 * r.batch_percentile(0.99), r.not_found, r.load_factor_after,
               r.resizes);
  for (const RunResult& r : results)
    if (r.cache_hit_rate >= 0)
      fmt::print("{:<9}BktCache hit rate {:.1f}% ({} of GPU memory, {} lines loaded from the pool)\n", r.workload,
                 100 * r.cache_hit_rate, bytes(r.cache_gpu_bytes), r.cache_lines_loaded);
  for (const RunResult& r : results)
    if (r.bad_values || r.failed_writes || r.found_absent)
      fmt::print("warning: {}: {} values failed their self-check, {} writes failed, {} absent keys found\n", r.workload,
                 r.bad_values, r.failed_writes, r.found_absent);
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

RunResult run_one(Table& table, const workload::WorkloadSpec& spec, size_t batch, bool progress) {
  Progress bar(std::string(workload::name(spec.workload)), progress);
  RunOptions o;
  o.batch_size = batch;
  o.progress = [&](uint64_t d, uint64_t t) { bar.update(d, t); };
  RunResult r = run_workload(table, spec, o);
  bar.finish();
  return r;
}


int cmd_create(const std::string& pool, const PoolConfigFlags& cfg, const EngineFlags& eng, bool replace) {
  OpenOptions o = options_of(eng);
  o.replace = replace;
  Table t = Table::create(pool, config_of(cfg), o);
  TableInfo i = t.info();
  fmt::print("created {}: {}, {}-byte keys, {}-byte values, {} slots{}\n", i.path,
             i.index == "hmeh" ? std::string("hmeh") : to_string(i.shape), i.key_width,
             i.value_width, i.slots, i.value_checksums ? ", value checksums" : "");
  return 0;
}

int cmd_info(const std::string& pool, bool json) {
  TableInfo i = Table::inspect(pool);
  if (json)
    fmt::print("{}\n", to_json(i).dump(2));
  else
    print_info(i);
  return 0;
}

int cmd_check(const std::string& pool, int threads, bool json) {
  CheckResult r = Table::check_pool(pool, threads);
  if (json) {
    nlohmann::json j = {{"ok", r.ok},           {"violation", r.violation},         {"violations", r.violations},
                        {"items", r.items},     {"values_verified", r.values_verified}, {"recovered", r.recovered}};
    fmt::print("{}\n", j.dump(2));
    return r.ok ? 0 : 1;
  }
  if (r.recovered)
    fmt::print("the pool was not shut down cleanly: checked as recovery leaves it (the file was not changed; the "
               "next writable open recovers it)\n");
  if (r.ok) {
    fmt::print("ok ({} items{})\n", r.items,
               r.values_verified ? fmt::format(", {} value checksums verified", r.values_verified) : "");
    return 0;
  }
  fmt::print("violation: {}\n", r.violation);
  if (r.violations > 1) fmt::print("({} violations in all)\n", r.violations);
  if (Table::inspect(pool).index == "hmeh")
    fmt::print("`gphash dump {}` copies what is readable (repair cannot drop damaged HMEH items yet)\n", pool);
  else
    fmt::print("`gphash repair {}` drops the damaged items and leaves a consistent pool\n", pool);
  return 1;
}

int cmd_repair(const std::string& pool, int threads) {
  RepairResult r = Table::repair(pool, threads);
  if (r.recovered) fmt::print("recovered: the pool was not shut down cleanly\n");
  if (r.cleared_move_record) fmt::print("cleared a damaged maintenance record\n");
  for (const std::string& d : r.dropped) fmt::print("dropped {}\n", d);
  fmt::print("{} ({} items)\n", r.dropped.empty() ? "nothing to drop: the pool is consistent" : "repaired", r.items);
  return 0;
}

int cmd_convert(const std::string& pool) {
  if (Table::convert(pool))
    fmt::print("converted {} to the current format\n", pool);
  else
    fmt::print("{} already has the current format\n", pool);
  return 0;
}

int cmd_load(const std::string& pool, const PoolConfigFlags& cfg, const EngineFlags& eng, const WorkloadFlags& wl,
             bool progress, const std::string& json_path) {
  std::optional<Table> table;
  try {
    table.emplace(Table::open(pool, options_of(eng)));
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kNotFound) throw;
    table.emplace(Table::create(pool, config_of(cfg), options_of(eng)));
  }
  RunResult r = run_one(*table, spec_for(wl, workload::Workload::Load, wl.records), wl.batch, progress);
  print_results({r});
  finish_snapshots(*table, eng.snapshots);
  if (!json_path.empty()) std::ofstream(json_path) << to_json(r).dump(2) << "\n";
  return r.failed_writes ? 1 : 0;
}

int cmd_run(const std::string& pool, const EngineFlags& eng, const WorkloadFlags& wl, const std::string& which,
            bool progress, const std::string& json_path) {
  Table table = Table::open(pool, options_of(eng));
  const uint64_t records = wl.records ? wl.records : table.size();
  if (records == 0) throw Error(ErrorCode::kInvalidArgument, "the pool is empty: load it first (gphash load)");
  RunResult r = run_one(table, spec_for(wl, workload::parse_workload(which), records), wl.batch, progress);
  print_results({r});
  finish_snapshots(table, eng.snapshots);
  if (!json_path.empty()) std::ofstream(json_path) << to_json(r).dump(2) << "\n";
  return (r.not_found || r.bad_values) ? 1 : 0;
}

// Rough pool size for `records` items: slots at the lowest load factor a table passes through
// (just after a resize, about half of 95%), plus heap cells for large values.
uint64_t estimated_pool_bytes(const TableConfig& c, uint64_t records) {
  const uint64_t slot_bytes = (c.key_width == 8 ? 16 : 8 + c.key_width + 8);
  uint64_t bytes = records * 21 / 10 * slot_bytes;
  if (c.value_width > 8) bytes += records * 2 * ((c.value_width + 15) / 16 * 16);
  return bytes;
}

int cmd_bench(std::string pool, const PoolConfigFlags& cfg, bool capacity_given, const EngineFlags& eng, WorkloadFlags wl,
              const std::string& workloads, bool progress, const std::string& json_path) {
  if (wl.records == 0) wl.records = 10'000'000;
  const std::vector<workload::Workload> list = workload::parse_workload_list(workloads);
  for (size_t i = 0; i + 1 < list.size(); ++i)
    if (list[i] == workload::Workload::Delete)
      throw Error(ErrorCode::kInvalidArgument, "bench: delete must come last in --workloads (it removes records "
                                               "the other workloads would look for)");
  TableConfig config = config_of(cfg);
  // Unless told otherwise, start small: the load crosses several resizes.
  if (!capacity_given) config.capacity = std::max<uint64_t>(1024, wl.records / 16);
  if (pool.find('/') == std::string::npos) {
    struct statvfs fs {};
    const uint64_t need = estimated_pool_bytes(config, wl.records);
    if (statvfs("/dev/shm", &fs) == 0 && static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize < need)
      throw Error(ErrorCode::kNoSpace,
                  fmt::format("/dev/shm has {} free, the benchmark needs about {}: pass a smaller --records or a "
                              "pool path on a larger tmpfs",
                              bytes(static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize), bytes(need)));
  }
  OpenOptions o = options_of(eng);
  o.replace = true;
  Table table = Table::create(pool, config, o);
  const unsigned hw = std::thread::hardware_concurrency();
  fmt::print("gphash bench: {} engine, {} threads, {} ({} hardware threads)\n", table.info().engine,
             eng.threads ? eng.threads : static_cast<int>(hw), cpu_model(), hw);
  if (!o.shards.empty())
    fmt::print("sharded: {} shards, {}\n", o.shards.size(),
               o.engine == EngineKind::kGpu ? fmt::format("on GPUs {}", fmt::join(o.shards, ",")) : "CPU engine");
  fmt::print("table {}, {}-byte keys, {}-byte values; {} records, {} operations per workload, batches of {}\n",
             cfg.index == "hmeh" ? std::string("hmeh") : cfg.shape, cfg.key_width, cfg.value_width, wl.records, wl.operations ? wl.operations : wl.records, wl.batch);
  fmt::print("throughput = operations / time inside Table::execute (generating keys and values excluded)\n");
  std::vector<RunResult> results;
  uint64_t records_now = 0;
  for (workload::Workload w : list) {
    if (w == workload::Workload::Load) {
      results.push_back(run_one(table, spec_for(wl, w, wl.records), wl.batch, progress));
      records_now = table.size();
      continue;
    }
    if (records_now == 0) throw Error(ErrorCode::kInvalidArgument, "bench: put load first in --workloads");
    results.push_back(run_one(table, spec_for(wl, w, records_now), wl.batch, progress));
    records_now = table.size();
  }
  print_results(results);
  finish_snapshots(table, eng.snapshots);
  TableInfo info = table.info();
  table.close();
  bool lost = false;
  for (const RunResult& r : results) lost |= r.not_found || r.bad_values || r.failed_writes || r.found_absent;
  fmt::print("\npool: {} ({}, {} items, load factor {:.3f}, {} resizes, {} displacements)\n", info.path,
             bytes(info.pool_bytes), info.items, info.load_factor, info.resizes, info.displacements);
  if (info.shard_count)
    fmt::print("{} shards: inspect one with `gphash info {}.shard0`, verify it with `gphash check`, remove them with "
               "`rm {}.shard*`\n",
               info.shard_count, pool, info.shards.empty() ? info.path : info.shards[0].path.substr(0, info.shards[0].path.rfind('.')));
  else
    fmt::print("inspect it with `gphash info {0}`, verify it with `gphash check {0}`, remove it with `rm {1}`\n", pool,
               info.path);
  if (!json_path.empty()) {
    nlohmann::json j = {{"cpu", cpu_model()}, {"hardware_threads", hw}, {"table", to_json(info)}, {"results", {}}};
    for (const RunResult& r : results) j["results"].push_back(to_json(r));
    std::ofstream(json_path) << j.dump(2) << "\n";
    fmt::print("results written to {}\n", json_path);
  }
  return lost ? 1 : 0;
}

}  // namespace

void Cli::add_pool_config(CLI::App* app) {
  options_.choice(app, "--key-width", key_width_text_, {"8", "16", "32"}, "Key width in bytes");
  options_.number(app, "--value-width", cfg_.value_width, 1, 65536,
                  "Value width in bytes: up to 8 inline in the slot, larger in the value heap");
  options_.choice(app, "--shape", cfg_.shape, {"2L-2H-8S", "4L-2H-4S", "1L-4H-8S"}, "Levels-hashes-slots");
  options_.number(app, "--capacity", cfg_.capacity, 1, kMaxRecords, "Items to hold before the first resize");
  options_.number(app, "--seed", cfg_.seed, 0, UINT64_MAX, "Hash seed (random if not given)");
  options_.flag(app, "--value-checksums", cfg_.value_checksums,
                "Store a checksum with every heap value (values over 8 bytes); reads verify it");
  options_.choice(app, "--index", cfg_.index, {"gphash", "hmeh"},
                  "The index the pool holds (hmeh: CPU engine only, 8- or 16-byte keys; --shape does not apply)");
  options_.number(app, "--segment-bytes", cfg_.segment_bytes, 4096, 1 << 20, "HMEH: segment size, a power of two");
  options_.number(app, "--probe-buckets", cfg_.probe_buckets, 1, 16, "HMEH: buckets a key may sit in from its home bucket");
  options_.number(app, "--stash-buckets", cfg_.stash_buckets, 0, 16, "HMEH: stash buckets per segment");
}

std::vector<int> shard_list(uint32_t shards, const std::string& devices) {
  std::vector<int> list;
  if (!devices.empty()) {
    for (size_t pos = 0; pos <= devices.size();) {
      size_t comma = devices.find(',', pos);
      if (comma == std::string::npos) comma = devices.size();
      list.push_back(static_cast<int>(parse_unsigned("--devices", devices.substr(pos, comma - pos), 0, 1023)));
      pos = comma + 1;
    }
    if (list.size() > 1024) throw CLI::ValidationError("--devices", "at most 1024 shards");
    if (shards && shards != list.size())
      throw CLI::ValidationError("--shards", fmt::format("--shards {} but --devices lists {} GPUs: give one of them",
                                                          shards, list.size()));
    return list;
  }
  list.assign(shards, 0);
  return list;
}

void Cli::add_engine(CLI::App* app) {
  options_.choice(app, "--engine", eng_.engine, {"cpu", "gpu"}, "Engine");
  options_.choice(app, "--placement", eng_.placement, {"mapped", "gpu-memory"},
                  "GPU engine: mapped (the pool, persistent) or gpu-memory (a volatile copy)");
  options_.number(app, "--threads", eng_.threads, 0, kMaxThreads, "CPU engine threads (0 = all)");
  options_.choice(app, "--tag-mirror", eng_.tag_mirror, {"on", "off"},
                  "CPU engine: a DRAM copy of every slot's tag, one byte per slot (default on; off saves the memory)");
  options_.real(app, "--max-load-factor", eng_.max_load_factor, 0, 1,
                "load factor past which an insert that finds no free slot resizes the table instead of displacing (default 0.9)");
  options_.choice(app, "--cache", eng_.cache, {"lfu", "lru", "random", "off"},
                  "GPU engine, mapped: BktCache policy (hot buckets and their values in GPU memory; default off)");
  options_.real(app, "--cache-fraction", eng_.cache_fraction, 0, 1,
                "BktCache without --cache-bytes: share of the table's buckets cached (default 0.2; 1: a complete copy)");
  options_.number(app, "--cache-bytes", eng_.cache_bytes, 0, kMaxPoolBytes,
                  "BktCache: GPU memory budget for the whole cache, which sizes itself within it (0 = none)");
  options_.number(app, "--cache-reload", eng_.cache_reload, 1, uint64_t{1} << 40,
                  "BktCache: operations between loading phases (default 2097152)");
  options_.choice(app, "--cache-values", eng_.cache_values, {"on", "off"},
                  "BktCache: also cache the heap values of cached buckets (off: the paper's design; default on)");
  options_.choice(app, "--kernels", eng_.kernels, {"warp", "warp-direct", "thread"},
                  "GPU engine kernels (to measure the design): warp-cooperative through the tag mirror (default), "
                  "warp-cooperative reading the slots, or one thread per operation (the naive port)");
  options_.number(app, "--max-pool-bytes", eng_.max_pool_bytes, 0, kMaxPoolBytes, "Limit the pool's size (0 = no limit)");
  options_.number(app, "--reserve-pool-bytes", eng_.reserve_pool_bytes, 0, kMaxPoolBytes, kReserveHelp);
  options_.file_mode(app, "--mode", eng_.mode, "Permissions of a pool file this command creates (default 0600)");
  add_snapshot_options(app, options_, eng_.snapshots);
  options_.number(app, "--shards", eng_.shards, 1, 1024,
                  "Shard the table over N pools (NAME.shard0 ..), each run by its own thread; GPU engine: all on GPU 0");
  options_.text(app, "--devices", eng_.devices,
                "Shard the table over these GPUs, one shard per entry (0,1 = two GPUs; 0,0 = two shards on GPU 0)")
      ->check(CLI::Validator(
          [](std::string& v) {
            try {
              shard_list(0, v);
              return std::string();
            } catch (const CLI::ValidationError& e) {
              return std::string(e.what());
            }
          },
          "LIST"));
}

void Cli::add_workload(CLI::App* app, bool with_distribution) {
  options_.number(app, "--records", wl_.records, 1, kMaxRecords, "Records loaded (run: default = items in the pool)");
  options_.number(app, "--batch", wl_.batch, 1, kMaxBatch, "Operations per batch (default 65536)");
  options_.number(app, "--workload-seed", wl_.seed, 0, UINT64_MAX, "Seed of the workload generator (default 1)");
  if (with_distribution) {
    options_.number(app, "--operations", wl_.operations, 1, kMaxOperations, "Operations per workload (default = records)");
    options_.choice(app, "--distribution", wl_.distribution, {"uniform", "zipfian", "zipfian-exact", "latest"},
                    "Key distribution (default: YCSB's for the workload; zipfian = YCSB's scrambled form)");
    options_.real(app, "--theta", wl_.theta, 0, 10, "Zipf exponent (default 0.99; zipfian needs < 1)");
  }
}

Cli::Cli() : app_("gphash: a persistent GPU hash index and key-value store.\n"
                  "POOL is NAME (= /dev/shm/NAME), a path, or mem: (anonymous, for tests).") {
  app_.require_subcommand(1);
  app_.set_version_flag("--version", "gphash 0.1.0");
  auto pool_arg = [&](CLI::App* app) { options_.text(app, "POOL", pool_, "Pool")->required(); };
  auto json_out = [&](CLI::App* app, const char* what) { options_.text(app, "--json", json_path_, what); };

  create_ = app_.add_subcommand("create", "Create a pool (alone: the default configuration)");
  pool_arg(create_);
  add_pool_config(create_);
  options_.flag(create_, "--replace", replace_, "Replace an existing pool at the path (refused while it is open)");
  options_.number(create_, "--max-pool-bytes", eng_.max_pool_bytes, 0, kMaxPoolBytes, "Limit the pool's size (0 = no limit)");
  options_.number(create_, "--reserve-pool-bytes", eng_.reserve_pool_bytes, 0, kMaxPoolBytes, kReserveHelp);
  options_.file_mode(create_, "--mode", eng_.mode, "Permissions of the pool file (default 0600)");

  info_ = app_.add_subcommand("info", "Show a pool's header (works while a writer has the pool open)");
  pool_arg(info_);
  options_.flag(info_, "--json", json_, "Print JSON");

  load_ = app_.add_subcommand("load", "Load YCSB records into a pool (created if missing)");
  pool_arg(load_);
  add_pool_config(load_);
  add_engine(load_);
  add_workload(load_, false);
  load_->get_option("--records")->required();
  json_out(load_, "Write the result as JSON to this file");
  options_.flag(load_, "--no-progress", no_progress_, "No progress display");

  run_ = app_.add_subcommand("run", "Run a YCSB workload (a, b, c, d, f) on a loaded pool");
  pool_arg(run_);
  options_.choice(run_, "--workload", which_, {"a", "b", "c", "d", "f"},
                  "YCSB workload (load: use `gphash load`; e needs range scans, which a hash index has not)")
      ->required();
  add_engine(run_);
  add_workload(run_, true);
  json_out(run_, "Write the result as JSON to this file");
  options_.flag(run_, "--no-progress", no_progress_, "No progress display");

  bench_ = app_.add_subcommand("bench", "The main job: create a pool, load it, run YCSB A, B and C, report");
  options_.text(bench_, "--pool", bench_pool_, "Pool to create (replaced if it exists and is not in use)");
  options_.text(bench_, "--workloads", workloads_, "Comma-separated: load first, then any of a,b,c,d,f, the micro workloads search, negative-search, update, delete (last) and the traces dlrm, pagerank")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            size_t pos = 0;
            for (int k = 0; pos <= text.size(); ++k) {
              size_t comma = std::min(text.find(',', pos), text.size());
              const std::string w = text.substr(pos, comma - pos);
              static const std::set<std::string> later = {"a",      "b",               "c",      "d",      "f",
                                                          "search", "negative-search", "update", "delete", "dlrm",
                                                          "pagerank"};
              if (k == 0 ? w != "load" : !later.contains(w))
                return "takes load first, then any of a,b,c,d,f,search,negative-search,update,delete,dlrm,pagerank, "
                       "comma-separated (not '" + text + "')";
              pos = comma + 1;
            }
            return {};
          },
          "LIST"));
  add_pool_config(bench_);
  add_engine(bench_);
  add_workload(bench_, true);
  json_out(bench_, "Write the results as JSON to this file");
  options_.flag(bench_, "--no-progress", no_progress_, "No progress display");

  check_ = app_.add_subcommand("check", "Verify a pool's invariants without changing it");
  pool_arg(check_);
  options_.number(check_, "--threads", eng_.threads, 0, kMaxThreads, "Threads (0 = all)");
  options_.flag(check_, "--json", json_, "Print JSON");

  repair_ = app_.add_subcommand("repair", "Drop the items that break an invariant and leave a consistent pool");
  pool_arg(repair_);
  options_.number(repair_, "--threads", eng_.threads, 0, kMaxThreads, "Threads (0 = all)");

  convert_ = app_.add_subcommand("convert", "Rewrite a pool of an older format version in the current one");
  pool_arg(convert_);

  groups_.push_back(make_data_commands());
  groups_.push_back(make_snapshot_commands());
  for (auto& g : groups_) g->add(app_, options_);
}

int Cli::parse(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  try {
    app_.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    done_ = true;
    return app_.exit(e, out, err);
  } catch (const CLI::CallForAllHelp& e) {
    done_ = true;
    return app_.exit(e, out, err);
  } catch (const CLI::CallForVersion& e) {
    done_ = true;
    return app_.exit(e, out, err);
  } catch (const CLI::ParseError& e) {
    done_ = true;
    app_.exit(e, out, err);
    return 2;
  }
  cfg_.key_width = static_cast<uint32_t>(std::stoul(key_width_text_));
  return 0;
}

int Cli::execute() {
  try {
    const bool progress = !no_progress_;
    if (*create_) return cmd_create(pool_, cfg_, eng_, replace_);
    if (*info_) return cmd_info(pool_, json_);
    if (*check_) return cmd_check(pool_, eng_.threads, json_);
    if (*repair_) return cmd_repair(pool_, eng_.threads);
    if (*convert_) return cmd_convert(pool_);
    if (*load_) return cmd_load(pool_, cfg_, eng_, wl_, progress, json_path_);
    if (*run_) return cmd_run(pool_, eng_, wl_, which_, progress, json_path_);
    if (*bench_) return cmd_bench(bench_pool_, cfg_, bench_->count("--capacity") > 0, eng_, wl_, workloads_, progress, json_path_);
    for (auto& g : groups_)
      if (std::optional<int> status = g->run()) return *status;
  } catch (const std::invalid_argument& e) {  // a workload the generator cannot run (theta, records)
    fmt::print(stderr, "gphash: {}\n", e.what());
    return 2;
  } catch (const gphash::Error& e) {
    fmt::print(stderr, "gphash: error: {}\n", e.what());
    return e.code() == gphash::ErrorCode::kInvalidArgument ? 2 : 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "gphash: error: {}\n", e.what());
    return 1;
  }
  return 2;
}

}  // namespace gphash::cli
