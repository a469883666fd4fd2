// What an outside test of the core found (issue 15), each as a test that failed before the fix:
// pools replaced under a live writer, a second open in one process blamed on another, stale
// creation files, world-readable pools, `info` blocked by a writer, `check` that changed the pool
// and sent the user to itself, damaged values and maintenance records that went unseen, thread
// counts that crashed, and pools of the previous format version.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "format/cell.h"
#include "format/header.h"
#include "format/header_v1.h"
#include "format/slot.h"
#include "gphash/table.h"
#include "test_util.h"

namespace gphash {
namespace {

using testing::TempPool;
using namespace testing::batches;
namespace fs = std::filesystem;

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// The pool file mapped shared, to damage it the way a stray write or a bad disk would.
class RawPool {
 public:
  explicit RawPool(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDWR);
    EXPECT_GE(fd_, 0);
    struct stat st {};
    fstat(fd_, &st);
    size_ = static_cast<size_t>(st.st_size);
    base_ = static_cast<std::byte*>(mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0));
    const auto* h0 = reinterpret_cast<const format::PoolHeader*>(base_);
    const auto* h1 = reinterpret_cast<const format::PoolHeader*>(base_ + format::kHeaderCopyOffset[1]);
    header_ = h0->generation >= h1->generation ? *h0 : *h1;
  }
  ~RawPool() {
    munmap(base_, size_);
    ::close(fd_);
  }
  const format::PoolHeader& header() const { return header_; }
  std::byte* at(uint64_t offset) { return base_ + offset; }
  // Writes `h` to both header copies, sealed.
  void write_header(format::PoolHeader h) {
    format::seal(h);
    for (uint64_t off : format::kHeaderCopyOffset) std::memcpy(base_ + off, &h, sizeof h);
    header_ = h;
  }
  // The address of the first published slot of the top level, and a pointer to its words.
  format::SlotAddress first_item() const {
    const format::GphashMeta& g = header_.gphash;
    const format::BucketLayout layout = format::bucket_layout(header_);
    const uint32_t top = format::top_level(header_);
    for (uint64_t b = 0; b < format::level_buckets(top); ++b)
      for (uint32_t s = 0; s < g.slots; ++s)
        if (format::is_published(*state(top, b, s, layout))) return {top, b, s};
    ADD_FAILURE() << "no item in the top level";
    return {};
  }
  uint64_t* state(uint32_t l, uint64_t b, uint32_t s, format::BucketLayout layout) const {
    return reinterpret_cast<uint64_t*>(base_ + header_.gphash.level_offset[l] + b * header_.gphash.bucket_bytes +
                                       layout.state_offset(s));
  }
  uint64_t* value_word(format::SlotAddress a) const {
    return reinterpret_cast<uint64_t*>(base_ + header_.gphash.level_offset[a.level] + a.bucket * header_.gphash.bucket_bytes +
                                       format::bucket_layout(header_).value_offset(a.slot));
  }
  uint64_t key_of(format::SlotAddress a) const {  // 8-byte keys
    return format::decode_key_word(*state(a.level, a.bucket, a.slot, format::bucket_layout(header_)));
  }
  std::byte* cell(uint64_t ref) const {
    const format::HeapGeometry g = format::heap_geometry(header_);
    const uint32_t c = g.chunk_of(ref);
    return base_ + header_.gphash.heap_chunk_offset[c] + (ref - g.chunk_begin(c)) * header_.gphash.cell_size;
  }

 private:
  int fd_ = -1;
  size_t size_ = 0;
  std::byte* base_ = nullptr;
  format::PoolHeader header_{};
};

// tests/test_child.cpp in a process of its own, talked to through its stdin and stdout.
class Child {
 public:
  explicit Child(std::vector<std::string> args) {
    int in[2], out[2];
    EXPECT_EQ(pipe(in), 0);
    EXPECT_EQ(pipe(out), 0);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      close(in[1]);
      close(out[0]);
      std::vector<char*> argv{const_cast<char*>(GPHASH_TEST_CHILD)};
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(GPHASH_TEST_CHILD, argv.data());
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    to_ = in[1];
    from_ = out[0];
  }
  ~Child() {
    if (pid_ > 0) wait();
  }
  std::string read_line() {
    std::string line;
    char c;
    while (read(from_, &c, 1) == 1 && c != '\n') line += c;
    return line;
  }
  void send_line() {
    EXPECT_EQ(write(to_, "\n", 1), 1);
  }
  int wait() {
    close(to_);
    close(from_);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
};

TEST(PoolInUse, ReplaceAndRemovalAreRefusedWhileAnotherProcessWrites) {
  TempPool pool("replace-live");
  { Table t = Table::create(pool.path(), {8, 8, {}, 64, 1}); run(t, Op::kInsert, key_range(1, 1000)); }
  Child writer({"hold", pool.path()});
  ASSERT_EQ(writer.read_line(), "ready");
  OpenOptions replace;
  replace.replace = true;
  expect_error([&] { Table::create(pool.path(), {8, 8, {}, 64, 2}, replace); }, ErrorCode::kPoolInUse, {},
               "replace under a live writer");
  writer.send_line();
  EXPECT_EQ(writer.wait(), 0);
  Table t = Table::open(pool.path());
  EXPECT_EQ(t.size(), 3000u) << "every write the writer acknowledged is in the pool that has the name";
  expect_present(t, key_range(1, 3000));
}

TEST(PoolInUse, ASecondOpenInThisProcessSaysItIsThisProcess) {
  TempPool pool("same-process");
  Table t = Table::create(pool.path(), {8, 8, {}, 64, 1});
  try {
    Table::open(pool.path());
    ADD_FAILURE() << "second open succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kPoolInUse);
    EXPECT_NE(std::string(e.what()).find("this process"), std::string::npos) << e.what();
  }
  OpenOptions replace;
  replace.replace = true;
  expect_error([&] { Table::create(pool.path(), {}, replace); }, ErrorCode::kPoolInUse, {}, "replace in this process");
}

TEST(PoolInUse, ClosingATableLetsGoOfItsPoolAtOnce) {
  TempPool pool("close-then-open");
  Table t = Table::create(pool.path(), {8, 8, {}, 64, 1});
  run(t, Op::kInsert, {1, 2, 3});
  t.close();
  t.close();  // closing twice is harmless
  EXPECT_TRUE(Table::check_pool(pool.path()).ok);  // a reader in this process, while `t` exists
  {
    Table again = Table::open(pool.path());  // and a writer
    EXPECT_EQ(again.size(), 3u);
  }
  expect_error([&] { run(t, Op::kSearch, {1}); }, ErrorCode::kInvalidArgument, {}, "batch after close");
  expect_error([&] { (void)t.size(); }, ErrorCode::kInvalidArgument, {}, "size after close");
}

TEST(PoolFiles, PoolsAreOwnerOnlyUnlessAModeIsAsked) {
  TempPool a("mode-default"), b("mode-asked");
  { Table t = Table::create(a.path(), {}); }
  OpenOptions o;
  o.pool_file_mode = 0640;
  { Table t = Table::create(b.path(), {}, o); }
  struct stat st {};
  ASSERT_EQ(stat(a.path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat(b.path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
}

TEST(PoolFiles, CreationFilesOfDeadCreatorsAreRemovedAtTheNextCreate) {
  TempPool pool("stale");
  const pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, nullptr, 0);
  const std::string stale = pool.path() + ".creating-" + std::to_string(dead) + "-0badc0de";
  const std::string alive = pool.path() + ".creating-1-0c0ffee0";  // pid 1 always runs
  for (const std::string& p : {stale, alive}) std::ofstream(p) << "half-made pool";
  { Table t = Table::create(pool.path(), {}); }
  EXPECT_FALSE(fs::exists(stale)) << "the file of a creator that is gone stays";
  EXPECT_TRUE(fs::exists(alive)) << "a file whose creator may still run was removed";
  fs::remove(alive);
}

TEST(Inspect, WorksWhileAWriterHoldsThePool) {
  TempPool pool("inspect-live");
  { Table t = Table::create(pool.path(), {8, 8, {}, 64, 1}); run(t, Op::kInsert, key_range(1, 100)); }
  Table t = Table::open(pool.path());
  run(t, Op::kInsert, key_range(101, 50));
  const TableInfo i = Table::inspect(pool.path());
  EXPECT_TRUE(i.in_use);
  EXPECT_FALSE(i.clean_shutdown);
  EXPECT_EQ(i.items, 100u) << "counts are as of the last clean close";
  t.close();
}

// A child writes and exits without closing: the pool is left not shut down cleanly.
void write_and_die(const std::string& path, uint32_t value_width, uint64_t keys) {
  Child child({"die", path, std::to_string(value_width), std::to_string(keys)});
  ASSERT_EQ(child.wait(), 0);
}

TEST(Check, LeavesADirtyPoolExactlyAsItFoundIt) {
  TempPool pool("check-dirty");
  write_and_die(pool.path(), 32, 5000);
  const std::string before = read_file(pool.path());
  const CheckResult r = Table::check_pool(pool.path());
  EXPECT_TRUE(r.ok) << r.violation;
  EXPECT_TRUE(r.recovered);
  EXPECT_EQ(r.items, 5000u);
  EXPECT_TRUE(read_file(pool.path()) == before) << "check changed the pool file";
  EXPECT_FALSE(Table::inspect(pool.path()).clean_shutdown);
  Table t = Table::open(pool.path());
  EXPECT_TRUE(t.info().recovered);
  EXPECT_EQ(t.size(), 5000u);
}

TEST(Check, NamesTheSlotOfABadHeapReferenceAndRepairDropsIt) {
  TempPool pool("check-heap");
  { Table t = Table::create(pool.path(), {8, 32, {}, 64, 3}); run(t, Op::kInsert, key_range(1, 100)); }
  uint64_t damaged_key = 0;
  {
    RawPool raw(pool.path());
    const format::SlotAddress at = raw.first_item();
    damaged_key = raw.key_of(at);
    *raw.value_word(at) = uint64_t{1} << 40;
  }
  try {
    Table::open(pool.path());
    ADD_FAILURE() << "a pool with a slot pointing outside the heap opened";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCorruptTable) << e.what();
  }
  const std::string before = read_file(pool.path());
  const CheckResult r = Table::check_pool(pool.path());
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.violation.find("slot (level"), std::string::npos) << r.violation;
  EXPECT_NE(r.violation.find("outside the heap"), std::string::npos) << r.violation;
  EXPECT_EQ(r.violation.find("gphash check"), std::string::npos) << "check sends the user to itself: " << r.violation;
  EXPECT_TRUE(read_file(pool.path()) == before) << "check changed the pool";

  const RepairResult fixed = Table::repair(pool.path());
  ASSERT_EQ(fixed.dropped.size(), 1u);
  EXPECT_NE(fixed.dropped[0].find("outside the heap"), std::string::npos) << fixed.dropped[0];
  EXPECT_EQ(fixed.items, 99u);
  EXPECT_TRUE(Table::check_pool(pool.path()).ok);
  Table t = Table::open(pool.path());
  EXPECT_EQ(t.size(), 99u);
  expect_absent(t, {damaged_key});
  std::vector<uint64_t> rest;
  for (uint64_t k = 1; k <= 100; ++k)
    if (k != damaged_key) rest.push_back(k);
  expect_present(t, rest);
}

TEST(ValueChecksums, ADamagedValueIsReportedNeverReturned) {
  TempPool pool("checksum-value");
  TableConfig config{8, 40, {}, 64, 4};
  config.value_checksums = true;
  { Table t = Table::create(pool.path(), config); run(t, Op::kInsert, key_range(1, 200)); }
  uint64_t damaged_key = 0;
  {
    RawPool raw(pool.path());
    const format::SlotAddress at = raw.first_item();
    damaged_key = raw.key_of(at);
    raw.cell(*raw.value_word(at))[17] ^= std::byte{0x20};
  }
  {
    Table t = Table::open(pool.path());
    EXPECT_TRUE(t.info().value_checksums);
    std::string out;
    const auto st = run(t, Op::kSearch, key_range(1, 200), &out);
    for (uint64_t k = 1; k <= 200; ++k) {
      if (k == damaged_key) {
        EXPECT_EQ(st[k - 1], OpStatus::kCorruptValue);
      } else {
        ASSERT_EQ(st[k - 1], OpStatus::kOk) << k;
        EXPECT_EQ(out.compare((k - 1) * 40, 40, value_for(k, 40)), 0) << k;
      }
    }
  }
  const CheckResult r = Table::check_pool(pool.path());
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.violation.find("fails its checksum"), std::string::npos) << r.violation;
  EXPECT_EQ(r.values_verified, 199u);
  const RepairResult fixed = Table::repair(pool.path());
  EXPECT_EQ(fixed.dropped.size(), 1u);
  Table t = Table::open(pool.path());
  expect_absent(t, {damaged_key});
  // Writing the key again works and the new value verifies.
  run(t, Op::kInsert, {damaged_key});
  expect_present(t, {damaged_key});
}

TEST(ValueChecksums, AHeapChunkOffsetMovedInAValidHeaderIsDetected) {
  TempPool pool("checksum-moved");
  TableConfig config{8, 24, {}, 64, 5};
  config.value_checksums = true;
  { Table t = Table::create(pool.path(), config); run(t, Op::kInsert, key_range(1, 300)); }
  {
    // Chunk 0 "moves" to a new extent at the end of the file holding its bytes shifted by one
    // cell, so every slot of that chunk now reads a neighbour's value with a valid checksum.
    RawPool raw(pool.path());
    format::PoolHeader h = raw.header();
    const uint64_t bytes = format::heap_geometry(h).chunk_cells(0) * h.gphash.cell_size;
    const uint64_t offset = (h.pool_used + 4095) / 4096 * 4096;
    const uint64_t end = (offset + bytes + 4095) / 4096 * 4096;
    ASSERT_EQ(truncate(pool.path().c_str(), static_cast<off_t>(std::max<uint64_t>(end, h.pool_size))), 0);
    std::vector<std::byte> moved(bytes);
    std::memcpy(moved.data() + h.gphash.cell_size, raw.at(h.gphash.heap_chunk_offset[0]), bytes - h.gphash.cell_size);
    const int fd = ::open(pool.path().c_str(), O_WRONLY);
    ASSERT_EQ(pwrite(fd, moved.data(), bytes, static_cast<off_t>(offset)), static_cast<ssize_t>(bytes));
    ::close(fd);
    h.gphash.heap_chunk_offset[0] = offset;
    h.pool_used = offset + bytes;
    h.pool_size = std::max<uint64_t>(end, h.pool_size);
    raw.write_header(h);
  }
  Table t = Table::open(pool.path());
  std::string out;
  const auto st = run(t, Op::kSearch, key_range(1, 300), &out);
  uint64_t corrupt = 0;
  for (uint64_t k = 1; k <= 300; ++k) {
    if (st[k - 1] == OpStatus::kCorruptValue) {
      ++corrupt;
      continue;
    }
    ASSERT_EQ(st[k - 1], OpStatus::kOk);
    EXPECT_EQ(out.compare((k - 1) * 24, 24, value_for(k, 24)), 0) << "key " << k << " returned a wrong value as ok";
  }
  EXPECT_GT(corrupt, 0u) << "no value was in chunk 0";
  t.close();
}

TEST(MaintenanceRecord, ADamagedRecordIsRefusedInsteadOfDeletingAnItem) {
  TempPool pool("move-record");
  write_and_die(pool.path(), 8, 500);
  format::SlotAddress at;
  {
    RawPool raw(pool.path());
    at = raw.first_item();
    // A record that once said "move X to Y", whose `to` was then damaged into X: acted on, it would
    // empty X, the only copy of its item.
    format::SlotAddress other = at;
    other.slot = (at.slot + 1) % raw.header().gphash.slots;
    auto* rec = reinterpret_cast<format::MaintenanceRecord*>(raw.at(format::kMaintenanceOffset));
    rec->move_from = format::pack(at);
    rec->move_to = format::pack(at);
    rec->move_checksum = format::move_record_checksum(format::pack(at), format::pack(other));
    rec->move_state = format::kMoveInProgress;
  }
  try {
    Table::open(pool.path());
    ADD_FAILURE() << "opened with a damaged maintenance record";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCorruptTable);
    EXPECT_NE(std::string(e.what()).find("gphash repair"), std::string::npos) << e.what();
  }
  const CheckResult r = Table::check_pool(pool.path());
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.violation.find("maintenance record"), std::string::npos) << r.violation;
  EXPECT_EQ(r.items, 500u);
  const RepairResult fixed = Table::repair(pool.path());
  EXPECT_TRUE(fixed.cleared_move_record);
  EXPECT_TRUE(fixed.dropped.empty());
  Table t = Table::open(pool.path());
  EXPECT_EQ(t.size(), 500u);
  expect_present(t, key_range(1, 500));
}

TEST(Threads, CountsOutsideTheBoundAreRefused) {
  TempPool pool("threads");
  { Table t = Table::create(pool.path(), {}); }
  for (int threads : {-1, kMaxThreads + 1, 32768, 65536}) {
    OpenOptions o;
    o.threads = threads;
    expect_error([&] { Table::open(pool.path(), o); }, ErrorCode::kInvalidArgument, "threads", "open");
    expect_error([&] { Table::check_pool(pool.path(), threads); }, ErrorCode::kInvalidArgument, "threads", "check");
  }
  EXPECT_FALSE(Table::inspect(pool.path()).in_use) << "a refused check left the pool locked";
  EXPECT_TRUE(Table::inspect(pool.path()).clean_shutdown) << "a refused check left the pool dirty";
}

// Rewrites a current pool's header copies in the version-1 layout (what an older build wrote).
void downgrade_to_v1(const std::string& path) {
  RawPool raw(path);
  for (uint64_t off : format::kHeaderCopyOffset) {
    const format::PoolHeader h = *reinterpret_cast<const format::PoolHeader*>(raw.at(off));
    format::v1::PoolHeader o{};
    std::memcpy(o.magic, h.magic, 8);
    o.byte_order = h.byte_order;
    o.version_major = 1;
    o.generation = h.generation;
    o.pool_size = h.pool_size;
    std::memcpy(o.uuid, h.uuid, 16);
    o.created_unix_ns = h.created_unix_ns;
    const format::GphashMeta& g = h.gphash;
    o.key_width = g.key_width, o.value_width = g.value_width, o.levels = g.levels, o.hashes = g.hashes;
    o.slots = g.slots, o.hash_function = g.hash_function, o.bucket_bytes = g.bucket_bytes, o.hash_seed = g.hash_seed;
    o.bottom_level = g.bottom_level, o.resize_state = g.resize_state, o.clean_shutdown = h.clean_shutdown;
    o.extent_align_log2 = h.extent_align_log2, o.item_count = h.item_count, o.pool_used = h.pool_used;
    std::memcpy(o.level_offset, g.level_offset, sizeof o.level_offset);
    o.cell_size = g.cell_size, o.heap_chunk_count = g.heap_chunk_count;
    o.heap_first_chunk_cells = g.heap_first_chunk_cells;
    std::memcpy(o.heap_chunk_offset, g.heap_chunk_offset, sizeof o.heap_chunk_offset);
    o.checksum = format::xxh64(&o, offsetof(format::v1::PoolHeader, checksum), 0);
    std::memcpy(raw.at(off), &o, sizeof o);
  }
}

TEST(Convert, AVersion1PoolIsRefusedWithAWayOutThenConvertedInPlace) {
  TempPool pool("convert");
  { Table t = Table::create(pool.path(), {8, 32, {}, 64, 9}); run(t, Op::kInsert, key_range(1, 300)); }
  downgrade_to_v1(pool.path());
  for (auto attempt : {+[](const std::string& p) { Table::open(p); }, +[](const std::string& p) { Table::inspect(p); }}) {
    try {
      attempt(pool.path());
      ADD_FAILURE() << "a version-1 pool opened";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnsupportedVersion);
      EXPECT_NE(std::string(e.what()).find("gphash convert"), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(Table::convert(pool.path()));
  EXPECT_FALSE(Table::convert(pool.path())) << "a second conversion changed something";
  EXPECT_TRUE(Table::check_pool(pool.path()).ok);
  Table t = Table::open(pool.path());
  EXPECT_EQ(t.size(), 300u);
  expect_present(t, key_range(1, 300));
}

}  // namespace
}  // namespace gphash
