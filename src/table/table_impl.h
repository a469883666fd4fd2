// Table::Impl, shared by the facade (table.cpp) and the sharded table (shard_set.cpp). Internal.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>

#include "engines/engine.h"
#include "gphash/table.h"
#include "pool/pool.h"
#include "snapshot/auto_snapshots.h"
#include "snapshot/snapshotter.h"

namespace gphash {

class ShardSet;

struct Table::Impl {
  std::unique_ptr<pool::Pool> pool;
  std::unique_ptr<engine::Engine> engine;
  OpenOptions options;
  // The index's widths, read from the header before snapshots start: batches check theirs against
  // these while a snapshot may be rewriting the header (pool->header() is not safe to read then).
  uint32_t key_width = 0, value_width = 0;
  // Writing batches run alone; searching batches may share the table.
  mutable std::shared_mutex batches;
  // Writers of the attachment hold this shared across a write and the batches that publish it; a
  // snapshot holds it exclusively (before `batches`) while it takes marks.
  mutable SnapshotGate attachment_writers;
  // Set by persist_attachment: writes the pool's write counter does not count (an in-place change
  // with no batch), which an automatic snapshot must not skip.
  mutable std::atomic<bool> attachment_written{false};
  // Set when a call failed in a way that may have left the engine half done: the table refuses
  // further work and is not marked clean, so the next open recovers the pool.
  std::string failure;
  void check_usable() const;
  template <class F>
  auto guarded(F&& f) -> decltype(f());
  // Checks batch `b` and runs `f` (the engine's call on it) under the batch lock, guarded.
  template <class F>
  auto run_batch(const Batch& b, F&& f) -> decltype(f());
  // Snapshots. Declared after what they use, so they go first; the scheduler last of all.
  std::unique_ptr<snapshot::Snapshotter> snapshotter;
  std::mutex snapshot_status;  // guards the three below
  uint64_t snapshots_taken = 0;
  SnapshotResult last_snapshot;
  std::string snapshot_error;
  std::unique_ptr<snapshot::AutoSnapshots> auto_snapshots;
  bool engine_closed = false;
  // A sharded table (OpenOptions::shards): the shards, each a Table of its own, do the work, and
  // pool, engine and the snapshot members above stay empty. Declared last: it goes first.
  std::unique_ptr<ShardSet> shards;

  ~Impl();
  // What a pool must be to open: a table of its own (a shard's pool is refused: writes to one
  // shard directly would bypass the routing), exactly shard `index` of `count` (a ShardSet opening
  // its shards; create stamps this and `set_id` into the header), or anything (restore).
  struct Member {
    enum Kind { kOwn, kExact, kAny } kind = kOwn;
    uint32_t index = 0;
    uint32_t count = 0;
    unsigned char set_id[16] = {};
  };
  // Table::create and Table::open of one pool.
  static std::unique_ptr<Impl> create_pool(const std::string& pool, const TableConfig& config,
                                           const OpenOptions& options, const Member& member);
  static std::unique_ptr<Impl> open_pool(const std::string& pool, const OpenOptions& options, const Member& member);

  SnapshotResult take_snapshot(const std::string& path, bool skip_if_unchanged = false);
  void start_snapshots();
  void shut_down();
  void after_writing_batch() {
    if (auto_snapshots) auto_snapshots->writing_batch_done();
  }
};

// Checks a batch against a pool's widths before any of it runs; returns how many of its operations
// may write (0: a searching batch). Throws gphash::Error for a malformed batch.
uint64_t validate_batch(const Batch& b, uint32_t key_width, uint32_t value_width, const pool::Pool& pool,
                        const OpenOptions& options);

}  // namespace gphash
