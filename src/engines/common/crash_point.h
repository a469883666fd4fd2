// Named crash points: places in the persistence protocols where a test build can kill the
// process on purpose, so the crash tests (tests/crash) can stop an operation at every step
// deterministically and check that recovery copes.
//
//   GPHASH_CRASH_POINT("insert.after_claim");
//
// Built with -DGPHASH_CRASH_POINTS=ON (CMake option of the same name; the engine and pool targets
// then define GPHASH_CRASH_POINTS=1 publicly), a hit of a point:
//   - raises SIGKILL on the N-th hit of that point when the environment holds
//     GPHASH_CRASH_AT=name:N (read once, at the first hit of any point);
//   - counts hits of every point when GPHASH_CRASH_COUNT=1 (see hit_count());
//   - calls the observer installed with set_observer(), if any (the lost-store emulation takes
//     crash images there instead of dying).
// Otherwise the macro expands to nothing: no code, no data, no cost.
//
// Every point is declared once in GPHASH_CRASH_POINT_LIST below, with the engine that reaches
// it; a point used in code but missing there is a compile error in crash-point builds, and
// the sweep (tests/crash/crash_point_test.cpp) iterates this list, so it cannot miss one.
// Adding a point: add X("area.step", scope) here and the macro where the step happens.
#pragma once

#include <cstdint>

// X(name, scope): scope says which engines reach the point (kCommon: code both GPHash engines
// run; kHmeh: the HMEH index; kSnapshot: the snapshot code, which the engine crash tests do not run).
#define GPHASH_CRASH_POINT_LIST(X)                                                              \
  /* Pool header writes (pool.cpp): a whole new copy is in memory, not yet persisted. */       \
  X("header.after_copy_write", kCommon)                                                        \
  X("header.after_persist", kCommon)                                                           \
  /* Resize header transitions (table_meta.cpp). */                                            \
  X("resize.begin.before_header", kCommon)                                                     \
  X("resize.begin.after_header", kCommon)                                                      \
  X("resize.finish.before_header", kCommon)                                                    \
  X("resize.finish.after_header", kCommon)                                                     \
  /* Heap growth (table_meta.cpp). */                                                           \
  X("heap.grow.before_header", kCommon)                                                        \
  X("heap.grow.after_header", kCommon)                                                         \
  /* CPU engine, insert: claim EMPTY -> INSERTING, then link (key, value word, publish). */     \
  X("insert.after_claim", kCpu)                                                                \
  X("link.after_key", kCpu)                                                                    \
  X("link.after_value_word", kCpu)                                                             \
  X("link.after_publish", kCpu)                                                                \
  /* CPU engine, out-of-place values: the new heap cell, then the one CAS of the value word. */ \
  X("heap.after_cell_write", kCpu)                                                             \
  X("update.after_value_cas", kCpu)                                                            \
  X("erase.after_cas", kCpu)                                                                   \
  /* CPU engine, displacement move bracketed by the maintenance record. */                      \
  X("move.after_addresses", kCpu)                                                              \
  X("move.after_record", kCpu)                                                                 \
  X("move.after_claim", kCpu)                                                                  \
  X("move.after_link", kCpu)                                                                   \
  X("move.after_clear_source", kCpu)                                                           \
  X("move.after_record_idle", kCpu)                                                            \
  /* CPU engine, rehash of the bottom level (resize step 2, also run by recovery). */           \
  X("rehash.after_claim", kCpu)                                                                \
  X("rehash.after_copy_up", kCpu)                                                              \
  X("rehash.after_clear", kCpu)                                                                \
  /* CPU engine, recovery steps (cpu_engine_impl.h recover(), cpu_table.h). */                  \
  X("recovery.begin", kCpu)                                                                    \
  X("recovery.after_drop_move_source", kCpu)                                                   \
  X("recovery.after_move_record_idle", kCpu)                                                   \
  X("recovery.after_resolve_move", kCpu)                                                       \
  X("recovery.after_clear_inserting_slot", kCpu)                                               \
  X("recovery.after_clear_inserting", kCpu)                                                    \
  X("recovery.after_rehash", kCpu)                                                             \
  /* HMEH (src/indexes/hmeh): arena and heap growth (header writes). */                         \
  X("hmeh.grow.before_header", kHmeh)                                                          \
  X("hmeh.grow.after_header", kHmeh)                                                           \
  /* HMEH insert: claim by CAS, value and key words, publish (Cross-KV: one persist). */         \
  X("hmeh.heap.after_cell_write", kHmeh)                                                       \
  X("hmeh.insert.after_claim", kHmeh)                                                          \
  X("hmeh.insert.after_value", kHmeh)                                                          \
  X("hmeh.insert.after_publish", kHmeh)                                                        \
  X("hmeh.update.after_value", kHmeh)                                                          \
  X("hmeh.erase.after_tombstone", kHmeh)                                                       \
  /* HMEH split: new segments, new radix node, the one-store publish, the flat directory. */    \
  X("hmeh.split.after_segments", kHmeh)                                                        \
  X("hmeh.split.after_node", kHmeh)                                                            \
  X("hmeh.split.after_publish", kHmeh)                                                         \
  X("hmeh.split.after_doubling", kHmeh)                                                        \
  /* HMEH recovery: the directories, then claims cut short become tombstones. */                \
  X("hmeh.recovery.begin", kHmeh)                                                              \
  X("hmeh.recovery.after_directory", kHmeh)                                                    \
  X("hmeh.recovery.after_clear_claim", kHmeh)                                                  \
  /* Snapshots (src/snapshot/snapshotter.cpp): swept by tests/snapshot_crash_test.cpp. */      \
  X("snapshot.after_first_pass", kSnapshot)                                                    \
  X("snapshot.after_capture", kSnapshot)                                                       \
  X("snapshot.after_segment_write", kSnapshot)                                                 \
  X("snapshot.after_segment_sync", kSnapshot)                                                  \
  X("snapshot.after_superblock_write", kSnapshot)                                              \
  X("snapshot.after_rename", kSnapshot)                                                        \
  X("snapshot.after_commit", kSnapshot)                                                        \
  X("restore.before_publish", kSnapshot)

namespace gphash::crash {

enum Scope : uint8_t { kCommon, kCpu, kGpu, kHmeh, kSnapshot };

struct PointInfo {
  const char* name;
  Scope scope;
};

#define GPHASH_CRASH_POINT_INFO_(name, scope) PointInfo{name, scope},
inline constexpr PointInfo kPoints[] = {GPHASH_CRASH_POINT_LIST(GPHASH_CRASH_POINT_INFO_)};
#undef GPHASH_CRASH_POINT_INFO_
inline constexpr int kPointCount = static_cast<int>(sizeof kPoints / sizeof kPoints[0]);

constexpr bool same_name(const char* a, const char* b) {
  while (*a != '\0' && *a == *b) {
    ++a;
    ++b;
  }
  return *a == *b;
}

// Index of a point in kPoints, -1 if it is not declared.
constexpr int index_of(const char* name) {
  for (int i = 0; i < kPointCount; ++i)
    if (same_name(kPoints[i].name, name)) return i;
  return -1;
}

}  // namespace gphash::crash

#if GPHASH_CRASH_POINTS

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace gphash::crash {

struct Runtime {
  int target = -1;      // point index from GPHASH_CRASH_AT, -1 for none
  uint64_t target_hit = 0;
  bool counting = false;
  std::atomic<uint64_t> target_hits{0};
  std::atomic<uint64_t> hits[kPointCount] = {};
  std::atomic<void (*)(int)> observer{nullptr};

  Runtime() {
    if (const char* at = std::getenv("GPHASH_CRASH_AT"); at != nullptr && *at != '\0') {
      const char* colon = std::strrchr(at, ':');
      const std::string name = colon ? std::string(at, colon) : std::string(at);
      target = index_of(name.c_str());
      target_hit = colon ? std::strtoull(colon + 1, nullptr, 10) : 1;
      if (target < 0 || target_hit == 0) {
        // A misspelt point would make a crash test pass without crashing: refuse loudly.
        std::fprintf(stderr, "GPHASH_CRASH_AT=%s: unknown crash point or hit number; use name:N with a name "
                             "from GPHASH_CRASH_POINT_LIST in src/engines/common/crash_point.h\n", at);
        std::abort();
      }
    }
    const char* count = std::getenv("GPHASH_CRASH_COUNT");
    counting = count != nullptr && std::strcmp(count, "1") == 0;
  }
};

inline Runtime& runtime() {
  static Runtime r;
  return r;
}

// Hits of point `index` so far in this process (counted only with GPHASH_CRASH_COUNT=1).
inline uint64_t hit_count(int index) { return runtime().hits[index].load(std::memory_order_relaxed); }
inline bool counting() { return runtime().counting; }
// Calls `f(index)` at every hit (nullptr removes it). For in-process tests, which must not be
// killed: combine it with GPHASH_CRASH_AT unset.
inline void set_observer(void (*f)(int)) { runtime().observer.store(f); }

template <int Index>
inline void hit() {
  static_assert(Index >= 0, "unknown crash point: declare it in GPHASH_CRASH_POINT_LIST (src/engines/common/crash_point.h)");
  Runtime& r = runtime();
  if (r.counting) r.hits[Index].fetch_add(1, std::memory_order_relaxed);
  if (r.target == Index && r.target_hits.fetch_add(1, std::memory_order_relaxed) + 1 == r.target_hit) {
    kill(getpid(), SIGKILL);
    for (;;) pause();  // SIGKILL cannot be caught; nothing after the point may run
  }
  if (void (*f)(int) = r.observer.load(std::memory_order_relaxed)) f(Index);
}

}  // namespace gphash::crash

#define GPHASH_CRASH_POINT(name) ::gphash::crash::hit<::gphash::crash::index_of(name)>()

#else

#define GPHASH_CRASH_POINT(name) static_cast<void>(0)

#endif
