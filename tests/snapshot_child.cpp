// The process snapshot_crash_test kills: runs the seeded workload of snapshot_test_util.h on a
// new pool with automatic snapshots, and reports on stdout, one line each, flushed:
//   batch B W          batch B returned; the pool's write counter is W
//   durable W          a snapshot capturing counter W has completed (returned)
//   done               all batches ran and the table closed (its last snapshot taken)
//
//   snapshot_child run POOL FILE SEED EVERY_BATCHES BATCHES
//   snapshot_child restore FILE POOL      (a restore, for crash points inside it)
// GPHASH_CRASH_ENGINE=gpu runs the batches on the GPU engine (host-mapped), so the kernels' own
// dirty-page marks make the deltas (a build with CUDA, on a GPU machine).
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "gphash/table.h"
#include "snapshot_test_util.h"

using namespace gphash;

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "run" && argc == 7) {
      OpenOptions o;
      o.threads = 2;
      if (const char* engine = std::getenv("GPHASH_CRASH_ENGINE"); engine && std::string(engine) == "gpu")
        o.engine = EngineKind::kGpu;
      o.snapshots.path = argv[3];
      o.snapshots.every_batches = std::strtoull(argv[5], nullptr, 10);
      const gphash::testing::Workload w(std::strtoull(argv[4], nullptr, 10), 40);
      const uint64_t batches = std::strtoull(argv[6], nullptr, 10);
      Table t = Table::create(argv[2], {8, 40, {}, 256, 7}, o);
      uint64_t reported = 0;
      for (uint64_t b = 0; b < batches; ++b) {
        gphash::testing::Workload::Prepared p = w.make(b);
        t.execute(p.batch);
        const TableInfo i = t.info();
        std::printf("batch %llu %llu\n", static_cast<unsigned long long>(b), static_cast<unsigned long long>(i.writes));
        if (i.snapshots_taken != reported) {
          reported = i.snapshots_taken;
          std::printf("durable %llu\n", static_cast<unsigned long long>(i.last_snapshot.pool_writes));
        }
        std::fflush(stdout);
      }
      t.close();  // takes the last automatic snapshot, then lets go of the pool
      // The pool's header records the last completed snapshot's write count (info() of a closed
      // Table is an error since close() releases the pool).
      const TableInfo after = Table::inspect(argv[2]);
      std::printf("durable %llu\ndone\n", static_cast<unsigned long long>(after.writes - after.writes_since_snapshot));
      return 0;
    }
    if (mode == "restore" && argc == 4) {
      Table::restore(argv[2], argv[3]);
      std::printf("done\n");
      return 0;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "snapshot_child: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: snapshot_child run POOL FILE SEED EVERY_BATCHES BATCHES | restore FILE POOL\n");
  return 2;
}
