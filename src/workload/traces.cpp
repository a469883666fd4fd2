// The synthesised traces of ycsb.h: DLRM-like embedding lookups and PageRank over R-MAT.
#include <bit>
#include <numeric>
#include <stdexcept>
#include <string>

#include "workload/ycsb.h"

namespace gphash::workload {
namespace {

static_assert(std::accumulate(kCriteoKaggleCardinalities.begin(), kCriteoKaggleCardinalities.end(),
                              uint64_t{0}) == kCriteoKaggleRows);

// Tags that make the sub-seeds of one spec.seed independent of each other and of ycsb.cpp's.
constexpr uint64_t kDlrmPermutationTag = 0x13198A2E03707344ULL;
constexpr uint64_t kRmatLabelTag = 0xA4093822299F31D0ULL;
constexpr uint64_t kRmatEdgeTag = 0x082EFA98EC4E6C89ULL;

// R-MAT quadrant thresholds on a 32-bit uniform: two levels per 64-bit draw.
constexpr uint64_t threshold32(double p) { return static_cast<uint64_t>(p * 4294967296.0 + 0.5); }
constexpr uint64_t kRmatA = threshold32(PageRankTrace::kA);
constexpr uint64_t kRmatAB = threshold32(PageRankTrace::kA + PageRankTrace::kB);
constexpr uint64_t kRmatABC = threshold32(PageRankTrace::kA + PageRankTrace::kB + PageRankTrace::kC);

}  // namespace

std::array<TableRange, kDlrmTables> dlrm_table_ranges(uint64_t record_count) {
  if (record_count < kDlrmTables) {
    throw std::invalid_argument("workload dlrm splits the records into 26 embedding tables, so it needs "
                                "record_count >= 26, got " + std::to_string(record_count));
  }
  std::array<TableRange, kDlrmTables> tables{};
  if (record_count >= kCriteoKaggleRows) {
    uint64_t first = 0;
    for (size_t i = 0; i < kDlrmTables; ++i) {
      tables[i] = {first, kCriteoKaggleCardinalities[i]};
      first += kCriteoKaggleCardinalities[i];
    }
    return tables;
  }
  // Products stay below 2^51 (both factors are below kCriteoKaggleRows < 2^26).
  const uint64_t shared = record_count - kDlrmTables;
  const uint64_t total_excess = kCriteoKaggleRows - kDlrmTables;
  uint64_t excess_before = 0;
  uint64_t boundary = 0;  // floor(shared * excess_before / total_excess)
  for (size_t i = 0; i < kDlrmTables; ++i) {
    excess_before += kCriteoKaggleCardinalities[i] - 1;
    const uint64_t next_boundary = shared * excess_before / total_excess;
    tables[i] = {i + boundary, 1 + next_boundary - boundary};
    boundary = next_boundary;
  }
  return tables;
}

DlrmTrace::DlrmTrace(const WorkloadSpec& spec)
    : tables_(dlrm_table_ranges(spec.record_count)), exponent_(0.0) {
  const KeyDistribution distribution = spec.distribution.value_or(KeyDistribution::ZipfianExact);
  if (distribution == KeyDistribution::Uniform) return;
  if (distribution != KeyDistribution::ZipfianExact) {
    throw std::invalid_argument("workload dlrm draws embedding rows by exact Zipf per table or uniformly; "
                                "distribution " + std::string(name(distribution)) +
                                " does not apply (use zipfian-exact or uniform)");
  }
  exponent_ = spec.distribution.has_value() ? spec.theta : kDlrmDefaultExponent;
  rows_.reserve(kDlrmTables);
  for (size_t i = 0; i < kDlrmTables; ++i) {
    rows_.emplace_back(tables_[i].rows, exponent_, /*permute=*/true,
                       splitmix64_mix(spec.seed ^ kDlrmPermutationTag ^ splitmix64_mix(i)));
  }
}

Op DlrmTrace::next(Rng& rng) {
  const size_t table = next_table_;
  next_table_ = table + 1 == kDlrmTables ? 0 : table + 1;
  const uint64_t row = rows_.empty() ? rng.below(tables_[table].rows) : rows_[table].next(rng);
  return {OpType::Read, tables_[table].first + row};
}

uint64_t DlrmTrace::record_of_rank(size_t table, uint64_t rank) const {
  return tables_.at(table).first + (rows_.empty() ? rank : rows_[table].item_of_rank(rank));
}

PageRankTrace::PageRankTrace(const WorkloadSpec& spec)
    : vertices_(spec.record_count),
      levels_(spec.record_count <= 1 ? 0U : static_cast<unsigned>(std::bit_width(spec.record_count - 1))),
      rmat_(spec.distribution.value_or(KeyDistribution::Rmat) == KeyDistribution::Rmat),
      // 2^63 is the largest record_count, so 2^levels_ fits.
      labels_(uint64_t{1} << levels_, splitmix64_mix(spec.seed ^ kRmatLabelTag)),
      edge_seed_(splitmix64_mix(spec.seed ^ kRmatEdgeTag)),
      edges_(edge_seed_) {
  if (vertices_ == 0) {
    throw std::invalid_argument("workload pagerank walks a graph over the existing records but record_count is 0; "
                                "set record_count to the number of records loaded by the load workload");
  }
  const KeyDistribution distribution = spec.distribution.value_or(KeyDistribution::Rmat);
  if (distribution != KeyDistribution::Rmat && distribution != KeyDistribution::Uniform) {
    throw std::invalid_argument("workload pagerank draws its graph's edges by R-MAT (rmat) or uniformly; "
                                "distribution " + std::string(name(distribution)) + " does not apply");
  }
}

PageRankTrace::Edge PageRankTrace::next_edge() {
  if (!rmat_) {
    const uint64_t source = edges_.below(vertices_);
    return {source, edges_.below(vertices_)};
  }
  for (;;) {
    uint64_t source = 0;
    uint64_t destination = 0;
    uint64_t word = 0;
    for (unsigned level = 0; level < levels_; ++level) {
      if (level % 2 == 0) word = edges_.next();
      const uint64_t u = level % 2 == 0 ? word & 0xFFFFFFFFULL : word >> 32;
      const uint64_t bit = uint64_t{1} << level;
      if (u < kRmatA) continue;
      if (u < kRmatAB) {
        destination |= bit;
      } else if (u < kRmatABC) {
        source |= bit;
      } else {
        source |= bit;
        destination |= bit;
      }
    }
    source = labels_(source);
    destination = labels_(destination);
    // Both ends land below N with probability about (N / 2^s)^2 >= 1/4: a few redraws at most.
    if (source < vertices_ && destination < vertices_) return {source, destination};
  }
}

Op PageRankTrace::next() {
  if (reads_in_batch_ < kReadsPerUpdate) {
    ++reads_in_batch_;
    return {OpType::Read, next_edge().source};
  }
  reads_in_batch_ = 0;
  const uint64_t vertex = batch_;
  if (++batch_ == vertices_) {  // the iteration is over: the next one walks the same edges
    batch_ = 0;
    edges_ = Rng(edge_seed_);
  }
  return {OpType::Update, vertex};
}

}  // namespace gphash::workload
