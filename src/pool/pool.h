// A pool: one file (or anonymous memory) mapped at a fixed virtual range that never moves, so
// offsets in the format resolve to base() + offset for the whole life of a Pool, also while it
// grows. Kernels use the same addresses once the GPU engine registers the extents.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <thread>

#include "format/header.h"
#include "pool/dirty_pages.h"

namespace gphash::pool {

enum class PoolKind {
  kShm,        // a file in /dev/shm or another tmpfs: survives the process, not a reboot
  kHugetlbfs,  // a file on hugetlbfs: like kShm, with huge pages
  kFile,       // a regular file (ext4, ...): durable at sync(); the GPU cannot map it
  kMemory,     // anonymous memory (memfd): for tests; gone with the process
};
const char* to_string(PoolKind kind);

// What makes a store durable, following DESIGN.md section 3.
enum class PersistMode {
  kOrdered,  // shared memory: an executed store survives the process; persist() only orders
  kFlush,    // persistent memory (device-DAX, CXL): cache-line write-back plus a store fence
  kMsync,    // regular file: msync at sync() points
};

// Where a pool lives. "NAME" (no '/') means /dev/shm/NAME; "mem:" means anonymous memory;
// anything else is a path whose file system decides the kind.
struct Location {
  PoolKind kind;
  std::string path;  // empty for kMemory
};
Location resolve_location(const std::string& spec);

struct CreateOptions {
  uint64_t max_size = 0;       // 0: no limit but the file system's
  uint32_t extent_align_log2 = 0;  // 0: 4 KiB, or the huge page size on hugetlbfs
  // Replace an existing pool at the path. Its lock is taken first: a pool another process (or
  // this one) has open is never replaced (kPoolInUse).
  bool replace = false;
  uint32_t file_mode = 0600;   // permissions of the new file (set exactly, whatever the umask)
  // File space allocated at creation for the pool to grow into, as a PMDK pool's size is: growth
  // up to it takes memory the file already has (faster, and a full file system is found now, not
  // at a later growth). The file's size stays the pool's; 0: none.
  uint64_t reserve_bytes = 0;
};

struct OpenOptions {
  bool read_only = false;
  uint64_t max_size = 0;
  bool force_flush = false;  // use PersistMode::kFlush on any memory (tests the persistent-memory path)
  // A private copy-on-write view of the pool (implies a shared lock): writes change this mapping
  // only, never the file. `gphash check` runs recovery on such a view, so it leaves a pool exactly
  // as it found it.
  bool copy_on_write = false;
};

// Reads and validates a pool's header without locking or mapping it (for `gphash info`, which
// works while a writer holds the pool). `in_use` tells whether another open holds its lock.
struct HeaderSnapshot {
  format::PoolHeader header;
  PoolKind kind;
  std::string path;
  uint64_t file_size = 0;
  bool in_use = false;
  uint64_t write_counter = 0;  // format::kWriteCounterOffset
};
HeaderSnapshot read_header(const std::string& spec);

// Rewrites the header of a pool of format version 1 in the current format (the data stays where
// it is). Takes the pool's lock. Returns false if the pool already has the current version.
bool convert_pool(const std::string& spec);

class Pool {
 public:
  // Creates an empty pool (prefix only, no header yet) under a temporary name; publish() makes it
  // visible at its path once the caller has written a valid header, so no reader ever sees a
  // half-made pool.
  static std::unique_ptr<Pool> create(const std::string& spec, const CreateOptions& options);
  // Opens an existing pool: checks the file size and both header copies before touching a page.
  static std::unique_ptr<Pool> open(const std::string& spec, const OpenOptions& options);
  ~Pool();  // releases the lock; an unpublished pool's file is removed
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  void publish();

  std::byte* base() const { return base_; }
  template <class T>
  T* at(uint64_t offset) const { return reinterpret_cast<T*>(base_ + offset); }
  uint64_t file_size() const { return file_size_; }
  PoolKind kind() const { return kind_; }
  PersistMode persist_mode() const { return persist_mode_; }
  const std::string& path() const { return path_; }
  bool read_only() const { return read_only_; }
  bool copy_on_write() const { return copy_on_write_; }
  bool gpu_mappable() const { return kind_ != PoolKind::kFile; }
  // Which header copy (0 or 1) the pool was opened from, and whether the other one was invalid.
  int header_copy() const { return current_copy_; }
  bool other_copy_invalid() const { return other_copy_invalid_; }

  // The current header (a private copy; change it through write_header()).
  const format::PoolHeader& header() const { return header_; }
  // Persists a new header: bumps the generation, seals it and writes the copy holding the older
  // generation, then persists it. `h` becomes the current header.
  void write_header(format::PoolHeader h);
  // The clean-shutdown flag, the same for every index: the first writer after an open clears it
  // (once), a clean close sets it with the item count.
  void mark_open_dirty();
  void mark_clean(uint64_t item_count);
  // For create: the common part of the first header of a new pool holding `index_kind` (magic,
  // version, a random uuid, the creation time, the extents allocated so far, clean), for the
  // index to fill in its section; then write_initial_header writes both copies.
  format::PoolHeader initial_header(uint32_t index_kind) const;
  void write_initial_header(format::PoolHeader h);

  // When a new extent's pages get their memory on tmpfs and memory pools: at once, from several
  // threads (the default); kByCaller: the caller populates each part before its first write; or
  // kUnlessReserved: as kNow, unless the extent lies in the pool's reservation
  // (CreateOptions::reserve_bytes), whose pages the file has: those are mapped by their first use.
  // Either way a full file system is a kNoSpace error, never a SIGBUS on a later store.
  enum class Populate { kNow, kByCaller, kUnlessReserved };
  // Appends a zero-filled, mapped extent of `bytes` and records it in h.pool_used / h.pool_size
  // (the caller persists the header afterwards). Throws kNoSpace when the pool cannot grow.
  uint64_t allocate_extent(format::PoolHeader& h, uint64_t bytes, Populate populate = Populate::kNow);
  // Gives [p, p+n) of an extent allocated kByCaller its memory (nothing to do elsewhere, and cheap
  // where the pages are there already). Throws kNoSpace when the file system is full.
  void populate(void* p, uint64_t n) const;
  // Returns an extent's memory to the file system (its offsets stay reserved).
  void release_extent(uint64_t offset, uint64_t bytes);
  // Allocates file space for the next `bytes` of growth past the file's end (and past what was
  // reserved ahead before) on a thread of its own, while the caller goes on: the growth that comes
  // then finds its pages there. tmpfs and memory pools, within the size limit; elsewhere nothing.
  // Changes nothing the header describes: a crash leaves at most that space allocated past the
  // file's size, which the next growth uses. What no growth used goes back when the pool closes.
  void reserve_ahead(uint64_t bytes);

  // Pages changed since the last snapshot took them (dirty_pages.h says who marks what).
  DirtyPages& dirty_pages() const { return *dirty_pages_; }

  // The application region (format/header.h attachment_offset); empty when the pool has none.
  std::span<std::byte> attachment() const {
    return attachment_bytes_ ? std::span<std::byte>(base_ + attachment_offset_, attachment_bytes_) : std::span<std::byte>();
  }

  format::MaintenanceRecord* maintenance() const { return at<format::MaintenanceRecord>(format::kMaintenanceOffset); }

  // Makes [p, p+n) durable per persist_mode() (kMsync defers to sync()), and marks its pages
  // dirty for the next snapshot.
  void persist(const void* p, size_t n) const;
  // The durability point of a batch: a store fence, plus msync for file pools.
  void sync() const;

 private:
  Pool() = default;
  void map_file(uint64_t reserve_bytes);
  void grow_file(uint64_t new_size, Populate populate = Populate::kNow);
  void reserve_file_space(uint64_t bytes);
  bool reserved_through(uint64_t end) const;
  void wait_ahead();

  int fd_ = -1;
  std::unique_ptr<class OpenRegistration> registration_;  // this process's record that it has the pool open
  int replaced_fd_ = -1;   // create with replace: the old file, locked until publish()
  std::unique_ptr<class OpenRegistration> replaced_registration_;
  std::string path_;
  std::string temp_path_;  // set between create() and publish()
  PoolKind kind_ = PoolKind::kShm;
  PersistMode persist_mode_ = PersistMode::kOrdered;
  bool read_only_ = false;
  bool copy_on_write_ = false;
  std::byte* base_ = nullptr;
  uint64_t reserved_ = 0;   // bytes of address space reserved at base_
  uint64_t file_size_ = 0;  // bytes mapped (= the file's size)
  std::thread ahead_;       // reserve_ahead()'s fallocate
  uint64_t ahead_end_ = 0;  // where the space it reserved ends
  uint64_t kept_end_ = 0;   // file space reserved otherwise (create's reserve_bytes, or found at open): kept
  uint64_t max_size_ = 0;
  format::PoolHeader header_{};
  // header_'s attachment fields, kept apart for attachment(): a store's rounds read them while a
  // snapshot rewrites header_, and they change only where those rounds are held off
  // (Table::create_attachment), so only a change is written here (set_header).
  uint64_t attachment_offset_ = 0, attachment_bytes_ = 0;
  void set_header(const format::PoolHeader& h);
  std::unique_ptr<DirtyPages> dirty_pages_;  // sized to the reservation in map_file()
  int current_copy_ = 0;
  bool other_copy_invalid_ = false;
};

}  // namespace gphash::pool
