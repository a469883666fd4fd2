// What the kill test and the crash-point sweep share: a pool under test with its model, the
// child's command line, absorbing a child's report into the model, and verifying a copy.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "child_process.h"
#include "crash_workload.h"
#include "report_stream.h"
#include "verifier.h"

namespace gphash::crashtest {

struct PoolUnderTest {
  std::string path;
  std::string shape = "2L-2H-8S";  // GPHash
  std::string index = "gphash";    // or "hmeh"
  uint32_t segment_bytes = 4096;   // HMEH: small segments split often
  uint32_t capacity = 64;
  WorkloadParams params;
  uint64_t seed = 1;
  std::string engine = "cpu";  // the child's engine
  int threads = 2;             // the child's CPU threads
  bool tag_mirror = true;      // the child's OpenOptions::tag_mirror (CPU engine)
  double cache_fraction = 0.5;  // the child's BktCache fraction (GPU engine; 1: a complete copy)
  CrashModel model;            // acknowledged state (exact after each verification)
  uint64_t key_space = 0;      // records [0, key_space) may have been written
  uint64_t next_batch = 0;     // batch numbers are never reused, so versions stay unique

  PoolUnderTest(std::string p, std::string shape_, WorkloadParams params_, uint64_t seed_)
      : path(std::move(p)), shape(std::move(shape_)), params(params_), seed(seed_), model(params_.value_width) {}
  // Arguments for crash_child: creates the pool if it does not exist yet.
  std::vector<std::string> child_args(std::optional<int64_t> max_batches = std::nullopt) const;
  std::string describe() const;  // widths, shape, seed: enough to reproduce
};

// Folds a finished child's report into the model: every acknowledged batch must have reported
// the statuses and search results the model predicts (the workload after a recovery matches the
// model). Returns violations; `in_flight` receives the batch that began but was not acknowledged.
std::vector<std::string> absorb_report(PoolUnderTest& pool, const ChildReport& report,
                                       std::optional<std::vector<PlannedOp>>& in_flight,
                                       uint64_t* acked_batches = nullptr);

// Verifies a copy of the pool (the crashed original stays for the next child to recover) and,
// if it passes, adopts what the recovered copy holds as the model's exact state.
VerifyReport verify_copy(PoolUnderTest& pool, const std::optional<std::vector<PlannedOp>>& in_flight,
                         const VerifyOptions& options = {});

// A look at a pool's header and move record with pread only (safe while a child writes the pool).
struct PoolProbe {
  bool valid = false;  // a header copy with a good checksum was found
  bool clean = false;
  bool resizing = false;
  bool moving = false;  // the displacement record says a move is in progress (GPHash)
};
PoolProbe probe_pool(const std::string& path);

// Integer from the environment, or `fallback`.
int64_t env_int(const char* name, int64_t fallback);
std::string env_string(const char* name, const std::string& fallback);

}  // namespace gphash::crashtest
