#include "engines/cpu/cell_allocator.h"

#include <algorithm>

namespace gphash::engine::cpu {

void CellAllocator::reset(uint64_t capacity, const std::vector<uint64_t>& used, int threads) {
  locals_.assign(static_cast<size_t>(threads), Local{});
  free_.clear();
  uint64_t highest_used = 0;
  for (uint64_t w = 0; w < used.size(); ++w)
    if (used[w]) highest_used = w * 64 + 64 - static_cast<uint64_t>(__builtin_clzll(used[w]));
  for (uint64_t c = 0; c < highest_used; ++c)
    if (!(used[c / 64] >> (c % 64) & 1)) free_.push_back(c);
  next_fresh_.store(highest_used);
  capacity_.store(capacity);
}

void CellAllocator::grow(uint64_t capacity) { capacity_.store(capacity); }

uint64_t CellAllocator::allocate(int tid) {
  std::vector<uint64_t>& local = locals_[static_cast<size_t>(tid)].cells;
  if (local.empty()) {
    {
      std::lock_guard lock(mutex_);
      size_t take = std::min(kRefill, free_.size());
      local.assign(free_.end() - static_cast<std::ptrdiff_t>(take), free_.end());
      free_.resize(free_.size() - take);
    }
    if (local.empty()) {
      // Fresh cells up to the capacity, taken by CAS so the counter never passes it. (It used to
      // take kRefill past the end and store the capacity back; a thread preempted before that
      // store could move the counter back below cells others had taken after a growth, and hand
      // them out again: two items sharing a cell, found by CI as HMEH exporting another key's value.)
      uint64_t first = next_fresh_.load();
      uint64_t last = first;
      do {
        last = std::min(first + kRefill, capacity_.load());
        if (first >= last) break;
      } while (!next_fresh_.compare_exchange_weak(first, last));
      for (uint64_t c = last; c-- > first;) local.push_back(c);
    }
    if (local.empty()) return kNoCell;
  }
  uint64_t cell = local.back();
  local.pop_back();
  return cell;
}

void CellAllocator::release(int tid, uint64_t cell) {
  std::vector<uint64_t>& local = locals_[static_cast<size_t>(tid)].cells;
  local.push_back(cell);
  if (local.size() > kLocalLimit) {
    std::lock_guard lock(mutex_);
    free_.insert(free_.end(), local.end() - kLocalLimit / 2, local.end());
    local.resize(local.size() - kLocalLimit / 2);
  }
}

void CellAllocator::reclaim_local_caches() {
  std::lock_guard lock(mutex_);
  for (Local& l : locals_) {
    free_.insert(free_.end(), l.cells.begin(), l.cells.end());
    l.cells.clear();
  }
}

}  // namespace gphash::engine::cpu
