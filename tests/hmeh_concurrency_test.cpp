// HMEH under concurrency: engine threads that share every segment and bucket (keys are spread
// over threads by hash bits the directory and buckets do not use), so inserts race for slots by
// CAS, writers meet splits of their segment, readers run lock-free through splits and directory
// doublings; and searching batches that run together. Every batch must still give the results of
// running it sequentially (gphash/ops.h), checked against the model.
//
// scripts/tsan.sh runs this under ThreadSanitizer (the engine then uses std::thread, parallel.h);
// the normal build runs it too. GPHASH_HMEH_STRESS_ROUNDS scales it (default 24 rounds).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <unordered_set>

#include "gphash/table.h"
#include "indexes/hmeh/hmeh.h"
#include "pool/pool.h"
#include "test_util.h"

namespace gphash::testing {
namespace {

int rounds() {
  const char* v = std::getenv("GPHASH_HMEH_STRESS_ROUNDS");
  return v && *v ? std::max(1, std::atoi(v)) : 24;
}

struct StressCase {
  uint32_t key_width, value_width;
};

class HmehConcurrency : public ::testing::TestWithParam<StressCase> {};

TEST_P(HmehConcurrency, ThreadsSharingSegmentsThroughSplitsMatchTheSequentialModel) {
  const StressCase c = GetParam();
  TempPool pool("hmeh-concurrency");
  TableConfig config;
  config.key_width = c.key_width;
  config.value_width = c.value_width;
  config.capacity = 16;
  config.hash_seed = 5;
  config.index = IndexKind::kHmeh;
  config.hmeh.segment_bytes = 4096;  // splits and doublings all the time
  Table::create(pool.path(), config).close();
  auto p = pool::Pool::open(pool.path(), {});
  hmeh::EngineOptions options;
  options.threads = 4;  // more threads than this machine's cores: more interleavings
  options.shard_by_prefix = false;
  auto engine = hmeh::open_engine(*p, options);

  std::mt19937_64 rng(c.key_width * 131 + c.value_width);
  const size_t universe = 40000;
  std::vector<std::string> keys(universe);
  for (auto& k : keys) {
    k = random_bytes(rng, c.key_width);
    if (c.key_width == 8) k[7] &= 0x7F;  // no reserved 8-byte key
  }
  Model model;
  for (int round = 0; round < rounds(); ++round) {
    const size_t n = 2000 + rng() % 6000;
    std::vector<Op> ops(n);
    std::string kbuf(n * c.key_width, '\0'), vbuf(n * c.value_width, '\0'), out(n * c.value_width, '\0');
    std::vector<OpStatus> status(n);
    const int insert_weight = round < rounds() / 2 ? 8 : 3;  // grow first, then churn
    for (size_t i = 0; i < n; ++i) {
      const int r = static_cast<int>(rng() % (insert_weight + 5));
      ops[i] = r < insert_weight ? (rng() % 2 ? Op::kInsert : Op::kUpsert)
                                 : std::array<Op, 5>{Op::kSearch, Op::kSearch, Op::kUpdate, Op::kErase,
                                                     Op::kErase}[r - insert_weight];
      std::memcpy(kbuf.data() + i * c.key_width, keys[rng() % universe].data(), c.key_width);
      const std::string v = random_bytes(rng, c.value_width);
      std::memcpy(vbuf.data() + i * c.value_width, v.data(), c.value_width);
    }
    Batch b;
    b.size = n;
    b.key_width = c.key_width;
    b.value_width = c.value_width;
    b.ops = ops.data();
    b.keys = kbuf.data();
    b.values = vbuf.data();
    b.values_out = out.data();
    b.status = status.data();
    engine->execute(b);
    for (size_t i = 0; i < n; ++i) {
      std::string found;
      const OpStatus want = model.apply(ops[i], kbuf.substr(i * c.key_width, c.key_width),
                                        vbuf.substr(i * c.value_width, c.value_width), &found);
      ASSERT_EQ(status[i], want) << "round " << round << " op " << i << " (" << to_string(ops[i]) << ")";
      if (ops[i] == Op::kSearch && want == OpStatus::kOk) {
        ASSERT_EQ(out.substr(i * c.value_width, c.value_width), found) << "round " << round << " op " << i;
      }
    }
    ASSERT_EQ(engine->item_count(), model.size()) << "round " << round;
  }
  const hmeh::HmehStats stats = engine->hmeh_stats();
  EXPECT_GT(stats.splits, 20u);
  EXPECT_GT(stats.doublings, 2u);
  const engine::CheckReport check = hmeh::check_index(*p, 2, engine->item_count());
  EXPECT_TRUE(check.ok) << check.violation;

  // Searching batches of several callers at once (the facade lets them overlap).
  std::vector<std::string> present;
  for (const auto& [k, v] : model.map()) present.push_back(k);
  std::vector<std::thread> readers;
  std::vector<uint64_t> wrong(3, 0);
  for (int r = 0; r < 3; ++r)
    readers.emplace_back([&, r] {
      const size_t n = present.size();
      std::string kbuf(n * c.key_width, '\0'), out(n * c.value_width, '\0');
      for (size_t i = 0; i < n; ++i) std::memcpy(kbuf.data() + i * c.key_width, present[(i + r * 977) % n].data(), c.key_width);
      std::vector<OpStatus> status(n);
      Batch b;
      b.size = n;
      b.key_width = c.key_width;
      b.value_width = c.value_width;
      b.op = Op::kSearch;
      b.keys = kbuf.data();
      b.values_out = out.data();
      b.status = status.data();
      engine->execute(b);
      for (size_t i = 0; i < n; ++i)
        wrong[r] += status[i] != OpStatus::kOk ||
                    out.compare(i * c.value_width, c.value_width, model.map().at(present[(i + r * 977) % n])) != 0;
    });
  for (std::thread& t : readers) t.join();
  for (uint64_t w : wrong) EXPECT_EQ(w, 0u);
  engine->close();
}

// Many more threads than cores loading a tiny table: splits run side by side and run out of
// segment ids together, so several threads reach the arena's growth at once. The arena must grow
// once for them, not once each: a chunk is as large as the whole arena before it, so k threads
// growing in turn multiplied it by 2^k (16 threads loading 16 M keys went past 64 GB). The segment
// arena is bounded exactly: every id taken is a live segment or one a split retired (reused only
// between batches), so before any growth the arena held at most live + splits ids, and one growth
// doubles it. The pool is capped so that a regression fails here rather than filling memory.
TEST(HmehConcurrencyGrowth, ManyThreadsSplittingATinyTableGrowTheArenaOnce) {
  TempPool pool("hmeh-growth");
  TableConfig config;
  config.key_width = 8;
  config.value_width = 8;
  config.capacity = 16;
  config.hash_seed = 11;
  config.index = IndexKind::kHmeh;
  config.hmeh.segment_bytes = 4096;  // many splits and arena growths
  Table::create(pool.path(), config).close();
  pool::OpenOptions open;
  open.max_size = uint64_t{1} << 30;
  auto p = pool::Pool::open(pool.path(), open);
  hmeh::EngineOptions options;
  options.threads = 32;  // 16 times this machine's cores
  auto engine = hmeh::open_engine(*p, options);

  const size_t n = 400000, batch = 100000;
  std::mt19937_64 rng(17);
  std::vector<uint64_t> keys;
  {
    std::unordered_set<uint64_t> seen;
    while (keys.size() < n) {
      const uint64_t k = rng() & ~(uint64_t{1} << 63);  // no reserved 8-byte key
      if (seen.insert(k).second) keys.push_back(k);
    }
  }
  auto value_of = [](uint64_t k) { return k * 0x9E3779B97F4A7C15ull + 1; };
  std::vector<uint64_t> values(n), out(n);
  for (size_t i = 0; i < n; ++i) values[i] = value_of(keys[i]);
  std::vector<OpStatus> status(n);
  auto run = [&](Op op, size_t first, size_t count) {
    Batch b;
    b.size = count;
    b.key_width = 8;
    b.value_width = 8;
    b.op = op;
    b.keys = keys.data() + first;
    b.values = values.data() + first;
    b.values_out = out.data() + first;
    b.status = status.data() + first;
    engine->execute(b);
  };
  for (size_t first = 0; first < n; first += batch) {
    run(Op::kInsert, first, std::min(batch, n - first));
    for (size_t i = first; i < std::min(n, first + batch); ++i)
      ASSERT_EQ(status[i], OpStatus::kOk)
          << "insert " << i << ": " << to_string(status[i]) << " (pool " << p->file_size() << " bytes)";
  }
  EXPECT_EQ(engine->item_count(), n);

  const hmeh::HmehStats stats = engine->hmeh_stats();
  const format::HmehMeta& m = p->header().hmeh;
  const uint64_t arena = m.segment_first_chunk * ((uint64_t{1} << m.segment_chunk_count) - 1);
  const uint64_t bound = std::max<uint64_t>(m.segment_first_chunk, 2 * (stats.segments + stats.splits));
  EXPECT_LE(arena, bound) << stats.segments << " live segments, " << stats.splits << " splits, "
                          << m.segment_chunk_count << " chunks";
  // And the pool as a whole: 400 K items of 16 bytes need a few MiB; the arena at its bound ~40.
  EXPECT_LE(p->file_size(), uint64_t{128} << 20);

  run(Op::kSearch, 0, n);
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += status[i] != OpStatus::kOk || out[i] != values[i];
  EXPECT_EQ(wrong, 0u);
  const engine::CheckReport check = hmeh::check_index(*p, 2, engine->item_count());
  EXPECT_TRUE(check.ok) << check.violation;
  engine->close();
}

INSTANTIATE_TEST_SUITE_P(Widths, HmehConcurrency,
                         ::testing::Values(StressCase{8, 8}, StressCase{16, 40}, StressCase{8, 24}, StressCase{16, 6}),
                         [](const ::testing::TestParamInfo<StressCase>& i) {
                           return fmt::format("k{}_v{}", i.param.key_width, i.param.value_width);
                         });

}  // namespace
}  // namespace gphash::testing
