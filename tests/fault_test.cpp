// Faults beyond a kill (issue 15): a file system that fills up in the middle of a resize or a heap
// growth. Runs on a small tmpfs that tests/small_tmpfs.sh mounts and names in GPHASH_SMALL_TMPFS
// (skipped without it). Each case loads until the pool cannot grow, then checks that the failure
// was a per-operation status, that every acknowledged write is there, and that the pool checks
// clean and reopens.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <string>
#include <vector>

#include "gphash/table.h"
#include "test_util.h"

namespace gphash {
namespace {

using namespace testing::batches;

std::string small_tmpfs() {
  const char* dir = std::getenv("GPHASH_SMALL_TMPFS");
  return dir ? dir : "";
}

struct Filled {
  std::vector<uint64_t> acknowledged;
  OpStatus failure = OpStatus::kOk;
};

Filled fill_until_full(const std::string& path, uint32_t value_width, EngineKind engine,
                       IndexKind index = IndexKind::kGphash, uint64_t reserve = 0) {
  OpenOptions o;
  o.engine = engine;
  o.reserve_pool_bytes = reserve;
  TableConfig config{8, value_width, {}, 1024, 11};
  config.index = index;
  Table t = Table::create(path, config, o);
  Filled f;
  for (uint64_t first = 1; f.failure == OpStatus::kOk && first < (uint64_t{1} << 32); first += 20000) {
    const auto keys = key_range(first, 20000);
    const auto st = run(t, Op::kInsert, keys);
    for (size_t i = 0; i < keys.size(); ++i) {
      if (st[i] == OpStatus::kOk)
        f.acknowledged.push_back(keys[i]);
      else if (f.failure == OpStatus::kOk)
        f.failure = st[i];
    }
  }
  return f;
}

void expect_full_pool_intact(const std::string& dir, uint32_t value_width, OpStatus expected_failure,
                             IndexKind index = IndexKind::kGphash, uint64_t reserve = 0) {
  const std::string path = dir + "/fault-" + std::to_string(value_width);
  const Filled f = fill_until_full(path, value_width, EngineKind::kCpu, index, reserve);
  EXPECT_EQ(f.failure, expected_failure) << to_string(f.failure);
  ASSERT_GT(f.acknowledged.size(), 1000u);
  const CheckResult c = Table::check_pool(path);
  EXPECT_TRUE(c.ok) << c.violation;
  EXPECT_EQ(c.items, f.acknowledged.size());
  {
    Table t = Table::open(path);
    EXPECT_FALSE(t.info().recovered) << "the failure left the pool dirty";
    EXPECT_EQ(t.size(), f.acknowledged.size());
    expect_present(t, f.acknowledged);
    // Erasing makes room again: the pool is usable, not wedged.
    const std::vector<uint64_t> some(f.acknowledged.begin(), f.acknowledged.begin() + 100);
    run(t, Op::kErase, some);
    EXPECT_EQ(run(t, Op::kInsert, some)[0], OpStatus::kOk);
  }
  std::remove(path.c_str());
}

// A reservation the file system cannot hold fails the create, typed, and leaves no file.
TEST(FullFileSystem, ReservationLargerThanTheFileSystemIsRefusedAtCreate) {
  if (small_tmpfs().empty()) GTEST_SKIP() << "run through tests/small_tmpfs.sh";
  const std::string path = small_tmpfs() + "/reserve";
  OpenOptions o;
  o.reserve_pool_bytes = uint64_t{64} << 20;  // the file system has 24 MiB
  try {
    Table::create(path, {8, 8, {}, 1024, 11}, o);
    ADD_FAILURE() << "a 64 MiB reservation on a 24 MiB file system was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNoSpace) << e.what();
    EXPECT_EQ(e.field(), "reserve_pool_bytes");
  }
  const std::string dir = small_tmpfs();
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()), 0)
      << "the refused create left a file";
  o.reserve_pool_bytes = uint64_t{8} << 20;  // one that fits is taken
  Table t = Table::create(path, {8, 8, {}, 1024, 11}, o);
  EXPECT_EQ(run(t, Op::kInsert, key_range(1, 1000))[0], OpStatus::kOk);
  t.close();
  std::remove(path.c_str());
}

TEST(FullFileSystem, ResizeThatFindsNoSpaceFailsOnlyTheInsertsThatNeedIt) {
  if (small_tmpfs().empty()) GTEST_SKIP() << "run through tests/small_tmpfs.sh";
  expect_full_pool_intact(small_tmpfs(), 8, OpStatus::kTableFull);
}

// A pool that outgrows its reservation finds the full file system at the growth, as one without
// does: a per-operation status, never a SIGBUS at a later store (the CPU engine maps the levels and
// heap chunks inside the reservation without faulting them in, and must populate those past it).
TEST(FullFileSystem, GrowthPastAReservationFailsOnlyTheWritesThatNeedIt) {
  if (small_tmpfs().empty()) GTEST_SKIP() << "run through tests/small_tmpfs.sh";
  expect_full_pool_intact(small_tmpfs(), 8, OpStatus::kTableFull, IndexKind::kGphash, uint64_t{6} << 20);
  expect_full_pool_intact(small_tmpfs(), 512, OpStatus::kHeapFull, IndexKind::kGphash, uint64_t{6} << 20);
}

TEST(FullFileSystem, HeapGrowthThatFindsNoSpaceFailsOnlyTheWritesThatNeedIt) {
  if (small_tmpfs().empty()) GTEST_SKIP() << "run through tests/small_tmpfs.sh";
  expect_full_pool_intact(small_tmpfs(), 512, OpStatus::kHeapFull);
}

// HMEH's segment arena grows without populating its chunk; each segment is populated when a split
// takes it. A full file system must still fail the split (kTableFull), not kill the process with
// a SIGBUS on its first store.
TEST(FullFileSystem, HmehSplitThatFindsNoSpaceFailsOnlyTheInsertsThatNeedIt) {
  if (small_tmpfs().empty()) GTEST_SKIP() << "run through tests/small_tmpfs.sh";
  expect_full_pool_intact(small_tmpfs(), 8, OpStatus::kTableFull, IndexKind::kHmeh);
}

}  // namespace
}  // namespace gphash
