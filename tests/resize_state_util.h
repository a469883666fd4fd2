// A pool left in the middle of a resize whose rehash needs displacement, built by hand (shared by
// the CPU engine's and the GPU engine's tests of a resumed resize).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "engines/common/table_meta.h"
#include "format/hash.h"
#include "format/header.h"
#include "format/layout.h"
#include "format/slot.h"
#include "gphash/table.h"
#include "pool/pool.h"

namespace gphash::testing {

// A 2L-2H-8S table of 8-byte keys and values (keys 1..40, value = key), then step 1 of a resize
// (TableMeta::begin_resize, nothing rehashed) and, for one bottom item, every free slot of its
// candidate buckets above (new top level included) filled with new items: the insert rule cannot
// place it, displacement can. The pool is left marked dirty, so the next open recovers it and
// resumes the resize. Fills `model` (key -> value) with what the table must then hold.
inline void make_resize_that_needs_displacement(const std::string& path, std::map<uint64_t, uint64_t>& model) {
  {
    Table table = Table::create(path, {8, 8, {2, 2, 8}, 64, 5});
    std::vector<uint64_t> keys;
    for (uint64_t k = 1; k <= 40; ++k) keys.push_back(k), model[k] = k;
    std::vector<OpStatus> status(keys.size());
    Batch b;
    b.size = keys.size();
    b.key_width = 8;
    b.value_width = 8;
    b.op = Op::kInsert;
    b.keys = keys.data();
    b.values = keys.data();
    b.status = status.data();
    table.execute(b);
    for (OpStatus s : status) ASSERT_EQ(s, OpStatus::kOk);
    ASSERT_EQ(table.info().resizes, 0u);
  }
  auto p = pool::Pool::open(path, {});
  engine::TableMeta meta(*p);
  meta.mark_open_dirty();
  meta.begin_resize();
  const format::PoolHeader& h = p->header();
  const uint32_t bottom = h.gphash.bottom_level, highest = format::highest_level(h);
  ASSERT_EQ(highest, bottom + 2);
  const format::BucketLayout layout{8, 8};
  const uint64_t seed[2] = {format::hash_seed_for(h.gphash.hash_seed, 0), format::hash_seed_for(h.gphash.hash_seed, 1)};
  auto hash = [&](uint64_t key, int j) { return format::xxh64_words<1>(&key, seed[j]); };
  auto word = [&](uint32_t level, uint64_t b, uint32_t offset) {
    return reinterpret_cast<uint64_t*>(meta.bucket(level, b) + offset);
  };
  uint64_t x = 0;
  for (uint64_t b = 0; b < format::level_buckets(bottom) && !x; ++b)
    for (uint32_t s = 0; s < 8 && !x; ++s)
      if (const uint64_t state = *word(bottom, b, layout.state_offset(s)); format::is_published(state))
        x = format::decode_key_word(state);
  ASSERT_NE(x, 0u);
  std::mt19937_64 rng(3);
  uint64_t added = 0;
  for (uint32_t level = bottom + 1; level <= highest; ++level)
    for (int j = 0; j < 2; ++j) {
      const uint64_t b = format::bucket_at(hash(x, j), level);
      for (uint32_t s = 0; s < 8; ++s) {
        if (*word(level, b, layout.state_offset(s)) != format::kSlotEmpty) continue;
        uint64_t k = 0;
        do k = rng() >> 8;  // not a reserved key
        while (model.count(k) || (format::bucket_at(hash(k, 0), level) != b && format::bucket_at(hash(k, 1), level) != b));
        *word(level, b, layout.value_offset(s)) = k ^ 1;
        *word(level, b, layout.state_offset(s)) = format::encode_key_word(k);
        model[k] = k ^ 1;
        ++added;
      }
    }
  ASSERT_GT(added, 0u);
}  // closed without finishing the resize

// Every key of `model` is found in `table` with its value.
inline void expect_table_holds(Table& table, const std::map<uint64_t, uint64_t>& model) {
  std::vector<uint64_t> keys, values(model.size());
  for (const auto& [k, v] : model) keys.push_back(k);
  std::vector<OpStatus> status(keys.size());
  Batch b;
  b.size = keys.size();
  b.key_width = 8;
  b.value_width = 8;
  b.keys = keys.data();
  b.values_out = values.data();
  b.status = status.data();
  table.execute(b);
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_EQ(status[i], OpStatus::kOk) << "key " << keys[i];
    EXPECT_EQ(values[i], model.at(keys[i]));
  }
}

}  // namespace gphash::testing
