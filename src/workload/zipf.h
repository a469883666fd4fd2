// Key choosers: which of the items [0, n) an operation touches.
//
// Every chooser has `uint64_t next(Rng&)` returning an item in [0, n). They hold no random
// state of their own, so one Rng can drive several choosers and a stream is reproducible
// from its seed alone. next() is const except for LatestChooser, so threads may share a
// chooser if each brings its own Rng; LatestChooser needs one copy per thread.
#pragma once

#include <cstdint>

#include "workload/random.h"

namespace gphash::workload {

// The generalized harmonic number zeta(n, theta) = sum_{i=1..n} i^-theta.
// Exact summation for small n; beyond that, direct summation of the first terms plus an
// Euler-Maclaurin tail, so zeta(10^10, 0.99) costs microseconds instead of minutes.
// Relative error below 1e-13 for any n and theta > 0. Throws std::invalid_argument if theta
// is not a positive finite number.
double zeta(uint64_t n, double theta);

// Every item equally likely.
class UniformChooser {
 public:
  // Throws std::invalid_argument if item_count is 0.
  explicit UniformChooser(uint64_t item_count);

  uint64_t next(Rng& rng) const { return rng.below(item_count_); }
  uint64_t item_count() const { return item_count_; }

 private:
  uint64_t item_count_;
};

// YCSB's ZipfianGenerator: the method of Gray et al., "Quickly generating billion-record
// synthetic databases" (SIGMOD'94). Item 0 is the hottest (rank 1), item 1 the next, and so
// on: p(0) = 1/zeta(n) and p(1) = 2^-theta/zeta(n) exactly; the other items follow a closed
// form that only approximates Zipf (it puts too much mass just after the head: item 2 gets
// about 19% more than exact Zipf at n = 10^6, theta = 0.99; the top-1000 mass is 51.0%
// instead of 50.2%). Use ZipfExact when exact masses matter; use this to be
// comparable with published YCSB numbers.
class ZipfianYcsb {
 public:
  static constexpr double kDefaultTheta = 0.99;

  // Throws std::invalid_argument if item_count is 0 or theta is outside (0, 1): the method
  // divides by 1 - theta.
  explicit ZipfianYcsb(uint64_t item_count, double theta = kDefaultTheta);
  // As above with zeta(item_count, theta) supplied, as YCSB does for its 10^10-item
  // scrambled generator.
  ZipfianYcsb(uint64_t item_count, double theta, double zeta_of_item_count);

  uint64_t next(Rng& rng) const;

  // Changes n. Growing adds the new terms to zeta(n) instead of recomputing it, as YCSB does
  // when its item count grows (LatestChooser grows by one item per insert). Unlike YCSB,
  // eta is recomputed from the new n (YCSB keeps the n it was constructed with in eta).
  void set_item_count(uint64_t item_count);

  uint64_t item_count() const { return item_count_; }
  double theta() const { return theta_; }
  double zeta_of_item_count() const { return zeta_n_; }

 private:
  void update_eta();

  uint64_t item_count_;
  double theta_;
  double alpha_;           // 1 / (1 - theta)
  double zeta_2_;          // 1 + 2^-theta: the mass of ranks 1 and 2 (times zeta(n))
  double zeta_n_;
  double eta_;
};

// YCSB's FNV hash of a long as used by ScrambledZipfianGenerator: the 8 bytes of `value`,
// least significant first, each XORed into the state and then multiplied by the FNV-64
// prime (offset basis 0xCBF29CE484222325, prime 1099511628211), then Java's Math.abs. The
// one input whose hash is 2^63 (where Math.abs overflows and Java would return a negative
// key) yields 2^63 here, which keeps the result in [0, 2^63].
uint64_t ycsb_fnvhash64(uint64_t value);

// YCSB's ScrambledZipfianGenerator, YCSB's default request distribution: a ZipfianYcsb over
// YCSB's fixed 10^10 + 1 items (its generator spans [0, 10^10] inclusive), mapped to
// [0, n) with ycsb_fnvhash64(rank) % n. Hot items land at unrelated positions, but the
// masses are those of the 10^10-item Zipf folded onto n items: the hottest item gets
// 1/zeta(10^10) = 3.78% whatever n is, flatter than Zipf over n items (YCSB issue #1495).
class ScrambledZipfian {
 public:
  static constexpr uint64_t kYcsbItemCount = 10'000'000'000ULL;
  // zeta(10^10, 0.99) as hard-coded in YCSB; for any other theta it is computed.
  static constexpr double kYcsbZeta = 26.46902820178302;

  // Throws std::invalid_argument if item_count is 0 or theta is outside (0, 1).
  explicit ScrambledZipfian(uint64_t item_count, double theta = ZipfianYcsb::kDefaultTheta);

  uint64_t next(Rng& rng) const { return ycsb_fnvhash64(ranks_.next(rng)) % item_count_; }
  uint64_t item_count() const { return item_count_; }

 private:
  ZipfianYcsb ranks_;
  uint64_t item_count_;
};

// A keyed pseudo-random bijection of [0, n): a 4-round Feistel network over the smallest
// even number of bits that covers n, with cycle walking for the values >= n (fewer than 4
// network evaluations per call on average, because that domain is less than 4n).
class RandomPermutation {
 public:
  // Throws std::invalid_argument if n is 0.
  RandomPermutation(uint64_t n, uint64_t key);

  uint64_t operator()(uint64_t x) const;
  uint64_t size() const { return n_; }

 private:
  uint64_t feistel(uint64_t x) const;

  uint64_t n_;
  unsigned half_bits_;
  uint64_t half_mask_;
  uint64_t round_keys_[4];
};

// Exact Zipf: rank r (0-based) has probability (r+1)^-theta / zeta(n, theta), for any
// theta > 0 (theta = 1 and theta > 1 included) and n up to 2^63, by rejection-inversion
// (Hörmann, Derflinger, "Rejection-inversion to generate variates from monotone discrete
// distributions", ACM TOMACS 1996): O(1) expected time, no tables, about 1.1 uniforms per
// sample. Exact up to double rounding; above n = 2^53 neighbouring tail ranks merge.
//
// With permute = false item = rank, so item 0 is the hottest. With permute = true, ranks
// go through a RandomPermutation keyed by permutation_key, so hot items are scattered over
// [0, n) while the multiset of item masses stays exactly Zipf (unlike ScrambledZipfian).
class ZipfExact {
 public:
  // Throws std::invalid_argument if item_count is 0, item_count > 2^63 or theta is not a
  // positive finite number.
  explicit ZipfExact(uint64_t item_count, double theta = ZipfianYcsb::kDefaultTheta,
                     bool permute = false, uint64_t permutation_key = 0);

  uint64_t next(Rng& rng) const { return item_of_rank(next_rank(rng)); }
  // The 0-based rank of the next sample (0 is the hottest), before any permutation.
  uint64_t next_rank(Rng& rng) const;
  uint64_t item_of_rank(uint64_t rank) const {
    return permute_ ? permutation_(rank) : rank;
  }

  uint64_t item_count() const { return item_count_; }
  double theta() const { return theta_; }

 private:
  double integral_of_hat(double x) const;          // H(x) = integral_1^x t^-theta dt
  double inverse_integral_of_hat(double y) const;  // H^-1
  double hat(double x) const;                      // x^-theta

  uint64_t item_count_;
  double theta_;
  double one_minus_theta_;
  double integral_low_;    // H(1.5) - 1: lower end of the sampled range of H
  double integral_high_;   // H(n + 0.5): upper end
  double squeeze_;         // x within this distance left of its rank is accepted at once
  bool permute_;
  RandomPermutation permutation_;
};

// YCSB's "latest" distribution (SkewedLatestGenerator): the most recently inserted item is
// the hottest; item = newest - ZipfianYcsb over (newest + 1) items. Items are [0, n) where
// n grows by one with each on_insert().
class LatestChooser {
 public:
  // Throws std::invalid_argument if item_count is 0 or theta is outside (0, 1).
  explicit LatestChooser(uint64_t item_count, double theta = ZipfianYcsb::kDefaultTheta);

  uint64_t next(Rng& rng);
  // Item n (the next id) now exists and is the newest.
  void on_insert() { ++item_count_; }

  uint64_t item_count() const { return item_count_; }

 private:
  uint64_t item_count_;
  // Lags item_count_ until the next draw, so a run of inserts updates zeta once.
  ZipfianYcsb distance_from_newest_;
};

}  // namespace gphash::workload
