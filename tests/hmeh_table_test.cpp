// HMEH behind the Table facade's tools: export (what dump uses), stats, check_pool on a dirty pool
// (recovered in a private view, the file left as it was), repair (recovers and checks; refuses,
// typed, to drop damaged HMEH items), and the GPU-only calls, refused with a typed error.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <vector>

#include "format/hash.h"
#include "format/hmeh/layout.h"
#include "gphash/table.h"
#include "pool/pool.h"
#include "test_util.h"

namespace gphash {
namespace {

using testing::TempPool;

TableConfig hmeh_config(uint32_t key_width, uint32_t value_width) {
  TableConfig c;
  c.key_width = key_width;
  c.value_width = value_width;
  c.capacity = 16;
  c.hash_seed = 5;
  c.index = IndexKind::kHmeh;
  c.hmeh.segment_bytes = 4096;  // many splits with few items
  return c;
}

// n items with distinct keys (never reserved); the value's first 8 bytes are the key's first word.
struct Items {
  uint32_t key_width, value_width;
  std::vector<std::byte> keys, values;
  Items(uint64_t n, uint32_t kw, uint32_t vw, uint64_t salt) : key_width(kw), value_width(vw), keys(n * kw), values(n * vw) {
    for (uint64_t i = 0; i < n; ++i) {
      for (uint32_t w = 0; w < kw / 8; ++w) {
        const uint64_t word = format::mix64(i * 4 + w + salt * 0x100000000ull) >> 1;
        std::memcpy(&keys[i * kw + w * 8], &word, 8);
      }
      for (uint32_t b = 0; b < vw; ++b) values[i * vw + b] = static_cast<std::byte>(keys[i * kw + b % 8]);
    }
  }
  size_t size() const { return keys.size() / key_width; }
  std::string key(size_t i) const { return {reinterpret_cast<const char*>(&keys[i * key_width]), key_width}; }
  std::string value(size_t i) const { return {reinterpret_cast<const char*>(&values[i * value_width]), value_width}; }
};

void insert(Table& t, const Items& items) {
  std::vector<OpStatus> status(items.size());
  t.execute({items.size(), items.key_width, items.value_width, Op::kInsert, nullptr, items.keys.data(),
             items.values.data(), nullptr, status.data()});
  ASSERT_EQ(std::count(status.begin(), status.end(), OpStatus::kOk), static_cast<long>(items.size()));
}

std::map<std::string, std::string> export_all(Table& t, size_t chunk) {
  const uint32_t kw = t.key_width(), vw = t.value_width();
  std::vector<std::byte> keys(chunk * kw), values(chunk * vw);
  std::map<std::string, std::string> got;
  ExportCursor cursor;
  while (!cursor.done()) {
    const size_t n = t.export_items(cursor, keys.data(), values.data(), chunk);
    for (size_t i = 0; i < n; ++i) {
      const bool fresh = got.emplace(std::string(reinterpret_cast<const char*>(&keys[i * kw]), kw),
                                     std::string(reinterpret_cast<const char*>(&values[i * vw]), vw))
                             .second;
      EXPECT_TRUE(fresh) << "an item was exported twice";
    }
  }
  EXPECT_EQ(cursor.exported, got.size());
  EXPECT_EQ(cursor.damaged, 0u);
  return got;
}

TEST(HmehTable, ExportReturnsEveryItemOnceInlineAndInTheHeap) {
  for (const auto& [kw, vw] : {std::pair<uint32_t, uint32_t>{8, 8}, {16, 24}}) {
    SCOPED_TRACE(fmt::format("{}-byte keys, {}-byte values", kw, vw));
    TempPool pool("hmeh-table");
    Table t = Table::create(pool.path(), hmeh_config(kw, vw));
    const Items items(20000, kw, vw, 1);
    insert(t, items);
    ASSERT_GT(t.info().resizes, 10u);
    const std::map<std::string, std::string> got = export_all(t, 777);
    ASSERT_EQ(got.size(), items.size());
    for (size_t i = 0; i < items.size(); ++i) {
      auto it = got.find(items.key(i));
      ASSERT_NE(it, got.end()) << "item " << i << " was not exported";
      EXPECT_EQ(it->second, items.value(i)) << "item " << i;
    }
    // A split between two calls moves items: the export must be started again.
    std::vector<std::byte> keys(10 * kw), values(10 * vw);
    ExportCursor cursor;
    ASSERT_EQ(t.export_items(cursor, keys.data(), values.data(), 10), 10u);
    insert(t, Items(20000, kw, vw, 2));
    try {
      t.export_items(cursor, keys.data(), values.data(), 10);
      ADD_FAILURE() << "an export went on across splits";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    }
    EXPECT_EQ(export_all(t, 4096).size(), 40000u);
  }
}

TEST(HmehTable, StatsCountSegmentsAndGpuOnlyCallsAreRefusedTyped) {
  TempPool pool("hmeh-table");
  Table t = Table::create(pool.path(), hmeh_config(16, 24));
  insert(t, Items(5000, 16, 24, 3));
  const TableStats s = t.stats();
  EXPECT_TRUE(s.levels.empty());
  EXPECT_GT(s.segments, 4u);
  EXPECT_EQ(s.heap_cells_used, 5000u);
  EXPECT_GE(s.heap_cells, 5000u);
  try {
    t.begin_device_session(nullptr);
    ADD_FAILURE() << "a device session began on an HMEH table";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find("HMEH"), std::string::npos) << e.what();
  }
  // A host batch through execute_async runs at once, as on the GPHash CPU engine.
  const Items more(100, 16, 24, 4);
  std::vector<OpStatus> status(more.size());
  BatchEvent done = t.execute_async({more.size(), 16, 24, Op::kInsert, nullptr, more.keys.data(), more.values.data(),
                                     nullptr, status.data()},
                                    nullptr);
  EXPECT_TRUE(done.ready());
  EXPECT_EQ(std::count(status.begin(), status.end(), OpStatus::kOk), 100);
  EXPECT_EQ(t.size(), 5100u);
}

// A pool at its size limit: inserts that need a new segment fail with kTableFull, typed, and every
// acknowledged item stays. Eight threads split at once, so their runs of fresh segments
// (HmehEngine::take_segment) meet the limit too.
TEST(HmehTable, APoolAtItsSizeLimitFailsInsertsTypedAndLosesNothing) {
  TempPool pool("hmeh-table");
  Table::create(pool.path(), hmeh_config(8, 8)).close();
  OpenOptions open;
  open.threads = 8;
  open.max_pool_bytes = uint64_t{8} << 20;
  Table t = Table::open(pool.path(), open);
  std::map<std::string, std::string> stored;
  uint64_t full = 0;
  for (uint64_t round = 0; round < 64 && full == 0; ++round) {
    const Items items(20000, 8, 8, 100 + round);
    std::vector<OpStatus> status(items.size());
    t.execute({items.size(), 8, 8, Op::kInsert, nullptr, items.keys.data(), items.values.data(), nullptr, status.data()});
    for (size_t i = 0; i < items.size(); ++i) {
      ASSERT_TRUE(status[i] == OpStatus::kOk || status[i] == OpStatus::kTableFull) << to_string(status[i]);
      if (status[i] == OpStatus::kOk) stored.emplace(items.key(i), items.value(i));
      full += status[i] == OpStatus::kTableFull;
    }
  }
  ASSERT_GT(full, 0u) << "the pool never filled";
  EXPECT_LE(t.info().pool_bytes, open.max_pool_bytes);
  EXPECT_EQ(t.size(), stored.size());
  EXPECT_EQ(export_all(t, 4096), stored);
  const CheckResult c = t.check();
  EXPECT_TRUE(c.ok) << c.violation;
  EXPECT_EQ(c.items, stored.size());
}

// A table holding exactly its capacity, a power of two, updates every item without growing its
// heap: an update takes its new cell before it frees the old one, and the first chunk has room
// for a sixteenth more than the capacity (it had none, and the first update grew the heap).
TEST(HmehTable, ATableAtItsCapacityUpdatesWithoutGrowingItsHeap) {
  TempPool pool("hmeh-table");
  TableConfig config = hmeh_config(8, 32);
  config.capacity = 4096;
  Table t = Table::create(pool.path(), config);
  const Items items(4096, 8, 32, 7);
  insert(t, items);
  Items updated = items;
  for (std::byte& b : updated.values) b = ~b;
  std::vector<OpStatus> status(updated.size());
  t.execute({updated.size(), 8, 32, Op::kUpdate, nullptr, updated.keys.data(), updated.values.data(), nullptr, status.data()});
  EXPECT_EQ(std::count(status.begin(), status.end(), OpStatus::kOk), static_cast<long>(updated.size()));
  EXPECT_EQ(t.info().heap_grows, 0u);
  std::map<std::string, std::string> want;
  for (size_t i = 0; i < updated.size(); ++i) want.emplace(updated.key(i), updated.value(i));
  EXPECT_EQ(export_all(t, 1024), want);
}

void mark_dirty(const std::string& path) {
  auto pool = pool::Pool::open(path, {});
  format::PoolHeader h = pool->header();
  h.clean_shutdown = 0;
  pool->write_header(h);
}

TEST(HmehTable, CheckPoolRecoversADirtyPoolInItsViewAndRepairRecoversItForReal) {
  TempPool pool("hmeh-table");
  {
    Table t = Table::create(pool.path(), hmeh_config(8, 8));
    insert(t, Items(20000, 8, 8, 5));
  }
  mark_dirty(pool.path());
  const CheckResult c = Table::check_pool(pool.path());
  EXPECT_TRUE(c.ok) << c.violation;
  EXPECT_TRUE(c.recovered);
  EXPECT_EQ(c.items, 20000u);
  EXPECT_FALSE(Table::inspect(pool.path()).clean_shutdown) << "check_pool changed the file";
  const RepairResult r = Table::repair(pool.path());
  EXPECT_TRUE(r.recovered);
  EXPECT_TRUE(r.dropped.empty());
  EXPECT_EQ(r.items, 20000u);
  EXPECT_TRUE(Table::inspect(pool.path()).clean_shutdown);
  const CheckResult after = Table::check_pool(pool.path());
  EXPECT_TRUE(after.ok && !after.recovered && after.items == 20000u) << after.violation;
}

TEST(HmehTable, RepairRefusesAPoolThatStaysDamagedAndKeepsItDirty) {
  TempPool pool("hmeh-table");
  constexpr uint64_t kKey = 0x0123456789ABCDEFull, kValue = 0x5A5A5A5A12345678ull;
  {
    Table t = Table::create(pool.path(), hmeh_config(8, 8));
    insert(t, Items(3000, 8, 8, 6));
    std::vector<OpStatus> status(1);
    t.execute({1, 8, 8, Op::kInsert, nullptr, &kKey, &kValue, nullptr, status.data()});
    ASSERT_EQ(status[0], OpStatus::kOk);
  }
  // Damage: the slot of kKey now says another key, which belongs elsewhere.
  std::fstream f(pool.path(), std::ios::in | std::ios::out | std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const uint64_t slot[2] = {format::hmeh::encode_key_word(kKey), kValue};
  size_t at = std::string::npos;
  for (size_t off = 0; off + 16 <= bytes.size(); off += 16)
    if (std::memcmp(&bytes[off], slot, 16) == 0) at = off;
  ASSERT_NE(at, std::string::npos) << "the slot was not found";
  const uint64_t other = format::hmeh::encode_key_word(0x1111222233334444ull);
  f.seekp(static_cast<std::streamoff>(at));
  f.write(reinterpret_cast<const char*>(&other), 8);
  f.close();

  const CheckResult c = Table::check_pool(pool.path());
  EXPECT_FALSE(c.ok);
  try {
    Table::repair(pool.path());
    ADD_FAILURE() << "repair accepted a damaged HMEH pool";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCorruptTable) << e.what();
    EXPECT_NE(std::string(e.what()).find("gphash dump"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(Table::inspect(pool.path()).clean_shutdown) << "repair marked a damaged pool clean";
  EXPECT_FALSE(Table::check_pool(pool.path()).ok);
}

}  // namespace
}  // namespace gphash
