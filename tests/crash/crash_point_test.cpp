// Named crash points (src/engines/common/crash_point.h), swept deterministically: for every
// point and a few hit numbers N, a child runs a fixed workload with GPHASH_CRASH_AT=point:N and
// dies there; the parent recovers a copy and verifies it (verifier.h). The child runs the CPU
// engine with one thread, so the N-th hit is the same moment in every run and a failure names
// a reproducible crash: point, N, configuration.
//
// Recovery is swept the same way: a first crash leaves recovery work (an interrupted resize,
// move or insert); then a second child dies at each point recovery reaches, and the pool must
// still recover to the state the first crash allows, also when the next child recovers the
// twice-crashed pool in place and carries on.
//
// The list of points comes from the header itself, and the sweep fails if a point that the
// engine under test should reach is never reached, so a new point cannot be left out.
// Environment: GPHASH_CRASH_ENGINE (cpu or gpu: which points are in scope and which engine the
// child runs; default cpu), GPHASH_CRASH_SEED (the workload's seed, default 1).
#include "engines/common/crash_point.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include "harness.h"

namespace gphash::crashtest {
namespace {

struct SweepConfig {
  const char* name;
  uint32_t key_width, value_width;
  const char* shape;  // GPHash; nullptr: an HMEH pool (4 KiB segments, so a small key space splits)
};
// GPHash: every key width with every shape, inline values (8 and 4 bytes) and heap values.
// HMEH: both key widths, inline and heap values.
const SweepConfig kConfigs[] = {
    {"k8_v8_2L2H8S", 8, 8, "2L-2H-8S"},       {"k16_v40_4L2H4S", 16, 40, "4L-2H-4S"},
    {"k32_v128_1L4H8S", 32, 128, "1L-4H-8S"}, {"k8_v24_4L2H4S", 8, 24, "4L-2H-4S"},
    {"k16_v4_1L4H8S", 16, 4, "1L-4H-8S"},     {"k32_v16_2L2H8S", 32, 16, "2L-2H-8S"},
    {"hmeh_k8_v8", 8, 8, nullptr},            {"hmeh_k16_v40", 16, 40, nullptr},
    {"hmeh_k8_v24", 8, 24, nullptr},
};
constexpr int64_t kBatches = 48;

std::string engine_under_test() { return env_string("GPHASH_CRASH_ENGINE", "cpu"); }

bool is_hmeh(const SweepConfig& c) { return c.shape == nullptr; }
// The GPU engine runs GPHash pools only.
bool runs(const SweepConfig& c) { return !is_hmeh(c) || engine_under_test() == "cpu"; }

// Whether a configuration's runs should reach a point: HMEH pools reach HMEH's points and the
// header writes; GPHash pools the common points and those of the engine under test.
bool in_scope(const crash::PointInfo& p, const SweepConfig& c) {
  if (p.scope == crash::kSnapshot) return false;  // tests/snapshot_crash_test.cpp sweeps those
  if (is_hmeh(c)) return p.scope == crash::kHmeh || std::string(p.name).rfind("header.", 0) == 0;
  if (p.scope == crash::kHmeh) return false;
  return p.scope == crash::kCommon || (p.scope == crash::kCpu) == (engine_under_test() == "cpu");
}

PoolUnderTest sweep_pool(const SweepConfig& c, const std::string& tag) {
  WorkloadParams p;
  p.key_width = c.key_width;
  p.value_width = c.value_width;
  p.key_space_start = 64;
  p.key_space_doubling = 8;
  p.key_space_max = 2400;
  p.max_batch_ops = 200;
  const uint64_t seed = static_cast<uint64_t>(env_int("GPHASH_CRASH_SEED", 1));
  PoolUnderTest pool(fmt::format("/dev/shm/gphash-sweep-{}-{}-{}", getpid(), c.name, tag),
                     is_hmeh(c) ? "2L-2H-8S" : c.shape, p, seed);
  pool.capacity = 32;
  if (is_hmeh(c)) {  // enough records to split 4 KiB segments of 8-byte keys several times
    pool.index = "hmeh";
    pool.segment_bytes = 4096;
    pool.params.key_space_max = 4800;
    pool.params.max_batch_ops = 500;
  }
  pool.threads = 1;  // one thread: the N-th hit of a point is the same moment in every run
  pool.engine = engine_under_test();
  remove_pool_and_leftovers(pool.path);
  return pool;
}

std::string crash_at(int point, uint64_t n) {
  return fmt::format("GPHASH_CRASH_AT={}:{}", crash::kPoints[point].name, n);
}

// Hit numbers to crash at: the first few (the first resize, the first move...), then spread over
// the run up to the last hit.
std::vector<uint64_t> hit_numbers(uint64_t hits) {
  std::set<uint64_t> n;
  for (uint64_t x : {uint64_t{1}, uint64_t{2}, uint64_t{3}, uint64_t{5}, uint64_t{10}, uint64_t{30}, hits / 4, hits / 2,
                     3 * hits / 4, hits})
    if (x >= 1 && x <= hits) n.insert(x);
  return {n.begin(), n.end()};
}

// Runs a child to its end (a crash point or --max-batches) and folds its report into the model.
struct ChildRun {
  bool killed = false;
  bool opened = false;
  std::optional<std::vector<PlannedOp>> in_flight;
  ChildReport report;
};
ChildRun run_child(PoolUnderTest& pool, std::optional<int64_t> max_batches, const std::vector<std::string>& env) {
  ChildProcess child(crash_child_path(), pool.child_args(max_batches), env);
  child.wait();
  ChildRun r;
  r.killed = child.killed_by_sigkill();
  r.report = child.report();
  r.opened = r.report.opened;
  EXPECT_TRUE(r.killed || child.exited_cleanly()) << "child " << child.describe_status() << ": " << r.report.error;
  const std::vector<std::string> v = absorb_report(pool, r.report, r.in_flight);
  EXPECT_TRUE(v.empty()) << pool.describe() << ":\n" << fmt::format("{}", fmt::join(v, "\n"));
  return r;
}

// Hits of every point in a whole workload run without crashing (cached per configuration).
const std::vector<uint64_t>& workload_hits(const SweepConfig& c) {
  static std::map<std::string, std::vector<uint64_t>> cache;
  auto it = cache.find(c.name);
  if (it != cache.end()) return it->second;
  PoolUnderTest pool = sweep_pool(c, "calibrate");
  ChildRun r = run_child(pool, kBatches, {"GPHASH_CRASH_COUNT=1"});
  remove_pool_and_leftovers(pool.path);
  EXPECT_TRUE(r.report.done) << "calibration run of " << c.name << " did not finish: " << r.report.error;
  std::vector<uint64_t> hits = r.report.done_hits;
  hits.resize(crash::kPointCount, 0);
  return cache[c.name] = hits;
}

// Crashes that leave recovery work, as (point, which hit). GPHash: a resize interrupted before any
// item moved and in the middle of its rehash, a move with both copies published, and an insert
// whose slot is claimed but not published: in the pool only without the tag mirror (claims are
// made in the mirror otherwise), as pools written by an engine without it have. HMEH: an insert's
// claim, and a split just published (the flat directory must be rebuilt from the radix tree, the
// old segment is free again).
struct SetupPoint {
  const char* point;
  double fraction;          // of the workload's hits of that point (0: the first hit)
  bool tag_mirror = true;   // the crashed child's OpenOptions::tag_mirror
};
const SetupPoint kSetups[] = {
    {"resize.begin.after_header", 0.5},
    {"rehash.after_copy_up", 0.5},
    {"move.after_link", 0},
    {"insert.after_claim", 0.5},
    {"insert.after_claim", 0.5, false},
};
const SetupPoint kHmehSetups[] = {
    {"hmeh.insert.after_claim", 0.5},
    {"hmeh.split.after_publish", 0.5},
};
std::vector<SetupPoint> setups_for(const SweepConfig& c) {
  if (is_hmeh(c)) return {std::begin(kHmehSetups), std::end(kHmehSetups)};
  return {std::begin(kSetups), std::end(kSetups)};
}

// A first crash that leaves recovery work, and which points recovery of it reaches how often.
struct SetupCrash {
  std::optional<PoolUnderTest> pool;  // model and batch numbers as the crash left them
  std::optional<std::vector<PlannedOp>> in_flight;
  std::string copy;  // the crashed pool, kept as a template
  std::vector<uint64_t> recovery_hits;
  std::string what;
};
SetupCrash setup_crash(const SweepConfig& c, const SetupPoint& setup) {
  SetupCrash s;
  const int point = crash::index_of(setup.point);
  const uint64_t workload = workload_hits(c)[point];
  if (workload == 0) return s;  // e.g. no displacement in this configuration
  const uint64_t n = std::max<uint64_t>(1, static_cast<uint64_t>(setup.fraction * static_cast<double>(workload)));
  s.what = fmt::format("{} after a crash at {}:{}{}", c.name, setup.point, n, setup.tag_mirror ? "" : " without the tag mirror");
  s.pool.emplace(sweep_pool(c, "setup"));
  s.pool->tag_mirror = setup.tag_mirror;
  ChildRun first = run_child(*s.pool, kBatches, {crash_at(point, n)});
  EXPECT_TRUE(first.killed) << s.what << ": the setup crash did not happen";
  s.in_flight = first.in_flight;
  s.copy = s.pool->path + ".setup";
  copy_file(s.pool->path, s.copy);
  PoolUnderTest probe = *s.pool;
  ChildRun counting = run_child(probe, 0, {"GPHASH_CRASH_COUNT=1"});
  EXPECT_TRUE(counting.report.done && counting.report.open.recovered) << s.what << ": " << counting.report.error;
  s.recovery_hits = counting.report.open.hits;
  s.recovery_hits.resize(crash::kPointCount, 0);
  copy_file(s.copy, s.pool->path);  // the counting child recovered it: restore the crashed state
  return s;
}

void remove_setup(const SetupCrash& s) {
  if (s.pool) remove_pool_and_leftovers(s.pool->path);
  if (!s.copy.empty()) remove_pool_and_leftovers(s.copy);
}

class CrashPointSweep : public ::testing::TestWithParam<SweepConfig> {};

TEST_P(CrashPointSweep, CrashAtEveryPointKeepsAcknowledgedState) {
  const SweepConfig c = GetParam();
  if (!runs(c)) GTEST_SKIP() << "the GPU engine runs GPHash pools only";
  const std::vector<uint64_t>& hits = workload_hits(c);
  uint64_t crashes = 0, in_flight = 0, points = 0;
  for (int point = 0; point < crash::kPointCount; ++point) {
    if (!in_scope(crash::kPoints[point], c) || hits[point] == 0) continue;
    ++points;
    for (uint64_t n : hit_numbers(hits[point])) {
      const std::string what = fmt::format("{} at {}:{}", c.name, crash::kPoints[point].name, n);
      PoolUnderTest pool = sweep_pool(c, "point");
      ChildRun r = run_child(pool, kBatches, {crash_at(point, n)});
      ASSERT_TRUE(r.killed) << what << ": the child finished without reaching the crash point";
      ++crashes;
      in_flight += r.in_flight.has_value();
      ASSERT_TRUE(file_exists(pool.path)) << what << ": no pool after the crash";
      VerifyReport v = verify_copy(pool, r.in_flight);
      ASSERT_TRUE(v.ok()) << what << ", " << pool.describe() << ":\n" << v.summary();
      if (n == 1) {
        // The next child recovers the crashed pool in place and carries on; its batches must
        // match the model, and so must the pool it leaves.
        ChildRun next = run_child(pool, 4, {});
        ASSERT_TRUE(next.report.done) << what << ": the child after the crash failed: " << next.report.error;
        ASSERT_TRUE(next.report.open.recovered) << what << ": the crashed pool did not run recovery";
        VerifyReport v2 = verify_copy(pool, std::nullopt);
        ASSERT_TRUE(v2.ok()) << what << ", after recovering in place and continuing:\n" << v2.summary();
      }
      remove_pool_and_leftovers(pool.path);
    }
  }
  fmt::print("[crash_point_test] {}: {} crashes at {} points ({} with a batch in flight), all recovered\n", c.name,
             crashes, points, in_flight);
}

TEST_P(CrashPointSweep, CrashDuringRecoveryThenRecoverAgain) {
  if (engine_under_test() != "cpu") GTEST_SKIP() << "the setups name CPU-engine points";
  const SweepConfig c = GetParam();
  uint64_t runs = 0;
  for (const SetupPoint& setup : setups_for(c)) {
    const SetupCrash s = setup_crash(c, setup);
    if (!s.pool) continue;
    ASSERT_FALSE(HasFailure());
    uint64_t recovery_crashes = 0;
    for (int point = 0; point < crash::kPointCount; ++point) {
      if (s.recovery_hits[point] == 0) continue;
      for (uint64_t n : hit_numbers(s.recovery_hits[point])) {
        const std::string what =
            fmt::format("{}, then during recovery at {}:{}", s.what, crash::kPoints[point].name, n);
        PoolUnderTest pool = *s.pool;
        copy_file(s.copy, pool.path);
        ChildRun second = run_child(pool, 2, {crash_at(point, n)});
        ++runs;
        ASSERT_TRUE(second.killed && !second.opened) << what << ": the child did not die during recovery";
        ++recovery_crashes;
        VerifyReport v = verify_copy(pool, s.in_flight);
        ASSERT_TRUE(v.ok()) << what << ", " << pool.describe() << ":\n" << v.summary();
        if (n == 1 || n == s.recovery_hits[point]) {
          // Recover the twice-crashed pool in place (the next child) and carry on.
          ChildRun next = run_child(pool, 3, {});
          ASSERT_TRUE(next.report.done) << what << ": the next child failed: " << next.report.error;
          VerifyReport v2 = verify_copy(pool, std::nullopt);
          ASSERT_TRUE(v2.ok()) << what << ", after recovering in place and continuing:\n" << v2.summary();
        }
      }
    }
    EXPECT_GT(recovery_crashes, 0u) << s.what << ": recovery reached no crash point";
    remove_setup(s);
  }
  fmt::print("[crash_point_test] {}: {} crashes during recovery, all recovered\n", c.name, runs);
}

INSTANTIATE_TEST_SUITE_P(Configurations, CrashPointSweep, ::testing::ValuesIn(kConfigs),
                         [](const ::testing::TestParamInfo<SweepConfig>& i) { return std::string(i.param.name); });

// The sweeps crash at every point their workload or a setup's recovery reaches; this test makes
// sure that is every point in scope, so a point added to the list cannot go unswept.
TEST(CrashPointCoverage, EveryPointInScopeIsReachedByTheSweep) {
  std::vector<uint64_t> reached(crash::kPointCount, 0);
  std::vector<bool> wanted(crash::kPointCount, false);
  for (const SweepConfig& c : kConfigs) {
    if (!runs(c)) continue;
    for (int i = 0; i < crash::kPointCount; ++i) wanted[i] = wanted[i] || in_scope(crash::kPoints[i], c);
    const std::vector<uint64_t>& hits = workload_hits(c);
    for (int i = 0; i < crash::kPointCount; ++i) reached[i] += hits[i];
    if (engine_under_test() != "cpu") continue;
    for (const SetupPoint& setup : setups_for(c)) {
      const SetupCrash s = setup_crash(c, setup);
      for (int i = 0; i < crash::kPointCount && s.pool; ++i) reached[i] += s.recovery_hits[i];
      remove_setup(s);
    }
  }
  std::vector<std::string> missed;
  int in_scope_count = 0;
  for (int i = 0; i < crash::kPointCount; ++i) {
    if (!wanted[i]) continue;
    ++in_scope_count;
    if (reached[i] == 0) missed.push_back(crash::kPoints[i].name);
  }
  fmt::print("[crash_point_test] {} of {} points in scope are reached\n",
             in_scope_count - static_cast<int>(missed.size()), in_scope_count);
  EXPECT_TRUE(missed.empty()) << "never reached by the sweep (extend its workload or setups): "
                              << fmt::format("{}", fmt::join(missed, ", "));
}

// Not a crash: a race between the CPU engine's two worker threads that the kill test found
// (torn reads in acknowledged batches, "shares value cell" from check). Erase empties the slot
// with a CAS and only then reads the slot's value word to free the heap cell; in between, the
// other thread can claim the now-empty slot and link its own new cell there, and the erase then
// frees that cell, which the allocator hands out again while the new key still references it.
// GPHASH_CRASH_DELAY holds worker 0 at erase.after_cas to open the window. The fix belongs in
// cpu_table.h: read the value word before the CAS (and the same in remove_duplicates).
TEST(EngineRaces, EraseFreesTheCellItUnlinkedNotTheNextOccupants) {
  if (engine_under_test() != "cpu") GTEST_SKIP() << "a CPU-engine race";
  int torn_runs = 0;
  std::string first;
  for (uint64_t seed = 11; seed < 17; ++seed) {
    WorkloadParams p;
    p.key_width = 16;
    p.value_width = 40;
    p.key_space_start = 200;
    p.key_space_doubling = 30;
    p.key_space_max = 600;
    p.max_batch_ops = 700;
    PoolUnderTest pool(fmt::format("/dev/shm/gphash-race-{}-{}", getpid(), seed), "2L-2H-8S", p, seed);
    pool.threads = 2;
    remove_pool_and_leftovers(pool.path);
    ChildRun r = run_child(pool, 200, {"GPHASH_CRASH_DELAY=erase.after_cas:100"});
    std::optional<std::vector<PlannedOp>> none;
    if (!r.report.done || HasFailure()) {
      ++torn_runs;
      if (first.empty()) first = pool.describe();
    } else if (VerifyReport v = verify_copy(pool, none); !v.ok()) {
      ++torn_runs;
      if (first.empty()) first = pool.describe() + ":\n" + v.summary();
    }
    remove_pool_and_leftovers(pool.path);
  }
  EXPECT_EQ(torn_runs, 0) << torn_runs << " of 6 runs read torn values or left a shared cell; first: " << first;
}

}  // namespace
}  // namespace gphash::crashtest
