// Corrupt HMEH pools: every field of the HMEH header section, and the radix-tree directory. A bad
// header field (in both copies, resealed so only the field is wrong) must end in a typed
// kCorruptHeader that names the field; one bad copy falls back to the other with the data intact;
// a damaged radix tree is a typed kCorruptTable naming the node and entry, never a crash.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "format/header.h"
#include "format/hmeh/layout.h"
#include "gphash/table.h"
#include "test_util.h"

namespace gphash {
namespace {

namespace fh = format::hmeh;
using format::PoolHeader;
using testing::TempPool;
using Bytes = std::vector<unsigned char>;

constexpr uint32_t kValueWidth = 24;  // heap values, so the heap fields are in use
constexpr uint64_t kItems = 3000;     // 4 KiB segments: the table split several times

Bytes read_file(const std::string& path) {
  Bytes b;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st {};
  fstat(fd, &st);
  b.resize(static_cast<size_t>(st.st_size));
  for (size_t done = 0; done < b.size();) {
    const ssize_t n = pread(fd, b.data() + done, b.size() - done, static_cast<off_t>(done));
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return b;
}

void write_file(const std::string& path, const Bytes& b) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, b.data(), b.size()), static_cast<ssize_t>(b.size()));
  ::close(fd);
}

std::vector<uint64_t> keys() {
  std::vector<uint64_t> k(kItems);
  for (uint64_t i = 0; i < kItems; ++i) k[i] = i * 0x9E3779B97F4A7C15ull + 1;
  return k;
}

std::string value_of(uint64_t key) {
  std::string v(kValueWidth, '\0');
  for (uint32_t i = 0; i < kValueWidth; i += 8) {
    const uint64_t w = key ^ (i * 31);
    std::memcpy(v.data() + i, &w, 8);
  }
  return v;
}

const Bytes& pristine() {
  static const Bytes bytes = [] {
    TempPool pool("hmeh-corrupt-source");
    {
      TableConfig c;
      c.key_width = 8;
      c.value_width = kValueWidth;
      c.capacity = 16;
      c.hash_seed = 9;
      c.index = IndexKind::kHmeh;
      c.hmeh.segment_bytes = 4096;
      Table t = Table::create(pool.path(), c);
      const std::vector<uint64_t> k = keys();
      std::string values;
      for (uint64_t key : k) values += value_of(key);
      std::vector<OpStatus> status(kItems);
      Batch b{kItems, 8, kValueWidth, Op::kInsert, nullptr, k.data(), values.data(), nullptr, status.data()};
      t.execute(b);
      for (OpStatus s : status)
        if (s != OpStatus::kOk) throw std::runtime_error("could not build the pristine HMEH pool");
    }
    return read_file(pool.path());
  }();
  return bytes;
}

PoolHeader header_of(const Bytes& b, int copy) {
  PoolHeader h;
  std::memcpy(static_cast<void*>(&h), b.data() + format::kHeaderCopyOffset[copy], sizeof h);
  return h;
}

// Both copies changed by `mutate` and resealed, so the mutated field is the only fault.
Bytes with_header(const std::function<void(PoolHeader&)>& mutate, int copies = 2) {
  Bytes b = pristine();
  for (int c = 0; c < copies; ++c) {
    PoolHeader h = header_of(b, c);
    mutate(h);
    format::seal(h);
    std::memcpy(b.data() + format::kHeaderCopyOffset[c], &h, sizeof h);
  }
  return b;
}

struct Opened {
  bool ok = false;
  ErrorCode code{};
  std::string field, message;
  uint64_t items = 0;
  uint64_t intact = 0;  // keys found with their values
};

Opened open_bytes(const Bytes& bytes) {
  TempPool pool("hmeh-corrupt");
  write_file(pool.path(), bytes);
  Opened o;
  try {
    Table t = Table::open(pool.path());
    o.ok = true;
    o.items = t.size();
    const std::vector<uint64_t> k = keys();
    std::string out(kItems * kValueWidth, '\0');
    std::vector<OpStatus> status(kItems);
    Batch b{kItems, 8, kValueWidth, Op::kSearch, nullptr, k.data(), nullptr, out.data(), status.data()};
    t.execute(b);
    for (uint64_t i = 0; i < kItems; ++i)
      o.intact += status[i] == OpStatus::kOk && out.compare(i * kValueWidth, kValueWidth, value_of(k[i])) == 0;
  } catch (const Error& e) {
    o.code = e.code();
    o.field = e.field();
    o.message = e.what();
  }
  return o;
}

TEST(HmehCorruptPool, PristinePoolOpensIntact) {
  const Opened o = open_bytes(pristine());
  ASSERT_TRUE(o.ok) << o.message;
  EXPECT_EQ(o.items, kItems);
  EXPECT_EQ(o.intact, kItems);
  EXPECT_EQ(header_of(pristine(), 0).index_kind, format::kIndexHmeh);
}

struct FieldCase {
  const char* what;
  std::function<void(PoolHeader&)> mutate;
  std::string field;
};

TEST(HmehCorruptPool, EveryBadHeaderFieldIsATypedErrorNamingIt) {
  const uint32_t chunks = header_of(pristine(), 0).hmeh.segment_chunk_count;
  const std::vector<FieldCase> cases = {
      {"index kind 4", [](PoolHeader& h) { h.index_kind = 4; }, "index_kind"},  // 3 is GPM (libGPM)
      {"32-byte keys", [](PoolHeader& h) { h.hmeh.key_width = 32; }, "key_width"},
      {"value width 0", [](PoolHeader& h) { h.hmeh.value_width = 0; }, "value_width"},
      {"hash function 7", [](PoolHeader& h) { h.hmeh.hash_function = 7; }, "hash_function"},
      {"2 KiB segments", [](PoolHeader& h) { h.hmeh.segment_bytes_log2 = 11; }, "segment_bytes_log2"},
      {"2 MiB segments", [](PoolHeader& h) { h.hmeh.segment_bytes_log2 = 21; }, "segment_bytes_log2"},
      {"no probing", [](PoolHeader& h) { h.hmeh.probe_buckets = 0; }, "probe_buckets"},
      {"probing 17 buckets", [](PoolHeader& h) { h.hmeh.probe_buckets = 17; }, "probe_buckets"},
      {"stash of 17", [](PoolHeader& h) { h.hmeh.stash_buckets = 17; }, "stash_buckets"},
      {"value checksums", [](PoolHeader& h) { h.incompat_features |= format::kFeatureValueChecksums; },
       "incompat_features"},
      {"no segment chunk", [](PoolHeader& h) { h.hmeh.segment_chunk_count = 0; }, "segment_chunk_count"},
      {"41 segment chunks", [](PoolHeader& h) { h.hmeh.segment_chunk_count = 41; }, "segment_chunk_count"},
      {"segment chunk of 3", [](PoolHeader& h) { h.hmeh.segment_first_chunk = 3; }, "segment_first_chunk"},
      {"segment chunk misaligned", [](PoolHeader& h) { h.hmeh.segment_chunk_offset[0] += 8; },
       "segment_chunk_offset[0]"},
      {"segment chunk past pool_used", [](PoolHeader& h) { h.hmeh.segment_chunk_offset[0] = h.pool_used; },
       "segment_chunk_offset[0]"},
      {"segment chunk set past the count",
       [](PoolHeader& h) { h.hmeh.segment_chunk_offset[h.hmeh.segment_chunk_count] = 4096 * 100; },
       "segment_chunk_offset[" + std::to_string(chunks) + "]"},
      {"no node chunk", [](PoolHeader& h) { h.hmeh.node_chunk_count = 0; }, "node_chunk_count"},
      {"node chunk of 0", [](PoolHeader& h) { h.hmeh.node_first_chunk = 0; }, "node_first_chunk"},
      {"node chunk in the header", [](PoolHeader& h) { h.hmeh.node_chunk_offset[0] = 4096; }, "node_chunk_offset[0]"},
      {"cell size 8", [](PoolHeader& h) { h.hmeh.cell_size = 8; }, "cell_size"},
      {"no heap chunk", [](PoolHeader& h) { h.hmeh.heap_chunk_count = 0; }, "heap_chunk_count"},
      {"heap chunk of 100", [](PoolHeader& h) { h.hmeh.heap_first_chunk_cells = 100; }, "heap_first_chunk_cells"},
      {"heap chunk past pool_used", [](PoolHeader& h) { h.hmeh.heap_chunk_offset[0] = h.pool_used + 4096; },
       "heap_chunk_offset[0]"},
      {"heap overlapping segments", [](PoolHeader& h) { h.hmeh.heap_chunk_offset[0] = h.hmeh.segment_chunk_offset[0]; },
       "segment_chunk_offset/node_chunk_offset/heap_chunk_offset"},
      {"more items than slots", [](PoolHeader& h) { h.item_count = uint64_t{1} << 40; }, "item_count"},
  };
  for (const FieldCase& c : cases) {
    const Opened o = open_bytes(with_header(c.mutate));
    EXPECT_FALSE(o.ok) << c.what << ": opened";
    if (o.ok) continue;
    EXPECT_EQ(o.code, ErrorCode::kCorruptHeader) << c.what << ": " << o.message;
    EXPECT_EQ(o.field, c.field) << c.what << ": " << o.message;
  }
}

TEST(HmehCorruptPool, OneBadCopyFallsBackToTheOtherWithTheDataIntact) {
  const Opened o = open_bytes(with_header([](PoolHeader& h) { h.hmeh.probe_buckets = 0; }, 1));
  ASSERT_TRUE(o.ok) << o.message;
  EXPECT_EQ(o.intact, kItems);
}

// Offsets of the radix nodes in the pristine file.
uint64_t node_offset(const Bytes& b, uint64_t node) {
  const PoolHeader h = header_of(b, 0);
  const format::HeapGeometry g{h.hmeh.node_first_chunk, static_cast<uint32_t>(__builtin_ctzll(h.hmeh.node_first_chunk))};
  const uint32_t c = g.chunk_of(node);
  return h.hmeh.node_chunk_offset[c] + (node - g.chunk_begin(c)) * fh::kNodeBytes;
}

void set_entry(Bytes& b, uint64_t node, uint32_t entry, uint64_t value) {
  std::memcpy(b.data() + node_offset(b, node) + 8 * entry, &value, 8);
}
uint64_t get_entry(const Bytes& b, uint64_t node, uint32_t entry) {
  uint64_t v;
  std::memcpy(&v, b.data() + node_offset(b, node) + 8 * entry, 8);
  return v;
}

TEST(HmehCorruptPool, DamagedRadixTreeIsATypedErrorNamingNodeAndEntry) {
  const PoolHeader h = header_of(pristine(), 0);
  ASSERT_EQ(h.hmeh.node_first_chunk, 64u);  // the chain below uses nodes 54..63, free in this pool
  ASSERT_EQ(fh::max_depth(56), 16u);
  const uint64_t segments = format::HeapGeometry{h.hmeh.segment_first_chunk, 0}.chunk_begin(h.hmeh.segment_chunk_count);
  // The root's first entry leads somewhere; find a segment entry and a node entry to damage.
  const struct {
    const char* what;
    std::function<void(Bytes&)> damage;
    const char* says;
  } cases[] = {
      {"an empty root entry", [](Bytes& b) { set_entry(b, 0, 1, 0); }, "neither a node nor a segment"},
      {"a segment beyond the arena", [&](Bytes& b) { set_entry(b, 0, 2, fh::segment_entry(segments + 5)); },
       "beyond the arena"},
      {"a node beyond the arena", [](Bytes& b) { set_entry(b, 0, 3, fh::node_entry(uint64_t{1} << 40)); },
       "beyond the arena"},
      {"the root as its own child", [](Bytes& b) { set_entry(b, 0, 0, fh::node_entry(0)); }, "reached twice"},
      {"one segment in two places", [](Bytes& b) { set_entry(b, 0, 3, get_entry(b, 0, 0)); }, "reached twice"},
      // 56 segments allow depths up to 16: a chain of 9 nodes from the root goes deeper. (The
      // flat directory would need 2^(2 * 9) entries per such level; without the bound, a few
      // damaged nodes could ask for 2^32.)
      {"a chain of nodes deeper than the arena allows",
       [](Bytes& b) {
         for (uint64_t n = 63; n > 55; --n) set_entry(b, n, 0, fh::node_entry(n - 1));
         set_entry(b, 55, 0, fh::node_entry(54));
         set_entry(b, 0, 0, fh::node_entry(63));
       },
       "below the deepest level"},
  };
  for (const auto& c : cases) {
    Bytes b = pristine();
    c.damage(b);
    const Opened o = open_bytes(b);
    EXPECT_FALSE(o.ok) << c.what << ": opened";
    if (o.ok) continue;
    EXPECT_EQ(o.code, ErrorCode::kCorruptTable) << c.what << ": " << o.message;
    EXPECT_NE(o.message.find("radix directory: node"), std::string::npos) << c.what << ": " << o.message;
    EXPECT_NE(o.message.find(c.says), std::string::npos) << c.what << ": " << o.message;
  }
}

}  // namespace
}  // namespace gphash
