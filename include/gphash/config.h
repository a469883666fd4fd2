// Configuration of a table (fixed when its pool is created) and of one opening of it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gphash/snapshot.h"

namespace gphash {

// Levels (L), hash functions (H) and slots per bucket (S), with L*H*S = 32. Supported:
// 2L-2H-8S (default), 4L-2H-4S and 1L-4H-8S.
struct TableShape {
  uint8_t levels = 2;
  uint8_t hashes = 2;
  uint8_t slots = 8;
  friend constexpr bool operator==(TableShape, TableShape) = default;
};
std::string to_string(TableShape shape);           // "2L-2H-8S"
TableShape parse_shape(const std::string& text);   // inverse; throws Error(kInvalidArgument)

// The persistent index a pool holds (fixed when it is created).
enum class IndexKind {
  kGphash,  // GPHash: multi-level table for GPU and CPU engines (the default)
  // HMEH: extendible hashing for a CPU with persistent memory (flat directory in DRAM, radix-tree
  // directory in the pool, Cross-KV slots). CPU only; 8- and 16-byte keys; it reserves the 8-byte
  // keys 0xFFFFFFFFFFFFFFFF, ...FFFE and ...FFFD (kReservedKey).
  kHmeh,
};

// The shape of an HMEH index (TableConfig::hmeh; ignored for GPHash).
struct HmehConfig {
  uint32_t segment_bytes = 16384;  // a power of two, 4 KiB .. 1 MiB
  uint32_t probe_buckets = 4;      // linear probing over this many 64-byte buckets (1 .. 16)
  uint32_t stash_buckets = 4;      // stash buckets per segment (0 .. 16)
};

struct TableConfig {
  uint32_t key_width = 8;    // 8, 16 or 32 bytes, fixed per pool
  uint32_t value_width = 8;  // 1..65536 bytes; up to 8 inline in the slot, larger in the value heap
  TableShape shape{};
  // Items the table should hold before its first resize (it grows on demand either way).
  uint64_t capacity = uint64_t{1} << 20;
  // Seed of the hash functions; random when absent.
  std::optional<uint64_t> hash_seed;
  // Store a checksum with every value in the heap (values over 8 bytes): searches verify it and
  // report kCorruptValue instead of returning damaged bytes, and `gphash check` verifies every
  // cell. Costs 8 bytes per cell and a checksum per value written and read.
  bool value_checksums = false;
  IndexKind index = IndexKind::kGphash;
  HmehConfig hmeh{};  // shape of an HMEH index (index = kHmeh); shape above is GPHash's
};

// The most worker threads an engine or check may be given (more is refused as invalid).
inline constexpr int kMaxThreads = 1024;

enum class EngineKind {
  kCpu,  // multi-threaded CPU engine: any pool kind, no GPU needed
  kGpu,  // GPU engine: needs a GPU and a pool it can map (shm, hugetlbfs, memory)
};

// Where the GPU engine keeps the table while the pool is open.
enum class Placement {
  kHostMapped,  // in the pool, operated on in place over PCIe: persistent (the GPM model)
  kGpuMemory,   // a copy in GPU memory: fastest, volatile until saved back to the pool
};

// How the GPU engine runs operations; kWarp is the design, the others exist to measure it.
enum class GpuKernels {
  kWarp,        // warp-cooperative, candidates read through the tag mirror in GPU memory
  kWarpDirect,  // warp-cooperative, candidates read from the table's slots (no mirror)
  kThread,      // one thread per operation, candidates read from the table (the naive port)
};

// BktCache (GPHash section 3.4): GPU-memory copies of the hot buckets of a host-mapped table (GPU
// engine, warp kernels), with their heap values, chosen in periodic loading phases from sampled
// access statistics. The pool stays the one truth: writes go to it first, then to the copy.
enum class CachePolicy { kOff, kLfu, kLru, kRandom };
struct CacheOptions {
  // Off by default because on the H100 it does not pay yet (README, "BktCache"). The stale reads
  // once seen with it on were the GPU slow path's, with or without the cache, and are fixed.
  CachePolicy policy = CachePolicy::kOff;
  // Of the table's buckets, when there is no budget. 1 makes the cache complete: a GPU-memory copy
  // of every bucket and its values, filled once, kept current by every write.
  double fraction = 0.2;
  // A budget for all of the cache's GPU memory (0: none). With one, the cache sizes itself: complete
  // if that fits the budget, else as many buckets as the budget holds (the fraction is not used).
  uint64_t gpu_bytes = 0;
  uint64_t reload_operations = uint64_t{1} << 21;  // operations between loading phases
  // Also cache the heap values of cached buckets (beyond the paper, whose hits still read a heap
  // value from host memory): a hit on a hot key then touches no host memory.
  bool values = true;
};

struct OpenOptions {
  EngineKind engine = EngineKind::kCpu;
  Placement placement = Placement::kHostMapped;
  GpuKernels gpu_kernels = GpuKernels::kWarp;
  int threads = 0;              // CPU engine worker threads; 0 = all hardware threads, at most kMaxThreads
  bool read_only = false;       // searches only; the pool is opened shared
  bool auto_resize = true;      // grow the table when an insert finds no free slot
  // Up to this load factor an insert that finds no free slot first tries to move one item aside
  // (displacement); past it, the table resizes at once. Displacement is exclusive work, so this
  // bounds how much of it a nearly full table does. The CPU engine also resizes before a batch
  // whose inserts and upserts would take the table past it (an upsert of a present key adds
  // nothing, so a large batch of them may grow a table that was within the batch's size of it).
  // 0.9, not 0.95: past 0.9 many inserts find all their candidates full, and displacing for them
  // runs one at a time while the other threads wait (16-core Xeon, a 16-thread load of 16 M keys:
  // 6.2 K displacements -> under 20, inserts 35-37 -> 39-40 M/s, the same call;
  // bench/results/2026-11-29-load-factor). The GPHash paper's tables resize at the first failed
  // insert, at up to 92%.
  double max_load_factor = 0.9;
  uint64_t max_pool_bytes = 0;  // 0: limited by the file system only
  // CPU engine: keep a copy of every slot's one-byte tag in DRAM (one byte per slot, rebuilt at
  // open), so a lookup reads the pool only at slots whose tag matches and a miss not at all.
  bool tag_mirror = true;
  // create: file space allocated for the pool up front (as a PMDK pool's size): the table's
  // resizes and heap growth up to it take memory the file has, which is faster (a 16-thread load
  // of 16 M keys into a growing table spent most of its resize time faulting new pages in), and a
  // file system too small for it is an error at create. The pool's size still grows as it needs.
  // A sharded table reserves this much for each shard's pool.
  uint64_t reserve_pool_bytes = 0;
  bool replace = false;         // create: replace an existing pool at the path (refused while it is open)
  uint32_t pool_file_mode = 0600;  // create: permissions of the pool file (exactly these, whatever the umask)
  // Use cache-line flushes as the persist barrier even on shared memory: exercises the code
  // path that persistent memory (device-DAX, CXL) needs.
  bool force_flush = false;
  // Snapshots to a file, for power-loss durability (gphash/snapshot.h): automatic ones, and the
  // file an open restores a missing pool from.
  SnapshotOptions snapshots;
  // A sharded table (src/table/shard_set.h): one pool per entry, NAME.shard0 .. NAME.shard<n-1>
  // ("mem:": anonymous memory each), keys routed to shards by a hash of their own. Entry k is the
  // GPU (CUDA ordinal) that runs shard k with the GPU engine; a GPU may appear several times
  // (several shards on one GPU, as the tests do); the CPU engine uses only the count and divides
  // `threads` among the shards. Empty: one pool. The count is fixed at create: open with as many
  // entries (the GPUs may differ). Batches must be in host memory; device sessions need one table.
  std::vector<int> shards;
  CacheOptions cache;
};

}  // namespace gphash
