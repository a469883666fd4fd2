// The libGPM-based peers of GPHash's evaluation, on gphash's own workload streams (the
// gpu-batches section of gpu_bench: same flags, same records, keys, values, seeds and JSON rows),
// so bench/evaluate.py sets them beside gphash:
//   slablist  SlabList (src/gpm/examples/slab_list.h), our stand-in for the paper's SlabHash-GPM:
//             chains of 128-byte slabs in a host-mapped GPM pool, searched by a warp, every write
//             an undo-logged libGPM transaction (HCL layout by default);
//   gpkvs     gpKVS (src/gpm/examples/workloads.h, used as is): Mega-KV-style 8-way buckets in the
//             pool, a key mirror in GPU memory, every SET an undo-logged transaction; 8-byte
//             values only, and no erase (the delete workload is reported as unsupported).
// 8-byte keys only (both stores' key words): other widths are refused with exit status 2.
//
// A batch, as gpu_bench's GpuBatchExecutor does it: the YCSB operations are generated and turned
// into table operations on the host (a read-modify-write is a get and a set of one key); neither
// store orders operations on one key within a call (SlabList applies duplicate SETs in some
// order, gpKVS's SET needs distinct keys), so the batch is combined on the host first
// (gpm::workloads::BatchPlan: gets with no earlier write of their key in the batch go to the
// table; a later get is answered from the batch; only each key's last write goes to the table),
// which gives the results of running the operations one at a time in batch order. Untimed: the
// generation, that combining, and copying keys and values into GPU memory. Timed (steady clock):
// the store's calls on those device arrays, gets then sets then erases, each returning once its
// results are in GPU memory and its writes durable (stream synchronised). Untimed again: copying
// the results back and checking them (a read of an existing record must return that record's
// value; a read of an absent record must not find it; a write must succeed).
//
// Sizing from --capacity (0: --records): SlabList's buckets are capacity / (15 * 0.6) (head
// slabs 60% full at capacity) with half as many overflow slabs again; gpKVS's buckets are
// capacity / (8 * 0.5) (it overflows from about 55%, workloads.h). Pools in --pool-dir
// (/dev/shm), removed at exit.
#include <cuda_runtime.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpm/examples/slab_list.h"
#include "gpm/examples/workloads.h"
#include "workload/records.h"
#include "workload/ycsb.h"

namespace {

using namespace gphash;
namespace wl = gpm::workloads;
using nlohmann::json;
using Kind = wl::BatchPlan::Kind;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

template <class T>
struct DeviceArray {
  T* ptr = nullptr;
  explicit DeviceArray(size_t n) { check(cudaMalloc(&ptr, std::max<size_t>(n, 1) * sizeof(T)), "cudaMalloc"); }
  ~DeviceArray() { cudaFree(ptr); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
};

struct TempPath {
  std::string path;
  explicit TempPath(std::string p) : path(std::move(p)) { std::remove(path.c_str()); }
  ~TempPath() { std::remove(path.c_str()); }
};

std::vector<std::string> summary;
void say(const std::string& line) {
  fmt::print("{}\n", line);
  std::fflush(stdout);
  summary.push_back(line);
}

// The 8-byte key of a record: records.h's key bytes as a word. 0 marks an empty slot in both
// stores; the one record whose key word may be 0 gets kReservedKeyWords[0] instead, which no
// record id below 2^63 produces, so keys stay distinct.
uint64_t key_of(uint64_t record) {
  std::byte bytes[8];
  workload::make_key(record, 8, bytes);
  uint64_t k;
  std::memcpy(&k, bytes, 8);
  return k != 0 ? k : workload::kReservedKeyWords[0];
}

// One batch's table calls, staged in GPU memory.
struct Staged {
  uint64_t gets = 0, sets = 0, erases = 0;
  uint64_t* get_keys;
  uint64_t* values_out;  // gets * value words
  uint8_t* found;
  uint64_t* set_keys;
  uint64_t* set_values;  // sets * value words
  uint8_t* set_status;
  uint64_t* erase_keys;
  uint8_t* erase_status;
};

// The host copies of a batch's results.
struct Results {
  std::vector<uint8_t> found, set_ok, erase_ok;
  std::vector<uint64_t> values;
  uint64_t failed_sets_unattributed = 0;  // gpKVS: its SET counts failures, not which
};

class System {
 public:
  virtual ~System() = default;
  virtual bool erases() const = 0;
  // Timed: the batch's calls; returns with the results in GPU memory.
  virtual void execute(const Staged& b, cudaStream_t s) = 0;
  // Untimed: the results, to the host.
  virtual void fetch(const Staged& b, uint32_t value_words, Results& r) = 0;
  virtual uint64_t items() = 0;
  virtual double load_factor() = 0;
  virtual json describe() const = 0;
};

void copy_back(void* dst, const void* src, size_t bytes) {
  if (bytes) check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "results");
}

class SlabListSystem : public System {
 public:
  SlabListSystem(const std::string& path, uint64_t capacity, uint32_t value_width, wl::LogChoice log, uint64_t max_batch)
      : gp_(gpm::GpmPool::create(path)),
        dev_(*gp_),
        list_(*gp_, dev_, "slablist", true, wl::SlabList::geometry_for(capacity, value_width), log, max_batch),
        log_(log) {}
  bool erases() const override { return true; }
  void execute(const Staged& b, cudaStream_t s) override {
    list_.get(b.get_keys, b.values_out, b.found, b.gets, s);
    list_.set(b.set_keys, b.set_values, b.sets, b.set_status, s);
    list_.erase(b.erase_keys, b.erases, b.erase_status, s);
  }
  void fetch(const Staged& b, uint32_t vw, Results& r) override {
    r.found.resize(b.gets);
    r.values.resize(b.gets * vw);
    std::vector<uint8_t> ss(b.sets), es(b.erases);
    copy_back(r.found.data(), b.found, b.gets);
    copy_back(r.values.data(), b.values_out, b.gets * vw * 8);
    copy_back(ss.data(), b.set_status, b.sets);
    copy_back(es.data(), b.erase_status, b.erases);
    r.set_ok.resize(b.sets);
    r.erase_ok.resize(b.erases);
    for (size_t i = 0; i < ss.size(); ++i) r.set_ok[i] = ss[i] == wl::SlabList::kOk;
    for (size_t i = 0; i < es.size(); ++i) r.erase_ok[i] = es[i] == wl::SlabList::kOk;
    r.failed_sets_unattributed = 0;
  }
  uint64_t items() override { return list_.size(); }
  double load_factor() override { return list_.load_factor(); }
  json describe() const override {
    const wl::SlabList::Geometry& g = list_.geometry();
    return {{"buckets", g.buckets},
            {"slabs", g.slabs},
            {"keys_per_slab", wl::SlabList::kKeysPerSlab},
            {"pool_bytes", g.slabs * (128 + wl::SlabList::kKeysPerSlab * g.value_width)},
            {"log", wl::to_string(log_)},
            {"launch", {wl::SlabList::kDefaultLaunch.blocks, wl::SlabList::kDefaultLaunch.threads}}};
  }
  const wl::SlabList& list() const { return list_; }

 private:
  std::unique_ptr<gpm::GpmPool> gp_;
  gpm::DeviceGpm dev_;
  wl::SlabList list_;
  wl::LogChoice log_;
};

class KvsSystem : public System {
 public:
  KvsSystem(const std::string& path, uint64_t capacity, wl::LogChoice log, uint64_t max_batch)
      : gp_(gpm::GpmPool::create(path)),
        dev_(*gp_),
        buckets_(std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(static_cast<double>(capacity) / (wl::kWays * 0.5))))),
        kvs_(*gp_, dev_, "kvs", true, buckets_, log, max_batch),
        log_(log) {}
  bool erases() const override { return false; }
  void execute(const Staged& b, cudaStream_t s) override {
    if (b.gets) kvs_.get(b.get_keys, b.values_out, b.gets, s);
    no_room_ = b.sets ? kvs_.set(b.set_keys, b.set_values, b.sets, s) : 0;
  }
  void fetch(const Staged& b, uint32_t vw, Results& r) override {
    r.values.resize(b.gets * vw);
    copy_back(r.values.data(), b.values_out, b.gets * vw * 8);
    // gpKVS's GET returns 0 for an absent key. A records.h 8-byte value is 0 only for version 0
    // (LOAD's first record) with a 24-bit check of 0 (chance 2^-24), so 0 reads as absent.
    r.found.resize(b.gets);
    for (size_t i = 0; i < b.gets; ++i) r.found[i] = r.values[i] != 0;
    r.set_ok.assign(b.sets, 1);
    r.erase_ok.clear();
    r.failed_sets_unattributed = no_room_;
  }
  uint64_t items() override {
    uint64_t n = 0;
    const uint64_t* t = kvs_.table();
    for (uint64_t b = 0; b < buckets_; ++b)
      for (uint32_t w = 0; w < wl::kWays; ++w) n += t[b * 2 * wl::kWays + w] != 0;
    return n;
  }
  double load_factor() override { return static_cast<double>(items()) / static_cast<double>(buckets_ * wl::kWays); }
  json describe() const override {
    return {{"buckets", buckets_}, {"ways", wl::kWays}, {"pool_bytes", buckets_ * wl::kWays * 16}, {"log", wl::to_string(log_)}};
  }

 private:
  std::unique_ptr<gpm::GpmPool> gp_;
  gpm::DeviceGpm dev_;
  uint64_t buckets_;
  wl::Kvs kvs_;
  wl::LogChoice log_;
  uint64_t no_room_ = 0;
};

struct Spec {
  std::string system = "slablist", workloads = "load,search,negative-search,update,a,b,c,f,delete", distribution;
  std::string log = "hcl-undo", pool_dir = "/dev/shm";
  uint64_t records = 1'000'000, operations = 0, capacity = 0;
  size_t batch = size_t{1} << 16;
  uint32_t key_width = 8, value_width = 128;
  double theta = 0.99;
};

struct Row {
  std::string workload, distribution;
  uint64_t operations = 0, not_found = 0, bad_values = 0, failed_writes = 0, found_absent = 0;
  double seconds = 0;
  std::vector<double> batch_seconds;
  // As frontends/cli/ycsb_runner.cpp computes it.
  double percentile(double q) const {
    if (batch_seconds.empty()) return 0;
    std::vector<double> v = batch_seconds;
    const size_t k = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
    return v[k];
  }
};

// Runs one workload stream, as frontends/cli/ycsb_runner.cpp's run_workload does for gphash.
Row run_workload(System& sys, const workload::WorkloadSpec& spec, const Spec& g, const Staged& d, cudaStream_t stream) {
  const uint32_t vb = g.value_width, vw = vb / 8;
  workload::WorkloadGenerator gen(spec);
  Row r;
  r.workload = std::string(workload::name(spec.workload));
  r.distribution = spec.workload == workload::Workload::Load ? "-" : std::string(workload::name(gen.distribution()));
  std::vector<workload::Op> wops(g.batch);
  const size_t cap = 2 * g.batch;  // a read-modify-write is two table operations
  std::vector<Kind> kinds(cap);
  std::vector<uint64_t> records(cap), keys(cap), values(cap * vw), h_get(cap), h_set(cap), h_set_values(cap * vw),
      h_erase(cap);
  uint64_t version = spec.workload == workload::Workload::Load ? 0 : 1 + spec.seed * (uint64_t{1} << 40);
  wl::BatchPlan plan;
  Results res;
  for (;;) {
    const size_t got = gen.next(wops);
    if (got == 0) break;
    size_t n = 0;
    auto add = [&](Kind kind, uint64_t record) {
      kinds[n] = kind;
      records[n] = record;
      keys[n] = key_of(record);
      if (kind == wl::BatchPlan::kSet)
        workload::make_value(record, version++, vb, reinterpret_cast<std::byte*>(&values[n * vw]));
      ++n;
    };
    for (size_t i = 0; i < got; ++i) {
      const workload::Op& w = wops[i];
      switch (w.type) {
        case workload::OpType::Read:
        case workload::OpType::ReadAbsent: add(wl::BatchPlan::kGet, w.record); break;
        case workload::OpType::Update:
        case workload::OpType::Insert: add(wl::BatchPlan::kSet, w.record); break;
        case workload::OpType::ReadModifyWrite:
          add(wl::BatchPlan::kGet, w.record);
          add(wl::BatchPlan::kSet, w.record);
          break;
        case workload::OpType::Delete: add(wl::BatchPlan::kErase, w.record); break;
      }
    }
    plan.build(kinds.data(), keys.data(), n);
    Staged b = d;
    b.gets = plan.gets.size(), b.sets = plan.sets.size(), b.erases = plan.erases.size();
    for (size_t i = 0; i < b.gets; ++i) h_get[i] = keys[plan.gets[i]];
    for (size_t i = 0; i < b.sets; ++i) {
      h_set[i] = keys[plan.sets[i]];
      std::copy_n(&values[plan.sets[i] * vw], vw, &h_set_values[i * vw]);
    }
    for (size_t i = 0; i < b.erases; ++i) h_erase[i] = keys[plan.erases[i]];
    // The batch starts in GPU memory: staged before the clock starts.
    if (b.gets) check(cudaMemcpy(b.get_keys, h_get.data(), b.gets * 8, cudaMemcpyHostToDevice), "keys");
    if (b.sets) {
      check(cudaMemcpy(b.set_keys, h_set.data(), b.sets * 8, cudaMemcpyHostToDevice), "keys");
      check(cudaMemcpy(b.set_values, h_set_values.data(), b.sets * vb, cudaMemcpyHostToDevice), "values");
    }
    if (b.erases) check(cudaMemcpy(b.erase_keys, h_erase.data(), b.erases * 8, cudaMemcpyHostToDevice), "keys");
    // A copy from pageable memory may still be in flight when cudaMemcpy returns, and the store's
    // stream does not wait for the default stream.
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    const auto t0 = std::chrono::steady_clock::now();
    sys.execute(b, stream);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.seconds += dt;
    r.batch_seconds.push_back(dt);
    r.operations += got;
    sys.fetch(b, vw, res);
    r.failed_writes += res.failed_sets_unattributed;
    for (size_t i = 0; i < n; ++i) {
      if (kinds[i] != wl::BatchPlan::kGet) {
        r.failed_writes += !plan.write_ok(i, res.found.data(), res.set_ok.data(), res.erase_ok.data());
        continue;
      }
      const bool found = plan.get_found(i, res.found.data());
      if (records[i] >= workload::kAbsentRecordBase) {
        r.found_absent += found;
      } else if (!found) {
        ++r.not_found;
      } else {
        const int64_t src = plan.value_source(i);
        const uint64_t* v = src >= 0 ? &values[static_cast<size_t>(src) * vw] : &res.values[plan.table_position(i) * vw];
        r.bad_values += !workload::check_value(records[i], reinterpret_cast<const std::byte*>(v), vb, nullptr);
      }
    }
  }
  return r;
}

wl::LogChoice parse_log(const std::string& s) {
  for (wl::LogChoice c : {wl::LogChoice{gpm::kLayoutHcl, gpm::kModeUndo}, wl::LogChoice{gpm::kLayoutHcl, gpm::kModeRedo},
                          wl::LogChoice{gpm::kLayoutConventional, gpm::kModeUndo},
                          wl::LogChoice{gpm::kLayoutConventional, gpm::kModeRedo}})
    if (s == wl::to_string(c)) return c;
  throw std::invalid_argument("--log: " + s);
}

json run(const Spec& g) {
  const uint64_t capacity = g.capacity ? g.capacity : g.records;
  const uint64_t max_batch = 2 * g.batch;
  const wl::LogChoice log = parse_log(g.log);
  TempPath pool(fmt::format("{}/gphash-gpmindex-{}-{}", g.pool_dir, getpid(), g.system));
  std::unique_ptr<System> sys;
  if (g.system == "slablist")
    sys = std::make_unique<SlabListSystem>(pool.path, capacity, g.value_width, log, max_batch);
  else
    sys = std::make_unique<KvsSystem>(pool.path, capacity, log, max_batch);
  const json about = sys->describe();
  say(fmt::format("gpm-index ({}): {} records, capacity {}, batch {}, 8-byte keys, {}-byte values; {}", g.system, g.records,
                  capacity, g.batch, g.value_width, about.dump()));

  const uint32_t vw = g.value_width / 8;
  const size_t cap = 2 * g.batch;
  DeviceArray<uint64_t> get_keys(cap), values_out(cap * vw), set_keys(cap), set_values(cap * vw), erase_keys(cap);
  DeviceArray<uint8_t> found(cap), set_status(cap), erase_status(cap);
  const Staged d{0, 0, 0, get_keys.ptr, values_out.ptr, found.ptr, set_keys.ptr, set_values.ptr, set_status.ptr,
                 erase_keys.ptr, erase_status.ptr};
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");

  json rows = json::array();
  uint64_t records_now = 0;
  bool wrong = false;
  for (const workload::Workload w : workload::parse_workload_list(g.workloads)) {
    // As gpu_bench: LOAD inserts --records, the others see the records that exist; seed = row + 1.
    workload::WorkloadSpec spec{w, w == workload::Workload::Load ? g.records : records_now, g.operations, std::nullopt,
                                g.theta, 1 + rows.size()};
    if (!g.distribution.empty()) spec.distribution = workload::parse_distribution(g.distribution);
    if (workload::operation_mix(w).erase > 0 && !sys->erases()) {
      say(fmt::format("gpm-index ({}): {:<16} unsupported ({} has no erase): skipped", g.system, workload::name(w), g.system));
      rows.push_back({{"workload", std::string(workload::name(w))}, {"unsupported", true}});
      continue;
    }
    const Row r = run_workload(*sys, spec, g, d, stream);
    records_now = sys->items();
    const double lf = sys->load_factor();
    const double rate = r.seconds > 0 ? static_cast<double>(r.operations) / r.seconds : 0;
    wrong |= r.not_found || r.bad_values || r.failed_writes || r.found_absent;
    say(fmt::format("gpm-index ({}): {:<16} {:>8.3f} M/s; not found {}, bad values {}, failed writes {}, absent found "
                    "{}; items {}, load factor {:.3f}, batch p50 {:.3f} ms p99 {:.3f} ms",
                    g.system, r.workload, rate / 1e6, r.not_found, r.bad_values, r.failed_writes, r.found_absent,
                    records_now, lf, 1e3 * r.percentile(0.5), 1e3 * r.percentile(0.99)));
    rows.push_back({{"workload", r.workload},
                    {"distribution", r.distribution},
                    {"operations", r.operations},
                    {"ops_per_second", rate},
                    {"batch_p50_seconds", r.percentile(0.5)},
                    {"batch_p99_seconds", r.percentile(0.99)},
                    {"not_found", r.not_found},
                    {"bad_values", r.bad_values},
                    {"failed_writes", r.failed_writes},
                    {"found_absent", r.found_absent},
                    {"items_after", records_now},
                    {"load_factor_after", lf},
                    {"resizes", 0}});
  }
  if (wrong)
    say(fmt::format("gpm-index ({}): some results were not found, wrong, failed or found when absent (see above; reads of "
                    "records a delete workload removed count as not found)",
                    g.system));
  cudaStreamDestroy(stream);
  return {{"system", g.system},      {"records", g.records},         {"operations", g.operations},
          {"batch", g.batch},        {"key_width", g.key_width},     {"value_width", g.value_width},
          {"capacity", capacity},    {"table", about},               {"results", rows}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"libGPM-based peers of gphash (SlabList, the SlabHash-GPM stand-in; gpKVS) on gphash's workload streams"};
  Spec g;
  std::string json_path;
  app.add_option("--system", g.system, "slablist or gpkvs")->check(CLI::IsMember({"slablist", "gpkvs"}))->capture_default_str();
  app.add_option("--workloads", g.workloads, "comma-separated, run in order on one table")->capture_default_str();
  app.add_option("--records", g.records, "records LOAD inserts")->capture_default_str();
  app.add_option("--operations", g.operations, "operations per workload (0 = records)");
  app.add_option("--batch", g.batch, "YCSB operations per batch")->capture_default_str();
  app.add_option("--key-width", g.key_width, "8 only")->capture_default_str();
  app.add_option("--value-width", g.value_width, "slablist: 8..128, a multiple of 8; gpkvs: 8")->capture_default_str();
  app.add_option("--capacity", g.capacity, "items the table is sized for (0 = records)");
  app.add_option("--distribution", g.distribution, "default: each workload's own");
  app.add_option("--theta", g.theta)->capture_default_str();
  app.add_option("--log", g.log, "hcl-undo, hcl-redo, conventional-undo or conventional-redo")
      ->check(CLI::IsMember({"hcl-undo", "hcl-redo", "conventional-undo", "conventional-redo"}))
      ->capture_default_str();
  app.add_option("--pool-dir", g.pool_dir, "where the pool lives (GPU-mappable memory)")->capture_default_str();
  app.add_option("--json", json_path, "write the results as JSON here");
  CLI11_PARSE(app, argc, argv);
  if (g.key_width != 8) {
    fmt::print(stderr, "gpm_index_bench: --key-width {}: {} takes 8-byte keys only\n", g.key_width, g.system);
    return 2;
  }
  if (g.system == "gpkvs" && g.value_width != 8) {
    fmt::print(stderr, "gpm_index_bench: --value-width {}: gpKVS stores 8-byte values only (pass --value-width 8)\n",
               g.value_width);
    return 2;
  }
  if (g.value_width < 8 || g.value_width > wl::SlabList::kMaxValueWidth || g.value_width % 8) {
    fmt::print(stderr, "gpm_index_bench: --value-width {}: SlabList takes 8..128-byte values, a multiple of 8\n",
               g.value_width);
    return 2;
  }
  if (g.batch == 0) {
    fmt::print(stderr, "gpm_index_bench: --batch must be positive\n");
    return 2;
  }
  if (!g.operations) g.operations = g.records;
  cudaDeviceProp prop{};
  json results;
  try {
    check(cudaGetDeviceProperties(&prop, 0), "device");
    say(fmt::format("device: {} ({} SMs)", prop.name, prop.multiProcessorCount));
    results = run(g);
    results["device"] = prop.name;
  } catch (const std::exception& e) {
    say(fmt::format("FAILED: {}", e.what()));
    results["error"] = e.what();
  }
  if (!json_path.empty()) std::ofstream(json_path) << results.dump(2) << "\n";
  fmt::print("\n==== summary ====\n");
  for (const std::string& line : summary) fmt::print("{}\n", line);
  return results.contains("error") ? 1 : 0;
}
