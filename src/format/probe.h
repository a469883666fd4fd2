// The probe rules, in one place for every engine (the CPU engine, the GPU kernels and the device
// view user kernels take): where a key's candidate slots are, which copy of a duplicated key is
// the valid one, and which slot an insert takes. tests/probe_rules_test.cpp pins them down, and a
// GPU test checks that both engines fill a table slot for slot alike.
#pragma once

#include <cstdint>

#include "format/hd.h"
#include "format/shape.h"
#include "format/slot.h"

namespace gphash::format {

// Candidate c (0..L*H*S-1; a warp lane on the GPU) of a shape: slot c % S of the bucket that hash
// function j = c / (S*L) gives at level bottom + d, d = (c / S) % L. One warp lane per candidate.
struct CandidatePosition {
  int slot, d, j;
};
GPHASH_HD CandidatePosition candidate_position(int c, int levels, int slots) {
  return {c % slots, (c / slots) % levels, c / (slots * levels)};
}

// Two hash functions may name the same bucket at a level: only the lower one's is a candidate.
// (Every index into `hash` is a compile-time constant once unrolled, so GPU code keeps it in
// registers even though j varies by lane.)
template <int H>
GPHASH_HD bool repeated_bucket(const uint64_t (&hash)[H], uint32_t level, int j) {
  uint64_t b = 0;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int i = 0; i < H; ++i)
    if (i == j) b = bucket_at(hash[i], level);
  bool repeat = false;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int i = 0; i < H; ++i)
    if (i < j && bucket_at(hash[i], level) == b) repeat = true;
  return repeat;
}

// The valid copy among published copies of one key: highest level, then lowest bucket, then
// lowest slot. The copy with the smallest rank is valid.
GPHASH_HD uint64_t copy_rank(uint32_t level, uint64_t bucket, uint32_t slot) {
  return (uint64_t{kMaxLevel - level} << 58) | (bucket << 6) | slot;
}
GPHASH_HD bool preferred_copy(SlotAddress a, SlotAddress b) {
  return copy_rank(a.level, a.bucket, a.slot) < copy_rank(b.level, b.bucket, b.slot);
}

// Where an insert goes: the candidate bucket with a free slot and the fewest occupied slots; ties
// to the highest level, then the lowest hash function; in it, the first empty slot. The bucket
// with the smallest score wins.
GPHASH_HD uint32_t target_score(int occupied, int d, int j, int levels) {
  return (uint32_t(occupied) << 16) | (uint32_t(levels - 1 - d) << 8) | uint32_t(j);
}

}  // namespace gphash::format
