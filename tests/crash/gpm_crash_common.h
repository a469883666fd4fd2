// What the GPM crash child writes and the GPM crash test verifies (tests/crash/gpm_crash_*.cpp).
#pragma once

#include <cstdint>
#include <string>

#include "gpm/examples/workloads.h"

namespace gphash::gpmcrash {

inline constexpr uint64_t kKvsBuckets = 1 << 16;
inline constexpr uint64_t kKvsKeys = 200000;  // every batch sets keys 1..kKvsKeys
inline constexpr uint64_t kDbRows = 1 << 18;  // batch 0 inserts every row (stamp 1), batch b updates every row (stamp b+1)
inline constexpr uint64_t kSolverWords = 1 << 12;  // the CPU reference replays every iteration: keep it small
inline constexpr uint64_t kSolverEvery = 3;

inline uint64_t kvs_value(uint64_t key, uint64_t batch) { return key * 1000003 + batch + 1; }

inline gpm::workloads::LogChoice log_of(const std::string& workload) {
  gpm::workloads::LogChoice c;
  c.layout = workload.find("conventional") != std::string::npos ? gpm::kLayoutConventional : gpm::kLayoutHcl;
  c.mode = workload.find("redo") != std::string::npos ? gpm::kModeRedo : gpm::kModeUndo;
  return c;
}

}  // namespace gphash::gpmcrash
