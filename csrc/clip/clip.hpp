// Per-sample clipping kernels: ghost norms / cross-Grams and the row-scaled accumulate.
//
// Layout: A is (B, S, d), D is (B, S, p), C-contiguous; the per-sample weight gradient is
// G_i = D_i^T A_i (p x d). Nothing here forms G_i.
#pragma once

#include <cstdint>

namespace rml::clip {

// Fortran BLAS ?gemm as exported by SciPy's cython_blas (column-major, arguments by pointer).
template <typename T>
using GemmFn = void (*)(const char*, const char*, const int*, const int*, const int*, const T*,
                        const T*, const int*, const T*, const int*, const T*, T*, const int*);

// out[i] = ||D_i^T A_i||_F^2 = sum_{s,s'} (a_is . a_is')(d_is . d_is'), accumulated in double.
// gemm may be null; when given and S >= kBlasMinRows, each sample's two Grams are formed by
// the BLAS (O(S^2) scratch) and Hadamard-reduced in double.
template <typename T>
void ghost_norm_sq(const T* A, const T* D, std::int64_t B, std::int64_t S, std::int64_t d,
                   std::int64_t p, double* out, GemmFn<T> gemm = nullptr);

// out[i] = <D_i^T A_i, D2_i^T A2_i>_F = sum_{s,s'} (a_is . a2_is')(d_is . d2_is').
template <typename T>
void ghost_cross(const T* A, const T* D, const T* A2, const T* D2, std::int64_t B, std::int64_t S,
                 std::int64_t S2, std::int64_t d, std::int64_t p, double* out,
                 GemmFn<T> gemm = nullptr);

constexpr std::int64_t kBlasMinRows = 16;

// out (p x d) = sum_r w[r / S] D[r]^T A[r] + noise_std * normal(seed, offset + j * d + k).
// gemm may be null (a blocked loop is used instead).
template <typename T>
void scaled_outer_accumulate(const T* A, const T* D, const T* w, std::int64_t N, std::int64_t d,
                             std::int64_t p, std::int64_t S, T* out, double noise_std,
                             std::uint64_t seed, std::uint64_t offset, GemmFn<T> gemm);

}  // namespace rml::clip
