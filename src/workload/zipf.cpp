#include "workload/zipf.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <stdexcept>
#include <string>

namespace gphash::workload {
namespace {

// Below this many items zeta is summed term by term; above it the Euler-Maclaurin tail takes
// over from term kEulerMaclaurinStart on.
constexpr uint64_t kDirectZetaLimit = 4096;
constexpr uint64_t kEulerMaclaurinStart = 1024;

// (e^y - 1) / y and log(1 + y) / y, continuous at y = 0, where theta = 1 puts them.
double expm1_over_x(double y) {
  if (std::abs(y) < 1e-8) return 1.0 + y * (0.5 + y / 6.0);
  return std::expm1(y) / y;
}
double log1p_over_x(double y) {
  if (std::abs(y) < 1e-8) return 1.0 - y * (0.5 - y / 3.0);
  return std::log1p(y) / y;
}

void require_valid_theta(double theta) {
  if (!(theta > 0.0) || !std::isfinite(theta)) {
    throw std::invalid_argument("Zipf theta must be a positive finite number, got " +
                                std::to_string(theta) + "; YCSB uses 0.99");
  }
}

void require_gray_theta(double theta) {
  if (!(theta > 0.0 && theta < 1.0)) {
    throw std::invalid_argument(
        "the YCSB Zipfian method (Gray et al.) needs 0 < theta < 1, got " +
        std::to_string(theta) + "; use the exact Zipf sampler (ZipfExact, 'zipfian-exact') for " +
        "theta >= 1");
  }
}

void require_items(uint64_t item_count, const char* chooser) {
  if (item_count == 0) {
    throw std::invalid_argument(std::string(chooser) +
                                " needs at least one item to choose from; pass item_count >= 1");
  }
}

// Sum of i^-theta for i in [first, last], smallest terms first so they are not lost.
double sum_of_terms(uint64_t first, uint64_t last, double theta) {
  double sum = 0.0;
  for (uint64_t i = last + 1; i-- > first;) sum += std::pow(static_cast<double>(i), -theta);
  return sum;
}

// Euler-Maclaurin for sum_{i=m}^{n} i^-theta, up to the f^(5) term. With m = 1024 the first
// omitted term is below 1e-20 of the sum for any theta > 0.
double euler_maclaurin_tail(uint64_t m_items, uint64_t n_items, double theta) {
  const double m = static_cast<double>(m_items);
  const double n = static_cast<double>(n_items);
  const double log_ratio = std::log(n / m);
  const double integral =
      std::pow(m, 1.0 - theta) * log_ratio * expm1_over_x((1.0 - theta) * log_ratio);
  // Derivatives of f(x) = x^-theta: f'(x) = -theta x^(-theta-1), and so on.
  const auto derivative = [theta](double x, int order) {
    double coefficient = 1.0;
    for (int k = 0; k < order; ++k) coefficient *= -(theta + k);
    return coefficient * std::pow(x, -theta - order);
  };
  return integral + 0.5 * (std::pow(m, -theta) + std::pow(n, -theta)) +
         (derivative(n, 1) - derivative(m, 1)) / 12.0 -
         (derivative(n, 3) - derivative(m, 3)) / 720.0 +
         (derivative(n, 5) - derivative(m, 5)) / 30240.0;
}

}  // namespace

double zeta(uint64_t n, double theta) {
  require_valid_theta(theta);
  if (n == 0) return 0.0;
  if (n <= kDirectZetaLimit) return sum_of_terms(1, n, theta);
  return sum_of_terms(1, kEulerMaclaurinStart - 1, theta) +
         euler_maclaurin_tail(kEulerMaclaurinStart, n, theta);
}

UniformChooser::UniformChooser(uint64_t item_count) : item_count_(item_count) {
  require_items(item_count, "UniformChooser");
}

// ---------------------------------------------------------------------------------------
// ZipfianYcsb

ZipfianYcsb::ZipfianYcsb(uint64_t item_count, double theta)
    : ZipfianYcsb(item_count, theta, (require_gray_theta(theta), zeta(item_count, theta))) {}

ZipfianYcsb::ZipfianYcsb(uint64_t item_count, double theta, double zeta_of_item_count)
    : item_count_(item_count),
      theta_(theta),
      alpha_(1.0 / (1.0 - theta)),
      zeta_2_(1.0 + std::pow(0.5, theta)),
      zeta_n_(zeta_of_item_count),
      eta_(0.0) {
  require_items(item_count, "ZipfianYcsb");
  require_gray_theta(theta);
  if (!(zeta_of_item_count >= 1.0) || !std::isfinite(zeta_of_item_count)) {
    throw std::invalid_argument("ZipfianYcsb: zeta(n) must be finite and >= 1, got " +
                                std::to_string(zeta_of_item_count) +
                                "; pass zeta(item_count, theta)");
  }
  update_eta();
}

void ZipfianYcsb::update_eta() {
  eta_ = (1.0 - std::pow(2.0 / static_cast<double>(item_count_), 1.0 - theta_)) /
         (1.0 - zeta_2_ / zeta_n_);
}

void ZipfianYcsb::set_item_count(uint64_t item_count) {
  require_items(item_count, "ZipfianYcsb");
  if (item_count == item_count_) return;
  if (item_count > item_count_ && item_count - item_count_ <= kDirectZetaLimit) {
    zeta_n_ += sum_of_terms(item_count_ + 1, item_count, theta_);
  } else {
    zeta_n_ = zeta(item_count, theta_);
  }
  item_count_ = item_count;
  update_eta();
}

uint64_t ZipfianYcsb::next(Rng& rng) const {
  const double u = rng.next_double();
  const double uz = u * zeta_n_;
  if (uz < 1.0) return 0;
  if (uz < zeta_2_) return 1;
  const double n = static_cast<double>(item_count_);
  const double scaled = n * std::pow(eta_ * u - eta_ + 1.0, alpha_);
  // Rounding can push u * zeta(n) past zeta_2 at n = 2, where eta is 0/0, and scaled can
  // round up to n; both would index past the last item (NaN fails the comparison too).
  if (!(scaled < n)) return item_count_ - 1;
  return static_cast<uint64_t>(scaled);
}

// ---------------------------------------------------------------------------------------
// ScrambledZipfian

uint64_t ycsb_fnvhash64(uint64_t value) {
  constexpr uint64_t kOffsetBasis = 0xCBF29CE484222325ULL;
  constexpr uint64_t kPrime = 1099511628211ULL;
  uint64_t hash = kOffsetBasis;
  for (int i = 0; i < 8; ++i) {
    hash ^= value & 0xFF;
    hash *= kPrime;
    value >>= 8;
  }
  // Java's Math.abs on the signed value; 2^63 (Long.MIN_VALUE) stays 2^63 when read unsigned.
  return (hash >> 63) != 0 && hash != (1ULL << 63) ? 0 - hash : hash;
}

namespace {
double ycsb_scrambled_zeta(double theta) {
  require_gray_theta(theta);
  // YCSB compares the constant exactly, so only 0.99 itself gets the precomputed value.
  if (theta == ZipfianYcsb::kDefaultTheta) return ScrambledZipfian::kYcsbZeta;
  return zeta(ScrambledZipfian::kYcsbItemCount + 1, theta);
}
}  // namespace

ScrambledZipfian::ScrambledZipfian(uint64_t item_count, double theta)
    : ranks_(kYcsbItemCount + 1, theta, ycsb_scrambled_zeta(theta)), item_count_(item_count) {
  require_items(item_count, "ScrambledZipfian");
}

// ---------------------------------------------------------------------------------------
// RandomPermutation

RandomPermutation::RandomPermutation(uint64_t n, uint64_t key) : n_(n), round_keys_{} {
  require_items(n, "RandomPermutation");
  // A balanced Feistel network needs an even number of bits; at least 2 so both halves exist.
  const unsigned bits = n <= 1 ? 2U : static_cast<unsigned>(std::bit_width(n - 1));
  half_bits_ = std::max(1U, (bits + 1) / 2);
  half_mask_ = (1ULL << half_bits_) - 1;
  SplitMix64 seeder(key ^ 0x6A09E667F3BCC908ULL);
  for (uint64_t& round_key : round_keys_) round_key = seeder.next();
}

uint64_t RandomPermutation::feistel(uint64_t x) const {
  uint64_t left = x >> half_bits_;
  uint64_t right = x & half_mask_;
  for (const uint64_t round_key : round_keys_) {
    const uint64_t mixed = left ^ (splitmix64_mix(right ^ round_key) & half_mask_);
    left = right;
    right = mixed;
  }
  return (left << half_bits_) | right;
}

uint64_t RandomPermutation::operator()(uint64_t x) const {
  // Cycle walking: following the network's cycle from x (< n) until it is back under n
  // restricts a permutation of the power-of-4 domain to a permutation of [0, n).
  uint64_t y = feistel(x);
  while (y >= n_) y = feistel(y);
  return y;
}

// ---------------------------------------------------------------------------------------
// ZipfExact
//
// Rejection-inversion: the hat is h(x) = x^-theta on [0.5, n + 0.5], which dominates the
// probability of rank k on [k - 0.5, k + 0.5] because h is convex. Draw u uniformly from
// (H(1.5) - 1, H(n + 0.5)] and invert the hat's integral H; the rank k nearest x = H^-1(u)
// is accepted iff u >= H(k + 0.5) - h(k). The accepted u for rank k then form an interval
// of length exactly h(k) = k^-theta, so accepted ranks are exactly Zipf.

ZipfExact::ZipfExact(uint64_t item_count, double theta, bool permute, uint64_t permutation_key)
    : item_count_(item_count),
      theta_(theta),
      one_minus_theta_(1.0 - theta),
      integral_low_(0.0),
      integral_high_(0.0),
      squeeze_(0.0),
      permute_(permute),
      permutation_((require_items(item_count, "ZipfExact"), item_count), permutation_key) {
  require_valid_theta(theta);
  if (item_count > (1ULL << 63)) {
    throw std::invalid_argument("ZipfExact supports at most 2^63 items, got " +
                                std::to_string(item_count) + "; choose a smaller item_count");
  }
  integral_low_ = integral_of_hat(1.5) - 1.0;
  integral_high_ = integral_of_hat(static_cast<double>(item_count) + 0.5);
  // Hörmann and Derflinger's squeeze: for every rank k >= 2, any x in [k - squeeze, k + 0.5)
  // lies in the acceptance region, so most draws skip evaluating H.
  squeeze_ = 2.0 - inverse_integral_of_hat(integral_of_hat(2.5) - hat(2.0));
}

double ZipfExact::hat(double x) const { return std::exp(-theta_ * std::log(x)); }

double ZipfExact::integral_of_hat(double x) const {
  const double log_x = std::log(x);
  return log_x * expm1_over_x(one_minus_theta_ * log_x);
}

double ZipfExact::inverse_integral_of_hat(double y) const {
  // 1 + (1 - theta) y can dip below 0 by rounding at the low end when theta > 1; -1 maps to
  // x = 0, which the caller clamps to rank 1.
  const double t = std::max(y * one_minus_theta_, -1.0);
  return std::exp(log1p_over_x(t) * y);
}

uint64_t ZipfExact::next_rank(Rng& rng) const {
  const double last_rank = static_cast<double>(item_count_);
  for (;;) {
    const double u = integral_high_ + rng.next_double() * (integral_low_ - integral_high_);
    const double x = inverse_integral_of_hat(u);
    const double k = std::clamp(std::floor(x + 0.5), 1.0, last_rank);
    if (k - x <= squeeze_ || u >= integral_of_hat(k + 0.5) - hat(k)) {
      // double(n) may round above n for n > 2^53.
      return std::min(static_cast<uint64_t>(k), item_count_) - 1;
    }
  }
}

// ---------------------------------------------------------------------------------------
// LatestChooser

LatestChooser::LatestChooser(uint64_t item_count, double theta)
    : item_count_(item_count),
      distance_from_newest_((require_items(item_count, "LatestChooser"), item_count), theta) {}

uint64_t LatestChooser::next(Rng& rng) {
  if (distance_from_newest_.item_count() != item_count_) {
    distance_from_newest_.set_item_count(item_count_);
  }
  return (item_count_ - 1) - distance_from_newest_.next(rng);
}

}  // namespace gphash::workload
