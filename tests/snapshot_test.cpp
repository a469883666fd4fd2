// Snapshots of a pool to a file (gphash/snapshot.h): round trips against the model, incremental
// and full images, compaction, damaged files, permissions, restoring a missing pool, automatic
// snapshots, snapshots beside running batches, how long writers wait, and failed writes.
#include <fmt/format.h>
#include <sys/stat.h>

#include <atomic>
#include <optional>
#include <chrono>
#include <thread>

#include "fault_file_system.h"
#include "snapshot/restore.h"
#include "snapshot/snapshot_reader.h"
#include "snapshot_test_util.h"

namespace gphash::testing {
namespace {

using namespace std::chrono_literals;
using batches::expect_error;

// Restores `file` into a fresh pool and checks that it holds exactly `model`'s items.
void expect_restores_to(const std::string& file, const Model& model, const std::string& what,
                        snapshot::FileSystem& fs = snapshot::posix_file_system()) {
  TempPool restored("restored");
  snapshot::restore_pool(file, restored.path(), {}, fs);
  Table t = Table::open(restored.path());
  expect_same_items(t, model, what);
}

// The pool files agree byte for byte past the header copies (which differ in the snapshot record
// and generation): what a restore rebuilds is the live pool itself, not only its items.
void expect_same_pool_bytes(const std::string& live, const std::string& restored, const std::string& what) {
  const std::string a = read_file(live), b = read_file(restored);
  ASSERT_EQ(a.size(), b.size()) << what;
  size_t first = std::string::npos;
  for (size_t i = 8192; i < a.size() && first == std::string::npos; ++i)
    if (a[i] != b[i]) first = i;
  EXPECT_EQ(first, std::string::npos) << what << ": first difference at byte " << first << " (page " << first / 4096 << ")";
}

// ---- the pool's record of changed pages -----------------------------------------------------

std::vector<uint64_t> marked(pool::DirtyPages& d, uint64_t pages) {
  std::vector<uint64_t> bits, r;
  d.take(pages, bits);
  for (uint64_t p = 0; p < pages; ++p)
    if (bits[p / 64] >> (p % 64) & 1) r.push_back(p);
  return r;
}

TEST(DirtyPages, MarkTakeAndMergeAreExactToThePage) {
  pool::DirtyPages d(uint64_t{1} << 30);
  d.mark(4095, 2);          // straddles pages 0 and 1
  d.mark(63 * 4096, 4097);  // pages 63 and 64: across a word
  d.mark(200 * 4096 + 5, 1);
  d.mark(0, 0);             // nothing
  d.mark(uint64_t{1} << 40, 4096);  // past the reservation: ignored
  EXPECT_EQ(marked(d, 300), (std::vector<uint64_t>{0, 1, 63, 64, 200}));
  EXPECT_TRUE(marked(d, 300).empty()) << "take clears";
  d.mark(10 * 4096, 130 * 4096);  // pages 10..139
  std::vector<uint64_t> bits;
  d.take(100, bits);  // only pages below 100 are taken
  EXPECT_EQ(marked(d, 300).size(), 40u) << "pages 100..139 stay marked";
  d.merge(bits.data(), bits.size());
  EXPECT_EQ(marked(d, 300).size(), 90u) << "merge gives back what take took";
  const uint64_t gpu_bitmap[2] = {uint64_t{1} << 3, uint64_t{1} << 1};  // pages 3 and 65, as a GPU engine reports them
  d.merge(gpu_bitmap, 2);
  EXPECT_EQ(marked(d, 300), (std::vector<uint64_t>{3, 65}));
}

TEST(DirtyPages, ThePoolMarksWhatItsWritesTouch) {
  TempPool pool("marks");
  HandTable t(pool.path(), {8, 8, {}, 64, 7});
  const uint64_t pages = t.pool->file_size() / 4096;
  marked(t.pool->dirty_pages(), pages);  // start from nothing
  const uint64_t key = 5, value = 6;
  OpStatus status;
  Batch b;
  b.size = 1;
  b.key_width = b.value_width = 8;
  b.op = Op::kUpsert;
  b.keys = &key;
  b.values = &value;
  b.status = &status;
  t.execute(b);
  ASSERT_EQ(status, OpStatus::kOk);
  const std::vector<uint64_t> after_batch = marked(t.pool->dirty_pages(), pages);
  ASSERT_EQ(after_batch.size(), 2u) << "the write counter's page and the slot's";
  EXPECT_EQ(after_batch[0], format::kWriteCounterOffset / 4096);
  EXPECT_GE(after_batch[1], format::kReservedPrefixBytes / 4096);
  format::PoolHeader h = t.pool->header();
  t.pool->write_header(h);
  EXPECT_EQ(marked(t.pool->dirty_pages(), pages).size(), 1u) << "a header write marks its copy";
}

// ---- round trips ---------------------------------------------------------------------------

class SnapshotRoundTrip : public ::testing::TestWithParam<uint32_t> {};

TEST_P(SnapshotRoundTrip, IncrementalSnapshotsRestoreEveryStateExactly) {
  const uint32_t vw = GetParam();
  TempPool pool("roundtrip");
  TempDir dir("roundtrip");
  const std::string file = dir.file("pool.snap");
  Workload w(vw, vw);
  Model model;
  Table t = Table::create(pool.path(), {8, vw, {}, 256, 7});
  uint64_t chain = 0, deltas = 0;
  for (uint64_t batch = 0; batch < 60; ++batch) {
    w.run(t, batch, model);
    if (batch % 6 != 5) continue;
    bool compaction_due = false;
    if (chain > 0) {
      auto f = snapshot::posix_file_system().open_read(file);
      const snapshot::Superblock sb = snapshot::read_superblock(*f, file);
      compaction_due = sb.committed_end - snapshot::kFirstSegmentOffset - sb.base_bytes > sb.base_bytes;
    }
    const SnapshotResult r = t.snapshot(file);
    EXPECT_EQ(r.full, chain == 0 || compaction_due) << "a delta unless the chain is new or due for compaction (batch "
                                                    << batch << ")";
    chain = r.full ? 1 : chain + 1;
    deltas += r.full ? 0 : 1;
    EXPECT_EQ(r.sequence, chain - 1);
    EXPECT_EQ(r.pool_writes, t.info().writes);
    EXPECT_EQ(t.info().writes_since_snapshot, 0u);
    TempPool restored("roundtrip-restored");
    const RestoreResult rr = Table::restore(file, restored.path());
    EXPECT_EQ(rr.items, model.size());
    EXPECT_EQ(rr.segments, chain);
    expect_same_pool_bytes(pool.path(), restored.path(), fmt::format("after batch {}", batch));
    Table back = Table::open(restored.path());
    expect_same_items(back, model, fmt::format("restored after batch {}", batch));
    EXPECT_FALSE(back.info().recovered) << "Table::restore leaves the pool shut down cleanly";
  }
  EXPECT_GT(t.info().resizes, 0u) << "the workload should cross resizes";
  EXPECT_GE(deltas, 3u);
}

INSTANTIATE_TEST_SUITE_P(ValueWidths, SnapshotRoundTrip, ::testing::Values(8u, 5u, 40u),
                         [](const auto& info) { return fmt::format("v{}", info.param); });

// HMEH's engine does not report its writes page by page, so its snapshots are full images: what
// matters is that they hold the pool exactly (restore once cleared every page outside GPHash's
// extents, which on an HMEH pool was all of its data).
TEST(SnapshotRoundTrip, AnHmehPoolIsSnapshottedWholeAndRestoresExactly) {
  TempPool pool("hmeh");
  TempDir dir("hmeh");
  const std::string file = dir.file("pool.snap");
  Workload w(11, 24);
  Model model;
  TableConfig config{8, 24, {}, 256, 9};
  config.index = IndexKind::kHmeh;
  config.hmeh.segment_bytes = 4096;  // splits within the run
  Table t = Table::create(pool.path(), config);
  for (uint64_t batch = 0; batch < 24; ++batch) {
    w.run(t, batch, model);
    if (batch % 8 != 7) continue;
    EXPECT_TRUE(t.snapshot(file).full);
    TempPool restored("hmeh-restored");
    EXPECT_EQ(Table::restore(file, restored.path()).items, model.size());
    expect_same_pool_bytes(pool.path(), restored.path(), fmt::format("after batch {}", batch));
    Table back = Table::open(restored.path());
    expect_same_items(back, model, fmt::format("restored after batch {}", batch));
  }
  EXPECT_GT(t.info().resizes, 0u) << "the workload should split segments";
}

TEST(SnapshotRoundTrip, WithoutWriteTrackingEverySnapshotIsAFullImage) {
  TempPool pool("untracked");
  TempDir dir("untracked");
  const std::string file = dir.file("pool.snap");
  HandTable t(pool.path(), {8, 24, {}, 256, 3});
  t.pool->dirty_pages().set_engine_tracks_writes(false);  // as an engine that does not report its writes
  snapshot::Snapshotter snapshots(*t.pool, t.batches);
  Workload w(11, 24);
  Model model;
  for (uint64_t batch = 0; batch < 30; ++batch) {
    w.run(t, batch, model);
    if (batch % 10 != 9) continue;
    const SnapshotResult r = snapshots.take(file);
    EXPECT_TRUE(r.full) << "batch " << batch;
    TempPool restored("untracked-restored");
    snapshot::restore_pool(file, restored.path(), {});
    expect_same_pool_bytes(pool.path(), restored.path(), fmt::format("after batch {}", batch));
    expect_restores_to(file, model, fmt::format("after batch {}", batch));
  }
}

TEST(SnapshotRoundTrip, ADeltaWritesThePagesTheBatchesChangedAndNoMore) {
  // 400 k items in 8-byte slots (about 13 MiB of table) and a heap of 24-byte values: updating k
  // keys changes at most 2k pages (the slot's, the new cell's) plus the header and maintenance
  // pages; the delta must not write more, whatever the pool's size.
  TempPool pool("rate");
  TempDir dir("rate");
  const std::string file = dir.file("pool.snap");
  Table t = Table::create(pool.path(), {8, 24, {}, 1 << 19, 7});
  batches::run(t, Op::kInsert, batches::key_range(1, 400000));
  const SnapshotResult full = t.snapshot(file);
  EXPECT_TRUE(full.full);
  EXPECT_GT(full.pages_written, 3000u);
  std::mt19937_64 rng(5);
  for (uint64_t k : {1u, 10u, 100u, 1000u}) {
    std::vector<uint64_t> keys(k);
    for (auto& key : keys) key = 1 + rng() % 400000;
    batches::run(t, Op::kUpsert, keys);
    const SnapshotResult delta = t.snapshot(file);
    EXPECT_FALSE(delta.full);
    EXPECT_LE(delta.pages_written, 2 * k + 3) << k << " keys updated";
    EXPECT_GE(delta.pages_written, std::min<uint64_t>(k, 2)) << k << " keys updated";
    fmt::print("[snapshot_test] {} updates: delta of {} pages, {} bytes, {:.2f} ms (full image: {} pages)\n", k,
               delta.pages_written, delta.bytes_written, 1e3 * delta.seconds, full.pages_written);
  }
}

TEST(SnapshotRoundTrip, ANewProcessAppendsDeltasWhenThePoolIsWhatItsLastSnapshotHolds) {
  // The pool's header names the chain and the write count of its last snapshot: a process that
  // opens a pool nobody wrote since then appends deltas; after an unsnapshotted write it cannot
  // know what changed, and writes a full image.
  TempPool pool("newprocess");
  TempDir dir("newprocess");
  const std::string file = dir.file("pool.snap");
  Model model;
  auto upsert = [&](Table& t, uint64_t first, uint64_t n) {
    std::vector<uint64_t> keys = batches::key_range(first, n);
    batches::run(t, Op::kUpsert, keys);
    for (uint64_t k : keys) model.apply(Op::kUpsert, Workload::key_string(k), batches::value_for(k, 8), nullptr);
  };
  {
    Table t = Table::create(pool.path(), {8, 8, {}, 1 << 18, 7});
    upsert(t, 1, 200000);
    EXPECT_TRUE(t.snapshot(file).full);
  }
  {
    Table t = Table::open(pool.path());
    upsert(t, 300000, 100);
    const SnapshotResult r = t.snapshot(file);
    EXPECT_FALSE(r.full) << "nobody wrote the pool since its last snapshot";
    EXPECT_EQ(r.sequence, 1u);
    EXPECT_LE(r.pages_written, 100u + 3) << "100 inserts, the header copies and the write counter's page";
    TempPool restored("newprocess-restored");
    Table::restore(file, restored.path());
    expect_same_pool_bytes(pool.path(), restored.path(), "a new process's delta");
  }
  expect_restores_to(file, model, "the delta");
  {
    Table t = Table::open(pool.path());
    upsert(t, 400000, 10);  // written, never snapshotted
  }
  {
    Table t = Table::open(pool.path());
    EXPECT_TRUE(t.snapshot(file).full) << "the pool was written after its last snapshot";
  }
  // A restored pool is its snapshot: deltas go on into the same file.
  std::remove(pool.path().c_str());
  Table::restore(file, pool.path());
  Table t = Table::open(pool.path());
  upsert(t, 500000, 10);
  const SnapshotResult r = t.snapshot(file);
  EXPECT_FALSE(r.full);
  EXPECT_LE(r.pages_written, 10u + 3);
  expect_restores_to(file, model, "a delta of the restored pool");
}

TEST(SnapshotFile, CompactsALongChainIntoANewFullImage) {
  TempPool pool("compact");
  TempDir dir("compact");
  const std::string file = dir.file("pool.snap");
  Workload w(5, 8, 4000, 400);
  Model model;
  Table t = Table::create(pool.path(), {8, 8, {}, 8192, 7});
  int full = 0;
  for (uint64_t batch = 0; batch < 80; ++batch) {
    w.run(t, 100 + batch, model);  // past the growing phase: updates all over the table
    full += t.snapshot(file).full ? 1 : 0;
    snapshot::Superblock sb;
    {
      auto f = snapshot::posix_file_system().open_read(file);
      sb = snapshot::read_superblock(*f, file);
    }
    EXPECT_LE(sb.committed_end - snapshot::kFirstSegmentOffset, 2 * sb.base_bytes + 2 * sb.pool_bytes)
        << "the chain stays within about twice the image";
  }
  EXPECT_GE(full, 2) << "the chain was compacted";
  expect_restores_to(file, model, "after compactions");
}

// ---- damaged, truncated and foreign files --------------------------------------------------

// Makes a file with a chain of three segments (a full image, two small deltas); returns the model
// of the last one.
Model make_chain(const std::string& pool, const std::string& file) {
  Workload w(3, 40);
  Model model;
  Table t = Table::create(pool, {8, 40, {}, 256, 7});
  for (uint64_t batch = 0; batch < 6; ++batch) w.run(t, batch, model);
  t.snapshot(file);
  for (uint64_t round = 0; round < 2; ++round) {
    std::vector<uint64_t> keys = batches::key_range(100000 + 10 * round, 10);
    batches::run(t, Op::kUpsert, keys);
    for (uint64_t k : keys) {
      std::string found;
      model.apply(Op::kUpsert, Workload::key_string(k), batches::value_for(k, 40), &found);
    }
    EXPECT_FALSE(t.snapshot(file).full);
  }
  return model;
}

TEST(SnapshotFile, CorruptTruncatedOrForeignFilesAreRefusedAndChangeNothing) {
  TempPool pool("corrupt");
  TempDir dir("corrupt");
  const std::string file = dir.file("good.snap"), bad = dir.file("bad.snap");
  const Model model = make_chain(pool.path(), file);
  const std::string good = read_file(file);
  snapshot::Chain chain;
  {
    auto f = snapshot::posix_file_system().open_read(file);
    chain = snapshot::read_chain(*f, file);
  }
  ASSERT_EQ(chain.segments.size(), 3u);
  const snapshot::Segment& last = chain.segments.back();
  auto flipped = [&](uint64_t at) {
    std::string s = good;
    s[at] = static_cast<char>(s[at] ^ 0x10);
    return s;
  };
  auto both_superblocks = [&](uint64_t field) {
    std::string s = flipped(field);
    s[4096 + field] = static_cast<char>(s[4096 + field] ^ 0x10);
    return s;
  };
  std::string future = good;
  for (uint64_t copy : snapshot::kSuperblockOffset) {
    snapshot::Superblock sb;
    std::memcpy(&sb, future.data() + copy, sizeof sb);
    sb.version_major = 2;
    sb.checksum = snapshot::checksum_of(sb);
    std::memcpy(future.data() + copy, &sb, sizeof sb);
  }
  struct Case {
    std::string name, bytes;
    ErrorCode code = ErrorCode::kCorruptFile;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"empty file", "", ErrorCode::kCorruptFile, "not a gphash snapshot file"},
      {"text", std::string(9000, 'x'), ErrorCode::kCorruptFile, "not a gphash snapshot file"},
      {"a pool, not a snapshot", read_file(pool.path()), ErrorCode::kCorruptFile, "not a gphash snapshot file"},
      {"truncated to 100 bytes", good.substr(0, 100), ErrorCode::kCorruptFile, "truncated"},
      {"truncated inside the superblocks", good.substr(0, 6000), ErrorCode::kCorruptFile, "truncated"},
      {"truncated inside the last segment", good.substr(0, good.size() - 5000), ErrorCode::kCorruptFile, "truncated"},
      {"truncated by one byte", good.substr(0, good.size() - 1), ErrorCode::kCorruptFile, "truncated"},
      {"both superblock checksums", both_superblocks(4088), ErrorCode::kCorruptFile, "checksum"},
      {"both superblocks' committed end", both_superblocks(72), ErrorCode::kCorruptFile, "checksum"},
      {"a future major version", future, ErrorCode::kUnsupportedVersion, "version"},
      {"the base segment's header", flipped(snapshot::kFirstSegmentOffset + 30), ErrorCode::kCorruptFile, "segment 0"},
      {"the last segment's header", flipped(last.offset + 50), ErrorCode::kCorruptFile, "segment 2"},
      {"the last segment's index", flipped(last.data_offset() + last.header.data_pages * 4096 + 3), ErrorCode::kCorruptFile,
       "index checksum"},
      {"a data page of the last segment", flipped(last.data_offset() + 4096 + 77), ErrorCode::kCorruptFile, "fails its hash"},
  };
  for (const Case& c : cases) {
    write_file(bad, c.bytes);
    TempPool target("corrupt-target");
    try {
      Table::restore(bad, target.path());
      ADD_FAILURE() << c.name << ": restored";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), c.code) << c.name << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << c.name << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << c.name << ": names the file: " << e.what();
    }
    EXPECT_FALSE(snapshot::posix_file_system().exists(target.path())) << c.name << ": a pool was created";
    // A snapshot into the damaged file refuses too, and leaves it as it was; except that the data
    // pages of a file are only read by a restore: a full image replaces such a file (a delta
    // would leave the damaged page to the next restore to report).
    if (c.says == "fails its hash") {
      Model less = model;
      {
        Table t = Table::open(pool.path());  // a process writes and takes no snapshot
        batches::run(t, Op::kErase, {1});
        less.apply(Op::kErase, Workload::key_string(1), {}, nullptr);
      }
      Table t = Table::open(pool.path());
      EXPECT_TRUE(t.snapshot(bad).full) << "the pool changed after its last snapshot: a full image";
      expect_restores_to(bad, less, c.name + ": replaced");
      continue;
    }
    {
      Table t = Table::open(pool.path());
      expect_error([&] { t.snapshot(bad); }, c.code, {}, c.name.c_str());
    }
    EXPECT_TRUE(read_file(bad) == c.bytes) << c.name << ": the file was changed";
  }
  // One torn superblock copy is what a crash during a commit leaves: the other copy stands.
  const snapshot::Superblock& sb = chain.superblock;
  const uint64_t current = sb.generation % 2 == 1 ? 0 : 4096;  // generation 1 is in both; later ones alternate
  write_file(bad, flipped(current + 100));
  TempPool target("torn-superblock");
  const RestoreResult r = Table::restore(bad, target.path());
  EXPECT_LT(r.segments, 3u) << "restored the previous chain state";
  EXPECT_TRUE(read_file(file) == good);
  expect_restores_to(file, model, "the untouched file");
}

TEST(SnapshotFile, ASnapshotOfAnotherPoolIsNotOverwritten) {
  TempPool a("foreign-a"), b("foreign-b");
  TempDir dir("foreign");
  const std::string file = dir.file("a.snap");
  make_chain(a.path(), file);
  const std::string before = read_file(file);
  Table t = Table::create(b.path(), {8, 8, {}, 64, 9});
  expect_error([&] { t.snapshot(file); }, ErrorCode::kInvalidArgument, "path", "another pool's snapshot file");
  EXPECT_TRUE(read_file(file) == before);
}

TEST(SnapshotFile, IsCreatedOwnerOnlyUnlessAModeIsAsked) {
  TempPool pool("mode");
  TempDir dir("mode");
  const mode_t old_umask = umask(0);  // the modes must not depend on the umask
  {
    Table t = Table::create(pool.path(), {});
    t.snapshot(dir.file("default.snap"));
  }
  OpenOptions o;
  o.snapshots.file_mode = 0640;
  o.snapshots.path = dir.file("asked.snap");
  {
    Table t = Table::open(pool.path(), o);
    t.snapshot();
  }
  umask(old_umask);
  struct stat st {};
  ASSERT_EQ(stat(dir.file("default.snap").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat(dir.file("asked.snap").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
}

// ---- restart -------------------------------------------------------------------------------

TEST(SnapshotRestore, OpeningAMissingPoolRestoresItAndInfoSaysWhatARestartLoses) {
  TempPool pool("missing");
  TempDir dir("missing");
  OpenOptions o;
  o.snapshots.path = dir.file("pool.snap");
  Workload w(21, 16);
  Model model;
  {
    Table t = Table::create(pool.path(), {8, 16, {}, 256, 7}, o);
    EXPECT_EQ(t.info().last_snapshot_unix_ns, 0u);
    for (uint64_t batch = 0; batch < 10; ++batch) w.run(t, batch, model);
    const uint64_t before = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                      std::chrono::system_clock::now().time_since_epoch())
                                                      .count());
    t.snapshot();
    const TableInfo i = t.info();
    EXPECT_GE(i.last_snapshot_unix_ns, before);
    EXPECT_EQ(i.writes_since_snapshot, 0u);
    Model lost = model;
    w.run(t, 10, lost);  // after the snapshot: a restart loses it
    const Workload::Prepared p = w.make(10);
    uint64_t writes = 0;
    for (Op op : p.ops) writes += op != Op::kSearch;
    EXPECT_EQ(t.info().writes_since_snapshot, writes);
    const TableInfo seen = Table::inspect(pool.path());  // another process's view, while open
    EXPECT_EQ(seen.writes_since_snapshot, writes);
    EXPECT_EQ(seen.last_snapshot_unix_ns, i.last_snapshot_unix_ns);
  }
  std::remove(pool.path().c_str());  // the reboot
  Table t = Table::open(pool.path(), o);
  expect_same_items(t, model, "restored at open");
  EXPECT_EQ(t.info().writes_since_snapshot, 0u);
  EXPECT_NE(t.info().last_snapshot_unix_ns, 0u);
  // Without a snapshot file, a missing pool is still an error.
  std::remove(o.snapshots.path.c_str());
  TempPool other("missing-none");
  expect_error([&] { Table::open(other.path(), o); }, ErrorCode::kNotFound, {}, "no pool, no snapshot");
}

TEST(SnapshotRestore, AnExistingPoolIsReplacedOnlyWhenAsked) {
  TempPool pool("replace"), target("replace-target");
  TempDir dir("replace");
  const std::string file = dir.file("pool.snap");
  const Model model = make_chain(pool.path(), file);
  { Table other = Table::create(target.path(), {8, 8, {}, 64, 1}); }
  expect_error([&] { Table::restore(file, target.path()); }, ErrorCode::kPoolExists, {}, "restore over a pool");
  {
    Table other = Table::open(target.path());
    EXPECT_EQ(other.key_width(), 8u);
    EXPECT_EQ(other.value_width(), 8u) << "the existing pool is untouched";
  }
  RestoreOptions replace;
  replace.replace = true;
  EXPECT_EQ(Table::restore(file, target.path(), replace).items, model.size());
  Table back = Table::open(target.path());
  expect_same_items(back, model, "replaced");
}

// ---- automatic snapshots -------------------------------------------------------------------

TEST(AutoSnapshots, EveryNBatchesAndAtCloseWhileAWorkloadRuns) {
  TempPool pool("auto-batches");
  TempDir dir("auto-batches");
  OpenOptions o;
  o.snapshots.path = dir.file("pool.snap");
  o.snapshots.every_batches = 4;
  Workload w(31, 8);
  Model model;
  {
    Table t = Table::create(pool.path(), {8, 8, {}, 256, 7}, o);
    for (uint64_t batch = 0; batch < 42; ++batch) {
      w.run(t, batch, model);
      if (batch % 4 != 3) continue;
      // The fourth batch wakes the snapshot thread; a snapshot does not queue behind another, so
      // wait for this one before the next batches count towards the next.
      const uint64_t want = (batch + 1) / 4;
      for (int i = 0; i < 500 && t.info().snapshots_taken < want; ++i) std::this_thread::sleep_for(2ms);
      ASSERT_EQ(t.info().snapshots_taken, want) << "after batch " << batch;
      expect_restores_to(o.snapshots.path, model, fmt::format("after batch {}", batch));
    }
    EXPECT_TRUE(t.info().snapshot_error.empty()) << t.info().snapshot_error;
    EXPECT_EQ(t.info().snapshots_taken, 10u) << "two batches since the last snapshot: none yet";
  }
  expect_restores_to(o.snapshots.path, model, "after close: the last snapshot has every write");
}

TEST(AutoSnapshots, EveryNSecondsWhileAWorkloadRuns) {
  TempPool pool("auto-time");
  TempDir dir("auto-time");
  OpenOptions o;
  o.snapshots.path = dir.file("pool.snap");
  o.snapshots.every_seconds = 0.05;
  Workload w(41, 8);
  Model model;
  Table t = Table::create(pool.path(), {8, 8, {}, 256, 7}, o);
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t batch = 0;
  while (std::chrono::steady_clock::now() - t0 < 600ms) {
    w.run(t, batch++, model);
    std::this_thread::sleep_for(2ms);
  }
  const TableInfo i = t.info();
  EXPECT_GE(i.snapshots_taken, 3u) << "0.6 s of writes, a snapshot every 0.05 s (" << batch << " batches)";
  EXPECT_TRUE(i.snapshot_error.empty()) << i.snapshot_error;
  // Idle: nothing written, nothing taken.
  t.snapshot();  // catch up
  const uint64_t idle_from = t.info().snapshots_taken;
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(t.info().snapshots_taken, idle_from) << "no snapshot without writes";
  expect_restores_to(o.snapshots.path, model, "the last snapshot");
}

TEST(AutoSnapshots, AFailingSnapshotIsReportedAndTheBatchesGoOn) {
  TempPool pool("auto-fail");
  OpenOptions o;
  o.snapshots.path = "/nonexistent-gphash-dir/pool.snap";
  o.snapshots.every_batches = 1;
  Workload w(51, 8);
  Model model;
  Table t = Table::create(pool.path(), {8, 8, {}, 256, 7}, o);
  for (uint64_t batch = 0; batch < 5; ++batch) w.run(t, batch, model);
  for (int i = 0; i < 200 && t.info().snapshot_error.empty(); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_NE(t.info().snapshot_error.find("/nonexistent-gphash-dir"), std::string::npos) << t.info().snapshot_error;
  expect_same_items(t, model, "batches after failed snapshots");
  expect_error([&] { t.close(); }, ErrorCode::kNotFound, {}, "close reports that its last snapshot failed");
}

TEST(AutoSnapshots, OptionsAreChecked) {
  TempPool pool("auto-options");
  OpenOptions o;
  o.snapshots.every_batches = 3;
  expect_error([&] { Table::create(pool.path(), {}, o); }, ErrorCode::kInvalidArgument, "snapshots.path", "no path");
  o.snapshots.path = "/tmp/x.snap";
  o.snapshots.every_seconds = -1;
  expect_error([&] { Table::create(pool.path(), {}, o); }, ErrorCode::kInvalidArgument, "snapshots.every_seconds", "negative");
}

// ---- beside running batches ----------------------------------------------------------------

// Write operations of batch `index` (what it adds to the pool's write counter).
uint64_t writes_of(const Workload& w, uint64_t index) {
  const Workload::Prepared p = w.make(index);
  uint64_t n = 0;
  for (Op op : p.ops) n += op != Op::kSearch;
  return n;
}

TEST(SnapshotConcurrency, SnapshotsTakenWhileBatchesRunCaptureABatchBoundaryAndSearchesGoOn) {
  TempPool pool("concurrent");
  TempDir dir("concurrent");
  const std::string file = dir.file("pool.snap");
  Workload w(61, 24, 60000, 2000);
  Table t = Table::create(pool.path(), {8, 24, {}, 1024, 7});
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> batches_done{0}, searches_done{0};
  std::thread writer([&] {
    for (uint64_t batch = 0; !stop.load(); ++batch) {
      Workload::Prepared p = w.make(batch);
      t.execute(p.batch);
      batches_done.store(batch + 1);
    }
  });
  std::thread reader([&] {
    std::vector<uint64_t> keys = batches::key_range(1, 256);
    while (!stop.load()) {
      batches::run(t, Op::kSearch, keys);
      searches_done.fetch_add(1);
    }
  });
  std::vector<SnapshotResult> results;
  std::vector<std::string> copies;
  for (int i = 0; i < 6; ++i) {
    std::this_thread::sleep_for(40ms);
    results.push_back(t.snapshot(file));
    copies.push_back(dir.file(fmt::format("copy-{}.snap", i)));
    write_file(copies.back(), read_file(file));  // the chain as of this snapshot
  }
  stop.store(true);
  writer.join();
  reader.join();
  EXPECT_GT(searches_done.load(), 0u);
  // Each snapshot is the state after some batch: the one whose write count it captured.
  Model model;
  uint64_t counter = 0, batch = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    while (counter < results[i].pool_writes) {
      counter += writes_of(w, batch);
      w.apply_to_model(batch++, model);
    }
    ASSERT_EQ(counter, results[i].pool_writes) << "snapshot " << i << " captured a count that is no batch boundary";
    expect_restores_to(copies[i], model, fmt::format("snapshot {} (after batch {})", i, batch));
  }
  EXPECT_GT(batch, 6u) << "batches ran between the snapshots";
}

TEST(SnapshotConcurrency, WritersAreHeldOffOnlyWhileChangedPagesAreCopied) {
  // A 64 MiB table: a full image takes far longer to write than the pages a writer changes
  // meanwhile take to copy. The bound is loose for a loaded 2-core CI machine.
  TempPool pool("pause");
  TempDir dir("pause");
  const std::string file = dir.file("pool.snap");
  Table t = Table::create(pool.path(), {8, 8, {}, uint64_t{1} << 21, 7});
  batches::run(t, Op::kInsert, batches::key_range(1, 1 << 20));
  std::atomic<bool> stop{false};
  std::atomic<double> worst_batch{0};
  std::thread writer([&] {
    std::mt19937_64 rng(1);
    while (!stop.load()) {
      std::vector<uint64_t> keys(16);
      for (auto& k : keys) k = 1 + rng() % (1 << 20);
      const auto t0 = std::chrono::steady_clock::now();
      batches::run(t, Op::kUpsert, keys);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (s > worst_batch.load()) worst_batch.store(s);
      std::this_thread::sleep_for(1ms);
    }
  });
  const SnapshotResult full = t.snapshot(file);
  std::this_thread::sleep_for(100ms);
  const SnapshotResult delta = t.snapshot(file);
  stop.store(true);
  writer.join();
  EXPECT_TRUE(full.full);
  EXPECT_FALSE(delta.full);
  fmt::print("[snapshot_test] full image: {:.1f} ms, writers held {:.2f} ms; delta: {:.1f} ms ({} pages), held {:.2f} ms; "
             "slowest writing batch {:.2f} ms\n",
             1e3 * full.seconds, 1e3 * full.writers_held_seconds, 1e3 * delta.seconds, delta.pages_written,
             1e3 * delta.writers_held_seconds, 1e3 * worst_batch.load());
  EXPECT_LT(full.writers_held_seconds, 0.1) << "of " << full.seconds << " s";
  EXPECT_LT(full.writers_held_seconds, full.seconds / 2) << "writers wait for the changed pages only";
  EXPECT_LT(delta.writers_held_seconds, 0.1);
}

// ---- failed writes -------------------------------------------------------------------------

TEST(SnapshotFaults, AFailedStepKeepsThePreviousSnapshotAndTheNextOneCatchesUp) {
  // Fails each step (write, sync, rename, ...) of a full snapshot and of a delta in turn, with a
  // full disk and with an I/O error: the call throws that error, the file restores to the
  // previous snapshot (or to the new one, when only the last sync failed), and the next snapshot
  // has everything, including the pages whose marks the failed one had taken.
  const std::string file = "/snap/pool.snap";
  const Workload w(71, 40);
  // Runs batches, a snapshot, batches, a second snapshot; fails step `fail` (counted from the
  // start of snapshot `which`, -1: none). Returns that snapshot's steps.
  auto scenario = [&](int which, int64_t fail, ErrorCode code) -> uint64_t {
    TempPool pool("fault");
    FaultFileSystem fs;
    HandTable t(pool.path(), {8, 40, {}, 256, 3});
    snapshot::Snapshotter snapshots(*t.pool, t.batches, fs);
    Model model;
    std::optional<Model> previous;
    uint64_t steps = 0;
    for (int round = 0; round < 2; ++round) {
      for (uint64_t b = 0; b < 4; ++b) w.run(t, 4 * round + b, model);
      const uint64_t before = fs.steps();
      if (round == which && fail >= 0) {
        fs.fail_step = static_cast<int64_t>(before) + fail;
        fs.fail_code = code;
        try {
          snapshots.take(file);
          ADD_FAILURE() << "no failure";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), code) << e.what();
        }
        fs.fail_step = -1;
        if (fs.exists(file)) {  // the previous state, or the new one if only the last sync failed
          TempPool restored("fault-restored");
          snapshot::restore_pool(file, restored.path(), {}, fs);
          Table r = Table::open(restored.path());
          const bool is_new = r.size() == model.size();
          expect_same_items(r, is_new || !previous ? model : *previous, "after the failure");
        }
        for (uint64_t b = 0; b < 2; ++b) w.run(t, 100 + 2 * round + b, model);
      }
      snapshots.take(file);
      steps = round == which ? fs.steps() - before : steps;
      expect_restores_to(file, model, fmt::format("snapshot {} after the failure", round), fs);
      previous = model;
    }
    return steps;
  };
  int failures = 0;
  for (int which : {0, 1}) {
    const uint64_t steps = scenario(which, -1, ErrorCode::kIo);
    EXPECT_GT(steps, 4u);
    for (ErrorCode code : {ErrorCode::kNoSpace, ErrorCode::kIo})
      for (uint64_t step = 0; step < steps; ++step) {
        SCOPED_TRACE(fmt::format("snapshot {}: {} at step {} of {}", which, to_string(code), step, steps));
        scenario(which, static_cast<int64_t>(step), code);
        ++failures;
      }
  }
  fmt::print("[snapshot_test] {} failed steps injected\n", failures);
}

}  // namespace
}  // namespace gphash::testing
