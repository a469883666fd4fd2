// How the CPU-side engines share a batch out over threads (src/engines/common/batch_shards.h):
// by owner, every thread's operations in batch order; a batch of searches only, when an engine
// asks for it, in contiguous shares in batch order.
#include "engines/common/batch_shards.h"

#include <gtest/gtest.h>

#include <vector>

namespace gphash::engine {
namespace {

constexpr int kThreads = 4;
constexpr size_t kOps = 1000;

// Runs f(0), ..., f(k - 1) one after the other: the shares do not depend on the threads' timing.
auto run_serially = [](int k, auto&& f) {
  for (int t = 0; t < k; ++t) f(t);
};
uint32_t owner_of(size_t i) { return static_cast<uint32_t>((i * 7 + i / 3) % kThreads); }

struct Fixture {
  std::vector<OpStatus> status = std::vector<OpStatus>(kOps);
  std::vector<Op> ops = std::vector<Op>(kOps, Op::kSearch);
  Batch batch(bool mixed) {
    Batch b;
    b.size = kOps;
    b.key_width = 8;
    b.ops = mixed ? ops.data() : nullptr;
    b.status = status.data();
    return b;
  }
};

// Every operation once, each thread's in batch order; `by_owner` checks who runs what.
void expect_every_operation_once_in_order(BatchShards& s, bool by_owner) {
  std::vector<int> seen(kOps, 0);
  for (int t = 0; t < s.threads(); ++t) {
    size_t previous = 0;
    for (size_t p = s.next(t); p < s.end(t); ++p) {
      const size_t i = s.index(p);
      ASSERT_LT(i, kOps);
      ++seen[i];
      if (p > s.next(t)) {
        EXPECT_GT(i, previous) << "thread " << t << " runs its operations out of batch order";
      }
      previous = i;
      if (by_owner) {
        EXPECT_EQ(owner_of(i), static_cast<uint32_t>(t)) << "operation " << i;
      }
    }
  }
  for (size_t i = 0; i < kOps; ++i) EXPECT_EQ(seen[i], 1) << "operation " << i;
}

TEST(BatchShards, SearchesInOrderRunInContiguousSharesWithoutASort) {
  Fixture f;
  for (bool mixed : {false, true}) {
    const Batch b = f.batch(mixed);
    BatchShards s(b, kThreads, run_serially, owner_of, BatchShards::Searches::kInOrder);
    EXPECT_FALSE(s.writes());
    expect_every_operation_once_in_order(s, false);
    for (int t = 0; t < kThreads; ++t) {
      EXPECT_EQ(s.next(t), t * kOps / kThreads);
      for (size_t p = s.next(t); p < s.end(t); ++p) EXPECT_EQ(s.index(p), p);
    }
    EXPECT_EQ(&s.status(17), &f.status[17]);
  }
}

TEST(BatchShards, SearchesByOwnerAndBatchesThatWriteGoToTheirKeysOwners) {
  Fixture f;
  {  // searches, by owner (HMEH by hash prefix)
    const Batch b = f.batch(true);
    BatchShards s(b, kThreads, run_serially, owner_of);
    EXPECT_FALSE(s.writes());
    expect_every_operation_once_in_order(s, true);
  }
  f.ops[kOps - 1] = Op::kErase;  // one write, at the end: a scan must look at every operation
  for (auto searches : {BatchShards::Searches::kByOwner, BatchShards::Searches::kInOrder}) {
    const Batch b = f.batch(true);
    BatchShards s(b, kThreads, run_serially, owner_of, searches);
    EXPECT_TRUE(s.writes());
    expect_every_operation_once_in_order(s, true);
  }
  Batch inserts = f.batch(false);
  inserts.op = Op::kInsert;
  BatchShards s(inserts, kThreads, run_serially, owner_of, BatchShards::Searches::kInOrder);
  EXPECT_TRUE(s.writes());
  expect_every_operation_once_in_order(s, true);
}

// adds(): the inserts and upserts, which bound how many items a batch adds (the CPU engine grows
// the table by it before the batch runs).
TEST(BatchShards, CountsTheOperationsThatMayAddAnItem) {
  Fixture f;
  for (size_t i = 0; i < kOps; ++i) f.ops[i] = i % 5 == 0 ? Op::kInsert : i % 5 == 1 ? Op::kUpsert : i % 5 == 2 ? Op::kUpdate : Op::kErase;
  for (int threads : {1, kThreads}) {
    BatchShards mixed(f.batch(true), threads, run_serially, owner_of);
    EXPECT_EQ(mixed.adds(), 2 * kOps / 5) << threads << " threads";
    for (Op op : {Op::kInsert, Op::kUpsert, Op::kUpdate, Op::kSearch}) {
      Batch b = f.batch(false);
      b.op = op;
      BatchShards one_op(b, threads, run_serially, owner_of, BatchShards::Searches::kInOrder);
      EXPECT_EQ(one_op.adds(), op == Op::kInsert || op == Op::kUpsert ? kOps : 0) << threads << " threads";
    }
  }
}

}  // namespace
}  // namespace gphash::engine
