// KvStore: memcached's data model on a gphash signature index and a slab item store.
//
// One thread (the server's scheduler) runs rounds of commands. A round is Mega-KV's cycle: one
// search for every signature the round touches, then the commands are resolved one by one in
// round order (full key compared on every signature hit; writes of the round go to an overlay, so
// a later command of the round sees an earlier one's effect), then the round's index changes
// (erases and upserts of signature heads) are written. The previous round's index changes go to
// the index with a round's searches as one batch (the batch runs in order, so the searches see
// the changes): one index round trip per round instead of three. Pipelined (KvConfig::pipeline),
// that batch goes on its way (Table::submit) and the round before is resolved meanwhile, on top of
// the changes the batch carries: the GPU searches one round while the CPU resolves the other, as
// in Mega-KV. A command is final (KvCommand::settled) when its round is resolved if its result
// touches no uncommitted change; the others when the batch carrying their round's changes is done
// (durable then in store mode). Other threads may read the items a round handed out
// (KvCommand::item) and must release() each one when done.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <vector>

#include "gphash/config.h"
#include "gphash/ops.h"
#include "gphash/snapshot.h"
#include "kv/command.h"
#include "kv/counter.h"
#include "kv/item_store.h"
#include "kv/signature.h"

namespace gphash {
class Table;
}

namespace gphash::kv {

enum class Mode { kCache, kStore };

struct KvConfig {
  Mode mode = Mode::kCache;
  // Store mode: NAME (files /dev/shm/NAME.index and /dev/shm/NAME.items) or a path prefix.
  std::string pool;
  uint64_t memory_bytes = 64ull << 20;  // item memory (-m)
  uint32_t item_size_max = 1 << 20;     // -I
  double growth_factor = 1.25;
  EngineKind engine = EngineKind::kCpu;
  int index_threads = 1;  // CPU engine threads for index batches
  // Items the index holds before its first resize; it doubles as they grow (the server sets it from
  // -m, or from -o hashpower as memcached sizes its hash table).
  uint64_t index_capacity = uint64_t{1} << 16;
  // Shard the index over several pools and GPUs (OpenOptions::shards): entry k is shard k's GPU.
  // Store mode: the index pools are NAME.index.shard<k>. Empty: one index.
  std::vector<int> index_shards;
  SignatureFn signature = xxh3_signature;
  // CAS values this store gives: cas_first, cas_first + cas_stride, ... (the server's partition k
  // of N gives k+1, k+1+N, ...: unique across its stores, as memcached's are across its items).
  uint64_t cas_first = 1;
  uint32_t cas_stride = 1;
  bool force_flush = false;
  // Cache mode: a hit moves its item to the head of its LRU only if the last move was at least
  // this many seconds ago (memcached's ITEM_UPDATE_INTERVAL, 60 s); a hit item that reaches the
  // tail sooner is moved back up instead of evicted. So most hits store nothing to the item's two
  // LRU neighbours (random lines other threads' rounds also touch). 0: every hit moves its item.
  // At most 65535.
  uint32_t lru_update_interval = 60;
  // Overlap each round's index batch with the resolution of the round before (KvStore::run). A
  // snapshot needs a moment when every resolved change is in the index, which a busy pipeline
  // rarely has: run() drains the pipeline when one waits.
  bool pipeline = false;
  // A round's searches of signatures that the same index batch changes are answered by the
  // changes, so the batch repeats no key. Unset: with the GPU engine only, which plans a batch that
  // repeats a key (a small batch about 20 us more, bench/results/2026-11-28-small-batches); the CPU
  // engine orders repeats for almost nothing, and looking for them cost its rounds 3-7%
  // (kv_round_bench on the 2-core VM, 64 keys, half sets).
  std::optional<bool> answer_repeated_searches;
  // Store mode: snapshots of the index pool, items included (gphash/snapshot.h); with a path, a
  // missing pool is restored from it at start.
  SnapshotOptions snapshots;
};

// Counters for `stats`; written by the thread running the rounds, read by any.
struct KvCounters {
  Counter cmd_get, cmd_set, cmd_touch, cmd_flush;
  Counter get_hits, get_misses, get_expired, get_flushed;
  Counter delete_hits, delete_misses;
  Counter incr_hits, incr_misses, decr_hits, decr_misses;
  Counter cas_hits, cas_misses, cas_badval;
  Counter touch_hits, touch_misses;
  Counter curr_items, total_items, bytes;
  Counter evictions, reclaimed, expired_unfetched, evicted_unfetched;
  Counter out_of_memory;
  Counter rounds, search_ops, write_ops, signature_collisions;
  Counter index_ns, resolve_ns;  // time in index batches / in resolution
};

struct RecoveryReport {
  bool recovered = false;   // an existing store was opened
  uint64_t scanned = 0;     // chunks that looked like items
  uint64_t live = 0;        // reachable from the index
  uint64_t freed = 0;       // unreachable (torn, superseded, deleted): freed
  double seconds = 0;
};

class KvStore {
 public:
  explicit KvStore(const KvConfig& config);
  ~KvStore();  // closes the index cleanly
  // Store mode: whether the config's pool (or the snapshot it would be restored from) exists.
  static bool store_exists(const KvConfig& config);
  KvStore(const KvStore&) = delete;
  KvStore& operator=(const KvStore&) = delete;

  // Runs one round (scheduler thread only; commands are resolved in span order). Not pipelined:
  // the round is resolved when run returns, its index changes left pending; the previous round's
  // commands are final. Pipelined: the round's searches go on their way and the round run before
  // it is resolved. Commands are final when settled; they must stay alive until then.
  void run(std::span<KvCommand* const> round);
  // Moves the work in hand one step on without a new round (resolves the round run last, writes
  // the pending changes); not pipelined, writes the pending changes (commit).
  void step();
  // Everything run so far is resolved and final when it returns.
  void commit();
  bool has_pending() const;  // a round unresolved or unsettled commands or unwritten changes
  bool pipelined() const { return pipelined_; }
  uint64_t rounds_resolved() const { return resolved_; }
  // Whether the pending changes should be written alone now rather than with the next round's
  // searches (not pipelined): when resolving a round took longer than its index batch (large
  // rounds, multi-gets), the commands that wait for the changes would wait longer for the next
  // round than a batch of their own costs.
  bool commit_alone_pays() const { return !pipelined_ && has_pending() && last_resolve_ns_ > last_index_ns_; }
  // One round to the end: run() then commit().
  void execute(std::span<KvCommand* const> round) {
    run(round);
    commit();
  }

  // Reading a held item (any thread).
  std::string_view key(Location loc) const { return items_->key(loc); }
  std::string_view value(Location loc) const { return {items_->value(loc), items_->item(loc)->value_len}; }
  void release(Location loc) const { items_->item(loc)->refs.fetch_sub(1, std::memory_order_release); }

  // Whether a store of this key and value size can never fit (checked before the value is read).
  bool too_large(size_t key_len, size_t value_len) const { return items_->class_for(key_len, value_len) == 0; }

  const KvCounters& counters() const { return counters_; }
  const RecoveryReport& recovery() const { return recovery_; }
  std::vector<SlabClassStats> slab_stats() const;  // while no round runs
  uint64_t limit_bytes() const { return items_->memory_bytes(); }
  uint32_t item_size_max() const { return items_->item_size_max(); }
  uint32_t page_size() const { return items_->page_size(); }
  const KvConfig& config() const { return config_; }
  std::string index_engine() const;
  // Store mode: the index table (snapshots, info); the scheduler thread or while idle.
  Table& table();

  // Test hook: how many items the store holds, by walking nothing (the counter).
  uint64_t items() const { return counters_.curr_items.load(); }

 private:
  struct Round;
  struct Pending;
  struct InFlight;
  struct Found {
    Location loc = 0;
    Location pred = 0;  // the chain predecessor, 0 when loc is the chain's head
  };

  void recover();
  void adopt_legacy_items(Table& table, const std::string& path, std::span<std::byte> region);
  uint32_t slot_now(const Signature& sig);  // the round's slot for a signature, searching at once if it is new
  Location search_now(const Signature& sig);
  bool answer_by_changes(const Round& searching);
  Found find(uint32_t slot, std::string_view key);
  void prefetch_item(Location loc) const;
  Location predecessor(uint32_t slot, Location loc) const;
  bool alive(const ItemHeader* h) const;
  void unlink(uint32_t slot, Found f);
  void link_new(uint32_t slot, Location item, Found replaced);
  void retire(Location loc);
  void reap_zombies();
  void apply_bumps();
  bool lru_move_due(const ItemHeader* h) const;
  void note_access(ItemHeader* h, Location loc);
  bool rescue(Location loc);
  static constexpr int kMaxRescues = 20;  // per walk from an LRU's tail
  Location allocate(uint8_t cls, Location pinned);
  bool evict_one(uint8_t cls);
  void plan_evictions(Round& r, std::span<KvCommand* const> round);
  void fill_item(Location loc, std::string_view key, std::string_view a, std::string_view b,
                 uint32_t flags, uint32_t exptime, uint64_t cas);
  KvStatus store_item(KvCommand& c, uint32_t slot, Found old, std::string_view a, std::string_view b,
                      uint32_t flags, uint32_t exptime);
  uint32_t absolute_exptime(int64_t exptime) const;
  uint64_t cas_after(uint64_t cas) const;  // the first of this store's CAS values above `cas`
  int64_t ttl_of(const ItemHeader* h) const;
  void resolve(KvCommand& c, uint32_t slot);
  void resolve_get(KvCommand& c, uint32_t slot);
  void get_hit(KvCommand& c, Location loc);
  bool read_directly(std::span<KvCommand* const> round);
  void resolve_store(KvCommand& c, uint32_t slot);
  void resolve_delete(KvCommand& c, uint32_t slot);
  void resolve_arith(KvCommand& c, uint32_t slot);
  void resolve_touch(KvCommand& c, uint32_t slot);
  void flush_all(KvCommand& c);
  void advance(std::span<KvCommand* const> next);
  void send(const Round* searching);
  void finish_in_flight();
  void resolve_round(std::span<KvCommand* const> cmds);
  void stage_pending();
  void finish_pending(Pending& p, const OpStatus* status);

  KvConfig config_;
  struct Index;
  std::unique_ptr<Index> index_;
  std::unique_ptr<ItemStore> items_;  // in store mode, in index_'s pool
  const bool pipelined_;
  const bool index_runs_in_submit_;  // Table::submit returns with the batch done
  const bool answer_repeated_searches_;  // KvConfig::answer_repeated_searches
  std::unique_ptr<Round> round_;     // the round being resolved
  std::unique_ptr<Round> launched_;  // the round whose searches were sent last (launched_cmds_)
  std::unique_ptr<Round> spare_;
  std::vector<KvCommand*> launched_cmds_;  // empty: no round launched and unresolved
  std::unique_ptr<Pending> pending_;       // the last resolved round's index changes, not yet sent
  std::unique_ptr<InFlight> in_flight_;
  std::optional<std::shared_lock<SnapshotGate>> hold_;  // store mode: from a round's items to its index changes
  std::vector<Location> zombies_;   // unlinked items still read by a reply
  // Cache mode: hits whose move to the head of their class's LRU is still to be made, in order
  // (apply_bumps: before anything else reads or changes an LRU).
  std::vector<Location> bumps_;
  std::vector<Location> deferred_;  // store mode: unlinked by the round being resolved
  std::vector<Signature> direct_sigs_;  // read_directly's
  std::vector<Location> direct_items_;
  uint64_t resolved_ = 0;
  uint64_t next_cas_ = 1;
  uint64_t last_index_ns_ = 0, last_resolve_ns_ = 0;  // the last round's
  uint32_t now_ = 0;
  KvCounters counters_;
  RecoveryReport recovery_;
};

}  // namespace gphash::kv
