// The property test body shared by the CPU and GPU test binaries: random batches (mixed
// operations, many on the same key) against the sequential model, across resizes and reopens.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gphash/table.h"
#include "test_util.h"

namespace gphash::testing {

struct PropertyCase {
  TableShape shape;
  uint32_t key_width;
  uint32_t value_width;
  OpenOptions options;
  std::string label;
};

inline std::string case_name(const ::testing::TestParamInfo<PropertyCase>& info) {
  const PropertyCase& c = info.param;
  return std::to_string(c.shape.levels) + "L" + std::to_string(c.shape.hashes) + "H" + std::to_string(c.shape.slots) +
         "S_k" + std::to_string(c.key_width) + "_v" + std::to_string(c.value_width) + "_" + c.label;
}

// Runs `rounds` random batches of up to `max_batch` operations over `universe` keys.
inline void run_property_case(const PropertyCase& c, int rounds = 40, size_t max_batch = 3000, size_t universe = 6000) {
  TempPool pool("property");
  std::mt19937_64 rng(c.key_width * 1000003 + c.value_width * 7919 + c.shape.levels * 131 + c.label.size());
  std::vector<std::string> keys(universe);
  for (auto& k : keys) k = random_bytes(rng, c.key_width);
  if (c.key_width == 8) {  // reserved keys must be refused, not stored
    uint64_t reserved[2] = {~uint64_t{0}, ~uint64_t{1}};
    std::memcpy(keys[0].data(), &reserved[0], 8);
    std::memcpy(keys[1].data(), &reserved[1], 8);
  }
  TableConfig config{c.key_width, c.value_width, c.shape, 64, 42};
  auto table = std::make_unique<Table>(Table::create(pool.path(), config, c.options));
  Model model;
  uint64_t resizes_seen = 0;
  for (int round = 0; round < rounds; ++round) {
    const size_t n = 1 + rng() % max_batch;
    std::vector<Op> ops(n);
    std::vector<uint64_t> kwords(n * c.key_width / 8);
    std::string vbuf(n * c.value_width, '\0'), out(n * c.value_width, '\0');
    std::vector<OpStatus> status(n);
    const int insert_weight = round < rounds * 3 / 8 ? 6 : 2;  // early rounds grow the table
    for (size_t i = 0; i < n; ++i) {
      const int r = static_cast<int>(rng() % (insert_weight + 6));
      ops[i] = r < insert_weight ? (rng() % 2 ? Op::kInsert : Op::kUpsert)
                                 : static_cast<Op>(std::array<int, 6>{0, 0, 3, 4, 1, 2}[r - insert_weight]);
      const std::string& k = keys[rng() % universe];
      std::memcpy(reinterpret_cast<char*>(kwords.data()) + i * c.key_width, k.data(), c.key_width);
      std::string v = random_bytes(rng, c.value_width);
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
      std::string key(reinterpret_cast<const char*>(kwords.data()) + i * c.key_width, c.key_width);
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
        ASSERT_TRUE(std::string(out.data() + i * c.value_width, c.value_width) == found) << "value differs, round " << round << " index " << i;
      }
    }
    ASSERT_EQ(table->size(), model.size()) << "round " << round;
    resizes_seen += table->info().resizes;
    if (round % 7 == 6) {  // reopen: everything must survive a clean close
      table.reset();
      table = std::make_unique<Table>(Table::open(pool.path(), c.options));
      ASSERT_EQ(table->size(), model.size());
      ASSERT_FALSE(table->info().recovered);
    }
  }
  EXPECT_GT(resizes_seen, 0u) << "the test should cross resizes";
  CheckResult check = table->check();
  EXPECT_TRUE(check.ok) << check.violation;
  expect_table_holds_model(*table, model, c.key_width, c.value_width);
}

inline std::vector<PropertyCase> cases_for(const std::vector<std::pair<OpenOptions, std::string>>& engines) {
  std::vector<PropertyCase> cases;
  for (const auto& [options, label] : engines)
    for (TableShape shape : {TableShape{2, 2, 8}, TableShape{4, 2, 4}, TableShape{1, 4, 8}})
      for (uint32_t kw : {8u, 16u, 32u})
        for (uint32_t vw : {8u, 5u, 40u}) cases.push_back({shape, kw, vw, options, label});
  return cases;
}

}  // namespace gphash::testing
