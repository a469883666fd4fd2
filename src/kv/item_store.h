// The item store: slab pages of fixed-size chunks, one item per chunk, memcached-style.
//
// A region (anonymous memory in cache mode; in store mode the attachment of the index's pool, so
// a snapshot of the pool holds the items with the index) holds a header, a
// page table (the slab class of each page, 0 while unassigned) and equal pages. A page is cut
// into chunks of its class's size; classes grow by a factor (1.25 by default) from 96 bytes up to
// half a page, and the last class is a whole page, so the largest item fills one page. An item's
// Location is its byte offset in the region (never 0: the header sits there), so locations stay
// valid across restarts and mappings.
//
// Crash consistency (store mode, docs/PROTOCOL.md "Durability"): the index is the commit point.
// An item is written and persisted in a free chunk before any index entry or chain pointer
// refers to it; a chunk is reused only after the index batch that unlinked it has returned. So
// at restart the live items are exactly the chunks the index reaches, and recovery frees the rest
// (torn or superseded items are never reachable). The fields marked volatile are rebuilt at open.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gphash::kv {

using Location = uint64_t;  // byte offset of an item's chunk in the region; 0 = none

struct ItemHeader {
  uint64_t cas;             // 0: the chunk holds no item (free or never written)
  Location chain_next;      // the next item with the same signature (0 = end of chain)
  Location lru_prev;        // volatile: more recently used neighbour in the class LRU
  Location lru_next;        // volatile: less recently used neighbour
  uint32_t exptime;         // absolute Unix time; 0 = never
  uint32_t client_flags;
  uint32_t value_len;
  uint32_t stored_time;     // Unix time of the store (flush_all with a delay compares it)
  uint32_t last_access;     // volatile: Unix time of the last hit (meta flag l)
  std::atomic<uint32_t> refs;  // volatile: replies still reading the value
  uint8_t key_len;
  uint8_t class_id;
  uint8_t state;            // volatile: ItemState
  uint8_t fetched;          // volatile: hit since stored (meta flag h, stats)
  uint8_t token_sent;       // volatile: a vivifying mg (N) handed out the win token (meta Z)
  uint8_t lru_hit;          // volatile (cache mode): hit since its last LRU move (KvStore::rescue)
  uint16_t lru_moved;       // volatile (cache mode): low 16 bits of the Unix time of its last LRU move
  // key bytes, then value bytes follow
};
static_assert(sizeof(ItemHeader) == 64);

enum ItemState : uint8_t {
  kItemFree = 0,
  kItemLinked = 1,  // reachable from the index
  kItemZombie = 2,  // unlinked; freed when the last reply reading it releases it
};

struct ItemStoreConfig {
  // Store mode: the region (Table::attachment) and what makes a range of it durable
  // (Table::persist_attachment). A region whose header is not a store's (all zero when new) gets
  // a new store of the geometry below; otherwise the store in it is opened, and its geometry
  // wins. Empty: cache mode, in anonymous memory.
  std::span<std::byte> region;
  std::function<void(const void*, size_t)> persist_range;
  uint64_t memory_bytes = 64 << 20;  // bytes for pages (-m)
  uint32_t item_size_max = 1 << 20;  // largest item, header and key included (-I)
  double growth_factor = 1.25;       // -f
  uint32_t min_chunk = 96;
};

struct SlabClassStats {
  uint32_t chunk_size = 0;
  uint64_t pages = 0;
  uint64_t used_chunks = 0;
  uint64_t free_chunks = 0;
};

class ItemStore {
 public:
  explicit ItemStore(const ItemStoreConfig& config);
  ~ItemStore();
  ItemStore(const ItemStore&) = delete;
  ItemStore& operator=(const ItemStore&) = delete;

  // The region a new store of this geometry needs.
  static uint64_t region_bytes(const ItemStoreConfig& config);

  bool created() const { return created_; }  // store mode: false when an existing store was opened

  ItemHeader* item(Location loc) const { return reinterpret_cast<ItemHeader*>(base_ + loc); }
  std::string_view key(Location loc) const {
    const ItemHeader* h = item(loc);
    return {reinterpret_cast<const char*>(h + 1), h->key_len};
  }
  char* value(Location loc) const { return reinterpret_cast<char*>(item(loc) + 1) + item(loc)->key_len; }

  // The class whose chunks hold an item of this size, or 0 when it is larger than any chunk.
  uint8_t class_for(size_t key_len, size_t value_len) const;
  uint32_t class_count() const { return static_cast<uint32_t>(chunk_sizes_.size()); }
  uint32_t chunk_size(uint8_t cls) const { return chunk_sizes_[cls - 1]; }
  uint32_t item_size_max() const { return item_size_max_; }

  // A free chunk of the class (assigning a fresh page to the class if one is left), or 0.
  Location allocate(uint8_t cls);
  // Returns a chunk to its class's free list (the caller has unlinked it everywhere).
  void release_chunk(Location loc);

  // LRU of a class (cache mode eviction): most recent at the head.
  void lru_link(Location loc);
  void lru_unlink(Location loc);
  void lru_bump(Location loc);
  Location lru_tail(uint8_t cls) const { return classes_[cls - 1].lru_tail; }

  // Makes [p, p + n) durable: a store fence on /dev/shm, cache-line flushes with force_flush.
  void persist(const void* p, size_t n) const;

  // flush_all state, kept in the header (persistent in store mode).
  uint64_t oldest_live_cas() const;
  uint32_t oldest_live_time() const;
  void set_flush(uint64_t oldest_live_cas, uint32_t oldest_live_time);

  // Recovery: calls `visit(loc)` for every chunk of every assigned page whose header holds a
  // plausible item (cas != 0, key and value fit the chunk). The caller decides which are live
  // (adopt) and the rest become free (rebuild_free_lists).
  template <class F>
  void for_each_candidate(F&& visit) const;
  void begin_recovery();      // marks every chunk free before the live ones are adopted
  void adopt(Location loc);   // marks a recovered item linked
  void rebuild_free_lists();  // every chunk not adopted is free (its cas is cleared)

  void class_stats(std::vector<SlabClassStats>& out) const;  // fills `out` (reusing its memory)
  uint64_t page_count() const { return page_count_; }
  uint64_t pages_assigned() const { return pages_assigned_; }
  uint32_t page_size() const { return page_size_; }
  uint64_t memory_bytes() const { return uint64_t{page_size_} * page_count_; }

 private:
  struct SlabClass {
    std::vector<Location> free;  // free chunks, reused last-in first-out
    uint64_t pages = 0;
    uint64_t used = 0;
    Location lru_head = 0, lru_tail = 0;
  };
  struct Header;
  Header* header() const { return reinterpret_cast<Header*>(base_); }
  void assign_page(uint64_t page, uint8_t cls);
  uint64_t page_of(Location loc) const { return (loc - data_offset_) / page_size_; }

  ItemStoreConfig config_;
  bool created_ = true;
  char* base_ = nullptr;
  size_t mapped_bytes_ = 0;  // cache mode: the anonymous mapping; store mode: the region

  uint32_t page_size_ = 0;
  uint64_t page_count_ = 0;
  uint64_t data_offset_ = 0;
  uint32_t item_size_max_ = 0;
  uint8_t* page_class_ = nullptr;  // in the region
  uint64_t pages_assigned_ = 0;
  std::vector<uint32_t> chunk_sizes_;
  std::vector<SlabClass> classes_;
};

template <class F>
void ItemStore::for_each_candidate(F&& visit) const {
  for (uint64_t page = 0; page < page_count_; ++page) {
    const uint8_t cls = page_class_[page];
    if (cls == 0 || cls > chunk_sizes_.size()) continue;
    const uint32_t size = chunk_sizes_[cls - 1];
    const Location first = data_offset_ + page * page_size_;
    for (Location loc = first; loc + size <= first + page_size_; loc += size) {
      const ItemHeader* h = item(loc);
      if (h->cas == 0 || h->key_len == 0) continue;
      if (sizeof(ItemHeader) + uint64_t{h->key_len} + h->value_len > size) continue;
      visit(loc);
    }
  }
}

}  // namespace gphash::kv
