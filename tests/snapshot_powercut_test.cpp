// Power-cut emulation for snapshots: the snapshot code's file operations go through an in-memory
// file system (fault_file_system.h) that knows what has been synced. A sequence of snapshots
// (a full image, deltas, a compaction into a new file, more deltas) is replayed once per step
// of it, the power cut at that step; the file system a reboot would find (every unsynced write
// lost, or a random subset of their sectors kept) must restore to the last snapshot that
// returned or to the one in progress, never to anything else, and a new process must be able to
// go on snapshotting into it.
#include <fmt/format.h>

#include <optional>

#include "fault_file_system.h"
#include "snapshot/restore.h"
#include "snapshot_test_util.h"

namespace gphash::testing {
namespace {

constexpr int kRounds = 6;
constexpr uint64_t kBatchesPerRound = 3;
const char* const kFile = "/disk/pool.snap";

// A deliberately short chain, so that the sequence compacts: segments 0, 1, 2, then a new file.
snapshot::TakeOptions take_options() {
  snapshot::TakeOptions o;
  o.max_segments = 3;
  return o;
}

struct Sequence {
  std::vector<Model> after;           // the model after each round's snapshot
  std::vector<uint64_t> step_after;   // the file system's step count when each snapshot returned
  int cut_round = -1;                 // the round whose snapshot the power cut stopped
};

// Runs the rounds (batches, then a snapshot) until the power cut, if any.
Sequence run_sequence(FaultFileSystem& fs, const std::string& pool_path) {
  Sequence s;
  const Workload w(97, 40, 3000, 300);
  HandTable t(pool_path, {8, 40, {}, 128, 7});
  snapshot::Snapshotter snapshots(*t.pool, t.batches, fs);
  Model model;
  for (int round = 0; round < kRounds; ++round) {
    for (uint64_t b = 0; b < kBatchesPerRound; ++b) w.run(t, round * kBatchesPerRound + b, model);
    try {
      snapshots.take(kFile, take_options());
    } catch (const PowerCut&) {
      s.cut_round = round;
      s.after.push_back(model);  // what the interrupted snapshot would have held
      return s;
    }
    s.after.push_back(model);
    s.step_after.push_back(fs.steps());
  }
  return s;
}

// Which of the candidates the table holds exactly, or -1.
int which_model(Table& t, const std::vector<const Model*>& candidates) {
  for (size_t i = 0; i < candidates.size(); ++i)
    if (holds_exactly(t, *candidates[i])) return static_cast<int>(i);
  return -1;
}

TEST(SnapshotPowerCut, EveryStepLeavesThePreviousOrTheNewSnapshotAndANewProcessGoesOn) {
  uint64_t total_steps = 0;
  std::vector<uint64_t> step_after;
  {
    TempPool pool("powercut-clean");
    FaultFileSystem fs;
    Sequence clean = run_sequence(fs, pool.path());
    ASSERT_EQ(clean.cut_round, -1);
    total_steps = fs.steps();
    step_after = clean.step_after;
  }
  fmt::print("[snapshot_powercut_test] {} snapshots, {} file-system steps\n", kRounds, total_steps);
  int images = 0, previous = 0, newer = 0, none = 0;
  std::mt19937_64 rng(2024);
  for (uint64_t cut = 0; cut < total_steps; ++cut) {
    TempPool pool("powercut");
    FaultFileSystem fs;
    fs.cut_step = static_cast<int64_t>(cut);
    const Sequence s = run_sequence(fs, pool.path());
    ASSERT_GE(s.cut_round, 0) << "step " << cut << " was not reached";
    const int r = s.cut_round;
    // Every unsynced write lost; then twice a random subset of them kept, twice a random subset
    // of their sectors.
    using Lost = FaultFileSystem::Lost;
    for (Lost lost : {Lost::kAllUnsynced, Lost::kRandomWrites, Lost::kRandomWrites, Lost::kRandomSectors,
                      Lost::kRandomSectors}) {
      const int variant = static_cast<int>(lost);
      SCOPED_TRACE(fmt::format("power cut at step {} (snapshot {}), losing {}", cut, r, variant));
      FaultFileSystem image = fs.crash_image(lost, rng);
      ++images;
      if (!image.exists(kFile)) {
        EXPECT_EQ(r, 0) << "a snapshot had returned: its file must survive";
        ++none;
        continue;
      }
      TempPool restored("powercut-restored");
      try {
        snapshot::restore_pool(kFile, restored.path(), {}, image);
      } catch (const Error& e) {
        ADD_FAILURE() << "the file a reboot finds does not restore: " << e.what();
        continue;
      }
      std::optional<Table> t;
      t.emplace(Table::open(restored.path()));
      std::vector<const Model*> allowed{&s.after[static_cast<size_t>(r)]};
      if (r > 0) allowed.push_back(&s.after[static_cast<size_t>(r) - 1]);
      const int got = which_model(*t, allowed);
      ASSERT_GE(got, 0) << "the restored table is neither the previous snapshot (" << (r > 0 ? s.after[r - 1].size() : 0)
                        << " items) nor the new one (" << s.after[r].size() << " items): it has " << t->size();
      (got == 0 ? newer : previous) += 1;
      if (variant != 0) continue;
      // A new process: the restored pool, more batches, a snapshot into the same file.
      t.reset();
      Model model = *allowed[static_cast<size_t>(got)];
      {
        Table again = Table::open(restored.path());
        Workload(98, 40, 3000, 300).run(again, 0, model);
      }
      {
        auto p = pool::Pool::open(restored.path(), {});
        std::shared_mutex batches;
        snapshot::Snapshotter snapshots(*p, batches, image);
        EXPECT_TRUE(snapshots.take(kFile, take_options()).full) << "a new process starts a new chain";
      }
      TempPool again_restored("powercut-again");
      snapshot::restore_pool(kFile, again_restored.path(), {}, image);
      Table back = Table::open(again_restored.path());
      expect_same_items(back, model, "after the new process's snapshot");
    }
  }
  fmt::print("[snapshot_powercut_test] {} crash images: {} restored the previous snapshot, {} the new one, {} had no "
             "file yet (cut during the first); every one restored\n",
             images, previous, newer, none);
  EXPECT_GT(previous, 0);
}

}  // namespace
}  // namespace gphash::testing
