#include <algorithm>
#include <cmath>
#include <vector>

#include "sgg/sgg.hpp"

namespace rml::sgg {

void pld_delta_for_eps(double* out, const double* eps, std::int64_t nq, const double* pmf,
                       std::int64_t n, std::int64_t lower, double h, double inf_mass) {
  const auto un = static_cast<std::size_t>(n);
  std::vector<double> s1(un + 1, 0.0), s2(un + 1, 0.0);
  const double l0 = static_cast<double>(lower) * h;
  for (std::int64_t i = n - 1; i >= 0; --i) {
    const auto u = static_cast<std::size_t>(i);
    const double li = static_cast<double>(lower + i) * h;
    s1[u] = s1[u + 1] + pmf[i];
    s2[u] = s2[u + 1] + pmf[i] * std::exp(l0 - li);
  }
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
  const auto un = static_cast<std::size_t>(n);
  std::vector<double> s1(un + 1, 0.0), s2(un + 1, 0.0), d_grid(un, 0.0);
  const double l0 = static_cast<double>(lower) * h;
  for (std::int64_t i = n - 1; i >= 0; --i) {
    const auto u = static_cast<std::size_t>(i);
    const double li = static_cast<double>(lower + i) * h;
    s1[u] = s1[u + 1] + pmf[i];
    s2[u] = s2[u + 1] + pmf[i] * std::exp(l0 - li);
  }
  for (std::int64_t k = 0; k < n; ++k) {  // delta at l_k: atoms i >= k + 1
    const auto u = static_cast<std::size_t>(k);
    const double lk = static_cast<double>(lower + k) * h;
    const double v = k == n - 1 ? 0.0 : s1[u + 1] - std::exp(lk - l0) * s2[u + 1];
    d_grid[u] = std::max(v, 0.0) + inf_mass;
  }
  for (std::int64_t q = 0; q < nq; ++q) {
    const double target = delta[q];
    if (inf_mass > target) {
      out[q] = INFINITY;
      continue;
    }
    std::int64_t lo = 0, hi = n;  // first k with d_grid[k] <= target
    while (lo < hi) {
      const std::int64_t mid = lo + (hi - lo) / 2;
      if (d_grid[static_cast<std::size_t>(mid)] > target) lo = mid + 1; else hi = mid;
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
