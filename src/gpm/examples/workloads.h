// Workloads of the GPM paper's suite on libGPM, each with what a crash test needs to verify it
// (tests/gpm_gpu_test.cpp, tests/crash/gpm_crash_test.cpp, bench/gpm_bench.cpp):
//   Kvs         gpKVS: a Mega-KV-style store of 8-way buckets (8-byte keys and values) in a region,
//               every SET a transaction (key and value words) on an undo or redo log, HCL or
//               conventional. The way a key takes is chosen in GPU memory (a mirror of the bucket
//               keys, rebuilt from the pool at open); the table itself is in the pool. This is the
//               logging-based baseline for gphash's log-free index.
//   Db          gpDB: rows of 8 columns; an INSERT writes a whole row, an UPDATE 4 columns of a row,
//               each a transaction.
//   prefix_sum  native persistence: an inclusive prefix sum written in place into the pool with a
//               persist barrier, then a per-block done flag, so a rerun after a crash redoes only the
//               blocks not done; and the CPU-assisted variant (the GPU computes in GPU memory, the
//               result is copied to the host, the CPU writes and persists it into the pool).
//   Solver      checkpointing: an iterative stencil in GPU memory that checkpoints its state and its
//               iteration counter every K iterations, and resumes from the last checkpoint.
// Keys, values and all data are 64-bit words; the functions below say what each writes, so a
// verifier can recompute it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "format/hd.h"
#include "gpm/device.h"
#include "gpm/gpm.h"

namespace gphash::gpm::workloads {

struct LogChoice {
  LogLayout layout = kLayoutHcl;
  LogMode mode = kModeUndo;
};
const char* to_string(const LogChoice& c);  // "hcl-undo", ...

// Launch geometry: every transactional kernel runs blocks * threads threads (the log's slots), each
// in a grid-stride loop over its batch.
struct Launch {
  uint32_t blocks = 264;  // 2 per SM of an H100 SXM
  uint32_t threads = 256;
  uint64_t slots() const { return uint64_t{blocks} * threads; }
};

inline constexpr uint32_t kWays = 8;

class Kvs {
 public:
  // create: makes region NAME.table (buckets * 8 ways * 16 bytes) and log NAME.log sized for
  // batches of up to max_batch SETs; otherwise opens them (the pool has been recovered).
  Kvs(GpmPool& gp, DeviceGpm& dev, const std::string& name, bool create, uint64_t buckets, LogChoice log,
      uint64_t max_batch, Launch launch = {});
  ~Kvs();
  // SET of n distinct nonzero keys (device arrays). Returns how many found no room (the 8 ways of
  // both their buckets were taken). Durable when it returns.
  uint64_t set(const uint64_t* d_keys, const uint64_t* d_values, uint64_t n, cudaStream_t stream);
  // GET: values (0 when absent) into d_values, read from the pool.
  void get(const uint64_t* d_keys, uint64_t* d_values, uint64_t n, cudaStream_t stream);
  uint64_t buckets() const { return buckets_; }
  // The table in the pool: bucket b holds keys at words [16 b, 16 b + 8), values after them.
  const uint64_t* table() const { return table_; }
  // A key's two candidate buckets (Mega-KV's two hash functions). A new key goes to the one with
  // fewer keys: with one bucket, 8-way buckets overflow from about 30% load (a simulation of
  // 2^16 buckets: 370 of 200,000 keys find no room), with the emptier of two not below 55%.
  GPHASH_HD static uint64_t bucket_of(uint64_t key, uint64_t buckets, int which = 0) {
    uint64_t h = (key ^ (which ? 0x5851F42D4C957F2Dull : 0)) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
    return h % buckets;
  }

 private:
  GpmPool& gp_;
  DeviceGpm& dev_;
  LogInfo log_;
  Launch launch_;
  uint64_t buckets_;
  uint64_t* table_ = nullptr;      // pool (device address == host address)
  uint64_t* mirror_ = nullptr;     // GPU memory: the bucket keys
  unsigned long long* counters_ = nullptr;  // GPU memory: [0] no room
};

class Db {
 public:
  static constexpr uint32_t kColumns = 8;
  Db(GpmPool& gp, DeviceGpm& dev, const std::string& name, bool create, uint64_t rows, LogChoice log, uint64_t max_batch,
     Launch launch = {});
  // INSERT rows [first, first + n): column c of row r = row_value(r, c, stamp).
  void insert(uint64_t first, uint64_t n, uint64_t stamp, cudaStream_t stream);
  // UPDATE n rows, row (first + i * stride) % rows for i < n (stride odd and rows a power of two,
  // so they are distinct): columns 0..3 = row_value(row, c, stamp).
  void update(uint64_t first, uint64_t stride, uint64_t n, uint64_t stamp, cudaStream_t stream);
  const uint64_t* table() const { return table_; }
  uint64_t rows() const { return rows_; }
  GPHASH_HD static uint64_t row_value(uint64_t row, uint32_t column, uint64_t stamp) {
    return (row * 0x9E3779B97F4A7C15ull) ^ (uint64_t{column} << 56) ^ (stamp << 20) ^ 1;
  }

 private:
  GpmPool& gp_;
  DeviceGpm& dev_;
  LogInfo log_;
  Launch launch_;
  uint64_t rows_;
  uint64_t* table_ = nullptr;
};

// The input of the prefix sums: element i.
uint64_t scan_input(uint64_t i);
// Native persistence: region NAME.out (n words) and NAME.done (one word per 1024-element block)
// in the pool; `run` (nonzero, new for each computation) marks the blocks done; blocks already
// done for `run` are skipped, so calling it again after a crash finishes the work. Returns the
// number of blocks computed.
uint64_t prefix_sum_native(GpmPool& gp, DeviceGpm& dev, const std::string& name, uint64_t n, uint64_t run,
                           cudaStream_t stream);
// CPU-assisted: the same sum computed into GPU memory, copied to a pinned host buffer, written by the
// CPU into region NAME.out and persisted.
void prefix_sum_cpu_assisted(GpmPool& gp, const std::string& name, uint64_t n, cudaStream_t stream);
inline constexpr uint64_t kScanBlock = 1024;

// Checkpointing: a stencil over n words, x'[i] = x[i-1] + 2 x[i] + x[i+1] + t (wrapping, 64-bit),
// checkpointed with its iteration counter every `every` iterations into group NAME.
class Solver {
 public:
  Solver(GpmPool& gp, DeviceGpm& dev, const std::string& name, bool create, uint64_t n);
  ~Solver();
  // Restores the last checkpoint (if any) and returns the iteration it holds (0 without one).
  uint64_t restore(cudaStream_t stream);
  // Runs until `iterations`, checkpointing every `every`. Returns the checkpoints taken.
  uint64_t run(uint64_t iterations, uint64_t every, cudaStream_t stream);
  std::vector<uint64_t> state() const;  // copy of the current x
  uint64_t iteration() const { return iteration_; }
  // The reference on the CPU.
  static std::vector<uint64_t> reference(uint64_t n, uint64_t iterations);

 private:
  GpmPool& gp_;
  std::unique_ptr<DeviceCheckpoint> cp_;
  uint64_t n_;
  uint64_t* x_ = nullptr;    // GPU memory
  uint64_t* y_ = nullptr;
  uint64_t* it_ = nullptr;   // GPU memory: the iteration counter (checkpointed with x)
  uint64_t iteration_ = 0;
};

}  // namespace gphash::gpm::workloads
