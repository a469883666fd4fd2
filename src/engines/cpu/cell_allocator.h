// Allocation of value-heap cells for the CPU engine. The state lives in DRAM only: it is rebuilt
// at open from the cells that published slots reference, so allocating needs no persistence
// ordering and a crash can at worst leave a cell unreferenced, which the next open frees.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

namespace gphash::engine::cpu {

class CellAllocator {
 public:
  static constexpr uint64_t kNoCell = ~uint64_t{0};

  // `used` has one bit per cell of the heap's `capacity` cells.
  void reset(uint64_t capacity, const std::vector<uint64_t>& used, int threads);
  // The heap grew to `capacity` cells; the new ones are free.
  void grow(uint64_t capacity);
  // Thread `tid` (0..threads-1) takes a cell; kNoCell when the heap is exhausted.
  uint64_t allocate(int tid);
  void release(int tid, uint64_t cell);
  // Moves every thread's cached cells back to the shared list (call with no worker running).
  void reclaim_local_caches();

 private:
  static constexpr size_t kRefill = 64;
  static constexpr size_t kLocalLimit = 256;
  struct alignas(64) Local {
    std::vector<uint64_t> cells;
  };
  std::vector<Local> locals_;
  std::mutex mutex_;
  std::vector<uint64_t> free_;  // released cells, guarded by mutex_
  std::atomic<uint64_t> next_fresh_{0};  // cells at or above it were never used
  std::atomic<uint64_t> capacity_{0};
};

}  // namespace gphash::engine::cpu
