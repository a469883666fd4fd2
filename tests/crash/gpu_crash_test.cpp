// GPU crash injection (DESIGN.md section 5, tier 2 on the GPU): the child runs the GPU engine with
// GPHASH_GPU_CRASH_AFTER=N, so the GPU thread making the N-th persistent store traps: the kernel
// dies in the middle of its protocol steps, as it would on a GPU fault, with other warps' stores in
// flight, and the child exits on the CUDA error. The parent recovers a copy of the pool with the
// CPU engine and with the GPU engine and verifies it against what was acknowledged (verifier.h).
// N sweeps (1, 3, 7, 15, ...) from the first stores of the first batch to deep into the workload, so the traps land
// in inserts, updates, erases, cell writes, resizes (the rehash kernel) and displacement moves.
// Needs a GPU (skipped otherwise); scripts/gpu_check.sh runs it on the GPU machine.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <unistd.h>

#include "engines/gpu/gpu_engine.h"
#include "harness.h"

namespace gphash::crashtest {
namespace {

struct Config {
  const char* name;
  uint32_t key_width, value_width;
  const char* shape;
  double cache_fraction;  // BktCache's; 1: a complete copy, every hit from GPU memory
};
const Config kConfigs[] = {
    {"k8_v8_2L2H8S", 8, 8, "2L-2H-8S", 0.5},
    {"k16_v40_4L2H4S", 16, 40, "4L-2H-4S", 0.5},
    {"k32_v128_1L4H8S", 32, 128, "1L-4H-8S", 0.5},
    {"k32_v40_2L2H8S_complete", 32, 40, "2L-2H-8S", 1.0},
};
constexpr int64_t kBatches = 40;

TEST(GpuCrashInjection, TrapAtEveryDepthRecoversWithBothEngines) {
  std::string why;
  if (!engine::gpu_available(&why)) GTEST_SKIP() << "no GPU: " << why;
  int traps = 0, finished = 0;
  for (const Config& c : kConfigs) {
    for (uint64_t n = 1; n < (uint64_t{1} << 40); n = n * 2 + 1) {
      WorkloadParams p;
      p.key_width = c.key_width;
      p.value_width = c.value_width;
      p.key_space_start = 64;
      p.key_space_growth = 64;
      p.key_space_max = 3000;
      p.max_batch_ops = 400;
      PoolUnderTest pool(fmt::format("/dev/shm/gphash-gputrap-{}-{}-{}", getpid(), c.name, n), c.shape, p, 11);
      pool.capacity = 32;  // small: the workload crosses resizes and heap growth
      pool.engine = "gpu";
      pool.cache_fraction = c.cache_fraction;
      remove_pool_and_leftovers(pool.path);
      ChildProcess child(crash_child_path(), pool.child_args(kBatches), {fmt::format("GPHASH_GPU_CRASH_AFTER={}", n)});
      child.wait();
      const ChildReport& report = child.report();
      std::optional<std::vector<PlannedOp>> in_flight;
      const std::vector<std::string> v = absorb_report(pool, report, in_flight);
      ASSERT_TRUE(v.empty()) << pool.describe() << " trap at store " << n << ":\n" << fmt::format("{}", fmt::join(v, "\n"));
      const bool trapped = !report.done;
      ASSERT_TRUE(trapped || child.exited_cleanly()) << child.describe_status() << ": " << report.error;
      if (!report.opened) {  // trapped before the pool existed on disk: nothing to verify
        remove_pool_and_leftovers(pool.path);
        continue;
      }
      for (EngineKind engine : {EngineKind::kCpu, EngineKind::kGpu}) {
        VerifyOptions options;
        options.open.engine = engine;
        PoolUnderTest copy = pool;  // verify_copy adopts the recovered state; each engine starts from the crash
        const VerifyReport r = verify_copy(copy, in_flight, options);
        ASSERT_TRUE(r.ok()) << pool.describe() << " trap at store " << n << ", recovered by the "
                            << (engine == EngineKind::kGpu ? "GPU" : "CPU") << " engine:\n"
                            << r.summary();
      }
      remove_pool_and_leftovers(pool.path);
      if (!trapped) {
        ++finished;
        break;  // the workload makes fewer stores than n: deeper traps would not fire
      }
      ++traps;
    }
  }
  RecordProperty("traps", traps);
  std::printf("GPU crash injection: %d traps verified with both engines (%d configurations ran to the end)\n", traps,
              finished);
  EXPECT_GE(traps, 30);
}

// A CUDA call that fails in the middle of a batch (GPHASH_GPU_FAIL_AT=N: the N-th checked CUDA call
// of the child fails): the batch gets a typed error, the table refuses further work without marking
// the pool clean, and the next open recovers every acknowledged write.
TEST(GpuFaults, ACudaErrorInTheMiddleOfABatchLosesNoAcknowledgedWrite) {
  std::string why;
  if (!engine::gpu_available(&why)) GTEST_SKIP() << "no GPU: " << why;
  int failures = 0;
  for (uint64_t n = 40; n < 20000; n = n * 3 / 2) {
    WorkloadParams p;
    p.key_space_start = 64;
    p.key_space_growth = 64;
    p.key_space_max = 3000;
    p.max_batch_ops = 400;
    PoolUnderTest pool(fmt::format("/dev/shm/gphash-gpufail-{}-{}", getpid(), n), "2L-2H-8S", p, 13);
    pool.capacity = 32;
    pool.engine = "gpu";
    remove_pool_and_leftovers(pool.path);
    ChildProcess child(crash_child_path(), pool.child_args(kBatches), {fmt::format("GPHASH_GPU_FAIL_AT={}", n)});
    child.wait();
    const ChildReport& report = child.report();
    std::optional<std::vector<PlannedOp>> in_flight;
    const std::vector<std::string> v = absorb_report(pool, report, in_flight);
    ASSERT_TRUE(v.empty()) << pool.describe() << " CUDA failure at call " << n << ":\n" << fmt::format("{}", fmt::join(v, "\n"));
    if (!report.opened) {
      remove_pool_and_leftovers(pool.path);
      continue;
    }
    if (!report.done) {
      ++failures;
      EXPECT_NE(report.error.find("CUDA"), std::string::npos) << "not a typed CUDA error: " << report.error;
    }
    VerifyOptions options;
    options.open.engine = EngineKind::kGpu;
    const VerifyReport r = verify_copy(pool, in_flight, options);
    ASSERT_TRUE(r.ok()) << pool.describe() << " CUDA failure at call " << n << ":\n" << r.summary();
    remove_pool_and_leftovers(pool.path);
    if (report.done) break;
  }
  std::printf("forced CUDA failures: %d verified\n", failures);
  EXPECT_GE(failures, 5);
}

}  // namespace
}  // namespace gphash::crashtest
