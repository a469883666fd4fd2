#include "crash_workload.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "workload/random.h"
#include "workload/records.h"

namespace gphash::crashtest {

uint64_t key_space_at(const WorkloadParams& params, uint64_t batch) {
  const double doublings =
      static_cast<double>(batch) / static_cast<double>(std::max<uint64_t>(1, params.key_space_doubling));
  const double keys = static_cast<double>(params.key_space_start) * std::exp2(std::min(doublings, 60.0));
  const uint64_t linear = params.key_space_growth * batch;
  return std::max<uint64_t>(1, std::min(params.key_space_max, static_cast<uint64_t>(keys) + linear));
}

uint64_t version_of(uint64_t batch, uint32_t index) {
  if (batch + 1 >= (uint64_t{1} << 20) || index >= (1u << 12))
    throw std::invalid_argument("version_of: batch or index too large for a 32-bit version");
  return ((batch + 1) << 12) | index;
}

std::vector<PlannedOp> plan_batch(const WorkloadParams& params, uint64_t seed, uint64_t batch) {
  workload::Rng rng(workload::splitmix64_mix(seed) ^ workload::splitmix64_mix(batch + 0x5EED));
  const uint64_t keys = key_space_at(params, batch);
  // Mostly mid-sized batches, some tiny ones (crashes then land in a batch of one or two ops).
  const uint32_t max_ops = std::max<uint32_t>(2, params.max_batch_ops);
  const uint32_t n =
      rng.below(8) == 0 ? 1 + static_cast<uint32_t>(rng.below(4)) : 1 + static_cast<uint32_t>(rng.below(max_ops));
  // The newest tenth of the key space gets a third of the ops, so new records keep arriving.
  const uint64_t fresh = std::max<uint64_t>(1, keys / 10);
  std::vector<PlannedOp> plan;
  plan.reserve(n + 1);
  while (plan.size() < n) {
    uint64_t record;
    const uint64_t pick = rng.below(100);
    if (pick < 12 && !plan.empty())
      record = plan[rng.below(plan.size())].record;  // several ops on one key in one batch
    else if (pick < 45)
      record = keys - 1 - rng.below(fresh);  // the newest records: the table keeps growing
    else
      record = rng.below(keys);
    const uint32_t index = static_cast<uint32_t>(plan.size());
    const uint64_t kind = rng.below(100);
    if (kind < 30) {
      plan.push_back({record, Op::kInsert, version_of(batch, index)});
    } else if (kind < 50) {
      plan.push_back({record, Op::kUpsert, version_of(batch, index)});
    } else if (kind < 62) {
      plan.push_back({record, Op::kUpdate, version_of(batch, index)});
    } else if (kind < 74) {
      plan.push_back({record, Op::kErase, 0});
    } else if (kind < 88) {  // read-modify-write: the search sees the state the update replaces
      plan.push_back({record, Op::kSearch, 0});
      plan.push_back({record, Op::kUpdate, version_of(batch, index + 1)});
    } else {
      plan.push_back({record, Op::kSearch, 0});
    }
  }
  return plan;
}

Batch BatchBuffers::batch(const WorkloadParams& params) {
  Batch b;
  b.size = ops.size();
  b.key_width = params.key_width;
  b.value_width = params.value_width;
  b.ops = ops.data();
  b.keys = keys.data();
  b.values = values.data();
  b.values_out = out.data();
  b.status = status.data();
  return b;
}

void fill_buffers(const WorkloadParams& params, const std::vector<PlannedOp>& plan, BatchBuffers& buffers) {
  const size_t n = plan.size();
  const uint32_t kw = params.key_width, vw = params.value_width;
  buffers.ops.resize(n);
  buffers.keys.assign(n * kw, std::byte{0});
  buffers.values.assign(n * vw, std::byte{0});
  buffers.out.assign(n * vw, std::byte{0});
  buffers.status.assign(n, OpStatus::kOk);
  for (size_t i = 0; i < n; ++i) {
    buffers.ops[i] = plan[i].op;
    workload::make_key(plan[i].record, kw, buffers.keys.data() + i * kw);
    if (plan[i].version != 0) workload::make_value(plan[i].record, plan[i].version, vw, buffers.values.data() + i * vw);
  }
}

uint64_t read_version(uint64_t record, const std::byte* value, uint32_t value_width) {
  uint64_t version = 0;
  return workload::check_value(record, value, value_width, &version) ? version : kTorn;
}

std::string to_string(const KeyState& s) {
  if (!s.present) return "absent";
  return s.version == kTorn ? std::string("a torn value") : fmt::format("version {:#x}", s.version);
}

CrashModel::CrashModel(uint32_t value_width) {
  const uint32_t bits = workload::stored_version_bits(value_width);
  mask_ = bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
}

const KeyState& CrashModel::state(uint64_t record) const {
  static const KeyState kAbsent{};
  return record < states_.size() ? states_[record] : kAbsent;
}

void CrashModel::set(uint64_t record, const KeyState& s) {
  if (record >= states_.size()) states_.resize(std::max<size_t>(record + 1, states_.size() * 2));
  KeyState& slot = states_[record];
  present_ += static_cast<uint64_t>(s.present) - static_cast<uint64_t>(slot.present);
  slot = s;
}

namespace {

// The sequential semantics of one op (gphash/ops.h) on one key's state.
OpStatus step(KeyState& s, const PlannedOp& op, uint64_t mask, uint64_t* seen) {
  switch (op.op) {
    case Op::kSearch:
      if (!s.present) return OpStatus::kNotFound;
      if (seen) *seen = s.version;
      return OpStatus::kOk;
    case Op::kInsert:
      if (s.present) return OpStatus::kExists;
      s = {true, op.version & mask};
      return OpStatus::kOk;
    case Op::kUpsert:
      s = {true, op.version & mask};
      return OpStatus::kOk;
    case Op::kUpdate:
      if (!s.present) return OpStatus::kNotFound;
      s.version = op.version & mask;
      return OpStatus::kOk;
    case Op::kErase:
      if (!s.present) return OpStatus::kNotFound;
      s = {};
      return OpStatus::kOk;
  }
  return OpStatus::kNotFound;
}

}  // namespace

OpStatus CrashModel::apply(const PlannedOp& op, uint64_t* seen) {
  KeyState s = state(op.record);
  const OpStatus status = step(s, op, mask_, seen);
  if (op.op != Op::kSearch) set(op.record, s);
  return status;
}

std::unordered_map<uint64_t, std::vector<KeyState>> in_flight_outcomes(const CrashModel& model,
                                                                       const std::vector<PlannedOp>& batch) {
  std::unordered_map<uint64_t, std::vector<KeyState>> outcomes;
  for (const PlannedOp& op : batch) {
    if (op.op == Op::kSearch) continue;
    auto [it, fresh] = outcomes.try_emplace(op.record);
    std::vector<KeyState>& set = it->second;
    if (fresh) set.push_back(model.state(op.record));
    // Each state reachable so far may see this op take effect or not: the reachable states after
    // it are the old ones plus the op applied to each of them (a subsequence, in batch order).
    const size_t before = set.size();
    for (size_t i = 0; i < before; ++i) {
      KeyState s = set[i];
      step(s, op, model.version_mask(), nullptr);
      if (std::find(set.begin(), set.end(), s) == set.end()) set.push_back(s);
    }
  }
  return outcomes;
}

}  // namespace gphash::crashtest
