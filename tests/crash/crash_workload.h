// The crash tests' workload and their model of what a pool must hold.
//
// Workload: seeded batches over a key space of record ids that grows with the batch number, so a
// pool that starts small resizes again and again, with every kind of write: insert, upsert,
// update, erase and read-modify-write (a search and an update of the same key, in one batch).
// Batch b of a pool is a pure function of (params, seed, b): the child that runs it and the
// parent that checks it agree on it without shipping values around. Values are
// workload::make_value(record, version, width), so every value read back checks itself.
//
// Model: the acknowledged state of every record (present with a version, or absent), advanced by
// acknowledged batches with the batch semantics of gphash/ops.h; and, for a batch in flight at a
// crash, the set of end states each of its records may show: any subsequence of the batch's ops
// on that record, applied in batch order to the acknowledged state (DESIGN.md section 3: an
// operation in flight takes effect or not, never halfway; ops on one key keep batch order).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "gphash/ops.h"

namespace gphash::crashtest {

struct PlannedOp {
  uint64_t record = 0;
  Op op = Op::kSearch;
  uint64_t version = 0;  // of the value written (insert, upsert, update); 0 otherwise
};

struct WorkloadParams {
  uint32_t key_width = 8;
  uint32_t value_width = 8;
  uint64_t key_space_start = 128;    // records in use by batch 0
  uint64_t key_space_doubling = 64;  // batches over which the key space doubles: the table
                                     // resizes about that often until the key space is full
  uint64_t key_space_growth = 0;     // plus this many records per batch
  uint64_t key_space_max = 20000;
  uint32_t max_batch_ops = 600;  // batches over 256 ops run on two CPU threads
};

// Records [0, key_space_at(b)) are in use in batch b; the count grows exponentially, so
// resizes come at a steady pace rather than all at the start.
uint64_t key_space_at(const WorkloadParams& params, uint64_t batch);

// Distinct for every (batch, index) of a pool, below 2^32 so that every value width keeps it
// whole (widths below 8 bytes keep 8 * width bits). Throws past batch 2^20 - 2.
uint64_t version_of(uint64_t batch, uint32_t index);

std::vector<PlannedOp> plan_batch(const WorkloadParams& params, uint64_t seed, uint64_t batch);

// The arrays of one batch for Table::execute / Engine::execute.
struct BatchBuffers {
  std::vector<Op> ops;
  std::vector<std::byte> keys, values, out;
  std::vector<OpStatus> status;
  Batch batch(const WorkloadParams& params);
};
void fill_buffers(const WorkloadParams& params, const std::vector<PlannedOp>& plan, BatchBuffers& buffers);

// A version read back from a search: the stored version, or kTorn when check_value fails.
inline constexpr uint64_t kTorn = ~uint64_t{0};
uint64_t read_version(uint64_t record, const std::byte* value, uint32_t value_width);

struct KeyState {
  bool present = false;
  uint64_t version = 0;  // masked to the bits the value width keeps
  friend bool operator==(const KeyState&, const KeyState&) = default;
};
std::string to_string(const KeyState& s);

class CrashModel {
 public:
  explicit CrashModel(uint32_t value_width = 8);

  // Applies one acknowledged operation. Returns the status the engine must have reported; for a
  // search that finds the key, *seen receives the version it must have read.
  OpStatus apply(const PlannedOp& op, uint64_t* seen);
  const KeyState& state(uint64_t record) const;
  void set(uint64_t record, const KeyState& s);
  uint64_t present() const { return present_; }
  uint64_t version_mask() const { return mask_; }

 private:
  std::vector<KeyState> states_;
  uint64_t present_ = 0;
  uint64_t mask_;
};

// For each record a batch in flight touches: every end state it may show after a crash.
std::unordered_map<uint64_t, std::vector<KeyState>> in_flight_outcomes(const CrashModel& model,
                                                                       const std::vector<PlannedOp>& batch);

}  // namespace gphash::crashtest
