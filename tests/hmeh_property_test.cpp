// HMEH through gphash::Table against the sequential model (test_util.h): random mixed batches,
// many operations on one key per batch, for 8- and 16-byte keys with inline and heap values,
// small segments so that the tables split and double their directory again and again, with clean
// reopens and recoveries (the pool marked dirty, as a crash between batches leaves it) in between.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <memory>
#include <random>

#include "gphash/table.h"
#include "pool/pool.h"
#include "test_util.h"

namespace gphash::testing {
namespace {

struct HmehCase {
  uint32_t key_width;
  uint32_t value_width;
  HmehConfig shape;
  int threads;
  std::string label;
};

std::string name_of(const ::testing::TestParamInfo<HmehCase>& info) {
  const HmehCase& c = info.param;
  return fmt::format("k{}_v{}_seg{}_p{}s{}_t{}{}", c.key_width, c.value_width, c.shape.segment_bytes,
                     c.shape.probe_buckets, c.shape.stash_buckets, c.threads, c.label);
}

// As if the process had died between two batches: the header says "not shut down cleanly".
void mark_dirty(const std::string& path) {
  auto pool = pool::Pool::open(path, {});
  format::PoolHeader h = pool->header();
  h.clean_shutdown = 0;
  pool->write_header(h);
}

class HmehProperty : public ::testing::TestWithParam<HmehCase> {};

TEST_P(HmehProperty, MatchesSequentialModelAcrossSplitsReopensAndRecoveries) {
  const HmehCase& c = GetParam();
  TempPool pool("hmeh-property");
  std::mt19937_64 rng(c.key_width * 1000003 + c.value_width * 7919 + c.shape.segment_bytes + c.threads);
  const size_t universe = 6000;
  std::vector<std::string> keys(universe);
  for (auto& k : keys) k = random_bytes(rng, c.key_width);
  if (c.key_width == 8) {  // HMEH reserves three 8-byte keys
    for (uint64_t i = 0; i < 3; ++i) {
      const uint64_t reserved = ~i;
      std::memcpy(keys[i].data(), &reserved, 8);
    }
  }
  TableConfig config;
  config.key_width = c.key_width;
  config.value_width = c.value_width;
  config.capacity = 64;
  config.hash_seed = 42;
  config.index = IndexKind::kHmeh;
  config.hmeh = c.shape;
  OpenOptions options;
  options.threads = c.threads;
  auto table = std::make_unique<Table>(Table::create(pool.path(), config, options));
  ASSERT_EQ(table->info().index, "hmeh");
  Model model;
  uint64_t splits = 0, recoveries = 0;
  const int rounds = 48;
  for (int round = 0; round < rounds; ++round) {
    const size_t n = 1 + rng() % 3000;
    std::vector<Op> ops(n);
    std::vector<uint64_t> kwords(n * c.key_width / 8);
    std::string vbuf(n * c.value_width, '\0'), out(n * c.value_width, '\0');
    std::vector<OpStatus> status(n);
    const int insert_weight = round < rounds * 3 / 8 ? 6 : 2;  // grow first, then churn
    for (size_t i = 0; i < n; ++i) {
      const int r = static_cast<int>(rng() % (insert_weight + 6));
      ops[i] = r < insert_weight ? (rng() % 2 ? Op::kInsert : Op::kUpsert)
                                 : static_cast<Op>(std::array<int, 6>{0, 0, 3, 4, 1, 2}[r - insert_weight]);
      const std::string& k = keys[rng() % universe];
      std::memcpy(reinterpret_cast<char*>(kwords.data()) + i * c.key_width, k.data(), c.key_width);
      const std::string v = random_bytes(rng, c.value_width);
      std::memcpy(vbuf.data() + i * c.value_width, v.data(), c.value_width);
    }
    Batch b;
    b.size = n;
    b.key_width = c.key_width;
    b.value_width = c.value_width;
    b.ops = ops.data();
    b.keys = kwords.data();
    b.values = vbuf.data();
    b.values_out = out.data();
    b.status = status.data();
    table->execute(b);
    for (size_t i = 0; i < n; ++i) {
      const std::string key(reinterpret_cast<const char*>(kwords.data()) + i * c.key_width, c.key_width);
      const std::string value(vbuf.data() + i * c.value_width, c.value_width);
      std::string found;
      const bool reserved = c.key_width == 8 && (key == keys[0] || key == keys[1] || key == keys[2]);
      const OpStatus expected = reserved ? OpStatus::kReservedKey : model.apply(ops[i], key, value, &found);
      ASSERT_EQ(status[i], expected) << "round " << round << " index " << i << " op " << to_string(ops[i]);
      if (ops[i] == Op::kSearch && expected == OpStatus::kOk) {
        ASSERT_TRUE(std::string(out.data() + i * c.value_width, c.value_width) == found)
            << "value differs, round " << round << " index " << i;
      }
    }
    ASSERT_EQ(table->size(), model.size()) << "round " << round;
    splits += table->info().resizes;
    if (round % 8 == 3) {  // a clean close and reopen
      table.reset();
      table = std::make_unique<Table>(Table::open(pool.path(), options));
      ASSERT_FALSE(table->info().recovered);
      ASSERT_EQ(table->size(), model.size());
    } else if (round % 8 == 7) {  // recovery: the directories rebuilt, the items recounted
      table.reset();
      mark_dirty(pool.path());
      table = std::make_unique<Table>(Table::open(pool.path(), options));
      ASSERT_TRUE(table->info().recovered);
      ASSERT_EQ(table->size(), model.size());
      ++recoveries;
    }
  }
  EXPECT_GT(splits, 0u) << "the test should cross segment splits";
  EXPECT_GT(recoveries, 0u);
  const CheckResult check = table->check();
  EXPECT_TRUE(check.ok) << check.violation;
  EXPECT_EQ(check.items, model.size());
  expect_table_holds_model(*table, model, c.key_width, c.value_width);
}

std::vector<HmehCase> cases() {
  std::vector<HmehCase> out;
  const HmehConfig small{4096, 4, 4}, tight{4096, 1, 0}, stashy{4096, 2, 2}, standard{16384, 4, 4};
  for (uint32_t kw : {8u, 16u})
    for (uint32_t vw : {8u, 5u, 40u}) {
      out.push_back({kw, vw, small, 3, ""});
      out.push_back({kw, vw, small, 1, ""});
    }
  // Placement extremes: no stash and one probe bucket (splits at a low load), a small stash.
  out.push_back({8, 8, tight, 2, ""});
  out.push_back({16, 24, tight, 2, ""});
  out.push_back({8, 16, stashy, 3, ""});
  out.push_back({16, 8, stashy, 3, ""});
  out.push_back({8, 8, standard, 2, ""});
  out.push_back({16, 40, standard, 2, ""});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Configurations, HmehProperty, ::testing::ValuesIn(cases()), name_of);

}  // namespace
}  // namespace gphash::testing
