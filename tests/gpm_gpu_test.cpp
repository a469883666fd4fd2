// libGPM on the GPU (label gpu; skipped without one): each workload of the suite on every log
// layout and mode, checked against the CPU, after a reopen (recovery at open), and the
// checkpointing solver resumed from its last checkpoint.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "gpm/examples/workloads.h"
#include "gpu_test_util.h"
#include "test_util.h"

namespace gphash {
namespace {

namespace wl = gpm::workloads;
using gpm::GpmPool;
using testing::CudaStream;
using testing::Device;
using testing::TempPool;

class GpmWorkloads : public ::testing::TestWithParam<wl::LogChoice> {};

TEST_P(GpmWorkloads, KvsSetsAreDurableAndReadBackAfterReopen) {
  REQUIRE_GPU();
  TempPool path("gpmkvs");
  CudaStream s;
  constexpr uint64_t kBuckets = 1 << 16, kBatch = 100000;
  std::unordered_map<uint64_t, uint64_t> model;
  std::unordered_map<uint64_t, std::vector<uint64_t>> history;  // every value a key was set to, in order
  std::mt19937_64 rng(5);
  // Checks the table holds the model's values; on a mismatch says which earlier value it holds.
  auto expect_model = [&](wl::Kvs& kvs, const char* when) {
    std::vector<uint64_t> keys;
    for (auto& [k, v] : model) keys.push_back(k);
    keys.push_back(999999999);  // absent
    Device<uint64_t> dk(keys), dv(keys.size());
    kvs.get(dk.p, dv.p, keys.size(), s.s);
    const std::vector<uint64_t> got = dv.get();
    for (size_t i = 0; i + 1 < keys.size(); ++i) {
      if (got[i] == model[keys[i]]) continue;
      const auto& h = history[keys[i]];
      const auto at = std::find(h.begin(), h.end(), got[i]);
      ADD_FAILURE() << when << ": key " << keys[i] << " holds " << got[i] << ", not its last value " << model[keys[i]]
                    << (at == h.end() ? " (nor any value it was set to)"
                                      : " but its value number " + std::to_string(at - h.begin()) + " of " +
                                            std::to_string(h.size()));
      return;
    }
    EXPECT_EQ(got.back(), 0u) << when;
  };
  {
    auto gp = GpmPool::create(path.path());
    gpm::DeviceGpm dev(*gp);
    wl::Kvs kvs(*gp, dev, "kvs", true, kBuckets, GetParam(), kBatch);
    for (int b = 0; b < 4; ++b) {
      std::vector<uint64_t> keys, values;
      std::unordered_map<uint64_t, bool> in_batch;
      while (keys.size() < kBatch) {
        const uint64_t k = 1 + rng() % 250000;  // later batches update earlier keys
        if (in_batch.emplace(k, true).second) {
          keys.push_back(k);
          values.push_back(rng());
        }
      }
      Device<uint64_t> dk(keys), dv(values);
      const uint64_t no_room = kvs.set(dk.p, dv.p, keys.size(), s.s);
      ASSERT_EQ(no_room, 0u);
      for (size_t i = 0; i < keys.size(); ++i) model[keys[i]] = values[i], history[keys[i]].push_back(values[i]);
    }
    expect_model(kvs, "before closing");
  }
  auto gp = GpmPool::open(path.path());
  gpm::DeviceGpm dev(*gp);
  wl::Kvs kvs(*gp, dev, "kvs", false, kBuckets, GetParam(), kBatch);
  // A clean close leaves nothing to replay or discard.
  for (const auto& [name, r] : gp->recovery_reports())
    EXPECT_EQ(r.replayed + r.discarded + r.rolled_back + r.torn_entries, 0u) << name;
  expect_model(kvs, "after reopening");
}

TEST_P(GpmWorkloads, DbInsertsAndUpdatesLandWhole) {
  REQUIRE_GPU();
  TempPool path("gpmdb");
  CudaStream s;
  constexpr uint64_t kRows = 1 << 18;
  auto gp = GpmPool::create(path.path());
  gpm::DeviceGpm dev(*gp);
  wl::Db db(*gp, dev, "db", true, kRows, GetParam(), kRows);
  db.insert(0, kRows, 1, s.s);
  db.update(3, 7, kRows / 2, 2, s.s);
  std::vector<uint64_t> stamp(kRows, 1);
  for (uint64_t i = 0; i < kRows / 2; ++i) stamp[(3 + i * 7) & (kRows - 1)] = 2;
  for (uint64_t r = 0; r < kRows; ++r)
    for (uint32_t c = 0; c < wl::Db::kColumns; ++c)
      ASSERT_EQ(db.table()[r * wl::Db::kColumns + c], wl::Db::row_value(r, c, c < 4 ? stamp[r] : 1)) << r << "/" << c;
}

INSTANTIATE_TEST_SUITE_P(Logs, GpmWorkloads,
                         ::testing::Values(wl::LogChoice{gpm::kLayoutHcl, gpm::kModeUndo},
                                           wl::LogChoice{gpm::kLayoutHcl, gpm::kModeRedo},
                                           wl::LogChoice{gpm::kLayoutConventional, gpm::kModeUndo},
                                           wl::LogChoice{gpm::kLayoutConventional, gpm::kModeRedo}),
                         [](const auto& info) {
                           std::string n = wl::to_string(info.param);
                           for (char& ch : n) if (ch == '-') ch = '_';
                           return n;
                         });

TEST(GpmNative, PrefixSumInPlaceMatchesTheCpuAndAReRunSkipsDoneBlocks) {
  REQUIRE_GPU();
  TempPool path("gpmscan");
  CudaStream s;
  constexpr uint64_t n = (1 << 22) + 77;
  auto gp = GpmPool::create(path.path());
  gpm::DeviceGpm dev(*gp);
  const uint64_t blocks = (n + wl::kScanBlock - 1) / wl::kScanBlock;
  EXPECT_EQ(wl::prefix_sum_native(*gp, dev, "scan", n, 1, s.s), blocks);
  EXPECT_EQ(wl::prefix_sum_native(*gp, dev, "scan", n, 1, s.s), 0u);  // all done: nothing recomputed
  const auto* out = reinterpret_cast<const uint64_t*>(gp->region("scan.out").host);
  uint64_t sum = 0;
  for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], sum += wl::scan_input(i)) << i;
  wl::prefix_sum_cpu_assisted(*gp, "cpuscan", n, s.s);
  const auto* cpu = reinterpret_cast<const uint64_t*>(gp->region("cpuscan.out").host);
  EXPECT_TRUE(std::equal(out, out + n, cpu));
}

TEST(GpmCheckpointGpu, SolverResumedFromItsLastCheckpointMatchesAnUninterruptedRun) {
  REQUIRE_GPU();
  TempPool path("gpmsolver");
  CudaStream s;
  constexpr uint64_t n = 1 << 20;
  {
    auto gp = GpmPool::create(path.path());
    gpm::DeviceGpm dev(*gp);
    wl::Solver solver(*gp, dev, "solver", true, n);
    EXPECT_EQ(solver.restore(s.s), 0u);
    EXPECT_EQ(solver.run(23, 5, s.s), 4u);  // checkpoints at 5, 10, 15, 20; iterations 21..23 are lost
  }
  auto gp = GpmPool::open(path.path());
  gpm::DeviceGpm dev(*gp);
  wl::Solver solver(*gp, dev, "solver", false, n);
  EXPECT_EQ(solver.restore(s.s), 20u);
  solver.run(40, 5, s.s);
  EXPECT_EQ(solver.state(), wl::Solver::reference(n, 40));
}

}  // namespace
}  // namespace gphash
