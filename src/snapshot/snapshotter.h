// Taking snapshots of one pool (gphash/snapshot.h says what a snapshot promises).
//
// How a snapshot is taken, for an engine that tracks its writes (pool/dirty_pages.h):
//   1. writers held off (a shared hold of the table's batch lock: searches go on): take the pages
//      marked since the last snapshot (all pages for a full image) and the pool's size; release;
//   2. copy those pages from the live pool into the new segment in the file while batches run:
//      a page a batch changes meanwhile may be copied half-written, but it is marked again;
//   3. writers held off again: take the pages marked since step 1 and copy them into memory, with
//      the pool's size and write counter: this is the capture, a batch boundary; release;
//   4. write the step-3 pages over their step-2 copies, then the index and the segment header;
//      sync; commit (a superblock for an append, a rename for a new file); sync; record the
//      snapshot in the pool's header.
// Writers are held off for steps 1 and 3 only: the copy of the pages changed during step 2.
// Each hold first lets the engine settle (asynchronous GPU batches finish, the GPU's own marks
// join the pool's: Engine::prepare_snapshot), so "held off" means no write is in flight at all.
//
// A delta needs marks that start where the file's chain ends: those of this object's last
// snapshot into the file, or, in a new process, the pool's own record (its header names the
// chain and write count of its last snapshot): when the write counter has not moved since, the
// pool is that snapshot but for its header pages, and the marks since the pool was opened are
// exactly what changed. Otherwise the snapshot is a full image in a new file.
// For an engine that does not track its writes there are no marks to trust, so every snapshot
// is a full image copied in one hold (steps 1 to 3 at once; searches still go on).
//
// Failure at any step leaves the file's committed chain as it was and gives the taken marks back
// to the pool, so the next snapshot still covers those pages.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <vector>

#include "gphash/snapshot.h"
#include "pool/pool.h"
#include "snapshot/file_format.h"
#include "snapshot/file_system.h"

namespace gphash::snapshot {

struct TakeOptions {
  uint32_t file_mode = 0600;  // of a new file
  // Compaction: write a new full image instead of a delta once the chain's deltas add up to more
  // than `compact_ratio` times its base image, or the chain has `max_segments` segments. With 1, a
  // chain stays under twice the image, and each byte of delta costs at most one byte of
  // compaction later: the cost still follows the write rate.
  double compact_ratio = 1.0;
  uint64_t max_segments = 1024;
  // Automatic snapshots: return at once (SnapshotResult::skipped) when has_unsnapshotted_writes()
  // is false, checked once this call's turn has come.
  bool skip_if_unchanged = false;
  // The write counter the capture stands for, when the caller knows it better than the pool's
  // counter at the capture: a GPU-memory table is saved to its pool before the snapshot, and
  // batches after the save count in the pool's counter but are not in the pool. Null: the
  // counter at the capture.
  std::optional<uint64_t> captured_writes;
};

class Snapshotter {
 public:
  // `batches` is the table's batch lock: writing batches hold it exclusively, searches shared.
  // `settle_writes`, if given, runs each time writers are held off, before the marks are taken:
  // the engine finishes the writes it still has in flight and reports the pages it wrote (an
  // engine whose writes the pool does not see itself: Engine::prepare_snapshot). It may throw.
  // `attachment_writers`, if given, is held exclusively (before `batches`) whenever writers are
  // held off: writers of the pool's attachment hold it shared across a write and the batches
  // that publish it (Table::hold_snapshots), so a capture never splits such a step.
  Snapshotter(pool::Pool& pool, std::shared_mutex& batches, FileSystem& fs = posix_file_system(),
              std::function<void()> settle_writes = {}, SnapshotGate* attachment_writers = nullptr);

  // Takes a snapshot into `path` (one at a time; a second caller waits). Throws gphash::Error:
  // kCorruptFile if `path` exists and is not a snapshot file or is damaged, kInvalidArgument if it
  // holds snapshots of another pool, kPoolInUse if another process is writing it, kNoSpace/kIo
  // for a failed write; in each case the file's committed chain is unchanged.
  SnapshotResult take(const std::string& path, const TakeOptions& options = {});

  // Whether the pool was written since its last completed snapshot (its header's record), or has
  // never had one: when false, an automatic snapshot would add nothing.
  bool has_unsnapshotted_writes() const;

 private:
  // The chain this object last committed to, and where the pool's marks start from.
  struct Baseline {
    std::string path;
    Superblock superblock{};
  };

  // The pool's record of its last snapshot, kept when the pool has not been written since: the
  // marks made since the pool was opened then start where that snapshot's chain ends.
  struct PoolRecord {
    unsigned char chain_id[16];
    uint64_t captured_unix_ns, pool_writes;
  };

  void remove_stale_temporaries(const std::string& path);
  void record_in_pool_header(const Superblock& committed);

  pool::Pool& pool_;
  std::shared_mutex& batches_;
  SnapshotGate* attachment_writers_;
  FileSystem& fs_;
  std::function<void()> settle_writes_;
  mutable std::mutex taking_;  // one snapshot at a time
  std::optional<Baseline> baseline_;
  std::optional<PoolRecord> pool_record_;  // until this object's first snapshot
  // Where step 3 copies pages, kept from one snapshot to the next and grown (its pages touched)
  // before writers are held off: the hold is then a memcpy, not page faults, which cost this
  // project's VM ten times the copy. Its size is the largest capture so far.
  std::vector<std::byte> capture_buffer_;
};

// The pool's write counter (format/header.h kWriteCounterOffset).
uint64_t pool_writes(const pool::Pool& pool);
// Adds the operations of a writing batch, before it runs (the facade, holding the batch lock).
void count_pool_writes(pool::Pool& pool, uint64_t operations);

}  // namespace gphash::snapshot
