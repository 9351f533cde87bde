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

}  // namespace rml::sgg
