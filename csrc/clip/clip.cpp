#include "common/parallel.hpp"
#include "clip/clip.hpp"

#include <algorithm>
#include <climits>
#include <vector>

#include "common/philox.hpp"
#include "common/simd.hpp"

namespace rml::clip {

namespace {

// out[e] += sd * z(offset + e) for e < n: the Philox normal stream, vectorised (AVX2 /
// AVX-512 clones); the OpenMP loop over chunks stays outside the cloned function.
RML_SIMD_CLONES
void add_noise_chunk(float* __restrict out, std::int64_t n, float sd, std::uint64_t seed,
                     std::uint64_t offset) {
  for (std::int64_t e = 0; e < n; ++e) {
    out[e] += sd * philox_normal(seed, offset + static_cast<std::uint64_t>(e));
  }
}

RML_SIMD_CLONES
void add_noise_chunk(double* __restrict out, std::int64_t n, double sd, std::uint64_t seed,
                     std::uint64_t offset) {
  for (std::int64_t e = 0; e < n; ++e) {
    out[e] += sd * static_cast<double>(philox_normal(seed, offset + static_cast<std::uint64_t>(e)));
  }
}

constexpr std::int64_t kNoiseChunk = 1 << 14;

template <typename T>
inline double dot(const T* x, const T* y, std::int64_t n) {
  double acc = 0.0;
#pragma omp simd reduction(+ : acc)
  for (std::int64_t k = 0; k < n; ++k) acc += static_cast<double>(x[k]) * static_cast<double>(y[k]);
  return acc;
}

// Rows per tile: a tile of A_i rows and one of D_i rows stay in L1/L2 while every pair
// (s, s') of the two tiles is visited.
constexpr std::int64_t kTile = 32;

template <typename T>
double ghost_one(const T* a, const T* dd, std::int64_t S, std::int64_t d, std::int64_t p) {
  if (S == 1) return dot(a, a, d) * dot(dd, dd, p);
  double acc = 0.0;
  for (std::int64_t s0 = 0; s0 < S; s0 += kTile) {
    const std::int64_t s1 = std::min(S, s0 + kTile);
    for (std::int64_t t0 = 0; t0 <= s0; t0 += kTile) {
      const std::int64_t t1 = std::min(S, t0 + kTile);
      for (std::int64_t s = s0; s < s1; ++s) {
        const std::int64_t tend = std::min(t1, s + 1);
        for (std::int64_t t = t0; t < tend; ++t) {
          const double ga = dot(a + s * d, a + t * d, d);
          const double gd = dot(dd + s * p, dd + t * p, p);
          acc += (s == t ? 1.0 : 2.0) * ga * gd;
        }
      }
    }
  }
  return acc;
}

template <typename T>
double cross_one(const T* a, const T* dd, const T* a2, const T* d2, std::int64_t S,
                 std::int64_t S2, std::int64_t d, std::int64_t p) {
  double acc = 0.0;
  for (std::int64_t s0 = 0; s0 < S; s0 += kTile) {
    const std::int64_t s1 = std::min(S, s0 + kTile);
    for (std::int64_t t0 = 0; t0 < S2; t0 += kTile) {
      const std::int64_t t1 = std::min(S2, t0 + kTile);
      for (std::int64_t s = s0; s < s1; ++s) {
        for (std::int64_t t = t0; t < t1; ++t) {
          acc += dot(a + s * d, a2 + t * d, d) * dot(dd + s * p, d2 + t * p, p);
        }
      }
    }
  }
  return acc;
}

// Grams by the BLAS, one sample at a time (the BLAS threads inside): column-major
// C (S x S2) = M^T M2 with M the row-major (S x d) block read as column-major (d x S).
template <typename T>
void ghost_blas(const T* A, const T* D, const T* A2, const T* D2, std::int64_t B, std::int64_t S,
                std::int64_t S2, std::int64_t d, std::int64_t p, double* out, GemmFn<T> gemm) {
  std::vector<T> ga(static_cast<std::size_t>(S * S2)), gd(static_cast<std::size_t>(S * S2));
  const int m = static_cast<int>(S), n = static_cast<int>(S2);
  const int kd = static_cast<int>(d), kp = static_cast<int>(p);
  const T one = 1, zero = 0;
  const std::int64_t nn = S * S2;
  for (std::int64_t i = 0; i < B; ++i) {
    gemm("T", "N", &m, &n, &kd, &one, A + i * S * d, &kd, A2 + i * S2 * d, &kd, &zero, ga.data(),
         &m);
    gemm("T", "N", &m, &n, &kp, &one, D + i * S * p, &kp, D2 + i * S2 * p, &kp, &zero, gd.data(),
         &m);
    out[i] = dot(ga.data(), gd.data(), nn);
  }
}

template <typename T>
bool use_blas(GemmFn<T> gemm, std::int64_t S, std::int64_t S2, std::int64_t d, std::int64_t p) {
  return gemm != nullptr && S >= kBlasMinRows && S2 >= kBlasMinRows && S <= INT_MAX &&
         S2 <= INT_MAX && d <= INT_MAX && p <= INT_MAX;
}

}  // namespace

template <typename T>
void ghost_norm_sq(const T* A, const T* D, std::int64_t B, std::int64_t S, std::int64_t d,
                   std::int64_t p, double* out, GemmFn<T> gemm) {
  if (use_blas(gemm, S, S, d, p)) {
    ghost_blas(A, D, A, D, B, S, S, d, p, out, gemm);
    return;
  }
#pragma omp parallel for num_threads(rml::max_threads()) schedule(dynamic, 1)
  for (std::int64_t i = 0; i < B; ++i) {
    out[i] = ghost_one(A + i * S * d, D + i * S * p, S, d, p);
  }
}

template <typename T>
void ghost_cross(const T* A, const T* D, const T* A2, const T* D2, std::int64_t B, std::int64_t S,
                 std::int64_t S2, std::int64_t d, std::int64_t p, double* out, GemmFn<T> gemm) {
  if (use_blas(gemm, S, S2, d, p)) {
    ghost_blas(A, D, A2, D2, B, S, S2, d, p, out, gemm);
    return;
  }
#pragma omp parallel for num_threads(rml::max_threads()) schedule(dynamic, 1)
  for (std::int64_t i = 0; i < B; ++i) {
    out[i] = cross_one(A + i * S * d, D + i * S * p, A2 + i * S2 * d, D2 + i * S2 * p, S, S2, d,
                       p);
  }
}

template <typename T>
void scaled_outer_accumulate(const T* A, const T* D, const T* w, std::int64_t N, std::int64_t d,
                             std::int64_t p, std::int64_t S, T* out, double noise_std,
                             std::uint64_t seed, std::uint64_t offset, GemmFn<T> gemm) {
  const bool fits_int = N <= INT_MAX && d <= INT_MAX && p <= INT_MAX;
  if (gemm != nullptr && fits_int && N > 0) {
    // Scale the narrower operand's rows by w[r / S] (the "prologue"), then one GEMM.
    const bool scale_a = d < p;
    const std::int64_t cols = scale_a ? d : p;
    const T* src = scale_a ? A : D;
    std::vector<T> scaled(static_cast<std::size_t>(N * cols));
#pragma omp parallel for num_threads(rml::max_threads()) schedule(static)
    for (std::int64_t r = 0; r < N; ++r) {
      const T wr = w[r / S];
      for (std::int64_t k = 0; k < cols; ++k) scaled[static_cast<std::size_t>(r * cols + k)] = wr * src[r * cols + k];
    }
    const T* Ause = scale_a ? scaled.data() : A;
    const T* Duse = scale_a ? D : scaled.data();
    // Row-major out (p x d) is column-major out^T (d x p) = A_cm (d x N) * (D_cm)^T (N x p).
    const int m = static_cast<int>(d), n = static_cast<int>(p), k = static_cast<int>(N);
    const T one = 1, zero = 0;
    gemm("N", "T", &m, &n, &k, &one, Ause, &m, Duse, &n, &zero, out, &m);
  } else {
#pragma omp parallel for num_threads(rml::max_threads()) schedule(static)
    for (std::int64_t j = 0; j < p; ++j) {
      T* row = out + j * d;
      std::fill(row, row + d, T(0));
      for (std::int64_t r = 0; r < N; ++r) {
        const T c = w[r / S] * D[r * p + j];
        if (c == T(0)) continue;
        const T* a = A + r * d;
#pragma omp simd
        for (std::int64_t k = 0; k < d; ++k) row[k] += c * a[k];
      }
    }
  }
  if (noise_std > 0.0) {
    const std::int64_t total = p * d;
    const T sd = static_cast<T>(noise_std);
    const std::int64_t chunks = (total + kNoiseChunk - 1) / kNoiseChunk;
#pragma omp parallel for num_threads(rml::max_threads()) schedule(static) if (chunks > 1)
    for (std::int64_t c = 0; c < chunks; ++c) {
      const std::int64_t e0 = c * kNoiseChunk;
      add_noise_chunk(out + e0, std::min(kNoiseChunk, total - e0), sd, seed,
                      offset + static_cast<std::uint64_t>(e0));
    }
  }
}

#define RML_CLIP_INSTANTIATE(T)                                                                    \
  template void ghost_norm_sq<T>(const T*, const T*, std::int64_t, std::int64_t, std::int64_t,     \
                                 std::int64_t, double*, GemmFn<T>);                                \
  template void ghost_cross<T>(const T*, const T*, const T*, const T*, std::int64_t, std::int64_t, \
                               std::int64_t, std::int64_t, std::int64_t, double*, GemmFn<T>);      \
  template void scaled_outer_accumulate<T>(const T*, const T*, const T*, std::int64_t,             \
                                           std::int64_t, std::int64_t, std::int64_t, T*, double,   \
                                           std::uint64_t, std::uint64_t, GemmFn<T>);

RML_CLIP_INSTANTIATE(float)
RML_CLIP_INSTANTIATE(double)

}  // namespace rml::clip
