#include "kv/item_store.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "kv/kv_error.h"

namespace gphash::kv {

namespace {
constexpr char kMagic[8] = {'G', 'P', 'H', 'K', 'V', 'I', 'S', '1'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kMaxClasses = 63;  // as memcached: class ids 1..63
constexpr uint64_t kHeaderBytes = 4096;

uint64_t round_up(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }
}  // namespace

// The region's first 4 KiB. Everything in it is persistent in store mode.
struct ItemStore::Header {
  char magic[8];
  uint32_t version;
  uint32_t page_size;
  uint64_t page_count;
  uint64_t data_offset;  // first page
  uint32_t item_size_max;
  uint32_t class_count;
  uint32_t chunk_sizes[kMaxClasses];
  uint32_t reserved;
  std::atomic<uint64_t> oldest_live_cas;   // flush_all: items with cas <= this are gone
  std::atomic<uint64_t> oldest_live_time;  // flush_all with delay: items stored at or before it
};

namespace {
struct Geometry {
  uint32_t page_size;
  uint64_t page_count;
  std::vector<uint32_t> chunk_sizes;
  uint64_t data_offset() const { return kHeaderBytes + round_up(page_count, 4096); }
  uint64_t total() const { return data_offset() + page_count * page_size; }
};

Geometry geometry_for(const ItemStoreConfig& config) {
  Geometry g;
  // One page holds the largest item; pages are at least 1 MiB, as memcached's.
  g.page_size = static_cast<uint32_t>(round_up(std::max<uint64_t>(config.item_size_max, 1 << 20), 4096));
  g.page_count = std::max<uint64_t>(config.memory_bytes / g.page_size, 1);
  double size = config.min_chunk;
  while (g.chunk_sizes.size() < kMaxClasses - 1 && size <= g.page_size / 2.0) {
    const uint32_t aligned = static_cast<uint32_t>(round_up(static_cast<uint64_t>(size), 8));
    if (g.chunk_sizes.empty() || aligned > g.chunk_sizes.back()) g.chunk_sizes.push_back(aligned);
    size = std::max(size * config.growth_factor, size + 8);
  }
  g.chunk_sizes.push_back(g.page_size);
  return g;
}
}  // namespace

uint64_t ItemStore::region_bytes(const ItemStoreConfig& config) { return geometry_for(config).total(); }

ItemStore::ItemStore(const ItemStoreConfig& config) : config_(config) {
  Geometry g = geometry_for(config);
  item_size_max_ = config.item_size_max;
  if (config.region.empty()) {
    void* p = mmap(nullptr, g.total(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
      throw KvError(KvErrorCode::kIo, "cannot map " + std::to_string(g.total()) + " bytes for items: " + std::strerror(errno));
    base_ = static_cast<char*>(p);
    mapped_bytes_ = g.total();
  } else {
    base_ = reinterpret_cast<char*>(config.region.data());
    mapped_bytes_ = config.region.size();
    created_ = mapped_bytes_ < sizeof(Header) || std::memcmp(header()->magic, kMagic, sizeof kMagic) != 0;
    if (created_) {
      // A new store, or one whose creation a crash cut short (its magic is written last).
      if (mapped_bytes_ < g.total())
        throw KvError(KvErrorCode::kInvalidArgument, "the item region has " + std::to_string(mapped_bytes_) +
                                                         " bytes, the store needs " + std::to_string(g.total()));
    } else {
      // The region's geometry wins over the options: it is what the items were written with.
      const Header& h = *header();
      if (h.version != kVersion) throw KvError(KvErrorCode::kCorrupt, "unsupported item store version " + std::to_string(h.version));
      g.page_size = h.page_size;
      g.page_count = h.page_count;
      if (h.class_count == 0 || h.class_count > kMaxClasses || h.page_size < 4096 || h.data_offset != g.data_offset() ||
          h.page_count > mapped_bytes_ / h.page_size || mapped_bytes_ < g.total())
        throw KvError(KvErrorCode::kCorrupt, "item store header is inconsistent with its region's size");
      item_size_max_ = h.item_size_max;
      g.chunk_sizes.assign(h.chunk_sizes, h.chunk_sizes + h.class_count);
      for (size_t i = 0; i < g.chunk_sizes.size(); ++i)
        if (g.chunk_sizes[i] < sizeof(ItemHeader) + 2 || g.chunk_sizes[i] > g.page_size ||
            (i > 0 && g.chunk_sizes[i] <= g.chunk_sizes[i - 1]))
          throw KvError(KvErrorCode::kCorrupt, "item store chunk sizes are corrupt");
    }
  }
  page_size_ = g.page_size;
  page_count_ = g.page_count;
  chunk_sizes_ = std::move(g.chunk_sizes);
  data_offset_ = g.data_offset();
  page_class_ = reinterpret_cast<uint8_t*>(base_ + kHeaderBytes);
  classes_.resize(chunk_sizes_.size());

  if (created_) {
    Header* h = header();
    h->version = kVersion;
    h->page_size = page_size_;
    h->page_count = page_count_;
    h->data_offset = data_offset_;
    h->item_size_max = item_size_max_;
    h->class_count = static_cast<uint32_t>(chunk_sizes_.size());
    std::copy(chunk_sizes_.begin(), chunk_sizes_.end(), h->chunk_sizes);
    persist(h, sizeof *h);
    std::memcpy(h->magic, kMagic, sizeof kMagic);  // last: a torn create is not a store
    persist(h->magic, sizeof kMagic);
  }
}

ItemStore::~ItemStore() {
  if (base_ && config_.region.empty()) munmap(base_, mapped_bytes_);
}

uint8_t ItemStore::class_for(size_t key_len, size_t value_len) const {
  const uint64_t need = sizeof(ItemHeader) + key_len + value_len;
  if (need > item_size_max_) return 0;
  auto it = std::lower_bound(chunk_sizes_.begin(), chunk_sizes_.end(), need);
  return it == chunk_sizes_.end() ? 0 : static_cast<uint8_t>(it - chunk_sizes_.begin() + 1);
}

void ItemStore::assign_page(uint64_t page, uint8_t cls) {
  // The class is recorded (and persisted) before any chunk of the page is used, so recovery
  // always knows how to cut an assigned page.
  page_class_[page] = cls;
  persist(&page_class_[page], 1);
  ++pages_assigned_;
  SlabClass& c = classes_[cls - 1];
  ++c.pages;
  const uint32_t size = chunk_sizes_[cls - 1];
  const Location first = data_offset_ + page * page_size_;
  // Pushed in reverse so the free list hands out the page's chunks in address order.
  for (Location loc = first + (page_size_ / size - 1) * uint64_t{size};; loc -= size) {
    c.free.push_back(loc);
    if (loc == first) break;
  }
}

Location ItemStore::allocate(uint8_t cls) {
  SlabClass& c = classes_[cls - 1];
  if (c.free.empty()) {
    if (pages_assigned_ >= page_count_) return 0;
    // Pages are taken in order; unassigned pages are always the tail.
    assign_page(pages_assigned_, cls);
  }
  const Location loc = c.free.back();
  c.free.pop_back();
  ++c.used;
  ItemHeader* h = item(loc);
  h->class_id = cls;
  h->state = kItemFree;
  h->refs.store(0, std::memory_order_relaxed);
  return loc;
}

void ItemStore::release_chunk(Location loc) {
  ItemHeader* h = item(loc);
  SlabClass& c = classes_[h->class_id - 1];
  // Clearing cas marks the chunk empty for a later recovery scan (not needed for correctness:
  // recovery frees whatever the index does not reach, but it makes scans cheaper).
  h->cas = 0;
  h->state = kItemFree;
  --c.used;
  c.free.push_back(loc);
}

void ItemStore::lru_link(Location loc) {
  ItemHeader* h = item(loc);
  SlabClass& c = classes_[h->class_id - 1];
  h->lru_prev = 0;
  h->lru_next = c.lru_head;
  if (c.lru_head) item(c.lru_head)->lru_prev = loc;
  c.lru_head = loc;
  if (!c.lru_tail) c.lru_tail = loc;
}

void ItemStore::lru_unlink(Location loc) {
  ItemHeader* h = item(loc);
  SlabClass& c = classes_[h->class_id - 1];
  if (h->lru_prev) item(h->lru_prev)->lru_next = h->lru_next; else c.lru_head = h->lru_next;
  if (h->lru_next) item(h->lru_next)->lru_prev = h->lru_prev; else c.lru_tail = h->lru_prev;
  h->lru_prev = h->lru_next = 0;
}

void ItemStore::lru_bump(Location loc) {
  if (classes_[item(loc)->class_id - 1].lru_head == loc) return;
  lru_unlink(loc);
  lru_link(loc);
}

void ItemStore::persist(const void* p, size_t n) const {
  // Store mode: the pool's persist (a fence on /dev/shm, cache-line write-back on persistent
  // memory) and a mark for the next snapshot. Cache mode keeps nothing.
  if (config_.persist_range) config_.persist_range(p, n);
}

uint64_t ItemStore::oldest_live_cas() const { return header()->oldest_live_cas.load(std::memory_order_relaxed); }
uint32_t ItemStore::oldest_live_time() const {
  return static_cast<uint32_t>(header()->oldest_live_time.load(std::memory_order_relaxed));
}
void ItemStore::set_flush(uint64_t cas, uint32_t time) {
  header()->oldest_live_cas.store(cas, std::memory_order_relaxed);
  header()->oldest_live_time.store(time, std::memory_order_relaxed);
  persist(header(), sizeof(Header));
}

void ItemStore::begin_recovery() {
  for (uint64_t page = 0; page < page_count_; ++page) {
    const uint8_t cls = page_class_[page];
    if (cls == 0 || cls > chunk_sizes_.size()) continue;
    const uint32_t size = chunk_sizes_[cls - 1];
    const Location first = data_offset_ + page * page_size_;
    for (Location loc = first; loc + size <= first + page_size_; loc += size) item(loc)->state = kItemFree;
  }
}

void ItemStore::adopt(Location loc) {
  ItemHeader* h = item(loc);
  h->state = kItemLinked;
  h->refs.store(0, std::memory_order_relaxed);
  h->lru_prev = h->lru_next = 0;
  h->fetched = 0;
  h->last_access = h->stored_time;
  h->class_id = page_class_[page_of(loc)];
}

void ItemStore::rebuild_free_lists() {
  pages_assigned_ = 0;
  for (auto& c : classes_) c = SlabClass{};
  for (uint64_t page = 0; page < page_count_; ++page) {
    const uint8_t cls = page_class_[page];
    if (cls == 0 || cls > chunk_sizes_.size()) {
      page_class_[page] = 0;
      continue;
    }
    if (page != pages_assigned_) {
      // Pages are assigned in order, so an assigned page after an unassigned one means the
      // page table is damaged; refuse rather than hand out chunks twice.
      throw KvError(KvErrorCode::kCorrupt, "item store page table has a gap at page " + std::to_string(pages_assigned_));
    }
    ++pages_assigned_;
    SlabClass& c = classes_[cls - 1];
    ++c.pages;
    const uint32_t size = chunk_sizes_[cls - 1];
    const Location first = data_offset_ + page * page_size_;
    const uint64_t chunks = page_size_ / size;
    for (uint64_t i = chunks; i-- > 0;) {
      const Location loc = first + i * size;
      ItemHeader* h = item(loc);
      if (h->state == kItemLinked) {
        ++c.used;
        lru_link(loc);
      } else {
        h->cas = 0;
        h->state = kItemFree;
        c.free.push_back(loc);
      }
    }
  }
  persist(base_, mapped_bytes_ > data_offset_ ? data_offset_ : mapped_bytes_);
  static_assert(sizeof(Header) <= kHeaderBytes);
}

void ItemStore::class_stats(std::vector<SlabClassStats>& out) const {
  out.resize(classes_.size());
  for (size_t i = 0; i < classes_.size(); ++i)
    out[i] = {chunk_sizes_[i], classes_[i].pages, classes_[i].used, classes_[i].free.size()};
}

}  // namespace gphash::kv
