// Kill harness (DESIGN.md section 5, tier 2): a child runs seeded batches on a pool and reports
// what it began and what was acknowledged; the parent SIGKILLs it at a random moment, recovers a
// copy of the pool and checks it against the acknowledged state (verifier.h). The crashed
// original is left for the next child, whose open must recover it, so kills also land in a
// recovery with real work to do (an interrupted resize, move or insert), and recovering after
// an interrupted recovery is tested too. Pools live for several kills, then a fresh one starts
// with other widths and shape; a small initial capacity makes every pool resize again and again.
//
// Environment: GPHASH_KILLS (default 200), GPHASH_KILL_SECONDS (time budget, default 170),
// GPHASH_CRASH_SEED (default 1), GPHASH_CRASH_ENGINE (the child's engine: cpu or gpu),
// GPHASH_VERIFY_ENGINE (the recovering engine, default cpu).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "harness.h"
#include "workload/random.h"

namespace gphash::crashtest {
namespace {

using Clock = std::chrono::steady_clock;

struct KillStats {
  uint64_t kills = 0, pools = 0, hmeh_pools = 0;
  uint64_t hmeh_kills = 0;
  uint64_t before_open = 0;          // the child had not started opening
  uint64_t during_create = 0;        // while creating a fresh pool
  uint64_t mid_recovery = 0;         // while recovering a crashed pool
  uint64_t mid_recovery_resize = 0;  // ... that was in the middle of a resize
  uint64_t during_batches = 0;
  uint64_t left_resizing = 0;  // the kill left a resize in progress
  uint64_t left_moving = 0;    // ... a displacement move in progress
  uint64_t in_flight = 0;      // kills with a batch in flight
  uint64_t in_flight_records = 0, in_flight_applied = 0;
  uint64_t acked_batches = 0;
  uint64_t keys_verified = 0;
  uint64_t by_mode[4] = {};
};

enum KillMode { kRandomDelay, kAfterAcks, kDuringOpen, kResizeHunt };
const char* kModeNames[] = {"random delay", "after n acks", "during open", "resize hunt"};

// Widths, shape and workload of the i-th pool of its index: GPHash pools of every key width and
// shape, HMEH pools (every third pool) of 8- and 16-byte keys in segments of 4 or 16 KiB; all with
// inline and heap values.
PoolUnderTest make_pool(const std::string& path, uint64_t index, workload::Rng& rng, bool hmeh) {
  static const uint32_t kKeyWidths[] = {8, 16, 32};
  static const uint32_t kValueWidths[] = {8, 40, 16, 128, 4};
  static const char* kShapes[] = {"2L-2H-8S", "4L-2H-4S", "1L-4H-8S"};
  static const uint64_t kKeySpaces[] = {4000, 20000, 60000, 150000};
  WorkloadParams p;
  p.key_width = hmeh ? kKeyWidths[index % 2] : kKeyWidths[index % 3];
  p.value_width = kValueWidths[index % 5];
  p.key_space_start = 64 + rng.below(256);
  p.key_space_doubling = 40 + rng.below(200);
  p.key_space_max = kKeySpaces[rng.below(4)];
  p.max_batch_ops = 700;
  PoolUnderTest pool(path, kShapes[(index / 3) % 3], p, rng());
  pool.capacity = 16 + static_cast<uint32_t>(rng.below(100));
  if (hmeh) {
    pool.index = "hmeh";
    pool.segment_bytes = rng.below(2) ? 4096 : 16384;
  }
  return pool;
}

TEST(KillTest, AcknowledgedStateSurvivesSigkillAtRandomMoments) {
  const int64_t target_kills = env_int("GPHASH_KILLS", 200);
  const double budget_seconds = static_cast<double>(env_int("GPHASH_KILL_SECONDS", 170));
  const uint64_t seed = static_cast<uint64_t>(env_int("GPHASH_CRASH_SEED", 1));
  const std::string engine = env_string("GPHASH_CRASH_ENGINE", "cpu");
  VerifyOptions verify;
  verify.open.threads = 2;
  if (env_string("GPHASH_VERIFY_ENGINE", "cpu") == "gpu") verify.open.engine = EngineKind::kGpu;

  const std::string path = fmt::format("/dev/shm/gphash-kill-{}-{}", getpid(), seed);
  struct Cleanup {  // also when an assertion ends the test early (the failing pool is kept in /tmp)
    std::string path;
    ~Cleanup() {
      for (const char* suffix : {"", ".start", ".verify"}) remove_pool_and_leftovers(path + suffix);
    }
  } cleanup{path};
  workload::Rng rng(seed);
  KillStats stats;
  const auto start = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };

  std::optional<PoolUnderTest> pool;
  int64_t kills_left_on_pool = 0;
  double open_estimate_us = 200;
  while (static_cast<int64_t>(stats.kills) < target_kills && elapsed() < budget_seconds) {
    if (!pool || kills_left_on_pool-- <= 0) {
      remove_pool_and_leftovers(path);
      // Every third pool is HMEH (the GPU engine runs GPHash pools only).
      const bool hmeh = engine == "cpu" && stats.pools % 3 == 2;
      pool.emplace(make_pool(path, hmeh ? stats.hmeh_pools : stats.pools - stats.hmeh_pools, rng, hmeh));
      ++stats.pools;
      stats.hmeh_pools += hmeh;
      pool->engine = engine;
      pool->cache_fraction = stats.pools % 2 ? 1.0 : 0.5;  // GPU engine: every other pool's cache is complete
      kills_left_on_pool = 4 + static_cast<int64_t>(rng.below(13));
      open_estimate_us = 200;
    }
    const bool existed = file_exists(path);
    // The pool as this child finds it, kept so a failure can be replayed from it.
    const std::string start_copy = path + ".start";
    if (existed) copy_file(path, start_copy);
    const PoolUnderTest pool_at_start = *pool;
    const PoolProbe before = probe_pool(path);
    const KillMode mode = [&] {
      const uint64_t r = rng.below(100);
      // Right after a kill that left recovery work, prefer killing the recovery itself.
      if (existed && !before.clean && (before.resizing || before.moving) && r < 60) return kDuringOpen;
      return r < 35 ? kRandomDelay : r < 60 ? kAfterAcks : r < 75 ? kDuringOpen : kResizeHunt;
    }();
    ++stats.by_mode[mode];

    ChildProcess child(crash_child_path(), pool->child_args());
    const auto t0 = Clock::now();
    auto never = [](const ChildReport&) { return false; };
    switch (mode) {
      case kRandomDelay: {
        // Log-uniform from 0.3 ms to 400 ms: early kills land in open, creation and first batches.
        const double us = 300 * std::pow(400000.0 / 300, static_cast<double>(rng.below(1000)) / 1000);
        child.pump_until(never, t0 + std::chrono::microseconds(static_cast<int64_t>(us)));
        break;
      }
      case kAfterAcks: {
        const size_t n = rng.below(25);
        child.pump_until([n](const ChildReport& r) { return r.acks.size() >= n; }, t0 + std::chrono::seconds(3));
        sleep_for_us(static_cast<int64_t>(rng.below(3000)));
        break;
      }
      case kDuringOpen: {
        child.pump_until([](const ChildReport& r) { return r.opening; }, t0 + std::chrono::seconds(3));
        sleep_for_us(static_cast<int64_t>(rng.below(static_cast<uint64_t>(open_estimate_us * 1.3) + 1)));
        break;
      }
      case kResizeHunt: {
        // Watch the header and kill while a resize is rehashing (or give up after 400 ms).
        const auto deadline = t0 + std::chrono::milliseconds(400);
        bool seen_open = false;
        while (Clock::now() < deadline) {
          child.pump(std::chrono::microseconds(0));
          seen_open |= child.report().opened;
          if (seen_open && probe_pool(path).resizing) {
            sleep_for_us(static_cast<int64_t>(rng.below(400)));
            break;
          }
          sleep_for_us(30);
        }
        break;
      }
    }
    child.kill_now();
    child.wait();
    const ChildReport& report = child.report();
    ASSERT_TRUE(child.killed_by_sigkill())
        << "the child " << child.describe_status() << " before the kill: " << report.error << "\n"
        << pool->describe();
    ++stats.kills;
    stats.hmeh_kills += pool->index == "hmeh";
    if (report.opened) open_estimate_us = std::max(50.0, report.open.open_seconds * 1e6);

    std::optional<std::vector<PlannedOp>> in_flight;
    const std::vector<std::string> model_violations = absorb_report(*pool, report, in_flight, &stats.acked_batches);
    if (!model_violations.empty()) {
      const std::string keep = fmt::format("/tmp/gphash-kill-failure-{}-{}-start.pool", seed, stats.kills);
      if (existed) copy_file(start_copy, keep);
      FAIL() << "kill " << stats.kills << " (" << kModeNames[mode] << ", "
             << (existed && !before.clean ? "recovering" : "clean") << " pool at start) of " << pool->describe()
             << ": the child's acknowledged batches disagree "
             << "with the model:\n"
             << fmt::format("{}", fmt::join(model_violations, "\n")) << "\nreplay: crash_child "
             << fmt::format("{}", fmt::join(pool_at_start.child_args(), " "))
             << (existed ? "\non a copy of " + keep : std::string());
    }

    // Where did the kill land?
    if (!report.opening)
      ++stats.before_open;
    else if (!report.opened && !existed)
      ++stats.during_create;
    else if (!report.opened) {
      ++stats.mid_recovery;
      stats.mid_recovery_resize += before.resizing;
    } else {
      ++stats.during_batches;
    }
    if (!file_exists(path)) {  // killed while creating, before the pool was published
      ASSERT_TRUE(report.acks.empty()) << "batches were acknowledged on a pool that does not exist";
      remove_pool_and_leftovers(path);
      continue;
    }
    const PoolProbe after = probe_pool(path);
    stats.left_resizing += after.resizing;
    stats.left_moving += after.moving;
    stats.in_flight += in_flight.has_value();

    const VerifyReport v = verify_copy(*pool, in_flight, verify);
    if (!v.ok()) {
      const std::string keep = fmt::format("/tmp/gphash-kill-failure-{}-{}.pool", seed, stats.kills);
      copy_file(path, keep);
      FAIL() << "kill " << stats.kills << " (" << kModeNames[mode] << ", after " << report.acks.size()
             << " acknowledged batches, batch in flight: " << (in_flight ? "yes" : "no") << ") of " << pool->describe()
             << ":\n"
             << v.summary() << "the crashed pool is kept at " << keep;
    }
    stats.in_flight_records += v.in_flight_records;
    stats.in_flight_applied += v.in_flight_applied;
    stats.keys_verified += pool->key_space;
  }

  const double seconds = elapsed();
  fmt::print(
      "[kill_test] seed {}: {} kills in {:.1f} s over {} pools, {} kills of them on {} HMEH pools (modes: {} random "
      "delay, {} after n acks, {} during open, {} resize hunt)\n"
      "[kill_test]   landed: {} before open, {} while creating, {} mid-recovery ({} of them finishing an interrupted "
      "resize), {} during batches\n"
      "[kill_test]   left behind: {} resizes in progress, {} moves in progress, {} batches in flight ({} of their {} "
      "written records took the new state)\n"
      "[kill_test]   verified: {} acknowledged batches (statuses and reads), {} record states\n",
      seed, stats.kills, seconds, stats.pools, stats.hmeh_kills, stats.hmeh_pools, stats.by_mode[0], stats.by_mode[1],
      stats.by_mode[2], stats.by_mode[3],
      stats.before_open, stats.during_create, stats.mid_recovery, stats.mid_recovery_resize, stats.during_batches,
      stats.left_resizing, stats.left_moving, stats.in_flight, stats.in_flight_applied, stats.in_flight_records,
      stats.acked_batches, stats.keys_verified);
  std::fflush(stdout);
  EXPECT_GE(static_cast<int64_t>(stats.kills), std::min<int64_t>(target_kills, 1));
  if (static_cast<int64_t>(stats.kills) < target_kills)
    fmt::print("[kill_test] NOTE: the time budget of {:.0f} s ended the run before {} kills\n", budget_seconds,
               target_kills);
}

}  // namespace
}  // namespace gphash::crashtest
