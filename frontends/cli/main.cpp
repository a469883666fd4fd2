// gphash: create, inspect, load, run, benchmark and check pools from the command line.
// Exit status: 0 success, 1 failure (an error, or `check` found a violation), 2 usage error.
#include <sys/statvfs.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gphash/table.h"
#include "progress.h"
#include "workload/records.h"
#include "workload/ycsb.h"
#include "ycsb_runner.h"

namespace gphash::cli {
namespace {

struct PoolConfigFlags {
  uint32_t key_width = 8;
  uint32_t value_width = 8;
  std::string shape = "2L-2H-8S";
  uint64_t capacity = uint64_t{1} << 20;
  std::optional<uint64_t> seed;

  void add_to(CLI::App* app) {
    app->add_option("--key-width", key_width, "Key width in bytes: 8, 16 or 32")->capture_default_str();
    app->add_option("--value-width", value_width, "Value width in bytes: up to 8 inline, larger in the value heap")
        ->capture_default_str();
    app->add_option("--shape", shape, "Levels-hashes-slots with L*H*S = 32: 2L-2H-8S, 4L-2H-4S or 1L-4H-8S")
        ->capture_default_str();
    app->add_option("--capacity", capacity, "Items to hold before the first resize (it grows on demand)")
        ->capture_default_str();
    app->add_option("--seed", seed, "Hash seed (random if not given)");
  }
  TableConfig config() const { return {key_width, value_width, parse_shape(shape), capacity, seed}; }
};

struct EngineFlags {
  std::string engine = "cpu";
  std::string placement = "mapped";
  int threads = 0;
  uint64_t max_pool_bytes = 0;

  void add_to(CLI::App* app) {
    app->add_option("--engine", engine, "cpu or gpu")->check(CLI::IsMember({"cpu", "gpu"}))->capture_default_str();
    app->add_option("--placement", placement, "GPU engine: mapped (the pool, persistent) or gpu-memory (volatile copy)")
        ->check(CLI::IsMember({"mapped", "gpu-memory"}))
        ->capture_default_str();
    app->add_option("--threads", threads, "CPU engine threads (0 = all)")->capture_default_str();
    app->add_option("--max-pool-bytes", max_pool_bytes, "Limit the pool's size (0 = no limit)");
  }
  OpenOptions options() const {
    OpenOptions o;
    o.engine = engine == "gpu" ? EngineKind::kGpu : EngineKind::kCpu;
    o.placement = placement == "gpu-memory" ? Placement::kGpuMemory : Placement::kHostMapped;
    o.threads = threads;
    o.max_pool_bytes = max_pool_bytes;
    return o;
  }
};

struct WorkloadFlags {
  uint64_t records = 0;
  uint64_t operations = 0;
  std::string distribution;
  double theta = 0.99;
  uint64_t seed = 1;
  size_t batch = 1 << 16;

  void add_to(CLI::App* app, bool with_distribution) {
    app->add_option("--records", records, "Records loaded (run: default = items in the pool)");
    app->add_option("--batch", batch, "Operations per batch")->capture_default_str();
    app->add_option("--workload-seed", seed, "Seed of the workload generator")->capture_default_str();
    if (with_distribution) {
      app->add_option("--operations", operations, "Operations per workload (default = records)");
      app->add_option("--distribution", distribution,
                      "uniform, zipfian (YCSB scrambled), zipfian-exact or latest (default: YCSB's for the workload)");
      app->add_option("--theta", theta, "Zipf exponent")->capture_default_str();
    }
  }
  workload::WorkloadSpec spec(workload::Workload w, uint64_t records_now) const {
    workload::WorkloadSpec s;
    s.workload = w;
    s.record_count = records_now;
    s.operation_count = operations ? operations : records_now;
    if (!distribution.empty()) s.distribution = workload::parse_distribution(distribution);
    s.theta = theta;
    s.seed = seed;
    return s;
  }
};

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
  return {{"path", i.path},
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
          {"clean_shutdown", i.clean_shutdown},
          {"resize_in_progress", i.resizing}};
}

nlohmann::json to_json(const RunResult& r) {
  return {{"workload", r.workload},
          {"distribution", r.distribution},
          {"operations", r.operations},
          {"table_operations", r.table_ops},
          {"seconds", r.seconds},
          {"wall_seconds", r.wall_seconds},
          {"ops_per_second", r.ops_per_second()},
          {"batches", r.batch_seconds.size()},
          {"batch_p50_seconds", r.batch_percentile(0.50)},
          {"batch_p99_seconds", r.batch_percentile(0.99)},
          {"not_found", r.not_found},
          {"bad_values", r.bad_values},
          {"failed_writes", r.failed_writes},
          {"items_after", r.items_after},
          {"load_factor_after", r.load_factor_after},
          {"resizes", r.resizes}};
}

void print_info(const TableInfo& i) {
  fmt::print("pool           {} ({}, {})\n", i.path, i.pool_kind, bytes(i.pool_bytes));
  fmt::print("format         {} (generation {}, uuid {})\n", i.format_version, i.generation, i.uuid);
  fmt::print("table          {}, {}-byte keys, {}-byte values, hash seed {:#x}\n", to_string(i.shape), i.key_width,
             i.value_width, i.hash_seed);
  fmt::print("levels         {}..{}, {} slots\n", i.bottom_level, i.top_level, i.slots);
  fmt::print("items          {}{} (load factor {:.3f})\n", i.items, i.clean_shutdown ? "" : " (as of the last clean close)",
             i.load_factor);
  if (i.cell_size) fmt::print("value heap     {} cells of {} bytes\n", i.heap_cells, i.cell_size);
  fmt::print("state          {}{}\n", i.clean_shutdown ? "clean" : "not shut down cleanly: the next writable open recovers it",
             i.resizing ? ", resize in progress" : "");
}

void print_results(const std::vector<RunResult>& results) {
  fmt::print("\n{:<9}{:<14}{:>12}{:>13}{:>13}{:>11}{:>12}{:>8}\n", "workload", "distribution", "ops/s", "batch p50",
             "batch p99", "not found", "load factor", "resizes");
  for (const RunResult& r : results)
    fmt::print("{:<9}{:<14}{:>12}{:>10.2f} ms{:>10.2f} ms{:>11}{:>12.3f}{:>8}\n", r.workload, r.distribution,
               si(r.ops_per_second()), 1e3 * r.batch_percentile(0.5), 1e3 * r.batch_percentile(0.99), r.not_found,
               r.load_factor_after, r.resizes);
  for (const RunResult& r : results)
    if (r.bad_values || r.failed_writes)
      fmt::print("warning: {}: {} values failed their self-check, {} writes failed\n", r.workload, r.bad_values,
                 r.failed_writes);
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
  OpenOptions o = eng.options();
  o.replace = replace;
  Table t = Table::create(pool, cfg.config(), o);
  TableInfo i = t.info();
  fmt::print("created {}: {}, {}-byte keys, {}-byte values, {} slots\n", i.path, to_string(i.shape), i.key_width,
             i.value_width, i.slots);
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

int cmd_check(const std::string& pool, const EngineFlags& eng) {
  Table t = Table::open(pool, eng.options());
  TableInfo info = t.info();
  if (info.recovered) fmt::print("recovered: the pool was not shut down cleanly ({:.1f} ms)\n", 1e3 * info.open_seconds);
  CheckResult r = t.check(eng.threads);
  if (r.ok) {
    fmt::print("ok ({} items)\n", r.items);
    return 0;
  }
  fmt::print("violation: {}\n", r.violation);
  return 1;
}

int cmd_load(const std::string& pool, const PoolConfigFlags& cfg, const EngineFlags& eng, const WorkloadFlags& wl,
             bool progress, const std::string& json_path) {
  if (wl.records == 0) throw CLI::ValidationError("--records", "load needs --records N (N > 0)");
  std::optional<Table> table;
  try {
    table.emplace(Table::open(pool, eng.options()));
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kNotFound) throw;
    table.emplace(Table::create(pool, cfg.config(), eng.options()));
  }
  RunResult r = run_one(*table, wl.spec(workload::Workload::Load, wl.records), wl.batch, progress);
  print_results({r});
  if (!json_path.empty()) std::ofstream(json_path) << to_json(r).dump(2) << "\n";
  return r.failed_writes ? 1 : 0;
}

int cmd_run(const std::string& pool, const EngineFlags& eng, const WorkloadFlags& wl, const std::string& which,
            bool progress, const std::string& json_path) {
  Table table = Table::open(pool, eng.options());
  const uint64_t records = wl.records ? wl.records : table.size();
  if (records == 0) throw Error(ErrorCode::kInvalidArgument, "the pool is empty: load it first (gphash load)");
  RunResult r = run_one(table, wl.spec(workload::parse_workload(which), records), wl.batch, progress);
  print_results({r});
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

int cmd_bench(std::string pool, const PoolConfigFlags& cfg, const EngineFlags& eng, WorkloadFlags wl,
              const std::string& workloads, bool progress, const std::string& json_path) {
  if (wl.records == 0) wl.records = 10'000'000;
  std::vector<workload::Workload> list;
  for (size_t pos = 0; pos <= workloads.size();) {
    size_t comma = workloads.find(',', pos);
    if (comma == std::string::npos) comma = workloads.size();
    list.push_back(workload::parse_workload(workloads.substr(pos, comma - pos)));
    pos = comma + 1;
  }
  TableConfig config = cfg.config();
  config.capacity = std::max<uint64_t>(1024, wl.records / 16);  // start small: the load crosses several resizes
  if (pool.find('/') == std::string::npos) {
    struct statvfs fs {};
    const uint64_t need = estimated_pool_bytes(config, wl.records);
    if (statvfs("/dev/shm", &fs) == 0 && static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize < need)
      throw Error(ErrorCode::kNoSpace,
                  fmt::format("/dev/shm has {} free, the benchmark needs about {}: pass a smaller --records or a "
                              "pool path on a larger tmpfs",
                              bytes(static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize), bytes(need)));
  }
  OpenOptions o = eng.options();
  o.replace = true;
  Table table = Table::create(pool, config, o);
  const unsigned hw = std::thread::hardware_concurrency();
  fmt::print("gphash bench: {} engine, {} threads, {} ({} hardware threads)\n", table.info().engine,
             eng.threads ? eng.threads : static_cast<int>(hw), cpu_model(), hw);
  fmt::print("table {}, {}-byte keys, {}-byte values; {} records, {} operations per workload, batches of {}\n",
             cfg.shape, cfg.key_width, cfg.value_width, wl.records, wl.operations ? wl.operations : wl.records, wl.batch);
  fmt::print("throughput = operations / time inside Table::execute (generating keys and values excluded)\n");
  std::vector<RunResult> results;
  uint64_t records_now = 0;
  for (workload::Workload w : list) {
    if (w == workload::Workload::Load) {
      results.push_back(run_one(table, wl.spec(w, wl.records), wl.batch, progress));
      records_now = table.size();
      continue;
    }
    if (records_now == 0) throw Error(ErrorCode::kInvalidArgument, "bench: put load first in --workloads");
    results.push_back(run_one(table, wl.spec(w, records_now), wl.batch, progress));
    records_now = table.size();
  }
  print_results(results);
  TableInfo info = table.info();
  table.close();
  bool lost = false;
  for (const RunResult& r : results) lost |= r.not_found || r.bad_values || r.failed_writes;
  fmt::print("\npool: {} ({}, {} items, load factor {:.3f}, {} resizes, {} displacements)\n", info.path,
             bytes(info.pool_bytes), info.items, info.load_factor, info.resizes, info.displacements);
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
}  // namespace gphash::cli

int main(int argc, char** argv) {
  using namespace gphash::cli;
  CLI::App app{"gphash: a persistent GPU hash index and key-value store.\n"
               "POOL is NAME (= /dev/shm/NAME), a path, or mem: (anonymous, for tests)."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "gphash 0.1.0");
  std::string pool, json_path, workloads = "load,a,b,c", which;
  bool json = false, replace = false, no_progress = false;
  PoolConfigFlags cfg;
  EngineFlags eng;
  WorkloadFlags wl;

  CLI::App* create = app.add_subcommand("create", "Create a pool (alone: the default configuration)");
  create->add_option("POOL", pool, "Pool to create")->required();
  cfg.add_to(create);
  create->add_flag("--replace", replace, "Replace an existing pool at the path");
  create->add_option("--max-pool-bytes", eng.max_pool_bytes, "Limit the pool's size (0 = no limit)");

  CLI::App* info = app.add_subcommand("info", "Show a pool's header and statistics");
  info->add_option("POOL", pool, "Pool")->required();
  info->add_flag("--json", json, "Print JSON");

  CLI::App* load = app.add_subcommand("load", "Load YCSB records into a pool (created if missing)");
  load->add_option("POOL", pool, "Pool")->required();
  cfg.add_to(load);
  eng.add_to(load);
  wl.add_to(load, false);
  load->add_option("--json", json_path, "Write the result as JSON to this file");
  load->add_flag("--no-progress", no_progress, "No progress display");

  CLI::App* run = app.add_subcommand("run", "Run a YCSB workload (a, b, c, d, f) on a loaded pool");
  run->add_option("POOL", pool, "Pool")->required();
  run->add_option("--workload", which, "a, b, c, d or f")->required();
  eng.add_to(run);
  wl.add_to(run, true);
  run->add_option("--json", json_path, "Write the result as JSON to this file");
  run->add_flag("--no-progress", no_progress, "No progress display");

  CLI::App* bench = app.add_subcommand("bench", "The main job: create a pool, load it, run YCSB A, B and C, report");
  std::string bench_pool = "gphash-bench";
  bench->add_option("--pool", bench_pool, "Pool to (re)create")->capture_default_str();
  bench->add_option("--workloads", workloads, "Comma-separated: load first, then any of a,b,c,d,f")->capture_default_str();
  cfg.add_to(bench);
  eng.add_to(bench);
  wl.add_to(bench, true);
  bench->add_option("--json", json_path, "Write the results as JSON to this file");
  bench->add_flag("--no-progress", no_progress, "No progress display");

  CLI::App* check = app.add_subcommand("check", "Verify a pool's invariants (recovers it first if needed)");
  check->add_option("POOL", pool, "Pool")->required();
  check->add_option("--threads", eng.threads, "Threads (0 = all)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  try {
    const bool progress = !no_progress;
    if (*create) return cmd_create(pool, cfg, eng, replace);
    if (*info) return cmd_info(pool, json);
    if (*check) return cmd_check(pool, eng);
    if (*load) return cmd_load(pool, cfg, eng, wl, progress, json_path);
    if (*run) return cmd_run(pool, eng, wl, which, progress, json_path);
    if (*bench) return cmd_bench(bench_pool, cfg, eng, wl, workloads, progress, json_path);
  } catch (const CLI::ValidationError& e) {
    fmt::print(stderr, "gphash: {}\n", e.what());
    return 2;
  } catch (const std::invalid_argument& e) {  // bad workload names and similar usage errors
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
