#include "kv/kv_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <unordered_map>
#include <utility>

#include "gphash/error.h"
#include "gphash/table.h"
#include "kv/kv_error.h"
#include "kv/tick_clock.h"

namespace gphash::kv {

namespace {

constexpr int64_t kRelativeExptimeMax = 60 * 60 * 24 * 30;  // memcached: up to 30 days is relative
constexpr size_t kSearchChunk = 1 << 20;                     // recovery searches in batches of this

uint64_t elapsed_ns(uint64_t since) { return TickClock::ns_since(since); }

// memcached's number rules for incr/decr on a stored value: optional leading whitespace, digits,
// optional trailing whitespace (a shorter result is padded with spaces, see resolve_arith).
bool parse_counter(std::string_view s, uint64_t& out) {
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  if (i == s.size()) return false;
  uint64_t v = 0;
  size_t digits = 0;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i, ++digits) {
    const uint64_t d = static_cast<uint64_t>(s[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  if (digits == 0) return false;
  for (; i < s.size(); ++i)
    if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n') return false;
  out = v;
  return true;
}

std::string pool_file(const std::string& pool, const char* suffix) {
  if (pool.find('/') != std::string::npos) return pool + suffix;
  return "/dev/shm/" + pool + suffix;
}
std::string pool_spec(const std::string& pool, const char* suffix) { return pool + suffix; }

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// A sharded index is there when its shard 0 is (a missing later shard is the Table's error).
std::string index_file(const KvConfig& config) {
  return pool_file(config.pool, config.index_shards.empty() ? ".index" : ".index.shard0");
}

uint64_t file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw KvError(KvErrorCode::kIo, "cannot stat " + path + ": " + std::strerror(errno));
  return static_cast<uint64_t>(st.st_size);
}

}  // namespace

// An item's header and key (the line after it): the chains' first items are random misses that
// resolving the commands one by one would otherwise wait for in turn. Fetched as soon as the
// index gives their locations, so the misses overlap the bookkeeping before the round resolves
// (kv_round_bench, 2-core VM, medians of 6 pairs: rounds of 1 and 2 -5% against fetching them
// when the round's resolution begins).
void KvStore::prefetch_item(Location loc) const {
  if (!loc) return;
  __builtin_prefetch(items_->item(loc));
  __builtin_prefetch(reinterpret_cast<const std::byte*>(items_->item(loc)) + sizeof(ItemHeader));
}

// The index: a gphash Table from 16-byte signatures to 8-byte item locations.
struct KvStore::Index {
  Table table;
  std::vector<OpStatus> status;

  // `ops` null: every entry is `op`.
  void run(Op op, const Op* ops, const Signature* keys, const Location* values, Location* out, size_t n) {
    if (n == 0) return;
    status.resize(n);
    Batch b;
    b.size = n;
    b.key_width = sizeof(Signature);
    b.value_width = sizeof(Location);
    b.op = op;
    b.ops = ops;
    b.keys = keys;
    b.values = values;
    b.values_out = out;
    b.status = status.data();
    table.execute(b);
  }
  void run(Op op, const Signature* keys, const Location* values, Location* out, size_t n) {
    run(op, nullptr, keys, values, out, n);
  }
};

// A round's index changes (erases and upserts of signature heads, one per signature, so their
// order does not matter), the round's slot of each, the commands that wait for them and, in store
// mode, the chunks the round unlinked (reused once the changes are in the index).
struct KvStore::Pending {
  std::vector<Op> ops;
  std::vector<Signature> keys;
  std::vector<Location> values;  // upserts: the new head; erases: unused
  std::vector<uint32_t> slots;
  std::vector<std::pair<KvCommand*, uint32_t>> waiting;  // unsettled commands and their slots
  std::vector<Location> deferred;
  uint32_t round_slots = 0;

  size_t changes() const { return slots.size(); }
  bool empty() const { return slots.empty() && waiting.empty() && deferred.empty(); }
  void clear() {
    ops.clear(), keys.clear(), values.clear(), slots.clear(), waiting.clear(), deferred.clear();
    round_slots = 0;
  }
};

// The index batch on its way (Table::submit): a round's changes, then the launched round's
// searches; its arrays stay put until it is finished.
struct KvStore::InFlight {
  static constexpr uint32_t kNoChange = UINT32_MAX;
  Pending changes;
  std::vector<Op> ops;
  std::vector<Signature> keys;
  std::vector<Location> values, results;
  std::vector<OpStatus> status;
  size_t searches = 0;  // the launched round's signatures
  size_t answered = 0;  // of them, answered by a change of the batch
  // KvConfig::answer_repeated_searches: a signature the batch both changes and searches is
  // answered by its change (answered_by[slot]: the change's index; kNoChange: searched), so the
  // batch repeats no key: the GPU engine then runs it as one kernel instead of planning it (sort,
  // batch and serial passes), and Zipf-hot keys are changed by almost every round. search_slots:
  // the round's slot of each search sent (with none answered, slot i is search i).
  uint64_t submit_ns = 0;
  BatchEvent event;
  bool active = false;
  std::vector<uint32_t> answered_by, search_slots;
};

// The state of one round: the signatures it touches, what the index held for them when the round
// began (`found`) and what it will hold when the round commits (`head`, the overlay).
struct KvStore::Round {
  static constexpr uint32_t kNoSlot = UINT32_MAX;
  std::vector<Signature> sigs;
  std::vector<Location> found;
  std::vector<Location> head;
  std::vector<uint8_t> dirty;
  // Pipelined: the head came from the changes on their way (the in-flight batch's slot for it,
  // UINT32_MAX: from the index).
  std::vector<uint32_t> overlaid;
  std::vector<uint32_t> cmd_slot;
  // Per class: eviction candidates searched ahead, with their cas (the chunk may hold another item
  // by the time the round is resolved).
  std::vector<std::vector<std::pair<Location, uint64_t>>> victims;
  bool victims_planned = false;  // some class's victims may be left

  void clear() {
    // Newest first: linear probing then never empties an entry an older signature's probe passes.
    for (size_t k = sigs.size(); k-- > 0;) slots_[position(sigs[k])] = 0;
    sigs.clear();
    found.clear();
    head.clear();
    dirty.clear();
    overlaid.clear();
    cmd_slot.clear();
    // Per class, so only after a round that planned evictions: every round walked them all (~40
    // classes, 4% of a round of one command on a hot key).
    if (victims_planned) {
      for (auto& v : victims) v.clear();
      victims_planned = false;
    }
  }
  // The slot of a signature the round searches (kNoSlot: none).
  uint32_t find(const Signature& s) const {
    if (slots_.empty()) return kNoSlot;
    const uint32_t e = slots_[position(s)];
    return e == 0 ? kNoSlot : e - 1;
  }
  uint32_t add(const Signature& s) {
    if (2 * (sigs.size() + 1) > slots_.size()) grow();
    uint32_t& e = slots_[position(s)];
    if (e == 0) {
      sigs.push_back(s);
      e = static_cast<uint32_t>(sigs.size());
    }
    return e - 1;
  }

 private:
  // Signature -> slot + 1 (0: empty), open addressing with linear probing, at most half full. (A
  // std::unordered_map allocated a node per signature and freed it the next round: a malloc and a
  // free per command of the server.)
  std::vector<uint32_t> slots_;

  size_t position(const Signature& s) const {
    const size_t mask = slots_.size() - 1;
    size_t i = SignatureHash{}(s) & mask;
    while (slots_[i] != 0 && !(sigs[slots_[i] - 1] == s)) i = (i + 1) & mask;
    return i;
  }
  void grow() {
    slots_.assign(std::max<size_t>(64, 2 * slots_.size()), 0);
    for (size_t k = 0; k < sigs.size(); ++k) slots_[position(sigs[k])] = static_cast<uint32_t>(k + 1);
  }
};

bool KvStore::store_exists(const KvConfig& config) {
  return exists(index_file(config)) || (!config.snapshots.path.empty() && exists(config.snapshots.path));
}

KvStore::KvStore(const KvConfig& config)
    : config_(config),
      pipelined_(config.pipeline),
      index_runs_in_submit_(config.engine == EngineKind::kCpu || !config.index_shards.empty()),
      answer_repeated_searches_(config.answer_repeated_searches.value_or(config.engine == EngineKind::kGpu)),
      round_(std::make_unique<Round>()),
      launched_(std::make_unique<Round>()),
      spare_(std::make_unique<Round>()),
      pending_(std::make_unique<Pending>()),
      in_flight_(std::make_unique<InFlight>()),
      next_cas_(config.cas_first) {
  if (config.cas_first == 0 || config.cas_stride == 0)
    throw KvError(KvErrorCode::kInvalidArgument, "CAS values start at 1 and grow: cas_first and cas_stride must be positive");
  if (config.lru_update_interval > UINT16_MAX)
    throw KvError(KvErrorCode::kInvalidArgument, "lru_update_interval is at most 65535 seconds");
  OpenOptions options;
  options.engine = config.engine;
  options.threads = config.index_threads;
  options.force_flush = config.force_flush;
  ItemStoreConfig items;
  items.memory_bytes = config.memory_bytes;
  items.item_size_max = config.item_size_max;
  items.growth_factor = config.growth_factor;
  options.shards = config.index_shards;
  TableConfig table_config;
  table_config.key_width = sizeof(Signature);
  table_config.value_width = sizeof(Location);
  table_config.capacity = config.index_capacity;

  if (config.mode == Mode::kCache) {
    if (!config.snapshots.path.empty())
      throw KvError(KvErrorCode::kInvalidArgument, "snapshots need store mode (--mode store): a cache keeps nothing");
    // A cache keeps nothing across restarts: anonymous memory, and on a GPU the faster volatile
    // placement in GPU memory.
    options.placement = Placement::kGpuMemory;
    index_ = std::make_unique<Index>(Index{Table::create("mem:", table_config, options), {}});
    items_ = std::make_unique<ItemStore>(items);
    for (Round* r : {round_.get(), launched_.get(), spare_.get()}) r->victims.resize(items_->class_count() + 1);
    return;
  }
  if (config.pool.empty()) throw KvError(KvErrorCode::kInvalidArgument, "store mode needs a pool name (--pool)");
  // The items live in the index pool's attachment (shard 0's, for a sharded index), so one
  // snapshot of the pool holds both. The shards of a sharded index snapshot one by one, which is
  // no single cut across the attachment and the other shards' entries: refused.
  if (!config.snapshots.path.empty() && !config.index_shards.empty())
    throw KvError(KvErrorCode::kInvalidArgument,
                  "snapshots of a sharded index are not one consistent cut of the store: use one index (no --shards/--devices) "
                  "with --snapshot");
  options.snapshots = config.snapshots;
  const std::string index_path = index_file(config);
  const std::string legacy_items = pool_file(config.pool, ".items");
  const bool reopen = store_exists(config);
  if (!reopen && exists(legacy_items))
    throw KvError(KvErrorCode::kCorrupt, legacy_items + " exists but its index " + index_path +
                                             " does not: remove the .items file to start empty");
  index_ = std::make_unique<Index>(Index{reopen ? Table::open(pool_spec(config.pool, ".index"), options)
                                                : Table::create(pool_spec(config.pool, ".index"), table_config, options),
                                         {}});
  Table& table = index_->table;
  const bool legacy = exists(legacy_items);
  std::span<std::byte> region = table.attachment();
  if (region.empty()) {
    if (!legacy && table.size() != 0)
      throw KvError(KvErrorCode::kCorrupt, index_path + " holds " + std::to_string(table.size()) +
                                               " entries but no item store: it is not a gphash-server pool");
    const uint64_t need = ItemStore::region_bytes(items);
    region = table.create_attachment(legacy ? std::max(file_size(legacy_items), need) : need);
  }
  const auto hold = table.hold_snapshots();  // a snapshot sees the store before or after all of this
  if (legacy) adopt_legacy_items(table, legacy_items, region);
  items.region = region;
  items.persist_range = [&table](const void* p, size_t n) { table.persist_attachment(p, n); };
  items_ = std::make_unique<ItemStore>(items);
  for (Round* r : {round_.get(), launched_.get(), spare_.get()}) r->victims.resize(items_->class_count() + 1);
  if (!items_->created()) recover();
}

// An item store of an earlier version, in its own file beside the index: copied verbatim into the
// attachment (locations are offsets in the region, so they stay valid), made durable, then the
// file is removed. While the file exists it is the store, so a crash during the copy repeats it.
void KvStore::adopt_legacy_items(Table& table, const std::string& path, std::span<std::byte> region) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw KvError(KvErrorCode::kIo, "cannot open " + path + ": " + std::strerror(errno));
  const uint64_t bytes = file_size(path);
  if (region.size() < bytes) {
    ::close(fd);
    throw KvError(KvErrorCode::kCorrupt, path + " (" + std::to_string(bytes) + " bytes) does not fit the index's item region (" +
                                             std::to_string(region.size()) + " bytes)");
  }
  for (uint64_t done = 0; done < bytes;) {
    const ssize_t n = ::pread(fd, region.data() + done, bytes - done, static_cast<off_t>(done));
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      throw KvError(KvErrorCode::kIo, "cannot read " + path + ": " + std::strerror(err));
    }
    done += static_cast<uint64_t>(n);
  }
  ::close(fd);
  if (bytes > 0) table.persist_attachment(region.data(), bytes);
  if (::unlink(path.c_str()) != 0) throw KvError(KvErrorCode::kIo, "cannot remove " + path + ": " + std::strerror(errno));
  std::fprintf(stderr, "gphash-server: moved the item store %s into %s (%llu bytes)\n", path.c_str(),
               pool_file(config_.pool, ".index").c_str(), static_cast<unsigned long long>(bytes));
}

KvStore::~KvStore() {
  try {
    // Nobody waits any more (a launched round's commands are gone: it is dropped unresolved);
    // the changes are still written.
    launched_cmds_.clear();
    pending_->waiting.clear();
    in_flight_->changes.waiting.clear();
    commit();
    hold_.reset();
    if (index_) index_->table.close();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gphash-server: closing the index: %s\n", e.what());
  }
}

Table& KvStore::table() { return index_->table; }

std::string KvStore::index_engine() const { return index_->table.info().engine; }

std::vector<SlabClassStats> KvStore::slab_stats() const {
  std::vector<SlabClassStats> out;
  items_->class_stats(out);
  return out;
}

// Store mode, at open: the live items are the chunks the index reaches; everything else (items
// torn by a crash, superseded or deleted but not yet reused) is freed.
void KvStore::recover() {
  const auto start = std::chrono::steady_clock::now();
  recovery_.recovered = true;
  items_->begin_recovery();
  std::vector<Signature> sigs;
  std::vector<Location> locs;
  items_->for_each_candidate([&](Location loc) {
    sigs.push_back(config_.signature(items_->key(loc)));
    locs.push_back(loc);
  });
  recovery_.scanned = locs.size();
  std::vector<Location> heads(sigs.size(), 0);
  for (size_t at = 0; at < sigs.size(); at += kSearchChunk) {
    const size_t n = std::min(kSearchChunk, sigs.size() - at);
    index_->run(Op::kSearch, sigs.data() + at, nullptr, heads.data() + at, n);
    for (size_t i = 0; i < n; ++i)
      if (index_->status[i] != OpStatus::kOk) heads[at + i] = 0;
  }
  // Walk each chain once, from its head: its members are live.
  std::unordered_map<Location, bool> candidate;
  candidate.reserve(locs.size());
  for (Location loc : locs) candidate.emplace(loc, false);
  uint64_t live = 0, max_cas = 0;
  for (size_t i = 0; i < sigs.size(); ++i) {
    for (Location loc = heads[i]; loc != 0;) {
      auto it = candidate.find(loc);
      if (it == candidate.end() || it->second) break;  // not an item, or this chain is done
      if (!(config_.signature(items_->key(loc)) == sigs[i]))
        throw KvError(KvErrorCode::kCorrupt, "item store and index disagree: the chain of a signature reaches an item of another key");
      it->second = true;
      items_->adopt(loc);
      ++live;
      max_cas = std::max(max_cas, items_->item(loc)->cas);
      counters_.bytes += items_->item(loc)->key_len + items_->item(loc)->value_len;
      loc = items_->item(loc)->chain_next;
    }
  }
  items_->rebuild_free_lists();
  next_cas_ = cas_after(std::max(max_cas, items_->oldest_live_cas()));
  counters_.curr_items = live;
  recovery_.live = live;
  recovery_.freed = recovery_.scanned - live;
  recovery_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

uint64_t KvStore::cas_after(uint64_t cas) const {
  const uint64_t first = config_.cas_first, stride = config_.cas_stride;
  return cas < first ? first : first + ((cas - first) / stride + 1) * stride;
}

uint32_t KvStore::absolute_exptime(int64_t exptime) const {
  if (exptime == 0) return 0;
  if (exptime < 0) return 1;  // already expired
  if (exptime <= kRelativeExptimeMax) return static_cast<uint32_t>(now_ + exptime);
  if (exptime <= now_) return 1;
  return static_cast<uint32_t>(std::min<int64_t>(exptime, UINT32_MAX));
}

int64_t KvStore::ttl_of(const ItemHeader* h) const {
  if (h->exptime == 0) return -1;
  return h->exptime > now_ ? static_cast<int64_t>(h->exptime - now_) : -1;
}

bool KvStore::alive(const ItemHeader* h) const {
  if (h->exptime != 0 && h->exptime <= now_) return false;
  if (h->cas <= items_->oldest_live_cas()) return false;
  const uint32_t flush_time = items_->oldest_live_time();
  if (flush_time != 0 && flush_time <= now_ && h->stored_time <= flush_time) return false;
  return true;
}

uint32_t KvStore::slot_now(const Signature& sig) {
  Round& r = *round_;
  if (const uint32_t slot = r.find(sig); slot != Round::kNoSlot) return slot;
  // A signature the round did not search (an eviction victim nobody planned for): search it now.
  const Location head = search_now(sig);
  const uint32_t slot = r.add(sig);
  r.found.push_back(head);
  r.head.push_back(head);
  r.dirty.push_back(0);
  r.overlaid.push_back(UINT32_MAX);
  return slot;
}

// What the index holds for one signature, searched at once, outside the rounds' batches.
Location KvStore::search_now(const Signature& sig) {
  Location head = 0;
  index_->run(Op::kSearch, &sig, nullptr, &head, 1);
  if (index_->status[0] != OpStatus::kOk) head = 0;
  counters_.search_ops++;
  return head;
}

// The item before `loc` in its signature's chain (0: loc is the head). Evictions during an
// allocation can unlink items of the same chain, so callers holding a Found re-ask after one.
Location KvStore::predecessor(uint32_t slot, Location loc) const {
  Location pred = 0;
  for (Location at = round_->head[slot]; at && at != loc; at = items_->item(at)->chain_next) pred = at;
  return pred;
}

KvStore::Found KvStore::find(uint32_t slot, std::string_view key) {
  Location pred = 0;
  for (Location loc = round_->head[slot]; loc != 0; pred = loc, loc = items_->item(loc)->chain_next) {
    if (items_->key(loc) != key) {
      counters_.signature_collisions++;
      continue;
    }
    ItemHeader* h = items_->item(loc);
    if (alive(h)) return {loc, pred};
    // Expired or flushed: gone for every purpose; reclaim it now, as memcached does on access.
    if (h->exptime != 0 && h->exptime <= now_) {
      counters_.reclaimed++;
      if (!h->fetched) counters_.expired_unfetched++;
    }
    unlink(slot, {loc, pred});
    return {};
  }
  return {};
}

void KvStore::unlink(uint32_t slot, Found f) {
  ItemHeader* h = items_->item(f.loc);
  if (f.pred == 0) {
    round_->head[slot] = h->chain_next;
    round_->dirty[slot] = 1;
  } else {
    ItemHeader* p = items_->item(f.pred);
    p->chain_next = h->chain_next;
    items_->persist(&p->chain_next, sizeof p->chain_next);
  }
  counters_.curr_items--;
  counters_.bytes -= h->key_len + h->value_len;
  retire(f.loc);
}

// `replaced` is the item the new one takes the place of in its chain (none: a new key).
void KvStore::link_new(uint32_t slot, Location loc, Found replaced) {
  ItemHeader* h = items_->item(loc);
  h->chain_next = replaced.loc ? items_->item(replaced.loc)->chain_next : round_->head[slot];
  items_->persist(h, sizeof(ItemHeader) + h->key_len + h->value_len);
  // Only now may anything point at the item (the index batch, or a chain pointer).
  if (replaced.loc && replaced.pred) {
    ItemHeader* p = items_->item(replaced.pred);
    p->chain_next = loc;
    items_->persist(&p->chain_next, sizeof p->chain_next);
  } else {
    round_->head[slot] = loc;
    round_->dirty[slot] = 1;
  }
  h->state = kItemLinked;
  if (config_.mode == Mode::kCache) {
    apply_bumps();
    items_->lru_link(loc);
  }
  counters_.bytes += h->key_len + h->value_len;
  counters_.total_items++;
  if (replaced.loc) {
    const ItemHeader* old = items_->item(replaced.loc);
    counters_.bytes -= old->key_len + old->value_len;
    retire(replaced.loc);
  } else {
    counters_.curr_items++;
  }
}

// An unlinked item: its chunk is reused once no reply reads it (and, in store mode, once the
// round's index batch no longer lets a restart reach it).
void KvStore::retire(Location loc) {
  ItemHeader* h = items_->item(loc);
  if (config_.mode == Mode::kCache) {
    apply_bumps();
    items_->lru_unlink(loc);
  }
  h->state = kItemZombie;
  if (config_.mode == Mode::kStore) {
    deferred_.push_back(loc);
  } else if (h->refs.load(std::memory_order_acquire) == 0) {
    items_->release_chunk(loc);
  } else {
    zombies_.push_back(loc);
  }
}

// Cache mode: an access moves its item to the head of its LRU if the last move is old enough
// (KvConfig::lru_update_interval; the 16-bit difference wraps every 18 hours, so an item unmoved
// that long may skip one move), and otherwise marks it hit, for the tail to rescue it (rescue).
bool KvStore::lru_move_due(const ItemHeader* h) const {
  return static_cast<uint16_t>(static_cast<uint16_t>(now_) - h->lru_moved) >= config_.lru_update_interval;
}

void KvStore::note_access(ItemHeader* h, Location loc) {
  if (config_.mode != Mode::kCache) return;
  if (!lru_move_due(h)) {
    h->lru_hit = 1;
    return;
  }
  h->lru_moved = static_cast<uint16_t>(now_);
  h->lru_hit = 0;
  bumps_.push_back(loc);
}

// An item at the tail that was hit since its last move goes back to the head instead of being
// evicted (a second chance, as memcached's segmented LRU moves active items up from its cold
// tail): hits within the update interval keep their items from eviction without each storing to
// its neighbours. The caller bounds the rescues of one walk, so a tail of hot items still yields.
bool KvStore::rescue(Location loc) {
  ItemHeader* h = items_->item(loc);
  if (!h->lru_hit) return false;
  h->lru_hit = 0;
  h->lru_moved = static_cast<uint16_t>(now_);
  items_->lru_bump(loc);
  return true;
}

// A hit's move to the head of its LRU stores to the item's two neighbours, random lines that
// resolve_round fetches for writing only when the item's header is in; made at once, those stores
// were still waiting for their lines when the hit's hold (a locked add) came, which waits for
// every store before it: 14% of kv_round_bench's time in rounds of one get (perf, 2-core VM).
// Made later (when the next round is resolved, after its index batch, or before anything reads or
// changes an LRU: a link, an unlink, an eviction's look at a tail), the lines are there, and every
// LRU is in the same order as if each hit had moved its item at once: the moves run in hit order
// and nothing sees an LRU in between. Until then each bumped item is linked (an unlink applies
// the pending moves first). Made at the next round's start instead, the stores still found their
// lines missing and held up the stores behind them (the round's signatures: 7% of the time).
void KvStore::apply_bumps() {
  for (const Location loc : bumps_) items_->lru_bump(loc);
  bumps_.clear();
}

void KvStore::reap_zombies() {
  size_t kept = 0;
  for (Location loc : zombies_) {
    if (items_->item(loc)->refs.load(std::memory_order_acquire) == 0) items_->release_chunk(loc);
    else zombies_[kept++] = loc;
  }
  zombies_.resize(kept);
}

// Cache mode: unlinks the least recently used item of the class that no reply is reading.
bool KvStore::evict_one(uint8_t cls) {
  auto& planned = round_->victims[cls];
  Location victim = 0;
  while (!planned.empty() && !victim) {
    const auto [loc, cas] = planned.back();
    planned.pop_back();
    const ItemHeader* h = items_->item(loc);
    if (h->state == kItemLinked && h->class_id == cls && h->cas == cas && h->refs.load(std::memory_order_acquire) == 0)
      victim = loc;
  }
  // As memcached, look at a bounded number of items from the tail.
  apply_bumps();
  int tries = 50, rescues = kMaxRescues;
  for (Location loc = items_->lru_tail(cls); !victim && loc && tries-- > 0;) {
    const Location prev = items_->item(loc)->lru_prev;
    if (items_->item(loc)->refs.load(std::memory_order_acquire) == 0) {
      if (rescues > 0 && rescue(loc)) --rescues;
      else victim = loc;
    }
    loc = prev;
  }
  if (!victim) return false;
  const std::string_view key = items_->key(victim);
  const uint32_t slot = slot_now(config_.signature(key));
  Location pred = 0;
  Location loc = round_->head[slot];
  while (loc && loc != victim) {
    pred = loc;
    loc = items_->item(loc)->chain_next;
  }
  if (!loc) return false;  // not reachable: cannot happen while the invariants hold
  const ItemHeader* h = items_->item(victim);
  if (alive(h)) {
    counters_.evictions++;
    if (!h->fetched) counters_.evicted_unfetched++;
  } else {
    counters_.reclaimed++;
  }
  unlink(slot, {victim, pred});
  return true;
}

// Cache mode: before the search batch, pick the victims this round's stores will need, so their
// signatures ride in the same search batch (Mega-KV: evictions go to the GPU batched).
void KvStore::plan_evictions(Round& r, std::span<KvCommand* const> round) {
  if (config_.mode != Mode::kCache || items_->pages_assigned() < items_->page_count()) return;
  auto plans = [](const KvCommand* c) {
    return c->op == KvOp::kStore && c->mode != StoreMode::kAppend && c->mode != StoreMode::kPrepend;
  };
  // A full cache's rounds of gets alone need no victims: no per-class counts and stats for them.
  if (std::none_of(round.begin(), round.end(), plans)) return;
  std::vector<uint64_t> need(items_->class_count() + 1, 0);
  for (const KvCommand* c : round)
    if (plans(c))
      if (uint8_t cls = items_->class_for(c->key.size(), c->value.size())) ++need[cls];
  r.victims_planned = true;
  apply_bumps();
  std::vector<SlabClassStats> stats;
  items_->class_stats(stats);
  for (uint8_t cls = 1; cls < need.size(); ++cls) {
    if (need[cls] <= stats[cls - 1].free_chunks) continue;
    uint64_t want = need[cls] - stats[cls - 1].free_chunks;
    int rescues = kMaxRescues;
    for (Location loc = items_->lru_tail(cls), prev = 0; loc && want > 0; loc = prev) {
      prev = items_->item(loc)->lru_prev;
      if (items_->item(loc)->refs.load(std::memory_order_acquire) != 0) continue;
      if (rescues > 0 && rescue(loc)) {
        --rescues;
        continue;
      }
      r.victims[cls].emplace_back(loc, items_->item(loc)->cas);
      r.add(config_.signature(items_->key(loc)));
      --want;
    }
    std::reverse(r.victims[cls].begin(), r.victims[cls].end());  // oldest last: popped first
  }
}

// A free chunk of the class; in cache mode evicting if needed. `pinned` (the item a command is
// about to replace or extend) is never the victim: its refs are held across the call.
Location KvStore::allocate(uint8_t cls, Location pinned) {
  if (Location loc = items_->allocate(cls)) return loc;
  if (config_.mode != Mode::kCache) return 0;
  if (pinned) items_->item(pinned)->refs.fetch_add(1, std::memory_order_relaxed);
  Location loc = 0;
  for (int attempt = 0; attempt < 4 && !loc; ++attempt) {
    if (!evict_one(cls)) break;
    loc = items_->allocate(cls);
  }
  if (pinned) items_->item(pinned)->refs.fetch_sub(1, std::memory_order_relaxed);
  return loc;
}

bool KvStore::has_pending() const { return in_flight_->active || !launched_cmds_.empty() || !pending_->empty(); }

void KvStore::run(std::span<KvCommand* const> round) {
  // Pipelined, rounds back to back always leave a resolved round's changes on their way, so the
  // snapshot gate would never open: when a snapshot waits, the store drains first (store mode).
  if (pipelined_ && hold_ && hold_->mutex()->snapshot_waiting()) commit();
  if (!pipelined_ && read_directly(round)) return;
  advance(round);
  if (!pipelined_) advance({});
}

// A round of plain gets with nothing in hand (no change pending or on its way, which the round
// would have to see through an overlay): one search batch and each key's chain, no index change,
// none of a round's machinery (Round, the batch's vectors, the overlay). Not when a chain holds a
// dead copy of the key (expired or flushed) before a live one: unlinking it changes the index,
// which a full round does.
bool KvStore::read_directly(std::span<KvCommand* const> round) {
  if (round.empty() || has_pending()) return false;
  for (const KvCommand* c : round)
    if (c->op != KvOp::kGet || c->set_exptime || c->vivify) return false;
  const size_t n = round.size();
  const uint64_t start = TickClock::now();
  direct_sigs_.resize(n);
  for (size_t i = 0; i < n; ++i) direct_sigs_[i] = config_.signature(round[i]->key);
  // The index's misses start first; the pending LRU moves (their lines fetched since the last
  // round) and the bookkeeping run while they come, as in a full round (advance).
  index_->table.prefetch(direct_sigs_.data(), n);
  now_ = static_cast<uint32_t>(std::time(nullptr));
  if (!zombies_.empty()) reap_zombies();
  apply_bumps();
  direct_items_.assign(n, 0);
  index_->run(Op::kSearch, direct_sigs_.data(), nullptr, direct_items_.data(), n);
  for (size_t i = 0; i < n; ++i)
    if (index_->status[i] == OpStatus::kOk) prefetch_item(direct_items_[i]);
  const uint64_t searched = TickClock::now();
  uint64_t collisions = 0;
  for (size_t i = 0; i < n; ++i) {
    Location hit = 0;
    if (index_->status[i] == OpStatus::kOk)
      for (Location loc = direct_items_[i]; loc; loc = items_->item(loc)->chain_next) {
        if (items_->key(loc) != round[i]->key) {
          ++collisions;
          continue;
        }
        if (!alive(items_->item(loc))) return false;  // nothing changed yet: the long way
        hit = loc;
        break;
      }
    direct_items_[i] = hit;
  }
  counters_.search_ops += n;  // here: a round that goes the long way above counts its own
  counters_.signature_collisions += collisions;
  for (size_t i = 0; i < n; ++i) {
    KvCommand& c = *round[i];
    counters_.cmd_get++;
    if (direct_items_[i]) {
      get_hit(c, direct_items_[i]);
    } else {
      counters_.get_misses++;
      c.status = KvStatus::kNotFound;
    }
    c.settled = true;
  }
  counters_.rounds++;
  resolved_++;
  last_index_ns_ = TickClock::to_ns(searched - start);
  last_resolve_ns_ = TickClock::ns_since(searched);
  counters_.index_ns += last_index_ns_;
  counters_.resolve_ns += last_resolve_ns_;
  return true;
}

void KvStore::step() {
  if (pipelined_) advance({});
  else commit();
}

void KvStore::commit() {
  while (has_pending()) advance({});
}

// One step of the round pipeline:
//   1. the batch on its way finishes: its changes are in the index (durable in store mode), and
//      the searches it carried are the launched round's;
//   2. the pending changes (the last resolved round's) go to the index with `next`'s searches,
//      one batch, on its way while
//   3. the launched round is resolved, on top of the changes of 2 (its searches ran before them);
//      its changes become the pending ones.
// `next` becomes the launched round. Not pipelined, run() follows with a step without a round, so
// every round is resolved in its own run.
void KvStore::advance(std::span<KvCommand* const> next) {
  now_ = static_cast<uint32_t>(std::time(nullptr));
  if (!zombies_.empty()) reap_zombies();
  finish_in_flight();
  // Every resolved change is in the index: a waiting snapshot (store mode) may go now.
  if (pending_->changes() == 0) hold_.reset();
  if (!next.empty()) {
    Round& r = *spare_;
    r.clear();
    r.cmd_slot.resize(next.size());
    for (size_t i = 0; i < next.size(); ++i)
      r.cmd_slot[i] = next[i]->op == KvOp::kFlushAll ? UINT32_MAX : r.add(config_.signature(next[i]->key));
    // The index's first misses start now and overlap the batch's set-up in send() and the
    // engine's, which otherwise ran before they even started (kv_round_bench --keys 100000,
    // 2-core VM, medians of 3 pairs: rounds of 1 and 2: -7%, -10%; with CpuEngine::prefetch's
    // whole top-level buckets, -18%, -15% more).
    index_->table.prefetch(r.sigs.data(), r.sigs.size());
    plan_evictions(r, next);
  }
  send(next.empty() ? nullptr : spare_.get());
  if (!launched_cmds_.empty()) {
    std::swap(round_, launched_);
    resolve_round(launched_cmds_);
  }
  launched_cmds_.assign(next.begin(), next.end());
  if (!next.empty()) std::swap(launched_, spare_);
  if (pending_->changes() == 0 && !(in_flight_->active && in_flight_->changes.changes() > 0)) hold_.reset();
}

// Sends the pending changes with the searches of `searching` (null: none) as one batch
// (Table::submit: the GPU works on it until finish_in_flight). With nothing to send, the
// commands waiting for the changes are final at once.
void KvStore::send(const Round* searching) {
  InFlight& f = *in_flight_;
  if (!searching && pending_->empty()) return;  // nothing to send, nobody waiting (every round not pipelined)
  std::swap(f.changes, *pending_);
  pending_->clear();
  const size_t writes = f.changes.changes(), searches = searching ? searching->sigs.size() : 0;
  if (writes + searches == 0) {
    finish_pending(f.changes, nullptr);
    return;
  }
  const uint64_t start = TickClock::now();
  f.ops.assign(f.changes.ops.begin(), f.changes.ops.end());
  f.keys.assign(f.changes.keys.begin(), f.changes.keys.end());
  f.values.assign(f.changes.values.begin(), f.changes.values.end());
  f.answered = 0;
  if (searches) {
    if (!answer_repeated_searches_ || !writes || !answer_by_changes(*searching))
      f.keys.insert(f.keys.end(), searching->sigs.begin(), searching->sigs.end());
    f.ops.insert(f.ops.end(), searches - f.answered, Op::kSearch);
    f.values.resize(f.keys.size(), 0);
  }
  const size_t n = f.keys.size();
  f.results.assign(n, 0);
  f.status.resize(n);
  Batch b;
  b.size = n;
  b.key_width = sizeof(Signature);
  b.value_width = sizeof(Location);
  b.op = Op::kSearch;
  b.ops = writes ? f.ops.data() : nullptr;
  b.keys = f.keys.data();
  b.values = writes ? f.values.data() : nullptr;
  b.values_out = n > writes ? f.results.data() : nullptr;
  b.status = f.status.data();
  f.searches = searches;
  f.active = true;
  f.event = index_->table.submit(b);
  f.submit_ns = elapsed_ns(start);
}

// send(): the searches of `searching` that the in-flight batch's changes answer (InFlight::
// answered_by); when there are some, the others' keys go to the batch. Returns whether there were.
// Out of line: inlined into send(), this code cost the CPU engine's rounds of one command 10% even
// where it never ran (kv_round_bench, 64 keys, half sets; code layout).
[[gnu::noinline]] bool KvStore::answer_by_changes(const Round& searching) {
  InFlight& f = *in_flight_;
  for (uint32_t i = 0; i < f.changes.changes(); ++i)
    if (const uint32_t slot = searching.find(f.changes.keys[i]); slot != Round::kNoSlot) {
      if (f.answered++ == 0) f.answered_by.assign(searching.sigs.size(), InFlight::kNoChange);
      f.answered_by[slot] = i;
    }
  if (f.answered == 0) return false;
  f.search_slots.clear();
  for (uint32_t slot = 0; slot < searching.sigs.size(); ++slot)
    if (f.answered_by[slot] == InFlight::kNoChange) {
      f.search_slots.push_back(slot);
      f.keys.push_back(searching.sigs[slot]);
    }
  return true;
}

// Waits for the batch on its way: the launched round's searches come back, and the changes it
// wrote are final (their waiting commands settle, the chunks they unlinked are freed).
void KvStore::finish_in_flight() {
  InFlight& f = *in_flight_;
  if (!f.active) return;
  // The CPU engine (and a sharded table) runs the batch in submit(): the wait is nothing, and two
  // clock reads a round fewer (~9 ns each on the 2-core VM).
  const uint64_t start = index_runs_in_submit_ ? 0 : TickClock::now();
  f.active = false;
  f.event.wait();
  f.event = {};
  const size_t writes = f.changes.changes();
  if (f.searches) {
    Round& r = *launched_;
    r.found.assign(f.searches, 0);
    const size_t sent = f.searches - f.answered;
    for (size_t i = 0; i < sent; ++i)
      if (f.status[writes + i] == OpStatus::kOk) {
        const size_t slot = f.answered ? f.search_slots[i] : i;
        r.found[slot] = f.results[writes + i];
        prefetch_item(r.found[slot]);
      }
    for (uint32_t slot = 0; f.answered && slot < f.searches; ++slot) {
      const uint32_t c = f.answered_by[slot];
      if (c == InFlight::kNoChange) continue;
      if (f.status[c] == OpStatus::kOk || f.status[c] == OpStatus::kNotFound) {
        r.found[slot] = f.changes.ops[c] == Op::kUpsert ? f.changes.values[c] : 0;
        prefetch_item(r.found[slot]);
      } else {  // the change failed and the index kept its entry: ask it (rare)
        r.found[slot] = search_now(r.sigs[slot]);
      }
    }
  }
  counters_.search_ops += f.searches - f.answered;
  counters_.write_ops += writes;
  last_index_ns_ = f.submit_ns + (index_runs_in_submit_ ? 0 : elapsed_ns(start));
  counters_.index_ns += last_index_ns_;
  finish_pending(f.changes, f.status.data());
}

// Resolves round_ (its commands `cmds`): what the index held for its signatures when its searches
// ran, with the changes on their way (in_flight_, which those searches did not see) on top. A
// command is settled (final) unless it touched a signature whose head this round changed (it
// waits for this round's changes) or one whose head came from the changes on their way (it waits
// for their batch).
void KvStore::resolve_round(std::span<KvCommand* const> cmds) {
  const uint64_t start = TickClock::now();
  // A cache takes no snapshots (the constructor refuses them): no gate to hold, two mutex round
  // trips a round fewer.
  if (!hold_ && config_.mode == Mode::kStore) hold_.emplace(index_->table.hold_snapshots());
  Round& r = *round_;
  apply_bumps();
  r.dirty.assign(r.sigs.size(), 0);
  r.overlaid.assign(r.sigs.size(), UINT32_MAX);
  Pending& sent = in_flight_->changes;
  if (in_flight_->active) {
    for (size_t i = 0; i < sent.changes(); ++i) {
      const uint32_t slot = r.find(sent.keys[i]);
      if (slot == Round::kNoSlot) continue;
      r.found[slot] = sent.ops[i] == Op::kErase ? 0 : sent.values[i];
      r.overlaid[slot] = sent.slots[i];
      prefetch_item(r.found[slot]);
    }
  }
  r.head = r.found;
  // Cache mode: a hit whose LRU move is due (apply_bumps) and a store that unlinks the item it
  // replaces each store to the item's two LRU neighbours, random lines; a locked add waits for
  // those stores. Their lines are fetched for writing first, all at once (kv_round_bench, 2-core
  // VM, medians of 6 pairs: rounds of 1, 2, 16: -7%, -8%, -12%); not for a hit that will not move.
  if (config_.mode == Mode::kCache)
    for (size_t i = 0; i < cmds.size(); ++i) {
      const uint32_t slot = r.cmd_slot[i];
      if (slot == UINT32_MAX || !r.head[slot]) continue;
      const ItemHeader* h = items_->item(r.head[slot]);
      if (cmds[i]->op == KvOp::kGet && !lru_move_due(h)) continue;
      if (h->lru_prev) __builtin_prefetch(items_->item(h->lru_prev), 1);
      if (h->lru_next) __builtin_prefetch(items_->item(h->lru_next), 1);
    }
  for (size_t i = 0; i < cmds.size(); ++i) {
    const uint32_t slot = r.cmd_slot[i];
    resolve(*cmds[i], slot);
    cmds[i]->settled = slot == UINT32_MAX || (!r.dirty[slot] && r.overlaid[slot] == UINT32_MAX);
    if (cmds[i]->settled) continue;
    if (r.dirty[slot]) pending_->waiting.emplace_back(cmds[i], slot);
    else sent.waiting.emplace_back(cmds[i], r.overlaid[slot]);
  }
  stage_pending();
  counters_.rounds++;
  resolved_++;
  last_resolve_ns_ = elapsed_ns(start);
  counters_.resolve_ns += last_resolve_ns_;
}

// The round's overlay as index changes, and the chunks that wait for them (its commands that wait
// for them are already in pending_->waiting).
void KvStore::stage_pending() {
  const Round& r = *round_;
  Pending& p = *pending_;
  for (uint32_t s = 0; s < r.sigs.size(); ++s) {
    if (!r.dirty[s] || r.head[s] == r.found[s]) continue;
    p.ops.push_back(r.head[s] == 0 ? Op::kErase : Op::kUpsert);
    p.keys.push_back(r.sigs[s]);
    p.values.push_back(r.head[s]);
    p.slots.push_back(s);
  }
  p.deferred.insert(p.deferred.end(), deferred_.begin(), deferred_.end());
  deferred_.clear();
  p.round_slots = static_cast<uint32_t>(r.sigs.size());
}

// After the batch that wrote a round's changes (status: theirs, first; null: there were none):
// failed ones are reported, the waiting commands settle, the chunks the round unlinked are freed.
void KvStore::finish_pending(Pending& p, const OpStatus* status) {
  std::vector<uint8_t> failed;
  for (size_t i = 0; i < p.changes(); ++i) {
    const OpStatus st = status[i];
    if (st == OpStatus::kOk || st == OpStatus::kNotFound) continue;
    if (failed.empty()) failed.assign(p.round_slots, 0);
    failed[p.slots[i]] = 1;
    std::fprintf(stderr, "gphash-server: index write failed: %s\n", to_string(st));
  }
  for (auto [cmd, slot] : p.waiting) {
    // The index kept its old entry for these signatures: the round's writes to them are not
    // durable. Report them as failed.
    if (!failed.empty() && slot != UINT32_MAX && failed[slot] && cmd->op != KvOp::kGet) cmd->status = KvStatus::kOutOfMemory;
    cmd->settled = true;
  }
  if (failed.empty()) {
    for (Location loc : p.deferred) {
      if (items_->item(loc)->refs.load(std::memory_order_acquire) == 0) items_->release_chunk(loc);
      else zombies_.push_back(loc);
    }
  }
  // With a failure, every item the round unlinked is kept (a restart's recovery frees what is
  // unreachable), so nothing the index still reaches is reused.
  p.clear();
}

}  // namespace gphash::kv

namespace gphash::kv {

void KvStore::fill_item(Location loc, std::string_view key, std::string_view a, std::string_view b,
                        uint32_t flags, uint32_t exptime, uint64_t cas) {
  ItemHeader* h = items_->item(loc);
  h->exptime = exptime;
  h->client_flags = flags;
  h->value_len = static_cast<uint32_t>(a.size() + b.size());
  h->stored_time = now_;
  h->last_access = now_;
  h->key_len = static_cast<uint8_t>(key.size());
  h->fetched = 0;
  h->token_sent = 0;
  h->lru_moved = static_cast<uint16_t>(now_);  // linked at its LRU's head
  h->lru_hit = 0;
  h->lru_prev = h->lru_next = 0;
  char* p = reinterpret_cast<char*>(h + 1);
  std::memcpy(p, key.data(), key.size());
  if (!a.empty()) std::memcpy(p + key.size(), a.data(), a.size());
  if (!b.empty()) std::memcpy(p + key.size() + a.size(), b.data(), b.size());
  h->cas = cas;
}

// Writes a new item holding a + b in place of `old` (or as a new key): the common end of every
// command that stores. Returns kOk, kTooLarge or kOutOfMemory (nothing changed then).
KvStatus KvStore::store_item(KvCommand& c, uint32_t slot, Found old, std::string_view a, std::string_view b,
                             uint32_t flags, uint32_t exptime) {
  const uint8_t cls = items_->class_for(c.key.size(), a.size() + b.size());
  if (cls == 0) return KvStatus::kTooLarge;
  const Location loc = allocate(cls, old.loc);
  if (loc == 0) {
    counters_.out_of_memory++;
    return KvStatus::kOutOfMemory;
  }
  if (old.loc) old.pred = predecessor(slot, old.loc);  // an eviction may have changed the chain
  const uint64_t cas = c.explicit_cas ? c.explicit_cas : std::exchange(next_cas_, next_cas_ + config_.cas_stride);
  if (c.explicit_cas >= next_cas_) next_cas_ = cas_after(c.explicit_cas);
  fill_item(loc, c.key, a, b, flags, exptime, cas);
  link_new(slot, loc, old);
  c.cas = cas;
  c.flags = flags;
  c.value_len = static_cast<uint32_t>(a.size() + b.size());
  c.ttl = ttl_of(items_->item(loc));
  return KvStatus::kOk;
}

void KvStore::resolve(KvCommand& c, uint32_t slot) {
  switch (c.op) {
    case KvOp::kGet: return resolve_get(c, slot);
    case KvOp::kStore: return resolve_store(c, slot);
    case KvOp::kDelete: return resolve_delete(c, slot);
    case KvOp::kArith: return resolve_arith(c, slot);
    case KvOp::kTouch: return resolve_touch(c, slot);
    case KvOp::kFlushAll: return flush_all(c);
  }
}

void KvStore::resolve_get(KvCommand& c, uint32_t slot) {
  counters_.cmd_get++;
  if (c.set_exptime) counters_.cmd_touch++;
  const Found f = find(slot, c.key);
  if (!f.loc) {
    counters_.get_misses++;
    if (c.set_exptime) counters_.touch_misses++;
    c.status = KvStatus::kNotFound;
    if (c.vivify) {
      // mg N: create an empty item so that one client (this one) recomputes the value.
      const KvStatus st = store_item(c, slot, {}, {}, {}, 0, absolute_exptime(c.vivify_exptime));
      if (st == KvStatus::kOk) {
        c.vivified = true;
        items_->item(round_->head[slot])->token_sent = 1;  // a new key is linked at its chain's head
      }
    }
    return;
  }
  get_hit(c, f.loc);
}

// A get's hit on the live item at `loc`: its results, and the hold (want_value) and the access.
void KvStore::get_hit(KvCommand& c, Location loc) {
  ItemHeader* h = items_->item(loc);
  counters_.get_hits++;
  if (c.set_exptime) {
    counters_.touch_hits++;
    h->exptime = absolute_exptime(c.exptime);
    items_->persist(&h->exptime, sizeof h->exptime);
  }
  c.status = KvStatus::kOk;
  c.cas = h->cas;
  c.flags = h->client_flags;
  c.value_len = h->value_len;
  c.ttl = ttl_of(h);
  c.hit_before = h->fetched != 0;
  c.token_sent = h->token_sent != 0;
  c.last_access_ago = now_ >= h->last_access ? now_ - h->last_access : 0;
  if (c.bump) {
    h->fetched = 1;
    h->last_access = now_;
    note_access(h, loc);
  }
  if (c.want_value) {
    h->refs.fetch_add(1, std::memory_order_relaxed);
    c.item = loc;
  }
}

void KvStore::resolve_store(KvCommand& c, uint32_t slot) {
  counters_.cmd_set++;
  const Found f = find(slot, c.key);
  const ItemHeader* h = f.loc ? items_->item(f.loc) : nullptr;
  if (c.has_compare_cas) {
    if (!h) {
      counters_.cas_misses++;
      c.status = KvStatus::kNotFound;
      return;
    }
    if (h->cas != c.compare_cas) {
      counters_.cas_badval++;
      c.status = KvStatus::kExists;
      return;
    }
    counters_.cas_hits++;
  }
  KvStatus st = KvStatus::kNotStored;
  switch (c.mode) {
    case StoreMode::kSet:
      st = store_item(c, slot, f, c.value, {}, c.client_flags, absolute_exptime(c.exptime));
      if (st == KvStatus::kOutOfMemory && h && config_.mode == Mode::kCache && !c.has_compare_cas) {
        // As memcached: a failed set must not leave the old value to be served. (Store mode keeps
        // it: the client was told the write failed, and a store loses nothing it acknowledged.)
        unlink(slot, {f.loc, predecessor(slot, f.loc)});
      }
      break;
    case StoreMode::kAdd:
      if (h) {
        note_access(items_->item(f.loc), f.loc);
        st = KvStatus::kNotStored;
      } else {
        st = store_item(c, slot, f, c.value, {}, c.client_flags, absolute_exptime(c.exptime));
      }
      break;
    case StoreMode::kReplace:
      st = h ? store_item(c, slot, f, c.value, {}, c.client_flags, absolute_exptime(c.exptime)) : KvStatus::kNotStored;
      break;
    case StoreMode::kAppend:
    case StoreMode::kPrepend: {
      if (!h) {
        st = KvStatus::kNotStored;
        break;
      }
      const std::string_view old(items_->value(f.loc), h->value_len);
      // The old item keeps its flags and expiry, as in memcached.
      st = c.mode == StoreMode::kAppend ? store_item(c, slot, f, old, c.value, h->client_flags, h->exptime)
                                        : store_item(c, slot, f, c.value, old, h->client_flags, h->exptime);
      break;
    }
  }
  c.status = st;
}

void KvStore::resolve_delete(KvCommand& c, uint32_t slot) {
  const Found f = find(slot, c.key);
  if (!f.loc) {
    counters_.delete_misses++;
    c.status = KvStatus::kNotFound;
    return;
  }
  if (c.has_compare_cas && items_->item(f.loc)->cas != c.compare_cas) {
    c.status = KvStatus::kExists;
    return;
  }
  counters_.delete_hits++;
  unlink(slot, f);
  c.status = KvStatus::kOk;
}

void KvStore::resolve_arith(KvCommand& c, uint32_t slot) {
  const Found f = find(slot, c.key);
  auto& hits = c.decrement ? counters_.decr_hits : counters_.incr_hits;
  auto& misses = c.decrement ? counters_.decr_misses : counters_.incr_misses;
  if (!f.loc) {
    misses++;
    c.status = KvStatus::kNotFound;
    if (c.vivify) {
      // ma N: create the counter with its initial value (J).
      const std::string text = std::to_string(c.initial);
      if (store_item(c, slot, {}, text, {}, 0, absolute_exptime(c.vivify_exptime)) == KvStatus::kOk) {
        c.status = KvStatus::kOk;
        c.number = c.initial;
        c.vivified = true;
      }
    }
    return;
  }
  const ItemHeader* h = items_->item(f.loc);
  if (c.has_compare_cas && h->cas != c.compare_cas) {
    c.status = KvStatus::kExists;
    return;
  }
  const std::string_view old(items_->value(f.loc), h->value_len);
  uint64_t value = 0;
  if (!parse_counter(old, value)) {
    c.status = KvStatus::kNonNumeric;
    return;
  }
  if (c.decrement) value = c.delta > value ? 0 : value - c.delta;
  else value += c.delta;  // wraps at 2^64, as memcached
  hits++;
  std::string text = std::to_string(value);
  // memcached rewrites a counter in place when the new number is shorter, padding it with
  // spaces to the old length; clients see that padding in later gets, so keep it.
  if (text.size() < old.size()) text.append(old.size() - text.size(), ' ');
  const uint32_t exptime = c.set_exptime ? absolute_exptime(c.exptime) : h->exptime;
  c.status = store_item(c, slot, f, text, {}, h->client_flags, exptime);
  c.number = value;
}

void KvStore::resolve_touch(KvCommand& c, uint32_t slot) {
  counters_.cmd_touch++;
  const Found f = find(slot, c.key);
  if (!f.loc) {
    counters_.touch_misses++;
    c.status = KvStatus::kNotFound;
    return;
  }
  ItemHeader* h = items_->item(f.loc);
  h->exptime = absolute_exptime(c.exptime);
  items_->persist(&h->exptime, sizeof h->exptime);
  counters_.touch_hits++;
  c.status = KvStatus::kOk;
}

// flush_all invalidates by watermark and frees nothing, as memcached: items with a cas at or
// below the last one issued (no delay), or stored at or before now + delay once that time comes.
void KvStore::flush_all(KvCommand& c) {
  counters_.cmd_flush++;
  if (c.flush_delay == 0) items_->set_flush(next_cas_ - 1, items_->oldest_live_time());
  else items_->set_flush(items_->oldest_live_cas(), now_ + c.flush_delay - 1);
  c.status = KvStatus::kOk;
}

}  // namespace gphash::kv
