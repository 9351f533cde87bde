// Lasso path: gap-safe screening, working sets, Gram-cached coordinate descent with Anderson
// extrapolation; OpenMP over right-hand sides (or over columns for a single right-hand side).
#include "lasso/lasso.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <utility>

#include "common/parallel.hpp"
#include "common/simd.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

namespace rml::lasso {
namespace {

using i64 = std::int64_t;
// The *_impl kernels must be inlined into their multi-versioned (RML_SIMD_CLONES) callers:
// an out-of-line copy is compiled for the baseline ISA only (SSE2, 2 lanes).
#if defined(__GNUC__)
#define RML_INLINE inline __attribute__((always_inline))
#else
#define RML_INLINE inline
#endif
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr i64 kGramCap = 1024;     // largest cached Gram block (features) per problem
constexpr i64 kCheckEvery = 10;    // inner epochs between duality-gap checks
constexpr double kInnerRatio = 0.3;  // inner tolerance as a fraction of the outer gap

template <typename T>
inline double dot_xr(const T* x, const double* r, i64 n) {
  double s = 0.0;
#pragma omp simd reduction(+ : s)
  for (i64 i = 0; i < n; ++i) s += static_cast<double>(x[i]) * r[i];
  return s;
}

inline double dot_dd(const double* a, const double* b, i64 n) {
  double s = 0.0;
#pragma omp simd reduction(+ : s)
  for (i64 i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

template <typename T>
inline void axpy(double a, const T* x, double* r, i64 n) {
#pragma omp simd
  for (i64 i = 0; i < n; ++i) r[i] += a * static_cast<double>(x[i]);
}

inline double soft(double z, double t) { return z > t ? z - t : (z < -t ? z + t : 0.0); }

// Correlations of four problems over columns [j0, j1) (the shared-design kernel): a column
// unscreened by all four is read once for four dot products; otherwise each unscreened
// problem gets its own. mx[q] is raised to max |c| of problem q.
template <typename T>
RML_INLINE void corr_block4_impl(const T* X, i64 n, i64 j0, i64 j1, const char* const* scr,
                             const double* const* r, double* const* c, double* mx) {
  const double *r0 = r[0], *r1 = r[1], *r2 = r[2], *r3 = r[3];
  for (i64 j = j0; j < j1; ++j) {
    const T* x = X + j * n;
    if (!scr[0][j] && !scr[1][j] && !scr[2][j] && !scr[3][j]) {
      double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
      for (i64 i = 0; i < n; ++i) {
        const double xi = static_cast<double>(x[i]);
        s0 += xi * r0[i];
        s1 += xi * r1[i];
        s2 += xi * r2[i];
        s3 += xi * r3[i];
      }
      c[0][j] = s0;
      c[1][j] = s1;
      c[2][j] = s2;
      c[3][j] = s3;
      mx[0] = std::max(mx[0], std::abs(s0));
      mx[1] = std::max(mx[1], std::abs(s1));
      mx[2] = std::max(mx[2], std::abs(s2));
      mx[3] = std::max(mx[3], std::abs(s3));
      continue;
    }
    for (int q = 0; q < 4; ++q) {
      if (scr[q][j]) continue;
      const double* rq = r[q];
      double sq = 0.0;
#pragma omp simd reduction(+ : sq)
      for (i64 i = 0; i < n; ++i) sq += static_cast<double>(x[i]) * rq[i];
      c[q][j] = sq;
      mx[q] = std::max(mx[q], std::abs(sq));
    }
  }
}

RML_SIMD_CLONES void corr_block4(const double* X, i64 n, i64 j0, i64 j1, const char* const* scr,
                                 const double* const* r, double* const* c, double* mx) {
  corr_block4_impl(X, n, j0, j1, scr, r, c, mx);
}

RML_SIMD_CLONES void corr_block4(const float* X, i64 n, i64 j0, i64 j1, const char* const* scr,
                                 const double* const* r, double* const* c, double* mx) {
  corr_block4_impl(X, n, j0, j1, scr, r, c, mx);
}

// Correlations of one problem over the columns idx[0, cnt): c_j = x_j^T r and, with a probe
// direction qv, also g_j = x_j^T qv (one read of x_j for both); returns max |c_j|.
template <typename T>
RML_INLINE double corr_list_impl(const T* X, i64 n, const i64* idx, i64 cnt, const double* r,
                                 const double* qv, double* c, double* g) {
  double mx = 0.0;
  constexpr i64 kLine = 64 / static_cast<i64>(sizeof(T));
  for (i64 q = 0; q < cnt; ++q) {
    const i64 j = idx[q];
    const T* x = X + j * n;
#if defined(__GNUC__)
    if (q + 1 < cnt) {  // the needed columns are scattered: fetch the next one meanwhile
      const T* nx = X + idx[q + 1] * n;
      for (i64 i = 0; i < n; i += kLine) __builtin_prefetch(nx + i);
    }
#endif
    if (qv == nullptr) {
      double s = 0.0;
#pragma omp simd reduction(+ : s)
      for (i64 i = 0; i < n; ++i) s += static_cast<double>(x[i]) * r[i];
      c[j] = s;
      mx = std::max(mx, std::abs(s));
      continue;
    }
    double s = 0.0, t = 0.0;
#pragma omp simd reduction(+ : s, t)
    for (i64 i = 0; i < n; ++i) {
      const double xi = static_cast<double>(x[i]);
      s += xi * r[i];
      t += xi * qv[i];
    }
    c[j] = s;
    g[j] = t;
    mx = std::max(mx, std::abs(s));
  }
  return mx;
}

RML_SIMD_CLONES double corr_list(const double* X, i64 n, const i64* idx, i64 cnt,
                                 const double* r, const double* qv, double* c, double* g) {
  return corr_list_impl(X, n, idx, cnt, r, qv, c, g);
}

RML_SIMD_CLONES double corr_list(const float* X, i64 n, const i64* idx, i64 cnt,
                                 const double* r, const double* qv, double* c, double* g) {
  return corr_list_impl(X, n, idx, cnt, r, qv, c, g);
}

// Four problems with probes: a column needed by all four is read once for eight products.
template <typename T>
RML_INLINE void corr_block4x2_impl(const T* X, i64 n, i64 j0, i64 j1, const char* const* scr,
                               const double* const* r, const double* const* qv, double* const* c,
                               double* const* g, double* mx) {
  const double *r0 = r[0], *r1 = r[1], *r2 = r[2], *r3 = r[3];
  const double *q0 = qv[0], *q1 = qv[1], *q2 = qv[2], *q3 = qv[3];
  for (i64 j = j0; j < j1; ++j) {
    const T* x = X + j * n;
    if (!scr[0][j] && !scr[1][j] && !scr[2][j] && !scr[3][j]) {
      double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0, t0 = 0.0, t1 = 0.0, t2 = 0.0, t3 = 0.0;
#pragma omp simd reduction(+ : s0, s1, s2, s3, t0, t1, t2, t3)
      for (i64 i = 0; i < n; ++i) {
        const double xi = static_cast<double>(x[i]);
        s0 += xi * r0[i];
        s1 += xi * r1[i];
        s2 += xi * r2[i];
        s3 += xi * r3[i];
        t0 += xi * q0[i];
        t1 += xi * q1[i];
        t2 += xi * q2[i];
        t3 += xi * q3[i];
      }
      c[0][j] = s0;
      c[1][j] = s1;
      c[2][j] = s2;
      c[3][j] = s3;
      g[0][j] = t0;
      g[1][j] = t1;
      g[2][j] = t2;
      g[3][j] = t3;
      mx[0] = std::max(mx[0], std::abs(s0));
      mx[1] = std::max(mx[1], std::abs(s1));
      mx[2] = std::max(mx[2], std::abs(s2));
      mx[3] = std::max(mx[3], std::abs(s3));
      continue;
    }
    for (int q = 0; q < 4; ++q) {
      if (scr[q][j]) continue;
      const double* rq = r[q];
      const double* qq = qv[q];
      double sq = 0.0, tq = 0.0;
#pragma omp simd reduction(+ : sq, tq)
      for (i64 i = 0; i < n; ++i) {
        const double xi = static_cast<double>(x[i]);
        sq += xi * rq[i];
        tq += xi * qq[i];
      }
      c[q][j] = sq;
      g[q][j] = tq;
      mx[q] = std::max(mx[q], std::abs(sq));
    }
  }
}

RML_SIMD_CLONES void corr_block4x2(const double* X, i64 n, i64 j0, i64 j1, const char* const* scr,
                                   const double* const* r, const double* const* qv,
                                   double* const* c, double* const* g, double* mx) {
  corr_block4x2_impl(X, n, j0, j1, scr, r, qv, c, g, mx);
}

RML_SIMD_CLONES void corr_block4x2(const float* X, i64 n, i64 j0, i64 j1, const char* const* scr,
                                   const double* const* r, const double* const* qv,
                                   double* const* c, double* const* g, double* mx) {
  corr_block4x2_impl(X, n, j0, j1, scr, r, qv, c, g, mx);
}

// Gram entries a^T b for pairs of columns.
RML_SIMD_CLONES double col_dot(const double* a, const double* b, i64 n) {
  double s = 0.0;
#pragma omp simd reduction(+ : s)
  for (i64 i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

RML_SIMD_CLONES double col_dot(const float* a, const float* b, i64 n) {
  double s = 0.0;
#pragma omp simd reduction(+ : s)
  for (i64 i = 0; i < n; ++i) s += static_cast<double>(a[i]) * static_cast<double>(b[i]);
  return s;
}

// Four Gram entries x^T y_i with one read of x.
template <typename T>
RML_INLINE void col_dot4_impl(const T* x, const T* const* ys, i64 n, double* out) {
  const T *y0 = ys[0], *y1 = ys[1], *y2 = ys[2], *y3 = ys[3];
  double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
  for (i64 i = 0; i < n; ++i) {
    const double xi = static_cast<double>(x[i]);
    s0 += xi * static_cast<double>(y0[i]);
    s1 += xi * static_cast<double>(y1[i]);
    s2 += xi * static_cast<double>(y2[i]);
    s3 += xi * static_cast<double>(y3[i]);
  }
  out[0] = s0;
  out[1] = s1;
  out[2] = s2;
  out[3] = s3;
}

RML_SIMD_CLONES void col_dot4(const double* x, const double* const* ys, i64 n, double* out) {
  col_dot4_impl(x, ys, n, out);
}

RML_SIMD_CLONES void col_dot4(const float* x, const float* const* ys, i64 n, double* out) {
  col_dot4_impl(x, ys, n, out);
}

// out (F x K, row-major) = Xn^T Xw for columns xn[f], xw[q] of length n: a blocked product
// (32 columns of Xw by up to 256 KiB of rows stay in L2 while every group of four new columns
// passes over them; parallel over the blocks of Xw), so Xw is read from memory once, not once
// per group.
template <typename T>
void gram_rows(const std::vector<const T*>& xn, const std::vector<const T*>& xw, i64 n, double* out,
               int nt) {
  const i64 F = static_cast<i64>(xn.size()), K = static_cast<i64>(xw.size());
  constexpr i64 QB = 32;
  constexpr i64 RB = (i64{256} << 10) / (QB * static_cast<i64>(sizeof(T)));  // 256 KiB of Xw
  const i64 n_qb = (K + QB - 1) / QB;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt) if (nt > 1)
  for (i64 b = 0; b < n_qb; ++b) {
    const i64 q0 = b * QB, q1 = std::min(K, q0 + QB);
    std::vector<double> acc(static_cast<size_t>(F * QB), 0.0);
    for (i64 i0 = 0; i0 < n; i0 += RB) {
      const i64 len = std::min(RB, n - i0);
      for (i64 f = 0; f < F; f += 4) {
        const i64 nf = std::min<i64>(4, F - f);
        const T* ys[4];
        for (i64 i = 0; i < 4; ++i) ys[i] = xn[static_cast<size_t>(f + std::min(i, nf - 1))] + i0;
        for (i64 q = q0; q < q1; ++q) {
          double d[4];
          col_dot4(xw[static_cast<size_t>(q)] + i0, ys, len, d);
          for (i64 i = 0; i < nf; ++i) acc[static_cast<size_t>((f + i) * QB + (q - q0))] += d[i];
        }
      }
    }
    for (i64 f = 0; f < F; ++f)
      for (i64 q = q0; q < q1; ++q) out[f * K + q] = acc[static_cast<size_t>(f * QB + (q - q0))];
  }
}

// c -= d * g over k entries (the inner CD update).
RML_SIMD_CLONES void sub_scaled(double* c, const double* g, double d, i64 k) {
#pragma omp simd
  for (i64 i = 0; i < k; ++i) c[i] -= d * g[i];
}

// --- Per-feature bookkeeping over all m features (see Problem::prepare). ----------------
// A feature's correlation c_j = x_j^T r_t (and g_j = x_j^T q_t) refers to the pass in ring
// slot slot_j, or to one of two pseudo-slots whose tables hold a = 0, e = inf: the rebased
// slot (the pass left the ring) and the unknown slot (never computed: c = g = 0, sl = inf).
// These loops run once or twice per round over all m features, so on x86-64 they have AVX2
// versions (GCC does not vectorise the gathers and byte masks of the portable ones well);
// the portable versions are the reference and the fallback, and compute the same values.
using u8 = unsigned char;

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define RML_LASSO_AVX2 1
#define RML_AVX2 __attribute__((target("avx2,fma")))
// RML_FAST_LASSO_PORTABLE=1 in the environment forces the portable loops (for tests).
bool cpu_has_avx2() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                          std::getenv("RML_FAST_LASSO_PORTABLE") == nullptr;
  return has;
}
#else
bool cpu_has_avx2() { return false; }
#endif

struct BoundsArgs {
  i64 m;
  const double *c, *g, *sl, *dst, *nrm;
  const std::int32_t* slot;
  const double *ta, *te;  // per slot: projection a and remainder e
  double drift;
  const u8* screened;
  double thr;  // mark mode: need_j = unscreened and ub_j > thr (thr > -1)
  double *est, *ub;
  u8* skip;    // mark mode: 0 for the needed features, 1 otherwise
  i64* need;   // mark mode: their indices, ascending
};

// est_j = c_j + a_k g_j and ub_j = min(|c_j| + sl_j + ||x_j|| (drift - dst_j),
// |est_j| + ||x_j|| e_k) for k = slot_j; in mark mode also skip_ and need. Returns
// max ub_j over the unscreened features (0 if none); *n_need = number of needed ones.
double bounds_scalar(const BoundsArgs& A, bool mark, i64* n_need, i64 j0 = 0, double mx = 0.0,
                     i64 cnt = 0) {
  for (i64 j = j0; j < A.m; ++j) {
    const std::int32_t k = A.slot[j];
    const double e = A.c[j] + A.ta[k] * A.g[j];
    const double u1 = std::abs(A.c[j]) + A.sl[j] + A.nrm[j] * (A.drift - A.dst[j]);
    const double u2 = std::abs(e) + A.nrm[j] * A.te[k];
    const double u = u1 < u2 ? u1 : u2;
    A.est[j] = e;
    A.ub[j] = u;
    const double v = A.screened[j] ? -1.0 : u;
    mx = mx > v ? mx : v;
    if (mark) {
      const bool nd = v > A.thr;
      A.skip[j] = nd ? 0 : 1;
      A.need[cnt] = j;
      cnt += nd ? 1 : 0;
    }
  }
  if (mark) *n_need = cnt;
  return mx;
}

#ifdef RML_LASSO_AVX2
// Byte i is 1 unless bit i of the index is set (skip flags from a 4-lane need mask).
constexpr std::uint32_t kSkipBytes[16] = {
    0x01010101u, 0x01010100u, 0x01010001u, 0x01010000u, 0x01000101u, 0x01000100u,
    0x01000001u, 0x01000000u, 0x00010101u, 0x00010100u, 0x00010001u, 0x00010000u,
    0x00000101u, 0x00000100u, 0x00000001u, 0x00000000u};

// Lanes j..j+3 of a byte flag array as a 64-bit-lane mask (all ones where the byte is 0).
RML_AVX2 inline __m256d zero_bytes_mask(const u8* flag, i64 j) {
  std::int32_t w;
  std::memcpy(&w, flag + j, 4);
  const __m256i f = _mm256_cvtepu8_epi64(_mm_cvtsi32_si128(w));
  return _mm256_castsi256_pd(_mm256_cmpeq_epi64(f, _mm256_setzero_si256()));
}

RML_AVX2 inline double hmax(__m256d v) {
  const __m128d h = _mm_max_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  return std::max(_mm_cvtsd_f64(h), _mm_cvtsd_f64(_mm_unpackhi_pd(h, h)));
}

RML_AVX2 double bounds_avx2(const BoundsArgs& A, bool mark, i64* n_need) {
  const __m256d sign = _mm256_set1_pd(-0.0), drift = _mm256_set1_pd(A.drift),
                thr = _mm256_set1_pd(A.thr), neg1 = _mm256_set1_pd(-1.0);
  const double *cp = A.c, *gp = A.g, *slp = A.sl, *dstp = A.dst, *nrmp = A.nrm, *ta = A.ta,
               *te = A.te;
  const std::int32_t* slot = A.slot;
  const u8* scr = A.screened;
  double *estp = A.est, *ubp = A.ub;
  u8* skip = A.skip;
  i64* need = A.need;
  __m256d mx = _mm256_setzero_pd();
  i64 cnt = 0, j = 0;
  for (; j + 4 <= A.m; j += 4) {
    // Four table lookups by scalar loads (faster than vgatherdpd on the AMD cores measured).
    const std::int32_t k0 = slot[j], k1 = slot[j + 1], k2 = slot[j + 2], k3 = slot[j + 3];
    const __m256d a = _mm256_set_pd(ta[k3], ta[k2], ta[k1], ta[k0]);
    const __m256d e = _mm256_set_pd(te[k3], te[k2], te[k1], te[k0]);
    const __m256d c = _mm256_loadu_pd(cp + j), nr = _mm256_loadu_pd(nrmp + j);
    const __m256d est = _mm256_fmadd_pd(a, _mm256_loadu_pd(gp + j), c);
    const __m256d u1 = _mm256_fmadd_pd(
        nr, _mm256_sub_pd(drift, _mm256_loadu_pd(dstp + j)),
        _mm256_add_pd(_mm256_andnot_pd(sign, c), _mm256_loadu_pd(slp + j)));
    const __m256d u2 = _mm256_fmadd_pd(nr, e, _mm256_andnot_pd(sign, est));
    const __m256d u = _mm256_min_pd(u1, u2);  // u2 where u1 < u2 is false, as in the scalar loop
    _mm256_storeu_pd(estp + j, est);
    _mm256_storeu_pd(ubp + j, u);
    const __m256d v = _mm256_blendv_pd(neg1, u, zero_bytes_mask(scr, j));
    mx = _mm256_max_pd(v, mx);
    if (mark) {
      int bits = _mm256_movemask_pd(_mm256_cmp_pd(v, thr, _CMP_GT_OQ));
      std::memcpy(skip + j, &kSkipBytes[bits], 4);
      while (bits) {
        need[cnt++] = j + __builtin_ctz(static_cast<unsigned>(bits));
        bits &= bits - 1;
      }
    }
  }
  return bounds_scalar(A, mark, n_need, j, std::max(0.0, hmax(mx)), cnt);
}
#endif

double bounds_pass(const BoundsArgs& A, bool mark, i64* n_need) {
#ifdef RML_LASSO_AVX2
  if (cpu_has_avx2()) return bounds_avx2(A, mark, n_need);
#endif
  return bounds_scalar(A, mark, n_need);
}

// Features whose correlation refers to ring slot s leave it: est becomes a fixed value with the
// projection's remainder as slack (c += a g, sl += ||x|| e, dst = drift, slot = rebased).
RML_SIMD_CLONES void rebase_slot(i64 m, std::int32_t s, std::int32_t rebased, double a, double e,
                                 double drift, const double* nrm, const double* g, double* c,
                                 double* sl, double* dst, std::int32_t* slot) {
#pragma omp simd
  for (i64 j = 0; j < m; ++j) {
    const bool hit = slot[j] == s;
    c[j] = hit ? c[j] + a * g[j] : c[j];
    sl[j] = hit ? sl[j] + nrm[j] * e : sl[j];
    dst[j] = hit ? drift : dst[j];
    slot[j] = hit ? rebased : slot[j];
  }
}

// a = q^T (r - r_t), d2 = ||r - r_t||^2 (projection of a residual step on a snapshot's probe).
RML_SIMD_CLONES void project_step(const double* r, const double* rt, const double* q, i64 n,
                                  double* a, double* d2) {
  double sa = 0.0, sd = 0.0;
#pragma omp simd reduction(+ : sa, sd)
  for (i64 i = 0; i < n; ++i) {
    const double e = r[i] - rt[i];
    sa += q[i] * e;
    sd += e * e;
  }
  *a = sa;
  *d2 = sd;
}

// Gap-safe sphere test on the bounds: screens the unscreened features with
// ub_j / s + ||x_j|| rho < 1 (screened_j = skip_j = 1); returns how many stay unscreened.
i64 screen_scalar(i64 m, const double* ub, const double* nrm, double inv_s, double rho,
                  u8* screened, u8* skip, i64 j0 = 0, i64 left = 0) {
  for (i64 j = j0; j < m; ++j) {
    if (screened[j]) continue;
    if (ub[j] * inv_s + nrm[j] * rho < 1.0) {
      screened[j] = 1;
      skip[j] = 1;
    } else {
      ++left;
    }
  }
  return left;
}

#ifdef RML_LASSO_AVX2
RML_AVX2 i64 screen_avx2(i64 m, const double* ub, const double* nrm, double inv_s, double rho,
                         u8* screened, u8* skip) {
  const __m256d is = _mm256_set1_pd(inv_s), rh = _mm256_set1_pd(rho), one = _mm256_set1_pd(1.0);
  i64 left = 0, j = 0;
  for (; j + 4 <= m; j += 4) {
    const __m256d live = zero_bytes_mask(screened, j);
    const __m256d t = _mm256_fmadd_pd(_mm256_loadu_pd(nrm + j), rh,
                                      _mm256_mul_pd(_mm256_loadu_pd(ub + j), is));
    int drop = _mm256_movemask_pd(_mm256_and_pd(live, _mm256_cmp_pd(t, one, _CMP_LT_OQ)));
    left += __builtin_popcount(static_cast<unsigned>(_mm256_movemask_pd(live))) -
            __builtin_popcount(static_cast<unsigned>(drop));
    while (drop) {
      const i64 q = j + __builtin_ctz(static_cast<unsigned>(drop));
      screened[q] = 1;
      skip[q] = 1;
      drop &= drop - 1;
    }
  }
  return screen_scalar(m, ub, nrm, inv_s, rho, screened, skip, j, left);
}
#endif

i64 screen_all(i64 m, const double* ub, const double* nrm, double inv_s, double rho, u8* screened,
               u8* skip) {
#ifdef RML_LASSO_AVX2
  if (cpu_has_avx2()) return screen_avx2(m, ub, nrm, inv_s, rho, screened, skip);
#endif
  return screen_scalar(m, ub, nrm, inv_s, rho, screened, skip);
}

// Working-set keys (1 - |est_j| / s) / ||x_j|| (+inf when screened) and below[i] = the number
// of keys below the cut 0.25 * 2^i, i < kCuts.
constexpr int kCuts = 8;
inline double ws_cut(int i) { return std::ldexp(0.25, i); }

void ws_keys_scalar(i64 m, const double* est, const double* inv_nrm, const u8* screened,
                    double inv_s, double* key, i64* below, i64 j0 = 0) {
  for (i64 j = j0; j < m; ++j) {
    const double k = screened[j] ? std::numeric_limits<double>::infinity()
                                 : (1.0 - std::abs(est[j]) * inv_s) * inv_nrm[j];
    key[j] = k;
    for (int i = 0; i < kCuts; ++i) below[i] += k < ws_cut(i) ? 1 : 0;
  }
}

#ifdef RML_LASSO_AVX2
RML_AVX2 void ws_keys_avx2(i64 m, const double* est, const double* inv_nrm, const u8* screened,
                           double inv_s, double* key, i64* below) {
  const __m256d sign = _mm256_set1_pd(-0.0), is = _mm256_set1_pd(inv_s),
                one = _mm256_set1_pd(1.0),
                inf = _mm256_set1_pd(std::numeric_limits<double>::infinity());
  __m256d cut[kCuts];
  __m256i acc[kCuts];
  for (int i = 0; i < kCuts; ++i) {
    cut[i] = _mm256_set1_pd(ws_cut(i));
    acc[i] = _mm256_setzero_si256();
  }
  i64 j = 0;
  for (; j + 4 <= m; j += 4) {
    const __m256d k0 = _mm256_mul_pd(
        _mm256_fnmadd_pd(_mm256_andnot_pd(sign, _mm256_loadu_pd(est + j)), is, one),
        _mm256_loadu_pd(inv_nrm + j));
    const __m256d k = _mm256_blendv_pd(inf, k0, zero_bytes_mask(screened, j));
    _mm256_storeu_pd(key + j, k);
    for (int i = 0; i < kCuts; ++i)  // a true compare is all ones = -1
      acc[i] = _mm256_sub_epi64(acc[i], _mm256_castpd_si256(_mm256_cmp_pd(k, cut[i], _CMP_LT_OQ)));
  }
  for (int i = 0; i < kCuts; ++i) {
    alignas(32) std::int64_t lanes[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc[i]);
    below[i] += lanes[0] + lanes[1] + lanes[2] + lanes[3];
  }
  ws_keys_scalar(m, est, inv_nrm, screened, inv_s, key, below, j);
}
#endif

void ws_keys(i64 m, const double* est, const double* inv_nrm, const u8* screened, double inv_s,
             double* key, i64* below) {
  for (int i = 0; i < kCuts; ++i) below[i] = 0;
#ifdef RML_LASSO_AVX2
  if (cpu_has_avx2()) return ws_keys_avx2(m, est, inv_nrm, screened, inv_s, key, below);
#endif
  ws_keys_scalar(m, est, inv_nrm, screened, inv_s, key, below);
}

// Appends (key_j, j) for every key_j < cut.
void keys_below_scalar(i64 m, const double* key, double cut,
                       std::vector<std::pair<double, i64>>& out, i64 j0 = 0) {
  for (i64 j = j0; j < m; ++j)
    if (key[j] < cut) out.emplace_back(key[j], j);
}

#ifdef RML_LASSO_AVX2
RML_AVX2 void keys_below_avx2(i64 m, const double* key, double cut,
                              std::vector<std::pair<double, i64>>& out) {
  const __m256d c = _mm256_set1_pd(cut);
  i64 j = 0;
  for (; j + 4 <= m; j += 4) {
    int bits = _mm256_movemask_pd(_mm256_cmp_pd(_mm256_loadu_pd(key + j), c, _CMP_LT_OQ));
    while (bits) {
      const i64 q = j + __builtin_ctz(static_cast<unsigned>(bits));
      out.emplace_back(key[q], q);
      bits &= bits - 1;
    }
  }
  keys_below_scalar(m, key, cut, out, j);
}
#endif

void keys_below(i64 m, const double* key, double cut, std::vector<std::pair<double, i64>>& out) {
#ifdef RML_LASSO_AVX2
  if (cpu_has_avx2()) return keys_below_avx2(m, key, cut, out);
#endif
  keys_below_scalar(m, key, cut, out);
}

// Dual objective at theta = r / s from rr = ||r||^2 and ry = r^T y (see lasso.hpp).
inline double dual_value(double rr, double ry, double s, double lam, double n) {
  return lam * ry / s - n * lam * lam * rr / (2.0 * s * s);
}

// Anderson weights from K + 1 iterates hist (row-major, rows of length k): z solves
// (U U^T) z = 1 with U_i = hist_{i+1} - hist_i, normalised to sum 1. False if singular.
bool anderson_weights(const std::vector<double>& hist, int K, i64 k, std::vector<double>& U,
                      std::vector<double>& A, std::vector<double>& z) {
  for (int i = 0; i < K; ++i)
    for (i64 j = 0; j < k; ++j)
      U[static_cast<size_t>(i * k + j)] =
          hist[static_cast<size_t>((i + 1) * k + j)] - hist[static_cast<size_t>(i * k + j)];
  double tr = 0.0;
  for (int i = 0; i < K; ++i) {
    for (int j = 0; j <= i; ++j) {
      const double v = dot_dd(&U[static_cast<size_t>(i * k)], &U[static_cast<size_t>(j * k)], k);
      A[static_cast<size_t>(i * K + j)] = v;
      A[static_cast<size_t>(j * K + i)] = v;
    }
    tr += A[static_cast<size_t>(i * K + i)];
  }
  if (!(tr > 0.0)) return false;
  const double reg = 1e-12 * tr;
  for (int i = 0; i < K; ++i) A[static_cast<size_t>(i * K + i)] += reg;
  // Cholesky in place (lower triangle).
  for (int j = 0; j < K; ++j) {
    double d = A[static_cast<size_t>(j * K + j)];
    for (int p = 0; p < j; ++p) d -= A[static_cast<size_t>(j * K + p)] * A[static_cast<size_t>(j * K + p)];
    if (!(d > 0.0)) return false;
    d = std::sqrt(d);
    A[static_cast<size_t>(j * K + j)] = d;
    for (int i = j + 1; i < K; ++i) {
      double v = A[static_cast<size_t>(i * K + j)];
      for (int p = 0; p < j; ++p) v -= A[static_cast<size_t>(i * K + p)] * A[static_cast<size_t>(j * K + p)];
      A[static_cast<size_t>(i * K + j)] = v / d;
    }
  }
  for (int i = 0; i < K; ++i) {  // forward: L y = 1
    double v = 1.0;
    for (int p = 0; p < i; ++p) v -= A[static_cast<size_t>(i * K + p)] * z[static_cast<size_t>(p)];
    z[static_cast<size_t>(i)] = v / A[static_cast<size_t>(i * K + i)];
  }
  for (int i = K - 1; i >= 0; --i) {  // backward: L^T z = y
    double v = z[static_cast<size_t>(i)];
    for (int p = i + 1; p < K; ++p) v -= A[static_cast<size_t>(p * K + i)] * z[static_cast<size_t>(p)];
    z[static_cast<size_t>(i)] = v / A[static_cast<size_t>(i * K + i)];
  }
  double sum = 0.0;
  for (int i = 0; i < K; ++i) sum += z[static_cast<size_t>(i)];
  if (!std::isfinite(sum) || std::abs(sum) < 1e-300) return false;
  for (int i = 0; i < K; ++i) z[static_cast<size_t>(i)] /= sum;
  return true;
}

// The Anderson-extrapolated point sum_i z_i hist_{i+1} into w_acc; false (w_acc untouched)
// when the weights cannot be computed.
bool anderson_extrapolate(const std::vector<double>& hist, int K, i64 k, std::vector<double>& U,
                          std::vector<double>& A, std::vector<double>& z,
                          std::vector<double>& w_acc) {
  if (!anderson_weights(hist, K, k, U, A, z)) return false;
  std::fill(w_acc.begin(), w_acc.end(), 0.0);
  for (int i = 0; i < K; ++i) {
    const double zi = z[static_cast<size_t>(i)];
    const double* h = &hist[static_cast<size_t>((i + 1) * k)];
    for (i64 a = 0; a < k; ++a) w_acc[static_cast<size_t>(a)] += zi * h[a];
  }
  return true;
}

template <typename T>
class Problem {
 public:
  Problem(const T* X, i64 n, i64 m, const double* nrm2, const double* nrm, const double* inv_nrm,
          const T* y, const Options& opt, bool par, int nt, i64 n_snaps)
      : X_(X), n_(n), m_(m), nrm2_(nrm2), nrm_(nrm), inv_nrm_(inv_nrm), opt_(opt), par_(par),
        nt_(nt), w_(static_cast<size_t>(m), 0.0), c_(static_cast<size_t>(m), 0.0),
        r_(static_cast<size_t>(n)), y_(static_cast<size_t>(n)), r_ref_(static_cast<size_t>(n)),
        q_(static_cast<size_t>(n), 0.0), g_(static_cast<size_t>(m), 0.0),
        est_(static_cast<size_t>(m), 0.0), ub_(static_cast<size_t>(m), 0.0),
        dstamp_(static_cast<size_t>(m), 0.0), key_(static_cast<size_t>(m), 0.0),
        sl_(static_cast<size_t>(m), std::numeric_limits<double>::infinity()),
        ring_(static_cast<size_t>(m), static_cast<std::int32_t>(n_snaps + 1)),
        screened_(static_cast<size_t>(m), 0), base_screened_(static_cast<size_t>(m), 0),
        skip_(static_cast<size_t>(m), 1), need_(static_cast<size_t>(m), 0),
        slot_(static_cast<size_t>(m), -1), snaps_(static_cast<size_t>(n_snaps)), H_(n_snaps),
        ta_(static_cast<size_t>(n_snaps + 2), 0.0),
        te_(static_cast<size_t>(n_snaps + 2), std::numeric_limits<double>::infinity()),
        refs_(static_cast<size_t>(n_snaps + 2), 0) {
    for (i64 j = 0; j < m; ++j) {
      const bool zero = !(nrm2[j] > 0.0);
      base_screened_[static_cast<size_t>(j)] = zero ? 1 : 0;
      n_cols_ += zero ? 0 : 1;
    }
    refs_[static_cast<size_t>(unknown_slot())] = n_cols_;
    for (i64 i = 0; i < n; ++i) y_[static_cast<size_t>(i)] = static_cast<double>(y[i]);
    yy_ = dot_dd(y_.data(), y_.data(), n);
  }

  void set_warm(const double* w0) {
    support_.clear();
    for (i64 j = 0; j < m_; ++j) {
      w_[static_cast<size_t>(j)] = nrm2_[j] > 0.0 ? w0[j] : 0.0;
      if (w_[static_cast<size_t>(j)] != 0.0) support_.push_back(j);
    }
  }

  const std::vector<double>& coef() const { return w_; }
  const std::vector<i64>& support() const { return support_; }  // nonzeros of coef, ascending

  // One penalty is solved as begin(lam), then rounds of {correlations c = X^T r on the
  // unscreened features (by this problem, or shared by several problems: see corr_shared),
  // step(max |c|)} until step returns true. Several problems sharing X run in lockstep so
  // that one pass over X serves all of their correlations.
  //
  // Correlations are reused across rounds and penalties (Options::reuse_corr). c_j = x_j^T r_t
  // and g_j = x_j^T q_t were computed exactly at the residual r_t of a past pass t, with q_t the
  // unit direction of the last residual step before it (the Lasso path is piecewise linear, so
  // the residual keeps moving nearly along q_t). With dr = r - r_t, a = q_t^T dr and
  // e = ||dr - a q_t||: x_j^T r = c_j + a g_j + x_j^T (dr - a q_t), hence
  //   |x_j^T r| <= |c_j + a g_j| + ||x_j|| e        (est_j = c_j + a g_j is the estimate),
  // and also <= |c_j| + ||x_j|| (drift - dstamp_j) (path length of r since t, for passes that
  // fell out of the snapshot ring). prepare() marks for recomputation only the unscreened
  // features whose bound exceeds n * lam; the others cannot reach the dual constraint, so the
  // dual scaling max(n lam, max |c|) over the recomputed ones is the exact one and the gap is
  // the one a full pass would give; screening uses the bounds (a weaker, still safe, test).
  // From the second penalty on, the first round of a penalty makes no pass at all
  // (virtual_step): the working set comes from the estimates (support + the features
  // closest to the constraint) and the pass after its inner solve checks the gap. (Forcing
  // the strong-rule set |est_j| >= n (2 lam - lam_prev) into it was tried: near the end of
  // a path it holds hundreds of features and the Gram matrix cost more than it saved.)
  // The per-feature loops run over all m features as vectorised passes over flat arrays
  // (bounds_pass, screen_all, ws_keys), not over a list of unscreened ones.
  void begin(double lam) {
    lam_ = lam;
    tol_abs_ = opt_.tol * yy_ / (2.0 * static_cast<double>(n_));
    std::copy(base_screened_.begin(), base_screened_.end(), screened_.begin());
    std::fill(skip_.begin(), skip_.end(), u8{1});
    n_free_ = n_cols_;
    residual();  // the support carries over from the last penalty (or the warm start)
    epochs_ = 0;
    gap_ = 0.0;
    passes_ = 0.0;
  }

  // Whether the first round of this penalty can skip its pass (every feature has an estimate).
  bool can_skip_pass() const {
    return opt_.reuse_corr && refs_[static_cast<size_t>(unknown_slot())] == 0;
  }

  // Marks the features whose correlation the next pass must compute (see begin), listed in
  // need_[0, n_need_); with mark = false only refreshes the estimates and bounds est_, ub_ of
  // the features and returns max ub over the unscreened ones.
  double prepare(bool mark = true) {
    const i64 n = n_;
    if (has_ref_) {
      double d2 = 0.0;
      for (i64 i = 0; i < n; ++i) {
        const double e = r_[static_cast<size_t>(i)] - r_ref_[static_cast<size_t>(i)];
        d2 += e * e;
      }
      if (d2 > 0.0) {
        const double dn = std::sqrt(d2);
        drift_ += dn;
        has_probe_ = opt_.reuse_corr;
        for (i64 i = 0; i < n; ++i)
          q_[static_cast<size_t>(i)] = (r_[static_cast<size_t>(i)] - r_ref_[static_cast<size_t>(i)]) / dn;
      }
    }
    std::copy(r_.begin(), r_.end(), r_ref_.begin());
    has_ref_ = true;
    // Projection of r - r_t on q_t and the rest, for every live snapshot of the ring.
    for (i64 s = 0; s < H_; ++s) {
      const size_t ss = static_cast<size_t>(s);
      te_[ss] = std::numeric_limits<double>::infinity();
      ta_[ss] = 0.0;
      if (refs_[ss] == 0) continue;
      Snapshot& sn = snaps_[ss];
      double a, d2;
      project_step(r_.data(), sn.r.data(), sn.q.data(), n, &a, &d2);
      ta_[ss] = a;
      te_[ss] = std::sqrt(std::max(0.0, d2 - a * a)) * (1.0 + 1e-12) + 1e-300;
    }
    const bool reuse = opt_.reuse_corr;
    BoundsArgs A{m_, c_.data(), g_.data(), sl_.data(), dstamp_.data(), nrm_, ring_.data(),
                 ta_.data(), te_.data(), drift_, screened_.data(),
                 reuse ? static_cast<double>(n) * lam_ * (1.0 - 1e-9) : -0.5, est_.data(),
                 ub_.data(), skip_.data(), need_.data()};
    i64 cnt = 0;
    const double mx = bounds_pass(A, mark, &cnt);
    if (!mark) return mx;
    passes_ += static_cast<double>(cnt) / static_cast<double>(m_);
    n_need_ = cnt;
    if (!reuse || cnt == 0) return mx;
    const double drift = drift_;
    const std::int32_t s = static_cast<std::int32_t>(n_snaps_ % H_);
    for (i64 q = 0; q < cnt; ++q) --refs_[static_cast<size_t>(ring_[static_cast<size_t>(need_[static_cast<size_t>(q)])])];
    if (refs_[static_cast<size_t>(s)] > 0)  // the oldest pass leaves the ring
      rebase_slot(m_, s, rebased_slot(), ta_[static_cast<size_t>(s)], te_[static_cast<size_t>(s)],
                  drift, nrm_, g_.data(), c_.data(), sl_.data(), dstamp_.data(), ring_.data());
    refs_[static_cast<size_t>(s)] = cnt;
    for (i64 q = 0; q < cnt; ++q) {
      const size_t j = static_cast<size_t>(need_[static_cast<size_t>(q)]);
      ring_[j] = s;
      dstamp_[j] = drift;
      sl_[j] = 0.0;
    }
    Snapshot& sn = snaps_[static_cast<size_t>(s)];
    sn.r.assign(r_.begin(), r_.end());
    sn.q.assign(q_.begin(), q_.end());
    ++n_snaps_;
    return mx;
  }

  // First round of a penalty without a pass (see begin); true when the gap from the bounds
  // already meets the tolerance.
  bool virtual_step() { return round(prepare(false), false); }

  // Duality gap from the correlations of the last pass (max |c_j| = maxc); true when converged
  // (or out of epochs), otherwise screens, builds the working set, runs the inner solver and
  // returns false.
  bool step(double maxc) {
    for (i64 q = 0; q < n_need_; ++q) {
      const size_t j = static_cast<size_t>(need_[static_cast<size_t>(q)]);
      est_[j] = c_[j];
      ub_[j] = std::abs(c_[j]);
    }
    return round(maxc, true);
  }

  double gap() const { return gap_; }
  i64 epochs() const { return epochs_; }
  double passes() const { return passes_; }
  i64 n_need() const { return n_need_; }  // columns the next pass computes
  const i64* need_data() const { return need_.data(); }  // their indices, ascending
  const double* residual_data() const { return r_.data(); }
  // The probe direction of the next pass, nullptr while there is none (no residual step yet).
  const double* probe_data() const { return has_probe_ ? q_.data() : nullptr; }
  const char* skip_data() const { return reinterpret_cast<const char*>(skip_.data()); }
  double* corr_data() { return c_.data(); }
  double* probe_corr_data() { return g_.data(); }

 private:
  std::int32_t rebased_slot() const { return static_cast<std::int32_t>(H_); }
  std::int32_t unknown_slot() const { return static_cast<std::int32_t>(H_ + 1); }

  bool round(double maxc, bool exact) {
    const double n = static_cast<double>(n_);
    const double lam = lam_;
    const double s = std::max(n * lam, maxc);
    const double rr = dot_dd(r_.data(), r_.data(), n_);
    const double ry = dot_dd(r_.data(), y_.data(), n_);
    double l1 = 0.0;
    for (i64 j : support_) l1 += std::abs(w_[static_cast<size_t>(j)]);
    const double primal = rr / (2.0 * n) + lam * l1;
    gap_ = std::max(0.0, primal - dual_value(rr, ry, s, lam, n));
    if (gap_ <= tol_abs_ || epochs_ >= opt_.max_epochs) return true;
    if (opt_.screening && exact) screen(gap_, s, lam);
    build_working_set(exact ? s : n * lam);
    const i64 budget = opt_.max_epochs - epochs_;
    const double tol_in = kInnerRatio * (exact ? gap_ : std::min(gap_, tol_abs_));
    if (static_cast<i64>(ws_.size()) <= kGramCap)
      epochs_ += inner_gram(lam, tol_in, budget);
    else
      epochs_ += inner_residual(lam, tol_in, budget);
    refresh_support();
    residual();
    return false;
  }

  const T* col(i64 j) const { return X_ + j * n_; }

  // Nonzero coefficients after an inner solve: only working-set features can have changed,
  // and the working set holds the previous support, so they are the nonzeros of ws_.
  void refresh_support() {
    support_.clear();
    for (i64 j : ws_)
      if (w_[static_cast<size_t>(j)] != 0.0) support_.push_back(j);
  }

  void residual() {
    std::copy(y_.begin(), y_.end(), r_.begin());
    for (i64 j : support_) axpy(-w_[static_cast<size_t>(j)], col(j), r_.data(), n_);
  }

  // Gap-safe sphere test on the bounds ub_ (exact for the features of the last pass):
  // |x_j^T theta| + ||x_j|| rho < 1 => w_j = 0 at the optimum.
  void screen(double gap, double s, double lam) {
    const double rho = std::sqrt(2.0 * gap / (static_cast<double>(n_) * lam * lam));
    n_free_ = screen_all(m_, ub_.data(), nrm_, 1.0 / s, rho, screened_.data(), skip_.data());
    size_t keep = 0;
    for (size_t q = 0; q < support_.size(); ++q) {
      const size_t j = static_cast<size_t>(support_[q]);
      if (screened_[j]) {
        axpy(w_[j], col(support_[q]), r_.data(), n_);
        w_[j] = 0.0;
      } else {
        support_[keep++] = support_[q];
      }
    }
    support_.resize(keep);
  }

  // Support plus the features closest to violating the dual constraint (celer's priority),
  // ranked by the correlation estimates est_ (exact for the features of the last pass).
  // Size max(ws_start, 2 |support|) every round (celer's pruning rule). Doubling the previous
  // size instead made working sets grow geometrically on coherent designs (a TopK-SAE decoder:
  // single penalty 65 -> 7.9 ms, 64 right-hand sides 3.8 -> 0.44 s at 384 x 6144).
  void build_working_set(double s) {
    ws_.clear();
    i64 p = std::max(opt_.ws_start, 2 * static_cast<i64>(support_.size()));
    if (!opt_.working_set || p >= n_free_) {
      for (i64 j = 0; j < m_; ++j)
        if (!screened_[static_cast<size_t>(j)]) ws_.push_back(j);
      return;
    }
    // Keys (support first: -inf), counted below the cuts 0.25 * 2^i; the candidates are the
    // keys below the smallest cut that leaves at least p, so the selection sorts a few
    // hundred, not all m.
    i64 below[kCuts];
    ws_keys(m_, est_.data(), inv_nrm_, screened_.data(), 1.0 / s, key_.data(), below);
    for (i64 j : support_) {
      double& k = key_[static_cast<size_t>(j)];
      for (int i = 0; i < kCuts; ++i)
        if (!(k < ws_cut(i))) ++below[i];
      k = -std::numeric_limits<double>::infinity();
    }
    double cut = std::numeric_limits<double>::infinity();
    for (int i = 0; i < kCuts; ++i)
      if (below[i] >= p) {
        cut = ws_cut(i);
        break;
      }
    keyed_.clear();
    keys_below(m_, key_.data(), cut, keyed_);
    std::nth_element(keyed_.begin(), keyed_.begin() + p, keyed_.end());
    for (i64 q = 0; q < p; ++q) ws_.push_back(keyed_[static_cast<size_t>(q)].second);
    std::sort(ws_.begin(), ws_.end());
  }

  // Make sure every working-set feature has a Gram-cache slot; fills the local Gram G (k x k).
  void gram(std::vector<double>& G, std::vector<double>& b) {
    const i64 k = static_cast<i64>(ws_.size());
    i64 n_new = 0;
    for (i64 j : ws_)
      if (slot_[static_cast<size_t>(j)] < 0) ++n_new;
    if (static_cast<i64>(cached_.size()) + n_new > kGramCap) evict_cache();
    grow_cache(static_cast<i64>(cached_.size()) + n_new);
    const i64 first_new = static_cast<i64>(cached_.size());  // slots >= this are new
    std::vector<i64> fresh;  // working-set positions of the features new to the cache
    for (i64 a = 0; a < k; ++a) {
      const i64 j = ws_[static_cast<size_t>(a)];
      if (slot_[static_cast<size_t>(j)] >= 0) continue;
      slot_[static_cast<size_t>(j)] = static_cast<i64>(cached_.size());
      cached_.push_back(j);
      bc_.push_back(dot_xr(col(j), y_.data(), n_));
      fresh.push_back(a);
    }
    std::vector<i64>& sl = ws_slot_;  // cache slot of every working-set feature
    sl.resize(static_cast<size_t>(k));
    for (i64 a = 0; a < k; ++a) sl[static_cast<size_t>(a)] = slot_[static_cast<size_t>(ws_[static_cast<size_t>(a)])];
    auto row = [&](i64 s) { return &gc_[static_cast<size_t>(s * cap_)]; };
    // Rows of the new features against the whole working set (blocked: see gram_rows).
    const bool par = par_ && n_new * n_ * k >= (1 << 24);
    if (!fresh.empty()) {
      const i64 F = static_cast<i64>(fresh.size());
      std::vector<const T*> xn(static_cast<size_t>(F)), xw(static_cast<size_t>(k));
      for (i64 f = 0; f < F; ++f) xn[static_cast<size_t>(f)] = col(ws_[static_cast<size_t>(fresh[static_cast<size_t>(f)])]);
      for (i64 q = 0; q < k; ++q) xw[static_cast<size_t>(q)] = col(ws_[static_cast<size_t>(q)]);
      std::vector<double> rows(static_cast<size_t>(F * k));
      gram_rows(xn, xw, n_, rows.data(), par ? nt_ : 1);
      for (i64 f = 0; f < F; ++f) {
        double* ga = row(sl[static_cast<size_t>(fresh[static_cast<size_t>(f)])]);
        const double* rf = &rows[static_cast<size_t>(f * k)];
        for (i64 q = 0; q < k; ++q) ga[sl[static_cast<size_t>(q)]] = rf[q];
      }
    }
    // Mirror: the cell of (old q, new a) from the row of a; between two new features the
    // value of the earlier one (deterministic).
    for (size_t f = 0; f < fresh.size(); ++f) {
      const i64 sa = sl[static_cast<size_t>(fresh[f])];
      const double* ga = row(sa);
      for (i64 q = 0; q < k; ++q) {
        const i64 sq = sl[static_cast<size_t>(q)];
        double* gq = row(sq);
        if (sq >= first_new && sq < sa)
          row(sa)[sq] = gq[sa];
        else
          gq[sa] = ga[sq];
      }
    }
    // Pairs of old features never in one working set before.
    for (i64 a = 0; a < k; ++a) {
      const i64 sa = sl[static_cast<size_t>(a)];
      if (sa >= first_new) continue;  // rows of new features are complete
      double* ga = row(sa);
      for (i64 q = a + 1; q < k; ++q) {
        const i64 sq = sl[static_cast<size_t>(q)];
        if (sq >= first_new || !std::isnan(ga[sq])) continue;
        ga[sq] = col_dot(col(ws_[static_cast<size_t>(a)]), col(ws_[static_cast<size_t>(q)]), n_);
        row(sq)[sa] = ga[sq];
      }
    }
    G.resize(static_cast<size_t>(k * k));
    b.resize(static_cast<size_t>(k));
    for (i64 a = 0; a < k; ++a) {
      const double* ga = row(sl[static_cast<size_t>(a)]);
      double* Ga = &G[static_cast<size_t>(a * k)];
      for (i64 q = 0; q < k; ++q) Ga[q] = ga[sl[static_cast<size_t>(q)]];
      b[static_cast<size_t>(a)] = bc_[static_cast<size_t>(sl[static_cast<size_t>(a)])];
    }
  }

  // Frees the Gram cache for a new working set: keeps the features of ws_ (compacted to the
  // first slots, with their entries), drops the others.
  void evict_cache() {
    std::vector<i64> keep;
    for (i64 j : ws_)
      if (slot_[static_cast<size_t>(j)] >= 0) keep.push_back(j);
    std::vector<double> g(static_cast<size_t>(cap_ * cap_), kNaN), bc(keep.size());
    for (size_t a = 0; a < keep.size(); ++a) {
      const i64 sa = slot_[static_cast<size_t>(keep[a])];
      bc[a] = bc_[static_cast<size_t>(sa)];
      for (size_t q = 0; q < keep.size(); ++q)
        g[a * static_cast<size_t>(cap_) + q] =
            gc_[static_cast<size_t>(sa * cap_ + slot_[static_cast<size_t>(keep[q])])];
    }
    for (i64 j : cached_) slot_[static_cast<size_t>(j)] = -1;
    for (size_t a = 0; a < keep.size(); ++a) slot_[static_cast<size_t>(keep[a])] = static_cast<i64>(a);
    cached_ = keep;
    bc_.swap(bc);
    gc_.swap(g);
  }

  // Grow the Gram cache (cap_ x cap_, NaN = not computed) to hold `need` features, keeping
  // the entries already computed; capacity doubles from 64 up to kGramCap.
  void grow_cache(i64 need) {
    if (need <= cap_) return;
    i64 cap = std::max<i64>(cap_, 64);
    while (cap < need) cap *= 2;
    cap = std::min(cap, kGramCap);
    std::vector<double> g(static_cast<size_t>(cap * cap), kNaN);
    const i64 used = static_cast<i64>(cached_.size());
    for (i64 a = 0; a < used; ++a)
      std::copy_n(gc_.begin() + static_cast<std::ptrdiff_t>(a * cap_), used,
                  g.begin() + static_cast<std::ptrdiff_t>(a * cap));
    gc_.swap(g);
    cap_ = cap;
  }

  // c = b - G w over the nonzeros of w.
  static void grad(const std::vector<double>& G, const std::vector<double>& b,
                   const std::vector<double>& w, i64 k, std::vector<double>& c) {
    std::copy(b.begin(), b.end(), c.begin());
    for (i64 q = 0; q < k; ++q) {
      const double wq = w[static_cast<size_t>(q)];
      if (wq == 0.0) continue;
      const double* g = &G[static_cast<size_t>(q * k)];
      for (i64 a = 0; a < k; ++a) c[static_cast<size_t>(a)] -= wq * g[a];
    }
  }

  // Inner CD on the working set with its Gram matrix; returns the epochs used.
  i64 inner_gram(double lam, double tol_in, i64 budget) {
    const i64 k = static_cast<i64>(ws_.size());
    const double n = static_cast<double>(n_);
    const double nl = n * lam;
    std::vector<double> G, b;
    gram(G, b);
    std::vector<double> w(static_cast<size_t>(k)), c(static_cast<size_t>(k)), inv(static_cast<size_t>(k)),
        thr(static_cast<size_t>(k));
    for (i64 a = 0; a < k; ++a) {
      const i64 j = ws_[static_cast<size_t>(a)];
      w[static_cast<size_t>(a)] = w_[static_cast<size_t>(j)];
      inv[static_cast<size_t>(a)] = 1.0 / nrm2_[j];
      thr[static_cast<size_t>(a)] = nl / nrm2_[j];
    }
    grad(G, b, w, k, c);
    auto primal = [&](const std::vector<double>& wv, const std::vector<double>& cv) {
      double wb = 0.0, wc = 0.0, l1 = 0.0;
      for (i64 a = 0; a < k; ++a) {
        const double wa = wv[static_cast<size_t>(a)];
        if (wa == 0.0) continue;
        wb += wa * b[static_cast<size_t>(a)];
        wc += wa * cv[static_cast<size_t>(a)];
        l1 += std::abs(wa);
      }
      const double rr = std::max(0.0, yy_ - wb - wc);
      return std::pair<double, double>(rr / (2.0 * n) + lam * l1, wb);
    };
    const int K = opt_.anderson_k;
    std::vector<double> hist, U, A, z, w_acc, c_acc;
    if (K > 0) {
      hist.resize(static_cast<size_t>((K + 1) * k));
      U.resize(static_cast<size_t>(K * k));
      A.resize(static_cast<size_t>(K * K));
      z.resize(static_cast<size_t>(K));
      w_acc.resize(static_cast<size_t>(k));
      c_acc.resize(static_cast<size_t>(k));
    }
    int n_hist = 0;
    i64 ep = 0;
    while (ep < budget) {
      for (i64 a = 0; a < k; ++a) {
        const size_t aa = static_cast<size_t>(a);
        const double old = w[aa];
        const double nw = soft(old + c[aa] * inv[aa], thr[aa]);
        if (nw != old) {
          const double d = nw - old;
          w[aa] = nw;
          sub_scaled(c.data(), &G[static_cast<size_t>(a * k)], d, k);
        }
      }
      ++ep;
      if (K > 0) {
        std::copy(w.begin(), w.end(), hist.begin() + static_cast<std::ptrdiff_t>(n_hist * k));
        if (++n_hist == K + 1) {
          n_hist = 0;
          if (anderson_extrapolate(hist, K, k, U, A, z, w_acc)) {
            grad(G, b, w_acc, k, c_acc);
            if (primal(w_acc, c_acc).first < primal(w, c).first) {
              w.swap(w_acc);
              c.swap(c_acc);
            }
          }
        }
      }
      if (ep % kCheckEvery == 0 || ep == budget) {
        double mx = 0.0;
        for (i64 a = 0; a < k; ++a) mx = std::max(mx, std::abs(c[static_cast<size_t>(a)]));
        const auto [p, wb] = primal(w, c);
        double wc = 0.0;
        for (i64 a = 0; a < k; ++a) wc += w[static_cast<size_t>(a)] * c[static_cast<size_t>(a)];
        const double rr = std::max(0.0, yy_ - wb - wc);
        const double ry = yy_ - wb;
        const double g = p - dual_value(rr, ry, std::max(nl, mx), lam, n);
        if (g <= tol_in) break;
      }
    }
    for (i64 a = 0; a < k; ++a) w_[static_cast<size_t>(ws_[static_cast<size_t>(a)])] = w[static_cast<size_t>(a)];
    return ep;
  }

  // Inner CD on a large working set without a Gram matrix (keeps r = y - X w); epochs used.
  i64 inner_residual(double lam, double tol_in, i64 budget) {
    const i64 k = static_cast<i64>(ws_.size());
    const double n = static_cast<double>(n_);
    const double nl = n * lam;
    const int K = opt_.anderson_k;
    std::vector<double> hist, U, A, z, w(static_cast<size_t>(k)), w_acc, r_acc;
    for (i64 a = 0; a < k; ++a) w[static_cast<size_t>(a)] = w_[static_cast<size_t>(ws_[static_cast<size_t>(a)])];
    if (K > 0) {
      hist.resize(static_cast<size_t>((K + 1) * k));
      U.resize(static_cast<size_t>(K * k));
      A.resize(static_cast<size_t>(K * K));
      z.resize(static_cast<size_t>(K));
      w_acc.resize(static_cast<size_t>(k));
      r_acc.resize(static_cast<size_t>(n_));
    }
    auto primal = [&](const std::vector<double>& wv, const std::vector<double>& rv) {
      double l1 = 0.0;
      for (double v : wv) l1 += std::abs(v);
      return dot_dd(rv.data(), rv.data(), n_) / (2.0 * n) + lam * l1;
    };
    int n_hist = 0;
    i64 ep = 0;
    while (ep < budget) {
      for (i64 a = 0; a < k; ++a) {
        const size_t aa = static_cast<size_t>(a);
        const i64 j = ws_[aa];
        const double old = w[aa];
        const double cj = dot_xr(col(j), r_.data(), n_);
        const double nw = soft(old + cj / nrm2_[j], nl / nrm2_[j]);
        if (nw != old) {
          axpy(old - nw, col(j), r_.data(), n_);
          w[aa] = nw;
        }
      }
      ++ep;
      if (K > 0) {
        std::copy(w.begin(), w.end(), hist.begin() + static_cast<std::ptrdiff_t>(n_hist * k));
        if (++n_hist == K + 1) {
          n_hist = 0;
          if (anderson_extrapolate(hist, K, k, U, A, z, w_acc)) {
            std::copy(y_.begin(), y_.end(), r_acc.begin());
            for (i64 a = 0; a < k; ++a)
              if (w_acc[static_cast<size_t>(a)] != 0.0)
                axpy(-w_acc[static_cast<size_t>(a)], col(ws_[static_cast<size_t>(a)]), r_acc.data(), n_);
            if (primal(w_acc, r_acc) < primal(w, r_)) {
              w.swap(w_acc);
              r_.swap(r_acc);
            }
          }
        }
      }
      if (ep % kCheckEvery == 0 || ep == budget) {
        double mx = 0.0;
        for (i64 a = 0; a < k; ++a)
          mx = std::max(mx, std::abs(dot_xr(col(ws_[static_cast<size_t>(a)]), r_.data(), n_)));
        const double rr = dot_dd(r_.data(), r_.data(), n_);
        const double ry = dot_dd(r_.data(), y_.data(), n_);
        const double g = primal(w, r_) - dual_value(rr, ry, std::max(nl, mx), lam, n);
        if (g <= tol_in) break;
      }
    }
    for (i64 a = 0; a < k; ++a) w_[static_cast<size_t>(ws_[static_cast<size_t>(a)])] = w[static_cast<size_t>(a)];
    return ep;
  }

  const T* X_;
  i64 n_, m_;
  const double* nrm2_;
  const double* nrm_;      // column norms sqrt(nrm2_)
  const double* inv_nrm_;  // 1 / nrm_ (inf for zero columns)
  Options opt_;
  bool par_;
  int nt_;
  double yy_ = 0.0;
  double lam_ = 0.0, tol_abs_ = 0.0, gap_ = 0.0;
  double drift_ = 0.0, passes_ = 0.0;  // path length of the residual; passes over X (this lam)
  bool has_ref_ = false, has_probe_ = false;
  i64 epochs_ = 0;
  // r_ref_: residual of the last pass; q_: unit direction of the last residual step; per
  // feature: c_, g_ = x_j^T r_t, x_j^T q_t at the pass in ring slot ring_ (see bounds_impl),
  // dstamp_ = drift at t, sl_ = slack after a rebase, est_ / ub_ = estimate / upper bound of
  // x_j^T r (see begin), key_ = working-set key.
  std::vector<double> w_, c_, r_, y_, r_ref_, q_, g_, est_, ub_, dstamp_, key_, sl_;
  std::vector<std::int32_t> ring_;
  // screened_ / base_screened_ (zero columns) / skip_ (not computed by the next pass): 0 or 1.
  std::vector<u8> screened_, base_screened_, skip_;
  std::vector<i64> need_;  // need_[0, n_need_): the features of the next pass, ascending
  std::vector<i64> support_, ws_;
  std::vector<std::pair<double, i64>> keyed_;
  // Gram cache: slot_[j] indexes gc_ (cap_ x cap_, NaN = not yet computed), bc_ = x_j^T y.
  std::vector<i64> slot_, cached_, ws_slot_;
  std::vector<double> gc_, bc_;
  i64 cap_ = 0;
  struct Snapshot {
    std::vector<double> r, q;
  };
  std::vector<Snapshot> snaps_;  // ring of H_ passes (pass id t in slot t % H_)
  i64 H_ = 8;
  // Per ring slot (plus rebased_slot() and unknown_slot()): projection a, remainder e, and the
  // number of features referring to it.
  std::vector<double> ta_, te_;
  std::vector<i64> refs_;
  i64 n_snaps_ = 0, n_need_ = 0, n_cols_ = 0, n_free_ = 0;
};

}  // namespace

namespace {
// Sum of squares of one column; a NaN/inf anywhere makes the sum non-finite.
RML_SIMD_CLONES double sumsq(const double* x, i64 n) {
  double s = 0.0;
#pragma omp simd reduction(+ : s)
  for (i64 i = 0; i < n; ++i) s += x[i] * x[i];
  return s;
}

RML_SIMD_CLONES double sumsq(const float* x, i64 n) {
  double s = 0.0;
#pragma omp simd reduction(+ : s)
  for (i64 i = 0; i < n; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return s;
}
}  // namespace

template <typename T>
bool col_norm2(const T* X, i64 n, i64 m, double* out, int n_threads) {
  const int nt = n_threads > 0 ? rml::cap_threads(n_threads) : rml::max_threads();
  int finite = 1;
#pragma omp parallel for schedule(static) num_threads(nt) reduction(min : finite) if (n * m >= (i64{1} << 25))
  for (i64 j = 0; j < m; ++j) {
    const double s = sumsq(X + j * n, n);
    out[j] = s;
    if (!std::isfinite(s)) finite = 0;
  }
  return finite != 0;
}

template bool col_norm2<float>(const float*, i64, i64, double*, int);
template bool col_norm2<double>(const double*, i64, i64, double*, int);

namespace {

// Correlations of several problems sharing X in one pass over X: column blocks (kept in L2)
// are the parallel unit, and each block serves every problem, skipping the columns that
// problem has screened. maxc[a] = max_j |c_j| of problem a over its unscreened columns.
template <typename T>
void corr_shared(const T* X, i64 n, i64 m, const std::vector<Problem<T>*>& probs,
                 std::vector<double>& maxc, int nt) {
  const i64 A = static_cast<i64>(probs.size());
  maxc.assign(static_cast<size_t>(A), 0.0);
  const i64 bytes_per_col = n * static_cast<i64>(sizeof(T));
  const i64 chunk = std::max<i64>(8, std::min<i64>(256, (i64{256} << 10) / std::max<i64>(1, bytes_per_col)));
  const i64 n_chunks = (m + chunk - 1) / chunk;
  // Threads only for passes that read enough columns: on a shared machine a parallel region
  // waits for the slowest thread, which can cost a scheduler time slice (milliseconds).
  i64 work = 0;
  for (const Problem<T>* p : probs) work += p->n_need() * n;
  const bool par = nt > 1 && work >= (i64{1} << 24) && n_chunks > 1;
  std::vector<double> part(static_cast<size_t>(std::max(nt, 1) * A), 0.0);
  const std::vector<double> zeros(static_cast<size_t>(n), 0.0);  // probe of problems without one
#pragma omp parallel num_threads(nt) if (par)
  {
#ifdef _OPENMP
    const int tid = omp_get_thread_num();
#else
    const int tid = 0;
#endif
    double* mx = &part[static_cast<size_t>(tid * A)];
#pragma omp for schedule(dynamic, 1)
    for (i64 q = 0; q < n_chunks; ++q) {
      const i64 j0 = q * chunk, j1 = std::min(m, j0 + chunk);
      i64 a = 0;
      for (; a + 4 <= A; a += 4) {
        const char* scr[4];
        const double* rr[4];
        const double* qq[4];
        double* cc[4];
        double* gg[4];
        for (int q = 0; q < 4; ++q) {
          Problem<T>* p = probs[static_cast<size_t>(a + q)];
          scr[q] = p->skip_data();
          rr[q] = p->residual_data();
          qq[q] = p->probe_data();
          cc[q] = p->corr_data();
          gg[q] = p->probe_corr_data();
        }
        if (qq[0] != nullptr || qq[1] != nullptr || qq[2] != nullptr || qq[3] != nullptr) {
          for (int q = 0; q < 4; ++q)
            if (qq[q] == nullptr) qq[q] = zeros.data();
          corr_block4x2(X, n, j0, j1, scr, rr, qq, cc, gg, mx + a);
        }
        else
          corr_block4(X, n, j0, j1, scr, rr, cc, mx + a);
      }
      for (; a < A; ++a) {
        Problem<T>* p = probs[static_cast<size_t>(a)];
        const i64* first = p->need_data();
        const i64* last = first + p->n_need();
        const i64* lo = std::lower_bound(first, last, j0);
        const i64* hi = std::lower_bound(lo, last, j1);
        const double v = corr_list(X, n, lo, hi - lo, p->residual_data(), p->probe_data(),
                                   p->corr_data(), p->probe_corr_data());
        mx[a] = std::max(mx[a], v);
      }
    }
  }
  for (i64 a = 0; a < A; ++a)
    for (int t = 0; t < std::max(nt, 1); ++t)
      maxc[static_cast<size_t>(a)] = std::max(maxc[static_cast<size_t>(a)], part[static_cast<size_t>(t * A + a)]);
}

}  // namespace

template <typename T>
void path(const T* X, i64 n, i64 m, const T* Y, i64 B, const double* lambdas, i64 L,
          const double* col_norm2, const double* w0, const Options& opt, PathResult& out) {
  const size_t LB = static_cast<size_t>(L * B);
  out.gaps.assign(LB, 0.0);
  out.epochs.assign(LB, 0);
  out.passes.assign(LB, 0.0);
  std::vector<std::vector<i64>> idx(LB);
  std::vector<std::vector<double>> val(LB);
  const int nt = opt.n_threads > 0 ? rml::cap_threads(opt.n_threads) : rml::max_threads();
  // The right-hand sides are split into G interleaved groups of about 8 (at least one per
  // thread), handed out to the threads dynamically (no barrier until the end, and a thread
  // that a shared machine slows down takes fewer groups). Within a group the problems run in
  // lockstep: per round, one shared pass over X gives the correlations of every unconverged
  // problem of the group, then each of them takes its step. A single group (B = 1, or one
  // thread) may parallelise that pass over column blocks instead.
  const i64 G = nt > 1 ? std::min<i64>(B, std::max<i64>(nt, (B + 7) / 8)) : 1;
  // Residual snapshots per problem for the correlation bounds: 8..64, about 64 MiB in all.
  const i64 n_snaps = std::clamp<i64>((i64{64} << 20) / std::max<i64>(1, B * 16 * n), 8, 64);
  std::vector<double> nrm(static_cast<size_t>(m)), inv_nrm(static_cast<size_t>(m));
  for (i64 j = 0; j < m; ++j) {
    nrm[static_cast<size_t>(j)] = std::sqrt(col_norm2[j]);
    inv_nrm[static_cast<size_t>(j)] = 1.0 / nrm[static_cast<size_t>(j)];
  }
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt) if (G > 1)
  for (i64 g = 0; g < G; ++g) {
    const int nt_in = G > 1 ? 1 : nt;
    std::vector<std::unique_ptr<Problem<T>>> probs;
    std::vector<i64> ids;
    for (i64 b = g; b < B; b += G) {
      probs.emplace_back(std::make_unique<Problem<T>>(X, n, m, col_norm2, nrm.data(), inv_nrm.data(),
                                                      Y + b * n, opt,
                                                      nt_in > 1, nt_in, n_snaps));
      if (w0 != nullptr) probs.back()->set_warm(w0 + b * m);
      ids.push_back(b);
    }
    std::vector<Problem<T>*> active;
    std::vector<double> maxc;
    for (i64 l = 0; l < L; ++l) {
      active.clear();
      for (auto& p : probs) {
        p->begin(lambdas[l]);
        // From the second penalty on, the first round needs no pass (see Problem::begin).
        if (p->can_skip_pass() && p->virtual_step()) continue;
        active.push_back(p.get());
      }
      while (!active.empty()) {
        for (Problem<T>* p : active) p->prepare();
        corr_shared(X, n, m, active, maxc, nt_in);
        i64 keep = 0;
        for (size_t a = 0; a < active.size(); ++a)
          if (!active[a]->step(maxc[a])) active[static_cast<size_t>(keep++)] = active[a];
        active.resize(static_cast<size_t>(keep));
      }
      for (size_t q = 0; q < probs.size(); ++q) {
        const Problem<T>& prob = *probs[q];
        const size_t row = static_cast<size_t>(l * B + ids[q]);
        out.gaps[row] = prob.gap();
        out.epochs[row] = prob.epochs();
        out.passes[row] = prob.passes();
        const auto& w = prob.coef();
        for (i64 j : prob.support()) {
          idx[row].push_back(j);
          val[row].push_back(w[static_cast<size_t>(j)]);
        }
      }
    }
  }
  out.indptr.assign(LB + 1, 0);
  for (size_t row = 0; row < LB; ++row)
    out.indptr[row + 1] = out.indptr[row] + static_cast<i64>(idx[row].size());
  out.indices.clear();
  out.values.clear();
  out.indices.reserve(static_cast<size_t>(out.indptr[LB]));
  out.values.reserve(static_cast<size_t>(out.indptr[LB]));
  for (size_t row = 0; row < LB; ++row) {
    out.indices.insert(out.indices.end(), idx[row].begin(), idx[row].end());
    out.values.insert(out.values.end(), val[row].begin(), val[row].end());
  }
}

namespace {

// One Gram-form problem along the path (see lasso.hpp, gram_path).
void gram_problem(const double* G, const double* Xy, double yy, double n, i64 m,
                  const double* lambdas, i64 L, const double* w0, const GramOptions& opt,
                  double* coefs, double* gaps, i64* epochs) {
  const size_t M = static_cast<size_t>(m);
  std::vector<double> w(M, 0.0), c(M), inv(M, 0.0);
  std::vector<i64> live;  // features with a positive squared norm G_jj
  for (i64 j = 0; j < m; ++j) {
    const double d = G[j * m + j];
    if (d > 0.0) {
      live.push_back(j);
      inv[static_cast<size_t>(j)] = 1.0 / d;
      if (w0 != nullptr) w[static_cast<size_t>(j)] = w0[j];
    }
  }
  // c = Xy - G w, exactly (from the nonzeros of w).
  auto grad = [&](const std::vector<double>& wv, std::vector<double>& cv) {
    std::copy(Xy, Xy + m, cv.begin());
    for (i64 j : live) {
      const double wj = wv[static_cast<size_t>(j)];
      if (wj != 0.0) sub_scaled(cv.data(), G + j * m, wj, m);
    }
  };
  // Primal value and w^T Xy from w and c = Xy - G w: ||r||^2 = yy - w^T Xy - w^T c.
  auto primal = [&](const std::vector<double>& wv, const std::vector<double>& cv, double lam,
                    double* rr, double* wb) {
    double b = 0.0, wc = 0.0, l1 = 0.0;
    for (i64 j : live) {
      const double wj = wv[static_cast<size_t>(j)];
      if (wj == 0.0) continue;
      b += wj * Xy[j];
      wc += wj * cv[static_cast<size_t>(j)];
      l1 += std::abs(wj);
    }
    *rr = std::max(0.0, yy - b - wc);
    *wb = b;
    return *rr / (2.0 * n) + lam * l1;
  };
  auto gap_of = [&](double lam) {
    double rr, wb;
    const double p = primal(w, c, lam, &rr, &wb);
    double mx = 0.0;
    for (i64 j : live) mx = std::max(mx, std::abs(c[static_cast<size_t>(j)]));
    return std::max(0.0, p - dual_value(rr, yy - wb, std::max(n * lam, mx), lam, n));
  };
  grad(w, c);
  const double tol_abs = opt.tol * yy / (2.0 * n);
  const int K = opt.anderson_k;
  std::vector<double> hist, U, A, z, w_acc, c_acc;
  if (K > 0) {
    hist.resize(static_cast<size_t>(K + 1) * M);
    U.resize(static_cast<size_t>(K) * M);
    A.resize(static_cast<size_t>(K * K));
    z.resize(static_cast<size_t>(K));
    w_acc.resize(M);
    c_acc.resize(M);
  }
  // Polish: on the support S of w with its signs s, the Lasso optimum (if S and s are the
  // optimal ones) solves G_SS w_S = Xy_S - n lam s. Solved by Cholesky; the point is taken
  // when its signs are s and its objective is lower (the gap check then certifies it).
  std::vector<i64> S;
  std::vector<double> Ass, bs, wp(M), cp(M);
  auto polish = [&](double lam) {
    S.clear();
    for (i64 j : live)
      if (w[static_cast<size_t>(j)] != 0.0) S.push_back(j);
    const i64 k = static_cast<i64>(S.size());
    if (k == 0) return false;
    Ass.resize(static_cast<size_t>(k * k));
    bs.resize(static_cast<size_t>(k));
    for (i64 a = 0; a < k; ++a) {
      const double* Ga = G + S[static_cast<size_t>(a)] * m;
      for (i64 q = 0; q <= a; ++q) Ass[static_cast<size_t>(a * k + q)] = Ga[S[static_cast<size_t>(q)]];
      const double sa = w[static_cast<size_t>(S[static_cast<size_t>(a)])] > 0.0 ? 1.0 : -1.0;
      bs[static_cast<size_t>(a)] = Xy[S[static_cast<size_t>(a)]] - n * lam * sa;
    }
    // Cholesky (lower), refusing a pivot below 1e-12 of its diagonal (a near-dependent S).
    for (i64 j = 0; j < k; ++j) {
      double* Lj = &Ass[static_cast<size_t>(j * k)];
      double d = Lj[j];
      const double d0 = d;
      d -= dot_dd(Lj, Lj, j);
      if (!(d > 1e-12 * d0)) return false;
      d = std::sqrt(d);
      Lj[j] = d;
      for (i64 i = j + 1; i < k; ++i) {
        double* Li = &Ass[static_cast<size_t>(i * k)];
        Li[j] = (Li[j] - dot_dd(Li, Lj, j)) / d;
      }
    }
    for (i64 i = 0; i < k; ++i) {  // L z = b
      const double* Li = &Ass[static_cast<size_t>(i * k)];
      bs[static_cast<size_t>(i)] = (bs[static_cast<size_t>(i)] - dot_dd(Li, bs.data(), i)) / Li[i];
    }
    for (i64 i = k - 1; i >= 0; --i) {  // L^T v = z
      double v = bs[static_cast<size_t>(i)];
      for (i64 p = i + 1; p < k; ++p) v -= Ass[static_cast<size_t>(p * k + i)] * bs[static_cast<size_t>(p)];
      bs[static_cast<size_t>(i)] = v / Ass[static_cast<size_t>(i * k + i)];
    }
    std::fill(wp.begin(), wp.end(), 0.0);
    for (i64 a = 0; a < k; ++a) {
      const size_t j = static_cast<size_t>(S[static_cast<size_t>(a)]);
      const double v = bs[static_cast<size_t>(a)];
      if (!std::isfinite(v) || (v > 0.0) != (w[j] > 0.0) || v == 0.0) return false;
      wp[j] = v;
    }
    grad(wp, cp);
    double r1, b1, r2, b2;
    if (!(primal(wp, cp, lam, &r1, &b1) <= primal(w, c, lam, &r2, &b2))) return false;
    w.swap(wp);
    c.swap(cp);
    return true;
  };
  for (i64 l = 0; l < L; ++l) {
    const double lam = lambdas[l];
    const double nl = n * lam;
    i64 ep = 0;
    int n_hist = 0;
    i64 next_polish = opt.polish ? 1 : std::numeric_limits<i64>::max();
    i64 wait = 1;
    double gap = 0.0;
    while (true) {
      gap = gap_of(lam);
      if (gap <= tol_abs) {
        grad(w, c);  // certify on exact correlations (the incremental ones drift by rounding)
        gap = gap_of(lam);
        if (gap <= tol_abs) break;
      }
      if (ep >= opt.max_epochs) break;
      bool changed = false;  // support or signs changed in this epoch
      for (i64 j : live) {
        const size_t jj = static_cast<size_t>(j);
        const double old = w[jj];
        const double nw = soft(old + c[jj] * inv[jj], nl * inv[jj]);
        if (nw != old) {
          changed = changed || (old > 0.0) != (nw > 0.0) || (old < 0.0) != (nw < 0.0);
          w[jj] = nw;
          sub_scaled(c.data(), G + j * m, nw - old, m);
        }
      }
      ++ep;
      if (!changed && ep >= next_polish) {
        if (polish(lam)) {
          n_hist = 0;  // the extrapolation history is stale
          wait = 1;
          continue;
        }
        wait = std::min<i64>(2 * wait, 64);  // back off after a refused polish
        next_polish = ep + wait;
      }
      if (K > 0) {
        std::copy(w.begin(), w.end(), hist.begin() + static_cast<std::ptrdiff_t>(n_hist) * m);
        if (++n_hist == K + 1) {
          n_hist = 0;
          if (anderson_extrapolate(hist, K, m, U, A, z, w_acc)) {
            grad(w_acc, c_acc);
            double r1, b1, r2, b2;
            if (primal(w_acc, c_acc, lam, &r1, &b1) < primal(w, c, lam, &r2, &b2)) {
              w.swap(w_acc);
              c.swap(c_acc);
            }
          }
        }
      }
    }
    std::copy(w.begin(), w.end(), coefs + l * m);
    gaps[l] = gap;
    epochs[l] = ep;
  }
}

}  // namespace

void gram_path(const double* G, const double* Xy, const double* yy, const double* n, i64 P,
               i64 m, const double* lambdas, i64 L, const double* w0, const GramOptions& opt,
               double* coefs, double* gaps, i64* epochs) {
  const int nt = opt.n_threads > 0 ? rml::cap_threads(opt.n_threads) : rml::max_threads();
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt) if (nt > 1 && P > 1)
  for (i64 p = 0; p < P; ++p)
    gram_problem(G + p * m * m, Xy + p * m, yy[p], n[p], m, lambdas, L,
                 w0 == nullptr ? nullptr : w0 + p * m, opt, coefs + p * L * m, gaps + p * L,
                 epochs + p * L);
}

const char* bookkeeping_isa() { return cpu_has_avx2() ? "avx2" : "portable"; }

template void path<float>(const float*, i64, i64, const float*, i64, const double*, i64,
                          const double*, const double*, const Options&, PathResult&);
template void path<double>(const double*, i64, i64, const double*, i64, const double*, i64,
                           const double*, const double*, const Options&, PathResult&);

}  // namespace rml::lasso
