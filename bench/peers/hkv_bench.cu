// NVIDIA Merlin HierarchicalKV (HKV) on the project's workloads: a peer of the evaluation.
//
// Build and fetch: scripts/peers/hkv.sh (it downloads the merlin-sok 2.1.0 sdist, whose
// third_party/HierarchicalKV holds HKV's headers, into the git-ignored .peers/hkv/; HKV's code is
// never committed). Run: .peers/hkv/hkv_bench --mode gpu|hybrid --records N [flags]; --help lists
// the flags.
//
// What runs. One HKV table, nv::merlin::HashTable<uint64_t key, float value, uint64_t score>, with
// dim = value width / 4 floats, 128-slot buckets and HKV's default LRU eviction strategy (scores
// are set by HKV). The workloads run in order on it, with exactly the record-id streams of
// gphash's `gpu_bench --sections gpu-batches`: the project's WorkloadGenerator (src/workload/
// ycsb.h), workload i (from 0) seeded 1 + i, each workload but LOAD starting from the records
// that exist after the previous one (counted by our own model of what should exist, which is
// what gphash's table.size() would be), and the same value versions.
//   --mode gpu     every value in GPU memory (max_hbm_for_vectors = all of the vectors' bytes, so
//                  HKV's "pure HBM" fast paths run);
//   --mode hybrid  every value in pinned, mapped host memory (max_hbm_for_vectors = 0); keys,
//                  scores and digests stay in GPU memory, as HKV always keeps them.
//
// Capacity. HKV's capacity is buckets x 128 slots, and a key can only live in the one bucket it
// hashes to: when that bucket is full, an insert evicts the bucket's lowest-score (least recently
// written) key. So HKV is sized with headroom: slots = the next power of two >= capacity /
// --target-load-factor (0.75), at least 128, where capacity (--capacity, default records plus
// operations / 16 when the run has D's inserts, as bench/evaluate.py sizes gphash's tables) is
// the number of items the table must hold; --slots sets the slot count directly. init_capacity =
// max_capacity = slots, so HKV never grows during the run (resizes is always 0, and checked).
//
// Keys and values. 8-byte keys only (HKV's keys are 64-bit integers; another --key-width exits
// with status 2): the key is workload::key_word(record), the little-endian first word of
// records.h's keys. HKV reserves the keys whose top 62 bits are all ones (EMPTY_KEY, RECLAIM_KEY,
// LOCKED_KEY and 0x...FC); records.h's key mix sends all four only to ids >= 2^63, which are never
// valid, so no remapping is needed: the harness checks this at start and refuses to run if it
// ever stops being true. Values are records.h's self-checking value bytes, stored bitwise in the
// floats (HKV only copies them).
//
// Operations. A batch of --batch YCSB operations is split by type, because HKV has no mixed
// batch: its writes run first (insert_or_assign for inserts and updates, or assign for updates
// with --update-op assign), then its erases, then its reads (find). So a read sees every write of
// its batch, also one that comes after it in the stream (gphash applies a batch in order): a
// read-modify-write (F: a read, then an update of the same record) reads the value its own update
// wrote, and D's reads of records inserted in the same batch find them. Values are self-checking,
// so which version a read sees changes no count; only throughput is compared. HKV's calls report
// no per-key status; the harness finds out untimed, after each batch: a written key that find
// then does not see (an insert HKV refused or evicted within the batch, an assign of a missing
// key) is a failed write, and so is an erase of a key that was not there before it.
//
// Timing. Before a batch is timed its keys and values are copied to GPU memory (the batch starts
// and ends in GPU memory, as in gpu-batches); the clock covers the HKV calls on one stream up to
// cudaStreamSynchronize (device time, from CUDA events on that stream, is reported beside it).
// Results are copied back untimed and checked: reads of existing records not found (not_found),
// found values failing their self-check (bad_values), negative searches found (found_absent).
// After each workload (untimed): HKV's size(), and with --audit on (default) a find of every
// record that should exist; those missing are "lost" (evicted by full buckets, or never stored):
// a finding reported as it is, not hidden. CUDA_MODULE_LOADING is set to EAGER (unless already
// set) so that no kernel is loaded inside a timed batch.
//
// Output: one line per workload, and with --json FILE {"config": {...}, "results": [rows]} with
// the rows of gpu-batches (workload, distribution, operations, ops_per_second, batch_p50_seconds,
// batch_p99_seconds, not_found, bad_values, failed_writes, found_absent, items_after,
// load_factor_after, resizes) plus mode, system, device_ops_per_second, seconds, table_ops,
// expected_items_after, lost_after (null without the audit) and erases_left_behind; the file is
// rewritten after every workload, so a run cut short keeps what it measured. Exit status: 0 after
// a complete run (whatever was lost: see the counts), 1 for a failure (CUDA, allocation), 2 for
// invalid arguments.
#include <cuda_runtime.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "merlin_hashtable.cuh"
#include "workload/records.h"
#include "workload/ycsb.h"

namespace {

namespace wl = gphash::workload;
using HkvTable = nv::merlin::HashTable<uint64_t, float, uint64_t>;
using Clock = std::chrono::steady_clock;

constexpr size_t kBucketSize = 128;          // HKV's max_bucket_size (its pipelined find needs 128)
constexpr size_t kAuditChunk = size_t{1} << 20;  // keys per untimed audit find

constexpr const char* kUsage = R"(usage: hkv_bench --records N [options]
  --mode gpu|hybrid          values in GPU memory, or in pinned host memory (default gpu)
  --records N                records loaded by LOAD (required, >= 1)
  --operations N             operations per workload but LOAD (default: records)
  --batch N                  YCSB operations per batch (default 65536)
  --workloads LIST           comma-separated names of workload/ycsb.h, run in order on one table
                             (default load,search,negative-search,update,a,b,c,f,delete)
  --distribution NAME        for every workload: uniform, zipfian, zipfian-exact, latest (as
                             workload/ycsb.h; default: each workload's own)
  --theta X                  Zipf exponent (default 0.99)
  --key-width 8              HKV's keys are 8 bytes; another width exits with status 2
  --value-width W            bytes per value, a multiple of 4 from 4 to 4096 (default 128)
  --capacity N               items the table must hold (default: records, plus operations/16 with D)
  --target-load-factor X     slots = next power of two >= capacity / X (default 0.75)
  --slots N                  HKV capacity in slots, a power of two >= 128 (overrides the two above)
  --update-op OP             insert_or_assign (default) or assign, for YCSB updates
  --audit on|off             after each workload, find every record that should exist (default on)
  --json FILE                write {"config": ..., "results": [...]} here
)";

struct ArgError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) { check(cudaMalloc(&ptr_, std::max<size_t>(n, 1) * sizeof(T)), "cudaMalloc"); }
  ~DeviceArray() { cudaFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return ptr_; }

 private:
  T* ptr_ = nullptr;
};

template <class T>
class PinnedArray {
 public:
  explicit PinnedArray(size_t n) {
    void* p = nullptr;
    check(cudaMallocHost(&p, std::max<size_t>(n, 1) * sizeof(T)), "cudaMallocHost");
    ptr_ = static_cast<T*>(p);
  }
  ~PinnedArray() { cudaFreeHost(ptr_); }
  PinnedArray(const PinnedArray&) = delete;
  PinnedArray& operator=(const PinnedArray&) = delete;
  T* get() const { return ptr_; }
  T& operator[](size_t i) const { return ptr_[i]; }

 private:
  T* ptr_ = nullptr;
};

// ---- arguments -------------------------------------------------------------------------------

struct Config {
  std::string mode = "gpu";
  uint64_t records = 0, operations = 0, capacity = 0, slots = 0;
  uint64_t batch = uint64_t{1} << 16;
  uint64_t key_width = 8, value_width = 128;
  std::optional<wl::KeyDistribution> distribution;
  double theta = 0.99, target_load_factor = 0.75;
  std::string workloads_text = "load,search,negative-search,update,a,b,c,f,delete";
  std::vector<wl::Workload> workloads;
  std::string update_op = "insert_or_assign";
  bool audit = true;
  std::string json_path;
};

uint64_t parse_u64(std::string_view flag, std::string_view text) {
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) {
    throw ArgError(std::string(flag) + " needs a non-negative integer, not '" + std::string(text) + "'");
  }
  return v;
}

double parse_double(std::string_view flag, std::string_view text) {
  const std::string s(text);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v)) {
    throw ArgError(std::string(flag) + " needs a number, not '" + s + "'");
  }
  return v;
}

bool is_pow2(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

uint64_t next_pow2(uint64_t x) {
  uint64_t p = 1;
  while (p < x) p <<= 1;
  return p;
}

Config parse_args(int argc, char** argv) {
  Config c;
  bool have_records = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i], value;
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (arg.substr(0, 2) != "--") throw ArgError("unexpected argument '" + std::string(arg) + "'");
    if (const size_t eq = arg.find('='); eq != std::string_view::npos) {
      value = arg.substr(eq + 1), arg = arg.substr(0, eq);
    } else {
      if (i + 1 >= argc) throw ArgError(std::string(arg) + " needs a value");
      value = argv[++i];
    }
    if (arg == "--mode") {
      if (value != "gpu" && value != "hybrid") throw ArgError("--mode is gpu or hybrid, not '" + std::string(value) + "'");
      c.mode = value;
    } else if (arg == "--records") {
      c.records = parse_u64(arg, value), have_records = true;
    } else if (arg == "--operations") {
      c.operations = parse_u64(arg, value);
    } else if (arg == "--batch") {
      c.batch = parse_u64(arg, value);
    } else if (arg == "--workloads") {
      c.workloads_text = value;
    } else if (arg == "--distribution") {
      try {
        c.distribution = wl::parse_distribution(value);
      } catch (const std::invalid_argument& e) {
        throw ArgError(e.what());
      }
    } else if (arg == "--theta") {
      c.theta = parse_double(arg, value);
    } else if (arg == "--key-width") {
      c.key_width = parse_u64(arg, value);
    } else if (arg == "--value-width") {
      c.value_width = parse_u64(arg, value);
    } else if (arg == "--capacity") {
      c.capacity = parse_u64(arg, value);
    } else if (arg == "--target-load-factor") {
      c.target_load_factor = parse_double(arg, value);
    } else if (arg == "--slots") {
      c.slots = parse_u64(arg, value);
    } else if (arg == "--update-op") {
      if (value != "insert_or_assign" && value != "assign") {
        throw ArgError("--update-op is insert_or_assign or assign, not '" + std::string(value) + "'");
      }
      c.update_op = value;
    } else if (arg == "--audit") {
      if (value != "on" && value != "off") throw ArgError("--audit is on or off");
      c.audit = value == "on";
    } else if (arg == "--json") {
      c.json_path = value;
    } else {
      throw ArgError("unknown option '" + std::string(arg) + "'");
    }
  }
  if (!have_records || c.records == 0) throw ArgError("--records N (N >= 1) is required");
  if (c.key_width != 8) {
    throw ArgError("--key-width " + std::to_string(c.key_width) +
                   ": HKV's keys are 64-bit integers, so this harness runs 8-byte keys only");
  }
  if (c.value_width < 4 || c.value_width > wl::kMaxValueWidth || c.value_width % 4 != 0) {
    throw ArgError("--value-width must be a multiple of 4 from 4 to " + std::to_string(wl::kMaxValueWidth) +
                   " (values are float vectors)");
  }
  if (c.batch == 0 || c.batch > (uint64_t{1} << 28)) throw ArgError("--batch must be from 1 to 2^28");
  if (!(c.target_load_factor > 0 && c.target_load_factor <= 1)) {
    throw ArgError("--target-load-factor must be in (0, 1]");
  }
  if (c.slots != 0 && (!is_pow2(c.slots) || c.slots < kBucketSize)) {
    throw ArgError("--slots must be a power of two >= 128 (HKV's bucket size)");
  }
  if (c.operations == 0) c.operations = c.records;
  try {
    c.workloads = wl::parse_workload_list(c.workloads_text);
  } catch (const std::invalid_argument& e) {
    throw ArgError(e.what());
  }
  const bool has_d = std::find(c.workloads.begin(), c.workloads.end(), wl::Workload::D) != c.workloads.end();
  if (c.capacity == 0) c.capacity = c.records + (has_d ? c.operations / 16 : 0);
  if (c.slots == 0) {
    const double want = std::ceil(static_cast<double>(c.capacity) / c.target_load_factor);
    if (want > 0x1p62) throw ArgError("--capacity is too large");
    c.slots = next_pow2(std::max<uint64_t>(kBucketSize, static_cast<uint64_t>(want)));
  }
  return c;
}

// ---- JSON, by hand -----------------------------------------------------------------------------

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\', out += ch;
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", u);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string json_number(uint64_t v) { return std::to_string(v); }

// An object written field by field, in order.
class JsonObject {
 public:
  JsonObject& add(std::string_view key, const std::string& raw_value) {
    text_ += (text_.empty() ? "{" : ", ") + json_string(key) + ": " + raw_value;
    return *this;
  }
  JsonObject& str(std::string_view key, std::string_view v) { return add(key, json_string(v)); }
  JsonObject& num(std::string_view key, double v) { return add(key, json_number(v)); }
  JsonObject& num(std::string_view key, uint64_t v) { return add(key, json_number(v)); }
  std::string text() const { return text_.empty() ? "{}" : text_ + "}"; }

 private:
  std::string text_;
};

// ---- the records that should exist -------------------------------------------------------------

// What gphash's table would hold: LOAD and D insert, Delete erases; updates never create.
class Model {
 public:
  bool present(uint64_t r) const { return r < bits_.size() && bits_[r] != 0; }
  void insert(uint64_t r) {
    if (r >= bits_.size()) bits_.resize(r + 1, 0);
    if (!bits_[r]) bits_[r] = 1, ++count_;
  }
  void erase(uint64_t r) {
    if (present(r)) bits_[r] = 0, --count_;
  }
  uint64_t count() const { return count_; }
  uint64_t id_limit() const { return bits_.size(); }
  void reserve(uint64_t n) { bits_.reserve(n); }

 private:
  std::vector<uint8_t> bits_;
  uint64_t count_ = 0;
};

// ---- one workload ------------------------------------------------------------------------------

struct Row {
  std::string workload, distribution;
  uint64_t operations = 0, table_ops = 0;
  double seconds = 0, device_seconds = 0;
  std::vector<double> batch_seconds;
  uint64_t not_found = 0, bad_values = 0, failed_writes = 0, found_absent = 0, erases_left_behind = 0;
  uint64_t items_after = 0, expected_items_after = 0, resizes = 0;
  std::optional<uint64_t> lost_after;
  double load_factor_after = 0;

  // As gphash's RunResult::batch_percentile.
  double batch_percentile(double q) const {
    if (batch_seconds.empty()) return 0;
    std::vector<double> v = batch_seconds;
    const size_t k = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
    return v[k];
  }
};

class Harness {
 public:
  Harness(const Config& c, HkvTable& table, cudaStream_t stream)
      : c_(c),
        table_(table),
        stream_(stream),
        vw_(c.value_width),
        dim_(c.value_width / 4),
        n_(c.batch),
        check_n_(std::max<size_t>(n_, kAuditChunk)),
        h_wkeys_(n_), h_akeys_(c.update_op == "assign" ? n_ : 0), h_rkeys_(n_), h_ekeys_(n_),
        h_wvals_(n_ * dim_), h_avals_(c.update_op == "assign" ? n_ * dim_ : 0), h_rvals_(n_ * dim_),
        h_found_(check_n_),
        d_wkeys_(n_), d_akeys_(c.update_op == "assign" ? n_ : 0), d_rkeys_(n_), d_ekeys_(n_),
        d_wvals_(n_ * dim_), d_avals_(c.update_op == "assign" ? n_ * dim_ : 0), d_rvals_(n_ * dim_),
        d_found_(n_), d_check_keys_(kAuditChunk), d_check_found_(check_n_), d_ptrs_(check_n_) {
    check(cudaEventCreate(&e0_), "cudaEventCreate");
    check(cudaEventCreate(&e1_), "cudaEventCreate");
    wops_.resize(n_);
    rrecords_.resize(n_);
  }
  ~Harness() {
    cudaEventDestroy(e0_);
    cudaEventDestroy(e1_);
  }
  Harness(const Harness&) = delete;
  Harness& operator=(const Harness&) = delete;

  Row run(wl::Workload w, size_t index) {
    const wl::WorkloadSpec spec{w, w == wl::Workload::Load ? c_.records : model_.count(), c_.operations,
                                c_.distribution, c_.theta, 1 + index};
    wl::WorkloadGenerator gen(spec);
    Row r;
    r.workload = std::string(wl::name(w));
    r.distribution = w == wl::Workload::Load ? "-" : std::string(wl::name(gen.distribution()));
    const bool assign_updates = c_.update_op == "assign";
    const uint64_t capacity_before = table_.capacity();
    // As gphash's run_workload: LOAD's versions from 0, others from 1 + seed * 2^40.
    uint64_t version = w == wl::Workload::Load ? 0 : 1 + spec.seed * (uint64_t{1} << 40);
    model_.reserve(spec.record_count + (w == wl::Workload::D ? c_.operations : 0));

    for (;;) {
      const size_t got = gen.next(std::span<wl::Op>(wops_));
      if (got == 0) break;
      size_t nw = 0, na = 0, nr = 0, ne = 0;
      auto write = [&](uint64_t record, bool as_assign) {
        std::byte* v;
        if (as_assign) {
          h_akeys_[na] = wl::key_word(record);
          v = reinterpret_cast<std::byte*>(h_avals_.get()) + na++ * vw_;
        } else {
          h_wkeys_[nw] = wl::key_word(record);
          v = reinterpret_cast<std::byte*>(h_wvals_.get()) + nw++ * vw_;
        }
        wl::make_value(record, version++, static_cast<uint32_t>(vw_), v);
      };
      auto read = [&](uint64_t record) {
        rrecords_[nr] = record;
        h_rkeys_[nr++] = wl::key_word(record);
      };
      for (size_t i = 0; i < got; ++i) {
        const wl::Op& op = wops_[i];
        switch (op.type) {
          case wl::OpType::Read:
          case wl::OpType::ReadAbsent: read(op.record); break;
          case wl::OpType::Update: write(op.record, assign_updates); break;
          case wl::OpType::Insert:
            write(op.record, false);
            model_.insert(op.record);
            break;
          case wl::OpType::ReadModifyWrite:
            read(op.record);
            write(op.record, assign_updates);
            break;
          case wl::OpType::Delete:
            h_ekeys_[ne++] = wl::key_word(op.record);
            model_.erase(op.record);
            break;
        }
      }
      // Into GPU memory, untimed.
      copy_in(d_wkeys_.get(), h_wkeys_.get(), nw * 8);
      copy_in(d_wvals_.get(), h_wvals_.get(), nw * vw_);
      copy_in(d_akeys_.get(), h_akeys_.get(), na * 8);
      copy_in(d_avals_.get(), h_avals_.get(), na * vw_);
      copy_in(d_rkeys_.get(), h_rkeys_.get(), nr * 8);
      copy_in(d_ekeys_.get(), h_ekeys_.get(), ne * 8);
      // An erase of a key that is not there would fail in gphash (kNotFound): a failed write.
      if (ne) r.failed_writes += ne - count_found(d_ekeys_.get(), ne);
      check(cudaStreamSynchronize(stream_), "synchronize before the batch");

      // The timed batch: writes, erases, reads.
      check(cudaEventRecord(e0_, stream_), "cudaEventRecord");
      const auto t0 = Clock::now();
      if (nw) table_.insert_or_assign(nw, d_wkeys_.get(), d_wvals_.get(), nullptr, stream_);
      if (na) table_.assign(na, d_akeys_.get(), d_avals_.get(), nullptr, stream_);
      if (ne) table_.erase(ne, d_ekeys_.get(), stream_);
      if (nr) table_.find(nr, d_rkeys_.get(), d_rvals_.get(), d_found_.get(), nullptr, stream_);
      check(cudaEventRecord(e1_, stream_), "cudaEventRecord");
      check(cudaStreamSynchronize(stream_), "the HKV batch");
      const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
      check(cudaGetLastError(), "the HKV batch");
      float device_ms = 0;
      check(cudaEventElapsedTime(&device_ms, e0_, e1_), "cudaEventElapsedTime");
      r.seconds += dt;
      r.device_seconds += device_ms / 1e3;
      r.batch_seconds.push_back(dt);
      r.operations += got;
      r.table_ops += nw + na + nr + ne;

      // Results back and checked, untimed.
      if (nr) {
        check(cudaMemcpyAsync(h_found_.get(), d_found_.get(), nr, cudaMemcpyDeviceToHost, stream_), "founds");
        check(cudaMemcpyAsync(h_rvals_.get(), d_rvals_.get(), nr * vw_, cudaMemcpyDeviceToHost, stream_), "values");
        check(cudaStreamSynchronize(stream_), "copy results");
        const auto* values = reinterpret_cast<const std::byte*>(h_rvals_.get());
        for (size_t i = 0; i < nr; ++i) {
          if (rrecords_[i] >= wl::kAbsentRecordBase) {
            if (h_found_[i]) ++r.found_absent;
          } else if (!h_found_[i]) {
            ++r.not_found;
          } else if (!wl::check_value(rrecords_[i], values + i * vw_, static_cast<uint32_t>(vw_), nullptr)) {
            ++r.bad_values;
          }
        }
      }
      if (nw) r.failed_writes += nw - count_found(d_wkeys_.get(), nw);
      if (na) r.failed_writes += na - count_found(d_akeys_.get(), na);
      if (ne) r.erases_left_behind += count_found(d_ekeys_.get(), ne);
    }

    r.items_after = table_.size(stream_);
    r.expected_items_after = model_.count();
    r.load_factor_after = static_cast<double>(r.items_after) / static_cast<double>(table_.capacity());
    r.resizes = table_.capacity() != capacity_before ? 1 : 0;
    if (c_.audit) r.lost_after = audit();
    return r;
  }

 private:
  void copy_in(void* dst, const void* src, size_t bytes) {
    if (bytes) check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "copy the batch in");
  }

  // How many of n keys (in GPU memory) HKV finds now; untimed. Uses the find that returns value
  // addresses, so no values move.
  uint64_t count_found(const uint64_t* d_keys, size_t n) {
    table_.find(n, d_keys, d_ptrs_.get(), d_check_found_.get(), nullptr, stream_);
    check(cudaMemcpyAsync(h_found_.get(), d_check_found_.get(), n, cudaMemcpyDeviceToHost, stream_), "founds");
    check(cudaStreamSynchronize(stream_), "check find");
    uint64_t found = 0;
    for (size_t i = 0; i < n; ++i) found += h_found_[i] ? 1 : 0;
    return found;
  }

  // Records that should exist but HKV does not find.
  uint64_t audit() {
    std::vector<uint64_t> keys;
    keys.reserve(kAuditChunk);
    uint64_t missing = 0;
    auto flush = [&] {
      if (keys.empty()) return;
      check(cudaMemcpyAsync(d_check_keys_.get(), keys.data(), keys.size() * 8, cudaMemcpyHostToDevice, stream_),
            "audit keys");
      missing += keys.size() - count_found(d_check_keys_.get(), keys.size());
      keys.clear();
    };
    for (uint64_t r = 0; r < model_.id_limit(); ++r) {
      if (!model_.present(r)) continue;
      keys.push_back(wl::key_word(r));
      if (keys.size() == kAuditChunk) flush();
    }
    flush();
    return missing;
  }

  const Config& c_;
  HkvTable& table_;
  cudaStream_t stream_;
  const size_t vw_, dim_, n_, check_n_;
  Model model_;
  std::vector<wl::Op> wops_;
  std::vector<uint64_t> rrecords_;
  PinnedArray<uint64_t> h_wkeys_, h_akeys_, h_rkeys_, h_ekeys_;
  PinnedArray<float> h_wvals_, h_avals_, h_rvals_;
  PinnedArray<bool> h_found_;
  DeviceArray<uint64_t> d_wkeys_, d_akeys_, d_rkeys_, d_ekeys_;
  DeviceArray<float> d_wvals_, d_avals_, d_rvals_;
  DeviceArray<bool> d_found_;
  DeviceArray<uint64_t> d_check_keys_;
  DeviceArray<bool> d_check_found_;
  DeviceArray<float*> d_ptrs_;
  cudaEvent_t e0_ = nullptr, e1_ = nullptr;
};

std::string row_json(const Row& r, const Config& c) {
  const auto ops = static_cast<double>(r.operations);
  JsonObject o;
  o.str("workload", r.workload)
      .str("distribution", r.distribution)
      .num("operations", r.operations)
      .num("ops_per_second", r.seconds > 0 ? ops / r.seconds : 0.0)
      .num("batch_p50_seconds", r.batch_percentile(0.5))
      .num("batch_p99_seconds", r.batch_percentile(0.99))
      .num("not_found", r.not_found)
      .num("bad_values", r.bad_values)
      .num("failed_writes", r.failed_writes)
      .num("found_absent", r.found_absent)
      .num("items_after", r.items_after)
      .num("load_factor_after", r.load_factor_after)
      .num("resizes", r.resizes)
      .str("mode", c.mode)
      .str("system", "hkv")
      .num("device_ops_per_second", r.device_seconds > 0 ? ops / r.device_seconds : 0.0)
      .num("seconds", r.seconds)
      .num("device_seconds", r.device_seconds)
      .num("table_ops", r.table_ops)
      .num("expected_items_after", r.expected_items_after)
      .add("lost_after", r.lost_after ? json_number(*r.lost_after) : "null")
      .num("erases_left_behind", r.erases_left_behind);
  return o.text();
}

void write_json(const std::string& path, const std::string& config, const std::vector<std::string>& rows) {
  std::string text = "{\"config\": " + config + ",\n \"results\": [";
  for (size_t i = 0; i < rows.size(); ++i) text += (i ? ",\n  " : "\n  ") + rows[i];
  text += "\n ]}\n";
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) throw std::runtime_error("cannot write " + tmp + ": " + std::strerror(errno));
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
  }
}

int run(const Config& c) {
  // HKV reserves the keys 0xFFFFFFFFFFFFFFFC .. 0xFFFFFFFFFFFFFFFF (IS_RESERVED_KEY); no valid
  // record may map to one (records.h maps all four only from ids >= 2^63).
  for (uint64_t k = 0xFFFFFFFFFFFFFFFCULL;; ++k) {
    if (wl::record_of_key_word(k)) {
      throw std::runtime_error("a valid record id maps to HKV's reserved key " + std::to_string(k) +
                               ": the key mix of records.h changed; remap such keys here");
    }
    if (k == 0xFFFFFFFFFFFFFFFFULL) break;
  }

  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  size_t free_before = 0, free_after = 0, total = 0;
  check(cudaMemGetInfo(&free_before, &total), "cudaMemGetInfo");

  nv::merlin::HashTableOptions options;
  options.init_capacity = c.slots;
  options.max_capacity = c.slots;  // init == max: HKV never grows during the run
  options.max_bucket_size = kBucketSize;
  options.dim = c.value_width / 4;
  options.max_hbm_for_vectors = c.mode == "gpu" ? c.slots * c.value_width : 0;
  options.max_load_factor = 1.0f;  // irrelevant without growth
  options.evict_strategy = nv::merlin::EvictStrategy::kLru;
  options.device_id = device;
  HkvTable table;
  table.init(options);
  check(cudaMemGetInfo(&free_after, &total), "cudaMemGetInfo");
  cudaStream_t stream = nullptr;
  check(cudaStreamCreate(&stream), "cudaStreamCreate");

  JsonObject config;
  config.str("system", "hkv")
      .str("hkv_source", "merlin-sok 2.1.0 sdist, third_party/HierarchicalKV")
      .str("mode", c.mode)
      .str("device", prop.name)
      .num("records", c.records)
      .num("operations", c.operations)
      .num("batch", c.batch)
      .num("key_width", c.key_width)
      .num("value_width", c.value_width)
      .num("dim", c.value_width / 4)
      .num("capacity_items", c.capacity)
      .num("slots", static_cast<uint64_t>(table.capacity()))
      .num("bucket_size", static_cast<uint64_t>(kBucketSize))
      .num("target_load_factor", c.target_load_factor)
      .num("max_hbm_for_vectors", static_cast<uint64_t>(options.max_hbm_for_vectors))
      .num("table_gpu_bytes", static_cast<uint64_t>(free_before > free_after ? free_before - free_after : 0))
      .str("update_op", c.update_op)
      .str("workloads", c.workloads_text)
      .str("distribution", c.distribution ? std::string(wl::name(*c.distribution)) : "default")
      .num("theta", c.theta)
      .str("order_in_batch", "writes, erases, reads");
  std::printf("hkv (%s): %s; %llu slots (%llu buckets of %zu), dim %llu, values in %s, table holds %.1f MB of GPU "
              "memory; %llu records, %llu operations, batch %llu\n",
              c.mode.c_str(), prop.name, static_cast<unsigned long long>(table.capacity()),
              static_cast<unsigned long long>(table.capacity() / kBucketSize), kBucketSize,
              static_cast<unsigned long long>(c.value_width / 4), c.mode == "gpu" ? "GPU memory" : "pinned host memory",
              static_cast<double>(free_before > free_after ? free_before - free_after : 0) / 1e6,
              static_cast<unsigned long long>(c.records), static_cast<unsigned long long>(c.operations),
              static_cast<unsigned long long>(c.batch));
  std::fflush(stdout);

  std::vector<std::string> rows;
  {
    Harness harness(c, table, stream);
    for (size_t i = 0; i < c.workloads.size(); ++i) {
      Row r;
      try {
        r = harness.run(c.workloads[i], i);
      } catch (const std::invalid_argument& e) {  // a spec the generator cannot run
        throw ArgError(std::string(wl::name(c.workloads[i])) + ": " + e.what());
      }
      const double mops = r.seconds > 0 ? static_cast<double>(r.operations) / r.seconds / 1e6 : 0;
      const double dmops = r.device_seconds > 0 ? static_cast<double>(r.operations) / r.device_seconds / 1e6 : 0;
      std::string lost = r.lost_after ? std::to_string(*r.lost_after) : std::string("not audited");
      std::printf("hkv (%s): %-16s %8.2f M/s (device %.2f M/s), p99 batch %.3f ms; not found %llu, bad values %llu, "
                  "failed writes %llu, absent found %llu; items %llu (expected %llu, lost %s)\n",
                  c.mode.c_str(), r.workload.c_str(), mops, dmops, 1e3 * r.batch_percentile(0.99),
                  static_cast<unsigned long long>(r.not_found), static_cast<unsigned long long>(r.bad_values),
                  static_cast<unsigned long long>(r.failed_writes), static_cast<unsigned long long>(r.found_absent),
                  static_cast<unsigned long long>(r.items_after),
                  static_cast<unsigned long long>(r.expected_items_after), lost.c_str());
      std::fflush(stdout);
      rows.push_back(row_json(r, c));
      if (!c.json_path.empty()) write_json(c.json_path, config.text(), rows);
    }
  }
  cudaStreamDestroy(stream);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  try {
    c = parse_args(argc, argv);
  } catch (const ArgError& e) {
    std::fprintf(stderr, "hkv_bench: %s (hkv_bench --help lists the options)\n", e.what());
    return 2;
  }
  // Load every kernel when the context is made, not inside a timed batch (unless the caller chose).
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  try {
    return run(c);
  } catch (const ArgError& e) {
    std::fprintf(stderr, "hkv_bench: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hkv_bench: failed: %s\n", e.what());
    return 1;
  }
}
