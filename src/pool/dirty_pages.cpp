#include "pool/dirty_pages.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "gphash/error.h"

namespace gphash::pool {

DirtyPages::DirtyPages(uint64_t max_pool_bytes) {
  capacity_pages_ = std::max<uint64_t>(1, (max_pool_bytes + kPageBytes - 1) >> kPageShift);
  const uint64_t words = (capacity_pages_ + 63) / 64;
  mapped_bytes_ = static_cast<size_t>(words * sizeof(uint64_t));
  // Reserved, not allocated: a 1 TiB reservation needs 32 MiB of bits, of which a pool touches
  // 32 KiB per GiB it really has.
  void* p = mmap(nullptr, mapped_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    throw Error(ErrorCode::kIo, std::string("cannot reserve the dirty-page bitmap: ") + std::strerror(errno));
  static_assert(sizeof(std::atomic<uint64_t>) == sizeof(uint64_t) && std::atomic<uint64_t>::is_always_lock_free);
  words_ = static_cast<std::atomic<uint64_t>*>(p);  // zero pages read as atomics holding 0
}

DirtyPages::~DirtyPages() {
  if (words_) munmap(words_, mapped_bytes_);
}

void DirtyPages::merge(const uint64_t* bits, size_t words) {
  const size_t n = std::min<size_t>(words, (capacity_pages_ + 63) / 64);
  for (size_t w = 0; w < n; ++w)
    if (bits[w] != 0 && (words_[w].load(std::memory_order_relaxed) & bits[w]) != bits[w])
      words_[w].fetch_or(bits[w], std::memory_order_relaxed);
}

uint64_t DirtyPages::count(uint64_t pages) const {
  pages = std::min(pages, capacity_pages_);
  uint64_t n = 0;
  for (uint64_t w = 0; w < pages / 64; ++w) n += static_cast<uint64_t>(__builtin_popcountll(words_[w].load(std::memory_order_relaxed)));
  if (pages % 64 != 0)
    n += static_cast<uint64_t>(__builtin_popcountll(words_[pages / 64].load(std::memory_order_relaxed) & ((uint64_t{1} << (pages % 64)) - 1)));
  return n;
}

void DirtyPages::take(uint64_t pages, std::vector<uint64_t>& out) {
  pages = std::min(pages, capacity_pages_);
  const size_t words = static_cast<size_t>((pages + 63) / 64);
  out.assign(words, 0);
  for (size_t w = 0; w < words; ++w) {
    uint64_t mask = ~uint64_t{0};
    if (w == words - 1 && pages % 64 != 0) mask = (uint64_t{1} << (pages % 64)) - 1;
    // Untouched words are zero: reading them first keeps the bitmap's pages unallocated.
    if (words_[w].load(std::memory_order_relaxed) & mask) out[w] = words_[w].fetch_and(~mask, std::memory_order_acq_rel) & mask;
  }
}

}  // namespace gphash::pool
