// The GPU engine answers all operations on one key in a batch with one scan over composed
// transitions (src/engines/gpu/group.h). The composition is plain host/device code, so it is
// checked here, on the CPU, against applying the operations one at a time.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "engines/gpu/group.h"

namespace gphash::engine::gpu {
namespace {

// Applies ops one at a time: returns statuses and the final state.
KeyState sequential(const std::vector<Op>& ops, KeyState s, std::vector<OpStatus>* status,
                    std::vector<KeyState>* before) {
  for (size_t i = 0; i < ops.size(); ++i) {
    before->push_back(s);
    status->push_back(status_of(ops[i], s.present));
    s = apply(transition_of(ops[i], static_cast<uint32_t>(i)), s);
  }
  return s;
}

TEST(GroupCombine, PrefixCompositionMatchesOneAtATime) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 20000; ++trial) {
    const size_t n = 1 + rng() % 70;
    std::vector<Op> ops(n);
    for (Op& op : ops) op = static_cast<Op>(rng() % 5);
    const KeyState start = rng() % 2 ? KeyState{true, kFromTable} : KeyState{false, 0};
    std::vector<OpStatus> want;
    std::vector<KeyState> before;
    const KeyState final_state = sequential(ops, start, &want, &before);
    // As the warp does it: chunks of 32, inclusive prefix within a chunk, a carried state.
    KeyState carry = start;
    for (size_t base = 0; base < n; base += 32) {
      Transition prefix = kIdentity;
      for (size_t i = base; i < std::min(n, base + 32); ++i) {
        const KeyState s = apply(prefix, carry);  // the exclusive prefix applied to the carry
        ASSERT_EQ(s.present, before[i].present) << "trial " << trial << " op " << i;
        if (s.present) {
          ASSERT_EQ(s.source, before[i].source) << "trial " << trial << " op " << i;
        }
        ASSERT_EQ(status_of(ops[i], s.present), want[i]);
        prefix = compose(prefix, transition_of(ops[i], static_cast<uint32_t>(i)));
      }
      carry = apply(prefix, carry);
    }
    ASSERT_EQ(carry.present, final_state.present) << "trial " << trial;
    if (carry.present) {
      ASSERT_EQ(carry.source, final_state.source) << "trial " << trial;
    }
  }
}

TEST(GroupCombine, CompositionIsAssociative) {
  std::mt19937_64 rng(9);
  for (int trial = 0; trial < 100000; ++trial) {
    Transition a = transition_of(static_cast<Op>(rng() % 5), static_cast<uint32_t>(rng() % 100));
    Transition b = transition_of(static_cast<Op>(rng() % 5), static_cast<uint32_t>(rng() % 100));
    Transition c = transition_of(static_cast<Op>(rng() % 5), static_cast<uint32_t>(rng() % 100));
    if (rng() % 2) a = compose(a, b);
    ASSERT_EQ(compose(compose(a, b), c), compose(a, compose(b, c)));
  }
}

}  // namespace
}  // namespace gphash::engine::gpu
