// The CPU engines' value-heap cell allocator under threads that exhaust the heap and grow it, as
// HMEH's and the CPU engine's inserts do: no cell may be handed out twice (two items sharing a
// cell overwrite each other's values; CI caught HMEH exporting another key's value).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "engines/cpu/cell_allocator.h"

namespace gphash::engine::cpu {
namespace {

// One round: kThreads threads take cells until the heap has grown to kCells; false with the first
// cell handed out twice in `twice`.
bool round_hands_out_each_cell_once(uint64_t* twice) {
  constexpr int kThreads = 4;
  constexpr uint64_t kStep = 64, kCells = 1 << 16;
  CellAllocator cells;
  cells.reset(kStep, {}, kThreads);
  std::atomic<uint64_t> capacity{kStep};
  std::mutex grow_mutex;
  std::vector<std::vector<uint64_t>> got(kThreads);
  std::vector<std::thread> threads;
  for (int tid = 0; tid < kThreads; ++tid)
    threads.emplace_back([&, tid] {
      while (capacity.load() < kCells) {
        const uint64_t cell = cells.allocate(tid);
        if (cell != CellAllocator::kNoCell) {
          got[tid].push_back(cell);
          continue;
        }
        // Exhausted: grow by one step unless another thread just did (HMEH's new_cell).
        const uint64_t seen = capacity.load();
        std::lock_guard lock(grow_mutex);
        if (capacity.load() == seen) {
          cells.grow(seen + kStep);
          capacity.store(seen + kStep);
        }
      }
    });
  for (std::thread& t : threads) t.join();
  std::vector<uint64_t> all;
  for (const auto& g : got) all.insert(all.end(), g.begin(), g.end());
  std::sort(all.begin(), all.end());
  const auto it = std::adjacent_find(all.begin(), all.end());
  if (it == all.end()) return true;
  *twice = *it;
  return false;
}

// The race needs a thread preempted between taking fresh cells past the end and giving them back,
// while others grow the heap and take the same cells: many short rounds, more threads than cores.
TEST(CellAllocator, NoCellIsHandedOutTwiceWhileTheHeapGrows) {
  for (int round = 0; round < 400; ++round) {
    uint64_t twice = 0;
    ASSERT_TRUE(round_hands_out_each_cell_once(&twice)) << "round " << round << ": cell " << twice << " was handed out twice";
  }
}

}  // namespace
}  // namespace gphash::engine::cpu
