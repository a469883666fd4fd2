// Combining the operations of one key inside a batch. Each operation is a function of the
// key's state (absent, or present with a value); these functions compose, so a warp computes
// the state before every operation of a run with a parallel scan, answers each operation from
// it, and writes only the final state to the table. A key that appears 50,000 times in a Zipf
// batch then costs one table access instead of 50,000 serialised ones, with results identical
// to applying the operations one at a time in batch order.
#pragma once

#include <cstdint>

#include "format/hd.h"
#include "gphash/ops.h"

namespace gphash::engine::gpu {

// A value source: the position (within its run) of the operation whose input value the key
// holds, or kFromTable for the value the table held before the batch.
inline constexpr uint32_t kFromTable = (1u << 30) - 1;
inline constexpr uint32_t kMaxRun = kFromTable;

// Transition bits: [63:62] from-absent (0 stay absent, 1 set), [61:60] from-present (0 keep,
// 1 set, 2 become absent), [59:30] value set from absent, [29:0] value set from present.
using Transition = uint64_t;
enum : uint64_t { kAbsentStay = 0, kAbsentSet = 1 };
enum : uint64_t { kPresentKeep = 0, kPresentSet = 1, kPresentErase = 2 };

GPHASH_HD Transition make_transition(uint64_t from_absent, uint32_t absent_value, uint64_t from_present,
                                                      uint32_t present_value) {
  return (from_absent << 62) | (from_present << 60) | (uint64_t{absent_value} << 30) | present_value;
}
GPHASH_HD uint64_t from_absent(Transition t) { return t >> 62; }
GPHASH_HD uint64_t from_present(Transition t) { return (t >> 60) & 3; }
GPHASH_HD uint32_t absent_value(Transition t) { return static_cast<uint32_t>((t >> 30) & kMaxRun); }
GPHASH_HD uint32_t present_value(Transition t) { return static_cast<uint32_t>(t & kMaxRun); }

inline constexpr Transition kIdentity = 0;  // stay absent, keep

GPHASH_HD Transition transition_of(Op op, uint32_t position) {
  switch (op) {
    case Op::kSearch: return kIdentity;
    case Op::kInsert: return make_transition(kAbsentSet, position, kPresentKeep, 0);
    case Op::kUpsert: return make_transition(kAbsentSet, position, kPresentSet, position);
    case Op::kUpdate: return make_transition(kAbsentStay, 0, kPresentSet, position);
    case Op::kErase: return make_transition(kAbsentStay, 0, kPresentErase, 0);
  }
  return kIdentity;
}

// `first`, then `second`.
GPHASH_HD Transition compose(Transition first, Transition second) {
  uint64_t ra, rp;
  uint32_t va = 0, vp = 0;
  // Starting absent.
  if (from_absent(first) == kAbsentStay) {
    ra = from_absent(second);
    va = absent_value(second);
  } else {
    switch (from_present(second)) {
      case kPresentKeep: ra = kAbsentSet, va = absent_value(first); break;
      case kPresentSet: ra = kAbsentSet, va = present_value(second); break;
      default: ra = kAbsentStay; break;
    }
  }
  // Starting present.
  switch (from_present(first)) {
    case kPresentKeep:
      rp = from_present(second);
      vp = present_value(second);
      break;
    case kPresentSet:
      switch (from_present(second)) {
        case kPresentKeep: rp = kPresentSet, vp = present_value(first); break;
        case kPresentSet: rp = kPresentSet, vp = present_value(second); break;
        default: rp = kPresentErase; break;
      }
      break;
    default:  // erased: continue from absent
      if (from_absent(second) == kAbsentSet) {
        rp = kPresentSet;
        vp = absent_value(second);
      } else {
        rp = kPresentErase;
      }
      break;
  }
  return make_transition(ra, va, rp, vp);
}

struct KeyState {
  bool present;
  uint32_t source;  // valid when present: kFromTable or a run position
};

GPHASH_HD KeyState apply(Transition t, KeyState s) {
  if (!s.present) {
    if (from_absent(t) == kAbsentSet) return {true, absent_value(t)};
    return {false, 0};
  }
  switch (from_present(t)) {
    case kPresentKeep: return s;
    case kPresentSet: return {true, present_value(t)};
    default: return {false, 0};
  }
}

GPHASH_HD OpStatus status_of(Op op, bool present) {
  switch (op) {
    case Op::kSearch:
    case Op::kUpdate:
    case Op::kErase: return present ? OpStatus::kOk : OpStatus::kNotFound;
    case Op::kInsert: return present ? OpStatus::kExists : OpStatus::kOk;
    case Op::kUpsert: return OpStatus::kOk;
  }
  return OpStatus::kInvalidOp;  // an ops array in GPU memory the host could not check
}

GPHASH_HD bool is_valid_op(Op op) { return static_cast<uint8_t>(op) <= static_cast<uint8_t>(Op::kErase); }

}  // namespace gphash::engine::gpu
