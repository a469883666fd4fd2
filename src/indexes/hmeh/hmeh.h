// HMEH (MSST'20), the second persistent index of a pool: extendible hashing for a CPU with
// persistent memory. What the rest of the project uses of it: create an index in a fresh pool,
// open an engine on a pool that holds one, and check one. See hmeh_engine.h for how it works.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "engines/common/checker.h"
#include "engines/engine.h"
#include "gphash/config.h"
#include "pool/pool.h"

namespace gphash::hmeh {

// How an engine runs; Table maps OpenOptions onto it. The last two exist for measurements and
// tests of the design, not for users.
struct EngineOptions {
  int threads = 0;           // 0: all hardware threads
  bool auto_resize = true;   // split full segments; false: an insert that finds no room fails (kTableFull)
  // Cross-KV (one persist barrier per insert, relying on x86's in-order write-back of one cache
  // line); false: the plain protocol, value and key persisted before the state word (two).
  bool cross_kv = true;
  // Which threads run which keys: by hash prefix (each thread owns a range of segments, the
  // default) or by hash bits the directory and buckets do not use (threads share every segment
  // and bucket: what the concurrency tests need).
  bool shard_by_prefix = true;
  // The factor analysis's baseline (bench/hmeh_bench.cpp): write back every change of the flat
  // directory with the pool's persist barrier, the cost of a directory that lives in persistent
  // memory, as plain extendible hashing keeps it.
  bool persist_flat_directory = false;
};

struct HmehStats {
  uint64_t splits = 0;             // segment splits in this session
  uint64_t deep_splits = 0;        // of which needed more than two new segments (partition())
  uint64_t doublings = 0;          // flat directory doublings in this session
  uint64_t segments = 0;           // segments in the directory
  uint32_t global_depth = 0;       // of the flat directory
  uint64_t directory_version = 0;  // bumped by every split and doubling
  double split_load_sum = 0;       // sum over splits of the split segment's load factor
  double split_seconds = 0;        // time in splits, summed over the threads that split
  // Open: walking the radix tree (directory recovery), building the flat directory from it, and
  // scanning the slots (recount, heap cells, and after a crash the claims cut short).
  double radix_seconds = 0, flat_seconds = 0, scan_seconds = 0;
};

class Index : public engine::Engine {
 public:
  virtual HmehStats hmeh_stats() const = 0;
};

// Lays out an empty index for `config` in a fresh pool and writes its first header. Throws
// Error(kInvalidArgument) naming the field of a configuration HMEH does not support.
void initialize(pool::Pool& pool, const TableConfig& config);

// Opens the engine on a pool holding an HMEH index; recovery runs here if the pool was not shut
// down cleanly.
std::unique_ptr<Index> open_engine(pool::Pool& pool, const EngineOptions& options);
EngineOptions engine_options(const OpenOptions& options);

// Checks an HMEH index against its invariants, reading the pool with the format's definitions
// (radix tree, placement rule, heap references), independently of the engine.
engine::CheckReport check_index(const pool::Pool& pool, int threads, std::optional<uint64_t> expected_items);

}  // namespace gphash::hmeh
