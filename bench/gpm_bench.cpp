// libGPM on the GPU (the GPM paper's section 6 comparisons), all pools in /dev/shm:
//   kvs     gpKVS SET batches (inserts, then updates of the same keys) with HCL against the
//           conventional log, undo and redo (the paper: HCL 3.3x for gpKVS);
//   db      gpDB INSERT and UPDATE batches, HCL against conventional (the paper: 6.1x for updates);
//   native  GPM native persistence (a prefix sum written in place with persist barriers) against
//           CPU-assisted persistence (GPU computes into GPU memory, copies to the host, the CPU
//           writes and persists into the pool);
//   ycsb    gpKVS (HCL undo) on a YCSB-A-like stream: a load of `ycsb_keys` keys, then batches of
//           50% GET / 50% SET with uniform keys, to set beside gphash's own bench on the same sizes.
// Sizes are well past the 50 MB L2 (the defaults: a 512 MiB gpKVS table, a 1 GiB gpDB table,
// 512 MiB of prefix sums). Prints a summary last; --json writes every figure.
#include <cuda_runtime.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fmt/format.h>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "gphash/table.h"
#include "gpm/examples/workloads.h"

using namespace gphash;
namespace wl = gpm::workloads;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct TempPath {
  std::string path;
  explicit TempPath(const std::string& tag) : path(fmt::format("/dev/shm/gphash-gpmbench-{}-{}", getpid(), tag)) {
    std::remove(path.c_str());
  }
  ~TempPath() { std::remove(path.c_str()); }
};

const wl::LogChoice kLogs[] = {{gpm::kLayoutHcl, gpm::kModeUndo},
                               {gpm::kLayoutConventional, gpm::kModeUndo},
                               {gpm::kLayoutHcl, gpm::kModeRedo},
                               {gpm::kLayoutConventional, gpm::kModeRedo}};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"libGPM benchmarks: HCL vs conventional logging, native vs CPU-assisted persistence, gpKVS on YCSB"};
  std::string sections = "kvs,db,native,ycsb", json_path;
  uint64_t kvs_buckets = 1 << 22, kvs_batch = 1 << 20, kvs_batches = 8;
  uint64_t db_rows = 1 << 24, db_batch = 1 << 21;
  uint64_t scan_n = uint64_t{1} << 26;
  uint64_t ycsb_keys = 1 << 24, ycsb_batch = 1 << 20, ycsb_batches = 16;
  app.add_option("--sections", sections, "comma-separated: kvs, db, native, ycsb");
  app.add_option("--json", json_path, "write the figures as JSON here");
  app.add_option("--kvs-buckets", kvs_buckets);
  app.add_option("--kvs-batch", kvs_batch);
  app.add_option("--kvs-batches", kvs_batches);
  app.add_option("--db-rows", db_rows, "a power of two");
  app.add_option("--db-batch", db_batch);
  app.add_option("--scan-n", scan_n);
  app.add_option("--ycsb-keys", ycsb_keys);
  app.add_option("--ycsb-batch", ycsb_batch);
  app.add_option("--ycsb-batches", ycsb_batches);
  CLI11_PARSE(app, argc, argv);
  auto has = [&](const char* s) { return ("," + sections + ",").find(std::string(",") + s + ",") != std::string::npos; };

  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  nlohmann::json out;
  out["gpu"] = prop.name;
  std::vector<std::string> summary;
  cudaStream_t s;
  cudaStreamCreate(&s);
  std::mt19937_64 rng(42);

  if (has("kvs")) {
    std::vector<uint64_t> keys(kvs_batches * kvs_batch / 2), values(kvs_batch);
    for (uint64_t i = 0; i < keys.size(); ++i) keys[i] = i + 1;
    std::shuffle(keys.begin(), keys.end(), rng);
    uint64_t *dk, *dv;
    cudaMalloc(&dk, kvs_batch * 8);
    cudaMalloc(&dv, kvs_batch * 8);
    for (auto& v : values) v = rng();
    cudaMemcpy(dv, values.data(), kvs_batch * 8, cudaMemcpyHostToDevice);
    double hcl_undo = 0;
    for (const wl::LogChoice& log : kLogs) {
      TempPath path(std::string("kvs-") + wl::to_string(log));
      auto gp = gpm::GpmPool::create(path.path);
      gpm::DeviceGpm dev(*gp);
      wl::Kvs kvs(*gp, dev, "kvs", true, kvs_buckets, log, kvs_batch);
      double seconds = 0;
      uint64_t ops = 0, no_room = 0;
      for (uint64_t b = 0; b < kvs_batches; ++b) {
        // The first half of the batches inserts fresh keys, the second half updates them.
        const uint64_t first = (b % (kvs_batches / 2)) * kvs_batch;
        cudaMemcpy(dk, keys.data() + first, kvs_batch * 8, cudaMemcpyHostToDevice);
        const double t0 = now();
        no_room += kvs.set(dk, dv, kvs_batch, s);
        seconds += now() - t0;
        ops += kvs_batch;
      }
      const double mops = ops / seconds / 1e6;
      if (log.layout == gpm::kLayoutHcl && log.mode == gpm::kModeUndo) hcl_undo = mops;
      out["kvs"][wl::to_string(log)] = {{"mops", mops}, {"ops", ops}, {"seconds", seconds}, {"no_room", no_room},
                                         {"table_bytes", kvs_buckets * 128}};
      summary.push_back(fmt::format("gpKVS SET {:<18} {:8.2f} Mops/s", wl::to_string(log), mops));
      if (log.layout == gpm::kLayoutConventional && log.mode == gpm::kModeUndo)
        summary.push_back(fmt::format("gpKVS HCL/conventional (undo): {:.2f}x", hcl_undo / mops));
    }
    cudaFree(dk);
    cudaFree(dv);
  }

  if (has("db")) {
    double hcl[2] = {0, 0};
    for (const wl::LogChoice& log : kLogs) {
      TempPath path(std::string("db-") + wl::to_string(log));
      auto gp = gpm::GpmPool::create(path.path);
      gpm::DeviceGpm dev(*gp);
      wl::Db db(*gp, dev, "db", true, db_rows, log, db_batch);
      double t_ins = 0, t_upd = 0;
      uint64_t ins = 0, upd = 0;
      for (uint64_t first = 0; first < db_rows; first += db_batch) {
        const double t0 = now();
        db.insert(first, std::min(db_batch, db_rows - first), 1, s);
        t_ins += now() - t0;
        ins += std::min(db_batch, db_rows - first);
      }
      for (uint64_t b = 0; b < 8; ++b) {
        const double t0 = now();
        db.update(rng() % db_rows, 2 * (rng() % 1000) + 1, db_batch, b + 2, s);
        t_upd += now() - t0;
        upd += db_batch;
      }
      const double mi = ins / t_ins / 1e6, mu = upd / t_upd / 1e6;
      out["db"][wl::to_string(log)] = {{"insert_mops", mi}, {"update_mops", mu}, {"table_bytes", db_rows * 64}};
      summary.push_back(fmt::format("gpDB {:<18} INSERT {:8.2f} Mops/s  UPDATE {:8.2f} Mops/s", wl::to_string(log), mi, mu));
      if (log.layout == gpm::kLayoutHcl && log.mode == gpm::kModeUndo) {
        hcl[0] = mi;
        hcl[1] = mu;
      }
      if (log.layout == gpm::kLayoutConventional && log.mode == gpm::kModeUndo)
        summary.push_back(fmt::format("gpDB HCL/conventional (undo): INSERT {:.2f}x UPDATE {:.2f}x", hcl[0] / mi, hcl[1] / mu));
    }
  }

  if (has("native")) {
    TempPath path("native");
    auto gp = gpm::GpmPool::create(path.path);
    gpm::DeviceGpm dev(*gp);
    wl::prefix_sum_native(*gp, dev, "warm", 1 << 20, 1, s);  // CUDA and mapping warm-up
    double t0 = now();
    wl::prefix_sum_native(*gp, dev, "scan", scan_n, 1, s);
    const double native = now() - t0;
    wl::prefix_sum_cpu_assisted(*gp, "cpuscan", 1 << 20, s);
    t0 = now();
    wl::prefix_sum_cpu_assisted(*gp, "cpuscan2", scan_n, s);
    const double assisted = now() - t0;
    out["native"] = {{"elements", scan_n}, {"gpm_seconds", native}, {"cpu_assisted_seconds", assisted},
                     {"speedup", assisted / native}};
    summary.push_back(fmt::format("prefix sum of {} words: GPM native {:.3f} s, CPU-assisted {:.3f} s ({:.2f}x)", scan_n,
                                  native, assisted, assisted / native));
  }

  if (has("ycsb")) {
    std::vector<uint64_t> keys(ycsb_batch), values(ycsb_batch);
    uint64_t *dk, *dv, *dout;
    cudaMalloc(&dk, ycsb_batch * 8);
    cudaMalloc(&dv, ycsb_batch * 8);
    cudaMalloc(&dout, ycsb_batch * 8);
    const uint64_t half = ycsb_batch / 2;
    // The streams both systems run, drawn from one seed each time: the load (keys 1..ycsb_keys,
    // random values), then YCSB A rounds (the first half of a batch distinct keys to SET, the
    // second half uniform keys to GET). `load(n)` and `round()` run a batch already in dk/dv;
    // returns {load seconds, run seconds} of device-side batches (copies excluded).
    auto run_streams = [&](const std::function<void(uint64_t)>& load, const std::function<void()>& round) {
      std::mt19937_64 stream(1234);
      double load_s = 0, run_s = 0;
      for (uint64_t first = 0; first < ycsb_keys; first += ycsb_batch) {
        const uint64_t n = std::min(ycsb_batch, ycsb_keys - first);
        for (uint64_t i = 0; i < n; ++i) {
          keys[i] = first + i + 1;
          values[i] = stream();
        }
        cudaMemcpy(dk, keys.data(), n * 8, cudaMemcpyHostToDevice);
        cudaMemcpy(dv, values.data(), n * 8, cudaMemcpyHostToDevice);
        const double t0 = now();
        load(n);
        load_s += now() - t0;
      }
      for (uint64_t b = 0; b < ycsb_batches; ++b) {
        const uint64_t base = stream() % ycsb_keys;
        for (uint64_t i = 0; i < half; ++i) keys[i] = 1 + (base + i * 2654435761ull) % ycsb_keys;  // distinct for half < keys
        for (uint64_t i = half; i < ycsb_batch; ++i) keys[i] = 1 + stream() % ycsb_keys;
        cudaMemcpy(dk, keys.data(), ycsb_batch * 8, cudaMemcpyHostToDevice);
        const double t0 = now();
        round();
        run_s += now() - t0;
      }
      return std::pair{load_s, run_s};
    };
    const uint64_t ops = ycsb_batches * ycsb_batch;

    TempPath path("ycsb");
    auto gp = gpm::GpmPool::create(path.path);
    gpm::DeviceGpm dev(*gp);
    const uint64_t buckets = ycsb_keys / 4;  // 50% of the ways at full load
    wl::Kvs kvs(*gp, dev, "kvs", true, buckets, {gpm::kLayoutHcl, gpm::kModeUndo}, ycsb_batch);
    const auto [load_s, run_s] = run_streams([&](uint64_t n) { kvs.set(dk, dv, n, s); },
                                             [&] {
                                               kvs.set(dk, dv, half, s);
                                               kvs.get(dk + half, dout, ycsb_batch - half, s);
                                             });
    out["ycsb"] = {{"keys", ycsb_keys}, {"batch", ycsb_batch}, {"load_mops", ycsb_keys / load_s / 1e6},
                   {"a_mops", ops / run_s / 1e6}, {"log", "hcl-undo"}};
    summary.push_back(fmt::format("gpKVS YCSB (hcl-undo, {} keys): LOAD {:.2f} Mops/s, A (50/50) {:.2f} Mops/s", ycsb_keys,
                                  ycsb_keys / load_s / 1e6, ops / run_s / 1e6));

    // The same streams on gphash's log-free index (GPU engine, host-mapped pool, 8-byte keys and
    // values, batch arrays in GPU memory): inserts for the load, then one mixed batch per round
    // (the SET half as upserts, the GET half as searches).
    {
      TempPath index_path("ycsb-gphash");
      TableConfig config;
      config.key_width = config.value_width = 8;
      config.capacity = ycsb_keys;
      OpenOptions o;
      o.engine = EngineKind::kGpu;
      o.placement = Placement::kHostMapped;
      o.replace = true;
      Table t = Table::create(index_path.path, config, o);
      std::vector<Op> op(ycsb_batch);
      for (uint64_t i = 0; i < ycsb_batch; ++i) op[i] = i < half ? Op::kUpsert : Op::kSearch;
      Op* dops;
      OpStatus* dstatus;
      cudaMalloc(&dops, ycsb_batch * sizeof(Op));
      cudaMalloc(&dstatus, ycsb_batch * sizeof(OpStatus));
      cudaMemcpy(dops, op.data(), ycsb_batch * sizeof(Op), cudaMemcpyHostToDevice);
      auto run = [&](uint64_t n, const Op* ops_array, Op one) {
        Batch b;
        b.size = n;
        b.key_width = b.value_width = 8;
        b.op = one;
        b.ops = ops_array;
        b.keys = dk;
        b.values = dv;
        b.values_out = dout;
        b.status = dstatus;
        b.memory = MemorySpace::kDevice;
        t.execute_async(b, s).wait();
      };
      const auto [g_load, g_run] = run_streams([&](uint64_t n) { run(n, nullptr, Op::kInsert); },
                                               [&] { run(ycsb_batch, dops, Op::kSearch); });
      cudaFree(dops);
      cudaFree(dstatus);
      out["ycsb"]["gphash_load_mops"] = ycsb_keys / g_load / 1e6;
      out["ycsb"]["gphash_a_mops"] = ops / g_run / 1e6;
      summary.push_back(fmt::format("gphash (log-free, host-mapped) same streams: LOAD {:.2f} Mops/s, A (50/50) {:.2f} Mops/s",
                                    ycsb_keys / g_load / 1e6, ops / g_run / 1e6));
    }
    cudaFree(dk);
    cudaFree(dv);
    cudaFree(dout);
  }

  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  std::printf("==== summary ====\n");
  for (const std::string& line : summary) std::printf("%s\n", line.c_str());
  return 0;
}
