// SlabList: our stand-in for the GPHash paper's "SlabHash-GPM" peer, a list-based GPU hash index
// made persistent with logging, built on libGPM (tests/slab_list_gpu_test.cpp,
// bench/gpm_index_bench.cpp). SlabHash's design: B buckets, each the head of a linked list of
// 128-byte slabs that a whole warp searches at once; here the slabs live in a GPM pool region
// (host memory the GPU maps) and every mutation is a transaction on a libGPM log.
//
// Layout (three regions of the pool, NAME.meta, NAME.slabs, NAME.values):
//   meta    word 0 magic, 1 buckets, 2 slabs (all of them), 3 value width V; word 16 (its own
//           128-byte line) the allocation counter: the next slab to hand out. Slabs 0..B-1 are
//           the buckets' head slabs (never allocated), so the counter starts at B.
//   slabs   slab s = 16 words at word 16 s: words 0..14 keys (0 = empty), word 15 the next slab of
//           the chain (0 = none: slab 0 is a head, never anyone's next).
//   values  V bytes per key slot, parallel to the slabs: slot (s, j) owns the V / 8 words at word
//           (15 s + j) V / 8.
// Invariants a crash must not break: a key is in at most one slot of its bucket's chain; every
// slab below the counter is on exactly one chain; every slab at or above it is all zero. A value
// matters only while its slot's key word is nonzero.
//
// One warp per operation. Lanes 0..15 read a slab's 16 words in one 128-byte access and ballot
// for the key (and for an empty slot); lane 15's word is the next pointer. A warp that writes
// holds its bucket's lock (a word per bucket in GPU memory: SlabHash's CAS on slab words would
// need system-scope atomics on host memory, which PCIe GPUs do not have), so writes to one bucket
// run one at a time and those to different buckets touch disjoint words, as libGPM requires of
// transactions in flight together. The allocation counter is shared by all buckets: a warp that
// appends a slab also takes the allocation lock (always after its bucket lock, so no cycle).
// GETs take no lock: a batch's gets, sets and erases are separate launches, one after another.
//
// Transactions (lane 0 commits, slot = the warp's index in the launch; undo or redo, HCL or
// conventional, HCL undo by default):
//   update of a present key   the V / 8 value words (the old ones logged, so an undone update
//                             leaves the old value whole);
//   insert into an empty slot the value words are written and persisted first, unlogged (the slot
//                             is empty, so nothing can see them), then the key word is the
//                             transaction;
//   insert with no empty slot under the allocation lock: value words of slot 0 of slab c =
//                             counter, unlogged (slab c is unreachable), then one transaction of
//                             {counter = c + 1, tail.next = c, slab c key 0 = key}: undone, it
//                             leaves slab c all zero again and the counter at c;
//   erase                     the key word = 0 (slabs are never freed; the slot is reused).
// A crash at any point therefore recovers (libGPM's recovery at GpmPool::open, then this class
// resets its GPU-memory state: locks, and the item count, recounted from the slabs) to the
// state before or after each transaction in flight.
//
// Batches: within one set() call, duplicate keys are applied one at a time in some order (never a
// duplicate entry; the value left is one of theirs, not necessarily the last). Callers that need
// batch order combine the batch on the host first (BatchPlan below, as the benchmark does).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "format/hd.h"
#include "gpm/device.h"
#include "gpm/examples/workloads.h"
#include "gpm/gpm.h"

namespace gphash::gpm::workloads {

struct SlabListGeometry {
  uint64_t buckets = 0;
  uint64_t slabs = 0;  // all slabs: the buckets' heads and the overflow pool
  uint32_t value_width = 8;
};

class SlabList {
 public:
  static constexpr uint32_t kSlabWords = 16;    // 128 bytes
  static constexpr uint32_t kKeysPerSlab = 15;  // words 0..14
  static constexpr uint32_t kNextWord = 15;
  static constexpr uint32_t kMaxValueWidth = 128;
  static constexpr uint32_t kMaxTxWrites = 16;  // an update of a 128-byte value
  static constexpr uint64_t kMagic = 0x3154534C42414C53ull;  // "SLABLST1"
  static constexpr uint64_t kCounterWord = 16;  // in the meta region
  // Buckets sized so the head slabs are this full at the capacity asked for; overflow slabs: half
  // as many again (Geometry::for_capacity).
  static constexpr double kTargetFill = 0.6;
  // 8 warps per block, 4 blocks per SM of an H100 (132 SMs): 4224 warps, half the SMs' warp
  // slots. A warp per operation needs many of them to hide the PCIe latency of its slab and log
  // accesses. Threads per block: a multiple of 32 up to 256 (the kernels' launch bounds).
  static constexpr Launch kDefaultLaunch{528, 256};

  // Per-operation status (set and erase); get reports a found flag (1 or 0).
  enum Status : uint8_t { kOk = 0, kNotFound = 1, kNoRoom = 2, kBadKey = 3 };

  using Geometry = SlabListGeometry;
  // buckets = ceil(capacity / (15 * kTargetFill)), slabs = buckets + max(buckets / 2, 64).
  static Geometry geometry_for(uint64_t capacity, uint32_t value_width);

  // create: makes the regions NAME.meta, NAME.slabs, NAME.values and the log NAME.log (room for
  // launches of up to max_batch operations); otherwise opens them (GpmPool::open has recovered the
  // log) and ignores `geometry` and `log`. NAME has at most 24 bytes.
  SlabList(GpmPool& gp, DeviceGpm& dev, const std::string& name, bool create, const Geometry& geometry = {},
           LogChoice log = {}, uint64_t max_batch = uint64_t{1} << 20, Launch launch = kDefaultLaunch);
  ~SlabList();
  SlabList(const SlabList&) = delete;
  SlabList& operator=(const SlabList&) = delete;

  // Device arrays: keys (nonzero 64-bit words), values (V / 8 words per key), statuses (one byte
  // per key, or null). All three calls are durable/complete when they return, and must not
  // overlap with each other (one stream).
  // SET (insert or assign). Returns how many did not succeed (kNoRoom: the slab pool is used up;
  // kBadKey: key 0).
  uint64_t set(const uint64_t* d_keys, const uint64_t* d_values, uint64_t n, uint8_t* d_status, cudaStream_t stream);
  // GET: d_found[i] = 1 and the value into d_values_out[i * V / 8 ...] when present, else 0 (the
  // value words untouched).
  void get(const uint64_t* d_keys, uint64_t* d_values_out, uint8_t* d_found, uint64_t n, cudaStream_t stream);
  // ERASE: kOk when the key was there, kNotFound otherwise. Returns how many were erased.
  uint64_t erase(const uint64_t* d_keys, uint64_t n, uint8_t* d_status, cudaStream_t stream);

  const Geometry& geometry() const { return geometry_; }
  uint64_t size() const;           // keys in the table (a count kept in GPU memory)
  uint64_t slabs_in_use() const;   // the allocation counter
  double load_factor() const;      // size() / (15 * slabs_in_use())

  // The pool side, for verifiers and tests (host addresses == device addresses).
  GPHASH_HD static uint64_t bucket_of(uint64_t key, uint64_t buckets) {
    uint64_t h = key * 0xD6E8FEB86659FD93ull;
    h ^= h >> 32;
    h *= 0xD6E8FEB86659FD93ull;
    h ^= h >> 32;
    return h % buckets;
  }
  uint64_t* slab_words() const { return slabs_; }
  uint64_t* value_words() const { return values_; }
  uint64_t* counter_word() const { return meta_ + kCounterWord; }
  const LogInfo& log_info() const { return log_; }
  // The slot holding `key`, walking its chain on the CPU; false when absent.
  bool host_find(uint64_t key, uint64_t* slab, uint32_t* slot) const;
  // Nonzero key words in the slabs below the counter (the count open() starts from).
  uint64_t host_count() const;

 private:
  void finish(cudaStream_t stream, const char* what);

  GpmPool& gp_;
  DeviceGpm& dev_;
  Launch launch_;
  Geometry geometry_;
  LogInfo log_;
  uint64_t chunk_ = 0;  // most operations per launch
  uint64_t* meta_ = nullptr;    // pool
  uint64_t* slabs_ = nullptr;   // pool
  uint64_t* values_ = nullptr;  // pool
  unsigned* locks_ = nullptr;   // GPU memory: buckets + 1 (the last: the allocation lock)
  unsigned long long* counters_ = nullptr;  // GPU memory: [0] items, [1] failed, [2] errors, [3] erased
};

// Host-side combining of a batch of gets, sets and erases on one key space, for stores whose
// calls give no order among operations on one key (SlabList's set applies duplicates in some
// order, gpKVS's set needs distinct keys). The result is as if the operations ran one at a time
// in batch order:
//   - a get with no earlier write of its key in the batch goes to the table (`gets`); a later one
//     is answered from the batch: its key's latest earlier write (a SET's value, or absent);
//   - only the last write of each key goes to the table (`sets` or `erases`: distinct keys), after
//     the gets; the earlier ones are superseded;
//   - an erase reports whether the key existed just before it: from the batch when an earlier
//     write of its key is there, else from the table (the final erase's own result; a superseded
//     one's key is looked up with the gets).
// A superseded SET reports success.
class BatchPlan {
 public:
  enum Kind : uint8_t { kGet, kSet, kErase };
  void build(const Kind* kinds, const uint64_t* keys, size_t n);

  // Op indices whose table calls run: gets first, then sets and erases (in any order).
  std::vector<uint64_t> gets, sets, erases;

  // After the table calls. table_found: per entry of gets; set_ok, erase_ok: per entry of sets
  // and erases.
  // A get's result: found, and the op whose SET value it returns (-1: the table's, at
  // gets[table_position(i)]).
  bool get_found(size_t i, const uint8_t* table_found) const {
    return prior_[i] >= 0 ? kinds_[prior_[i]] == kSet : table_found[pos_[i]] != 0;
  }
  int64_t value_source(size_t i) const { return prior_[i]; }
  int64_t table_position(size_t i) const { return pos_[i]; }
  // A write's result: SET succeeded, ERASE found its key.
  bool write_ok(size_t i, const uint8_t* table_found, const uint8_t* set_ok, const uint8_t* erase_ok) const {
    if (kinds_[i] == kSet) return final_[i] ? set_ok[pos_[i]] != 0 : true;
    if (prior_[i] >= 0) return kinds_[prior_[i]] == kSet;
    return final_[i] ? erase_ok[pos_[i]] != 0 : table_found[pos_[i]] != 0;
  }

 private:
  std::vector<Kind> kinds_;
  std::vector<int64_t> prior_;  // latest earlier write (SET or ERASE) of the op's key, or -1
  std::vector<int64_t> pos_;    // place in gets / sets / erases, or -1
  std::vector<uint8_t> final_;  // the last write of its key
  std::unordered_map<uint64_t, int64_t> last_;  // key -> its latest write so far
};

}  // namespace gphash::gpm::workloads
