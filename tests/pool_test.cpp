// Pool kinds and the typed errors of whole calls: where a pool lives, exclusive and read-only
// opening, malformed batches (refused before anything changes), bad configurations, exhausted
// heaps and tables (nothing acknowledged is lost) and the fallback to the older header copy.
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "format/header.h"
#include "pool/pool.h"
#include "gphash/table.h"
#include "test_util.h"

namespace gphash {
namespace {

using testing::TempPool;
using namespace testing::batches;
namespace fs = std::filesystem;

bool on_tmpfs(const std::string& dir) {
  struct statfs st {};
  return statfs(dir.c_str(), &st) == 0 &&
         (static_cast<unsigned long>(st.f_type) == TMPFS_MAGIC || static_cast<unsigned long>(st.f_type) == RAMFS_MAGIC);
}

// A directory on a disk file system (the system temp directory, or the working directory, which
// is the build folder under ctest, where the temp directory is a tmpfs), removed with its
// contents afterwards. Empty path when neither is on disk.
class TempDir {
 public:
  TempDir() {
    for (const std::string& parent : {fs::temp_directory_path().string(), fs::current_path().string()}) {
      if (on_tmpfs(parent)) continue;
      std::string tmpl = parent + "/gphash-pool-test-XXXXXX";
      if (!mkdtemp(tmpl.data())) continue;
      path_ = tmpl;
      return;
    }
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(PoolKinds, BareNameIsInDevShm) {
  const std::string name = "gphash-pool-test-" + std::to_string(getpid()) + "-bare";
  const std::string path = "/dev/shm/" + name;
  std::remove(path.c_str());
  {
    Table t = Table::create(name, {8, 8, {}, 64, 1});
    EXPECT_TRUE(fs::exists(path));
    EXPECT_EQ(t.info().path, path);
    EXPECT_EQ(t.info().pool_kind, "shm");
    run(t, Op::kInsert, key_range(1, 100));
  }
  {
    Table t = Table::open(name);
    EXPECT_EQ(t.size(), 100u);
    expect_present(t, key_range(1, 100));
    expect_error([&] { Table::open(path); }, ErrorCode::kPoolInUse, {}, "the full path names the same pool");
  }
  EXPECT_EQ(std::remove(path.c_str()), 0);
}

// tmpfs and memfd pools ask for 2 MiB pages (MADV_HUGEPAGE), so that a tmpfs mounted huge=advise
// backs them with huge pages (twice as fast growth of host-mapped GPU tables, pool.cpp). Checked on
// the mappings: every mapping of the pool's file, the grown parts too, carries the kernel's "hg"
// flag in /proc/self/smaps.
TEST(PoolKinds, TmpfsPoolsAskForHugePages) {
  if (!fs::exists("/sys/kernel/mm/transparent_hugepage")) GTEST_SKIP() << "this kernel has no transparent huge pages";
  TempPool pool("huge-pages");
  Table t = Table::create(pool.path(), {8, 8, {}, 1024, 1});
  run(t, Op::kInsert, key_range(1, 20000));
  ASSERT_GT(t.info().resizes, 0u) << "the table should have grown";
  struct stat st {};
  ASSERT_EQ(stat(pool.path().c_str(), &st), 0);
  char dev[32];
  std::snprintf(dev, sizeof dev, "%02x:%02x", major(st.st_dev), minor(st.st_dev));
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in_pool = false;
  int mappings = 0, advised = 0;
  while (std::getline(smaps, line)) {
    std::istringstream fields(line);
    std::string range, perms, offset, device, inode;
    fields >> range;
    if (!range.empty() && range.back() != ':' && (fields >> perms >> offset >> device >> inode)) {
      in_pool = device == dev && inode == std::to_string(st.st_ino);
      mappings += in_pool;
    } else if (in_pool && range == "VmFlags:") {
      advised += (" " + line + " ").find(" hg ") != std::string::npos;
    }
  }
  EXPECT_GT(mappings, 0) << "no mapping of " << pool.path() << " (" << dev << " " << st.st_ino << ") in /proc/self/smaps";
  EXPECT_EQ(advised, mappings) << "mappings of the pool without MADV_HUGEPAGE";
}

TEST(PoolKinds, RegularFileSurvivesReopen) {
  TempDir dir;
  if (dir.path().empty()) GTEST_SKIP() << "neither the temp directory nor the working directory is on a disk";
  const std::string path = dir.path() + "/pool";
  {
    Table t = Table::create(path, {8, 32, {}, 64, 2});
    EXPECT_EQ(t.info().pool_kind, "file");
    EXPECT_EQ(t.info().path, path);
    run(t, Op::kInsert, key_range(1, 3000));  // forces resizes and heap growth
    run(t, Op::kErase, key_range(1, 100));
  }
  {
    Table t = Table::open(path);
    EXPECT_EQ(t.info().pool_kind, "file");
    EXPECT_FALSE(t.info().recovered);
    EXPECT_EQ(t.size(), 2900u);
    expect_present(t, key_range(101, 2900));
    expect_absent(t, key_range(1, 100));
    EXPECT_TRUE(t.check().ok) << t.check().violation;
  }
  // No temporary files of the create are left next to the pool.
  size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path())) ++files;
  EXPECT_EQ(files, 1u);
}

TEST(PoolKinds, AnonymousMemoryWorksWhileOpenAndCannotBeReopened) {
  Table t = Table::create("mem:", {16, 8, {}, 64, 3});
  EXPECT_EQ(t.info().pool_kind, "memory");
  std::vector<uint64_t> keys(2 * 500);  // 500 16-byte keys
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = i * 7 + 1;
  std::vector<uint64_t> values(500, 42), out(500);
  std::vector<OpStatus> status(500);
  Batch b{500, 16, 8, Op::kInsert, nullptr, keys.data(), values.data(), nullptr, status.data()};
  t.execute(b);
  for (OpStatus s : status) ASSERT_EQ(s, OpStatus::kOk);
  b.op = Op::kSearch;
  b.values = nullptr;
  b.values_out = out.data();
  t.execute(b);
  for (size_t i = 0; i < 500; ++i) {
    ASSERT_EQ(status[i], OpStatus::kOk);
    ASSERT_EQ(out[i], 42u);
  }
  EXPECT_TRUE(t.check().ok);
  expect_error([] { Table::open("mem:"); }, ErrorCode::kInvalidArgument, {}, "open mem:");
  // Two anonymous pools are independent.
  Table other = Table::create("mem:", {16, 8, {}, 64, 3});
  EXPECT_EQ(other.size(), 0u);
}

TEST(PoolErrors, CreateOverExistingPathNeedsReplace) {
  TempPool pool("exists");
  {
    Table t = Table::create(pool.path(), {8, 8, {}, 64, 4});
    run(t, Op::kInsert, key_range(1, 10));
  }
  expect_error([&] { Table::create(pool.path(), {8, 8, {}, 64, 4}); }, ErrorCode::kPoolExists, {}, "create over pool");
  {
    Table t = Table::open(pool.path());  // the failed create left the pool alone
    EXPECT_EQ(t.size(), 10u);
  }
  // Any existing file counts, not only pools.
  TempPool plain("exists-plain");
  {
    std::FILE* f = std::fopen(plain.path().c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("hello", f);
    std::fclose(f);
  }
  expect_error([&] { Table::create(plain.path(), {8, 8, {}, 64, 4}); }, ErrorCode::kPoolExists, {}, "create over file");

  OpenOptions replace;
  replace.replace = true;
  {
    Table t = Table::create(pool.path(), {16, 32, {}, 64, 5}, replace);
    EXPECT_EQ(t.size(), 0u);
    EXPECT_EQ(t.key_width(), 16u);
  }
  Table t = Table::open(pool.path());
  EXPECT_EQ(t.key_width(), 16u);
  EXPECT_EQ(t.value_width(), 32u);
}

TEST(PoolErrors, OpenMissingPathIsNotFound) {
  TempPool pool("missing");
  expect_error([&] { Table::open(pool.path()); }, ErrorCode::kNotFound, {}, "open missing");
  OpenOptions ro;
  ro.read_only = true;
  expect_error([&] { Table::open(pool.path(), ro); }, ErrorCode::kNotFound, {}, "open missing read-only");
  expect_error([&] { Table::inspect(pool.path()); }, ErrorCode::kNotFound, {}, "inspect missing");
  EXPECT_FALSE(fs::exists(pool.path()));
}

TEST(PoolErrors, SecondWritableOpenIsPoolInUse) {
  TempPool pool("in-use");
  Table first = Table::create(pool.path(), {8, 8, {}, 64, 6});
  run(first, Op::kInsert, key_range(1, 10));
  OpenOptions ro;
  ro.read_only = true;
  expect_error([&] { Table::open(pool.path()); }, ErrorCode::kPoolInUse, {}, "writable open while created");
  expect_error([&] { Table::open(pool.path(), ro); }, ErrorCode::kPoolInUse, {}, "read-only open while written");
  first.close();
  {
    // Closing alone does not release the lock: the Table still holds the pool until destroyed.
    Table moved = std::move(first);
  }
  Table second = Table::open(pool.path());
  expect_error([&] { Table::open(pool.path()); }, ErrorCode::kPoolInUse, {}, "writable open while reopened");
  EXPECT_EQ(second.size(), 10u);
}

TEST(PoolErrors, ReadOnlyOpenRejectsWrites) {
  TempPool pool("read-only");
  { Table t = Table::create(pool.path(), {8, 8, {}, 64, 7}); run(t, Op::kInsert, key_range(1, 50)); }
  OpenOptions ro;
  ro.read_only = true;
  Table a = Table::open(pool.path(), ro);
  Table b = Table::open(pool.path(), ro);  // readers share the pool
  expect_error([&] { Table::open(pool.path()); }, ErrorCode::kPoolInUse, {}, "writable open while read");
  for (Op op : {Op::kInsert, Op::kUpsert, Op::kUpdate, Op::kErase})
    expect_error([&] { run(a, op, key_range(1, 60)); }, ErrorCode::kReadOnly, {}, to_string(op));
  // A mixed batch with one write among searches is refused whole.
  std::vector<uint64_t> keys = key_range(1, 4);
  std::vector<Op> ops = {Op::kSearch, Op::kSearch, Op::kErase, Op::kSearch};
  std::vector<OpStatus> status(4);
  Batch mixed{4, 8, 8, Op::kSearch, ops.data(), keys.data(), nullptr, nullptr, status.data()};
  expect_error([&] { a.execute(mixed); }, ErrorCode::kReadOnly, {}, "mixed batch");
  EXPECT_EQ(a.size(), 50u);
  expect_present(a, key_range(1, 50));
  expect_present(b, key_range(1, 50));
  expect_absent(a, key_range(51, 10));
  EXPECT_TRUE(a.check().ok);
}

TEST(PoolErrors, WidthMismatchesNameTheField) {
  TempPool pool("widths");
  Table t = Table::create(pool.path(), {16, 32, {}, 64, 8});
  std::vector<unsigned char> keys(4 * 32, 1), values(4 * 64, 2);
  std::vector<OpStatus> status(4);
  for (uint32_t kw : {0u, 8u, 12u, 32u}) {
    Batch b{4, kw, 32, Op::kInsert, nullptr, keys.data(), values.data(), nullptr, status.data()};
    expect_error([&] { t.execute(b); }, ErrorCode::kKeyWidthMismatch, "key_width", "key width");
    b.op = Op::kSearch;
    expect_error([&] { t.execute(b); }, ErrorCode::kKeyWidthMismatch, "key_width", "key width (search)");
  }
  for (uint32_t vw : {0u, 8u, 31u, 64u}) {
    Batch b{4, 16, vw, Op::kUpsert, nullptr, keys.data(), values.data(), nullptr, status.data()};
    expect_error([&] { t.execute(b); }, ErrorCode::kValueWidthMismatch, "value_width", "value width");
    // A search that writes values out needs the right width as well.
    Batch s{4, 16, vw, Op::kSearch, nullptr, keys.data(), nullptr, values.data(), status.data()};
    expect_error([&] { t.execute(s); }, ErrorCode::kValueWidthMismatch, "value_width", "value width (search)");
  }
  EXPECT_EQ(t.size(), 0u);
}

TEST(PoolErrors, MalformedBatchesChangeNothing) {
  TempPool pool("malformed");
  Table t = Table::create(pool.path(), {8, 8, {}, 64, 9});
  run(t, Op::kInsert, key_range(1, 100));
  std::vector<uint64_t> keys = key_range(1000, 8), values(8, 5);
  std::vector<OpStatus> status(8, OpStatus::kOk);

  Batch no_status{8, 8, 8, Op::kInsert, nullptr, keys.data(), values.data(), nullptr, nullptr};
  expect_error([&] { t.execute(no_status); }, ErrorCode::kInvalidArgument, {}, "no status");
  Batch no_keys{8, 8, 8, Op::kInsert, nullptr, nullptr, values.data(), nullptr, status.data()};
  expect_error([&] { t.execute(no_keys); }, ErrorCode::kInvalidArgument, {}, "no keys");
  Batch bad_op{8, 8, 8, static_cast<Op>(9), nullptr, keys.data(), values.data(), nullptr, status.data()};
  expect_error([&] { t.execute(bad_op); }, ErrorCode::kInvalidArgument, "ops", "unknown op");
  // An unknown op late in a mixed batch: the valid inserts before it must not run either.
  std::vector<Op> ops(8, Op::kInsert);
  ops[6] = static_cast<Op>(9);
  Batch bad_mixed{8, 8, 8, Op::kSearch, ops.data(), keys.data(), values.data(), nullptr, status.data()};
  expect_error([&] { t.execute(bad_mixed); }, ErrorCode::kInvalidArgument, "ops", "unknown op in ops");
  ops[6] = static_cast<Op>(255);
  expect_error([&] { t.execute(bad_mixed); }, ErrorCode::kInvalidArgument, "ops", "op 255 in ops");
  for (Op op : {Op::kInsert, Op::kUpsert, Op::kUpdate}) {
    Batch no_values{8, 8, 8, op, nullptr, keys.data(), nullptr, nullptr, status.data()};
    expect_error([&] { t.execute(no_values); }, ErrorCode::kInvalidArgument, {}, to_string(op));
  }
  // A mixed batch where one late entry needs values that are missing.
  std::vector<Op> mostly_erase(8, Op::kErase);
  mostly_erase[7] = Op::kUpsert;
  std::vector<uint64_t> present = key_range(1, 8);
  Batch late_values{8, 8, 8, Op::kSearch, mostly_erase.data(), present.data(), nullptr, nullptr, status.data()};
  expect_error([&] { t.execute(late_values); }, ErrorCode::kInvalidArgument, {}, "upsert without values in ops");
  Batch device{8, 8, 8, Op::kInsert, nullptr, keys.data(), values.data(), nullptr, status.data(), MemorySpace::kDevice};
  expect_error([&] { t.execute(device); }, ErrorCode::kInvalidArgument, {}, "device memory on the CPU engine");

  for (OpStatus s : status) EXPECT_EQ(s, OpStatus::kOk) << "statuses are not written for a refused batch";
  EXPECT_EQ(t.size(), 100u);
  expect_present(t, key_range(1, 100));
  expect_absent(t, keys);
  EXPECT_TRUE(t.check().ok);
  // An empty batch is fine even with nothing in it.
  t.execute(Batch{});
}

TEST(PoolErrors, BadConfigurationsNameTheFieldAndLeaveNoFile) {
  TempPool pool("config");
  struct Case {
    TableConfig config;
    const char* field;
  };
  const Case cases[] = {
      {{12, 8, {}, 64, 1}, "key_width"},
      {{0, 8, {}, 64, 1}, "key_width"},
      {{64, 8, {}, 64, 1}, "key_width"},
      {{8, 0, {}, 64, 1}, "value_width"},
      {{8, 65537, {}, 64, 1}, "value_width"},
      {{8, 8, {3, 2, 8}, 64, 1}, "shape"},
      {{8, 8, {2, 2, 4}, 64, 1}, "shape"},
      {{8, 8, {0, 0, 0}, 64, 1}, "shape"},
      {{8, 8, {}, 0, 1}, "capacity"},
  };
  for (const Case& c : cases) {
    expect_error([&] { Table::create(pool.path(), c.config); }, ErrorCode::kInvalidArgument, c.field, c.field);
    EXPECT_FALSE(fs::exists(pool.path())) << c.field;
    expect_error([&] { Table::create("mem:", c.config); }, ErrorCode::kInvalidArgument, c.field, c.field);
  }
  // Nothing half-made is left in /dev/shm under the pool's name.
  const std::string prefix = fs::path(pool.path()).filename().string();
  for (const auto& e : fs::directory_iterator("/dev/shm"))
    EXPECT_NE(e.path().filename().string().rfind(prefix, 0), 0u) << "leftover " << e.path();
  expect_error([] { parse_shape("3L-2H"); }, ErrorCode::kInvalidArgument, "shape", "parse_shape");
  EXPECT_EQ(parse_shape("4L-2H-4S"), (TableShape{4, 2, 4}));
}

// Bytes the file system has allocated for a file (its blocks), whatever its size says.
uint64_t allocated_bytes(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

// OpenOptions::reserve_pool_bytes: the file gets its blocks at create, beyond its size, and the
// table grows into them without allocating more; a reservation over max_pool_bytes is refused.
TEST(PoolReservation, CreateAllocatesTheSpaceAndGrowthUsesIt) {
  constexpr uint64_t kReserve = uint64_t{64} << 20;
  TempPool pool("reserve");
  OpenOptions o;
  o.reserve_pool_bytes = kReserve;
  Table t = Table::create(pool.path(), {8, 8, {}, 1024, 1}, o);
  const uint64_t size_at_create = fs::file_size(pool.path());
  EXPECT_LT(size_at_create, kReserve / 4);
  EXPECT_GE(allocated_bytes(pool.path()), kReserve);
  const auto keys = key_range(1, 200000);  // eight resizes
  const auto st = run(t, Op::kInsert, keys);
  for (size_t i = 0; i < keys.size(); ++i) ASSERT_EQ(st[i], OpStatus::kOk) << i;
  EXPECT_GT(t.info().resizes, 0u);
  EXPECT_GT(fs::file_size(pool.path()), 4 * size_at_create);
  EXPECT_LE(allocated_bytes(pool.path()), kReserve + (uint64_t{1} << 20)) << "growth allocated beyond the reservation";
  expect_present(t, keys);
  t.close();
  Table again = Table::open(pool.path());
  EXPECT_EQ(again.size(), keys.size());

  TempPool refused("reserve-over-limit");
  OpenOptions over;
  over.max_pool_bytes = uint64_t{32} << 20;
  over.reserve_pool_bytes = uint64_t{33} << 20;
  expect_error([&] { Table::create(refused.path(), {8, 8, {}, 1024, 1}, over); }, ErrorCode::kInvalidArgument,
               "reserve_pool_bytes", "reserve over max");
  EXPECT_FALSE(fs::exists(refused.path()));
}

// Pool::reserve_ahead: space past the file's end, allocated on a thread of its own, which the next
// growth uses; what no growth used goes back when the pool closes, and a size limit bounds it.
TEST(PoolReservation, SpaceReservedAheadIsGrownIntoAndTheRestGivenBackAtClose) {
  constexpr uint64_t kAhead = uint64_t{16} << 20, kGrow = uint64_t{4} << 20;
  TempPool pool("reserve-ahead");
  Table::create(pool.path(), {8, 8, {}, 1024, 1}).close();
  const uint64_t size = fs::file_size(pool.path());
  {
    auto p = pool::Pool::open(pool.path(), {});
    p->reserve_ahead(kAhead);
    format::PoolHeader h = p->header();
    p->allocate_extent(h, kGrow);  // waits for the reservation, then grows into it
    EXPECT_GE(p->file_size(), size + kGrow);
    EXPECT_GE(allocated_bytes(pool.path()), size + kAhead);
  }
  const uint64_t grown = fs::file_size(pool.path());
  EXPECT_LE(allocated_bytes(pool.path()), grown) << "the unused reservation stayed allocated";
  Table reopened = Table::open(pool.path());
  EXPECT_EQ(reopened.size(), 0u);
  reopened.close();

  pool::OpenOptions limited;
  limited.max_size = grown + (uint64_t{2} << 20);
  {
    auto p = pool::Pool::open(pool.path(), limited);
    p->reserve_ahead(kAhead);
    format::PoolHeader h = p->header();
    p->allocate_extent(h, uint64_t{1} << 20);
    EXPECT_LE(allocated_bytes(pool.path()), limited.max_size) << "reserved past the size limit";
  }
}

// The size of a pool created with `config`, before any insert.
uint64_t initial_pool_bytes(const TableConfig& config) {
  Table probe = Table::create("mem:", config);
  return probe.info().pool_bytes;
}

// The exhaustion tests run on both engines (the GPU one where there is a GPU).
class PoolExhaustion : public ::testing::TestWithParam<EngineKind> {
 protected:
  void SetUp() override {
    if (GetParam() == EngineKind::kGpu && !testing::have_gpu()) GTEST_SKIP() << "no GPU engine here";
  }
  OpenOptions engine_options() const {
    OpenOptions o;
    o.engine = GetParam();
    return o;
  }
};

TEST_P(PoolExhaustion, FullHeapLosesNothing) {
  TempPool pool("heap-full");
  // 64-byte values live in the heap. The heap's first chunk holds 1024 cells (960 and a sixteenth,
  // rounded up), the table 1536 slots: the heap runs out first, and the limit leaves no room to
  // add a heap chunk (64 KiB more) or a level (32 KiB more).
  const TableConfig config{8, 64, {}, 960, 11};
  OpenOptions options = engine_options();
  options.max_pool_bytes = initial_pool_bytes(config) + 4096;
  Table t = Table::create(pool.path(), config, options);
  const uint64_t heap_cells = t.info().heap_cells;
  ASSERT_GT(heap_cells, 0u);
  ASSERT_LT(heap_cells, t.info().slots);

  std::vector<uint64_t> acked;
  uint64_t next = 1, heap_full = 0;
  for (int round = 0; round < 40 && heap_full < 600; ++round) {
    std::vector<uint64_t> keys = key_range(next, 300);
    next += keys.size();
    auto st = run(t, Op::kInsert, keys);
    for (size_t i = 0; i < keys.size(); ++i) {
      if (st[i] == OpStatus::kOk) {
        acked.push_back(keys[i]);
      } else {
        ASSERT_EQ(st[i], OpStatus::kHeapFull) << "key " << keys[i];
        ++heap_full;
      }
    }
  }
  ASSERT_GT(heap_full, 0u) << "the heap never filled";
  EXPECT_EQ(acked.size(), heap_cells) << "every cell holds an acknowledged value";
  EXPECT_EQ(t.size(), acked.size());
  expect_present(t, acked);
  expect_absent(t, key_range(acked.back() + 1, 300));
  EXPECT_EQ(t.info().heap_grows, 0u);
  EXPECT_LE(t.info().pool_bytes, options.max_pool_bytes);

  // An update needs a new cell before it lets go of the old one: it fails, the old value stays.
  std::vector<uint64_t> some(acked.begin(), acked.begin() + 10);
  std::vector<uint64_t> changed(10, 0x77);
  std::string new_values(10 * 64, 'x');
  std::vector<OpStatus> st(10);
  Batch update{10, 8, 64, Op::kUpdate, nullptr, some.data(), new_values.data(), nullptr, st.data()};
  t.execute(update);
  for (OpStatus s : st) EXPECT_EQ(s, OpStatus::kHeapFull);
  expect_present(t, acked);
  CheckResult r = t.check();
  EXPECT_TRUE(r.ok) << r.violation;
  EXPECT_EQ(r.items, acked.size());

  // Erasing frees cells for new inserts.
  std::vector<uint64_t> erased(acked.end() - 50, acked.end());
  acked.resize(acked.size() - 50);
  for (OpStatus s : run(t, Op::kErase, erased)) EXPECT_EQ(s, OpStatus::kOk);

  // One batch updates eight times more values than there are free cells, and the heap cannot
  // grow: each update frees the cell it replaces, and the GPU engine passes those on in rounds
  // within the batch. Every update succeeds; a second batch puts the old values back.
  std::vector<uint64_t> many(acked.begin(), acked.begin() + 400);
  std::string other(many.size() * 64, '\0');
  for (size_t i = 0; i < many.size(); ++i) other.replace(i * 64, 64, value_for(many[i] ^ 0x5a5a, 64));
  std::vector<OpStatus> many_st(many.size());
  Batch rewrite{many.size(), 8, 64, Op::kUpdate, nullptr, many.data(), other.data(), nullptr, many_st.data()};
  t.execute(rewrite);
  for (OpStatus s : many_st) ASSERT_EQ(s, OpStatus::kOk);
  std::string found;
  run(t, Op::kSearch, many, &found);
  EXPECT_TRUE(found == other) << "a value of the large update is wrong";
  for (OpStatus s : run(t, Op::kUpdate, many)) ASSERT_EQ(s, OpStatus::kOk);
  expect_present(t, acked);
  EXPECT_EQ(t.info().heap_grows, 0u);

  std::vector<uint64_t> fresh = key_range(next, 50);
  for (OpStatus s : run(t, Op::kInsert, fresh)) EXPECT_EQ(s, OpStatus::kOk);
  acked.insert(acked.end(), fresh.begin(), fresh.end());
  { Table closing = std::move(t); }  // closes and lets go of the pool
  Table reopened = Table::open(pool.path(), options);
  EXPECT_EQ(reopened.size(), acked.size());
  expect_present(reopened, acked);
  expect_absent(reopened, erased);
  EXPECT_TRUE(reopened.check().ok);
}

// A table holding exactly its capacity, a power of two, updates every item in one batch without
// growing its heap: an update takes a new cell before it frees the old one, and the first chunk
// has room for a sixteenth more than the capacity. (It had none: the first update batch doubled
// the heap, 0.24 s for 2^24 cells on the H200.)
TEST_P(PoolExhaustion, ATableAtItsCapacityUpdatesWithoutGrowingItsHeap) {
  TempPool pool("heap-room");
  const TableConfig config{8, 32, {}, 4096, 11};
  Table t = Table::create(pool.path(), config, engine_options());
  const std::vector<uint64_t> keys = key_range(1, 4096);
  for (OpStatus s : run(t, Op::kInsert, keys)) ASSERT_EQ(s, OpStatus::kOk);
  for (OpStatus s : run(t, Op::kUpdate, keys)) ASSERT_EQ(s, OpStatus::kOk);
  EXPECT_EQ(t.info().heap_grows, 0u);
  expect_present(t, keys);
}

TEST_P(PoolExhaustion, FullTableWithoutResizeLosesNothing) {
  TempPool pool("table-full");
  OpenOptions options = engine_options();
  options.auto_resize = false;
  for (uint32_t value_width : {8u, 24u}) {
    SCOPED_TRACE(value_width);
    std::remove(pool.path().c_str());
    Table t = Table::create(pool.path(), {8, value_width, {}, 16, 12}, options);
    const uint64_t slots = t.info().slots;
    std::vector<uint64_t> acked;
    uint64_t next = 1, full = 0;
    while (full < 200) {
      std::vector<uint64_t> keys = key_range(next, 20);
      next += keys.size();
      auto st = run(t, Op::kInsert, keys);
      for (size_t i = 0; i < keys.size(); ++i) {
        if (st[i] == OpStatus::kOk) {
          acked.push_back(keys[i]);
        } else {
          ASSERT_EQ(st[i], OpStatus::kTableFull) << "key " << keys[i];
          ++full;
        }
      }
      ASSERT_LE(acked.size(), slots);
    }
    EXPECT_GT(acked.size(), slots / 2) << "displacement should fill most slots";
    EXPECT_EQ(t.info().resizes, 0u);
    EXPECT_EQ(t.info().slots, slots);
    EXPECT_EQ(t.size(), acked.size());
    expect_present(t, acked);
    CheckResult r = t.check();
    EXPECT_TRUE(r.ok) << r.violation;
    EXPECT_EQ(r.items, acked.size());
    // Upserts of present keys need no slot and still work.
    for (OpStatus s : run(t, Op::kUpsert, acked)) EXPECT_EQ(s, OpStatus::kOk);
    { Table closing = std::move(t); }
    Table reopened = Table::open(pool.path(), options);
    expect_present(reopened, acked);
    EXPECT_EQ(reopened.size(), acked.size());
  }
}

TEST_P(PoolExhaustion, SizeLimitStopsResizeButKeepsData) {
  TempPool pool("size-limit");
  const TableConfig config{8, 8, {}, 16, 13};
  OpenOptions options = engine_options();
  options.max_pool_bytes = initial_pool_bytes(config) + 2 * 4096;  // room for two more levels at most
  Table t = Table::create(pool.path(), config, options);
  std::vector<uint64_t> acked;
  uint64_t full = 0, next = 1;
  while (full < 100) {
    std::vector<uint64_t> keys = key_range(next, 64);
    next += keys.size();
    auto st = run(t, Op::kUpsert, keys);
    for (size_t i = 0; i < keys.size(); ++i) {
      if (st[i] == OpStatus::kOk) acked.push_back(keys[i]);
      else {
        ASSERT_EQ(st[i], OpStatus::kTableFull);
        ++full;
      }
    }
  }
  EXPECT_GT(t.info().resizes, 0u);
  EXPECT_LE(t.info().pool_bytes, options.max_pool_bytes);
  expect_present(t, acked);
  EXPECT_EQ(t.size(), acked.size());
  EXPECT_TRUE(t.check().ok);
}

// Reads the generations of both header copies of a closed pool file.
void read_headers(const std::string& path, format::PoolHeader (&h)[2]) {
  int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  for (int c = 0; c < 2; ++c)
    ASSERT_EQ(pread(fd, &h[c], sizeof h[c], static_cast<off_t>(format::kHeaderCopyOffset[c])),
              static_cast<ssize_t>(sizeof h[c]));
  ::close(fd);
}

void flip_byte(const std::string& path, uint64_t offset) {
  int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  unsigned char b = 0;
  ASSERT_EQ(pread(fd, &b, 1, static_cast<off_t>(offset)), 1);
  b ^= 0x10;
  ASSERT_EQ(pwrite(fd, &b, 1, static_cast<off_t>(offset)), 1);
  ::close(fd);
}

TEST(HeaderFallback, TornNewerCopyFallsBackToOlder) {
  for (uint64_t field_offset : {uint64_t{72} /* key_width */, uint64_t{40} /* pool_size */, uint64_t{2000} /* reserved */,
                                uint64_t{4090} /* checksum */}) {
    SCOPED_TRACE(field_offset);
    TempPool pool("torn");
    {
      Table t = Table::create(pool.path(), {8, 32, {}, 64, 14});
      run(t, Op::kInsert, key_range(1, 2000));  // resizes and grows the heap: many header writes
      run(t, Op::kErase, key_range(1, 10));
    }
    format::PoolHeader h[2];
    read_headers(pool.path(), h);
    const int newer = h[0].generation > h[1].generation ? 0 : 1;
    ASSERT_NE(h[0].generation, h[1].generation);
    EXPECT_EQ(h[newer].clean_shutdown, 1u);
    flip_byte(pool.path(), format::kHeaderCopyOffset[newer] + field_offset);
    {
      Table t = Table::open(pool.path());
      // The older copy is the one the session marked dirty: the pool opens from it and recovers.
      EXPECT_TRUE(t.info().recovered) << "opened from the older copy";
      EXPECT_LT(t.info().generation, h[newer].generation);
      EXPECT_EQ(t.size(), 1990u);
      expect_present(t, key_range(11, 1990));
      expect_absent(t, key_range(1, 10));
      EXPECT_TRUE(t.check().ok);
      run(t, Op::kInsert, key_range(1, 5));
    }
    // The damaged copy was rewritten; both copies are valid again.
    read_headers(pool.path(), h);
    for (int c = 0; c < 2; ++c) EXPECT_EQ(h[c].checksum, format::header_checksum(h[c])) << "copy " << c;
    Table t = Table::open(pool.path());
    EXPECT_EQ(t.size(), 1995u);
    EXPECT_FALSE(t.info().recovered);
  }
}

// A table that resizes by itself has its next level and heap chunk reserved ahead (TableMeta::
// reserve_growth_ahead) once it is half way there: the pool's file has more blocks than its size
// before the growth, the growth uses them, and what is left goes back at close.
TEST_P(PoolExhaustion, TheNextGrowthIsReservedAheadAndTheRestGivenBackAtClose) {
  TempPool pool("grow-ahead");
  Table t = Table::create(pool.path(), {8, 32, {}, 4096, 3}, engine_options());
  const uint64_t slots = t.info().slots, heap_cells = t.info().heap_cells;
  const uint64_t half_way = static_cast<uint64_t>(0.5 * OpenOptions{}.max_load_factor * static_cast<double>(std::min(slots, heap_cells)));
  std::vector<uint64_t> keys = key_range(1, half_way + 64);
  run(t, Op::kInsert, keys);
  ASSERT_EQ(t.info().slots, slots) << "grew before the test could look";
  // The reservation runs on a thread of its own: wait for its blocks.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (allocated_bytes(pool.path()) <= fs::file_size(pool.path()) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_GT(allocated_bytes(pool.path()), fs::file_size(pool.path())) << "nothing reserved ahead";
  keys = key_range(1, 2 * slots);
  run(t, Op::kInsert, keys);
  EXPECT_GT(t.info().slots, slots);
  expect_present(t, keys);
  t.close();
  EXPECT_LE(allocated_bytes(pool.path()), fs::file_size(pool.path())) << "the unused reservation stayed allocated";
  Table again = Table::open(pool.path(), engine_options());
  EXPECT_EQ(again.size(), keys.size());
  expect_present(again, keys);
}

}  // namespace
INSTANTIATE_TEST_SUITE_P(Engines, PoolExhaustion, ::testing::Values(EngineKind::kCpu, EngineKind::kGpu),
                         [](const ::testing::TestParamInfo<EngineKind>& i) {
                           return i.param == EngineKind::kGpu ? std::string("gpu") : std::string("cpu");
                         });

}  // namespace gphash
