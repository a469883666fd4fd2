// Which 4 KiB pages of a pool changed since a snapshot last took them (src/snapshot): the record
// that makes snapshots incremental, so their cost follows the write rate, not the pool size.
//
// Bit i stands for pool bytes [i * 4096, (i + 1) * 4096). The pool marks the pages its own writes
// touch: every Pool::persist() range (the CPU engine persists every store it makes), header
// writes, and the stale bytes allocate_extent() clears. Writes the pool never sees (a GPU kernel
// storing over PCIe, a cudaMemcpy into the pool) must be reported by their engine (the GPU
// engine: its write path's bitmap, merged in Engine::prepare_snapshot; save() marks its copies):
//
//   pool.dirty_pages().mark(offset, bytes);             // one range
//   pool.dirty_pages().merge(bits, words);              // a whole bitmap, same layout as here
//   pool.dirty_pages().set_engine_tracks_writes(true);  // once: "I report all my writes"
//
// The rule that makes a snapshot consistent: every page a writing batch stores to is marked
// before a snapshot takes the marks (in any order with the stores): before the batch releases the
// table's lock, or in Engine::prepare_snapshot, which the snapshot calls with writers held off. A snapshot takes the
// marks only while it holds writing batches off, so a batch's marks and stores are always on the
// same side of a snapshot.
//
// Until the engine says it tracks its writes, snapshots copy every page (a full image, taken
// with writers held off): correct, not incremental. The CPU engine says so when it is made, the
// GPU engine once its bitmap exists (unless device and host addresses of the pool differ).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace gphash::pool {

class DirtyPages {
 public:
  static constexpr unsigned kPageShift = 12;
  static constexpr uint64_t kPageBytes = uint64_t{1} << kPageShift;

  // Room for a pool of up to `max_pool_bytes` (address space only: memory is used as pages get
  // marked, a bit per 4 KiB page).
  explicit DirtyPages(uint64_t max_pool_bytes);
  ~DirtyPages();
  DirtyPages(const DirtyPages&) = delete;
  DirtyPages& operator=(const DirtyPages&) = delete;

  // Marks the pages of pool bytes [offset, offset + bytes). Thread-safe, lock-free; a page that is
  // already marked costs one load.
  void mark(uint64_t offset, uint64_t bytes) {
    if (bytes == 0) return;
    const uint64_t first = offset >> kPageShift;
    if (first >= capacity_pages_) return;  // past the reservation: not pool memory
    const uint64_t last = std::min((offset + bytes - 1) >> kPageShift, capacity_pages_ - 1);
    for (uint64_t w = first / 64; w <= last / 64; ++w) {
      const uint64_t lo = w == first / 64 ? first % 64 : 0, hi = w == last / 64 ? last % 64 : 63;
      const uint64_t mask = (hi == 63 ? ~uint64_t{0} : (uint64_t{1} << (hi + 1)) - 1) & ~((uint64_t{1} << lo) - 1);
      // Relaxed is enough: the table's batch lock orders marks against the snapshot that takes them.
      if ((words_[w].load(std::memory_order_relaxed) & mask) != mask) words_[w].fetch_or(mask, std::memory_order_relaxed);
    }
  }
  // ORs in a bitmap of `words` 64-bit words: bit b of word w marks page 64 * w + b.
  void merge(const uint64_t* bits, size_t words);

  // An engine that writes the pool other than through the Pool's own calls says here whether it
  // reports those writes with mark()/merge(). False at open.
  void set_engine_tracks_writes(bool tracks) { engine_tracks_writes_.store(tracks); }
  bool engine_tracks_writes() const { return engine_tracks_writes_.load(); }

  // For the snapshot, with writing batches held off: moves the marks of pages [0, pages) into
  // `out` (pages / 64 words, rounded up) and clears them here.
  void take(uint64_t pages, std::vector<uint64_t>& out);
  // Marked pages among [0, pages), without taking them (an estimate while writers run).
  uint64_t count(uint64_t pages) const;

 private:
  std::atomic<uint64_t>* words_ = nullptr;
  uint64_t capacity_pages_ = 0;
  size_t mapped_bytes_ = 0;
  std::atomic<bool> engine_tracks_writes_{false};
};

}  // namespace gphash::pool
