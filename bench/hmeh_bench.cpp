// hmeh_bench: HMEH measured beside the GPHash CPU engine on the same machine, sizes and threads
// (issue 16). Every figure is operations over the time spent inside the batch calls, batches of
// --batch operations; keys are workload::make_key(record) (random-looking 8- or 16-byte keys),
// values make_value(record, ...). Pools live in --dir (default /dev/shm) and are removed after.
//
// Experiments (--experiments, comma separated; default all of them):
//   throughput   per engine (--engines hmeh,gphash) and thread count (--threads 1,2): insert
//                --records keys into an empty table (it grows from --capacity), search them in a
//                shuffled order (positive), search as many absent keys (negative), YCSB A, B and C
//                (scrambled Zipfian 0.99, --records operations each), delete every key (shuffled).
//                --force-flush persists with cache-line write-back (as on persistent memory).
//   load-factor  HMEH: the load factor of a segment when it splits (the most a segment holds,
//                averaged over the splits of a --lf-records load), and of the whole table after
//                that load, for probing distances 1, 2, 4, 8 and stashes of 0, 1, 2, 4, 8 buckets.
//   recovery     HMEH at each of --recovery-sizes: reading the radix-tree directory (directory
//                recovery), building the flat directory from it, and the slot scan, for a clean
//                open and for a recovering one (the pool marked not shut down cleanly); median of
//                --repeat opens. The GPHash CPU engine's clean and recovering open beside it.
//   factors      HMEH, the HMEH paper's factor analysis on inserts: baseline (plain persist
//                barriers, and every flat-directory change written back as if the directory lived
//                in persistent memory), + structure (the DRAM flat directory), + Cross-KV, all;
//                with cache-line write-back as the persist barrier (the persistent-memory code
//                path, OpenOptions::force_flush) and with the /dev/shm default (fences only).
//
//   hmeh_bench [--records 16M] [--threads 1,2] [--engines hmeh,gphash] [--experiments ...]
//              [--recovery-sizes 1.6M,16M,160M] [--json FILE] ...
// Counts take K (10^3), M (10^6) and G (10^9) suffixes, decimals allowed (1.6M).
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gphash/table.h"
#include "indexes/hmeh/hmeh.h"
#include "pool/pool.h"
#include "workload/records.h"
#include "workload/ycsb.h"

namespace {

using namespace gphash;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

uint64_t parse_count(std::string s) {
  double mult = 1;
  if (!s.empty() && (s.back() == 'K' || s.back() == 'k')) mult = 1e3, s.pop_back();
  else if (!s.empty() && (s.back() == 'M' || s.back() == 'm')) mult = 1e6, s.pop_back();
  else if (!s.empty() && (s.back() == 'G' || s.back() == 'g')) mult = 1e9, s.pop_back();
  return static_cast<uint64_t>(std::stod(s) * mult + 0.5);
}

template <class T>
std::vector<T> parse_list(const std::string& s, T (*parse)(const std::string&)) {
  std::vector<T> out;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t comma = std::min(s.find(',', at), s.size());
    if (comma > at) out.push_back(parse(s.substr(at, comma - at)));
    at = comma + 1;
  }
  return out;
}
uint64_t count_arg(const std::string& s) { return parse_count(s); }
std::string string_arg(const std::string& s) { return s; }

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

struct Settings {
  uint64_t records = 16000000;
  uint32_t key_width = 8, value_width = 8;
  uint64_t capacity = 1 << 20;
  size_t batch = 1 << 20;
  std::string dir = "/dev/shm";
  uint64_t seed = 1;
  bool force_flush = false;  // throughput: cache-line write-back as the persist barrier
  uint64_t reserve = 0;      // throughput: OpenOptions::reserve_pool_bytes of the pools
  bool no_tag_mirror = false;  // throughput, recovery: the GPHash CPU engine without OpenOptions::tag_mirror
  double max_load_factor = OpenOptions{}.max_load_factor;  // throughput: when the GPHash CPU engine resizes
  bool insert_only = false;  // throughput: stop after the load (a profile of the inserts alone)
};

// A pool path removed (with leftovers of a killed create) when it goes out of scope.
class ScratchPool {
 public:
  ScratchPool(const Settings& s, const std::string& tag) {
    static int counter = 0;
    path_ = fmt::format("{}/hmeh-bench-{}-{}-{}", s.dir, getpid(), tag, counter++);
    std::remove(path_.c_str());
  }
  ~ScratchPool() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Keys and values of records [first, first + n), in `order` when given.
struct Arrays {
  std::vector<std::byte> keys, values, out;
  std::vector<OpStatus> status;
  std::vector<Op> ops;
};

void fill_keys(const Settings& s, const std::vector<uint64_t>& records, Arrays& a) {
  const size_t n = records.size();
  a.keys.resize(n * s.key_width);
  a.values.resize(n * s.value_width);
  a.out.resize(n * s.value_width);
  a.status.resize(n);
  for (size_t i = 0; i < n; ++i) {
    workload::make_key(records[i], s.key_width, a.keys.data() + i * s.key_width);
    workload::make_value(records[i], 1, s.value_width, a.values.data() + i * s.value_width);
  }
}

// Runs one operation over all of `a` in batches; returns seconds inside execute() and counts the
// statuses that differ from `want`.
double run_op(const Settings& s, auto&& execute, Op op, Arrays& a, OpStatus want, uint64_t* wrong) {
  const size_t n = a.status.size();
  double seconds = 0;
  for (size_t first = 0; first < n; first += s.batch) {
    Batch b;
    b.size = std::min(s.batch, n - first);
    b.key_width = s.key_width;
    b.value_width = s.value_width;
    b.op = op;
    b.keys = a.keys.data() + first * s.key_width;
    b.values = a.values.data() + first * s.value_width;
    b.values_out = a.out.data() + first * s.value_width;
    b.status = a.status.data() + first;
    const auto t0 = Clock::now();
    execute(b);
    seconds += since(t0);
  }
  for (OpStatus st : a.status) *wrong += st != want;
  return seconds;
}

// YCSB workload `w` over records [0, records): reads and updates in batches.
double run_ycsb(const Settings& s, Table& table, workload::Workload w, uint64_t* wrong) {
  workload::WorkloadSpec spec;
  spec.workload = w;
  spec.record_count = s.records;
  spec.operation_count = s.records;
  spec.seed = s.seed;
  workload::WorkloadGenerator gen(spec);
  std::vector<workload::Op> ops(s.batch);
  Arrays a;
  double seconds = 0;
  for (size_t k; (k = gen.next(ops)) > 0;) {
    std::vector<uint64_t> records(k);
    for (size_t i = 0; i < k; ++i) records[i] = ops[i].record;
    fill_keys(s, records, a);
    a.ops.resize(k);
    for (size_t i = 0; i < k; ++i) a.ops[i] = ops[i].type == workload::OpType::Read ? Op::kSearch : Op::kUpdate;
    Batch b;
    b.size = k;
    b.key_width = s.key_width;
    b.value_width = s.value_width;
    b.ops = a.ops.data();
    b.keys = a.keys.data();
    b.values = a.values.data();
    b.values_out = a.out.data();
    b.status = a.status.data();
    const auto t0 = Clock::now();
    table.execute(b);
    seconds += since(t0);
    for (size_t i = 0; i < k; ++i) *wrong += a.status[i] != OpStatus::kOk;
  }
  return seconds;
}

TableConfig config_for(const Settings& s, const std::string& engine) {
  TableConfig c;
  c.key_width = s.key_width;
  c.value_width = s.value_width;
  c.capacity = s.capacity;
  c.hash_seed = s.seed;
  c.index = engine == "hmeh" ? IndexKind::kHmeh : IndexKind::kGphash;
  return c;
}

json throughput(const Settings& s, const std::vector<std::string>& engines, const std::vector<uint64_t>& threads) {
  std::vector<uint64_t> records(s.records), shuffled, absent(s.records);
  std::iota(records.begin(), records.end(), 0);
  std::iota(absent.begin(), absent.end(), s.records);
  shuffled = records;
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937_64(s.seed));
  Arrays in, shuffle, neg;
  fill_keys(s, records, in);
  fill_keys(s, shuffled, shuffle);
  fill_keys(s, absent, neg);
  json out = json::array();
  for (const std::string& engine : engines)
    for (uint64_t t : threads) {
      ScratchPool pool(s, engine);
      OpenOptions o;
      o.threads = static_cast<int>(t);
      o.reserve_pool_bytes = s.reserve;
      Table::create(pool.path(), config_for(s, engine), o).close();
      o.force_flush = s.force_flush;  // open options: create, then open with them
      o.tag_mirror = !s.no_tag_mirror;
      o.max_load_factor = s.max_load_factor;
      Table table = Table::open(pool.path(), o);
      auto execute = [&](const Batch& b) { table.execute(b); };
      json row = {{"engine", engine}, {"threads", t}, {"records", s.records},
                  {"persist", s.force_flush ? "clwb+sfence" : "fence"}, {"reserve_pool_bytes", s.reserve},
                  {"tag_mirror", !s.no_tag_mirror}, {"max_load_factor", s.max_load_factor}};
      auto record = [&](const char* name, double seconds, uint64_t wrong) {
        const double mops = static_cast<double>(s.records) / seconds / 1e6;
        row[name] = {{"mops", mops}, {"seconds", seconds}, {"wrong_status", wrong}};
        fmt::print("  {:<7} {:>2} threads  {:<10} {:7.2f} M/s{}\n", engine, t, name, mops,
                   wrong ? fmt::format("  ({} unexpected statuses)", wrong) : "");
        std::fflush(stdout);
      };
      uint64_t wrong = 0;
      record("insert", run_op(s, execute, Op::kInsert, in, OpStatus::kOk, &wrong), wrong);
      const TableInfo info = table.info();
      row["load_factor"] = info.load_factor;
      row["grows"] = info.resizes;
      row["displacements"] = info.displacements;
      row["resize_seconds"] = info.resize_seconds;
      row["rehash_seconds"] = info.rehash_seconds;
      fmt::print("  {:<7} {:>2} threads  (grew {} times in {:.3f} s{})\n", engine, t, info.resizes, info.resize_seconds,
                 engine == "hmeh" ? " of thread time" : "");
      if (s.insert_only) {
        out.push_back(row);
        continue;
      }
      wrong = 0;
      record("search", run_op(s, execute, Op::kSearch, shuffle, OpStatus::kOk, &wrong), wrong);
      wrong = 0;
      record("negative", run_op(s, execute, Op::kSearch, neg, OpStatus::kNotFound, &wrong), wrong);
      for (auto [w, name] : {std::pair{workload::Workload::A, "ycsb_a"}, std::pair{workload::Workload::B, "ycsb_b"},
                             std::pair{workload::Workload::C, "ycsb_c"}}) {
        wrong = 0;
        record(name, run_ycsb(s, table, w, &wrong), wrong);
      }
      wrong = 0;
      record("delete", run_op(s, execute, Op::kErase, shuffle, OpStatus::kOk, &wrong), wrong);
      out.push_back(row);
    }
  return out;
}

// Inserts `records` keys through an HMEH engine opened directly (for its own statistics).
hmeh::HmehStats load_hmeh(const Settings& s, const std::string& path, const hmeh::EngineOptions& options,
                          bool force_flush, double* insert_seconds) {
  auto pool = pool::Pool::open(path, {false, 0, force_flush});
  std::unique_ptr<hmeh::Index> engine = hmeh::open_engine(*pool, options);
  Arrays a;
  double seconds = 0;
  for (uint64_t first = 0; first < s.records; first += s.batch) {
    std::vector<uint64_t> records(std::min<uint64_t>(s.batch, s.records - first));
    std::iota(records.begin(), records.end(), first);
    fill_keys(s, records, a);
    Batch b;
    b.size = records.size();
    b.key_width = s.key_width;
    b.value_width = s.value_width;
    b.op = Op::kInsert;
    b.keys = a.keys.data();
    b.values = a.values.data();
    b.status = a.status.data();
    const auto t0 = Clock::now();
    engine->execute(b);
    seconds += since(t0);
    for (OpStatus st : a.status)
      if (st != OpStatus::kOk) throw std::runtime_error(fmt::format("insert failed: {}", to_string(st)));
  }
  if (insert_seconds) *insert_seconds = seconds;
  const hmeh::HmehStats stats = engine->hmeh_stats();
  engine->close();
  return stats;
}

json load_factor(Settings s, uint64_t records) {
  s.records = records;
  json out = json::array();
  fmt::print("  probe  stash  split load factor  table load factor after {} keys\n", records);
  for (uint32_t probe : {1u, 2u, 4u, 8u})
    for (uint32_t stash : {0u, 1u, 2u, 4u, 8u}) {
      ScratchPool pool(s, "lf");
      TableConfig c = config_for(s, "hmeh");
      c.capacity = 1;
      c.hmeh.probe_buckets = probe;
      c.hmeh.stash_buckets = stash;
      Table::create(pool.path(), c).close();
      hmeh::EngineOptions o;
      o.threads = 1;
      const hmeh::HmehStats st = load_hmeh(s, pool.path(), o, false, nullptr);
      const double split_lf = st.splits ? st.split_load_sum / static_cast<double>(st.splits) : 0;
      const TableInfo info = Table::open(pool.path()).info();
      fmt::print("  {:>5}  {:>5}  {:17.3f}  {:17.3f}\n", probe, stash, split_lf, info.load_factor);
      std::fflush(stdout);
      out.push_back({{"probe_buckets", probe},
                     {"stash_buckets", stash},
                     {"split_load_factor", split_lf},
                     {"splits", st.splits},
                     {"table_load_factor", info.load_factor}});
    }
  return out;
}

void mark_dirty(const std::string& path) {
  auto pool = pool::Pool::open(path, {});
  format::PoolHeader h = pool->header();
  h.clean_shutdown = 0;
  pool->write_header(h);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

json recovery(Settings s, const std::vector<uint64_t>& sizes, int repeat, int threads) {
  json out = json::array();
  for (uint64_t n : sizes) {
    s.records = n;
    json row = {{"records", n}, {"threads", threads}};
    {
      ScratchPool pool(s, "recovery");
      Table::create(pool.path(), config_for(s, "hmeh")).close();
      hmeh::EngineOptions o;
      o.threads = threads;
      double load = 0;
      const hmeh::HmehStats loaded = load_hmeh(s, pool.path(), o, false, &load);
      row["hmeh"] = {{"load_seconds", load}, {"segments", loaded.segments}, {"global_depth", loaded.global_depth}};
      for (bool dirty : {false, true}) {
        std::vector<double> radix, flat, scan, open, wall;
        for (int r = 0; r < repeat; ++r) {
          if (dirty) mark_dirty(pool.path());
          const auto t0 = Clock::now();
          auto p = pool::Pool::open(pool.path(), {});
          std::unique_ptr<hmeh::Index> engine = hmeh::open_engine(*p, o);
          wall.push_back(since(t0));
          const hmeh::HmehStats st = engine->hmeh_stats();
          radix.push_back(st.radix_seconds);
          flat.push_back(st.flat_seconds);
          scan.push_back(st.scan_seconds);
          open.push_back(engine->stats().open_seconds);
          engine->close();
        }
        row["hmeh"][dirty ? "recovering_open" : "clean_open"] = {
            {"radix_ms", 1e3 * median(radix)}, {"flat_ms", 1e3 * median(flat)}, {"scan_ms", 1e3 * median(scan)},
            {"open_ms", 1e3 * median(open)},   {"wall_ms", 1e3 * median(wall)}};
        fmt::print("  hmeh   {:>11} records, {:<10}: radix directory {:8.3f} ms, flat rebuild {:8.3f} ms, slot "
                   "scan {:8.2f} ms, open {:8.2f} ms (wall with mapping {:8.2f} ms)\n",
                   n, dirty ? "recovering" : "clean", 1e3 * median(radix), 1e3 * median(flat), 1e3 * median(scan),
                   1e3 * median(open), 1e3 * median(wall));
        std::fflush(stdout);
      }
    }
    {
      ScratchPool pool(s, "recovery-gphash");
      OpenOptions o;
      o.threads = threads;
      o.tag_mirror = !s.no_tag_mirror;  // an open builds the mirror from the pool
      {
        TableConfig c = config_for(s, "gphash");
        Table t = Table::create(pool.path(), c, o);
        Arrays a;
        for (uint64_t first = 0; first < n; first += s.batch) {
          std::vector<uint64_t> records(std::min<uint64_t>(s.batch, n - first));
          std::iota(records.begin(), records.end(), first);
          fill_keys(s, records, a);
          uint64_t wrong = 0;
          run_op(s, [&](const Batch& b) { t.execute(b); }, Op::kInsert, a, OpStatus::kOk, &wrong);
        }
      }
      for (bool dirty : {false, true}) {
        std::vector<double> open;
        for (int r = 0; r < repeat; ++r) {
          if (dirty) mark_dirty(pool.path());
          Table t = Table::open(pool.path(), o);
          open.push_back(t.info().open_seconds);
        }
        row["gphash"][dirty ? "recovering_open" : "clean_open"] = {{"open_ms", 1e3 * median(open)}};
        fmt::print("  gphash {:>11} records, {:<10}: open {:8.2f} ms\n", n, dirty ? "recovering" : "clean",
                   1e3 * median(open));
        std::fflush(stdout);
      }
    }
    out.push_back(row);
  }
  return out;
}

json factors(Settings s, uint64_t records) {
  s.records = records;
  json out = json::array();
  struct Variant {
    const char* name;
    bool cross_kv, persist_directory;
  };
  const Variant variants[] = {{"baseline (EH, plain persist barriers)", false, true},
                              {"+ structure (flat directory in DRAM)", false, false},
                              {"+ Cross-KV", true, true},
                              {"all (HMEH)", true, false}};
  for (bool flush : {true, false}) {
    double base = 0;
    for (const Variant& v : variants) {
      ScratchPool pool(s, "factors");
      TableConfig c = config_for(s, "hmeh");
      Table::create(pool.path(), c).close();
      hmeh::EngineOptions o;
      o.threads = 1;
      o.cross_kv = v.cross_kv;
      o.persist_flat_directory = v.persist_directory;
      double seconds = 0;
      load_hmeh(s, pool.path(), o, flush, &seconds);
      const double mops = static_cast<double>(records) / seconds / 1e6;
      if (base == 0) base = mops;
      fmt::print("  {:<40} {:<22} insert {:6.2f} M/s ({:.2f}x)\n", v.name,
                 flush ? "cache-line write-back" : "fences only (/dev/shm)", mops, mops / base);
      std::fflush(stdout);
      out.push_back({{"variant", v.name}, {"persist", flush ? "clwb+sfence" : "fence"}, {"insert_mops", mops},
                     {"speedup", mops / base}});
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  std::string records = "16M", threads_arg, engines_arg = "hmeh,gphash",
              experiments_arg = "throughput,load-factor,recovery,factors", recovery_sizes = "1.6M,16M",
              lf_records = "2M", factor_records = "4M", capacity = "64K", json_path;
  int repeat = 3;
  CLI::App app{"HMEH beside the GPHash CPU engine: throughput, load factor, recovery, factor analysis"};
  app.add_option("--records", records, "keys of the throughput experiment (K, M, G suffixes)");
  app.add_option("--threads", threads_arg, "thread counts, comma separated (default: 1 and all)");
  app.add_option("--engines", engines_arg, "hmeh, gphash (the GPHash CPU engine)");
  app.add_option("--experiments", experiments_arg, "throughput, load-factor, recovery, factors");
  app.add_option("--recovery-sizes", recovery_sizes, "record counts of the recovery experiment");
  app.add_option("--lf-records", lf_records, "keys loaded per configuration of the load-factor experiment");
  app.add_option("--factor-records", factor_records, "keys inserted per variant of the factor analysis");
  app.add_option("--capacity", capacity,
                 "initial capacity of the throughput tables (64K: about the 64 segments Dash-EH starts with)");
  app.add_option("--key-width", s.key_width)->check(CLI::IsMember({8u, 16u}));
  app.add_option("--value-width", s.value_width)->check(CLI::Range(1u, 4096u));
  app.add_option("--batch", s.batch, "operations per batch")->check(CLI::Range(1, 1 << 26));
  app.add_option("--repeat", repeat, "opens per recovery figure (the median is reported)")->check(CLI::Range(1, 100));
  app.add_option("--dir", s.dir, "folder of the pools (a tmpfs: emulated persistent memory)");
  app.add_option("--seed", s.seed);
  app.add_option("--reserve-pool-bytes", s.reserve,
                 "throughput: file space each pool gets at creation, as a PMDK pool's size (0 = none)");
  app.add_flag("--force-flush", s.force_flush,
               "throughput: persist with cache-line write-back and a fence (the persistent-memory path) "
               "instead of the /dev/shm default (fences only)");
  app.add_option("--max-load-factor", s.max_load_factor,
                 "throughput: OpenOptions::max_load_factor of the GPHash CPU engine (when its growing table resizes)")
      ->check(CLI::Range(0.01, 1.0));
  app.add_flag("--insert-only", s.insert_only, "throughput: only the load (for a profile of the inserts)");
  app.add_flag("--no-tag-mirror", s.no_tag_mirror,
               "throughput, recovery: the GPHash CPU engine without its DRAM tag mirror (OpenOptions::tag_mirror off)");
  app.add_option("--json", json_path, "write the results as JSON here");
  CLI11_PARSE(app, argc, argv);
  try {
    s.records = parse_count(records);
    s.capacity = parse_count(capacity);
    const int hw = std::max(1, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
    std::vector<uint64_t> threads = threads_arg.empty() ? std::vector<uint64_t>{1, static_cast<uint64_t>(hw)}
                                                        : parse_list<uint64_t>(threads_arg, count_arg);
    threads.erase(std::unique(threads.begin(), threads.end()), threads.end());
    const std::vector<std::string> experiments = parse_list<std::string>(experiments_arg, string_arg);
    auto wants = [&](const char* e) { return std::find(experiments.begin(), experiments.end(), e) != experiments.end(); };
    json j = {{"machine", {{"cpu", cpu_model()}, {"hardware_threads", hw}}},
              {"settings",
               {{"records", s.records}, {"key_width", s.key_width}, {"value_width", s.value_width},
                {"batch", s.batch}, {"capacity", s.capacity}, {"dir", s.dir}}}};
    fmt::print("hmeh_bench on {} ({} hardware threads), pools in {}\n", cpu_model(), hw, s.dir);
    if (wants("throughput")) {
      fmt::print("throughput, {} keys of {} bytes, values of {} bytes, batches of {}:\n", s.records, s.key_width,
                 s.value_width, s.batch);
      j["throughput"] = throughput(s, parse_list<std::string>(engines_arg, string_arg), threads);
    }
    if (wants("load-factor")) {
      fmt::print("load factor (16 KiB segments):\n");
      j["load_factor"] = load_factor(s, parse_count(lf_records));
    }
    if (wants("recovery")) {
      fmt::print("recovery, {} threads:\n", hw);
      j["recovery"] = recovery(s, parse_list<uint64_t>(recovery_sizes, count_arg), repeat, hw);
    }
    if (wants("factors")) {
      fmt::print("factor analysis, {} inserts on one thread:\n", parse_count(factor_records));
      j["factors"] = factors(s, parse_count(factor_records));
    }
    if (!json_path.empty()) std::ofstream(json_path) << j.dump(2) << "\n";
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hmeh_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
