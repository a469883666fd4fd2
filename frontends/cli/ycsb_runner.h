// Runs a YCSB workload stream against a Table in batches and measures it. Shared by the CLI's
// load, run and bench commands.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gphash/table.h"
#include "workload/ycsb.h"

namespace gphash::cli {

struct RunOptions {
  size_t batch_size = 1 << 16;
  bool verify_values = true;  // check every found value's self-check (records.h)
  std::function<void(uint64_t done, uint64_t total)> progress;
  // Runs a batch in place of table.execute(batch) and returns the seconds it counts (a benchmark
  // that moves the batch somewhere first, e.g. the CPU-assisted system of GPHash's evaluation).
  std::function<double(Table& table, const Batch& batch)> execute;
};

struct RunResult {
  std::string workload;
  std::string distribution;
  uint64_t operations = 0;  // YCSB operations (a read-modify-write counts once)
  uint64_t table_ops = 0;   // table operations (a read-modify-write is a search and an update)
  double seconds = 0;       // time inside Table::execute, summed over batches
  double wall_seconds = 0;  // including generating keys and values
  double device_seconds = 0;  // GPU engine: device time of the batches (kernels and copies)
  // GPU engine, the device time by stage: plan (hash + sort), the parallel kernel, the exclusive
  // slow path (displacement, resize, heap growth, reclaiming freed value cells).
  double plan_seconds = 0, kernel_seconds = 0, slow_seconds = 0;
  uint64_t heap_grows = 0, displacements = 0;
  double resize_seconds = 0, heap_grow_seconds = 0;  // of the slow path's time: growing the table and the heap
  double rehash_seconds = 0;                          // of resize_seconds: moving items up a level
  std::vector<double> batch_seconds;
  uint64_t not_found = 0;      // searches of records that exist but were not found
  uint64_t found_absent = 0;   // negative searches that did not return kNotFound
  uint64_t bad_values = 0;     // found values that fail their self-check
  uint64_t failed_writes = 0;  // inserts and updates that did not return kOk
  uint64_t items_after = 0;
  double load_factor_after = 0;
  uint64_t resizes = 0;
  // GPU engine with BktCache: operations on existing keys served from a cached bucket, of all of
  // them, during this run (-1: no cache); the GPU memory the cache held at the end.
  double cache_hit_rate = -1;
  uint64_t cache_gpu_bytes = 0;
  uint64_t cache_lines_loaded = 0;  // lines the cache's phases read from host memory during the run
  // After each batch: operations so far, batch-call seconds so far, the table's load factor, and
  // the cache's lookups and hits in that batch (the evaluation's load factor during LOAD and
  // throughput while the cache loads).
  struct Sample {
    uint64_t operations = 0;
    double seconds = 0, load_factor = 0;
    uint64_t cache_lookups = 0, cache_hits = 0;
  };
  std::vector<Sample> timeline;
  // BktCache: the batches that ran while a loading phase filled lines beside them or switched to
  // them (TableInfo::last_batch_cache_loading): their operations and device seconds.
  uint64_t loading_operations = 0;
  double loading_device_seconds = 0;

  double ops_per_second() const { return seconds > 0 ? static_cast<double>(operations) / seconds : 0; }
  double device_ops_per_second() const {
    return device_seconds > 0 ? static_cast<double>(operations) / device_seconds : 0;
  }
  double batch_percentile(double q) const;
  // Device-time rates of the batches beside a loading phase and of the others (0 if none).
  double loading_device_ops_per_second() const;
  double steady_device_ops_per_second() const;
};

RunResult run_workload(Table& table, const workload::WorkloadSpec& spec, const RunOptions& options);

}  // namespace gphash::cli
