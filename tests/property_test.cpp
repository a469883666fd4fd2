// Random operation sequences against the sequential model, for every shape and key width, with
// inline and heap values, across resizes and reopens. Batches contain several operations on the
// same key, so the per-key batch-order semantics are checked exactly.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gphash/table.h"
#include "test_util.h"

namespace gphash {
namespace {

using testing::Model;
using testing::TempPool;

struct PropertyCase {
  TableShape shape;
  uint32_t key_width;
  uint32_t value_width;
  int threads;
};

std::string case_name(const ::testing::TestParamInfo<PropertyCase>& info) {
  const PropertyCase& c = info.param;
  return std::to_string(c.shape.levels) + "L" + std::to_string(c.shape.hashes) + "H" + std::to_string(c.shape.slots) +
         "S_k" + std::to_string(c.key_width) + "_v" + std::to_string(c.value_width) + "_t" + std::to_string(c.threads);
}

class PropertyTest : public ::testing::TestWithParam<PropertyCase> {};

TEST_P(PropertyTest, MatchesSequentialModelAcrossResizesAndReopens) {
  const PropertyCase c = GetParam();
  TempPool pool("property");
  std::mt19937_64 rng(c.key_width * 1000003 + c.value_width * 7919 + c.shape.levels * 131 + c.threads);
  // A small universe makes repeats, duplicates within a batch and deletes of present keys common.
  const size_t universe = 6000;
  std::vector<std::string> keys(universe);
  for (auto& k : keys) k = testing::random_bytes(rng, c.key_width);
  if (c.key_width == 8) {  // reserved keys must be refused, not stored
    uint64_t reserved[2] = {~uint64_t{0}, ~uint64_t{1}};
    std::memcpy(keys[0].data(), &reserved[0], 8);
    std::memcpy(keys[1].data(), &reserved[1], 8);
  }
  TableConfig config{c.key_width, c.value_width, c.shape, 64, 42};
  OpenOptions options;
  options.threads = c.threads;
  auto table = std::make_unique<Table>(Table::create(pool.path(), config, options));
  Model model;
  uint64_t resizes_seen = 0;
  for (int round = 0; round < 40; ++round) {
    const size_t n = 1 + rng() % 3000;
    std::vector<Op> ops(n);
    std::string kbuf(n * c.key_width, '\0'), vbuf(n * c.value_width, '\0'), out(n * c.value_width, '\0');
    std::vector<OpStatus> status(n);
    // Early rounds insert more, later ones mix everything.
    const int insert_weight = round < 15 ? 6 : 2;
    for (size_t i = 0; i < n; ++i) {
      int r = static_cast<int>(rng() % (insert_weight + 6));
      ops[i] = r < insert_weight ? (rng() % 2 ? Op::kInsert : Op::kUpsert)
                                 : static_cast<Op>(std::array<int, 6>{0, 0, 3, 4, 1, 2}[r - insert_weight]);
      const std::string& k = keys[rng() % universe];
      std::memcpy(kbuf.data() + i * c.key_width, k.data(), c.key_width);
      std::string v = testing::random_bytes(rng, c.value_width);
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
    table->execute(b);
    for (size_t i = 0; i < n; ++i) {
      std::string key(kbuf.data() + i * c.key_width, c.key_width);
      std::string value(vbuf.data() + i * c.value_width, c.value_width);
      OpStatus expected;
      std::string found;
      if (c.key_width == 8 && (key == keys[0] || key == keys[1])) {
        expected = OpStatus::kReservedKey;
      } else {
        expected = model.apply(ops[i], key, value, &found);
      }
      ASSERT_EQ(status[i], expected) << "round " << round << " index " << i << " op " << to_string(ops[i]);
      if (ops[i] == Op::kSearch && expected == OpStatus::kOk) {
        ASSERT_EQ(std::string(out.data() + i * c.value_width, c.value_width), found) << "round " << round << " index " << i;
      }
    }
    ASSERT_EQ(table->size(), model.size()) << "round " << round;
    resizes_seen += table->info().resizes;
    if (round % 7 == 6) {  // reopen: everything must survive a clean close
      table.reset();
      table = std::make_unique<Table>(Table::open(pool.path(), options));
      ASSERT_EQ(table->size(), model.size());
      ASSERT_FALSE(table->info().recovered);
    }
  }
  EXPECT_GT(resizes_seen, 0u) << "the test should cross resizes";
  CheckResult check = table->check();
  EXPECT_TRUE(check.ok) << check.violation;
  // Every key of the model is found with its value.
  const size_t m = model.size();
  std::string kbuf, out(m * c.value_width, '\0');
  std::vector<std::string> want;
  for (const auto& [k, v] : model.map()) {
    kbuf += k;
    want.push_back(v);
  }
  std::vector<OpStatus> status(m);
  Batch b;
  b.size = m;
  b.key_width = c.key_width;
  b.value_width = c.value_width;
  b.keys = kbuf.data();
  b.values_out = out.data();
  b.status = status.data();
  table->execute(b);
  for (size_t i = 0; i < m; ++i) {
    ASSERT_EQ(status[i], OpStatus::kOk);
    ASSERT_EQ(std::string(out.data() + i * c.value_width, c.value_width), want[i]);
  }
}

std::vector<PropertyCase> all_cases() {
  std::vector<PropertyCase> cases;
  for (TableShape shape : {TableShape{2, 2, 8}, TableShape{4, 2, 4}, TableShape{1, 4, 8}})
    for (uint32_t kw : {8u, 16u, 32u})
      for (uint32_t vw : {8u, 5u, 40u})
        cases.push_back({shape, kw, vw, vw == 5 ? 1 : 3});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllConfigurations, PropertyTest, ::testing::ValuesIn(all_cases()), case_name);

}  // namespace
}  // namespace gphash
