// HMEH's two directories and its recovery: the radix tree in the pool is read back and the flat
// directory rebuilt from it at every open (clean, recovering, read-only) with the same segments and
// global depth; what a split cut short by a crash wrote (segments and nodes the tree does not
// reach) is ignored and reused; claims cut short become tombstones, never EMPTY slots (items
// placed behind them stay reachable). Crashes at every step of a split or a doubling are swept by
// tests/crash (crash_point_test, lost_store_test); this file pins down what recovery leaves.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "format/hmeh/layout.h"
#include "gphash/table.h"
#include "indexes/hmeh/hmeh.h"
#include "indexes/hmeh/radix_tree.h"
#include "pool/pool.h"
#include "test_util.h"

namespace gphash {
namespace {

namespace fh = format::hmeh;
using testing::TempPool;

constexpr uint64_t kItems = 40000;

std::vector<uint64_t> keys(uint64_t n, uint64_t salt) {
  std::vector<uint64_t> k(n);
  for (uint64_t i = 0; i < n; ++i) k[i] = format::mix64(i + salt * 0x100000000ull) >> 1;  // never reserved
  return k;
}

void create(const std::string& path, uint32_t key_width = 8) {
  TableConfig c;
  c.key_width = key_width;
  c.value_width = 8;
  c.capacity = 16;
  c.hash_seed = 3;
  c.index = IndexKind::kHmeh;
  c.hmeh.segment_bytes = 4096;
  Table::create(path, c).close();
}

std::vector<OpStatus> run(hmeh::Index& engine, Op op, const std::vector<uint64_t>& k, std::vector<uint64_t>* out = nullptr) {
  std::vector<OpStatus> status(k.size());
  std::vector<uint64_t> values(k.begin(), k.end());
  if (out) out->assign(k.size(), 0);
  Batch b{k.size(), 8, 8, op, nullptr, k.data(), values.data(), out ? out->data() : nullptr, status.data()};
  engine.execute(b);
  return status;
}

uint64_t count(const std::vector<OpStatus>& s, OpStatus want) {
  return static_cast<uint64_t>(std::count(s.begin(), s.end(), want));
}

void mark_dirty(const std::string& path) {
  auto pool = pool::Pool::open(path, {});
  format::PoolHeader h = pool->header();
  h.clean_shutdown = 0;
  pool->write_header(h);
}

// Every key found with its value (the key itself), through a fresh engine.
void expect_all_found(pool::Pool& pool, const std::vector<uint64_t>& k, hmeh::HmehStats* stats = nullptr) {
  hmeh::EngineOptions o;
  o.threads = 2;
  auto engine = hmeh::open_engine(pool, o);
  std::vector<uint64_t> out;
  const std::vector<OpStatus> s = run(*engine, Op::kSearch, k, &out);
  EXPECT_EQ(count(s, OpStatus::kOk), k.size());
  EXPECT_TRUE(out == k) << "values differ";
  if (stats) *stats = engine->hmeh_stats();
  const engine::CheckReport r = hmeh::check_index(pool, 2, engine->item_count());
  EXPECT_TRUE(r.ok) << r.violation;
  engine->close();
}

TEST(HmehRecovery, BothDirectoriesAreRebuiltAtEveryOpen) {
  TempPool pool("hmeh-recovery");
  create(pool.path());
  const std::vector<uint64_t> k = keys(kItems, 1);
  hmeh::HmehStats loaded;
  {
    auto p = pool::Pool::open(pool.path(), {});
    hmeh::EngineOptions o;
    o.threads = 2;
    auto engine = hmeh::open_engine(*p, o);
    ASSERT_EQ(count(run(*engine, Op::kInsert, k), OpStatus::kOk), kItems);
    loaded = engine->hmeh_stats();
    engine->close();
  }
  ASSERT_GT(loaded.splits, 100u);
  ASSERT_GT(loaded.doublings, 3u);
  for (const char* open : {"clean", "recovering", "read-only"}) {
    SCOPED_TRACE(open);
    if (std::string(open) == "recovering") mark_dirty(pool.path());
    auto p = pool::Pool::open(pool.path(), {std::string(open) == "read-only", 0, false});
    hmeh::HmehStats reopened;
    expect_all_found(*p, k, &reopened);
    EXPECT_EQ(reopened.segments, loaded.segments) << "the radix tree lost or gained segments";
    EXPECT_EQ(reopened.global_depth, loaded.global_depth) << "the flat directory has another depth";
    EXPECT_GT(reopened.radix_seconds, 0);
  }
}

TEST(HmehRecovery, WhatACutShortSplitWroteIsIgnoredAndReused) {
  TempPool pool("hmeh-recovery");
  create(pool.path());
  const std::vector<uint64_t> first = keys(kItems, 2), second = keys(kItems, 3);
  {
    auto p = pool::Pool::open(pool.path(), {});
    auto engine = hmeh::open_engine(*p, {});
    ASSERT_EQ(count(run(*engine, Op::kInsert, first), OpStatus::kOk), kItems);
    engine->close();
  }
  {  // A split that wrote its segments and node but never published them: garbage outside the tree.
    auto p = pool::Pool::open(pool.path(), {});
    const hmeh::Arenas arenas(*p);
    const hmeh::RadixScan scan = hmeh::scan_radix_tree(arenas);
    std::vector<bool> live(arenas.segments.capacity()), live_node(arenas.nodes.capacity());
    for (const hmeh::LiveSegment& s : scan.segments) live[s.id] = true;
    for (uint64_t n : scan.nodes) live_node[n] = true;
    uint64_t garbage = 0;
    for (uint64_t id = 0; id < live.size(); ++id)
      if (!live[id]) {
        std::memset(arenas.segments.address(id), 0x5A, arenas.segments.unit_bytes());  // published-looking states
        ++garbage;
      }
    for (uint64_t n = 0; n < live_node.size(); ++n)
      if (!live_node[n]) std::memset(arenas.nodes.address(n), 0xA5, fh::kNodeBytes);
    ASSERT_GT(garbage, 0u);
  }
  mark_dirty(pool.path());
  {
    auto p = pool::Pool::open(pool.path(), {});
    expect_all_found(*p, first);
    auto engine = hmeh::open_engine(*p, {});
    EXPECT_EQ(engine->item_count(), kItems) << "the recount saw the garbage";
    // Splits reuse the free segments and nodes: they must be written whole, not trusted.
    ASSERT_EQ(count(run(*engine, Op::kInsert, second), OpStatus::kOk), kItems);
    EXPECT_GT(engine->hmeh_stats().splits, 10u);
    engine->close();
  }
  auto p = pool::Pool::open(pool.path(), {});
  std::vector<uint64_t> all = first;
  all.insert(all.end(), second.begin(), second.end());
  expect_all_found(*p, all);
}

TEST(HmehRecovery, AClaimCutShortBecomesATombstoneAndKeepsLaterItemsReachable) {
  TempPool pool("hmeh-recovery");
  create(pool.path());
  const std::vector<uint64_t> k = keys(5000, 4);
  {
    auto p = pool::Pool::open(pool.path(), {});
    auto engine = hmeh::open_engine(*p, {});
    ASSERT_EQ(count(run(*engine, Op::kInsert, k), OpStatus::kOk), k.size());
    engine->close();
  }
  // An item X sits one bucket past its home, so its home bucket was full when X went in. Turn an
  // item Y of that home bucket into a claim, as an erase of Y and then an insert that died after
  // its CAS would leave it: X stays reachable only if recovery makes the claim a tombstone (an
  // EMPTY slot there would stop X's lookup one bucket early).
  uint64_t y = 0;
  {
    auto p = pool::Pool::open(pool.path(), {});
    const format::HmehMeta& m = p->header().hmeh;
    const hmeh::Arenas arenas(*p);
    const uint32_t buckets = (1u << m.segment_bytes_log2) / fh::kBucketBytes;
    const fh::SegmentGeometry geo{buckets, buckets - m.stash_buckets, m.probe_buckets, m.stash_buckets, 4};
    uint64_t* claim = nullptr;
    for (const hmeh::LiveSegment& s : hmeh::scan_radix_tree(arenas).segments) {
      auto* words = reinterpret_cast<uint64_t*>(arenas.segments.address(s.id));
      for (uint32_t b = 1; b < geo.addressable && !claim; ++b)
        for (uint32_t slot = 0; slot < 4 && !claim; ++slot) {
          const uint64_t state = words[(b * 4 + slot) * 2];
          if (!fh::is_published(state)) continue;
          const uint64_t key = fh::decode_key_word(state);
          if (geo.home_bucket(fh::key_hash<1>(&key, fh::key_seed(m.hash_seed))) != b - 1) continue;
          claim = words + (b - 1) * 4 * 2;  // slot 0 of the full home bucket
        }
      if (claim) break;
    }
    ASSERT_NE(claim, nullptr) << "no item sits one bucket past its home (the test needs one)";
    ASSERT_TRUE(fh::is_published(*claim));
    y = fh::decode_key_word(*claim);
    *claim = fh::kSlotClaimed;
    format::PoolHeader h = p->header();
    h.clean_shutdown = 0;
    p->write_header(h);
  }
  std::vector<uint64_t> remaining;
  for (uint64_t key : k)
    if (key != y) remaining.push_back(key);
  ASSERT_EQ(remaining.size(), k.size() - 1);
  auto p = pool::Pool::open(pool.path(), {});
  expect_all_found(*p, remaining);
  const hmeh::Arenas arenas(*p);
  uint64_t tombstones = 0;
  const hmeh::RadixScan scan = hmeh::scan_radix_tree(arenas);
  for (const hmeh::LiveSegment& s : scan.segments) {
    const auto* words = reinterpret_cast<const uint64_t*>(arenas.segments.address(s.id));
    for (uint64_t slot = 0; slot < arenas.segments.unit_bytes() / 16; ++slot) {
      EXPECT_NE(words[slot * 2], fh::kSlotClaimed) << "a claim survived recovery";
      tombstones += words[slot * 2] == fh::kSlotTombstone;
    }
  }
  EXPECT_GE(tombstones, 1u);
}

TEST(HmehRecovery, ReservedKeysAndUnsupportedConfigurationsAreRefusedWithTypedErrors) {
  TempPool pool("hmeh-recovery");
  create(pool.path());
  {
    Table t = Table::open(pool.path());
    const std::vector<uint64_t> reserved = {~uint64_t{0}, ~uint64_t{1}, ~uint64_t{2}, 42};
    std::vector<OpStatus> status(4);
    std::vector<uint64_t> values(4, 7);
    t.execute({4, 8, 8, Op::kInsert, nullptr, reserved.data(), values.data(), nullptr, status.data()});
    EXPECT_EQ(status, (std::vector<OpStatus>{OpStatus::kReservedKey, OpStatus::kReservedKey, OpStatus::kReservedKey,
                                             OpStatus::kOk}));
    EXPECT_EQ(t.info().index, "hmeh");
  }
  OpenOptions gpu;
  gpu.engine = EngineKind::kGpu;
  try {
    Table::open(pool.path(), gpu);
    ADD_FAILURE() << "the GPU engine opened an HMEH pool";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(e.field(), "engine");
  }
  const struct {
    std::function<void(TableConfig&)> change;
    const char* field;
  } bad[] = {
      {[](TableConfig& c) { c.key_width = 32; }, "key_width"},
      {[](TableConfig& c) { c.value_width = 40, c.value_checksums = true; }, "value_checksums"},
      {[](TableConfig& c) { c.hmeh.segment_bytes = 3000; }, "segment_bytes"},
      {[](TableConfig& c) { c.hmeh.probe_buckets = 0; }, "probe_buckets"},
      {[](TableConfig& c) { c.hmeh.stash_buckets = 40; }, "stash_buckets"},
  };
  for (const auto& b : bad) {
    TempPool other("hmeh-recovery-bad");
    TableConfig c;
    c.index = IndexKind::kHmeh;
    b.change(c);
    try {
      Table::create(other.path(), c);
      ADD_FAILURE() << b.field << ": created";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      EXPECT_EQ(e.field(), b.field) << e.what();
    }
  }
}

}  // namespace
}  // namespace gphash
