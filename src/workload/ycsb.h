// YCSB core workloads, and the micro workloads of the GPHash paper (one operation type each), as
// streams of operations on record ids.
//
// A record id is the YCSB "keynum": records 0 .. record_count-1 exist after LOAD, inserts
// create record_count, record_count+1, ... Turn ids into key and value bytes with
// records.h. Workload E (range scans) does not apply to a hash index and is rejected.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <variant>

#include "workload/random.h"
#include "workload/zipf.h"

namespace gphash::workload {

// Load (inserts of new records) is also the micro "insert". Search, Update and NegativeSearch
// choose keys by the distribution (uniform by default); NegativeSearch's keys are records never
// inserted. Delete erases existing records once each, in id order (random key order, since keys
// are mixes of the ids), at most record_count of them; a run after it must not assume them.
enum class Workload { Load, A, B, C, D, F, Search, NegativeSearch, Update, Delete };

enum class KeyDistribution {
  Uniform,
  Zipfian,       // YCSB's ScrambledZipfian, YCSB's default
  ZipfianExact,  // ZipfExact, permuted so hot records are scattered
  Latest,        // LatestChooser: recently inserted records are hottest
};

enum class OpType : uint8_t { Read, Update, Insert, ReadModifyWrite, ReadAbsent, Delete };

// The records of ReadAbsent start here: far above any count a run can insert (below 2^63).
inline constexpr uint64_t kAbsentRecordBase = 1ULL << 62;

struct Op {
  OpType type;
  uint64_t record;
};

// Fractions of each operation type; they sum to 1.
struct OperationMix {
  double read = 0.0;
  double update = 0.0;
  double insert = 0.0;
  double read_modify_write = 0.0;
  double read_absent = 0.0;
  double erase = 0.0;
};

// YCSB's core workload mixes: LOAD insert 1; A read .5 update .5; B read .95 update .05;
// C read 1; D read .95 insert .05; F read .5 read-modify-write .5; the micro workloads one type.
OperationMix operation_mix(Workload workload);
// Latest for D, Zipfian for A, B, C, F, Uniform for the micro workloads (LOAD and Delete choose
// no keys; they report Uniform).
KeyDistribution default_distribution(Workload workload);

// Lower-case names that parse back: "load", "a", "b", "c", "d", "f", "search", "negative-search",
// "update", "delete".
std::string_view name(Workload workload);
// "uniform", "zipfian", "zipfian-exact", "latest".
std::string_view name(KeyDistribution distribution);
// "read", "update", "insert", "read-modify-write", "read-absent", "delete".
std::string_view name(OpType type);

// Case-insensitive. Throws std::invalid_argument naming the accepted values; for "e" the
// message explains that range scans do not apply to a hash index.
Workload parse_workload(std::string_view text);
// Case-insensitive. Throws std::invalid_argument naming the accepted values.
KeyDistribution parse_distribution(std::string_view text);

struct WorkloadSpec {
  Workload workload = Workload::Load;
  // Records that exist before the run (for LOAD: records to insert). Must be >= 1 for
  // every workload but LOAD, and record ids must stay below 2^63 (see records.h).
  uint64_t record_count = 0;
  // Operations to generate; ignored by LOAD, which generates record_count inserts (Delete
  // generates at most record_count).
  uint64_t operation_count = 0;
  // Empty: default_distribution(workload).
  std::optional<KeyDistribution> distribution = std::nullopt;
  // Zipf exponent for Zipfian, ZipfianExact and Latest. Zipfian and Latest use Gray's
  // method and need theta < 1; ZipfianExact takes any theta > 0.
  double theta = 0.99;
  uint64_t seed = 1;
};

// Generates the operations of one spec; the same spec always yields the same stream.
// Keys of reads, updates and read-modify-writes are records that exist at that point of
// the stream (inserted records count once their insert has been emitted).
//
// When inserts grow the record count (workload D): Uniform draws from all current records;
// Latest is anchored at the newest; Zipfian and ZipfianExact, as in YCSB, span
// record_count plus twice the expected number of inserts and redraw a key that is not
// inserted yet (so with operation_count far above record_count most draws are redrawn).
class WorkloadGenerator {
 public:
  // Throws std::invalid_argument for a spec that cannot run (no records to read, a theta
  // the distribution cannot use, record ids that would reach 2^63).
  explicit WorkloadGenerator(const WorkloadSpec& spec);

  // Fills out[0 .. k) with the next k = min(out.size(), remaining) operations and returns k;
  // 0 once the stream is exhausted.
  size_t next(std::span<Op> out);

  // Records that exist after the operations generated so far.
  uint64_t record_count_now() const { return records_now_; }
  uint64_t operations_generated() const { return generated_; }
  // operation_count, or record_count for LOAD.
  uint64_t operations_total() const { return total_; }
  KeyDistribution distribution() const { return distribution_; }
  const WorkloadSpec& spec() const { return spec_; }

 private:
  Op next_op();
  OpType choose_type();
  uint64_t choose_existing_record();

  WorkloadSpec spec_;
  KeyDistribution distribution_;
  // Cumulative fractions read, +update, +insert, +read-modify-write, +read-absent, +delete.
  double cumulative_mix_[6];
  OpType last_nonzero_type_;
  Rng rng_;
  std::variant<std::monostate, ScrambledZipfian, ZipfExact, LatestChooser> chooser_;
  uint64_t records_now_;
  uint64_t next_deleted_ = 0;
  uint64_t generated_ = 0;
  uint64_t total_;
};

}  // namespace gphash::workload
