// The CPU engine's tag mirror (engines/cpu/tag_mirror.h) against the pool and a model: mixed
// batches on several threads through resizes, displacements and a full table, every key width and
// shape; after every batch each slot's mirror byte must say what its state word says, and every
// result must be the model's (a batch gives the results of running it in order).
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "engines/common/dispatch.h"
#include "engines/cpu/cpu_engine_impl.h"
#include "engines/cpu/tag_mirror.h"
#include "gphash/table.h"
#include "pool/pool.h"
#include "test_util.h"

namespace gphash {
namespace {

TEST(TagMirror, MatchMaskFindsExactlyTheEqualBytes) {
  using M = engine::cpu::TagMirror<8>;
  std::mt19937_64 rng(5);
  for (int round = 0; round < 20000; ++round) {
    uint64_t w = rng();
    // Bytes near the tag (tag - 1, tag + 1, 0, 1) are where a borrowing formula goes wrong.
    const uint8_t tag = static_cast<uint8_t>(rng());
    for (int s = 0; s < 8; ++s) {
      const uint8_t pick[] = {tag, static_cast<uint8_t>(tag - 1), static_cast<uint8_t>(tag + 1), 0, 1};
      if (rng() % 2) w = (w & ~(0xFFull << (8 * s))) | (uint64_t{pick[rng() % 5]} << (8 * s));
    }
    uint64_t expected = 0;
    for (int s = 0; s < 8; ++s)
      if (static_cast<uint8_t>(w >> (8 * s)) == tag) expected |= 0x80ull << (8 * s);
    ASSERT_EQ(M::match_mask(w, tag), expected) << std::hex << w << " tag " << int(tag);
  }
  using M4 = engine::cpu::TagMirror<4>;
  EXPECT_EQ(M4::match_mask(0x02000502u, 2), 0x00000080u | 0x80000000u);
  EXPECT_EQ(M4::first_slot(M4::match_mask(0x00070000u, 0)), 0);
  EXPECT_EQ(M4::count(M4::match_mask(0x00070000u, 0)), 3);
}

struct Case {
  TableShape shape;
  uint32_t key_width, value_width;
  bool auto_resize;
};

std::string case_name(const Case& c) {
  return to_string(c.shape) + "_k" + std::to_string(c.key_width) + "_v" + std::to_string(c.value_width) +
         (c.auto_resize ? "" : "_fixed");
}

template <class S, int K>
uint64_t mismatches(engine::Engine& e) {
  return static_cast<engine::cpu::CpuEngine<S, K>&>(e).mirror_mismatches();
}

void run_case(const Case& c) {
  SCOPED_TRACE(case_name(c));
  testing::TempPool path("mirror");
  TableConfig config;
  config.key_width = c.key_width;
  config.value_width = c.value_width;
  config.shape = c.shape;
  config.capacity = 256;  // several resizes, or a full table without them
  config.hash_seed = 11;
  Table::create(path.path(), config).close();

  auto pool = pool::Pool::open(path.path(), {});
  OpenOptions options;
  options.threads = 4;
  options.auto_resize = c.auto_resize;
  auto make = [&] {
    return engine::dispatch(c.shape, c.key_width, [&]<class S, int K>() -> std::unique_ptr<engine::Engine> {
      return std::make_unique<engine::cpu::CpuEngine<S, K>>(*pool, options);
    });
  };
  auto count_mismatches = [&](engine::Engine& e) {
    return engine::dispatch(c.shape, c.key_width, [&]<class S, int K>() { return mismatches<S, K>(e); });
  };
  std::unique_ptr<engine::Engine> engine = make();

  // Keys: a universe of 6,000, so erased keys come back; the last key byte varies the value.
  std::map<std::string, std::string> model;
  std::mt19937_64 rng(c.key_width * 131 + c.value_width + c.auto_resize);
  const size_t n = 2048;
  std::vector<std::byte> keys(n * c.key_width), values(n * c.value_width), out(n * c.value_width);
  std::vector<Op> ops(n);
  std::vector<OpStatus> status(n);
  uint64_t full = 0;
  for (int round = 0; round < 24; ++round) {
    for (size_t i = 0; i < n; ++i) {
      const uint64_t id = rng() % 6000;
      std::memset(&keys[i * c.key_width], 0, c.key_width);
      for (uint32_t w = 0; w < c.key_width; w += 8) {
        const uint64_t word = id * 0x9E3779B97F4A7C15ull + w;
        std::memcpy(&keys[i * c.key_width + w], &word, 8);
      }
      for (uint32_t b = 0; b < c.value_width; ++b) values[i * c.value_width + b] = static_cast<std::byte>(rng());
      const Op choice[] = {Op::kInsert, Op::kInsert, Op::kUpsert, Op::kUpdate, Op::kErase, Op::kSearch, Op::kSearch};
      ops[i] = round < 3 ? Op::kInsert : choice[rng() % 7];
    }
    Batch b;
    b.size = n;
    b.key_width = c.key_width;
    b.value_width = c.value_width;
    b.ops = ops.data();
    b.keys = keys.data();
    b.values = values.data();
    b.values_out = out.data();
    b.status = status.data();
    engine->execute(b);
    for (size_t i = 0; i < n; ++i) {
      const std::string key(reinterpret_cast<const char*>(&keys[i * c.key_width]), c.key_width);
      const std::string value(reinterpret_cast<const char*>(&values[i * c.value_width]), c.value_width);
      auto it = model.find(key);
      const bool present = it != model.end();
      OpStatus want = OpStatus::kOk;
      switch (ops[i]) {
        case Op::kInsert: want = present ? OpStatus::kExists : OpStatus::kOk; break;
        case Op::kUpdate:
        case Op::kErase:
        case Op::kSearch: want = present ? OpStatus::kOk : OpStatus::kNotFound; break;
        default: break;
      }
      if (status[i] == OpStatus::kTableFull && !c.auto_resize && !present &&
          (ops[i] == Op::kInsert || ops[i] == Op::kUpsert)) {
        ++full;  // a fixed table may be full; nothing changed
        continue;
      }
      ASSERT_EQ(status[i], want) << "round " << round << " position " << i << " op " << int(ops[i]);
      if (ops[i] == Op::kSearch && present) {
        ASSERT_EQ(std::memcmp(&out[i * c.value_width], it->second.data(), c.value_width), 0) << "round " << round;
      }
      if (want != OpStatus::kOk) continue;
      if (ops[i] == Op::kErase) model.erase(it);
      else if (ops[i] != Op::kSearch) model[key] = value;
    }
    ASSERT_EQ(engine->item_count(), model.size()) << "round " << round;
    ASSERT_EQ(count_mismatches(*engine), 0u) << "round " << round;
  }
  if (c.auto_resize) {
    EXPECT_GT(engine->stats().resizes, 2u);
  } else {
    EXPECT_GT(full, 0u) << "the fixed table never filled: the case tests less than it says";
    EXPECT_GT(engine->stats().displacements, 0u);
  }

  // Reopened, the mirror is rebuilt from the pool and finds every item.
  engine->close();
  engine.reset();
  engine = make();
  EXPECT_EQ(count_mismatches(*engine), 0u);
  std::vector<std::byte> all_keys;
  for (const auto& [k, v] : model) all_keys.insert(all_keys.end(), reinterpret_cast<const std::byte*>(k.data()),
                                                   reinterpret_cast<const std::byte*>(k.data()) + k.size());
  std::vector<OpStatus> found(model.size());
  std::vector<std::byte> got(model.size() * c.value_width);
  Batch s;
  s.size = model.size();
  s.key_width = c.key_width;
  s.value_width = c.value_width;
  s.op = Op::kSearch;
  s.keys = all_keys.data();
  s.values_out = got.data();
  s.status = found.data();
  engine->execute(s);
  size_t i = 0;
  for (const auto& [k, v] : model) {
    ASSERT_EQ(found[i], OpStatus::kOk) << "item " << i << " after reopening";
    ASSERT_EQ(std::memcmp(&got[i * c.value_width], v.data(), c.value_width), 0);
    ++i;
  }
  engine->close();
}

TEST(TagMirror, FollowsThePoolThroughResizes) {
  for (Case c : {Case{{2, 2, 8}, 8, 8, true}, Case{{2, 2, 8}, 16, 40, true}, Case{{4, 2, 4}, 32, 8, true},
                 Case{{1, 4, 8}, 8, 24, true}})
    run_case(c);
}

TEST(TagMirror, FollowsThePoolThroughDisplacementsInAFullTable) {
  for (Case c : {Case{{2, 2, 8}, 8, 8, false}, Case{{4, 2, 4}, 16, 16, false}, Case{{1, 4, 8}, 32, 8, false}})
    run_case(c);
}

}  // namespace
}  // namespace gphash
