// Lost-store emulation for the CPU engine (DESIGN.md section 5, tier 2; research note C, design
// C): an in-house pmreorder. ShadowMemory is a Memory for cpu::CpuEngine / cpu::CpuTable (the
// seam of engines/cpu/memory.h): it performs every pool access as DirectMemory does and tells
// the current ShadowRecorder about stores and persist barriers. The recorder keeps the image
// of the pool as persisted and, per 8-byte word, the stores made to it since the last barrier
// covering it. A crash image is the persisted image plus some of those pending stores.
//
// The persistence model:
//   - store/cas/copy update the live pool; the words they touch become pending (8-byte
//     granularity: x86 makes only aligned 8-byte stores atomic, so a copy can persist word by
//     word in any order);
//   - persist(p, n) is "flush every cache line overlapping [p, p+n), then fence": all pending
//     stores to those lines become persisted, whichever word they were to;
//   - a pending store may also have reached memory on its own (cache eviction).
// Two ways to pick what a crash keeps of the pending stores:
//   kWords: each pending word independently keeps its persisted value or takes the value of any
//           store made to it since (the brief's model, and more adversarial than hardware);
//   kLines: each cache line keeps a prefix, in program order, of the stores made to it (what x86
//           can really do: a line is written back whole, with the stores made to it so far).
//
// Outside the seam: Pool::write_header and the table metadata write the two header copies with
// memcpy + Pool::persist, not through Memory. The emulation treats a header write as atomic and
// persisted when write_header returns: a snapshot copies the live header pages. (A torn header is
// the two-copy checksum scheme's business and is tested with the pool file tests.) Extents a pool
// allocates are zero-filled by the file system, so they start persisted as zeros.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "engines/cpu/memory.h"
#include "pool/pool.h"

namespace gphash::crashtest {

// A store not yet covered by a persist barrier: the value its word had right after it.
struct PendingStore {
  uint64_t offset;  // of the 8-byte word in the pool
  uint64_t value;
  uint64_t sequence;  // program order of stores
};

struct Snapshot {
  std::vector<std::byte> persisted;   // the pool file as persisted
  std::vector<PendingStore> pending;  // in program order
  uint64_t store_index = 0;           // stores recorded before the snapshot
  std::string label;                  // where the crash is: "store", a crash point's name, ...
};

enum class ImageMode { kWords, kLines };

class ShadowRecorder {
 public:
  // The recorder ShadowMemory reports to (none: ShadowMemory behaves as DirectMemory).
  static ShadowRecorder* current;

  // Starts recording `pool`; its live contents count as persisted (it was just opened).
  explicit ShadowRecorder(const pool::Pool& pool);

  void on_store(const void* p, size_t n);
  void on_persist(const void* p, size_t n);
  // Called after each recorded store with the number of stores so far.
  void set_store_hook(std::function<void(uint64_t)> hook) { hook_ = std::move(hook); }

  uint64_t stores() const { return stores_; }
  std::vector<PendingStore> pending() const;
  Snapshot snapshot(std::string label) const;
  // "level 7 bucket 12 slot 3 state word", "heap cell 40", "move record", ... for reports, by the
  // pool's current header or a given one (a snapshot's: the layout changes with every resize).
  std::string describe(uint64_t offset) const;
  static std::string describe(uint64_t offset, const format::PoolHeader& h);

 private:
  const pool::Pool& pool_;
  mutable std::mutex mutex_;
  std::vector<std::byte> persisted_;
  std::vector<PendingStore> pending_;  // program order; persisted ones are removed
  uint64_t stores_ = 0;
  uint64_t sequence_ = 0;
  std::function<void(uint64_t)> hook_;
};

// The Memory seam with recording.
class ShadowMemory {
 public:
  explicit ShadowMemory(const pool::Pool* pool) : pool_(pool) {}
  static uint64_t load(const uint64_t* p) { return engine::cpu::DirectMemory::load(p); }
  static void store(uint64_t* p, uint64_t v) {
    engine::cpu::DirectMemory::store(p, v);
    if (ShadowRecorder::current) ShadowRecorder::current->on_store(p, 8);
  }
  static bool cas(uint64_t* p, uint64_t& expected, uint64_t desired) {
    const bool done = engine::cpu::DirectMemory::cas(p, expected, desired);
    if (done && ShadowRecorder::current) ShadowRecorder::current->on_store(p, 8);
    return done;
  }
  static void copy(void* dst, const void* src, size_t n) {
    engine::cpu::DirectMemory::copy(dst, src, n);
    if (ShadowRecorder::current) ShadowRecorder::current->on_store(dst, n);
  }
  void persist(const void* p, size_t n) const {
    pool_->persist(p, n);
    if (ShadowRecorder::current) ShadowRecorder::current->on_persist(p, n);
  }

 private:
  const pool::Pool* pool_;
};

// The distinct crash images of a snapshot in `mode`, each as one choice per pending word
// (kWords) or line (kLines): all of them when there are at most `max_images`, else a random
// `max_images` of them. Choice 0 keeps the persisted value.
std::vector<std::vector<uint32_t>> image_choices(const Snapshot& s, ImageMode mode, size_t max_images,
                                                 std::mt19937_64& rng);
// Writes the image for `choice` to `path` (a fresh pool file).
void write_image(const Snapshot& s, ImageMode mode, const std::vector<uint32_t>& choice, const std::string& path);
// Which pending stores the image keeps, for reports.
std::string describe_choice(const ShadowRecorder& recorder, const Snapshot& s, ImageMode mode,
                            const std::vector<uint32_t>& choice);

}  // namespace gphash::crashtest
