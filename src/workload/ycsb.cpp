#include "workload/ycsb.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>
#include <string>

namespace gphash::workload {
namespace {

constexpr uint64_t kRecordIdLimit = 1ULL << 63;  // see records.h

std::string lower_case(std::string_view text) {
  std::string result(text);
  std::transform(result.begin(), result.end(), result.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return result;
}

// YCSB sizes the Zipfian key space for twice the expected inserts (CoreWorkload).
uint64_t zipfian_key_space(const WorkloadSpec& spec, const OperationMix& mix) {
  const auto expected_new_records =
      static_cast<uint64_t>(static_cast<double>(spec.operation_count) * mix.insert * 2.0);
  return spec.record_count + expected_new_records;
}

// The Zipf choosers span the records that may exist by the end of the run; keys not
// inserted yet are drawn again, as YCSB does.
template <class Chooser>
uint64_t draw_existing(const Chooser& chooser, Rng& rng, uint64_t records_now) {
  uint64_t record = chooser.next(rng);
  while (record >= records_now) record = chooser.next(rng);
  return record;
}

}  // namespace

OperationMix operation_mix(Workload workload) {
  switch (workload) {
    case Workload::Load: return {.insert = 1.0};
    case Workload::A: return {.read = 0.5, .update = 0.5};
    case Workload::B: return {.read = 0.95, .update = 0.05};
    case Workload::C: return {.read = 1.0};
    case Workload::D: return {.read = 0.95, .insert = 0.05};
    case Workload::F: return {.read = 0.5, .read_modify_write = 0.5};
    case Workload::Search: return {.read = 1.0};
    case Workload::NegativeSearch: return {.read_absent = 1.0};
    case Workload::Update: return {.update = 1.0};
    case Workload::Delete: return {.erase = 1.0};
    case Workload::Dlrm: return {.read = 1.0};
    case Workload::PageRank:
      return {.read = PageRankTrace::kReadsPerUpdate / (PageRankTrace::kReadsPerUpdate + 1.0),
              .update = 1.0 / (PageRankTrace::kReadsPerUpdate + 1.0)};
  }
  throw std::invalid_argument("unknown Workload value; use one of the enumerators");
}

KeyDistribution default_distribution(Workload workload) {
  switch (workload) {
    case Workload::Load: return KeyDistribution::Uniform;
    case Workload::D: return KeyDistribution::Latest;
    case Workload::A:
    case Workload::B:
    case Workload::C:
    case Workload::F: return KeyDistribution::Zipfian;
    case Workload::Search:
    case Workload::NegativeSearch:
    case Workload::Update:
    case Workload::Delete: return KeyDistribution::Uniform;
    case Workload::Dlrm: return KeyDistribution::ZipfianExact;
    case Workload::PageRank: return KeyDistribution::Rmat;
  }
  throw std::invalid_argument("unknown Workload value; use one of the enumerators");
}

std::string_view name(Workload workload) {
  switch (workload) {
    case Workload::Load: return "load";
    case Workload::A: return "a";
    case Workload::B: return "b";
    case Workload::C: return "c";
    case Workload::D: return "d";
    case Workload::F: return "f";
    case Workload::Search: return "search";
    case Workload::NegativeSearch: return "negative-search";
    case Workload::Update: return "update";
    case Workload::Delete: return "delete";
    case Workload::Dlrm: return "dlrm";
    case Workload::PageRank: return "pagerank";
  }
  return "unknown";
}

std::string_view name(KeyDistribution distribution) {
  switch (distribution) {
    case KeyDistribution::Uniform: return "uniform";
    case KeyDistribution::Zipfian: return "zipfian";
    case KeyDistribution::ZipfianExact: return "zipfian-exact";
    case KeyDistribution::Latest: return "latest";
    case KeyDistribution::Rmat: return "rmat";
  }
  return "unknown";
}

std::string_view name(OpType type) {
  switch (type) {
    case OpType::Read: return "read";
    case OpType::Update: return "update";
    case OpType::Insert: return "insert";
    case OpType::ReadModifyWrite: return "read-modify-write";
    case OpType::ReadAbsent: return "read-absent";
    case OpType::Delete: return "delete";
  }
  return "unknown";
}

Workload parse_workload(std::string_view text) {
  const std::string key = lower_case(text);
  for (const Workload w : {Workload::Load, Workload::A, Workload::B, Workload::C, Workload::D, Workload::F,
                           Workload::Search, Workload::NegativeSearch, Workload::Update, Workload::Delete,
                           Workload::Dlrm, Workload::PageRank}) {
    if (key == name(w)) return w;
  }
  if (key == "e") {
    throw std::invalid_argument(
        "YCSB workload E is a range scan, which a hash index cannot serve; choose one of "
        "load, a, b, c, d, f (or a micro workload: search, negative-search, update, delete; or a trace: "
        "dlrm, pagerank)");
  }
  throw std::invalid_argument("unknown workload '" + std::string(text) +
                              "'; choose one of load, a, b, c, d, f, search, negative-search, update, delete, "
                              "dlrm, pagerank");
}

std::vector<Workload> parse_workload_list(std::string_view text) {
  std::vector<Workload> list;
  for (size_t pos = 0; pos <= text.size();) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    list.push_back(parse_workload(text.substr(pos, comma - pos)));
    pos = comma + 1;
  }
  return list;
}

KeyDistribution parse_distribution(std::string_view text) {
  const std::string key = lower_case(text);
  for (const KeyDistribution d : {KeyDistribution::Uniform, KeyDistribution::Zipfian,
                                  KeyDistribution::ZipfianExact, KeyDistribution::Latest, KeyDistribution::Rmat}) {
    if (key == name(d)) return d;
  }
  throw std::invalid_argument("unknown key distribution '" + std::string(text) +
                              "'; choose one of uniform, zipfian, zipfian-exact, latest, rmat (pagerank only)");
}

WorkloadGenerator::WorkloadGenerator(const WorkloadSpec& spec)
    : spec_(spec),
      distribution_(spec.distribution.value_or(default_distribution(spec.workload))),
      cumulative_mix_{},
      last_nonzero_type_(OpType::Read),
      rng_(spec.seed),
      records_now_(spec.workload == Workload::Load ? 0 : spec.record_count),
      total_(spec.workload == Workload::Load     ? spec.record_count
             : spec.workload == Workload::Delete ? std::min(spec.operation_count, spec.record_count)
                                                 : spec.operation_count) {
  const OperationMix mix = operation_mix(spec.workload);
  const double fractions[6] = {mix.read, mix.update, mix.insert, mix.read_modify_write, mix.read_absent, mix.erase};
  const OpType types[6] = {OpType::Read,           OpType::Update,     OpType::Insert,
                           OpType::ReadModifyWrite, OpType::ReadAbsent, OpType::Delete};
  double sum = 0.0;
  for (int i = 0; i < 6; ++i) {
    sum += fractions[i];
    cumulative_mix_[i] = sum;
    if (fractions[i] > 0.0) last_nonzero_type_ = types[i];
  }

  const uint64_t inserts_at_most = spec.workload == Workload::Load ? spec.record_count
                                   : mix.insert > 0.0              ? spec.operation_count
                                                                   : 0;
  const uint64_t initial_records = spec.workload == Workload::Load ? 0 : spec.record_count;
  if (initial_records > kRecordIdLimit || inserts_at_most > kRecordIdLimit - initial_records) {
    throw std::invalid_argument(
        "record ids would reach 2^63 (record_count " + std::to_string(spec.record_count) +
        ", operation_count " + std::to_string(spec.operation_count) +
        "); key generation reserves ids >= 2^63, so use smaller counts");
  }
  if (spec.workload == Workload::Load) return;  // LOAD inserts in order and chooses no keys
  if (spec.workload == Workload::NegativeSearch && spec.record_count >= kAbsentRecordBase) {
    throw std::invalid_argument("negative-search needs record_count below 2^62: its keys are records from 2^62 up");
  }

  if (spec.record_count == 0) {
    throw std::invalid_argument(
        "workload " + std::string(name(spec.workload)) +
        " reads existing records but record_count is 0; set record_count to the number of "
        "records loaded by the load workload");
  }
  // The traces bring their own samplers and never touch chooser_ or choose_type().
  if (spec.workload == Workload::Dlrm) {
    trace_.emplace<DlrmTrace>(spec);
    return;
  }
  if (spec.workload == Workload::PageRank) {
    trace_.emplace<PageRankTrace>(spec);
    return;
  }
  if (distribution_ == KeyDistribution::Rmat) {
    throw std::invalid_argument("distribution rmat is the pagerank trace's graph; workload " +
                                std::string(name(spec.workload)) +
                                " takes uniform, zipfian, zipfian-exact or latest");
  }
  switch (distribution_) {
    case KeyDistribution::Uniform: break;  // draws from the current count directly
    case KeyDistribution::Zipfian:
      chooser_.emplace<ScrambledZipfian>(zipfian_key_space(spec, mix), spec.theta);
      break;
    case KeyDistribution::ZipfianExact:
      chooser_.emplace<ZipfExact>(zipfian_key_space(spec, mix), spec.theta, /*permute=*/true,
                                  splitmix64_mix(spec.seed ^ 0x243F6A8885A308D3ULL));
      break;
    case KeyDistribution::Latest:
      chooser_.emplace<LatestChooser>(spec.record_count, spec.theta);
      break;
    case KeyDistribution::Rmat: break;  // rejected above
  }
}

size_t WorkloadGenerator::next(std::span<Op> out) {
  const size_t count = static_cast<size_t>(
      std::min<uint64_t>(out.size(), total_ - generated_));
  for (size_t i = 0; i < count; ++i) out[i] = next_op();
  generated_ += count;
  return count;
}

Op WorkloadGenerator::next_op() {
  if (spec_.workload == Workload::Load) return {OpType::Insert, records_now_++};
  if (auto* dlrm = std::get_if<DlrmTrace>(&trace_)) return dlrm->next(rng_);
  if (auto* pagerank = std::get_if<PageRankTrace>(&trace_)) return pagerank->next();
  const OpType type = choose_type();
  if (type == OpType::Delete) return {type, next_deleted_++};
  if (type == OpType::ReadAbsent) return {type, kAbsentRecordBase + rng_.below(records_now_)};
  if (type == OpType::Insert) {
    if (auto* latest = std::get_if<LatestChooser>(&chooser_)) latest->on_insert();
    return {type, records_now_++};
  }
  return {type, choose_existing_record()};
}

OpType WorkloadGenerator::choose_type() {
  const double u = rng_.next_double();
  if (u < cumulative_mix_[0]) return OpType::Read;
  if (u < cumulative_mix_[1]) return OpType::Update;
  if (u < cumulative_mix_[2]) return OpType::Insert;
  if (u < cumulative_mix_[3]) return OpType::ReadModifyWrite;
  if (u < cumulative_mix_[4]) return OpType::ReadAbsent;
  if (u < cumulative_mix_[5]) return OpType::Delete;
  return last_nonzero_type_;  // the fractions summed to just under 1 by rounding
}

uint64_t WorkloadGenerator::choose_existing_record() {
  switch (distribution_) {
    case KeyDistribution::Uniform: return rng_.below(records_now_);
    case KeyDistribution::Latest: return std::get<LatestChooser>(chooser_).next(rng_);
    case KeyDistribution::Zipfian:
      return draw_existing(std::get<ScrambledZipfian>(chooser_), rng_, records_now_);
    case KeyDistribution::ZipfianExact:
      return draw_existing(std::get<ZipfExact>(chooser_), rng_, records_now_);
    case KeyDistribution::Rmat: break;  // only the pagerank trace, which does not come here
  }
  return 0;
}

}  // namespace gphash::workload
