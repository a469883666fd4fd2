// Recovery time against pool size, CPU engine (issue 4; the goal stated there: under 50 ms for
// 16M items, where Dash reports 57 ms).
//
// For each configuration (key/value widths) and size, a child process (this program, re-executed
// with --load) creates a pool sized for the items, loads them and exits without closing, so the
// pool is left exactly as by a crash at a batch boundary: marked dirty, nothing half done. The
// parent then measures:
//   - the recovering open: Table::open wall time, with TableInfo::open_seconds and
//     recovery_seconds (the engine's own timings);
//   - each recovery step alone, by driving the CPU engine's table directly on a fresh mapping:
//     map the pool, fault its pages in, resolve the move record, the INSERTING sweep, the recount
//     with the heap bitmap, and the rebuild of the cell allocator;
//   - the clean open after a close.
// The recovering open is repeated (--repeat) by marking the pool dirty again, which leaves the
// same work: recovery always scans the whole table, however little a crash left behind.
//
//   recovery_bench [--sizes 1M,16M,64M] [--configs 8/8,32/128] [--threads N] [--dir /dev/shm]
//                  [--json FILE] [--repeat 3]
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engines/common/dispatch.h"
#include "engines/common/table_meta.h"
#include "engines/cpu/cell_allocator.h"
#include "engines/cpu/cpu_table.h"
#include "gphash/table.h"
#include "pool/pool.h"
#include "workload/records.h"

namespace {

using namespace gphash;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

uint64_t parse_count(const std::string& s) {
  uint64_t mult = 1;
  std::string digits = s;
  if (!s.empty() && (s.back() == 'M' || s.back() == 'm')) mult = 1 << 20, digits.pop_back();
  if (!s.empty() && (s.back() == 'K' || s.back() == 'k')) mult = 1 << 10, digits.pop_back();
  return std::stoull(digits) * mult;
}

std::string human(uint64_t n) {
  if (n % (1 << 20) == 0) return fmt::format("{}M", n >> 20);
  if (n % (1 << 10) == 0) return fmt::format("{}K", n >> 10);
  return std::to_string(n);
}

// --load: create the pool, insert `items` records, exit without closing (the pool stays dirty).
int load(const std::string& path, uint64_t items, uint32_t kw, uint32_t vw, int threads) {
  TableConfig config;
  config.key_width = kw;
  config.value_width = vw;
  config.capacity = items;
  config.hash_seed = 42;
  OpenOptions options;
  options.threads = threads;
  options.replace = true;
  const auto t0 = Clock::now();
  Table table = Table::create(path, config, options);
  constexpr uint64_t kBatch = 1 << 20;
  std::vector<std::byte> keys(kBatch * kw), values(kBatch * vw);
  std::vector<OpStatus> status(kBatch);
  for (uint64_t first = 0; first < items; first += kBatch) {
    const uint64_t n = std::min(kBatch, items - first);
#pragma omp parallel for num_threads(threads)
    for (uint64_t i = 0; i < n; ++i) {
      workload::make_key(first + i, kw, keys.data() + i * kw);
      workload::make_value(first + i, 1, vw, values.data() + i * vw);
    }
    Batch b;
    b.size = n;
    b.key_width = kw;
    b.value_width = vw;
    b.op = Op::kInsert;
    b.keys = keys.data();
    b.values = values.data();
    b.status = status.data();
    table.execute(b);
  }
  const TableInfo info = table.info();
  std::printf("%llu %.3f %llu %llu %llu\n", static_cast<unsigned long long>(info.items), since(t0),
              static_cast<unsigned long long>(info.slots), static_cast<unsigned long long>(info.pool_bytes),
              static_cast<unsigned long long>(info.resizes));
  std::fflush(stdout);
  _exit(0);  // no close: the pool stays marked dirty, as after a crash between batches
}

struct Steps {
  double map = 0, fault_in = 0, move_record = 0, inserting_sweep = 0, recount = 0, allocator = 0;
};

// The recovery steps of CpuEngine's constructor, one by one, on a fresh mapping of a dirty pool.
// The pool stays marked dirty (the header is not written).
Steps time_steps(const std::string& path, int threads) {
  Steps st;
  auto t0 = Clock::now();
  auto pool = pool::Pool::open(path, {});
  st.map = since(t0);
  engine::TableMeta meta(*pool);
  const format::PoolHeader& h = meta.header();
  // First touch of every page of the levels and heap: the page faults of a fresh mapping.
  t0 = Clock::now();
  std::vector<std::pair<const std::byte*, uint64_t>> extents;
  for (uint32_t l = h.gphash.bottom_level; l <= meta.highest_level(); ++l)
    extents.emplace_back(meta.level(l), format::level_bytes(h, l));
  const format::HeapGeometry g = format::heap_geometry(h);
  for (uint32_t c = 0; c < h.gphash.heap_chunk_count; ++c)
    extents.emplace_back(pool->at<std::byte>(h.gphash.heap_chunk_offset[c]), g.chunk_cells(c) * h.gphash.cell_size);
  uint64_t sink = 0;
  for (auto [p, bytes] : extents) {
    const int64_t pages = static_cast<int64_t>(bytes / 4096);
#pragma omp parallel for num_threads(threads) reduction(+ : sink) schedule(static, 4096)
    for (int64_t i = 0; i < pages; ++i) sink += static_cast<uint64_t>(p[i * 4096]);
  }
  st.fault_in = since(t0);
  if (sink == 42) std::printf(" ");
  engine::dispatch(format::shape_of(h), h.gphash.key_width, [&]<class S, int K>() {
    engine::cpu::CellAllocator cells;
    engine::cpu::CpuTable<S, K> table(meta, engine::cpu::DirectMemory(pool.get()), cells);
    auto t = Clock::now();
    table.resolve_move_record();
    st.move_record = since(t);
    t = Clock::now();
    table.clear_inserting(threads);
    st.inserting_sweep = since(t);
    std::vector<uint64_t> used;
    t = Clock::now();
    table.count_and_mark_cells(threads, &used);
    st.recount = since(t);
    t = Clock::now();
    if (meta.has_heap()) cells.reset(meta.heap_cells(), used, threads);
    st.allocator = since(t);
  });
  return st;
}

struct Result {
  uint32_t kw = 0, vw = 0;
  uint64_t items = 0, slots = 0, pool_bytes = 0;
  double load_seconds = 0;
  std::vector<double> recovering_open, open_seconds, recovery_seconds;
  double clean_open = 0, clean_open_seconds = 0;
  Steps steps;
  bool fits = true;
  std::string note;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string sizes_arg = "1M,16M,64M", configs_arg = "8/8,32/128", dir = "/dev/shm", json_path;
  int threads = 0, repeat = 3;
  std::string load_path;
  uint64_t load_items = 0;
  uint32_t load_kw = 8, load_vw = 8;
  CLI::App app{"gphash recovery time against pool size (CPU engine)"};
  app.add_option("--sizes", sizes_arg, "item counts, e.g. 1M,16M,64M");
  app.add_option("--configs", configs_arg, "key/value widths, e.g. 8/8,32/128");
  app.add_option("--threads", threads, "CPU threads (0: all)");
  app.add_option("--dir", dir, "where pools are made");
  app.add_option("--json", json_path, "also write the results as JSON here");
  app.add_option("--repeat", repeat, "recovering opens per pool");
  auto* load_opt = app.add_option("--load", load_path, "(internal) load a pool and exit without closing");
  app.add_option("--items", load_items)->needs(load_opt);
  app.add_option("--key-width", load_kw)->needs(load_opt);
  app.add_option("--value-width", load_vw)->needs(load_opt);
  CLI11_PARSE(app, argc, argv);
  if (threads <= 0) threads = static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  if (!load_path.empty()) return load(load_path, load_items, load_kw, load_vw, threads);

  std::vector<uint64_t> sizes;
  for (const auto& s : CLI::detail::split(sizes_arg, ',')) sizes.push_back(parse_count(s));
  std::vector<std::pair<uint32_t, uint32_t>> configs;
  for (const auto& c : CLI::detail::split(configs_arg, ',')) {
    auto kv = CLI::detail::split(c, '/');
    configs.emplace_back(std::stoul(kv.at(0)), std::stoul(kv.at(1)));
  }

  std::vector<Result> results;
  for (auto [kw, vw] : configs) {
    for (uint64_t n : sizes) {
      Result r;
      r.kw = kw;
      r.vw = vw;
      r.items = n;
      const std::string path = fmt::format("{}/gphash-recovery-bench-{}-k{}-v{}", dir, getpid(), kw, vw);
      std::fprintf(stderr, "loading %s items, %u-byte keys, %u-byte values...\n", human(n).c_str(), kw, vw);
      // The loader is this program, re-executed: a fresh process whose exit leaves the pool dirty.
      std::string self(4096, '\0');
      self.resize(static_cast<size_t>(std::max<ssize_t>(0, readlink("/proc/self/exe", self.data(), self.size()))));
      FILE* p = popen(fmt::format("'{}' --load '{}' --items {} --key-width {} --value-width {} --threads {}", self,
                                  path, n, kw, vw, threads)
                          .c_str(),
                      "r");
      unsigned long long items = 0, slots = 0, bytes = 0, resizes = 0;
      double load_s = 0;
      const int got = p ? std::fscanf(p, "%llu %lf %llu %llu %llu", &items, &load_s, &slots, &bytes, &resizes) : 0;
      const int status = p ? pclose(p) : -1;
      if (got != 5 || status != 0 || items != n) {
        r.fits = false;
        r.note = fmt::format("load failed (status {}): does the pool fit in {}?", status, dir);
        std::remove(path.c_str());
        results.push_back(r);
        std::fprintf(stderr, "  %s\n", r.note.c_str());
        continue;
      }
      r.load_seconds = load_s;
      r.slots = slots;
      r.pool_bytes = bytes;
      if (resizes) r.note = fmt::format("{} resizes during the load", resizes);

      r.steps = time_steps(path, threads);
      OpenOptions options;
      options.threads = threads;
      for (int i = 0; i < repeat; ++i) {
        if (i > 0) {  // the same recovery work again: the flag is all recovery looks at
          auto pool = pool::Pool::open(path, {});
          format::PoolHeader h = pool->header();
          h.clean_shutdown = 0;
          pool->write_header(h);
        }
        const auto t0 = Clock::now();
        Table t = Table::open(path, options);
        r.recovering_open.push_back(since(t0));
        const TableInfo info = t.info();
        if (!info.recovered || info.items != n) r.note += " (recovery did not run or lost items!)";
        r.open_seconds.push_back(info.open_seconds);
        r.recovery_seconds.push_back(info.recovery_seconds);
      }
      {
        const auto t0 = Clock::now();
        Table t = Table::open(path, options);
        r.clean_open = since(t0);
        r.clean_open_seconds = t.info().open_seconds;
      }
      std::remove(path.c_str());
      results.push_back(r);
      std::fprintf(stderr, "  recovering open %.1f ms, clean open %.1f ms\n", 1e3 * median(r.recovering_open),
                   1e3 * r.clean_open);
    }
  }

  char host[256] = {};
  gethostname(host, sizeof host - 1);
  fmt::print("recovery_bench: CPU engine, {} threads ({} CPUs online), pools in {}, median of {} recovering opens\n",
             threads, sysconf(_SC_NPROCESSORS_ONLN), dir, repeat);
  fmt::print("{:>6} {:>5} {:>8} {:>9} {:>10} | {:>10} {:>10} {:>10} | {:>7} {:>8} {:>7} {:>9} {:>8} {:>6} | {:>9}\n",
             "items", "k/v", "pool", "load s", "slots", "recov ms", "engine ms", "steps ms", "map", "faultin", "move",
             "INSERTING", "recount", "alloc", "clean ms");
  for (const Result& r : results) {
    if (!r.fits) {
      fmt::print("{:>6} {:>5}  {}\n", human(r.items), fmt::format("{}/{}", r.kw, r.vw), r.note);
      continue;
    }
    const Steps& s = r.steps;
    fmt::print(
        "{:>6} {:>5} {:>7.2f}G {:>9.1f} {:>10} | {:>10.1f} {:>10.1f} {:>10.1f} | {:>7.1f} {:>8.1f} {:>7.2f} {:>9.1f} "
        "{:>8.1f} {:>6.1f} | {:>9.1f} {}\n",
        human(r.items), fmt::format("{}/{}", r.kw, r.vw), static_cast<double>(r.pool_bytes) / (1 << 30), r.load_seconds,
        r.slots, 1e3 * median(r.recovering_open), 1e3 * median(r.recovery_seconds), 1e3 * median(r.open_seconds),
        1e3 * s.map, 1e3 * s.fault_in, 1e3 * s.move_record, 1e3 * s.inserting_sweep, 1e3 * s.recount, 1e3 * s.allocator,
        1e3 * r.clean_open, r.note);
  }
  fmt::print(
      "recov ms: Table::open of the dirty pool, wall (map + recovery + recount); engine ms: "
      "TableInfo::recovery_seconds; steps ms: TableInfo::open_seconds.\n"
      "Step columns (ms), measured apart on a fresh mapping: map = Pool::open, faultin = first touch of every "
      "page, move = move record, INSERTING = sweep of every slot, recount = count + heap bitmap, alloc = free-cell "
      "list.\n");
  std::fflush(stdout);

  if (!json_path.empty()) {
    nlohmann::json j;
    j["machine"] = {{"host", host}, {"cpus_online", sysconf(_SC_NPROCESSORS_ONLN)}, {"threads", threads}, {"dir", dir}};
    for (const Result& r : results) {
      nlohmann::json e = {
          {"items", r.items}, {"key_width", r.kw}, {"value_width", r.vw}, {"fits", r.fits}, {"note", r.note}};
      if (r.fits) {
        e["slots"] = r.slots;
        e["pool_bytes"] = r.pool_bytes;
        e["load_seconds"] = r.load_seconds;
        e["recovering_open_seconds"] = r.recovering_open;
        e["engine_open_seconds"] = r.open_seconds;
        e["engine_recovery_seconds"] = r.recovery_seconds;
        e["clean_open_seconds"] = r.clean_open;
        e["steps_seconds"] = {{"map", r.steps.map},
                              {"fault_in", r.steps.fault_in},
                              {"move_record", r.steps.move_record},
                              {"inserting_sweep", r.steps.inserting_sweep},
                              {"recount_and_heap_bitmap", r.steps.recount},
                              {"cell_allocator", r.steps.allocator}};
      }
      j["results"].push_back(e);
    }
    std::ofstream(json_path) << j.dump(2) << "\n";
  }
  return 0;
}
