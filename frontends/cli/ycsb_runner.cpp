#include "ycsb_runner.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "workload/records.h"

namespace gphash::cli {

double RunResult::batch_percentile(double q) const {
  if (batch_seconds.empty()) return 0;
  std::vector<double> v = batch_seconds;
  size_t k = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

double RunResult::loading_device_ops_per_second() const {
  return loading_device_seconds > 0 ? static_cast<double>(loading_operations) / loading_device_seconds : 0;
}

double RunResult::steady_device_ops_per_second() const {
  const double s = device_seconds - loading_device_seconds;
  return s > 0 ? static_cast<double>(operations - loading_operations) / s : 0;
}

RunResult run_workload(Table& table, const workload::WorkloadSpec& spec, const RunOptions& options) {
  using Clock = std::chrono::steady_clock;
  const auto wall0 = Clock::now();
  const uint32_t kw = table.key_width(), vw = table.value_width();
  workload::WorkloadGenerator gen(spec);
  RunResult r;
  r.workload = std::string(workload::name(spec.workload));
  r.distribution = spec.workload == workload::Workload::Load ? "-" : std::string(workload::name(gen.distribution()));
  const TableInfo before = table.info();
  TableInfo previous = before;

  std::vector<workload::Op> wops(options.batch_size);
  // A read-modify-write becomes two table operations, so a batch holds up to twice as many.
  std::vector<Op> ops(2 * options.batch_size);
  std::vector<uint64_t> records(2 * options.batch_size);
  std::vector<std::byte> keys(2 * options.batch_size * kw), values(2 * options.batch_size * vw),
      out(2 * options.batch_size * vw);
  std::vector<OpStatus> status(2 * options.batch_size);
  uint64_t version = spec.workload == workload::Workload::Load ? 0 : 1 + spec.seed * (uint64_t{1} << 40);

  for (;;) {
    const size_t got = gen.next(wops);
    if (got == 0) break;
    size_t n = 0;
    auto add = [&](Op op, uint64_t record) {
      ops[n] = op;
      records[n] = record;
      workload::make_key(record, kw, &keys[n * kw]);
      if (op != Op::kSearch && op != Op::kErase) workload::make_value(record, version++, vw, &values[n * vw]);
      ++n;
    };
    for (size_t i = 0; i < got; ++i) {
      const workload::Op& w = wops[i];
      switch (w.type) {
        case workload::OpType::Read: add(Op::kSearch, w.record); break;
        case workload::OpType::Update: add(Op::kUpdate, w.record); break;
        case workload::OpType::Insert: add(Op::kInsert, w.record); break;
        case workload::OpType::ReadModifyWrite:
          add(Op::kSearch, w.record);
          add(Op::kUpdate, w.record);
          break;
        case workload::OpType::ReadAbsent: add(Op::kSearch, w.record); break;
        case workload::OpType::Delete: add(Op::kErase, w.record); break;
      }
    }
    Batch b;
    b.size = n;
    b.key_width = kw;
    b.value_width = vw;
    b.ops = ops.data();
    b.keys = keys.data();
    b.values = values.data();
    b.values_out = out.data();
    b.status = status.data();
    double dt = 0;
    if (options.execute) {
      dt = options.execute(table, b);
    } else {
      const auto t0 = Clock::now();
      table.execute(b);
      dt = std::chrono::duration<double>(Clock::now() - t0).count();
    }
    r.seconds += dt;
    r.batch_seconds.push_back(dt);
    const TableInfo after = table.info();
    r.device_seconds += after.last_batch_device_seconds;
    r.plan_seconds += after.last_plan_seconds;
    r.kernel_seconds += after.last_kernel_seconds;
    r.slow_seconds += after.last_slow_seconds;
    r.operations += got;
    r.table_ops += n;
    if (after.last_batch_cache_loading) {
      r.loading_operations += got;
      r.loading_device_seconds += after.last_batch_device_seconds;
    }
    r.timeline.push_back({r.operations, r.seconds, after.load_factor, after.cache_lookups - previous.cache_lookups,
                          after.cache_hits - previous.cache_hits});
    previous = after;
    for (size_t i = 0; i < n; ++i) {
      if (ops[i] == Op::kSearch && records[i] >= workload::kAbsentRecordBase) {
        if (status[i] != OpStatus::kNotFound) ++r.found_absent;
      } else if (ops[i] == Op::kSearch) {
        if (status[i] != OpStatus::kOk) {
          ++r.not_found;
        } else if (options.verify_values && !workload::check_value(records[i], &out[i * vw], vw, nullptr)) {
          ++r.bad_values;
        }
      } else if (status[i] != OpStatus::kOk) {
        ++r.failed_writes;
      }
    }
    if (options.progress) options.progress(gen.operations_generated(), gen.operations_total());
  }
  TableInfo info = table.info();
  r.items_after = info.items;
  r.load_factor_after = info.load_factor;
  r.resizes = info.resizes - before.resizes;
  r.heap_grows = info.heap_grows - before.heap_grows;
  r.resize_seconds = info.resize_seconds - before.resize_seconds;
  r.rehash_seconds = info.rehash_seconds - before.rehash_seconds;
  r.heap_grow_seconds = info.heap_grow_seconds - before.heap_grow_seconds;
  r.displacements = info.displacements - before.displacements;
  if (info.cache_gpu_bytes) {
    const uint64_t lookups = info.cache_lookups - before.cache_lookups;
    r.cache_hit_rate = lookups ? static_cast<double>(info.cache_hits - before.cache_hits) / static_cast<double>(lookups) : 0;
    r.cache_gpu_bytes = info.cache_gpu_bytes;
    r.cache_lines_loaded = info.cache_lines_loaded - before.cache_lines_loaded;
  }
  r.wall_seconds = std::chrono::duration<double>(Clock::now() - wall0).count();
  return r;
}

}  // namespace gphash::cli
