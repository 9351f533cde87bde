#include "circuits/circuits.hpp"

#include <cstring>
#include <vector>

namespace rml::circuits {

template <typename T>
void masked_mix(const T* delta, const std::uint8_t* mask, const T* base, T* out, std::int64_t n,
                std::int64_t s_tot, std::int64_t s, std::int64_t j, std::int64_t k) {
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
      T* dst = out + idx * k;
      std::memcpy(dst, base + ij * k, static_cast<std::size_t>(k) * sizeof(T));
      const T* dbase = delta + in * s_tot * k;
      // Two sources per pass halves the traffic on dst; the sum order is fixed (s ascending).
      std::size_t a = 0;
      for (; a + 1 < n_active; a += 2) {
        const T* x0 = dbase + active[a] * k;
        const T* x1 = dbase + active[a + 1] * k;
#pragma omp simd
        for (std::int64_t i = 0; i < k; ++i) dst[i] = (dst[i] + x0[i]) + x1[i];
      }
      if (a < n_active) {
        const T* x0 = dbase + active[a] * k;
#pragma omp simd
        for (std::int64_t i = 0; i < k; ++i) dst[i] += x0[i];
      }
    }
  }
}

template void masked_mix<float>(const float*, const std::uint8_t*, const float*, float*,
                                std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                std::int64_t);
template void masked_mix<double>(const double*, const std::uint8_t*, const double*, double*,
                                 std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                 std::int64_t);

}  // namespace rml::circuits
