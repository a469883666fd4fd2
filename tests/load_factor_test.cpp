// The load factor a table reaches before its first resize. The issue asks for at least 90% with
// the default shape (the GPHash paper reports up to 92%); least-loaded placement alone stops near
// 85% on large tables, and displacement of one item carries it further.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "gphash/table.h"
#include "test_util.h"

namespace gphash {
namespace {

double load_factor_at_first_resize(TableShape shape, uint64_t capacity, uint64_t* displacements) {
  testing::TempPool pool("lf");
  Table table = Table::create(pool.path(), {8, 8, shape, capacity, 7});
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

}  // namespace
}  // namespace gphash
