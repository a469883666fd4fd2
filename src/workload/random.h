// Seeded pseudo-random numbers for workload generation.
//
// Workloads must be reproducible from a seed on every platform, so the generator is our own
// code with a fixed algorithm (std::mt19937_64 is portable too, but it is slower and its
// distributions, e.g. std::uniform_real_distribution, are not specified bit for bit).
#pragma once

#include <cstdint>
#include <limits>

namespace gphash::workload {

// SplitMix64 (Steele, Lea, Flood 2014): turns any seed, including 0 and small consecutive
// integers, into well-spread 64-bit words. Used to fill the xoshiro state and for
// deriving independent sub-seeds.
class SplitMix64 {
 public:
  explicit constexpr SplitMix64(uint64_t seed) : state_(seed) {}

  constexpr uint64_t next() {
    state_ += 0x9E3779B97F4A7C15ULL;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }

 private:
  uint64_t state_;
};

// One SplitMix64 step as a stateless function: a bijective 64-bit mix, handy for deriving a
// sub-seed from a seed and a purpose tag.
constexpr uint64_t splitmix64_mix(uint64_t value) { return SplitMix64(value).next(); }

// xoshiro256** (Blackman, Vigna 2018): 256 bits of state, period 2^256 - 1, passes BigCrush;
// about 1 ns per 64-bit word. Satisfies std::uniform_random_bit_generator.
class Xoshiro256StarStar {
 public:
  using result_type = uint64_t;

  explicit constexpr Xoshiro256StarStar(uint64_t seed) {
    SplitMix64 seeder(seed);
    // SplitMix64 output is a bijection of its counter, so four consecutive outputs are never
    // all zero: the all-zero state (a fixed point of xoshiro) cannot occur.
    for (uint64_t& word : state_) word = seeder.next();
  }

  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return std::numeric_limits<result_type>::max(); }
  constexpr result_type operator()() { return next(); }

  constexpr uint64_t next() {
    const uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  }

  // Uniform on [0, 1) with 53 random bits, so every value is a multiple of 2^-53 and 1.0 is
  // never returned (samplers rely on u < 1).
  constexpr double next_double() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

  // Uniform on [0, bound), without modulo bias. bound must be > 0.
  constexpr uint64_t below(uint64_t bound) {
    // Values below `threshold` would make some residues one draw more likely than others;
    // rejecting them (probability < bound / 2^64) leaves exactly 2^64 - threshold values, a
    // multiple of bound.
    const uint64_t threshold = (0 - bound) % bound;
    for (;;) {
      const uint64_t draw = next();
      if (draw >= threshold) return draw % bound;
    }
  }

 private:
  static constexpr uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

  uint64_t state_[4]{};
};

// The generator every sampler in this module draws from.
using Rng = Xoshiro256StarStar;

}  // namespace gphash::workload
