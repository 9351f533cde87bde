#include "circuits/circuits.hpp"

#include "common/parallel.hpp"

#include <cmath>
#include <cstring>
#include <vector>

namespace rml::circuits {

namespace {

// y = (x - mean) / sqrt(var + eps) * w + b over each length-d row of x[0:k] (in place);
// two passes over the row (mean, then centred variance), accumulated in T.
template <typename T>
void layer_norm_rows(T* x, std::int64_t k, std::int64_t d, const T* w, const T* b, double eps) {
  const T inv_d = static_cast<T>(1.0 / static_cast<double>(d));
  for (std::int64_t r = 0; r < k; r += d) {
    T* row = x + r;
    T sum = 0;
#pragma omp simd reduction(+ : sum)
    for (std::int64_t i = 0; i < d; ++i) sum += row[i];
    const T mean = sum * inv_d;
    T sq = 0;
#pragma omp simd reduction(+ : sq)
    for (std::int64_t i = 0; i < d; ++i) {
      const T c = row[i] - mean;
      sq += c * c;
    }
    const T inv = static_cast<T>(1.0 / std::sqrt(static_cast<double>(sq * inv_d) + eps));
    if (b != nullptr) {
#pragma omp simd
      for (std::int64_t i = 0; i < d; ++i) row[i] = (row[i] - mean) * inv * w[i] + b[i];
    } else {
#pragma omp simd
      for (std::int64_t i = 0; i < d; ++i) row[i] = (row[i] - mean) * inv * w[i];
    }
  }
}

}  // namespace

template <typename T>
void masked_mix(const T* delta, const std::uint8_t* mask, const T* base, T* out, std::int64_t n,
                std::int64_t s_tot, std::int64_t s, std::int64_t j, std::int64_t k,
                bool source_first, const T* ln_w, const T* ln_b, std::int64_t d, double eps,
                const std::uint8_t* need, int n_threads) {
  const std::int64_t total = n * j;
  const int nt = n_threads > 0 ? rml::cap_threads(n_threads) : rml::max_threads();
  // blocks without active sources are LN(base[j]): normalise each base row once
  std::vector<T> base_ln;
  const T* base0 = base;
  if (ln_w != nullptr && n > 1) {
    base_ln.assign(base, base + j * k);
    for (std::int64_t ij = 0; ij < j; ++ij) {
      layer_norm_rows(base_ln.data() + ij * k, k, d, ln_w, ln_b, eps);
    }
    base0 = base_ln.data();
  }
  // small problems run serially: waking a thread team costs more than the work
#pragma omp parallel num_threads(nt) if (nt > 1 && total * k > (1 << 15))
  {
    std::vector<std::int64_t> active(static_cast<std::size_t>(s > 0 ? s : 1));
#pragma omp for schedule(dynamic, 4)
    for (std::int64_t idx = 0; idx < total; ++idx) {
      const std::int64_t in = idx / j;
      const std::int64_t ij = idx % j;
      T* dst = out + (source_first ? ij * n + in : idx) * k;
      if (need != nullptr && need[idx] == 0) {
        std::memset(dst, 0, static_cast<std::size_t>(k) * sizeof(T));
        continue;
      }
      const std::uint8_t* mcol = mask + in * s * j + ij;
      std::size_t n_active = 0;
      for (std::int64_t is = 0; is < s; ++is) {
        if (mcol[is * j] != 0) active[n_active++] = is;
      }
      if (n_active == 0) {
        std::memcpy(dst, base0 + ij * k, static_cast<std::size_t>(k) * sizeof(T));
        if (ln_w != nullptr && base0 == base) layer_norm_rows(dst, k, d, ln_w, ln_b, eps);
        continue;
      }
      const T* src = base + ij * k;
      // row of source `is` of run `in`
      const std::int64_t d_stride = source_first ? n * k : k;
      const T* dbase = delta + (source_first ? in : in * s_tot) * k;
      // The first pass reads base (no separate copy); then two sources per pass halve the
      // traffic on dst. The sum order is fixed: base, then the sources in ascending order.
      std::size_t a = 0;
      if (n_active == 1) {
        const T* x0 = dbase + active[0] * d_stride;
#pragma omp simd
        for (std::int64_t i = 0; i < k; ++i) dst[i] = src[i] + x0[i];
        a = 1;
      } else {
        const T* x0 = dbase + active[0] * d_stride;
        const T* x1 = dbase + active[1] * d_stride;
#pragma omp simd
        for (std::int64_t i = 0; i < k; ++i) dst[i] = (src[i] + x0[i]) + x1[i];
        a = 2;
      }
      for (; a + 1 < n_active; a += 2) {
        const T* x0 = dbase + active[a] * d_stride;
        const T* x1 = dbase + active[a + 1] * d_stride;
#pragma omp simd
        for (std::int64_t i = 0; i < k; ++i) dst[i] = (dst[i] + x0[i]) + x1[i];
      }
      if (a < n_active) {
        const T* x0 = dbase + active[a] * d_stride;
#pragma omp simd
        for (std::int64_t i = 0; i < k; ++i) dst[i] += x0[i];
      }
      if (ln_w != nullptr) layer_norm_rows(dst, k, d, ln_w, ln_b, eps);
    }
  }
}

template void masked_mix<float>(const float*, const std::uint8_t*, const float*, float*,
                                std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                std::int64_t, bool, const float*, const float*, std::int64_t,
                                double, const std::uint8_t*, int);
template void masked_mix<double>(const double*, const std::uint8_t*, const double*, double*,
                                 std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                 std::int64_t, bool, const double*, const double*, std::int64_t,
                                 double, const std::uint8_t*, int);

}  // namespace rml::circuits
