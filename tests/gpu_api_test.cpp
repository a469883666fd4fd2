// The GPU engine's API for GPU programs (issue 8) and its faults (issue 15): batches enqueued on a
// caller's stream, batches whose arrays the host never reads, device sessions for user kernels
// (many warps on one key included), export into GPU memory, the CPU and GPU engines applying the
// probe rules alike, value checksums on the GPU, and GPU memory running out. Skipped without a GPU.
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "engines/gpu/gpu_engine.h"
#include "format/header.h"
#include "format/probe.h"
#include "format/slot.h"
#include "gpu_test_kernels.h"
#include "gpu_test_util.h"
#include "test_util.h"

namespace gphash::testing {
namespace {

using namespace batches;

Batch device_batch(Op op, const Device<uint64_t>& keys, const uint64_t* values, uint64_t* out, OpStatus* status) {
  Batch b;
  b.size = keys.n;
  b.key_width = 8;
  b.value_width = 8;
  b.op = op;
  b.keys = keys.p;
  b.values = values;
  b.values_out = out;
  b.status = status;
  b.memory = MemorySpace::kDevice;
  return b;
}

std::vector<uint64_t> shuffled_keys(uint64_t n, uint64_t seed) {
  std::vector<uint64_t> k = key_range(1, n);
  std::shuffle(k.begin(), k.end(), std::mt19937_64(seed));
  return k;
}

TEST(Streams, BatchesEnqueuedOnOneStreamSeeEachOtherWithoutHostWaits) {
  REQUIRE_GPU();
  TempPool pool("async");
  Table t = Table::create(pool.path(), {8, 8, {}, 64, 1}, gpu());  // small: the inserts resize several times
  constexpr size_t n = 200000;
  const std::vector<uint64_t> keys = shuffled_keys(n, 3);
  std::vector<uint64_t> values(n);
  for (size_t i = 0; i < n; ++i) values[i] = keys[i] * 7 + 1;
  Device<uint64_t> dkeys(keys), dvalues(values), dout(n);
  Device<OpStatus> s_insert(n), s_search(n), s_erase(n / 2), s_after(n);
  Device<uint64_t> dhalf(std::vector<uint64_t>(keys.begin(), keys.begin() + n / 2));
  CudaStream stream;
  std::vector<BatchEvent> events;
  events.push_back(t.execute_async(device_batch(Op::kInsert, dkeys, dvalues.p, nullptr, s_insert.p), stream.s));
  events.push_back(t.execute_async(device_batch(Op::kSearch, dkeys, nullptr, dout.p, s_search.p), stream.s));
  events.push_back(t.execute_async(device_batch(Op::kErase, dhalf, nullptr, nullptr, s_erase.p), stream.s));
  events.push_back(t.execute_async(device_batch(Op::kSearch, dkeys, nullptr, nullptr, s_after.p), stream.s));
  // Work the caller enqueues after the batches sees them complete.
  std::vector<OpStatus> after(n);
  ASSERT_EQ(cudaMemcpyAsync(after.data(), s_after.p, n, cudaMemcpyDeviceToHost, stream.s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream.s), cudaSuccess);
  for (const BatchEvent& e : events) {
    EXPECT_TRUE(e.ready());
    e.wait();
  }
  const auto ins = s_insert.get(), found = s_search.get(), erased = s_erase.get();
  const auto out = dout.get();
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(ins[i], OpStatus::kOk) << i;
    ASSERT_EQ(found[i], OpStatus::kOk) << i;
    ASSERT_EQ(out[i], values[i]) << i;
    ASSERT_EQ(after[i], i < n / 2 ? OpStatus::kNotFound : OpStatus::kOk) << i;
  }
  for (size_t i = 0; i < n / 2; ++i) ASSERT_EQ(erased[i], OpStatus::kOk);
  EXPECT_GT(t.info().resizes, 0u) << "the inserts were meant to go through the slow path";
  EXPECT_EQ(t.size(), n - n / 2);
  t.close();
  EXPECT_TRUE(Table::check_pool(pool.path()).ok);
}

// Table::submit: a small host batch is on its way when submit returns, and wait() finishes it;
// any other call on the table finishes it first, so waiting is optional and order is kept. Both
// placements; inserts that fill a small table past its load factor take the slow path in the
// second half.
TEST(Submit, HostBatchesFinishOnWaitOrOnTheTablesNextCall) {
  REQUIRE_GPU();
  for (Placement placement : {Placement::kHostMapped, Placement::kGpuMemory}) {
    SCOPED_TRACE(placement == Placement::kGpuMemory ? "GPU memory" : "host-mapped");
    OpenOptions o = gpu();
    o.placement = placement;
    TempPool pool("submit");
    Table t = Table::create(pool.path(), {8, 8, {}, 64, 1}, o);
    uint64_t next_key = 1;
    for (int round = 0; round < 200; ++round) {
      // 256 inserts of new keys, then (without waiting) a search of them and of earlier ones.
      std::vector<uint64_t> keys = key_range(next_key, 256), values(256), found(512);
      for (size_t i = 0; i < keys.size(); ++i) values[i] = keys[i] * 3 + 1;
      next_key += 256;
      std::vector<OpStatus> ins(256), st(512);
      Batch insert;
      insert.size = 256, insert.key_width = 8, insert.value_width = 8, insert.op = Op::kInsert;
      insert.keys = keys.data(), insert.values = values.data(), insert.status = ins.data();
      BatchEvent e = t.submit(insert);
      std::vector<uint64_t> probe = keys;
      std::mt19937_64 rng(round);
      for (int i = 0; i < 256; ++i) probe.push_back(1 + rng() % (next_key + 255));  // earlier keys and some never inserted
      Batch search;
      search.size = 512, search.key_width = 8, search.value_width = 8, search.op = Op::kSearch;
      search.keys = probe.data(), search.values_out = found.data(), search.status = st.data();
      if (round % 3 == 0) e.wait();  // otherwise the next call finishes it
      BatchEvent s = round % 2 ? t.submit(search) : BatchEvent{};
      if (round % 2 == 0) t.execute(search);
      s.wait();
      EXPECT_TRUE(e.ready());
      for (int i = 0; i < 256; ++i) ASSERT_EQ(ins[i], OpStatus::kOk) << round << " " << i;
      for (int i = 0; i < 512; ++i) {
        const bool present = probe[i] < next_key;
        ASSERT_EQ(st[i], present ? OpStatus::kOk : OpStatus::kNotFound) << round << " " << i;
        if (present) {
          ASSERT_EQ(found[i], probe[i] * 3 + 1) << round << " " << i;
        }
      }
    }
    EXPECT_GT(t.info().resizes, 0u);
    EXPECT_EQ(t.size(), next_key - 1);
    // A batch submitted and never waited for is finished by close, durably.
    std::vector<uint64_t> last = key_range(next_key, 16), last_values(16, 5);
    std::vector<OpStatus> last_status(16);
    Batch b;
    b.size = 16, b.key_width = 8, b.value_width = 8, b.op = Op::kUpsert;
    b.keys = last.data(), b.values = last_values.data(), b.status = last_status.data();
    BatchEvent pending = t.submit(b);
    t.close();
    EXPECT_TRUE(pending.ready());
    pending.wait();
    for (OpStatus x : last_status) EXPECT_EQ(x, OpStatus::kOk);
    EXPECT_TRUE(Table::check_pool(pool.path()).ok);
    Table again = Table::open(pool.path(), o);
    EXPECT_EQ(again.size(), next_key - 1 + 16);
  }
}

TEST(Streams, ADeviceBatchIsNeverReadByTheHost) {
  REQUIRE_GPU();
  Table t = Table::create("mem:", {8, 8, {}, 1024, 2}, gpu());
  constexpr size_t n = 1000;
  std::vector<uint64_t> keys = key_range(1, n), values(n);
  std::vector<uint8_t> ops(n);
  for (size_t i = 0; i < n; ++i) {
    values[i] = i + 100;
    ops[i] = static_cast<uint8_t>(i % 2 ? Op::kUpsert : Op::kInsert);
  }
  ops[17] = 9;  // not an Op: reported for its entry, nothing else changes
  Device<uint64_t> dkeys(keys), dvalues(values);
  Device<uint8_t> dops(ops);
  Device<OpStatus> dstatus(n);
  Batch b = device_batch(Op::kSearch, dkeys, dvalues.p, nullptr, dstatus.p);
  b.ops = reinterpret_cast<const Op*>(dops.p);  // a pointer into GPU memory: the host must not touch it
  t.execute(b);
  const auto st = dstatus.get();
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(st[i], i == 17 ? OpStatus::kInvalidOp : OpStatus::kOk) << i;
  EXPECT_EQ(t.size(), n - 1);
}

// execute() of a batch in GPU memory comes after the work already on the legacy default stream,
// as a cudaMemcpy's DMA or a kernel launched without a stream (the engine's own streams are
// non-blocking, so nothing orders them after stream 0 unless it waits). Here a kernel on stream 0
// writes the keys 50 ms late; without the wait the searches ran first, on an array of zeros.
TEST(Streams, ADeviceBatchWaitsForTheWorkOnTheDefaultStream) {
  REQUIRE_GPU();
  Table t = Table::create("mem:", {8, 8, {}, 1 << 16, 2}, gpu());
  constexpr size_t n = 20000;
  const std::vector<uint64_t> keys = shuffled_keys(n, 4);
  run(t, Op::kInsert, keys);
  Device<uint64_t> source(keys), late(n), out(n);
  Device<OpStatus> status(n);
  ASSERT_EQ(cudaMemset(late.p, 0, n * 8), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  copy_late_on_stream_zero(late.p, source.p, n, 50'000'000);
  t.execute(device_batch(Op::kSearch, late, nullptr, out.p, status.p));
  const auto st = status.get();
  const auto got = out.get();
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(st[i], OpStatus::kOk) << "key " << keys[i] << " at " << i;
    uint64_t want;
    std::memcpy(&want, value_for(keys[i], 8).data(), 8);
    ASSERT_EQ(got[i], want) << "key " << keys[i];
  }
}

TEST(Streams, ExportIntoGpuMemoryReturnsEveryItemOnce) {
  REQUIRE_GPU();
  Table t = Table::create("mem:", {8, 8, {}, 64, 3}, gpu());
  const std::vector<uint64_t> keys = key_range(1, 50000);
  run(t, Op::kInsert, keys);
  Device<uint64_t> dkeys(4096), dvalues(4096);
  ExportCursor cursor;
  std::set<uint64_t> seen;
  while (!cursor.done()) {
    const size_t got = t.export_items(cursor, dkeys.p, dvalues.p, 4096, MemorySpace::kDevice);
    const auto k = dkeys.get(), v = dvalues.get();
    for (size_t i = 0; i < got; ++i) {
      EXPECT_TRUE(seen.insert(k[i]).second) << "key " << k[i] << " twice";
      uint64_t want;
      std::memcpy(&want, value_for(k[i], 8).data(), 8);
      EXPECT_EQ(v[i], want) << k[i];
    }
  }
  EXPECT_EQ(seen.size(), keys.size());
  EXPECT_EQ(cursor.exported, keys.size());
}

TEST(Sessions, KernelsInsertFindAndEraseThroughTheView) {
  REQUIRE_GPU();
  TempPool pool("session");
  Table t = Table::create(pool.path(), {8, 8, {}, 1 << 16, 4}, gpu());
  run(t, Op::kInsert, key_range(1, 1000));
  // One kernel, one warp per entry, on distinct keys (warps on one key would race): inserts of
  // 1001..3000, finds of 1..500, erases of 501..1000.
  constexpr size_t n = 3000;
  std::vector<uint64_t> keys(n), values(n);
  std::vector<uint8_t> ops(n);
  for (size_t i = 0; i < n; ++i) {
    keys[i] = i < 2000 ? 1001 + i : i - 1999;
    values[i] = keys[i] * 3;
    ops[i] = static_cast<uint8_t>(i < 2000 ? Op::kInsert : i < 2500 ? Op::kSearch : Op::kErase);
  }
  Device<uint64_t> dkeys(keys), dvalues(values), dout(n);
  Device<uint8_t> dops(ops), dstatus(n);
  CudaStream stream;
  DeviceSession session = t.begin_device_session(stream.s, {.max_new_items = 2000});
  expect_error([&] { run(t, Op::kSearch, {1}); }, ErrorCode::kInvalidArgument, {}, "host batch during a session");
  session_apply(session, stream.s, dops.p, dkeys.p, dvalues.p, dout.p, dstatus.p, n);
  t.end_device_session(stream.s).wait();
  const auto st = dstatus.get();
  const auto out = dout.get();
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(st[i], static_cast<uint8_t>(OpStatus::kOk)) << i;
    if (i >= 2000 && i < 2500) {
      uint64_t want;
      std::memcpy(&want, value_for(keys[i], 8).data(), 8);
      EXPECT_EQ(out[i], want) << keys[i];
    }
  }
  EXPECT_EQ(t.size(), 1000u + 2000u - 500u);
  expect_absent(t, key_range(501, 500));
  std::string got;
  const auto st2 = run(t, Op::kSearch, key_range(1001, 2000), &got);
  for (size_t i = 0; i < 2000; ++i) {
    ASSERT_EQ(st2[i], OpStatus::kOk);
    uint64_t v;
    std::memcpy(&v, got.data() + i * 8, 8);
    EXPECT_EQ(v, (1001 + i) * 3);
  }
  t.close();
  EXPECT_TRUE(Table::check_pool(pool.path()).ok);
}

TEST(Sessions, ManyWarpsWritingOneKeyLeaveOneCopyWithOneOfTheirValues) {
  REQUIRE_GPU();
  TempPool pool("session-one-key");
  Table t = Table::create(pool.path(), {8, 8, {}, 1 << 12, 5}, gpu());
  run(t, Op::kInsert, key_range(1, 100));
  CudaStream stream;
  constexpr int kWarps = 4096;
  DeviceSession session = t.begin_device_session(stream.s, {.max_new_items = 1});
  session_upsert_one_key(session, stream.s, 77777, kWarps, 4);
  session_upsert_one_key(session, stream.s, 42, kWarps, 4);  // a key that exists already
  t.end_device_session(stream.s).wait();
  EXPECT_EQ(t.size(), 101u);
  std::string out;
  const auto st = run(t, Op::kSearch, {77777, 42}, &out);
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(st[i], OpStatus::kOk);
    uint64_t v;
    std::memcpy(&v, out.data() + 8 * i, 8);
    EXPECT_GE(v, 1u);
    EXPECT_LE(v, static_cast<uint64_t>(kWarps));
  }
  t.close();
  const CheckResult c = Table::check_pool(pool.path());
  EXPECT_TRUE(c.ok) << c.violation;
  EXPECT_EQ(c.items, 101u);
}

// The bytes of every active level of a pool file.
std::string level_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::string file((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  format::PoolHeader h[2];
  std::memcpy(&h[0], file.data(), sizeof h[0]);
  std::memcpy(&h[1], file.data() + format::kHeaderCopyOffset[1], sizeof h[1]);
  const format::PoolHeader& cur = h[0].generation > h[1].generation ? h[0] : h[1];
  std::string r;
  for (uint32_t l = cur.gphash.bottom_level; l <= format::top_level(cur); ++l)
    r += file.substr(cur.gphash.level_offset[l], format::level_bytes(cur, l));
  return r;
}

TEST(ProbeRules, CpuAndGpuEnginesFillATableSlotForSlotAlike) {
  REQUIRE_GPU();
  for (const char* shape : {"2L-2H-8S", "4L-2H-4S", "1L-4H-8S"}) {
    for (uint32_t kw : {8u, 16u}) {
      SCOPED_TRACE(std::string(shape) + " " + std::to_string(kw));
      TempPool a("probe-cpu"), b("probe-gpu");
      const TableConfig config{kw, 8, parse_shape(shape), 20000, 99};
      {
        Table cpu = Table::create(a.path(), config);
        Table gpu_table = Table::create(b.path(), config, gpu());
        std::mt19937_64 rng(7);
        for (int i = 0; i < 3000; ++i) {  // one key per batch: the order of inserts is the same on both
          std::vector<uint64_t> key(kw / 8);
          for (auto& w : key) w = rng() >> 2;
          const uint64_t value = i;
          for (Table* t : {&cpu, &gpu_table}) {
            OpStatus s;
            Batch batch;
            batch.size = 1;
            batch.key_width = kw;
            batch.value_width = 8;
            batch.op = Op::kInsert;
            batch.keys = key.data();
            batch.values = &value;
            batch.status = &s;
            t->execute(batch);
            ASSERT_EQ(s, OpStatus::kOk);
          }
        }
      }
      EXPECT_TRUE(level_bytes(a.path()) == level_bytes(b.path())) << "the engines placed items differently";
    }
  }
}

TEST(ProbeRules, CpuAndGpuEnginesReadAndKeepTheSameCopyOfADuplicate) {
  REQUIRE_GPU();
  TempPool base("dup-base");
  const uint64_t key = 12345;
  format::SlotAddress first{}, second{};
  {
    Table t = Table::create(base.path(), {8, 8, {}, 1000, 5});
    run(t, Op::kInsert, {key});
  }
  {
    // A second copy of the key, with another value, in another candidate slot.
    const int fd = ::open(base.path().c_str(), O_RDWR);
    struct stat st {};
    fstat(fd, &st);
    auto* p = static_cast<std::byte*>(mmap(nullptr, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    format::PoolHeader h;
    std::memcpy(&h, p, sizeof h);
    format::PoolHeader h1;
    std::memcpy(&h1, p + format::kHeaderCopyOffset[1], sizeof h1);
    const size_t current_at = h1.generation > h.generation ? format::kHeaderCopyOffset[1] : 0;
    if (current_at) h = h1;
    const auto slot = [&](format::SlotAddress a) {
      return reinterpret_cast<uint64_t*>(p + h.gphash.level_offset[a.level] + a.bucket * h.gphash.bucket_bytes + 16 * a.slot);
    };
    uint64_t hash[2];
    for (int j = 0; j < 2; ++j) hash[j] = format::xxh64(&key, 8, format::hash_seed_for(h.gphash.hash_seed, j));
    bool have_first = false, have_second = false;
    for (uint32_t l = h.gphash.bottom_level; l <= format::top_level(h); ++l)
      for (int j = 0; j < 2; ++j)
        for (uint32_t s = 0; s < 8; ++s) {
          const format::SlotAddress a{l, format::bucket_at(hash[j], l), s};
          uint64_t* w = slot(a);
          if (w[0] == format::encode_key_word(key) && !have_first) first = a, have_first = true;
        }
    for (uint32_t l = h.gphash.bottom_level; l <= format::top_level(h) && !have_second; ++l)
      for (int j = 0; j < 2 && !have_second; ++j) {
        const format::SlotAddress a{l, format::bucket_at(hash[j], l), 7};
        if (a.level != first.level && slot(a)[0] == 0) second = a, have_second = true;
      }
    ASSERT_TRUE(have_first && have_second);
    slot(second)[1] = 0xD0D0;
    slot(second)[0] = format::encode_key_word(key);
    // As after a crash: not shut down cleanly, so each open recounts (2 published slots).
    auto* current = reinterpret_cast<format::PoolHeader*>(p + current_at);
    current->clean_shutdown = 0;
    format::seal(*current);
    munmap(p, st.st_size);
    ::close(fd);
  }
  const format::SlotAddress valid = format::preferred_copy(first, second) ? first : second;
  uint64_t first_value;
  std::memcpy(&first_value, value_for(key, 8).data(), 8);
  const uint64_t expected = valid.level == first.level ? first_value : 0xD0D0;
  std::string after[2];
  int e = 0;
  for (const OpenOptions& o : {OpenOptions{}, gpu()}) {
    TempPool copy("dup-copy");
    {
      std::ifstream in(base.path(), std::ios::binary);
      std::ofstream out(copy.path(), std::ios::binary);
      out << in.rdbuf();
    }
    {
      Table t = Table::open(copy.path(), o);
      std::string out;
      ASSERT_EQ(run(t, Op::kSearch, {key}, &out)[0], OpStatus::kOk);
      uint64_t v;
      std::memcpy(&v, out.data(), 8);
      EXPECT_EQ(v, expected) << (o.engine == EngineKind::kGpu ? "GPU" : "CPU") << " engine read another copy";
      run(t, Op::kUpsert, {key});  // writes the valid copy; the GPU engine's write removes the other
      ASSERT_EQ(run(t, Op::kSearch, {key}, &out)[0], OpStatus::kOk);
      EXPECT_EQ(out, value_for(key, 8));
    }
    // The CPU engine's writes stop at the valid copy and leave the other, which check names as
    // damage, to repair (docs/FORMAT.md).
    if (o.engine == EngineKind::kCpu) {
      EXPECT_EQ(Table::repair(copy.path()).dropped.size(), 1u);
    }
    // The slots' state words (every other 8-byte word of 8-byte-key levels): the same copy is kept.
    const std::string bytes = level_bytes(copy.path());
    for (size_t at = 0; at < bytes.size(); at += 16) after[e] += bytes.substr(at, 8);
    ++e;
    const CheckResult c = Table::check_pool(copy.path());
    EXPECT_TRUE(c.ok) << c.violation;
  }
  EXPECT_TRUE(after[0] == after[1]) << "the engines kept different copies";
}

TEST(ValueChecksums, GpuReadsVerifyAndExportsLeaveDamagedValuesOut) {
  REQUIRE_GPU();
  TempPool pool("gpu-checksum");
  TableConfig config{8, 40, {}, 64, 6};
  config.value_checksums = true;
  {
    Table t = Table::create(pool.path(), config, gpu());
    run(t, Op::kInsert, key_range(1, 2000));
    expect_present(t, key_range(1, 2000));
  }
  EXPECT_TRUE(Table::check_pool(pool.path()).ok) << "the GPU wrote checksums the CPU checker does not accept";
  // Damage the value of key 1: every cell holding its bytes (an insert whose slot claim was lost
  // to another warp leaves a copy in a cell it released, which may come first in the file).
  uint64_t damaged = 0;
  {
    const std::string want = value_for(1, 40);
    std::fstream f(pool.path(), std::ios::in | std::ios::out | std::ios::binary);
    std::string file((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    for (size_t at = file.find(want); at != std::string::npos; at = file.find(want, at + 1)) {
      f.seekp(static_cast<std::streamoff>(at + 3));
      f.put(static_cast<char>(file[at + 3] ^ 0x40));
      damaged = 1;
    }
    ASSERT_EQ(damaged, 1u);
  }
  Table t = Table::open(pool.path(), gpu());
  std::string out;
  const auto st = run(t, Op::kSearch, key_range(1, 2000), &out);
  for (uint64_t k = 1; k <= 2000; ++k) EXPECT_EQ(st[k - 1], k == damaged ? OpStatus::kCorruptValue : OpStatus::kOk) << k;
  // The same key several times in one batch takes the run path.
  const auto runs = run(t, Op::kSearch, {damaged, damaged, damaged, 5}, &out);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(runs[i], OpStatus::kCorruptValue);
  EXPECT_EQ(runs[3], OpStatus::kOk);
  // A run longer than a warp: later searches copy the first answer, and keep its verdict.
  std::vector<uint64_t> long_runs(200, damaged);
  long_runs.insert(long_runs.end(), 200, 5);
  const auto long_status = run(t, Op::kSearch, long_runs, &out);
  for (size_t i = 0; i < long_runs.size(); ++i) {
    EXPECT_EQ(long_status[i], long_runs[i] == damaged ? OpStatus::kCorruptValue : OpStatus::kOk) << i;
    if (long_runs[i] == 5) {
      EXPECT_EQ(out.substr(i * 40, 40), value_for(5, 40)) << i;
    }
  }
  ExportCursor cursor;
  std::vector<uint64_t> keys(4096);
  std::vector<std::byte> values(4096 * 40);
  while (!cursor.done()) t.export_items(cursor, keys.data(), values.data(), 4096);
  EXPECT_EQ(cursor.damaged, 1u);
  EXPECT_EQ(cursor.exported, 1999u);
}

// GPU memory left free: takes all but `keep` bytes until destroyed.
struct GpuMemoryBallast {
  explicit GpuMemoryBallast(size_t keep) {
    size_t free = 0, total = 0;
    cudaMemGetInfo(&free, &total);
    if (free > keep) {
      EXPECT_EQ(cudaMalloc(&p, free - keep), cudaSuccess);
    }
  }
  ~GpuMemoryBallast() { cudaFree(p); }
  void* p = nullptr;
};

TEST(GpuMemoryFaults, OpeningATableLargerThanTheFreeGpuMemoryIsATypedError) {
  REQUIRE_GPU();
  TempPool pool("gpumem-open");
  { Table t = Table::create(pool.path(), {8, 8, {}, uint64_t{1} << 26, 7}); run(t, Op::kInsert, key_range(1, 1000)); }
  {
    GpuMemoryBallast ballast(size_t{256} << 20);  // the table's levels need about 1.2 GB
    expect_error([&] { Table::open(pool.path(), gpu(Placement::kGpuMemory)); }, ErrorCode::kNoSpace, {}, "open");
  }
  EXPECT_TRUE(Table::inspect(pool.path()).clean_shutdown) << "the failed open left the pool dirty";
  Table t = Table::open(pool.path(), gpu(Placement::kGpuMemory));
  expect_present(t, key_range(1, 1000));
}

TEST(GpuMemoryFaults, AResizeThatFindsNoGpuMemoryFailsOnlyTheInsertsThatNeedIt) {
  REQUIRE_GPU();
  for (Placement placement : {Placement::kGpuMemory, Placement::kHostMapped}) {
    SCOPED_TRACE(placement == Placement::kGpuMemory ? "gpu-memory" : "host-mapped");
    TempPool pool("gpumem-resize");
    std::vector<uint64_t> acknowledged;
    {
      Table t = Table::create(pool.path(), {8, 8, {}, 1 << 16, 8}, gpu(placement));
      // A first batch of the size used below sizes the engine's staging buffers while memory is free.
      const auto first_keys = key_range(1, 1 << 20);
      for (OpStatus st : run(t, Op::kInsert, first_keys)) ASSERT_EQ(st, OpStatus::kOk);
      acknowledged = first_keys;
      GpuMemoryBallast ballast(size_t{96} << 20);
      bool full = false;
      for (uint64_t first = 1 + (1 << 20); !full && first < (uint64_t{1} << 30); first += 1 << 20) {
        const auto keys = key_range(first, 1 << 20);
        const auto st = run(t, Op::kInsert, keys);
        for (size_t i = 0; i < keys.size(); ++i) {
          if (st[i] == OpStatus::kOk) {
            acknowledged.push_back(keys[i]);
          } else {
            full = true;
            EXPECT_EQ(st[i], OpStatus::kTableFull);
          }
        }
      }
      EXPECT_TRUE(full) << "GPU memory never ran out";
      ASSERT_GT(acknowledged.size(), 100000u);
    }  // ballast freed first, then the table saves and closes
    Table t = Table::open(pool.path());
    EXPECT_FALSE(t.info().recovered);
    EXPECT_EQ(t.size(), acknowledged.size());
    expect_present(t, acknowledged);
  }
}

}  // namespace
}  // namespace gphash::testing
