// Searching batches from several threads at once on one table (the facade lets them overlap;
// writing batches are serialised): every result must be right, on both engines.
#include <gtest/gtest.h>

#include <array>
#include <thread>
#include <vector>

#include "gphash/table.h"
#include "test_util.h"

namespace gphash {
namespace {

class ConcurrentSearches : public ::testing::TestWithParam<EngineKind> {};

TEST_P(ConcurrentSearches, OverlappingSearchBatchesAllSeeTheTable) {
  if (GetParam() == EngineKind::kGpu && !testing::have_gpu()) GTEST_SKIP() << "no GPU engine here";
  testing::TempPool pool("concurrent");
  OpenOptions o;
  o.engine = GetParam();
  Table t = Table::create(pool.path(), {8, 24, {2, 2, 8}, 1 << 12, 5}, o);
  const size_t n = 200000;
  std::vector<uint64_t> keys(n);
  std::vector<std::array<uint64_t, 3>> values(n);
  for (size_t i = 0; i < n; ++i) keys[i] = i * 0x9E3779B97F4A7C15ull >> 3, values[i] = {i, ~i, i * 3};
  std::vector<OpStatus> status(n);
  Batch load{n, 8, 24, Op::kInsert, nullptr, keys.data(), values.data(), nullptr, status.data()};
  t.execute(load);
  std::vector<std::thread> readers;
  std::vector<int> errors(4, 0);
  for (int r = 0; r < 4; ++r)
    readers.emplace_back([&, r] {
      for (int round = 0; round < 5; ++round) {
        const size_t from = (r * 37 + round * 11) % 7 * (n / 8), count = n / 8;
        std::vector<std::array<uint64_t, 3>> out(count);
        std::vector<OpStatus> st(count);
        Batch b{count, 8, 24, Op::kSearch, nullptr, keys.data() + from, nullptr, out.data(), st.data()};
        t.execute(b);
        for (size_t i = 0; i < count; ++i)
          if (st[i] != OpStatus::kOk || out[i] != values[from + i]) ++errors[r];
      }
    });
  for (auto& th : readers) th.join();
  for (int e : errors) EXPECT_EQ(e, 0);
}

INSTANTIATE_TEST_SUITE_P(Engines, ConcurrentSearches, ::testing::Values(EngineKind::kCpu, EngineKind::kGpu),
                         [](const ::testing::TestParamInfo<EngineKind>& i) {
                           return i.param == EngineKind::kGpu ? std::string("gpu") : std::string("cpu");
                         });

}  // namespace
}  // namespace gphash
