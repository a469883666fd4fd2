// The probe rules (format/probe.h) every engine applies: candidate geometry, the valid copy of a
// duplicated key, the insert target. (A GPU test checks that both engines fill a table alike.)
#include <gtest/gtest.h>

#include <set>
#include <tuple>

#include "format/probe.h"

namespace gphash::format {
namespace {

TEST(ProbeRules, EveryCandidateSlotHasExactlyOneLane) {
  for (TableShape s : kSupportedShapes) {
    std::set<std::tuple<int, int, int>> seen;
    for (int c = 0; c < kWarpSlots; ++c) {
      const CandidatePosition p = candidate_position(c, s.levels, s.slots);
      EXPECT_LT(p.slot, s.slots);
      EXPECT_LT(p.d, s.levels);
      EXPECT_LT(p.j, s.hashes);
      EXPECT_TRUE(seen.insert({p.slot, p.d, p.j}).second) << "lane " << c;
    }
    EXPECT_EQ(seen.size(), static_cast<size_t>(kWarpSlots));
  }
}

TEST(ProbeRules, TheValidCopyIsAtTheHighestLevelThenLowestBucketThenLowestSlot) {
  EXPECT_TRUE(preferred_copy({5, 900, 7}, {4, 0, 0}));
  EXPECT_TRUE(preferred_copy({5, 3, 7}, {5, 4, 0}));
  EXPECT_TRUE(preferred_copy({5, 3, 1}, {5, 3, 2}));
  EXPECT_FALSE(preferred_copy({5, 3, 1}, {5, 3, 1}));
  EXPECT_LT(copy_rank(kMaxLevel, 0, 0), copy_rank(0, 0, 0));
}

TEST(ProbeRules, InsertsGoToTheLeastLoadedBucketThenTheHighestLevelThenTheFirstHash) {
  const int levels = 2;
  EXPECT_LT(target_score(3, 0, 1, levels), target_score(4, 1, 0, levels)) << "fewer occupied slots first";
  EXPECT_LT(target_score(3, 1, 1, levels), target_score(3, 0, 0, levels)) << "then the higher level";
  EXPECT_LT(target_score(3, 1, 0, levels), target_score(3, 1, 1, levels)) << "then the lower hash function";
}

TEST(ProbeRules, ABucketTwoHashesNameIsACandidateOnce) {
  const uint64_t same[2] = {0xABCDull << 48, 0xABCDull << 48};
  EXPECT_FALSE(repeated_bucket(same, 10, 0));
  EXPECT_TRUE(repeated_bucket(same, 10, 1));
  const uint64_t differ[2] = {0x1ull << 63, 0x0};
  EXPECT_FALSE(repeated_bucket(differ, 10, 1));
  EXPECT_TRUE(repeated_bucket(differ, 0, 1)) << "level 0 has one bucket";
}

}  // namespace
}  // namespace gphash::format
