// The naive port, for comparison only: one thread per run of the plan and no warp cooperation
// (the style of the paper's Clevel-GPM baseline). Each thread walks its key's 32 candidate slots
// itself, reading the table's state words directly, and applies the run's operations one after
// the other. Same format, same protocol, same results; only the execution differs.
#pragma once

#include "engines/gpu/warp_ops.cuh"

namespace gphash::engine::gpu {

template <class T>
struct ThreadOps {
  const T& t;
  const BatchContext& ctx;
  const BatchView& bv;
  long long& item_delta;

  struct Found {
    bool present;
    uint32_t level;
    uint64_t bucket;
    int slot;
    bool has_target;
    uint32_t t_level;
    uint64_t t_bucket;
    int t_slot;
  };

  // The candidates by the probe rules (format/probe.h): the valid copy (smallest copy rank) and
  // the insert target (smallest target score).
  __device__ Found probe(const KeyProbe<T>& p) const {
    Found f{};
    uint64_t best_rank = ~0ull;
    uint32_t best_score = ~0u;
#pragma unroll
    for (int d = T::L - 1; d >= 0; --d)
#pragma unroll
      for (int j = 0; j < T::H; ++j) {
        const uint32_t level = t.bottom + d;
        const uint64_t b = format::bucket_at(p.hash[j], level);
        if (format::repeated_bucket(p.hash, level, j)) continue;
        std::byte* bucket = t.bucket(level, b);
        int load = 0, first_empty = -1;
        for (int s = 0; s < T::S; ++s) {
          const uint64_t state = load_volatile(T::state_word(bucket, s));
          if (state == format::kSlotEmpty) {
            if (first_empty < 0) first_empty = s;
            continue;
          }
          ++load;
          if (state != p.published) continue;
          bool eq = true;
          if constexpr (!T::Layout::kKeyIsState)
            for (int w = 0; w < T::kKeyWords; ++w) eq &= T::key_words(bucket, s)[w] == p.key[w];
          const uint64_t rank = format::copy_rank(level, b, s);
          if (eq && rank < best_rank) best_rank = rank, f.present = true, f.level = level, f.bucket = b, f.slot = s;
        }
        const uint32_t score = format::target_score(load, d, j, T::L);
        if (first_empty >= 0 && score < best_score)
          best_score = score, f.has_target = true, f.t_level = level, f.t_bucket = b, f.t_slot = first_empty;
      }
    return f;
  }

  __device__ uint64_t value_word_for(const std::byte* src, uint64_t hash0) const {
    if (!t.has_heap) return read_inline_value(src, bv.value_width);
    const uint64_t cell = allocate_cell(t, ctx);
    if (cell == kNoCell) return kNoCell;
    t.writes.copy(t.cell(cell), src, bv.value_width);
    if (t.value_checksums) t.writes.store(t.cell_checksum(cell), t.checksum_of(src, hash0));
    t.writes.barrier();
    return cell;
  }

  // Returns kDone or what the run needs from the slow path (nothing of it applied then).
  __device__ RunResult run(size_t begin, size_t end) {
    KeyProbe<T> p;
    make_probe(t, bv.keys + size_t{bv.op_index(begin)} * T::kKeyWords, p);
    for (size_t pos = begin + 1; pos < end; ++pos) {  // a prefix shared by two keys: the warp path handles it
      const uint64_t* k = bv.keys + size_t{bv.op_index(pos)} * T::kKeyWords;
      for (int w = 0; w < T::kKeyWords; ++w)
        if (k[w] != p.key[w]) return RunResult::kNeedSlot;
    }
    if constexpr (T::Layout::kKeyIsState) {
      if (format::is_reserved_key(p.key[0])) {
        for (size_t pos = begin; pos < end; ++pos) {
          const uint32_t i = bv.op_index(pos);
          bv.status[i] = static_cast<uint8_t>(is_valid_op(bv.op(i)) ? OpStatus::kReservedKey : OpStatus::kInvalidOp);
        }
        return RunResult::kDone;
      }
    }
    Found f = probe(p);
    const uint64_t stored = f.present ? load_volatile(T::value_word(t.bucket(f.level, f.bucket), f.slot)) : 0;
    KeyState s{f.present, kFromTable};
    for (size_t pos = begin; pos < end; ++pos) {
      const uint32_t i = bv.op_index(pos);
      const Op op = bv.op(i);
      answer_in_run(t, bv, i, op, s, begin, stored, nullptr, p.hash[0]);
      s = apply(transition_of(op, uint32_t(pos - begin)), s);
    }
    if (f.present && !s.present) {
      t.writes.store(T::state_word(t.bucket(f.level, f.bucket), f.slot), format::kSlotEmpty);
      t.writes.barrier();
      if (t.has_heap) release_cell(ctx, stored);
      --item_delta;
    } else if (f.present && s.present && s.source != kFromTable) {
      const uint64_t word = value_word_for(bv.value(bv.op_index(begin + s.source)), p.hash[0]);
      if (t.has_heap && word == kNoCell) return RunResult::kNeedCell;
      t.writes.store(T::value_word(t.bucket(f.level, f.bucket), f.slot), word);
      t.writes.barrier();
      if (t.has_heap) release_cell(ctx, stored);
    } else if (!f.present && s.present) {
      uint64_t word = 0;
      bool have_word = false;
      for (;;) {
        if (!f.has_target) {
          if (have_word && t.has_heap) release_cell(ctx, word);
          return RunResult::kNeedSlot;
        }
        if (!have_word) {
          word = value_word_for(bv.value(bv.op_index(begin + s.source)), p.hash[0]);
          if (t.has_heap && word == kNoCell) return RunResult::kNeedCell;
          have_word = true;
        }
        if (t.writes.claim(T::state_word(t.bucket(f.t_level, f.t_bucket), f.t_slot))) {
          link_slot<Access::kDirect>(t, f.t_level, f.t_bucket, f.t_slot, 0, p.key, p.published, p.tag, word);
          ++item_delta;
          break;
        }
        f = probe(p);
      }
    }
    return RunResult::kDone;
  }
};

}  // namespace gphash::engine::gpu
