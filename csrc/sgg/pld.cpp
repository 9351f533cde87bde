#include <algorithm>
#include <cmath>
#include <vector>

#include "sgg/sgg.hpp"

namespace rml::sgg {

namespace {

// exp(sign * i * h) as the exact exp at the start of i's block of 64 times the exact power
// exp(sign * (i mod 64) * h) (two roundings per value instead of one libm call per value).
struct Ramp {
  static constexpr std::int64_t kBlock = 64;
  double pw[kBlock];
  double h, sign;
  Ramp(double h_, double sign_) : h(h_), sign(sign_) {
    for (std::int64_t j = 0; j < kBlock; ++j) pw[j] = std::exp(sign * static_cast<double>(j) * h);
  }
  double base(std::int64_t i) const {
    return std::exp(sign * static_cast<double>(i - i % kBlock) * h);
  }
  double at(std::int64_t i) const { return base(i) * pw[i % kBlock]; }
};

// Suffix sums s1_j = sum_{i>=j} p_i and s2_j = sum_{i>=j} p_i e^{l_0 - l_i} (trailing 0).
void suffix_sums(const double* pmf, std::int64_t n, double h, std::vector<double>& s1,
                 std::vector<double>& s2) {
  const auto un = static_cast<std::size_t>(n);
  s1.assign(un + 1, 0.0);
  s2.assign(un + 1, 0.0);
  const Ramp down(h, -1.0);
  double blk = 0.0;
  std::int64_t blk_start = -1;
  for (std::int64_t i = n - 1; i >= 0; --i) {
    const auto u = static_cast<std::size_t>(i);
    const std::int64_t start = i - i % Ramp::kBlock;
    if (start != blk_start) {
      blk_start = start;
      blk = down.base(i);
    }
    s1[u] = s1[u + 1] + pmf[i];
    s2[u] = s2[u + 1] + pmf[i] * (blk * down.pw[i % Ramp::kBlock]);
  }
}

}  // namespace

void pld_delta_for_eps(double* out, const double* eps, std::int64_t nq, const double* pmf,
                       std::int64_t n, std::int64_t lower, double h, double inf_mass) {
  std::vector<double> s1, s2;
  suffix_sums(pmf, n, h, s1, s2);
  const double l0 = static_cast<double>(lower) * h;
  for (std::int64_t q = 0; q < nq; ++q) {
    const double e = eps[q];
    // first index j with l_j > e
    std::int64_t lo = 0, hi = n;
    while (lo < hi) {
      const std::int64_t mid = lo + (hi - lo) / 2;
      if (static_cast<double>(lower + mid) * h > e) hi = mid; else lo = mid + 1;
    }
    const auto j = static_cast<std::size_t>(lo);
    double val = 0.0;
    if (lo < n) val = s1[j] - std::exp(std::min(e - l0, 700.0)) * s2[j];
    out[q] = std::max(val, 0.0) + inf_mass;
  }
}

void pld_epsilon_for_delta(double* out, const double* delta, std::int64_t nq, const double* pmf,
                           std::int64_t n, std::int64_t lower, double h, double inf_mass) {
  std::vector<double> s1, s2;
  suffix_sums(pmf, n, h, s1, s2);
  const double l0 = static_cast<double>(lower) * h;
  const Ramp up(h, 1.0);  // exp(l_k - l0)
  // delta at l_k (atoms i >= k + 1), evaluated where the binary search probes it.
  auto d_grid = [&](std::int64_t k) {
    const auto u = static_cast<std::size_t>(k);
    const double v = k == n - 1 ? 0.0 : s1[u + 1] - up.at(k) * s2[u + 1];
    return std::max(v, 0.0) + inf_mass;
  };
  for (std::int64_t q = 0; q < nq; ++q) {
    const double target = delta[q];
    if (inf_mass > target) {
      out[q] = INFINITY;
      continue;
    }
    std::int64_t lo = 0, hi = n;  // first k with d_grid[k] <= target
    while (lo < hi) {
      const std::int64_t mid = lo + (hi - lo) / 2;
      if (d_grid(mid) > target) lo = mid + 1; else hi = mid;
    }
    const std::int64_t k = std::min(lo, n - 1);
    const auto u = static_cast<std::size_t>(k);
    const double rest = s1[u] + inf_mass - target;
    double eps;
    if (s2[u] <= 0.0 || rest <= 0.0) {
      eps = k > 0 ? static_cast<double>(lower + k - 1) * h : 0.0;
    } else {
      eps = std::min(l0 + std::log(rest / s2[u]), static_cast<double>(lower + k) * h);
    }
    out[q] = std::max(eps, 0.0);
  }
}

}  // namespace rml::sgg
