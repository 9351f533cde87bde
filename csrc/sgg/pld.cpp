#include <algorithm>
#include <cmath>
#include <vector>

#include "sgg/sgg.hpp"

namespace rml::sgg {

namespace {

// Suffix sums, each relative to its own bucket so that nothing over- or underflows however
// wide the support (an n-fold composition can span thousands of nats):
//   s1_j = sum_{i>=j} p_i,   t_j = sum_{i>=j} p_i e^{l_j - l_i} = p_j + e^{-h} t_{j+1}
// (both with a trailing 0). Every term of t is at most p_i, so t_j <= s1_j <= 1. The
// factor e^{-h} is rounded down, which can only lower t and so raise every delta read
// out below (pessimistic); its relative error over the ~1/h buckets that matter is ~1e-12.
void suffix_sums(const double* pmf, std::int64_t n, double h, std::vector<double>& s1,
                 std::vector<double>& t) {
  const auto un = static_cast<std::size_t>(n);
  s1.assign(un + 1, 0.0);
  t.assign(un + 1, 0.0);
  const double decay = std::nextafter(std::exp(-h), 0.0);
  for (std::int64_t i = n - 1; i >= 0; --i) {
    const auto u = static_cast<std::size_t>(i);
    s1[u] = s1[u + 1] + pmf[i];
    t[u] = pmf[i] + decay * t[u + 1];
  }
}

// First index j with l_j = (lower + j) h > e (n if none).
std::int64_t first_above(double e, std::int64_t n, std::int64_t lower, double h) {
  std::int64_t lo = 0, hi = n;
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    if (static_cast<double>(lower + mid) * h > e) hi = mid; else lo = mid + 1;
  }
  return lo;
}

}  // namespace

void pld_delta_for_eps(double* out, const double* eps, std::int64_t nq, const double* pmf,
                       std::int64_t n, std::int64_t lower, double h, double inf_mass) {
  std::vector<double> s1, t;
  suffix_sums(pmf, n, h, s1, t);
  for (std::int64_t q = 0; q < nq; ++q) {
    const double e = eps[q];
    const std::int64_t j = first_above(e, n, lower, h);
    double val = 0.0;
    if (j < n) {
      // sum_{i>=j} p_i (1 - e^{e - l_i}) = s1_j - e^{e - l_j} t_j with e - l_j < 0.
      const auto u = static_cast<std::size_t>(j);
      val = s1[u] - std::exp(e - static_cast<double>(lower + j) * h) * t[u];
    }
    out[q] = std::max(val, 0.0) + inf_mass;
  }
}

void pld_epsilon_for_delta(double* out, const double* delta, std::int64_t nq, const double* pmf,
                           std::int64_t n, std::int64_t lower, double h, double inf_mass) {
  std::vector<double> s1, t;
  suffix_sums(pmf, n, h, s1, t);
  const double decay_up = std::exp(-h);
  // delta at l_k (atoms i >= k + 1), evaluated where the binary search probes it.
  auto d_grid = [&](std::int64_t k) {
    const auto u = static_cast<std::size_t>(k);
    const double v = k == n - 1 ? 0.0 : s1[u + 1] - decay_up * t[u + 1];
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
    const double lk = static_cast<double>(lower + k) * h;
    // In (l_{k-1}, l_k]: delta(eps) = s1_k + p_inf - e^{eps - l_k} t_k.
    const double rest = s1[u] + inf_mass - target;
    double eps;
    if (t[u] <= 0.0 || rest <= 0.0) {
      eps = k > 0 ? static_cast<double>(lower + k - 1) * h : 0.0;
    } else {
      eps = std::min(lk + std::log(rest / t[u]), lk);
    }
    out[q] = std::max(eps, 0.0);
  }
}

}  // namespace rml::sgg
