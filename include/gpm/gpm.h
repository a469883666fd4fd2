// libGPM, host side: a GPM pool and what lives in it. Plain C++ (no CUDA): recovery and
// checkpoint restore run on the CPU, so they build and are tested without a GPU.
//
// A GPM pool is a pool (src/pool) of index kind 3 whose header section is a directory of named
// objects (docs/FORMAT.md section 13): regions that kernels update in place, logs (HCL or
// conventional, undo or redo) for transactions, and checkpoint groups. The device side is
// gpm/device.h (maps the objects for kernels), gpm/transaction.h (the kernel transaction API) and
// gpm/persist.cuh (the persist barrier).
//
//   auto gp = gpm::GpmPool::create("mydata");            // or open(): recovers every log first
//   gpm::Region r = gp->create_region("table", bytes);
//   gpm::LogInfo log = gp->create_log("txlog", {.layout = kLayoutHcl, .mode = kModeUndo, .slots = n});
//   gpm::GroupInfo g = gp->create_group("weights", {bytes_w, bytes_b});
//
// Durability (DESIGN.md section 3): with the pool in /dev/shm every store a kernel made durable with
// the persist barrier survives the death of the process; on device-DAX or CXL memory the same path
// survives power loss (with DDIO off or eADR). After a crash, open() leaves every logged transaction
// wholly done or wholly undone, and every checkpoint group at its last completed checkpoint.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "format/gpm/checkpoint.h"
#include "format/gpm/log.h"
#include "format/gpm/meta.h"
#include "pool/pool.h"

namespace gphash::gpm {

using format::gpm::LogLayout;
using format::gpm::LogMode;
using format::gpm::kLayoutConventional;
using format::gpm::kLayoutHcl;
using format::gpm::kModeRedo;
using format::gpm::kModeUndo;

struct Region {
  std::string name;
  uint64_t offset = 0;  // pool offset
  uint64_t bytes = 0;
  std::byte* host = nullptr;  // where it is mapped in this process
};

struct LogOptions {
  LogLayout layout = kLayoutHcl;
  LogMode mode = kModeUndo;
  // Transaction slots: the threads (blocks * threads per block) of the launches that use the log.
  // HCL: a multiple of 32. Conventional: a multiple of partition_threads.
  uint64_t slots = 0;
  uint32_t entries_per_slot = 8;  // the most words one transaction writes (1..255)
  // Conventional only: threads per partition (the block size), and entries per partition: room
  // for all the transactions those threads commit in one launch.
  uint32_t partition_threads = 256;
  uint64_t partition_entries = 0;
};

struct LogInfo {
  std::string name;
  uint64_t offset = 0;
  uint64_t bytes = 0;
  format::gpm::LogHeader header{};
};

struct GroupInfo {
  std::string name;
  uint64_t offset = 0;
  uint64_t bytes = 0;
  format::gpm::GroupHeader header{};
};

// What recovery of one log did.
struct RecoveryReport {
  uint64_t rolled_back = 0;    // undo: unfinished transactions undone
  uint64_t undone_writes = 0;
  uint64_t replayed = 0;       // redo: committed transactions whose writes were applied again
  uint64_t redone_writes = 0;
  uint64_t discarded = 0;      // redo: uncommitted transactions dropped (nothing was written in place)
  uint64_t torn_entries = 0;   // entries of an unfinished transaction that failed their check
};

struct CheckpointState {
  uint64_t sequence = 0;  // 0: no checkpoint was ever completed
  uint32_t copy = 0;      // the valid copy (meaningless when sequence is 0)
};

class GpmPool {
 public:
  // Creates a GPM pool at `spec` (pool::resolve_location: "NAME" is /dev/shm/NAME, "mem:" is
  // anonymous memory, a path on hugetlbfs or device-DAX works as well).
  static std::unique_ptr<GpmPool> create(const std::string& spec, const pool::CreateOptions& options = {});
  // Opens one and, unless read-only, recovers every log (recovery_reports() says what it did).
  // A pool of another index kind, or a damaged GPM section or log header, is a typed error.
  static std::unique_ptr<GpmPool> open(const std::string& spec, const pool::OpenOptions& options = {});
  ~GpmPool();
  GpmPool(const GpmPool&) = delete;
  GpmPool& operator=(const GpmPool&) = delete;

  pool::Pool& pool() const { return *pool_; }

  // Regions: zero-filled when created.
  Region create_region(const std::string& name, uint64_t bytes);
  Region region(const std::string& name) const;

  LogInfo create_log(const std::string& name, const LogOptions& options);
  LogInfo log(const std::string& name) const;
  // Before each launch that commits transactions on the log: bumps and persists its epoch (the
  // high bits of every sequence number the launch writes) and returns it.
  uint64_t begin_launch(const LogInfo& log);
  uint64_t epoch(const LogInfo& log) const;
  // Recovery of one log (CPU): rolls back unfinished undo transactions, replays committed redo
  // ones, drops uncommitted redo ones; then marks every slot finished. Idempotent, and a crash in
  // the middle of it is recovered by running it again.
  RecoveryReport recover(const LogInfo& log);
  const std::vector<std::pair<std::string, RecoveryReport>>& recovery_reports() const { return reports_; }
  uint64_t* log_state(const LogInfo& log) const;
  uint64_t* log_entries(const LogInfo& log) const;

  // Checkpoint groups: the elements' sizes are fixed at creation; a restore relies on their order,
  // as the paper's gpmcp_register does.
  GroupInfo create_group(const std::string& name, const std::vector<uint64_t>& element_bytes);
  GroupInfo group(const std::string& name) const;
  CheckpointState valid_checkpoint(const GroupInfo& g) const;
  // Element `e` of copy `copy` in the pool.
  std::byte* element(const GroupInfo& g, uint32_t copy, uint32_t e) const;
  // The last step of a checkpoint whose copy `copy` is written and persisted: writes and persists
  // the record naming it, with sequence `sequence` (the valid one's plus one).
  void commit_checkpoint(const GroupInfo& g, uint32_t copy, uint64_t sequence);
  // A whole checkpoint from host memory (one source per element), and a restore into host
  // memory; the GPU path is gpm::DeviceCheckpoint (gpm/device.h).
  CheckpointState checkpoint_from_host(const GroupInfo& g, const std::vector<const void*>& sources);
  CheckpointState restore_to_host(const GroupInfo& g, const std::vector<void*>& destinations) const;

 private:
  explicit GpmPool(std::unique_ptr<pool::Pool> pool) : pool_(std::move(pool)) {}
  const format::gpm::Object& find(const std::string& name, uint32_t kind) const;
  // Allocates the object's extent, runs `init` on it, then persists a pool header naming it.
  uint64_t add_object(const std::string& name, uint32_t kind, uint64_t bytes, const std::function<void(std::byte*)>& init);
  LogInfo load_log(const format::gpm::Object& o) const;
  GroupInfo load_group(const format::gpm::Object& o) const;
  // Whether [offset, offset + 8) lies inside a region (log entries may name nothing else).
  bool in_region(uint64_t offset) const;

  std::unique_ptr<pool::Pool> pool_;
  std::vector<std::pair<std::string, RecoveryReport>> reports_;
};

}  // namespace gphash::gpm
