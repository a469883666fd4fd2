// The crash tests' verdict on a pool after a crash: recover it, then check it against what was
// acknowledged (DESIGN.md section 5, tier 2):
//   - no lost acknowledged write: each record shows its acknowledged state, or, if the batch in
//     flight touched it, one of the states that batch could have left (crash_workload.h);
//   - acknowledged erases stay erased (the same rule: absent is the only acknowledged state);
//   - no torn value (workload::check_value), no value of another record;
//   - no phantom: a raw scan of every slot finds only keys of records the workload wrote, each
//     once, with the value a lookup returns; the counts of the scan, the lookups, the engine and
//     the clean header agree; Table::check() holds (placement, fingerprints, duplicates, cells);
//   - recovery is idempotent: marking the recovered pool dirty again (as if the process died
//     right after recovery) and recovering once more changes nothing, nor does a clean reopen.
// The recovering engine is chosen by VerifyOptions, so the GPU engine can be checked the same way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "crash_workload.h"
#include "gphash/config.h"

namespace gphash::crashtest {

struct Expectation {
  const CrashModel* acked = nullptr;                  // state after the acknowledged batches
  uint64_t key_space = 0;                             // records [0, key_space) may have been written
  const std::vector<PlannedOp>* in_flight = nullptr;  // the batch cut short, if any
};

struct VerifyOptions {
  OpenOptions open;          // how to open the pool for recovery (engine, threads)
  bool idempotence = true;   // recover a second time and compare
  bool clean_reopen = true;  // and reopen cleanly and compare
  bool raw_scan = true;
};

struct VerifyReport {
  std::vector<std::string> violations;  // empty: the pool passed (at most 20 are kept)
  bool ok() const { return violations.empty(); }
  std::vector<KeyState> observed;  // by record, [0, key_space): what the recovered pool holds
  bool recovered = false;          // the first open ran recovery
  double open_seconds = 0;
  uint64_t items = 0;
  uint64_t in_flight_records = 0;  // records the batch in flight wrote
  uint64_t in_flight_applied = 0;  // of which the recovered pool shows a new state
  std::string summary() const;     // the violations, one per line
};

VerifyReport verify_pool(const std::string& path, const Expectation& expect, const VerifyOptions& options = {});

// Marks a pool not cleanly shut down, as if its process had died right now (for idempotence
// checks and recovery timing); the table itself is untouched.
void mark_dirty(const std::string& path);

}  // namespace gphash::crashtest
