// A sharded table (OpenOptions::shards, issue 13): one gphash Table per shard, each in its own pool
// (NAME.shard0 .. NAME.shard<n-1>) and run by its own worker thread on its own GPU; the facade
// routes every operation to the shard of its key and gathers the results in batch order. Internal:
// users see a Table.
//
// Routing: format::shard_of (src/format/shard_of.h), a hash of the key under a fixed seed, the
// same in every process and on host and device.
//
// Semantics. A key always goes to one shard, and each shard gets its entries in batch order, so
// the operations on one key still take effect in batch order (gphash/ops.h): a batch on a sharded
// table gives exactly the results it gives on one table. Writing batches hold the whole set (one
// at a time, as on one table); searching batches may run together.
//
// Batches in host memory: the calling thread routes, each worker gathers its shard's entries
// from the caller's arrays and scatters its results back (each GPU engine copies its own
// sub-batch over PCIe, as for one table). Batches in GPU memory stay on the GPUs: the GPU holding
// the batch routes it (engine::gpu::DeviceRouter, a kernel and a radix sort), each shard on
// another GPU gets its part by a peer copy (NVLink where there is one) and returns its results
// the same way, and the routing GPU scatters them into the batch's arrays in batch order. Device
// batches on a sharded table run one at a time and synchronously (execute_async returns a
// completed event); device sessions need one table and are refused.
//
// Recovery and resizing are per shard (each shard's open recovers its pool; each grows on its
// own). A failed call on one shard leaves the others as they are: as on one table, a batch cut
// short may have applied any subset of its operations.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gphash/table.h"

namespace gphash {

// The shard (0 .. n-1) of a key of `key_width` bytes.
uint32_t shard_of(const void* key, uint32_t key_width, uint32_t n);
// The pool of shard k of the sharded table `pool` ("mem:" stays "mem:": each shard is anonymous).
std::string shard_pool(const std::string& pool, uint32_t k);

// One thread that runs every call on one shard, in submission order, with the shard's GPU current
// (the GPU engine uses whichever device is current on the calling thread).
class ShardWorker {
 public:
  explicit ShardWorker(std::optional<int> gpu);
  ~ShardWorker();
  ShardWorker(const ShardWorker&) = delete;
  ShardWorker& operator=(const ShardWorker&) = delete;
  std::future<void> submit(std::function<void()> task);

 private:
  void run(std::optional<int> gpu);
  std::mutex mutex_;
  std::condition_variable wake_;
  struct Task {
    std::function<void()> run;
    std::promise<void> done;
  };
  std::deque<Task> tasks_;
  bool stopping_ = false;
  std::thread thread_;
};

class ShardSet {
 public:
  static std::unique_ptr<Table::Impl> create(const std::string& pool, const TableConfig& config,
                                             const OpenOptions& options);
  static std::unique_ptr<Table::Impl> open(const std::string& pool, const OpenOptions& options);
  ~ShardSet();  // closes every shard (on its worker)

  uint32_t count() const { return static_cast<uint32_t>(shards_.size()); }
  void execute(const Batch& batch);
  uint64_t size();
  uint32_t key_width();
  uint32_t value_width();
  TableInfo info();
  size_t export_items(ExportCursor& cursor, void* keys, void* values, size_t capacity, MemorySpace memory);
  TableStats stats();
  CheckResult check(int threads);
  void save();
  void close();
  SnapshotResult snapshot(const std::string& path);
  // Shard k's table: for what needs no routing (the attachment, which a sharded table keeps in
  // shard 0's pool).
  Table& shard(uint32_t k) { return *shards_[k].table; }

 private:
  struct PeerStage;  // a shard's arrays on its GPU for device batches routed on another GPU
  struct DeviceRouting;  // the routing of device batches, on the GPU that holds them
  struct Shard {
    std::unique_ptr<ShardWorker> worker;  // declared first: destroyed last, after the table
    std::optional<Table> table;
    std::unique_ptr<PeerStage> peer;  // made and released on the worker (its GPU current)
  };
  ShardSet(std::string pool, const OpenOptions& options);
  // Runs f(k, table of shard k) on every shard's worker at once and waits for all; then rethrows
  // the first failure (a kShardMismatch before any other, so a wrong count reads as such).
  void on_each(const std::function<void(uint32_t, std::optional<Table>&)>& f);
  void execute_on_host(const Batch& b);
  void execute_on_device(const Batch& b);
  std::string pool_;
  OpenOptions options_;
  std::vector<Shard> shards_;
  std::mutex device_batches_;  // device batches run one at a time: they share the routing arrays
  std::unique_ptr<DeviceRouting> routing_;
};

}  // namespace gphash
