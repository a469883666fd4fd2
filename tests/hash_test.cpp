// The format's hashing and addressing primitives: our XXH64 (shared by host and device) against
// libxxhash, the fixed-width key entry points, the fingerprint's independence from bucket bits,
// the nesting of bucket indices across levels, and the value heap's chunk arithmetic.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "format/hash.h"
#include "format/layout.h"
#include "format/shape.h"
#include "format/slot.h"

namespace gphash::format {
namespace {

constexpr uint64_t kSeeds[] = {0,
                               1,
                               0x9E3779B97F4A7C15ull,
                               0xFFFFFFFFFFFFFFFFull,
                               0x8000000000000000ull,
                               xxh64_detail::kP1,  // seed + kP2 etc. wrap around in the lane setup
                               0x0123456789ABCDEFull};

TEST(Xxh64, MatchesLibxxhashForEveryLengthSeedAndAlignment) {
  std::mt19937_64 rng(1);
  // 257 bytes plus room to start at any of 8 offsets.
  std::vector<unsigned char> buf(257 + 16);
  for (auto& b : buf) b = static_cast<unsigned char>(rng());
  std::vector<uint64_t> seeds(std::begin(kSeeds), std::end(kSeeds));
  for (int i = 0; i < 4; ++i) seeds.push_back(rng());
  for (uint64_t seed : seeds)
    for (size_t offset = 0; offset < 8; ++offset)
      for (size_t len = 0; len <= 257; ++len) {
        const unsigned char* p = buf.data() + offset;
        ASSERT_EQ(xxh64(p, len, seed), XXH64(p, len, seed))
            << "len " << len << " offset " << offset << " seed " << std::hex << seed;
      }
}

TEST(Xxh64, MatchesLibxxhashOnSpecialBytePatterns) {
  // All-zero, all-0xFF and a byte ramp: exercise carries in the byte-wise loads.
  for (int pattern = 0; pattern < 3; ++pattern) {
    std::vector<unsigned char> buf(257);
    for (size_t i = 0; i < buf.size(); ++i)
      buf[i] = pattern == 0 ? 0 : pattern == 1 ? 0xFF : static_cast<unsigned char>(i);
    for (uint64_t seed : kSeeds)
      for (size_t len = 0; len <= buf.size(); ++len)
        ASSERT_EQ(xxh64(buf.data(), len, seed), XXH64(buf.data(), len, seed))
            << "pattern " << pattern << " len " << len;
  }
}

TEST(Xxh64, KnownVectors) {
  // Published XXH64 test vectors (independent of libxxhash's build).
  EXPECT_EQ(xxh64("", 0, 0), 0xEF46DB3751D8E999ull);
  EXPECT_EQ(xxh64("a", 1, 0), 0xD24EC4F1A98C6E5Bull);
  EXPECT_EQ(xxh64("abc", 3, 0), 0x44BC2CF5AD770999ull);
}

template <int Words>
void check_words(std::mt19937_64& rng) {
  uint64_t w[Words];
  unsigned char bytes[Words * 8];
  for (int trial = 0; trial < 20000; ++trial) {
    for (auto& x : w) x = rng();
    // Special keys now and then: all zero, all ones, a single set bit.
    if (trial % 97 == 0) std::memset(w, 0, sizeof w);
    if (trial % 89 == 0) std::memset(w, 0xFF, sizeof w);
    if (trial % 83 == 0) {
      std::memset(w, 0, sizeof w);
      w[trial % Words] = uint64_t{1} << (trial % 64);
    }
    // The engines pass the key as loaded words; libxxhash sees the key's bytes (little-endian).
    for (int i = 0; i < Words; ++i)
      for (int b = 0; b < 8; ++b) bytes[i * 8 + b] = static_cast<unsigned char>(w[i] >> (8 * b));
    const uint64_t seed = trial < static_cast<int>(std::size(kSeeds)) ? kSeeds[trial] : rng();
    ASSERT_EQ(xxh64_words<Words>(w, seed), XXH64(bytes, sizeof bytes, seed)) << "words " << Words << " trial " << trial;
    ASSERT_EQ(xxh64_words<Words>(w, seed), xxh64(bytes, sizeof bytes, seed));
  }
}

TEST(Xxh64, FixedWidthEntryPointsMatchLibxxhash) {
  std::mt19937_64 rng(2);
  check_words<1>(rng);
  check_words<2>(rng);
  check_words<4>(rng);
}

TEST(Xxh64, PerFunctionSeedsDiffer) {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 10000; ++trial) {
    const uint64_t pool_seed = trial == 0 ? 0 : rng();
    for (int i = 0; i < 4; ++i)
      for (int j = i + 1; j < 4; ++j) ASSERT_NE(hash_seed_for(pool_seed, i), hash_seed_for(pool_seed, j));
  }
}

// fingerprint(first, last) = (low 32 bits of first) << 32 | (low 32 bits of last), remapped
// away from EMPTY (0) and INSERTING (1). What is tested:
//  * it is never 0 or 1, also for the inputs whose low halves are both zero or give exactly 1;
//  * it depends on neither hash's high 32 bits, which are the only bits bucket_at() reads for the
//    levels a table may have (1..32): replacing the high half of `first`, of `last` or of both by
//    random bits never changes the fingerprint, for fixed low halves (including the special low
//    patterns 0, 1, 2, 3 and 0xFFFFFFFF) across many random high halves;
//  * it does use all 64 low bits: flipping any one bit of either low half changes it (for inputs
//    not near the remapped values).
TEST(Fingerprint, NeverReservedAndIndependentOfBucketBits) {
  std::mt19937_64 rng(4);
  auto with_high = [](uint64_t h, uint64_t high) { return (high << 32) | (h & 0xFFFFFFFFull); };
  const uint64_t special_lows[] = {0, 1, 2, 3, 0xFFFFFFFFull, 0x80000000ull};
  for (uint64_t lf : special_lows)
    for (uint64_t ll : special_lows) {
      const uint64_t fp = fingerprint(lf, ll);
      ASSERT_GT(fp, kSlotInserting) << lf << " " << ll;
      for (int i = 0; i < 2000; ++i) {
        const uint64_t hf = rng() >> 32, hl = rng() >> 32;
        ASSERT_EQ(fingerprint(with_high(lf, hf), with_high(ll, hl)), fp);
        ASSERT_EQ(fingerprint(with_high(lf, hf), ll), fp);
        ASSERT_EQ(fingerprint(lf, with_high(ll, hl)), fp);
        ASSERT_TRUE(is_published(fingerprint(with_high(lf, hf), with_high(ll, hl))));
      }
    }
  EXPECT_EQ(fingerprint(0, 0), 2u);
  EXPECT_EQ(fingerprint(0, 1), 3u);
  EXPECT_EQ(fingerprint(0xFFFFFFFF00000000ull, 0xABCDEF0100000001ull), 3u);
  for (int trial = 0; trial < 200000; ++trial) {
    const uint64_t first = rng(), last = rng();
    const uint64_t fp = fingerprint(first, last);
    ASSERT_GT(fp, kSlotInserting);
    ASSERT_EQ(fp >> 32, first & 0xFFFFFFFFull);
    ASSERT_EQ(fp & 0xFFFFFFFFull, last & 0xFFFFFFFFull) << "only remapped for low halves 0/0 and 0/1";
    // The top `level` bits used by bucket_at are free to change.
    const uint64_t other_first = with_high(first, rng() >> 32), other_last = with_high(last, rng() >> 32);
    ASSERT_EQ(fingerprint(other_first, other_last), fp);
    if (trial % 16 == 0)
      for (int bit = 0; bit < 32; ++bit) {
        ASSERT_NE(fingerprint(first ^ (uint64_t{1} << bit), last), fp) << "bit " << bit << " of the first hash";
        ASSERT_NE(fingerprint(first, last ^ (uint64_t{1} << bit)), fp) << "bit " << bit << " of the last hash";
      }
  }
}

TEST(Fingerprint, TagIsNeverReserved) {
  for (uint64_t t = 0; t < 256; ++t) {
    const uint8_t tag = tag_of(t << 32 | 0x1234);
    ASSERT_GT(tag, 1u) << t;
    if (t > 1) {
      ASSERT_EQ(tag, t);
    }
  }
}

// bucket_at(h, l) is the top l bits of h: bucket b at level l is split into 2b and 2b+1 at l+1.
TEST(BucketAt, LevelsNest) {
  std::mt19937_64 rng(5);
  std::vector<uint64_t> hashes = {0, 1, ~uint64_t{0}, uint64_t{1} << 63, (uint64_t{1} << 63) - 1, 0xFFFFFFFF, 0xFFFFFFFF00000000};
  for (int i = 0; i < 100000; ++i) hashes.push_back(rng());
  for (uint64_t h : hashes) {
    ASSERT_EQ(bucket_at(h, 0), 0u);
    ASSERT_EQ(bucket_at(h, 1), h >> 63);
    for (uint32_t l = 0; l <= kMaxLevel; ++l) {
      ASSERT_LT(bucket_at(h, l), level_buckets(l)) << "level " << l;
      ASSERT_EQ(bucket_at(h, l), bucket_at(h, l + 1) >> 1) << "level " << l << " hash " << std::hex << h;
    }
    // The bucket bits of the deepest level leave the low 32 bits (the fingerprint's) alone.
    ASSERT_EQ(bucket_at(h, kMaxLevel), bucket_at(h & 0xFFFFFFFF00000000ull, kMaxLevel));
  }
}

TEST(SlotAddress, PackRoundTrips) {
  std::mt19937_64 rng(6);
  for (int i = 0; i < 100000; ++i) {
    const uint32_t level = static_cast<uint32_t>(rng() % (kMaxLevel + 1));
    const SlotAddress a{level, rng() & (level_buckets(level) - 1), static_cast<uint32_t>(rng() % 32)};
    const SlotAddress b = unpack_slot_address(pack(a));
    ASSERT_EQ(b.level, a.level);
    ASSERT_EQ(b.bucket, a.bucket);
    ASSERT_EQ(b.slot, a.slot);
  }
}

void check_heap_cell(const HeapGeometry& g, uint64_t cell, uint32_t expected_chunk) {
  const uint32_t c = g.chunk_of(cell);
  ASSERT_EQ(c, expected_chunk) << "cell " << cell << " first " << g.first_chunk_cells;
  ASSERT_LE(g.chunk_begin(c), cell);
  ASSERT_LT(cell - g.chunk_begin(c), g.chunk_cells(c));
}

TEST(HeapGeometry, ChunkOfAndChunkBeginAgree) {
  std::mt19937_64 rng(7);
  for (uint32_t log2 : {0u, 1u, 4u, 6u, 10u, 20u}) {
    const HeapGeometry g{uint64_t{1} << log2, log2};
    // Chunks tile the cell space: each starts where the previous ends.
    ASSERT_EQ(g.chunk_begin(0), 0u);
    ASSERT_EQ(g.cells_in_chunks(0), 0u);
    const uint32_t chunks = std::min<uint32_t>(40, 63 - log2);
    for (uint32_t c = 0; c < chunks; ++c) {
      ASSERT_EQ(g.chunk_cells(c), g.first_chunk_cells << c);
      ASSERT_EQ(g.chunk_begin(c + 1), g.chunk_begin(c) + g.chunk_cells(c)) << "chunk " << c;
      ASSERT_EQ(g.cells_in_chunks(c + 1), g.chunk_begin(c + 1));
      // First, second, last and random cells of every chunk.
      const uint64_t begin = g.chunk_begin(c), end = g.chunk_begin(c + 1);
      check_heap_cell(g, begin, c);
      check_heap_cell(g, end - 1, c);
      if (end - begin > 1) check_heap_cell(g, begin + 1, c);
      for (int i = 0; i < 200; ++i) check_heap_cell(g, begin + rng() % (end - begin), c);
    }
    // Every cell of the first 2^16 in order, against a walk over the chunks.
    uint32_t chunk = 0;
    for (uint64_t cell = 0; cell < (uint64_t{1} << 16); ++cell) {
      while (cell >= g.chunk_begin(chunk + 1)) ++chunk;
      check_heap_cell(g, cell, chunk);
    }
  }
}

}  // namespace
}  // namespace gphash::format
