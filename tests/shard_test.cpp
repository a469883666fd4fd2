// Sharded tables (OpenOptions::shards): a batch on several shards means exactly what it means on
// one table; the set reopens whole, recovers per shard, and refuses a wrong count, a missing shard,
// a shard of another set, and a shard opened alone. Built twice: shard_test runs the shards on the
// CPU engine (CI), gpu_shard_test (GPHASH_SHARD_TEST_GPU) runs 2 to 4 shards on GPU 0 and skips
// without a GPU.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <random>

#include "gphash/table.h"
#include "table/shard_set.h"
#include "test_util.h"
#ifdef GPHASH_SHARD_TEST_GPU
#include <cuda_runtime.h>
#endif

namespace gphash {
namespace {

using testing::Model;
using testing::TempPool;
using testing::batches::expect_error;

#ifdef GPHASH_SHARD_TEST_GPU
#define SHARDED_SUITE GpuSharded  // ctest -R GpuSharded
constexpr EngineKind kEngine = EngineKind::kGpu;
#define SKIP_WITHOUT_ENGINE() \
  if (!testing::have_gpu()) GTEST_SKIP() << "no usable GPU"
#else
#define SHARDED_SUITE Sharded
constexpr EngineKind kEngine = EngineKind::kCpu;
#define SKIP_WITHOUT_ENGINE() (void)0
#endif

// A sharded pool name whose shards (and snapshot files) are removed on destruction.
class ShardedPool {
 public:
  ShardedPool() : base_("sharded") {}
  ~ShardedPool() {
    for (uint32_t k = 0; k < 8; ++k) std::remove(shard_pool(base_.path(), k).c_str());
  }
  const std::string& path() const { return base_.path(); }
  std::string shard(uint32_t k) const { return shard_pool(path(), k); }

 private:
  TempPool base_;
};

OpenOptions options(uint32_t shards) {
  OpenOptions o;
  o.engine = kEngine;
  o.threads = 2;
  o.shards.assign(shards, 0);  // every shard on GPU 0 (the GPU build), or on the CPU engine
  return o;
}

TableConfig config(uint32_t key_width, uint32_t value_width) {
  TableConfig c;
  c.key_width = key_width;
  c.value_width = value_width;
  c.capacity = 4096;  // small, so the random batches resize some shards
  return c;
}

using Executor = std::function<void(Table&, const Batch&)>;
void execute_on_host(Table& t, const Batch& b) { t.execute(b); }

// One random mixed batch over a small key universe (many duplicate keys per batch), run on the
// table (by `execute`) and checked entry by entry against the model run one operation at a time.
void run_random_batch(Table& t, Model& model, std::mt19937_64& rng, uint32_t kw, uint32_t vw, size_t n,
                      uint64_t universe, const Executor& execute = execute_on_host) {
  std::vector<uint64_t> key_words(n * kw / 8);
  std::vector<Op> ops(n);
  std::string values(n * vw, '\0'), out(n * vw, '\0');
  std::vector<OpStatus> status(n);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t id = rng() % universe;
    for (uint32_t w = 0; w < kw / 8; ++w) key_words[i * kw / 8 + w] = id * 0x9E3779B97F4A7C15ull + w + 1;
    ops[i] = static_cast<Op>(rng() % 5);
    const std::string v = testing::random_bytes(rng, vw);
    std::memcpy(values.data() + i * vw, v.data(), vw);
  }
  Batch b;
  b.size = n;
  b.key_width = kw;
  b.value_width = vw;
  b.ops = ops.data();
  b.keys = key_words.data();
  b.values = values.data();
  b.values_out = out.data();
  b.status = status.data();
  execute(t, b);
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) {
    const std::string key(reinterpret_cast<const char*>(key_words.data()) + i * kw, kw);
    std::string expected_value;
    const OpStatus expected = model.apply(ops[i], key, values.substr(i * vw, vw), &expected_value);
    bool ok = status[i] == expected;
    if (ok && ops[i] == Op::kSearch && expected == OpStatus::kOk) ok = out.compare(i * vw, vw, expected_value) == 0;
    if (!ok && ++wrong <= 5)
      ADD_FAILURE() << "entry " << i << " (" << to_string(ops[i]) << "): " << to_string(status[i]) << ", expected "
                    << to_string(expected);
  }
  EXPECT_EQ(wrong, 0u);
}

// Every item of the table, exported: exactly the model's.
void expect_items(Table& t, const Model& model) {
  const uint32_t kw = t.key_width(), vw = t.value_width();
  ExportCursor cursor;
  std::string keys(100 * kw, '\0'), values(100 * vw, '\0');
  std::unordered_map<std::string, std::string> seen;
  while (!cursor.done()) {
    const size_t n = t.export_items(cursor, keys.data(), values.data(), 100);
    for (size_t i = 0; i < n; ++i) {
      const bool fresh = seen.emplace(keys.substr(i * kw, kw), values.substr(i * vw, vw)).second;
      EXPECT_TRUE(fresh) << "an item exported twice";
    }
  }
  EXPECT_EQ(cursor.exported, model.size());
  EXPECT_EQ(seen, model.map());
}

TEST(SHARDED_SUITE, RandomMixedBatchesMeanWhatTheyMeanOnOneTable) {
  SKIP_WITHOUT_ENGINE();
  struct Case {
    uint32_t shards, kw, vw;
    IndexKind index = IndexKind::kGphash;
  };
  std::vector<Case> cases = {{2, 8, 8}, {3, 16, 24}, {4, 8, 100}, {1, 32, 8}};
  if (kEngine == EngineKind::kCpu) cases.push_back({3, 16, 8, IndexKind::kHmeh});  // HMEH: CPU engine only
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.shards << " shards, key width " << c.kw << ", value width " << c.vw
                                      << (c.index == IndexKind::kHmeh ? ", HMEH" : ""));
    ShardedPool pool;
    TableConfig cfg = config(c.kw, c.vw);
    cfg.index = c.index;
    Table t = Table::create(pool.path(), cfg, options(c.shards));
    Model model;
    std::mt19937_64 rng(c.shards * 1000 + c.kw + c.vw);
    for (int round = 0; round < 12; ++round) run_random_batch(t, model, rng, c.kw, c.vw, 3000, 2500);
    // Large enough that the routing runs on several threads.
    run_random_batch(t, model, rng, c.kw, c.vw, 40000, 20000);
    EXPECT_EQ(t.size(), model.size());
    const TableInfo info = t.info();
    EXPECT_EQ(info.items, model.size());
    EXPECT_EQ(info.shard_count, c.shards);
    ASSERT_EQ(info.shards.size(), c.shards);
    uint64_t items = 0;
    for (uint32_t k = 0; k < c.shards; ++k) {
      EXPECT_EQ(info.shards[k].shard_index, k);
      EXPECT_EQ(info.shards[k].path, pool.shard(k));
      items += info.shards[k].items;
    }
    EXPECT_EQ(items, model.size());
    if (c.index == IndexKind::kGphash) {
      for (const TableInfo& s : info.shards) EXPECT_GT(s.resizes, 0u) << s.path << " grew on its own";
      EXPECT_GE(info.resizes, c.shards);
    }
    expect_items(t, model);
    EXPECT_TRUE(t.check().ok) << t.check().violation;
    t.close();
    Table again = Table::open(pool.path(), options(c.shards));
    EXPECT_EQ(again.size(), model.size());
    expect_items(again, model);
  }
}

TEST(SHARDED_SUITE, KeysSpreadEvenlyOverTheShards) {
  SKIP_WITHOUT_ENGINE();
  ShardedPool pool;
  Table t = Table::create(pool.path(), config(8, 8), options(4));
  testing::batches::run(t, Op::kInsert, testing::batches::key_range(1, 40000));
  const TableInfo info = t.info();
  for (const TableInfo& s : info.shards) {
    EXPECT_GT(s.items, 9000u) << s.path;
    EXPECT_LT(s.items, 11000u) << s.path;
  }
}

// Routing must never change: a pool written by one build is read by the next.
TEST(SHARDED_SUITE, RoutingIsFixed) {
  const uint64_t keys[4] = {1, 2, 3, 0xFFFFFFFFFFFFFFFDull};
  uint32_t got[4];
  for (int i = 0; i < 4; ++i) got[i] = shard_of(&keys[i], 8, 4);
  EXPECT_EQ((std::vector<uint32_t>(got, got + 4)), (std::vector<uint32_t>{3, 1, 0, 0}));
  for (uint32_t n = 1; n <= 9; ++n)
    for (uint64_t k = 0; k < 1000; ++k) EXPECT_LT(shard_of(&k, 8, n), n);
}

TEST(SHARDED_SUITE, WrongShardCountIsRefused) {
  SKIP_WITHOUT_ENGINE();
  ShardedPool pool;
  Table::create(pool.path(), config(8, 8), options(3)).close();
  expect_error([&] { Table::open(pool.path(), options(2)); }, ErrorCode::kShardMismatch, "shards", "2 of 3");
  expect_error([&] { Table::open(pool.path(), options(4)); }, ErrorCode::kShardMismatch, "shards", "4 of 3");
  expect_error([&] { Table::open(pool.path(), options(1)); }, ErrorCode::kShardMismatch, "shards", "1 of 3");
  // A shard opened as a table of its own would take writes past the routing.
  expect_error([&] { Table::open(pool.shard(1), OpenOptions{}); }, ErrorCode::kShardMismatch, "shards", "alone");
  // It can still be inspected and checked.
  const TableInfo shard = Table::inspect(pool.shard(1));
  EXPECT_EQ(shard.shard_index, 1u);
  EXPECT_EQ(shard.shard_count, 3u);
  EXPECT_TRUE(Table::check_pool(pool.shard(1)).ok);
  Table again = Table::open(pool.path(), options(3));  // the right count still opens
  EXPECT_EQ(again.info().shard_count, 3u);
}

TEST(SHARDED_SUITE, MissingShardIsRefused) {
  SKIP_WITHOUT_ENGINE();
  ShardedPool pool;
  {
    Table t = Table::create(pool.path(), config(8, 8), options(3));
    testing::batches::run(t, Op::kInsert, testing::batches::key_range(1, 1000));
  }
  std::filesystem::remove(pool.shard(2));
  expect_error([&] { Table::open(pool.path(), options(3)); }, ErrorCode::kNotFound, "shards", "missing shard");
}

TEST(SHARDED_SUITE, ShardOfAnotherSetIsRefused) {
  SKIP_WITHOUT_ENGINE();
  ShardedPool a, b;
  Table::create(a.path(), config(8, 8), options(2)).close();
  Table::create(b.path(), config(8, 8), options(2)).close();
  std::filesystem::copy_file(b.shard(1), a.shard(1), std::filesystem::copy_options::overwrite_existing);
  expect_error([&] { Table::open(a.path(), options(2)); }, ErrorCode::kShardMismatch, "shards", "foreign shard");
}

TEST(SHARDED_SUITE, PlainPoolIsNotAShard) {
  SKIP_WITHOUT_ENGINE();
  ShardedPool pool;
  Table::create(pool.shard(0), config(8, 8), OpenOptions{}).close();  // a table of its own at a shard's name
  Table::create(pool.shard(1), config(8, 8), OpenOptions{}).close();
  expect_error([&] { Table::open(pool.path(), options(2)); }, ErrorCode::kShardMismatch, "shards", "plain pools");
}

// A process that dies with the table open leaves every shard dirty; the next open recovers each.
TEST(SHARDED_SUITE, EachShardRecoversAfterACrash) {
  SKIP_WITHOUT_ENGINE();
  ShardedPool pool;
  Table::create(pool.path(), config(8, 16), options(3)).close();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The child writes with the CPU engine: a process forked after its parent used CUDA cannot
    // use it. The pools are the same for both engines; the parent's open below recovers them
    // with the engine under test.
    OpenOptions cpu = options(3);
    cpu.engine = EngineKind::kCpu;
    Table t = Table::open(pool.path(), cpu);
    testing::batches::run(t, Op::kInsert, testing::batches::key_range(1, 5000));
    _exit(0);  // no close: the pools stay marked in use
  }
  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, 0), child);
  ASSERT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
  for (uint32_t k = 0; k < 3; ++k) EXPECT_FALSE(Table::inspect(pool.shard(k)).clean_shutdown);
  Table t = Table::open(pool.path(), options(3));
  const TableInfo info = t.info();
  EXPECT_TRUE(info.recovered);
  for (const TableInfo& s : info.shards) EXPECT_TRUE(s.recovered) << s.path;
  EXPECT_EQ(t.size(), 5000u);
  testing::batches::expect_present(t, testing::batches::key_range(1, 5000));
}

TEST(SHARDED_SUITE, SnapshotRestoresEveryShard) {
  SKIP_WITHOUT_ENGINE();
  ShardedPool pool;
  const std::string file = std::filesystem::temp_directory_path() / ("gphash-shard-snap-" + std::to_string(getpid()));
  OpenOptions o = options(2);
  o.snapshots.path = file;
  {
    Table t = Table::create(pool.path(), config(8, 8), o);
    testing::batches::run(t, Op::kInsert, testing::batches::key_range(1, 3000));
    const SnapshotResult r = t.snapshot();
    EXPECT_EQ(r.path, file);
  }
  for (uint32_t k = 0; k < 2; ++k) std::filesystem::remove(pool.shard(k));  // a reboot empties /dev/shm
  {
    Table t = Table::open(pool.path(), o);  // each shard comes back from its own file
    EXPECT_EQ(t.size(), 3000u);
    testing::batches::expect_present(t, testing::batches::key_range(1, 3000));
  }
  for (uint32_t k = 0; k < 2; ++k) std::filesystem::remove(shard_pool(file, k));
}

TEST(SHARDED_SUITE, DeviceSessionsNeedOneTable) {
  SKIP_WITHOUT_ENGINE();
  Table t = Table::create("mem:", config(8, 8), options(2));
  uint64_t key = 1;
  OpStatus status;
  Batch b;
  b.size = 1;
  b.key_width = 8;
  b.value_width = 8;
  b.keys = &key;
  b.status = &status;
  expect_error([&] { t.begin_device_session(nullptr); }, ErrorCode::kInvalidArgument, {}, "device session");
  t.execute_async(b, nullptr).wait();  // host arrays run before returning
  EXPECT_EQ(status, OpStatus::kNotFound);
  b.memory = MemorySpace::kDevice;  // but its arrays are host memory (or, on the CPU engine, not allowed)
  expect_error([&] { t.execute(b); }, ErrorCode::kInvalidArgument, {}, "kDevice with host arrays");
  EXPECT_EQ(t.size(), 0u);
}

#ifdef GPHASH_SHARD_TEST_GPU
// Runs a host batch as a batch in GPU memory on `device`: its arrays copied there, executed in
// place (execute_async when `async`), its statuses and values copied back.
Executor on_device(int device, bool async = false) {
  return [device, async](Table& t, const Batch& hb) {
    int saved = 0;
    ASSERT_EQ(cudaGetDevice(&saved), cudaSuccess);
    ASSERT_EQ(cudaSetDevice(device), cudaSuccess);
    const size_t n = hb.size, kb = n * hb.key_width, vb = n * hb.value_width;
    std::byte* d = nullptr;  // ops, keys, values, values out, statuses
    ASSERT_EQ(cudaMalloc(&d, n + kb + 2 * vb + n), cudaSuccess);
    Batch b = hb;
    b.memory = MemorySpace::kDevice;
    b.keys = d + n;  // n is a multiple of 8 in these tests: keys stay 8-byte aligned
    b.ops = reinterpret_cast<const Op*>(d);
    b.values = d + n + kb;
    b.values_out = d + n + kb + vb;
    b.status = reinterpret_cast<OpStatus*>(d + n + kb + 2 * vb);
    EXPECT_EQ(cudaMemcpy(d, hb.ops, n, cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(d + n, hb.keys, kb, cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(d + n + kb, hb.values, vb, cudaMemcpyHostToDevice), cudaSuccess);
    if (async) {
      cudaStream_t s = nullptr;
      EXPECT_EQ(cudaStreamCreate(&s), cudaSuccess);
      t.execute_async(b, s).wait();
      cudaStreamDestroy(s);
    } else {
      t.execute(b);
    }
    EXPECT_EQ(cudaMemcpy(hb.status, b.status, n, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(hb.values_out, b.values_out, vb, cudaMemcpyDeviceToHost), cudaSuccess);
    cudaFree(d);
    cudaSetDevice(saved);
  };
}

int gpu_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) cudaGetLastError();
  return n;
}

// Batches in GPU memory are routed on their GPU and mean what they mean on one table; with two
// GPUs, shards on the other GPU get their parts by peer copies, and a batch may live on either.
TEST(SHARDED_SUITE, DeviceBatchesMeanWhatTheyMeanOnOneTable) {
  SKIP_WITHOUT_ENGINE();
  struct Case {
    std::vector<int> gpus;
    uint32_t kw, vw;
    int home;
  };
  std::vector<Case> cases = {{{0, 0}, 8, 8, 0}, {{0, 0, 0}, 16, 100, 0}, {{0}, 32, 8, 0}};
  if (gpu_count() >= 2) {
    cases.push_back({{0, 1}, 8, 128, 0});
    cases.push_back({{1, 0, 1}, 16, 24, 0});
    cases.push_back({{0, 1}, 32, 8, 1});
    cases.push_back({{0}, 8, 8, 1});  // one shard, on a GPU other than the batch's
  } else {
    std::cout << "[ NOTE     ] one GPU: the peer-copy cases need two\n";
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.gpus.size() << " shards, on GPU 1 " << std::count(c.gpus.begin(), c.gpus.end(), 1)
                                      << ", batches on GPU " << c.home << ", key width " << c.kw << ", value width " << c.vw);
    ShardedPool pool;
    OpenOptions o = options(0);
    o.shards = c.gpus;
    Table t = Table::create(pool.path(), config(c.kw, c.vw), o);
    Model model;
    std::mt19937_64 rng(c.gpus.size() * 1000 + c.kw + c.vw + c.home);
    for (int round = 0; round < 10; ++round)
      run_random_batch(t, model, rng, c.kw, c.vw, 3000, 2500, on_device(c.home, round % 2 == 1));
    run_random_batch(t, model, rng, c.kw, c.vw, 40000, 20000, on_device(c.home));
    run_random_batch(t, model, rng, c.kw, c.vw, 3000, 2500);  // host batches still mean the same
    EXPECT_EQ(t.size(), model.size());
    expect_items(t, model);
    EXPECT_TRUE(t.check().ok) << t.check().violation;
  }
}
#endif

TEST(SHARDED_SUITE, BadShardListsAreRefused) {
  OpenOptions o = options(2);
  o.shards = {0, -1};
  expect_error([&] { Table::create("mem:", config(8, 8), o); }, ErrorCode::kInvalidArgument, "shards", "negative");
}

}  // namespace
}  // namespace gphash
