// The load factor a table reaches before its first resize. The issue asks for at least 90% with
// the default shape (the GPHash paper reports up to 92%); least-loaded placement alone stops near
// 85% on large tables, and displacement of one item carries it further. The tables here are asked
// to fill to 0.95 (OpenOptions::max_load_factor): by default they resize at 0.9, before the
// displacements that would take them further (they run one at a time). Also: when a growing table
// resizes, and where a resize puts the bottom level's items.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "format/header.h"
#include "format/layout.h"
#include "format/slot.h"
#include "gphash/table.h"
#include "resize_state_util.h"
#include "test_util.h"

namespace gphash {
namespace {

double load_factor_at_first_resize(TableShape shape, uint64_t capacity, uint64_t* displacements) {
  testing::TempPool pool("lf");
  OpenOptions options;
  options.max_load_factor = 0.95;
  Table table = Table::create(pool.path(), {8, 8, shape, capacity, 7}, options);
  const uint64_t slots = table.info().slots;
  std::mt19937_64 rng(99);
  const size_t batch = 4096;
  std::vector<uint64_t> keys(batch), values(batch);
  std::vector<OpStatus> status(batch);
  double last = 0;
  for (;;) {
    for (size_t i = 0; i < batch; ++i) keys[i] = values[i] = rng() >> 2;
    Batch b;
    b.size = batch;
    b.key_width = 8;
    b.value_width = 8;
    b.op = Op::kInsert;
    b.keys = keys.data();
    b.values = values.data();
    b.status = status.data();
    table.execute(b);
    TableInfo info = table.info();
    if (info.resizes > 0) {
      *displacements = info.displacements;
      // The resize happened inside this batch: the last full-table figure is a lower bound, and
      // the exact one is what fit before the insert that found no room.
      return std::max(last, static_cast<double>(info.items - batch) / static_cast<double>(slots));
    }
    last = info.load_factor;
  }
}

TEST(LoadFactor, DefaultShapeReachesNinetyPercentBeforeFirstResize) {
  uint64_t displacements = 0;
  double lf = load_factor_at_first_resize({2, 2, 8}, 1 << 20, &displacements);
  RecordProperty("load_factor", std::to_string(lf));
  EXPECT_GE(lf, 0.90) << "displacements: " << displacements;
  EXPECT_GT(displacements, 0u);
}

TEST(LoadFactor, OtherShapesFillWell) {
  for (TableShape shape : {TableShape{4, 2, 4}, TableShape{1, 4, 8}}) {
    uint64_t displacements = 0;
    double lf = load_factor_at_first_resize(shape, 1 << 19, &displacements);
    EXPECT_GE(lf, 0.88) << to_string(shape);
    RecordProperty("load_factor_" + to_string(shape), std::to_string(lf));
  }
}

// Runs one batch of `n` operations `op` on keys first..first+n-1 (values = keys).
void run_batch(Table& table, Op op, uint64_t first, size_t n) {
  std::vector<uint64_t> keys(n);
  std::vector<OpStatus> status(n);
  for (size_t i = 0; i < n; ++i) keys[i] = first + i;
  Batch b;
  b.size = n;
  b.key_width = 8;
  b.value_width = 8;
  b.op = op;
  b.keys = keys.data();
  b.values = keys.data();
  b.status = status.data();
  table.execute(b);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(status[i], OpStatus::kOk) << "operation " << i;
}

// The CPU engine grows a table before a batch whose inserts would pass the maximum load factor, so
// they never meet a nearly full table: a batch of 8x the capacity ends at about half full after
// its resizes, with no displacement.
TEST(LoadFactor, BatchOfInsertsGrowsTheTableBeforeItRuns) {
  testing::TempPool pool("grow");
  Table table = Table::create(pool.path(), {8, 8, {2, 2, 8}, 1 << 14, 7});
  const uint64_t slots = table.info().slots;
  run_batch(table, Op::kInsert, 1, 8 * slots);
  const TableInfo info = table.info();
  EXPECT_EQ(info.items, 8 * slots);
  EXPECT_GE(info.resizes, 3u);
  EXPECT_LE(info.load_factor, 0.95);
  EXPECT_EQ(info.displacements, 0u) << "load factor " << info.load_factor;
}

// Updates add no item, so a batch of them does not grow a nearly full table, however large.
TEST(LoadFactor, BatchOfUpdatesDoesNotGrowTheTable) {
  testing::TempPool pool("updates");
  Table table = Table::create(pool.path(), {8, 8, {2, 2, 8}, 1 << 14, 7});
  const uint64_t slots = table.info().slots;
  const uint64_t items = slots * 85 / 100;
  run_batch(table, Op::kInsert, 1, items);
  const uint64_t resizes = table.info().resizes;
  run_batch(table, Op::kUpdate, 1, items);
  EXPECT_EQ(table.info().resizes, resizes);
  EXPECT_EQ(table.info().slots, slots);
}

// Where each item of a pool file sits: its key bytes -> (level, bucket).
struct Placement {
  uint32_t bottom = 0, top = 0;
  std::map<std::string, std::pair<uint32_t, uint64_t>> at;
};
Placement placement(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  format::PoolHeader h[2];
  std::memcpy(&h[0], file.data(), sizeof h[0]);
  std::memcpy(&h[1], file.data() + format::kHeaderCopyOffset[1], sizeof h[1]);
  const format::PoolHeader& cur = h[0].generation > h[1].generation ? h[0] : h[1];
  const format::BucketLayout layout{cur.gphash.key_width, cur.gphash.slots};
  Placement r;
  r.bottom = cur.gphash.bottom_level;
  r.top = format::top_level(cur);
  for (uint32_t level = r.bottom; level <= r.top; ++level)
    for (uint64_t b = 0; b < format::level_buckets(level); ++b) {
      const char* bucket = file.data() + cur.gphash.level_offset[level] + b * layout.bytes();
      for (uint32_t s = 0; s < layout.slots; ++s) {
        uint64_t state;
        std::memcpy(&state, bucket + layout.state_offset(s), 8);
        if (format::is_published(state))
          r.at[std::string(bucket + layout.key_offset(s), layout.key_width)] = {level, b};
      }
    }
  return r;
}

// A resize moves each item of the bottom level to its bucket in the new top under the hash that
// placed it in the bottom (engines/cpu/cpu_table.h, stream_bottom): the new top bucket's index
// shifted back to the old bottom is the item's old bucket; every other item stays where it was.
// (With the insert rule this fails: 1.5 K to 39 K of the moved items per case went elsewhere.)
TEST(Resize, MovesEachBottomItemUnderItsOwnBucketInTheNewTop) {
  for (TableShape shape : {TableShape{2, 2, 8}, TableShape{4, 2, 4}, TableShape{1, 4, 8}})
    for (uint32_t kw : {8u, 16u})
      for (bool mirror : {true, false}) {
        SCOPED_TRACE(to_string(shape) + " k" + std::to_string(kw) + (mirror ? "" : " no mirror"));
        testing::TempPool pool("stream");
        OpenOptions options;
        options.threads = 3;
        options.tag_mirror = mirror;
        Table table = Table::create(pool.path(), {kw, 8, shape, 1 << 15, 3}, options);
        const uint64_t n = table.info().slots * 8 / 10;
        std::vector<uint64_t> keys(n * kw / 8), values(n);
        std::mt19937_64 rng(17);
        for (auto& w : keys) w = rng() >> 2;
        std::vector<OpStatus> status(n);
        Batch b;
        b.size = n;
        b.key_width = kw;
        b.value_width = 8;
        b.op = Op::kInsert;
        b.keys = keys.data();
        b.values = values.data();
        b.status = status.data();
        table.execute(b);
        ASSERT_EQ(table.info().resizes, 0u);
        const Placement before = placement(pool.path());
        // Upserts of the same keys add nothing, but the table grows for them first (twice the
        // items may fit then): one resize and nothing else.
        b.op = Op::kUpsert;
        table.execute(b);
        const TableInfo info = table.info();
        ASSERT_EQ(info.resizes, 1u);
        EXPECT_GT(info.rehash_seconds, 0);  // part of the resize's time
        EXPECT_LE(info.rehash_seconds, info.resize_seconds);
        const Placement after = placement(pool.path());
        ASSERT_EQ(after.top, before.top + 1);
        ASSERT_EQ(after.at.size(), n);
        uint64_t moved = 0, elsewhere = 0, others_moved = 0;
        for (const auto& [key, where] : before.at) {
          const auto it = after.at.find(key);
          ASSERT_NE(it, after.at.end());
          if (where.first == before.bottom) {
            ++moved;
            elsewhere += it->second.first != after.top ||
                         it->second.second >> (after.top - before.bottom) != where.second;
          } else {
            others_moved += it->second != where;
          }
        }
        EXPECT_GT(moved, n / 32);  // the bottom of four levels holds a fifteenth of the slots
        EXPECT_EQ(elsewhere, 0u) << "of " << moved << " items moved up";
        EXPECT_EQ(others_moved, 0u);
        CheckResult check = table.check();
        EXPECT_TRUE(check.ok) << check.violation;
        b.op = Op::kSearch;
        table.execute(b);
        for (OpStatus st : status) ASSERT_EQ(st, OpStatus::kOk);
      }
}

// A resumed resize (the process died after the new level was allocated) places what is left of
// the bottom level by the insert rule. When an item's candidate slots above are all full, it makes
// room by displacement, as an insert does; before, the open failed with kCorruptTable, and so did
// every reopen. The state is made by hand: a small table, step 1 of a resize through TableMeta
// (what a crash right after it leaves), and items written into every free slot of one bottom
// item's candidate buckets above, each in a bucket of its own candidates.
TEST(Resize, ResumedResizeMakesRoomForAnItemWhoseSlotsAboveAreFull) {
  testing::TempPool pool("resume");
  std::map<uint64_t, uint64_t> model;  // key -> value
  ASSERT_NO_FATAL_FAILURE(testing::make_resize_that_needs_displacement(pool.path(), model));
  Table table = Table::open(pool.path());
  const TableInfo info = table.info();
  EXPECT_TRUE(info.recovered);
  EXPECT_EQ(info.items, model.size());
  CheckResult check = table.check();
  EXPECT_TRUE(check.ok) << check.violation;
  testing::expect_table_holds(table, model);
}

}  // namespace
}  // namespace gphash
