#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "sgg/sgg.hpp"

namespace rml::sgg {

namespace {

// Two suffix sums, each relative to its own bucket so that nothing over- or underflows
// however wide the support (an n-fold composition can span thousands of nats), and each a
// sum of non-negative terms so that the read-outs do not cancel:
//   t_j = sum_{i>=j} p_i e^{l_j - l_i}        = p_j + e^{-h} t_{j+1},
//   u_j = sum_{i>j} p_i (1 - e^{l_j - l_i})   = (1 - e^{-h}) s_{j+1} + e^{-h} u_{j+1},
// with s_j = sum_{i>=j} p_i (u_j is delta(l_j) without the mass at +inf). For
// eps = l_j - y, 0 <= y <= h: delta(eps) = u_j + (1 - e^{-y}) t_j + p_inf.
void suffix_sums(const double* pmf, std::int64_t n, double h, std::vector<double>& t,
                 std::vector<double>& u) {
  const auto un = static_cast<std::size_t>(n);
  t.assign(un + 1, 0.0);
  u.assign(un + 1, 0.0);
  const double decay = std::exp(-h);
  const double gap = -std::expm1(-h);
  double s = 0.0;  // s_{j+1}
  for (std::int64_t i = n - 1; i >= 0; --i) {
    const auto k = static_cast<std::size_t>(i);
    t[k] = pmf[i] + decay * t[k + 1];
    u[k] = gap * s + decay * u[k + 1];
    s += pmf[i];
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
  std::vector<double> t, u;
  suffix_sums(pmf, n, h, t, u);
  for (std::int64_t q = 0; q < nq; ++q) {
    const double e = eps[q];
    const std::int64_t j = first_above(e, n, lower, h);
    double val = 0.0;
    if (j < n) {
      const auto k = static_cast<std::size_t>(j);
      const double y = static_cast<double>(lower + j) * h - e;  // > 0
      val = u[k] - std::expm1(-y) * t[k];
    }
    out[q] = std::max(val, 0.0) + inf_mass;
  }
}

void pld_epsilon_for_delta(double* out, const double* delta, std::int64_t nq, const double* pmf,
                           std::int64_t n, std::int64_t lower, double h, double inf_mass) {
  std::vector<double> t, u;
  suffix_sums(pmf, n, h, t, u);
  for (std::int64_t q = 0; q < nq; ++q) {
    const double target = delta[q];
    if (inf_mass > target) {
      out[q] = INFINITY;
      continue;
    }
    std::int64_t lo = 0, hi = n;  // first k with delta(l_k) = u_k + p_inf <= target
    while (lo < hi) {
      const std::int64_t mid = lo + (hi - lo) / 2;
      if (u[static_cast<std::size_t>(mid)] + inf_mass > target) lo = mid + 1; else hi = mid;
    }
    const std::int64_t k = std::min(lo, n - 1);
    const auto uk = static_cast<std::size_t>(k);
    const double lk = static_cast<double>(lower + k) * h;
    // In [l_{k-1}, l_k]: u_k + (1 - e^{-y}) t_k + p_inf = target, eps = l_k - y.
    const double r = t[uk] > 0.0 ? (target - inf_mass - u[uk]) / t[uk] : 1.0;
    double e;
    if (r >= 1.0) {
      e = k > 0 ? lk - h : -INFINITY;
    } else {
      e = lk + std::log1p(-std::max(r, 0.0));
      if (k > 0) e = std::max(e, lk - h);
    }
    // Round up by a few ulps: near an atom delta falls steeply in eps, and the rounding of
    // eps itself must not leave delta(eps) above the target.
    e = std::min(e + 4.0 * std::numeric_limits<double>::epsilon() * std::max(std::fabs(lk), 1.0), lk);
    out[q] = std::max(e, 0.0);
  }
}

}  // namespace rml::sgg
