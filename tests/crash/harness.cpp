#include "harness.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>

#include "format/header.h"

namespace gphash::crashtest {

std::vector<std::string> PoolUnderTest::child_args(std::optional<int64_t> max_batches) const {
  std::vector<std::string> a = {"--pool",
                                path,
                                "--report-fd",
                                "3",
                                "--engine",
                                engine,
                                "--threads",
                                std::to_string(threads),
                                "--seed",
                                std::to_string(seed),
                                "--first-batch",
                                std::to_string(next_batch),
                                "--key-width",
                                std::to_string(params.key_width),
                                "--value-width",
                                std::to_string(params.value_width),
                                "--key-space-start",
                                std::to_string(params.key_space_start),
                                "--key-space-doubling",
                                std::to_string(params.key_space_doubling),
                                "--key-space-growth",
                                std::to_string(params.key_space_growth),
                                "--key-space-max",
                                std::to_string(params.key_space_max),
                                "--max-batch-ops",
                                std::to_string(params.max_batch_ops)};
  if (!file_exists(path)) {
    a.insert(a.end(), {"--create", "--index", index, "--shape", shape, "--segment-bytes", std::to_string(segment_bytes),
                       "--capacity", std::to_string(capacity)});
  }
  if (max_batches) a.insert(a.end(), {"--max-batches", std::to_string(*max_batches)});
  if (!tag_mirror) a.push_back("--no-tag-mirror");
  if (engine == "gpu") a.insert(a.end(), {"--cache-fraction", fmt::format("{}", cache_fraction)});
  return a;
}

std::string PoolUnderTest::describe() const {
  const std::string layout =
      index == "hmeh" ? fmt::format("hmeh, {}-byte segments", segment_bytes) : fmt::format("gphash {}", shape);
  return fmt::format("pool {} (key width {}, value width {}, {}, capacity {}, seed {}, engine {}, threads {}{}{})", path,
                     params.key_width, params.value_width, layout, capacity, seed, engine, threads,
                     tag_mirror ? "" : ", no tag mirror",
                     engine == "gpu" ? fmt::format(", cache fraction {}", cache_fraction) : "");
}

std::vector<std::string> absorb_report(PoolUnderTest& pool, const ChildReport& report,
                                       std::optional<std::vector<PlannedOp>>& in_flight, uint64_t* acked_batches) {
  std::vector<std::string> violations;
  in_flight.reset();
  if (report.acks.size() > report.begins.size() || report.begins.size() > report.acks.size() + 1)
    violations.push_back(
        fmt::format("child reported {} BEGIN and {} ACK records", report.begins.size(), report.acks.size()));
  for (size_t i = 0; i < report.begins.size(); ++i) {
    const BeginRecord& begin = report.begins[i];
    for (const PlannedOp& op : begin.ops) pool.key_space = std::max(pool.key_space, op.record + 1);
    pool.next_batch = begin.batch + 1;
    if (i >= report.acks.size()) {
      in_flight = begin.ops;
      break;
    }
    const AckRecord& ack = report.acks[i];
    if (ack.batch != begin.batch || ack.status.size() != begin.ops.size()) {
      violations.push_back(fmt::format("ACK of batch {} does not match BEGIN of batch {}", ack.batch, begin.batch));
      break;
    }
    for (size_t k = 0; k < begin.ops.size(); ++k) {
      const PlannedOp& op = begin.ops[k];
      uint64_t seen = 0;
      const OpStatus want = pool.model.apply(op, &seen);
      if (ack.status[k] != want && violations.size() < 20)
        violations.push_back(
            fmt::format("batch {} op {} ({} of record {}): the child got status '{}', the model says '{}'", begin.batch,
                        k, to_string(op.op), op.record, to_string(ack.status[k]), to_string(want)));
      if (op.op == Op::kSearch && want == OpStatus::kOk && ack.status[k] == OpStatus::kOk &&
          (ack.seen[k] == kTorn ? kTorn : pool.model.version_mask() & ack.seen[k]) != seen && violations.size() < 20)
        violations.push_back(fmt::format(
            "batch {} op {} (search of record {}): the child read {}, the model says {:#x}", begin.batch, k, op.record,
            ack.seen[k] == kTorn ? std::string("a torn value") : fmt::format("{:#x}", ack.seen[k]), seen));
    }
    if (acked_batches) ++*acked_batches;
  }
  return violations;
}

VerifyReport verify_copy(PoolUnderTest& pool, const std::optional<std::vector<PlannedOp>>& in_flight,
                         const VerifyOptions& options) {
  const std::string copy = pool.path + ".verify";
  copy_file(pool.path, copy);
  Expectation expect{&pool.model, pool.key_space, in_flight ? &*in_flight : nullptr};
  VerifyReport report = verify_pool(copy, expect, options);
  remove_pool_and_leftovers(copy);
  if (report.ok())
    for (uint64_t r = 0; r < pool.key_space; ++r) pool.model.set(r, report.observed[r]);
  return report;
}

PoolProbe probe_pool(const std::string& path) {
  PoolProbe probe;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return probe;
  format::PoolHeader h[2];
  const format::PoolHeader* best = nullptr;
  for (int c = 0; c < 2; ++c) {
    if (pread(fd, &h[c], sizeof h[c], static_cast<off_t>(format::kHeaderCopyOffset[c])) != sizeof h[c]) continue;
    if (format::header_checksum(h[c]) != h[c].checksum) continue;
    if (!best || h[c].generation > best->generation) best = &h[c];
  }
  const bool gphash = best && best->index_kind == format::kIndexGphash;
  if (best) {
    probe.valid = true;
    probe.clean = best->clean_shutdown != 0;
    probe.resizing = gphash && best->gphash.resize_state != format::kResizeNone;
  }
  format::MaintenanceRecord rec{};
  if (gphash && pread(fd, &rec, sizeof rec, static_cast<off_t>(format::kMaintenanceOffset)) == sizeof rec)
    probe.moving = rec.move_state == format::kMoveInProgress;
  close(fd);
  return probe;
}

int64_t env_int(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoll(v, nullptr, 10) : fallback;
}

std::string env_string(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

}  // namespace gphash::crashtest
