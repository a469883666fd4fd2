// YCSB core workloads, the micro workloads of the GPHash paper (one operation type each), and two
// synthesised real-world-like traces (DLRM embedding lookups, PageRank over an R-MAT graph), as
// streams of operations on record ids.
//
// A record id is the YCSB "keynum": records 0 .. record_count-1 exist after LOAD, inserts
// create record_count, record_count+1, ... Turn ids into key and value bytes with
// records.h. Workload E (range scans) does not apply to a hash index and is rejected.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <variant>
#include <vector>

#include "workload/random.h"
#include "workload/zipf.h"

namespace gphash::workload {

// Load (inserts of new records) is also the micro "insert". Search, Update and NegativeSearch
// choose keys by the distribution (uniform by default); NegativeSearch's keys are records never
// inserted. Delete erases existing records once each, in id order (random key order, since keys
// are mixes of the ids), at most record_count of them; a run after it must not assume them.
// Dlrm and PageRank are the traces described at DlrmTrace and PageRankTrace below; they only
// read and update existing records.
enum class Workload { Load, A, B, C, D, F, Search, NegativeSearch, Update, Delete, Dlrm, PageRank };

enum class KeyDistribution {
  Uniform,
  Zipfian,       // YCSB's ScrambledZipfian, YCSB's default
  ZipfianExact,  // ZipfExact, permuted so hot records are scattered
  Latest,        // LatestChooser: recently inserted records are hottest
  Rmat,          // the pagerank trace's R-MAT edges; no other workload accepts it
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
// The traces: dlrm read 1; pagerank read 16/17 update 1/17 (exact, not drawn: see PageRankTrace).
OperationMix operation_mix(Workload workload);
// Latest for D, Zipfian for A, B, C, F, Uniform for the micro workloads (LOAD and Delete choose
// no keys; they report Uniform); ZipfianExact for dlrm (per-table exact Zipf), Rmat for pagerank.
KeyDistribution default_distribution(Workload workload);

// Lower-case names that parse back: "load", "a", "b", "c", "d", "f", "search", "negative-search",
// "update", "delete", "dlrm", "pagerank".
std::string_view name(Workload workload);
// "uniform", "zipfian", "zipfian-exact", "latest", "rmat".
std::string_view name(KeyDistribution distribution);
// "read", "update", "insert", "read-modify-write", "read-absent", "delete".
std::string_view name(OpType type);

// Case-insensitive. Throws std::invalid_argument naming the accepted values; for "e" the
// message explains that range scans do not apply to a hash index.
Workload parse_workload(std::string_view text);
// A comma-separated list of workloads, in order ("load,c,a"), each parsed by parse_workload.
std::vector<Workload> parse_workload_list(std::string_view text);
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
  // method and need theta < 1; ZipfianExact takes any theta > 0. dlrm uses it only when
  // distribution is given as ZipfianExact (else kDlrmDefaultExponent); pagerank ignores it.
  double theta = 0.99;
  uint64_t seed = 1;
};

// ---------------------------------------------------------------------------------------
// DLRM-like embedding lookups (workload "dlrm")
//
// The 26 sparse features of the Criteo Kaggle Display Advertising Challenge data set, with the
// table sizes (distinct values per feature) that facebookresearch/dlrm uses for it.
inline constexpr std::array<uint64_t, 26> kCriteoKaggleCardinalities = {
    1460, 583,   10131227, 2202608, 305,   24, 12517, 633, 3,      93145, 5683, 8351593, 3194,
    27,   14992, 5461306,  10,      5652,  2173, 4,     7046547, 18, 15,    286181, 105,  142572};
inline constexpr uint64_t kCriteoKaggleRows = 33'762'577;  // their sum
inline constexpr size_t kDlrmTables = kCriteoKaggleCardinalities.size();
// Row popularity exponent unless the spec names zipfian-exact (then spec.theta). Embedding
// accesses in recommendation traces are commonly modelled as power laws with exponents near 1;
// 1.05 is such a stand-in, not a figure measured on Criteo.
inline constexpr double kDlrmDefaultExponent = 1.05;

// One embedding table: records [first, first + rows).
struct TableRange {
  uint64_t first = 0;
  uint64_t rows = 0;
};

// How record_count existing records are split into the 26 tables, in feature order, as
// contiguous ranges starting at record 0.
// - record_count >= kCriteoKaggleRows: the real cardinalities; records from kCriteoKaggleRows
//   on are never referenced.
// - 26 <= record_count < kCriteoKaggleRows: every table keeps one row, and the other
//   record_count - 26 rows are shared in proportion to (cardinality - 1), rounding the
//   cumulative boundaries down: with E_i the sum of (cardinality - 1) over tables before i and
//   E the total, table i starts at i + floor((record_count - 26) E_i / E). So the ranges cover
//   0 .. record_count-1 exactly, each table has between 1 and its real cardinality rows, and
//   within one row of 1 + (record_count - 26) (cardinality - 1) / (kCriteoKaggleRows - 26):
//   record_count / kCriteoKaggleRows of its real size, except that reserving one row per table
//   moves at most 26 rows in all from the large tables to the small ones.
// Throws std::invalid_argument if record_count < 26 (no room for one row per table).
std::array<TableRange, kDlrmTables> dlrm_table_ranges(uint64_t record_count);

// The trace: a sequence of inference samples. Each sample is 26 Reads, one per table in table
// order; op i of the stream reads table i mod 26 (the last sample may be cut by
// operation_count). The row is drawn independently per op:
// - ZipfianExact (the default): exact Zipf over the table's rows (ZipfExact), exponent
//   kDlrmDefaultExponent, or spec.theta when spec.distribution names zipfian-exact; the rank
//   goes through a RandomPermutation of the table's rows keyed by (seed, table), so hot rows
//   are scattered over the table in O(1) memory while the row masses stay exactly Zipf.
// - Uniform: every row of the table equally likely.
// Other distributions are rejected. Draws come from the generator's Rng, seeded by spec.seed.
class DlrmTrace {
 public:
  // Throws std::invalid_argument for record_count < 26, a distribution other than
  // zipfian-exact or uniform, or an unusable exponent.
  explicit DlrmTrace(const WorkloadSpec& spec);

  Op next(Rng& rng);

  const std::array<TableRange, kDlrmTables>& tables() const { return tables_; }
  // 0 for Uniform.
  double exponent() const { return exponent_; }
  // The record holding the row of popularity rank `rank` (0 = hottest) of `table`; with
  // Uniform, the rank's row unpermuted. For tests and analysis.
  uint64_t record_of_rank(size_t table, uint64_t rank) const;

 private:
  std::array<TableRange, kDlrmTables> tables_;
  double exponent_;
  std::vector<ZipfExact> rows_;  // one per table; empty for Uniform
  size_t next_table_ = 0;
};

// ---------------------------------------------------------------------------------------
// PageRank-like graph traversal (workload "pagerank")
//
// The graph: vertices are the existing records 0 .. N-1 (N = record_count); edges are drawn
// one at a time by R-MAT with the Graph500 parameters a = .57, b = .19, c = .19, d = .05 over
// 2^s vertices, 2^s the smallest power of two >= N: at each of s levels one quadrant is chosen
// (a: neither bit, b: destination bit, c: source bit, d: both). As Graph500 does, vertex labels
// then go through a random permutation of [0, 2^s) (a RandomPermutation keyed by the seed:
// O(1) memory), so high-degree vertices are scattered; an edge with either end >= N is drawn
// again, so the graph is the R-MAT graph induced on a random N of its 2^s vertices.
// With Uniform instead of Rmat both ends are uniform over [0, N) (a random graph without skew).
//
// The trace: iterations of pull-style PageRank with average degree 16. An iteration is N
// vertex batches of 17 ops: 16 Reads of the sources of the next 16 edges (a vertex reading
// its in-neighbours' ranks), then one Update of vertex k (its new rank) for batch k = 0 .. N-1.
// So each iteration reads the sources of 16 N edges and writes every vertex once; reads are
// exactly 16/17 (94.1%) of the ops, and a vertex is read in proportion to its out-degree.
// (The edges of a batch are not the in-edges of vertex k: sorting the stream by destination
// would need memory proportional to the graph.) The edge sampler is re-seeded at the start of
// each iteration, so every iteration walks the same edges in the same order; operation_count
// may end mid-iteration. Edges depend only on (record_count, seed, distribution).
class PageRankTrace {
 public:
  static constexpr uint32_t kReadsPerUpdate = 16;  // the average degree
  static constexpr double kA = 0.57, kB = 0.19, kC = 0.19;  // d = 1 - a - b - c = 0.05

  // Throws std::invalid_argument for record_count 0 or a distribution other than rmat or
  // uniform.
  explicit PageRankTrace(const WorkloadSpec& spec);

  Op next();

  struct Edge {
    uint64_t source;
    uint64_t destination;
  };
  // The next edge of the current iteration's stream (next() calls this for each Read).
  Edge next_edge();
  uint64_t vertex_count() const { return vertices_; }

 private:
  uint64_t vertices_;
  unsigned levels_;  // s
  bool rmat_;
  RandomPermutation labels_;
  uint64_t edge_seed_;
  Rng edges_;
  uint32_t reads_in_batch_ = 0;
  uint64_t batch_ = 0;  // the vertex the current batch updates
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
  std::variant<std::monostate, DlrmTrace, PageRankTrace> trace_;
  uint64_t records_now_;
  uint64_t next_deleted_ = 0;
  uint64_t generated_ = 0;
  uint64_t total_;
};

}  // namespace gphash::workload
