// Snapshots to a file (gphash/snapshot.h), measured:
//   1. snapshot time and bytes written against pool size and write rate: for each size, a full
//      image, then a delta after each amount of uniform random updates, and a new process's
//      first delta;
//   2. YCSB A with automatic snapshots every second against without (runs without, with, and
//      without again, so the noise between runs shows);
//   3. restore time against pool size, with the snapshot file evicted from the page cache (cold)
//      and in it (warm); the restore alone, and with the recount of the first open.
// CPU engine by default (--engine gpu: the GPU engine, host-mapped or --placement gpu-memory);
// pools in /dev/shm, snapshot files in --dir (a real file system).
//
//   snapshot_bench [--sizes 1M,4M,16M] [--updates 1000,10000,100000,1000000] [--value-width 8]
//                  [--ycsb-records 4M] [--ycsb-operations 40M] [--threads 0] [--dir /tmp]
//                  [--engine cpu|gpu] [--placement mapped|gpu-memory] [--json FILE]
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gphash/table.h"
#include "workload/records.h"
#include "ycsb_runner.h"

namespace {

using namespace gphash;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

uint64_t parse_count(std::string s) {
  uint64_t mult = 1;
  if (!s.empty() && (s.back() == 'M' || s.back() == 'm')) mult = 1 << 20, s.pop_back();
  if (!s.empty() && (s.back() == 'K' || s.back() == 'k')) mult = 1 << 10, s.pop_back();
  return std::stoull(s) * mult;
}

std::vector<uint64_t> parse_list(const std::string& text) {
  std::vector<uint64_t> r;
  for (size_t pos = 0; !text.empty() && pos <= text.size();) {
    size_t comma = std::min(text.find(',', pos), text.size());
    r.push_back(parse_count(text.substr(pos, comma - pos)));
    pos = comma + 1;
  }
  return r;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

std::string fs_type(const std::string& dir) {
  struct statfs st {};
  if (statfs(dir.c_str(), &st) != 0) return "?";
  switch (static_cast<unsigned long>(st.f_type)) {
    case 0xEF53: return "ext4";
    case 0x58465342: return "xfs";
    case 0x9123683E: return "btrfs";
    case 0x01021994: return "tmpfs";
    default: return fmt::format("{:#x}", static_cast<unsigned long>(st.f_type));
  }
}

// Drops a file's pages from the page cache (it is synced, so they are clean): a cold read next.
void evict(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
}

json to_json(const SnapshotResult& r) {
  return {{"full", r.full},
          {"sequence", r.sequence},
          {"pages_written", r.pages_written},
          {"bytes_written", r.bytes_written},
          {"file_bytes", r.file_bytes},
          {"pool_bytes", r.pool_bytes},
          {"seconds", r.seconds},
          {"writers_held_seconds", r.writers_held_seconds}};
}

// Inserts records [0, n) (YCSB keys and values) in batches.
void load(Table& t, uint64_t n) {
  const uint32_t kw = t.key_width(), vw = t.value_width();
  constexpr uint64_t kBatch = 1 << 18;
  std::vector<std::byte> keys(kBatch * kw), values(kBatch * vw);
  std::vector<OpStatus> status(kBatch);
  for (uint64_t first = 0; first < n; first += kBatch) {
    const uint64_t m = std::min(kBatch, n - first);
    for (uint64_t i = 0; i < m; ++i) {
      workload::make_key(first + i, kw, keys.data() + i * kw);
      workload::make_value(first + i, 1, vw, values.data() + i * vw);
    }
    Batch b;
    b.size = m;
    b.key_width = kw;
    b.value_width = vw;
    b.op = Op::kInsert;
    b.keys = keys.data();
    b.values = values.data();
    b.status = status.data();
    t.execute(b);
  }
}

// `n` updates of uniformly random records of [0, records), in batches; returns the seconds.
double update(Table& t, uint64_t records, uint64_t n, std::mt19937_64& rng) {
  const uint32_t kw = t.key_width(), vw = t.value_width();
  constexpr uint64_t kBatch = 1 << 16;
  std::vector<std::byte> keys(kBatch * kw), values(kBatch * vw);
  std::vector<OpStatus> status(kBatch);
  double seconds = 0;
  for (uint64_t done = 0; done < n; done += kBatch) {
    const uint64_t m = std::min(kBatch, n - done);
    for (uint64_t i = 0; i < m; ++i) {
      const uint64_t r = rng() % records;
      workload::make_key(r, kw, keys.data() + i * kw);
      workload::make_value(r, 2 + done + i, vw, values.data() + i * vw);
    }
    Batch b;
    b.size = m;
    b.key_width = kw;
    b.value_width = vw;
    b.op = Op::kUpdate;
    b.keys = keys.data();
    b.values = values.data();
    b.status = status.data();
    const auto t0 = Clock::now();
    t.execute(b);
    seconds += since(t0);
  }
  return seconds;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Snapshot time, bytes, YCSB A with snapshots, and restore time, against pool size");
  std::string sizes_text = "1M,4M,16M", updates_text = "1000,10000,100000,1000000", dir = "/tmp", json_path;
  std::string ycsb_records_text = "4M", ycsb_operations_text = "40M";
  uint32_t value_width = 8;
  int threads = 0;
  std::string engine = "cpu", placement = "mapped";
  app.add_option("--engine", engine, "cpu (default) or gpu")->check(CLI::IsMember({"cpu", "gpu"}));
  app.add_option("--placement", placement, "GPU engine: mapped (default) or gpu-memory")
      ->check(CLI::IsMember({"mapped", "gpu-memory"}));
  app.add_option("--sizes", sizes_text, "Records per pool (K and M suffixes; empty: skip parts 1 and 3)");
  app.add_option("--updates", updates_text, "Uniform updates before each delta snapshot");
  app.add_option("--value-width", value_width, "Value width in bytes (8-byte keys)")->check(CLI::Range(1, 65536));
  app.add_option("--ycsb-records", ycsb_records_text, "Records of the YCSB A runs (0: skip them)");
  app.add_option("--ycsb-operations", ycsb_operations_text, "Operations of each YCSB A run");
  app.add_option("--threads", threads, "CPU engine threads (0: all)")->check(CLI::Range(0, kMaxThreads));
  app.add_option("--dir", dir, "Directory of the snapshot files (a real file system)");
  app.add_option("--json", json_path, "Write the results as JSON to this file");
  CLI11_PARSE(app, argc, argv);
  // Every table this benchmark opens uses the chosen engine.
  auto with_engine = [&](OpenOptions o) {
    o.engine = engine == "gpu" ? EngineKind::kGpu : EngineKind::kCpu;
    o.placement = placement == "gpu-memory" ? Placement::kGpuMemory : Placement::kHostMapped;
    return o;
  };
  const std::vector<uint64_t> sizes = parse_list(sizes_text), updates = parse_list(updates_text);
  const uint64_t ycsb_records = parse_count(ycsb_records_text), ycsb_operations = parse_count(ycsb_operations_text);

  const std::string tag = fmt::format("gphash-snapshot-bench-{}", getpid());
  const std::string pool = tag, restored = tag + "-restored";
  const std::string file = dir + "/" + tag + ".snap", fresh = dir + "/" + tag + "-full.snap";
  auto cleanup = [&] {
    for (const std::string& p : {"/dev/shm/" + pool, "/dev/shm/" + restored, file, fresh}) std::remove(p.c_str());
  };
  cleanup();
  json out = {{"machine", {{"cpu", cpu_model()}, {"hardware_threads", std::thread::hardware_concurrency()},
                           {"snapshot_dir", dir}, {"snapshot_fs", fs_type(dir)}}},
              {"value_width", value_width},
              {"engine", engine},
              {"placement", placement},
              {"sizes", json::array()}};
  fmt::print("snapshot_bench: {} ({} hardware threads); snapshot files in {} ({}); 8-byte keys, {}-byte values; "
             "{} engine{}\n",
             cpu_model(), std::thread::hardware_concurrency(), dir, fs_type(dir), value_width, engine,
             engine == "gpu" ? ", " + placement : "");
  OpenOptions options;
  options.threads = threads;
  options.replace = true;
  options = with_engine(options);
  try {
    // 1 and 3: per pool size.
    for (uint64_t records : sizes) {
      std::mt19937_64 rng(records);
      json js = {{"records", records}, {"deltas", json::array()}};
      std::optional<Table> first;
      first.emplace(Table::create(pool, {8, value_width, {}, records, 7}, options));
      Table& t = *first;
      load(t, records);
      const SnapshotResult full = t.snapshot(file);
      js["full"] = to_json(full);
      fmt::print("\n{} records, pool {:.1f} MiB: full image {} pages in {:.1f} ms ({:.0f} MiB/s), writers held {:.2f} ms\n",
                 records, full.pool_bytes / 1048576.0, full.pages_written, 1e3 * full.seconds,
                 full.bytes_written / 1048576.0 / full.seconds, 1e3 * full.writers_held_seconds);
      fmt::print("  {:>10} {:>12} {:>10} {:>12} {:>10} {:>12}\n", "updates", "update s", "pages", "MiB", "ms",
                 "held ms");
      for (uint64_t n : updates) {
        const double write_seconds = update(t, records, n, rng);
        const SnapshotResult d = t.snapshot(file);
        json jd = to_json(d);
        jd["updates"] = n;
        jd["update_seconds"] = write_seconds;
        js["deltas"].push_back(jd);
        fmt::print("  {:>10} {:>12.3f} {:>10} {:>12.2f} {:>10.2f} {:>12.3f}{}\n", n, write_seconds, d.pages_written,
                   d.bytes_written / 1048576.0, 1e3 * d.seconds, 1e3 * d.writers_held_seconds,
                   d.full ? "  (compacted: a new full image)" : "");
      }
      // A new process: the pool was closed right after its last snapshot, so its header names
      // that snapshot and the new process's marks go on from it. The restores below read this
      // file (a fresh full image and the small delta).
      std::remove(fresh.c_str());
      t.snapshot(fresh);
      first.reset();  // closes the pool
      OpenOptions reopen;
      reopen.threads = threads;
      Table again = Table::open(pool, with_engine(reopen));
      const double write_seconds = update(again, records, 1000, rng);
      const SnapshotResult next = again.snapshot(fresh);
      again.close();
      js["new_process_delta"] = to_json(next);
      js["new_process_delta"]["updates"] = 1000;
      js["new_process_delta"]["update_seconds"] = write_seconds;
      fmt::print("  a new process, 1000 updates: {}, {} pages in {:.1f} ms, held {:.3f} ms\n",
                 next.full ? "a full image" : "a delta", next.pages_written, 1e3 * next.seconds,
                 1e3 * next.writers_held_seconds);
      for (const char* cache : {"cold", "warm"}) {
        if (std::string(cache) == "cold") evict(fresh);
        std::remove(("/dev/shm/" + restored).c_str());
        const auto t0 = Clock::now();
        const RestoreResult r = Table::restore(fresh, restored, {.replace = true, .pool_file_mode = 0600, .threads = threads});
        const double total = since(t0);
        js[std::string("restore_") + cache] = {{"seconds_pages", r.seconds}, {"seconds_total", total},
                                               {"items", r.items}, {"pages_read", r.pages_read},
                                               {"file_bytes", next.file_bytes}};
        fmt::print("  restore ({}): {} pages in {:.1f} ms, {:.1f} ms with the first open's recount ({} items)\n", cache,
                   r.pages_read, 1e3 * r.seconds, 1e3 * total, r.items);
      }
      out["sizes"].push_back(js);
      cleanup();
    }
    // 2: YCSB A, without automatic snapshots, with them every second, and without again.
    if (ycsb_records > 0) {
      {
        Table t = Table::create(pool, {8, value_width, {}, ycsb_records, 7}, options);
        load(t, ycsb_records);
      }
      json runs = json::array();
      fmt::print("\nYCSB A (zipfian 0.99), {} records, {} operations per run, batches of 65536\n", ycsb_records,
                 ycsb_operations);
      for (int run = 0; run < 3; ++run) {
        const bool snapshots = run == 1;
        OpenOptions o;
        o.threads = threads;
        if (snapshots) {
          o.snapshots.path = file;
          o.snapshots.every_seconds = 1;
        }
        Table t = Table::open(pool, with_engine(o));
        workload::WorkloadSpec spec;
        spec.workload = workload::Workload::A;
        spec.record_count = ycsb_records;
        spec.operation_count = ycsb_operations;
        spec.seed = 100 + static_cast<uint64_t>(run);
        const auto t0 = Clock::now();
        const cli::RunResult r = cli::run_workload(t, spec, {});
        const double wall = since(t0);
        const TableInfo i = t.info();
        json jr = {{"automatic_snapshots_every_seconds", snapshots ? 1 : 0},
                   {"ops_per_second", r.ops_per_second()},
                   {"wall_ops_per_second", r.operations / wall},
                   {"batch_p50_seconds", r.batch_percentile(0.5)},
                   {"batch_p99_seconds", r.batch_percentile(0.99)},
                   {"snapshots_taken", i.snapshots_taken},
                   {"snapshot_error", i.snapshot_error}};
        if (snapshots) jr["last_snapshot"] = to_json(i.last_snapshot);
        runs.push_back(jr);
        fmt::print("  {:<26} {:>7.2f} M ops/s inside execute, {:>6.2f} M/s wall, batch p50 {:.2f} ms p99 {:.2f} ms{}\n",
                   snapshots ? "snapshots every second" : "no snapshots", r.ops_per_second() / 1e6,
                   r.operations / wall / 1e6, 1e3 * r.batch_percentile(0.5), 1e3 * r.batch_percentile(0.99),
                   snapshots ? fmt::format(" ({} snapshots; the last: {} pages, {:.1f} ms, held {:.2f} ms)",
                                           i.snapshots_taken, i.last_snapshot.pages_written, 1e3 * i.last_snapshot.seconds,
                                           1e3 * i.last_snapshot.writers_held_seconds)
                             : "");
      }
      out["ycsb_a"] = {{"records", ycsb_records}, {"operations", ycsb_operations}, {"runs", runs}};
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "snapshot_bench: {}\n", e.what());
    cleanup();
    return 1;
  }
  cleanup();
  if (!json_path.empty()) {
    std::ofstream(json_path) << out.dump(2) << "\n";
    fmt::print("\nresults written to {}\n", json_path);
  }
  return 0;
}
