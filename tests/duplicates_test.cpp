// Duplicate resolution: two published copies of one key (what an interrupted item move leaves,
// made here by hand in the pool file). A search returns the valid copy (highest level, then
// lowest bucket, then lowest slot), `check` names the duplicate, and the next write of the key
// removes the other copy.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "format/hash.h"
#include "format/header.h"
#include "format/slot.h"
#include "gphash/table.h"
#include "test_util.h"

namespace gphash {
namespace {

// The pool file mapped read-write, for surgery on a closed pool.
struct MappedPool {
  explicit MappedPool(const std::string& path) {
    fd = ::open(path.c_str(), O_RDWR);
    struct stat st {};
    fstat(fd, &st);
    size = static_cast<size_t>(st.st_size);
    base = static_cast<std::byte*>(mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  }
  ~MappedPool() {
    munmap(base, size);
    close(fd);
  }
  format::PoolHeader& header() const {
    auto* a = reinterpret_cast<format::PoolHeader*>(base);
    auto* b = reinterpret_cast<format::PoolHeader*>(base + 4096);
    return a->generation >= b->generation ? *a : *b;
  }
  int fd;
  size_t size;
  std::byte* base;
};

struct Slot {
  uint64_t* key_word;    // 8-byte keys: the state
  uint64_t* value_word;
};

Slot slot_at(MappedPool& m, uint32_t level, uint64_t bucket, uint32_t s) {
  const format::PoolHeader& h = m.header();
  const format::BucketLayout layout = format::bucket_layout(h);
  std::byte* b = m.base + h.gphash.level_offset[level] + bucket * h.gphash.bucket_bytes;
  return {reinterpret_cast<uint64_t*>(b + layout.state_offset(s)), reinterpret_cast<uint64_t*>(b + layout.value_offset(s))};
}

void run(Table& t, Op op, uint64_t key, uint64_t value, OpStatus* status, uint64_t* out) {
  Batch b;
  b.size = 1;
  b.key_width = 8;
  b.value_width = 8;
  b.op = op;
  b.keys = &key;
  b.values = &value;
  b.values_out = out;
  b.status = status;
  t.execute(b);
}

void check_duplicates_resolved(const OpenOptions& options, bool writes_remove_duplicates) {
  testing::TempPool pool("dups");
  const uint64_t key = 0x1234567890ABCDEFull;
  {
    Table t = Table::create(pool.path(), {8, 8, {2, 2, 8}, 1000, 99});
    OpStatus st;
    run(t, Op::kInsert, key, 111, &st, nullptr);
    ASSERT_EQ(st, OpStatus::kOk);
  }
  {  // Copy the key, with another value, into a free slot of its other candidate bucket.
    MappedPool m(pool.path());
    const format::PoolHeader& h = m.header();
    const uint64_t h0 = format::xxh64(&key, 8, format::hash_seed_for(h.gphash.hash_seed, 0));
    const uint64_t h1 = format::xxh64(&key, 8, format::hash_seed_for(h.gphash.hash_seed, 1));
    bool placed = false;
    for (uint32_t level = h.gphash.bottom_level; level <= format::top_level(h) && !placed; ++level)
      for (uint64_t hash : {h0, h1}) {
        const uint64_t bucket = format::bucket_at(hash, level);
        for (uint32_t s = 0; s < h.gphash.slots && !placed; ++s) {
          Slot slot = slot_at(m, level, bucket, s);
          if (*slot.key_word == format::encode_key_word(key)) break;  // the original's bucket
          if (*slot.key_word != format::kSlotEmpty) continue;
          *slot.value_word = 222;
          *slot.key_word = format::encode_key_word(key);
          placed = true;
        }
        if (placed) break;
      }
    ASSERT_TRUE(placed);
    // As after a crash: not shut down cleanly, so the open recounts (2 published slots).
    m.header().clean_shutdown = 0;
    format::seal(m.header());
  }
  Table t = Table::open(pool.path(), options);
  EXPECT_EQ(t.size(), 2u);
  CheckResult c = t.check();
  EXPECT_FALSE(c.ok);
  EXPECT_NE(c.violation.find("duplicate"), std::string::npos) << c.violation;
  // The search returns one of the two values: the valid copy's.
  OpStatus st;
  uint64_t found = 0;
  run(t, Op::kSearch, key, 0, &st, &found);
  ASSERT_EQ(st, OpStatus::kOk);
  EXPECT_TRUE(found == 111 || found == 222);
  const uint64_t valid = found;
  run(t, Op::kSearch, key, 0, &st, &found);
  EXPECT_EQ(found, valid) << "searches agree on the valid copy";
  // A write goes to the valid copy.
  run(t, Op::kUpsert, key, 333, &st, nullptr);
  ASSERT_EQ(st, OpStatus::kOk);
  run(t, Op::kSearch, key, 0, &st, &found);
  EXPECT_EQ(found, 333u);
  if (writes_remove_duplicates) {  // the GPU engine's warp reads every candidate slot anyway
    c = t.check();
    EXPECT_TRUE(c.ok) << c.violation;
    run(t, Op::kErase, key, 0, &st, nullptr);
    run(t, Op::kSearch, key, 0, &st, &found);
    EXPECT_EQ(st, OpStatus::kNotFound) << "no second copy survives the erase";
    return;
  }
  // The CPU engine's writes to a present key stop at its valid copy, so the other stays until
  // repair drops it (a copy check's violation names); the valid copy, with the new value, stays.
  t.close();
  const RepairResult r = Table::repair(pool.path());
  EXPECT_EQ(r.dropped.size(), 1u);
  Table reopened = Table::open(pool.path(), options);
  EXPECT_EQ(reopened.size(), 1u);
  EXPECT_TRUE(reopened.check().ok);
  run(reopened, Op::kSearch, key, 0, &st, &found);
  EXPECT_EQ(found, 333u);
  run(reopened, Op::kErase, key, 0, &st, nullptr);
  run(reopened, Op::kSearch, key, 0, &st, &found);
  EXPECT_EQ(st, OpStatus::kNotFound);
}

TEST(Duplicates, CpuEngineReadsTheValidCopyAndRepairRemovesTheOther) { check_duplicates_resolved({}, false); }

TEST(Duplicates, GpuEngineReadsTheValidCopyAndWritesRemoveTheOther) {
  if (!testing::have_gpu()) GTEST_SKIP() << "no GPU engine here";
  OpenOptions o;
  o.engine = EngineKind::kGpu;
  check_duplicates_resolved(o, true);
}

}  // namespace
}  // namespace gphash
