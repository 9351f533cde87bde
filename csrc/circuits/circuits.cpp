#include "circuits/circuits.hpp"

#include <cmath>
#include <cstring>
#include <vector>

namespace rml::circuits {

namespace {

// y = (x - mean) / sqrt(var + eps) * w + b over each length-d row of x[0:k] (in place).
template <typename T>
void layer_norm_rows(T* x, std::int64_t k, std::int64_t d, const T* w, const T* b, double eps) {
  for (std::int64_t r = 0; r < k; r += d) {
    T* row = x + r;
    double mean = 0.0;
    for (std::int64_t i = 0; i < d; ++i) mean += static_cast<double>(row[i]);
    mean /= static_cast<double>(d);
    double var = 0.0;
    for (std::int64_t i = 0; i < d; ++i) {
      const double c = static_cast<double>(row[i]) - mean;
      var += c * c;
    }
    var /= static_cast<double>(d);
    const T inv = static_cast<T>(1.0 / std::sqrt(var + eps));
    const T m = static_cast<T>(mean);
    if (b != nullptr) {
#pragma omp simd
      for (std::int64_t i = 0; i < d; ++i) row[i] = (row[i] - m) * inv * w[i] + b[i];
    } else {
#pragma omp simd
      for (std::int64_t i = 0; i < d; ++i) row[i] = (row[i] - m) * inv * w[i];
    }
  }
}

}  // namespace

template <typename T>
void masked_mix(const T* delta, const std::uint8_t* mask, const T* base, T* out, std::int64_t n,
                std::int64_t s_tot, std::int64_t s, std::int64_t j, std::int64_t k,
                bool source_first, const T* ln_w, const T* ln_b, std::int64_t d, double eps) {
  const std::int64_t total = n * j;
  // small problems run serially: waking a thread team costs more than the work
#pragma omp parallel if (total * k > (1 << 15))
  {
    std::vector<std::int64_t> active(static_cast<std::size_t>(s > 0 ? s : 1));
#pragma omp for schedule(dynamic, 4)
    for (std::int64_t idx = 0; idx < total; ++idx) {
      const std::int64_t in = idx / j;
      const std::int64_t ij = idx % j;
      const std::uint8_t* mcol = mask + in * s * j + ij;
      std::size_t n_active = 0;
      for (std::int64_t is = 0; is < s; ++is) {
        if (mcol[is * j] != 0) active[n_active++] = is;
      }
      T* dst = out + (source_first ? ij * n + in : idx) * k;
      std::memcpy(dst, base + ij * k, static_cast<std::size_t>(k) * sizeof(T));
      // row of source `is` of run `in`
      const std::int64_t d_stride = source_first ? n * k : k;
      const T* dbase = delta + (source_first ? in : in * s_tot) * k;
      // Two sources per pass halves the traffic on dst; the sum order is fixed (s ascending).
      std::size_t a = 0;
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
                                double);
template void masked_mix<double>(const double*, const std::uint8_t*, const double*, double*,
                                 std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                 std::int64_t, bool, const double*, const double*, std::int64_t,
                                 double);

}  // namespace rml::circuits
