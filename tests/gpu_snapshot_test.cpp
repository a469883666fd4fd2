// Snapshots of pools the GPU engine writes (issue 11): the kernels' dirty-page marks (the write
// path's bitmap, collected when a snapshot holds writers off) must make every delta complete, for
// batches run with execute, batches still in flight on a stream (execute_async), user kernels in
// a device session, and a table kept in GPU memory (saved to its pool first). Each test restores
// the snapshots into a new pool, reads it with the CPU engine and compares it with a model.
// Skipped without a GPU.
#include <cuda_runtime.h>

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "engines/gpu/gpu_engine.h"
#include "gpu_test_kernels.h"
#include "gpu_test_util.h"
#include "snapshot_test_util.h"
#include "test_util.h"

namespace gphash::testing {
namespace {

using namespace batches;

// `file`'s last snapshot, restored into a new pool and read with the CPU engine, holds exactly
// the model's items (and checks clean).
void expect_restores_to(const std::string& file, const Model& model, const std::string& what) {
  TempPool restored("gpu-snapshot-restored");
  const RestoreResult r = Table::restore(file, restored.path());
  EXPECT_EQ(r.items, model.size()) << what;
  Table t = Table::open(restored.path());
  expect_same_items(t, model, what);
  t.close();
  const CheckResult c = Table::check_pool(restored.path());
  EXPECT_TRUE(c.ok) << what << ": " << c.violation;
}

// A workload batch with its arrays copied into GPU memory (for execute_async).
struct DeviceBatch {
  Workload::Prepared host;
  Device<uint8_t> ops;
  Device<uint64_t> keys;
  Device<char> values;
  Device<OpStatus> status;
  Batch batch;
  DeviceBatch(const Workload& w, uint64_t index)
      : host(w.make(index)), ops(reinterpret_cast<const uint8_t*>(host.ops.data()), host.ops.size()),
        keys(host.keys.data(), host.keys.size()), values(host.values.data(), host.values.size()),
        status(host.ops.size()) {
    batch = host.batch;
    batch.ops = reinterpret_cast<const Op*>(ops.p);
    batch.keys = keys.p;
    batch.values = values.p;
    batch.values_out = nullptr;
    batch.status = status.p;
    batch.memory = MemorySpace::kDevice;
  }
  // After completion: the statuses against the model, which it advances.
  void check(const Workload& w, Model& model, uint64_t index) const {
    const std::vector<OpStatus> got = status.get();
    for (size_t i = 0; i < host.ops.size(); ++i) {
      std::string found;
      const OpStatus want = model.apply(host.ops[i], Workload::key_string(host.keys[i]),
                                        std::string(host.values.data() + i * w.value_width(), w.value_width()), &found);
      ASSERT_EQ(got[i], want) << "batch " << index << " op " << i;
    }
  }
};

class GpuSnapshot : public ::testing::TestWithParam<uint32_t> {};  // the value width (8: inline, 32: heap)

// Preloads keys 1..n (value_for values) with a host batch and records them in the model: a dense
// table, so that a full image holds every page and a small delta stays well under it (a chain is
// compacted into a new full image once its deltas outweigh its base, which would hide a delta).
void preload(Table& t, uint32_t vw, uint64_t n, Model& model) {
  const std::vector<uint64_t> keys = key_range(1, n);
  const std::vector<OpStatus> st = run(t, Op::kInsert, keys);
  std::string ignored;
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_EQ(st[i], OpStatus::kOk) << keys[i];
    model.apply(Op::kInsert, Workload::key_string(keys[i]), value_for(keys[i], vw), &ignored);
  }
}

TEST_P(GpuSnapshot, DeltasOfSyncBatchesHoldWhatTheKernelsWrote) {
  REQUIRE_GPU();
  const uint32_t vw = GetParam();
  TempPool pool("gpu-snapshot-sync");
  TempDir dir("gpu-sync");
  const std::string file = dir.file("p.snap"), small = dir.file("small.snap");
  Table t = Table::create(pool.path(), {8, vw, {}, 256, 11}, gpu());  // small: the batches resize it
  Workload w(11, vw);
  Model model;
  uint64_t index = 0;
  for (; index < 30; ++index) ASSERT_NO_FATAL_FAILURE(w.run(t, index, model));
  SnapshotResult r = t.snapshot(file);
  EXPECT_TRUE(r.full);
  // Batches that resize the table and grow the heap between snapshots (deltas, or new full
  // images when the chain is compacted: either way the file must restore to the model).
  for (int round = 0; round < 4; ++round) {
    for (int b = 0; b < 10; ++b, ++index) ASSERT_NO_FATAL_FAILURE(w.run(t, index, model));
    r = t.snapshot(file);
    expect_restores_to(file, model, "after round " + std::to_string(round));
  }
  // A handful of upserts after a full image in a new file: a delta of a handful of pages (each op
  // a slot and a cell, and the header pages), so the kernels' marks, not a full copy, made it.
  ASSERT_TRUE(t.snapshot(small).full);
  std::vector<uint64_t> few = {3, 5, 7, 9, 11};
  std::string values(few.size() * vw, '\x5a');
  std::vector<OpStatus> status(few.size());
  Batch b;
  b.size = few.size();
  b.key_width = 8;
  b.value_width = vw;
  b.op = Op::kUpsert;
  b.keys = few.data();
  b.values = values.data();
  b.status = status.data();
  t.execute(b);
  std::string ignored;
  for (uint64_t k : few) model.apply(Op::kUpsert, Workload::key_string(k), std::string(vw, '\x5a'), &ignored);
  r = t.snapshot(small);
  EXPECT_FALSE(r.full) << "the GPU engine does not track its writes";
  EXPECT_GE(r.pages_written, 1u);
  EXPECT_LE(r.pages_written, 4 * few.size() + 16);
  expect_restores_to(small, model, "after five upserts");
  t.close();
}

TEST_P(GpuSnapshot, AsyncBatchesStillInFlightAreFinishedBeforeTheCapture) {
  REQUIRE_GPU();
  const uint32_t vw = GetParam();
  TempPool pool("gpu-snapshot-async");
  TempDir dir("gpu-async");
  const std::string file = dir.file("p.snap");
  constexpr uint64_t kKeys = 200000;
  Table t = Table::create(pool.path(), {8, vw, {}, 1 << 20, 12}, gpu());
  Workload w(12, vw, kKeys, /*max_batch=*/100);
  Model model;
  ASSERT_NO_FATAL_FAILURE(preload(t, vw, kKeys, model));
  ASSERT_TRUE(t.snapshot(file).full);
  CudaStream stream;
  uint64_t index = 0;
  for (int round = 0; round < 3; ++round) {
    // Several batches enqueued, none waited for: the snapshot must see all of them complete.
    std::vector<std::unique_ptr<DeviceBatch>> batches;
    std::vector<BatchEvent> events;
    const uint64_t first = index;
    for (int b = 0; b < 5; ++b, ++index) {
      batches.push_back(std::make_unique<DeviceBatch>(w, index));
      events.push_back(t.execute_async(batches.back()->batch, stream.s));
    }
    const SnapshotResult r = t.snapshot(file);
    EXPECT_FALSE(r.full) << "round " << round << ": expected a delta of at most 500 operations";
    for (const BatchEvent& e : events) EXPECT_TRUE(e.ready()) << "a batch enqueued before the snapshot was not done";
    for (size_t b = 0; b < batches.size(); ++b)
      ASSERT_NO_FATAL_FAILURE(batches[b]->check(w, model, first + b));
    expect_restores_to(file, model, "after async round " + std::to_string(round));
  }
  t.close();
}

TEST_P(GpuSnapshot, AutomaticSnapshotsOfAsyncAndSyncBatchesEndWithTheLastState) {
  REQUIRE_GPU();
  const uint32_t vw = GetParam();
  TempPool pool("gpu-snapshot-auto");
  TempDir dir("gpu-auto");
  OpenOptions o = gpu();
  o.snapshots.path = dir.file("auto.snap");
  o.snapshots.every_batches = 2;
  Table t = Table::create(pool.path(), {8, vw, {}, 512, 13}, o);
  Workload w(13, vw);
  Model model;
  CudaStream stream;
  for (uint64_t index = 0; index < 40; ++index) {
    if (index % 3 == 0) {
      DeviceBatch d(w, index);
      t.execute_async(d.batch, stream.s).wait();
      ASSERT_NO_FATAL_FAILURE(d.check(w, model, index));
    } else {
      ASSERT_NO_FATAL_FAILURE(w.run(t, index, model));
    }
  }
  const TableInfo info = t.info();
  EXPECT_GT(info.snapshots_taken, 0u);
  EXPECT_EQ(info.snapshot_error, "");
  t.close();  // takes the last one
  expect_restores_to(o.snapshots.path, model, "after close");
}

TEST_P(GpuSnapshot, DeviceSessionWritesReachTheDelta) {
  REQUIRE_GPU();
  const uint32_t vw = GetParam();
  if (vw != 8) GTEST_SKIP() << "the session test kernels use 8-byte values";
  TempPool pool("gpu-snapshot-session");
  TempDir dir("gpu-session");
  const std::string file = dir.file("p.snap");
  constexpr uint64_t kKeys = 200000;
  Table t = Table::create(pool.path(), {8, 8, {}, 1 << 20, 14}, gpu());
  Model model;
  ASSERT_NO_FATAL_FAILURE(preload(t, 8, kKeys, model));
  ASSERT_TRUE(t.snapshot(file).full);
  std::string ignored;
  // Inserts of 2000 new keys, erases of 501..1000, upserts of 1..100, one warp per key.
  constexpr size_t n = 2600;
  std::vector<uint64_t> keys(n), values(n);
  std::vector<uint8_t> ops(n);
  for (size_t i = 0; i < n; ++i) {
    if (i < 2000) keys[i] = kKeys + 1 + i, ops[i] = static_cast<uint8_t>(Op::kInsert);
    else if (i < 2500) keys[i] = i - 1499, ops[i] = static_cast<uint8_t>(Op::kErase);
    else keys[i] = i - 2499, ops[i] = static_cast<uint8_t>(Op::kUpsert);
    values[i] = keys[i] * 5 + 1;
  }
  Device<uint64_t> dkeys(keys.data(), n), dvalues(values.data(), n), dout(n);
  Device<uint8_t> dops(ops.data(), n), dstatus(n);
  CudaStream stream;
  DeviceSession session = t.begin_device_session(stream.s, {.max_new_items = 2000});
  session_apply(session, stream.s, dops.p, dkeys.p, dvalues.p, dout.p, dstatus.p, n);
  // While the session's kernels may run, a snapshot is refused and changes nothing.
  expect_error([&] { t.snapshot(file); }, ErrorCode::kInvalidArgument, {}, "snapshot during a session");
  const BatchEvent ended = t.end_device_session(stream.s);  // not waited for: the snapshot waits
  const SnapshotResult r = t.snapshot(file);
  EXPECT_FALSE(r.full);
  EXPECT_TRUE(ended.ready());
  const std::vector<uint8_t> st = dstatus.get();
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(st[i], static_cast<uint8_t>(OpStatus::kOk)) << i;
    std::string v(8, '\0');
    std::memcpy(v.data(), &values[i], 8);
    model.apply(static_cast<Op>(ops[i]), Workload::key_string(keys[i]), v, &ignored);
  }
  expect_restores_to(file, model, "after the session");
  t.close();
}

TEST_P(GpuSnapshot, AGpuMemoryTableIsSavedToItsPoolFirst) {
  REQUIRE_GPU();
  const uint32_t vw = GetParam();
  TempPool pool("gpu-snapshot-gpu-memory");
  TempDir dir("gpu-memory");
  const std::string file = dir.file("p.snap");
  Table t = Table::create(pool.path(), {8, vw, {}, 256, 15}, gpu(Placement::kGpuMemory));
  Workload w(15, vw);
  Model model;
  uint64_t index = 0;
  for (int round = 0; round < 3; ++round) {
    for (int b = 0; b < 15; ++b, ++index) ASSERT_NO_FATAL_FAILURE(w.run(t, index, model));
    const SnapshotResult r = t.snapshot(file);  // no save() before: the snapshot saves
    if (round == 0) {
      EXPECT_TRUE(r.full);  // later ones: deltas as large as the table, or compacted
    }
    expect_restores_to(file, model, "gpu memory, round " + std::to_string(round));
  }
  t.close();
}

// Automatic snapshots of a GPU-memory table run beside the batches: each saves the table, then
// copies the pool while later batches change only GPU memory. Those batches must not count as
// snapshotted, or the last snapshot (close) would be skipped as "nothing written since" (a race:
// this catches it when the last batches land between a save and its capture, as they often do
// with a snapshot every 5 ms).
TEST_P(GpuSnapshot, AutomaticSnapshotsOfAGpuMemoryTableWhileBatchesRunEndWithTheLastState) {
  REQUIRE_GPU();
  const uint32_t vw = GetParam();
  TempPool pool("gpu-snapshot-gpu-memory-auto");
  TempDir dir("gpu-memory-auto");
  OpenOptions o = gpu(Placement::kGpuMemory);
  o.snapshots.path = dir.file("auto.snap");
  o.snapshots.every_seconds = 0.005;
  Table t = Table::create(pool.path(), {8, vw, {}, 512, 16}, o);
  Workload w(16, vw);
  Model model;
  for (uint64_t index = 0; index < 80; ++index) ASSERT_NO_FATAL_FAILURE(w.run(t, index, model));
  const TableInfo info = t.info();
  EXPECT_EQ(info.snapshot_error, "");
  t.close();  // takes the last one
  expect_restores_to(o.snapshots.path, model, "after close");
  const TableInfo after = Table::inspect(pool.path());
  EXPECT_EQ(after.writes_since_snapshot, 0u);
}

INSTANTIATE_TEST_SUITE_P(ValueWidths, GpuSnapshot, ::testing::Values(8u, 32u),
                         [](const ::testing::TestParamInfo<uint32_t>& i) { return std::string(i.param == 8 ? "v8" : "v32"); });

}  // namespace
}  // namespace gphash::testing
