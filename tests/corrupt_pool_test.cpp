// The corrupt-pool matrix: a small valid pool is copied, mutated and opened, and every mutation
// must end in a typed gphash::Error with the expected code (never a signal, never success),
// except where one header copy is still good: then the pool opens from it with its data intact.
//
// Pool::open checks, in this order: the file (a regular file, at least 8 bytes with the magic at
// offset 0, at least the 12 KiB prefix), then each header copy: magic, byte_order, version_major,
// checksum, incompat_features, each field's range and the extents, and last pool_size against the
// file size. When both copies fail, the error of copy 0 is reported (copy 1's when copy 0's is
// kNotAPool).
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "format/header.h"
#include "format/layout.h"
#include "gphash/table.h"
#include "test_util.h"

namespace gphash {
namespace {

using format::PoolHeader;
using testing::TempPool;
using Bytes = std::vector<unsigned char>;

constexpr uint32_t kValueWidth = 32;
constexpr uint64_t kItems = 300;

std::string value_for(uint64_t key) {
  std::string v(kValueWidth, '\0');
  for (uint32_t i = 0; i < kValueWidth; i += 8) {
    uint64_t w = key * 0x9E3779B97F4A7C15ull + i;
    std::memcpy(v.data() + i, &w, 8);
  }
  return v;
}

// The valid pool every case starts from: 8-byte keys 1..kItems with 32-byte values (so it has a
// value heap of several chunks and went through resizes), shut down cleanly.
struct Pristine {
  Bytes bytes;
  PoolHeader header[2];
  int newer = 0;
};

PoolHeader get_header(const Bytes& b, int copy) {
  PoolHeader h;
  std::memcpy(static_cast<void*>(&h), b.data() + format::kHeaderCopyOffset[copy], sizeof h);
  return h;
}
void put_header(Bytes& b, int copy, const PoolHeader& h) {
  std::memcpy(b.data() + format::kHeaderCopyOffset[copy], &h, sizeof h);
}

void write_file(const std::string& path, const Bytes& bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << path;
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    ASSERT_GT(n, 0);
    done += static_cast<size_t>(n);
  }
  ::close(fd);
}

Bytes read_file(const std::string& path) {
  Bytes b;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return b;
  struct stat st {};
  fstat(fd, &st);
  b.resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < b.size()) {
    ssize_t n = pread(fd, b.data() + done, b.size() - done, static_cast<off_t>(done));
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return b;
}

Batch batch_of(Op op, const std::vector<uint64_t>& keys, const std::string* values, std::string* out,
               std::vector<OpStatus>& status) {
  status.assign(keys.size(), OpStatus::kNotFound);
  Batch b;
  b.size = keys.size();
  b.key_width = 8;
  b.value_width = kValueWidth;
  b.op = op;
  b.keys = keys.data();
  b.values = values ? values->data() : nullptr;
  b.values_out = out ? out->data() : nullptr;
  b.status = status.data();
  return b;
}

std::vector<uint64_t> all_keys() {
  std::vector<uint64_t> keys(kItems);
  for (uint64_t i = 0; i < kItems; ++i) keys[i] = i + 1;
  return keys;
}

const Pristine& pristine() {
  static const Pristine p = [] {
    Pristine r;
    TempPool pool("corrupt-source");
    {
      OpenOptions options;
      options.threads = 1;
      Table t = Table::create(pool.path(), {8, kValueWidth, {}, 16, 77}, options);
      std::vector<uint64_t> keys = all_keys();
      std::string values;
      for (uint64_t k : keys) values += value_for(k);
      std::vector<OpStatus> status;
      t.execute(batch_of(Op::kInsert, keys, &values, nullptr, status));
      for (OpStatus s : status)
        if (s != OpStatus::kOk) throw std::runtime_error("could not build the pristine pool");
    }
    r.bytes = read_file(pool.path());
    for (int c = 0; c < 2; ++c) r.header[c] = get_header(r.bytes, c);
    r.newer = r.header[0].generation > r.header[1].generation ? 0 : 1;
    return r;
  }();
  return p;
}

// What opening a file gave.
struct Outcome {
  bool opened = false;
  ErrorCode code{};
  std::string field;
  std::string message;
};

std::string describe(const Outcome& o) {
  if (o.opened) return "opened";
  return std::string(to_string(o.code)) + " [" + o.field + "] " + o.message;
}

// Writes `bytes` as a pool file and opens it. Any exception other than gphash::Error escapes and
// fails the test; a signal kills it.
Outcome try_open(const Bytes& bytes, const std::function<void(Table&)>& on_open = {}) {
  TempPool pool("corrupt");
  write_file(pool.path(), bytes);
  Outcome o;
  OpenOptions options;
  options.threads = 1;
  try {
    Table t = Table::open(pool.path(), options);
    o.opened = true;
    if (on_open) on_open(t);
  } catch (const Error& e) {
    o.code = e.code();
    o.field = e.field();
    o.message = e.what();
  }
  return o;
}

// The data of the pristine pool is all there, and the table checks out.
void expect_intact(Table& t) {
  EXPECT_EQ(t.size(), kItems);
  std::vector<uint64_t> keys = all_keys();
  std::string out(keys.size() * kValueWidth, '\0');
  std::vector<OpStatus> status;
  t.execute(batch_of(Op::kSearch, keys, nullptr, &out, status));
  size_t bad = 0;
  for (size_t i = 0; i < keys.size(); ++i)
    if (status[i] != OpStatus::kOk || out.compare(i * kValueWidth, kValueWidth, value_for(keys[i])) != 0) ++bad;
  EXPECT_EQ(bad, 0u);
  CheckResult r = t.check(1);
  EXPECT_TRUE(r.ok) << r.violation;
}

void expect_error(const Bytes& bytes, ErrorCode code, const std::string& field, const std::string& what) {
  Outcome o = try_open(bytes);
  EXPECT_FALSE(o.opened) << what << ": opened";
  if (o.opened) return;
  EXPECT_EQ(o.code, code) << what << ": " << describe(o);
  if (!field.empty()) {
    EXPECT_EQ(o.field, field) << what << ": " << describe(o);
  }
}

TEST(CorruptPool, PristinePoolOpens) {
  const Pristine& p = pristine();
  ASSERT_EQ(p.bytes.size(), p.header[p.newer].pool_size);
  ASSERT_EQ(p.header[0].pool_size, p.header[1].pool_size) << "the truncation cases assume one pool_size";
  ASSERT_GT(p.header[p.newer].gphash.heap_chunk_count, 1u) << "the pool should have a heap of several chunks";
  ASSERT_LT(p.bytes.size(), 256u * 1024) << "keep the matrix fast";
  Outcome o = try_open(p.bytes, expect_intact);
  EXPECT_TRUE(o.opened) << describe(o);
}

TEST(CorruptPool, Truncation) {
  const Pristine& p = pristine();
  const PoolHeader& h = p.header[p.newer];
  const uint64_t size = p.bytes.size();
  std::vector<uint64_t> cuts = {0, 1, 7, 8, 9, 4095, 4096, 4097, 8191, 8192, 12287, 12288, 12289,
                                h.gphash.level_offset[h.gphash.bottom_level] + 100,  // mid-extent
                                h.gphash.heap_chunk_offset[h.gphash.heap_chunk_count - 1],
                                size - 4096, size - 1};
  for (uint64_t cut : cuts) {
    ASSERT_LT(cut, size);
    Bytes b(p.bytes.begin(), p.bytes.begin() + static_cast<std::ptrdiff_t>(cut));
    const std::string what = "truncated to " + std::to_string(cut);
    Outcome o = try_open(b);
    ASSERT_FALSE(o.opened) << what;
    if (cut < 8) {
      EXPECT_EQ(o.code, ErrorCode::kNotAPool) << what << ": " << describe(o);
      continue;
    }
    EXPECT_EQ(o.code, ErrorCode::kTruncated) << what << ": " << describe(o);
    EXPECT_EQ(o.field, "pool_size") << what;
    EXPECT_NE(o.message.find(" " + std::to_string(cut) + " bytes"), std::string::npos) << what << ": " << o.message;
    if (cut >= format::kReservedPrefixBytes) {  // the header is readable: its size is named too
      EXPECT_NE(o.message.find(std::to_string(h.pool_size)), std::string::npos) << what << ": " << o.message;
    } else {
      EXPECT_NE(o.message.find(std::to_string(format::kReservedPrefixBytes)), std::string::npos) << o.message;
    }
  }
}

TEST(CorruptPool, NotAPool) {
  const Pristine& p = pristine();
  Bytes b = p.bytes;
  for (int c = 0; c < 2; ++c) b[format::kHeaderCopyOffset[c] + 1] = 'X';
  expect_error(b, ErrorCode::kNotAPool, "magic", "wrong magic in both copies");
  // Wrong magic in copy 1 only is a torn copy; in copy 0 see MagicFlipInFirstCopyOnlyFallsBack.
  b = p.bytes;
  b[format::kHeaderCopyOffset[1] + 1] = 'X';
  Outcome o = try_open(b, expect_intact);
  EXPECT_TRUE(o.opened) << describe(o);

  expect_error(Bytes(p.bytes.size(), 0), ErrorCode::kNotAPool, "magic", "zero-filled");
  expect_error(Bytes(1 << 20, 0), ErrorCode::kNotAPool, "magic", "zero-filled 1 MiB");
  std::mt19937_64 rng(1);
  for (uint64_t size : {uint64_t{8}, uint64_t{100}, uint64_t{12288}, p.bytes.size(), uint64_t{1} << 20}) {
    Bytes r(size);
    for (auto& x : r) x = static_cast<unsigned char>(rng());
    expect_error(r, ErrorCode::kNotAPool, "magic", "random bytes, size " + std::to_string(size));
  }
  // Text that happens to be long enough.
  std::string text(20000, 'a');
  expect_error(Bytes(text.begin(), text.end()), ErrorCode::kNotAPool, "magic", "text file");
}

// Applies `f` to both header copies and reseals them, so that the checks after the checksum fire.
Bytes resealed(const std::function<void(PoolHeader&)>& f, bool both = true) {
  const Pristine& p = pristine();
  Bytes b = p.bytes;
  for (int c = 0; c < 2; ++c) {
    if (!both && c != p.newer) continue;
    PoolHeader h = get_header(b, c);
    f(h);
    format::seal(h);
    put_header(b, c, h);
  }
  return b;
}

TEST(CorruptPool, VersionsAndFeatures) {
  expect_error(resealed([](PoolHeader& h) { h.version_major = format::kFormatMajor + 1; }),
               ErrorCode::kUnsupportedVersion, "version_major", "future major version");
  expect_error(resealed([](PoolHeader& h) { h.version_major = 0; }), ErrorCode::kUnsupportedVersion, "version_major",
               "major version 0");
  expect_error(resealed([](PoolHeader& h) { h.version_major = 0xFFFF; }), ErrorCode::kUnsupportedVersion,
               "version_major", "major version 65535");
  // Without resealing, the version check still comes before the checksum.
  {
    Bytes b = pristine().bytes;
    for (int c = 0; c < 2; ++c) b[format::kHeaderCopyOffset[c] + offsetof(PoolHeader, version_major)] = 9;
    expect_error(b, ErrorCode::kUnsupportedVersion, "version_major", "major version 9, not resealed");
  }
  for (int bit = 0; bit < 64; ++bit) {
    if (format::kKnownIncompatFeatures >> bit & 1) continue;
    expect_error(resealed([&](PoolHeader& h) { h.incompat_features |= uint64_t{1} << bit; }),
                 ErrorCode::kUnsupportedFeature, "incompat_features", "incompat bit " + std::to_string(bit));
  }
  // Unknown compatible features and a newer minor version are fine.
  Outcome o = try_open(resealed([](PoolHeader& h) { h.compat_features |= uint64_t{1} << 17; }), expect_intact);
  EXPECT_TRUE(o.opened) << "unknown compat feature: " << describe(o);
  o = try_open(resealed([](PoolHeader& h) { h.version_minor = format::kFormatMinor + 1; }), expect_intact);
  EXPECT_TRUE(o.opened) << "newer minor version: " << describe(o);
  // An unsupported version in the newer copy only: the older copy is used.
  o = try_open(resealed([](PoolHeader& h) { h.version_major = 2; }, false), expect_intact);
  EXPECT_TRUE(o.opened) << "future version in one copy: " << describe(o);
}

// The error a flipped bit in a header field gives when both copies carry it (not resealed).
struct Expected {
  ErrorCode code;
  const char* field;
};
Expected expected_for_flip(size_t offset) {
  if (offset < offsetof(PoolHeader, byte_order)) return {ErrorCode::kNotAPool, "magic"};
  if (offset < offsetof(PoolHeader, version_major)) return {ErrorCode::kCorruptHeader, "byte_order"};
  if (offset < offsetof(PoolHeader, version_minor)) return {ErrorCode::kUnsupportedVersion, "version_major"};
  return {ErrorCode::kChecksumMismatch, "checksum"};
}

// Every bit of every header byte (checksum included), flipped in both copies.
TEST(CorruptPool, BitFlipInEveryHeaderByteOfBothCopies) {
  const Pristine& p = pristine();
  Bytes b = p.bytes;
  size_t cases = 0;
  for (size_t offset = 0; offset < format::kHeaderBytes; ++offset) {
    for (int bit = 0; bit < 8; ++bit) {
      for (int c = 0; c < 2; ++c) b[format::kHeaderCopyOffset[c] + offset] ^= static_cast<unsigned char>(1u << bit);
      const Expected e = expected_for_flip(offset);
      Outcome o = try_open(b);
      ++cases;
      if (o.opened || o.code != e.code || o.field != e.field) {
        ADD_FAILURE() << "bit " << bit << " of header byte " << offset << ": " << describe(o) << ", expected "
                      << to_string(e.code) << " [" << e.field << "]";
      }
      for (int c = 0; c < 2; ++c) b[format::kHeaderCopyOffset[c] + offset] ^= static_cast<unsigned char>(1u << bit);
    }
  }
  EXPECT_EQ(cases, 8 * format::kHeaderBytes);
}

// One bit (of a varying position) of every header byte, flipped in one copy only: the pool opens
// from the other copy, whether that is the newer (clean) or the older (dirty) one.
TEST(CorruptPool, BitFlipInOneCopyFallsBackToTheOther) {
  const Pristine& p = pristine();
  std::mt19937_64 rng(3);
  size_t cases = 0;
  for (int copy = 0; copy < 2; ++copy) {
    for (size_t offset = 0; offset < format::kHeaderBytes; ++offset) {
      if (copy == 0 && offset < sizeof format::kMagic) continue;  // MagicFlipInFirstCopyOnlyFallsBack
      Bytes b = p.bytes;
      b[format::kHeaderCopyOffset[copy] + offset] ^= static_cast<unsigned char>(1u << (rng() % 8));
      // Checking every key and the table for each case takes long; do it for a sample.
      const bool full = offset % 16 == 0;
      Outcome o = try_open(b, full ? std::function<void(Table&)>(expect_intact) : std::function<void(Table&)>(
                                                                                      [](Table& t) {
                                                                                        EXPECT_EQ(t.size(), kItems);
                                                                                      }));
      ++cases;
      if (!o.opened) {
        ADD_FAILURE() << "copy " << copy << " byte " << offset << ": " << describe(o);
      }
      if (HasFailure()) return;
    }
  }
  EXPECT_EQ(cases, 2 * format::kHeaderBytes - sizeof format::kMagic);
}

// A bit flip in the magic of copy 0 alone makes the whole pool unopenable although copy 1 is
// valid: Pool::open checks the magic at offset 0 before it looks at either copy.
TEST(CorruptPool, MagicFlipInFirstCopyOnlyFallsBack) {
  for (size_t offset = 0; offset < sizeof format::kMagic; ++offset) {
    Bytes b = pristine().bytes;
    b[offset] ^= 0x01;
    Outcome o = try_open(b, expect_intact);
    EXPECT_TRUE(o.opened) << "magic byte " << offset << " of copy 0: " << describe(o);
  }
}

struct Crafted {
  std::string name;
  std::function<void(PoolHeader&)> mutate;
  ErrorCode code;
  std::string field;  // empty: not checked; ending in '*': a prefix
};

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

std::vector<Crafted> crafted_cases() {
  const Pristine& p = pristine();
  const PoolHeader& h0 = p.header[p.newer];
  const uint32_t bottom = h0.gphash.bottom_level, top = format::top_level(h0);
  const std::string lo = "level_offset[" + std::to_string(bottom) + "]";
  const std::string hi = "level_offset[" + std::to_string(top) + "]";
  const std::string above = "level_offset[" + std::to_string(top + 1) + "]";
  const uint32_t chunks = h0.gphash.heap_chunk_count;
  const uint64_t file_size = p.bytes.size();
  constexpr ErrorCode kCorrupt = ErrorCode::kCorruptHeader;
  std::vector<Crafted> v = {
      {"byte_order swapped", [](PoolHeader& h) { h.byte_order = 0x04030201; }, kCorrupt, "byte_order"},
      {"index_kind 0", [](PoolHeader& h) { h.index_kind = 0; }, kCorrupt, "index_kind"},
      {"index_kind 99", [](PoolHeader& h) { h.index_kind = 99; }, kCorrupt, "index_kind"},
      {"value checksums on a heap laid out without them",
       [](PoolHeader& h) { h.incompat_features |= format::kFeatureValueChecksums; }, kCorrupt, "cell_size"},
      {"key_width 12", [](PoolHeader& h) { h.gphash.key_width = 12; }, kCorrupt, "key_width"},
      {"key_width 0", [](PoolHeader& h) { h.gphash.key_width = 0; }, kCorrupt, "key_width"},
      {"key_width 16 (bucket_bytes no longer matches)", [](PoolHeader& h) { h.gphash.key_width = 16; }, kCorrupt,
       "bucket_bytes"},
      {"value_width 0", [](PoolHeader& h) { h.gphash.value_width = 0; }, kCorrupt, "value_width"},
      {"value_width 65537", [](PoolHeader& h) { h.gphash.value_width = 65537; }, kCorrupt, "value_width"},
      {"value_width 8 (inline, heap fields set)", [](PoolHeader& h) { h.gphash.value_width = 8; }, kCorrupt, "cell_size"},
      {"value_width 64 (larger than cell_size)", [](PoolHeader& h) { h.gphash.value_width = 64; }, kCorrupt, "cell_size"},
      {"levels 3", [](PoolHeader& h) { h.gphash.levels = 3; }, kCorrupt, "levels/hashes/slots"},
      {"levels 0", [](PoolHeader& h) { h.gphash.levels = 0; }, kCorrupt, "levels/hashes/slots"},
      {"hashes 4 (2L-4H-8S)", [](PoolHeader& h) { h.gphash.hashes = 4; }, kCorrupt, "levels/hashes/slots"},
      {"slots 16", [](PoolHeader& h) { h.gphash.slots = 16; }, kCorrupt, "levels/hashes/slots"},
      {"slots 0", [](PoolHeader& h) { h.gphash.slots = 0; }, kCorrupt, "levels/hashes/slots"},
      {"hash_function 2", [](PoolHeader& h) { h.gphash.hash_function = 2; }, kCorrupt, "hash_function"},
      {"hash_function 0", [](PoolHeader& h) { h.gphash.hash_function = 0; }, kCorrupt, "hash_function"},
      {"bucket_bytes + 8", [](PoolHeader& h) { h.gphash.bucket_bytes += 8; }, kCorrupt, "bucket_bytes"},
      {"bucket_bytes - 8", [](PoolHeader& h) { h.gphash.bucket_bytes -= 8; }, kCorrupt, "bucket_bytes"},
      {"bottom_level 40", [](PoolHeader& h) { h.gphash.bottom_level = 40; }, kCorrupt, "bottom_level"},
      {"bottom_level 32 (top beyond 32)", [](PoolHeader& h) { h.gphash.bottom_level = format::kMaxLevel; }, kCorrupt,
       "bottom_level"},
      {"bottom_level 0xFFFFFFFF (top wraps)", [](PoolHeader& h) { h.gphash.bottom_level = 0xFFFFFFFF; }, kCorrupt,
       "bottom_level"},
      {"bottom_level + 1 (directory does not match)", [](PoolHeader& h) { ++h.gphash.bottom_level; }, kCorrupt, "level_offset[*"},
      {"resize_state 7", [](PoolHeader& h) { h.gphash.resize_state = 7; }, kCorrupt, "resize_state"},
      {"resize_state 1 without the new top level", [](PoolHeader& h) { h.gphash.resize_state = 1; }, kCorrupt, above},
      {"clean_shutdown 2", [](PoolHeader& h) { h.clean_shutdown = 2; }, kCorrupt, "clean_shutdown"},
      {"extent_align_log2 5", [](PoolHeader& h) { h.extent_align_log2 = 5; }, kCorrupt, "extent_align_log2"},
      {"extent_align_log2 31", [](PoolHeader& h) { h.extent_align_log2 = 31; }, kCorrupt, "extent_align_log2"},
      {"extent_align_log2 255", [](PoolHeader& h) { h.extent_align_log2 = 255; }, kCorrupt, "extent_align_log2"},
      {"extent_align_log2 20 (extents not aligned to it)", [](PoolHeader& h) { h.extent_align_log2 = 20; }, kCorrupt,
       "level_offset[*"},
      {"pool_used > pool_size", [](PoolHeader& h) { h.pool_used = h.pool_size + 1; }, kCorrupt, "pool_used"},
      {"pool_used inside the prefix", [](PoolHeader& h) { h.pool_used = 4096; }, kCorrupt, "pool_used"},
      {"pool_used 0", [](PoolHeader& h) { h.pool_used = 0; }, kCorrupt, "pool_used"},
      {"level_offset unaligned", [=](PoolHeader& h) { h.gphash.level_offset[bottom] += 8; }, kCorrupt, lo},
      {"level_offset inside the header prefix", [=](PoolHeader& h) { h.gphash.level_offset[bottom] = 4096; }, kCorrupt, lo},
      {"level_offset beyond pool_used", [=](PoolHeader& h) { h.gphash.level_offset[top] = align_up(h.pool_used, 4096); },
       kCorrupt, hi},
      {"level_offset 2^63", [=](PoolHeader& h) { h.gphash.level_offset[top] = uint64_t{1} << 63; }, kCorrupt, hi},
      {"level_offset missing for an active level", [=](PoolHeader& h) { h.gphash.level_offset[bottom] = 0; }, kCorrupt, lo},
      {"level_offset set for the level above the top",
       [=](PoolHeader& h) { h.gphash.level_offset[top + 1] = h.gphash.level_offset[bottom]; }, kCorrupt, above},
      {"level_offset set for level 32", [=](PoolHeader& h) { h.gphash.level_offset[32] = h.gphash.level_offset[bottom]; }, kCorrupt,
       "level_offset[32]"},
      {"overlapping levels", [=](PoolHeader& h) { h.gphash.level_offset[top] = h.gphash.level_offset[bottom]; }, kCorrupt,
       "level_offset/heap_chunk_offset"},
      {"level overlapping a heap chunk", [=](PoolHeader& h) { h.gphash.level_offset[bottom] = h.gphash.heap_chunk_offset[0]; },
       kCorrupt, "level_offset/heap_chunk_offset"},
      {"overlapping heap chunks", [](PoolHeader& h) { h.gphash.heap_chunk_offset[1] = h.gphash.heap_chunk_offset[0]; }, kCorrupt,
       "level_offset/heap_chunk_offset"},
      {"cell_size 40 (not a multiple of 16)", [](PoolHeader& h) { h.gphash.cell_size = 40; }, kCorrupt, "cell_size"},
      {"cell_size 16 (below value_width)", [](PoolHeader& h) { h.gphash.cell_size = 16; }, kCorrupt, "cell_size"},
      {"cell_size 0", [](PoolHeader& h) { h.gphash.cell_size = 0; }, kCorrupt, "cell_size"},
      {"cell_size 4 GiB - 16", [](PoolHeader& h) { h.gphash.cell_size = 0xFFFFFFF0u; }, kCorrupt,
       "cell_size"},
      {"heap_chunk_count 41", [](PoolHeader& h) { h.gphash.heap_chunk_count = 41; }, kCorrupt, "heap_chunk_count"},
      {"heap_chunk_count 0xFFFFFFFF", [](PoolHeader& h) { h.gphash.heap_chunk_count = 0xFFFFFFFF; }, kCorrupt,
       "heap_chunk_count"},
      {"heap_chunk_count + 1 (chunk missing)", [](PoolHeader& h) { ++h.gphash.heap_chunk_count; }, kCorrupt,
       "heap_chunk_offset[" + std::to_string(chunks) + "]"},
      {"heap_chunk_count - 1 (a chunk left past the count)", [](PoolHeader& h) { --h.gphash.heap_chunk_count; }, kCorrupt,
       "heap_chunk_offset[" + std::to_string(chunks - 1) + "]"},
      {"heap_first_chunk_cells 48", [](PoolHeader& h) { h.gphash.heap_first_chunk_cells = 48; }, kCorrupt,
       "heap_first_chunk_cells"},
      {"heap_first_chunk_cells 0", [](PoolHeader& h) { h.gphash.heap_first_chunk_cells = 0; }, kCorrupt,
       "heap_first_chunk_cells"},
      {"heap_first_chunk_cells 2^41", [](PoolHeader& h) { h.gphash.heap_first_chunk_cells = uint64_t{1} << 41; }, kCorrupt,
       "heap_first_chunk_cells"},
      {"heap_first_chunk_cells doubled (chunks beyond pool_used or overlapping)",
       [](PoolHeader& h) { h.gphash.heap_first_chunk_cells *= 2; }, kCorrupt, "*"},
      {"heap chunk unaligned", [](PoolHeader& h) { h.gphash.heap_chunk_offset[0] += 16; }, kCorrupt, "heap_chunk_offset[0]"},
      {"heap chunk at 0", [](PoolHeader& h) { h.gphash.heap_chunk_offset[0] = 0; }, kCorrupt, "heap_chunk_offset[0]"},
      {"heap chunk beyond pool_used",
       [=](PoolHeader& h) { h.gphash.heap_chunk_offset[chunks - 1] = align_up(h.pool_used, 4096); }, kCorrupt,
       "heap_chunk_offset[" + std::to_string(chunks - 1) + "]"},
      {"heap chunk set past the count", [](PoolHeader& h) { h.gphash.heap_chunk_offset[39] = 1 << 20; }, kCorrupt,
       "heap_chunk_offset[39]"},
      {"item_count > slots", [](PoolHeader& h) { h.item_count = format::slot_capacity(h) + 1; }, kCorrupt,
       "item_count"},
      {"item_count 2^64-1", [](PoolHeader& h) { h.item_count = ~uint64_t{0}; }, kCorrupt, "item_count"},
      {"pool_size > file size", [=](PoolHeader& h) { h.pool_size = file_size + 4096; }, ErrorCode::kTruncated,
       "pool_size"},
      {"pool_size 2^64-1", [](PoolHeader& h) { h.pool_size = ~uint64_t{0}; }, ErrorCode::kTruncated, "pool_size"},
  };
  return v;
}

bool field_matches(const std::string& got, const std::string& want) {
  if (want.empty() || want == "*") return true;
  if (want.back() == '*') return got.rfind(want.substr(0, want.size() - 1), 0) == 0;
  return got == want;
}

TEST(CorruptPool, ImpossibleFieldValuesNameTheField) {
  for (const Crafted& c : crafted_cases()) {
    Outcome o = try_open(resealed(c.mutate));
    EXPECT_FALSE(o.opened) << c.name << ": opened";
    if (o.opened) continue;
    EXPECT_EQ(o.code, c.code) << c.name << ": " << describe(o);
    EXPECT_TRUE(field_matches(o.field, c.field)) << c.name << ": field " << o.field << ", expected " << c.field;
    // The message names the field as well (for `gphash info` users).
    if (!c.field.empty() && c.field != "*" && c.field.back() != '*' && o.code == ErrorCode::kCorruptHeader) {
      EXPECT_NE(o.message.find(c.field), std::string::npos) << c.name << ": " << o.message;
    }
  }
}

TEST(CorruptPool, ImpossibleValueInNewerCopyOnlyFallsBack) {
  for (const Crafted& c : crafted_cases()) {
    Outcome o = try_open(resealed(c.mutate, false), expect_intact);
    EXPECT_TRUE(o.opened) << c.name << " in the newer copy only: " << describe(o);
    if (HasFailure()) return;
  }
}

// validate_header on its own, for headers whose extents' byte sizes overflow 64 bits: a chunk of
// 2^33 cells of 2^31 bytes "has" 2^64 = 0 bytes, so its extent check passes, and the engine would
// later address cells far outside the mapping (and size its cell bitmap by 2^33 cells).
TEST(CorruptPool, HeapExtentSizeOverflowIsCorrupt) {
  PoolHeader h = pristine().header[pristine().newer];
  h.gphash.heap_first_chunk_cells = uint64_t{1} << 33;
  h.gphash.cell_size = 1u << 31;
  h.item_count = 0;
  format::seal(h);
  try {
    format::validate_header(h, pristine().bytes.size());
    ADD_FAILURE() << "validate_header accepted a heap of " << format::heap_cell_capacity(h) << " cells of "
                  << h.gphash.cell_size << " bytes in a pool of " << h.pool_size << " bytes";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCorruptHeader) << e.what();
  }
}

TEST(CorruptPool, DirectoriesAndFifosAreTypedErrors) {
  TempPool dir("corrupt-dir");
  ASSERT_EQ(mkdir(dir.path().c_str(), 0755), 0);
  OpenOptions ro;
  ro.read_only = true;
  for (bool read_only : {false, true}) {
    try {
      Table::open(dir.path(), read_only ? ro : OpenOptions{});
      ADD_FAILURE() << "opened a directory";
    } catch (const Error& e) {
      // Writable: open(2) fails with EISDIR (kIo); read-only: fstat finds no regular file.
      EXPECT_TRUE(e.code() == ErrorCode::kIo || e.code() == ErrorCode::kNotAPool) << to_string(e.code()) << " "
                                                                                    << e.what();
    }
  }
  try {
    Table::inspect(dir.path());
    ADD_FAILURE() << "inspected a directory";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotAPool) << e.what();
  }
  rmdir(dir.path().c_str());

  TempPool fifo("corrupt-fifo");
  ASSERT_EQ(mkfifo(fifo.path().c_str(), 0644), 0);
  {
    // Writable opening of a FIFO does not block (O_RDWR); it is refused as no regular file.
    try {
      Table::open(fifo.path());
      ADD_FAILURE() << "opened a FIFO";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kNotAPool) << e.what();
    }
    // Read-only: with a writer present the open does not block either (without one, see
    // ReadOnlyOpenOfFifoDoesNotBlock).
    int writer = ::open(fifo.path().c_str(), O_RDWR | O_NONBLOCK);
    ASSERT_GE(writer, 0);
    try {
      Table::open(fifo.path(), ro);
      ADD_FAILURE() << "opened a FIFO read-only";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kNotAPool) << e.what();
    }
    ::close(writer);
  }
}

// Opening a FIFO read-only (Table::open with read_only, Table::inspect, `gphash info`) blocks in
// open(2) until some process opens the FIFO for writing.
TEST(CorruptPool, ReadOnlyOpenOfFifoDoesNotBlock) {
  TempPool fifo("corrupt-fifo-ro");
  ASSERT_EQ(mkfifo(fifo.path().c_str(), 0644), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {
      Table::inspect(fifo.path());
    } catch (const Error& e) {
      _exit(e.code() == ErrorCode::kNotAPool ? 0 : 2);
    }
    _exit(3);
  }
  int status = 0;
  for (int i = 0; i < 200 && waitpid(child, &status, WNOHANG) == 0; ++i) usleep(10000);
  if (waitpid(child, &status, WNOHANG) == 0) {
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
    FAIL() << "a read-only open of a FIFO still blocks after 2 s";
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

}  // namespace
}  // namespace gphash
