#include "nudft/nudft.hpp"
#include "nudft/row_fft.hpp"

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstring>
#include <vector>

#include "common/parallel.hpp"

// Runtime dispatch of the GEMM micro-kernels to AVX2/AVX-512 where the CPU has them, while
// the module itself stays built for the portable baseline (GCC/Clang function multiversioning).
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__) && defined(__linux__)
#define RML_MULTIVERSION __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
#else
#define RML_MULTIVERSION
#endif

namespace rml::nudft {

namespace {

constexpr double kTwoPi = 6.283185307179586476925286766559;

// 32-byte vectors via GCC/Clang vector extensions (two SSE registers on the baseline, one
// AVX register in the x86-64-v3/v4 clones); aligned(sizeof(T)) allows unaligned loads.
typedef float vf8 __attribute__((vector_size(32), aligned(4)));
typedef double vd4 __attribute__((vector_size(32), aligned(8)));
template <typename T>
struct Vec;
template <>
struct Vec<float> {
  using type = vf8;
  static constexpr int W = 8;
};
template <>
struct Vec<double> {
  using type = vd4;
  static constexpr int W = 4;
};

// C[i, j] += sum_k A[i * lda + k] * Bm[k * ldb + j] for a block of MR rows and NR columns,
// accumulators held in MR * NR / W vector registers.
template <typename T, int MR, int NR>
__attribute__((always_inline)) inline void micro_full(std::int64_t K, const T* A, std::int64_t lda, const T* Bm, std::int64_t ldb,
                       T* C, std::int64_t ldc) {
  using V = typename Vec<T>::type;
  constexpr int W = Vec<T>::W, NV = NR / W;
  V acc[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NV; ++j) acc[r][j] = V{} ;
  for (std::int64_t k = 0; k < K; ++k) {
    const T* b = Bm + k * ldb;
    V bv[NV];
    for (int j = 0; j < NV; ++j) bv[j] = *reinterpret_cast<const V*>(b + j * W);
    for (int r = 0; r < MR; ++r) {
      const T a = A[r * lda + k];
      for (int j = 0; j < NV; ++j) acc[r][j] += a * bv[j];
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NV; ++j) {
      V* c = reinterpret_cast<V*>(C + r * ldc + j * W);
      *c += acc[r][j];
    }
}

// Same with runtime row/column counts (edges).
template <typename T, int NR>
__attribute__((always_inline)) inline void micro_edge(std::int64_t mr, std::int64_t nr, std::int64_t K, const T* A,
                       std::int64_t lda, const T* Bm, std::int64_t ldb, T* C, std::int64_t ldc) {
  for (std::int64_t r = 0; r < mr; ++r) {
    T acc[NR];
    for (int j = 0; j < NR; ++j) acc[j] = T(0);
    for (std::int64_t k = 0; k < K; ++k) {
      const T a = A[r * lda + k];
      const T* b = Bm + k * ldb;
      for (std::int64_t j = 0; j < nr; ++j) acc[j] += a * b[j];
    }
    for (std::int64_t j = 0; j < nr; ++j) C[r * ldc + j] += acc[j];
  }
}

template <typename T>
struct Tile;
template <>
struct Tile<float> {
  static constexpr int MR = 4, NR = 32;  // 4 x 4 accumulators
};
template <>
struct Tile<double> {
  static constexpr int MR = 4, NR = 16;  // 4 x 4 accumulators
};

// C[I, J] += A[I, K] @ Bm[K, J] (row-major with leading dimensions).
template <typename T>
RML_MULTIVERSION void gemm_acc(std::int64_t I, std::int64_t J, std::int64_t K, const T* A,
                               std::int64_t lda, const T* Bm, std::int64_t ldb, T* C,
                               std::int64_t ldc) {
  constexpr int MR = Tile<T>::MR, NR = Tile<T>::NR;
  for (std::int64_t j0 = 0; j0 < J; j0 += NR) {
    const std::int64_t nr = std::min<std::int64_t>(NR, J - j0);
    for (std::int64_t i0 = 0; i0 < I; i0 += MR) {
      const std::int64_t mr = std::min<std::int64_t>(MR, I - i0);
      if (mr == MR && nr == NR) {
        micro_full<T, MR, NR>(K, A + i0 * lda, lda, Bm + j0, ldb, C + i0 * ldc + j0, ldc);
      } else {
        micro_edge<T, NR>(mr, nr, K, A + i0 * lda, lda, Bm + j0, ldb, C + i0 * ldc + j0, ldc);
      }
    }
  }
}

// Per-axis powers of the unit phase e^{sign i 2 pi dxi x}, k = 0..K, in double precision.
// The angle is range-reduced in cycles (t - round(t)) before sin/cos.
inline void axis_powers(double x, double dxi, std::int64_t K, int sign, std::complex<double>* p) {
  double t = dxi * x;
  t -= std::nearbyint(t);
  const double ang = kTwoPi * t;
  const std::complex<double> u(std::cos(ang), sign * std::sin(ang));
  p[0] = 1.0;
  for (std::int64_t k = 1; k <= K; ++k) p[k] = p[k - 1] * u;
}

// The phase of frequency f for a point whose axis powers are p0 (and p1 in 2-D).
inline std::complex<double> phase_at(const Grid& g, std::int64_t f, const std::complex<double>* p0,
                                     const std::complex<double>* p1) {
  if (g.dim == 1) return p0[f];
  const std::int64_t k0 = f / (g.K[1] + 1) - g.K[0];
  const std::int64_t k1 = f % (g.K[1] + 1);
  const std::complex<double> a = k0 >= 0 ? p0[k0] : std::conj(p0[-k0]);
  return a * p1[k1];
}

struct PointPowers {
  std::vector<std::complex<double>> p0, p1;
  explicit PointPowers(const Grid& g)
      : p0(static_cast<std::size_t>(g.K[0] + 1)),
        p1(static_cast<std::size_t>(g.dim == 2 ? g.K[1] + 1 : 1)) {}
  void compute(const Grid& g, const double* x, int sign) {
    axis_powers(x[0], g.dxi[0], g.K[0], sign, p0.data());
    if (g.dim == 2) axis_powers(x[1], g.dxi[1], g.K[1], sign, p1.data());
  }
};

template <typename T>
void load_point(const T* x, int dim, double* out) {
  for (int i = 0; i < dim; ++i) out[i] = static_cast<double>(x[i]);
}

constexpr std::int64_t kPointTile = 64;   // points per phase tile (type 1)
constexpr std::int64_t kQueryTile = 32;   // points per phase tile (type 2)
constexpr std::int64_t kFreqChunk = 256;  // frequencies per task (type 1)
// Below this many multiply-adds a transform runs on the calling thread: waking an OpenMP team
// costs more than it saves, and on a busy machine a team waits for its slowest member.
constexpr std::int64_t kSerialWork = std::int64_t(1) << 24;

}  // namespace

template <typename T>
void type1(const T* x, const T* v, std::int64_t B, std::int64_t N, std::int64_t C,
           const Grid& grid, int sign, T* out_re, T* out_im, T* dens_re, T* dens_im) {
  // An empty batch has nothing to write (and B = 0 would divide by zero in the task split).
  if (B <= 0) return;
  const std::int64_t F = grid.n_freq();
  const int d = grid.dim;
  // Enough tasks to keep every thread busy when B is small.
  std::int64_t chunks = (F + kFreqChunk - 1) / kFreqChunk;
  const std::int64_t want = 2 * static_cast<std::int64_t>(rml::max_threads());
  if (B * chunks < want) chunks = std::min<std::int64_t>(std::max<std::int64_t>(F / 8, 1), (want + B - 1) / B);
  chunks = std::max<std::int64_t>(chunks, 1);
  const std::int64_t fc_size = (F + chunks - 1) / chunks;
  const std::int64_t tasks = B * chunks;
  const bool parallel = B * N * F * (C + 1) >= kSerialWork && tasks > 1;

#pragma omp parallel num_threads(rml::max_threads()) if (parallel)
  {
    PointPowers pw(grid);
    std::vector<T> A(static_cast<std::size_t>(2 * fc_size * kPointTile));
    std::vector<double> dre(static_cast<std::size_t>(fc_size)), dim_(static_cast<std::size_t>(fc_size));
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t task = 0; task < tasks; ++task) {
      const std::int64_t b = task / chunks, ch = task % chunks;
      const std::int64_t f0 = ch * fc_size, f1 = std::min(F, f0 + fc_size);
      if (f0 >= f1) continue;
      const std::int64_t fc = f1 - f0;
      T* ore = out_re + (b * F + f0) * C;
      T* oim = out_im + (b * F + f0) * C;
      std::fill(ore, ore + fc * C, T(0));
      std::fill(oim, oim + fc * C, T(0));
      std::fill(dre.begin(), dre.end(), 0.0);
      std::fill(dim_.begin(), dim_.end(), 0.0);
      for (std::int64_t n0 = 0; n0 < N; n0 += kPointTile) {
        const std::int64_t nt = std::min(kPointTile, N - n0);
        for (std::int64_t j = 0; j < nt; ++j) {
          double xp[2];
          load_point(x + (b * N + n0 + j) * d, d, xp);
          pw.compute(grid, xp, sign);
          for (std::int64_t f = f0; f < f1; ++f) {
            const std::complex<double> ph = phase_at(grid, f, pw.p0.data(), pw.p1.data());
            A[static_cast<std::size_t>((f - f0) * nt + j)] = static_cast<T>(ph.real());
            A[static_cast<std::size_t>((fc + f - f0) * nt + j)] = static_cast<T>(ph.imag());
            dre[static_cast<std::size_t>(f - f0)] += ph.real();
            dim_[static_cast<std::size_t>(f - f0)] += ph.imag();
          }
        }
        if (C > 0) {
          const T* vt = v + (b * N + n0) * C;
          gemm_acc<T>(fc, C, nt, A.data(), nt, vt, C, ore, C);
          gemm_acc<T>(fc, C, nt, A.data() + fc * nt, nt, vt, C, oim, C);
        }
      }
      if (dens_re != nullptr) {
        for (std::int64_t f = f0; f < f1; ++f) {
          dens_re[b * F + f] = static_cast<T>(dre[static_cast<std::size_t>(f - f0)]);
          dens_im[b * F + f] = static_cast<T>(dim_[static_cast<std::size_t>(f - f0)]);
        }
      }
    }
  }
}

template <typename T>
void type2(const T* x, const T* re, const T* im, const T* w, std::int64_t B, std::int64_t M,
           std::int64_t O, const Grid& grid, int sign, T* y) {
  const std::int64_t F = grid.n_freq();
  const int d = grid.dim;
  const std::int64_t mchunks = (M + kQueryTile - 1) / kQueryTile;
  const std::int64_t tasks = B * mchunks;
  const bool parallel = B * M * F * O >= kSerialWork && tasks > 1;
#pragma omp parallel num_threads(rml::max_threads()) if (parallel)
  {
    PointPowers pw(grid);
    std::vector<T> A(static_cast<std::size_t>(2 * F * kQueryTile));
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t task = 0; task < tasks; ++task) {
      const std::int64_t b = task / mchunks, m0 = (task % mchunks) * kQueryTile;
      const std::int64_t mt = std::min(kQueryTile, M - m0);
      for (std::int64_t j = 0; j < mt; ++j) {
        double xp[2];
        load_point(x + (b * M + m0 + j) * d, d, xp);
        pw.compute(grid, xp, sign);
        T* row = A.data() + j * 2 * F;
        for (std::int64_t f = 0; f < F; ++f) {
          const std::complex<double> ph = phase_at(grid, f, pw.p0.data(), pw.p1.data());
          const double wf = static_cast<double>(w[f]);
          row[f] = static_cast<T>(wf * ph.real());
          row[F + f] = static_cast<T>(-wf * ph.imag());
        }
      }
      T* yt = y + (b * M + m0) * O;
      std::fill(yt, yt + mt * O, T(0));
      gemm_acc<T>(mt, O, F, A.data(), 2 * F, re + b * F * O, O, yt, O);
      gemm_acc<T>(mt, O, F, A.data() + F, 2 * F, im + b * F * O, O, yt, O);
    }
  }
}

template void type1<float>(const float*, const float*, std::int64_t, std::int64_t, std::int64_t,
                           const Grid&, int, float*, float*, float*, float*);
template void type1<double>(const double*, const double*, std::int64_t, std::int64_t,
                            std::int64_t, const Grid&, int, double*, double*, double*, double*);
template void type2<float>(const float*, const float*, const float*, const float*, std::int64_t,
                           std::int64_t, std::int64_t, const Grid&, int, float*);
template void type2<double>(const double*, const double*, const double*, const double*,
                            std::int64_t, std::int64_t, std::int64_t, const Grid&, int, double*);

// --- NUFFT spreading / interpolation ----------------------------------------------------------

namespace {

constexpr int kMaxWidth = 32;

// Kernel values at the w nodes nearest the fine-grid coordinate of x along one axis; returns
// the first node index, already reduced modulo nf into [0, nf).
//
// With u = frac(dxi x) nf, the first node is j0 = ceil(u - w/2) and node i sits at offset
// d_i = s + i - w/2 from u, where s = j0 - (u - w/2) in [0, 1). With a polynomial table
// (fg.poly, degree fg.degree, row-major [degree + 1][w], highest power first, in t = 2 s - 1)
// the w values are evaluated by Horner's rule, vectorised over the nodes (no exp / sqrt per
// node); without one, exactly.
// Horner's rule for the w = W node polynomials at once ([degree + 1][W] table, highest power
// first). With W fixed the W partial sums stay in registers; with a run-time width they went
// through memory at every degree, a store-to-load chain that cost more than the spreading FMAs.
template <int W>
__attribute__((always_inline)) inline void horner(const double* c, int degree, double t,
                                                  double* out) {
  double acc[W];
  for (int i = 0; i < W; ++i) acc[i] = c[i];
  for (int k = 1; k <= degree; ++k) {
    c += W;
    for (int i = 0; i < W; ++i) acc[i] = acc[i] * t + c[i];
  }
  for (int i = 0; i < W; ++i) out[i] = acc[i];
}

inline std::int64_t es_weights(double x, double dxi, std::int64_t nf, const FineGrid& fg,
                               double* out) {
  const int w = fg.w;
  double t = dxi * x;
  t -= std::floor(t);
  const double u = t * static_cast<double>(nf);
  const double half = 0.5 * w;
  const double j0 = std::ceil(u - half);
  if (fg.poly != nullptr) {
    const double tt = 2.0 * (j0 - (u - half)) - 1.0;
    if (w == 9) {  // the float32 2-D width (1-D weights come from axis_weights)
      horner<9>(fg.poly, fg.degree, tt, out);
    } else {
      const double* c = fg.poly;
      for (int i = 0; i < w; ++i) out[i] = c[i];
      for (int k = 1; k <= fg.degree; ++k) {
        c += w;
        for (int i = 0; i < w; ++i) out[i] = out[i] * tt + c[i];
      }
    }
  } else {
    for (int i = 0; i < w; ++i) {
      const double z = (j0 + i - u) / half;
      const double s = 1.0 - z * z;
      out[i] = s > 0.0 ? std::exp(fg.beta * (std::sqrt(s) - 1.0)) : 0.0;
    }
  }
  std::int64_t j = static_cast<std::int64_t>(j0) % nf;
  return j < 0 ? j + nf : j;
}

// Kernel weights of P points along one axis, vectorised across the points: coordinate xa[p]
// (x along that axis), first node j[p] (mod nf) and weight k[i * ld + p] of node i (ld >= P
// rounded up to 8; tt is scratch of that size). Same values as es_weights. With the polynomial
// kernel, Horner's rule runs on eight points per vector and the w node polynomials as w
// independent chains (es_weights evaluates one point at a time: a chain of degree dependent
// FMAs per point).
template <int W>
__attribute__((always_inline)) inline void horner_block(const double* c, int degree,
                                                        const double* tt, std::int64_t P,
                                                        double* k, std::int64_t ld) {
  typedef double V __attribute__((vector_size(64)));
  for (std::int64_t p0 = 0; p0 < P; p0 += 8) {
    V t;
    std::memcpy(&t, tt + p0, sizeof(V));
    V acc[W];
    for (int i = 0; i < W; ++i) acc[i] = V{} + c[i];
    for (int d = 1; d <= degree; ++d) {
      const double* cd = c + d * W;
      for (int i = 0; i < W; ++i) acc[i] = acc[i] * t + cd[i];
    }
    for (int i = 0; i < W; ++i) std::memcpy(k + i * ld + p0, &acc[i], sizeof(V));
  }
}

RML_MULTIVERSION void axis_weights(const double* xa, std::int64_t P, int axis, const FineGrid& fg,
                                   std::int64_t* j, double* tt, double* k, std::int64_t ld) {
  const int w = fg.w;
  const std::int64_t nf = fg.nf[axis];
  const double nfd = static_cast<double>(nf), half = 0.5 * w, dxi = fg.dxi[axis];
  const std::int64_t Pv = (P + 7) / 8 * 8;
  for (std::int64_t p = 0; p < P; ++p) {
    double t = dxi * xa[p];
    t -= std::floor(t);
    const double u = t * nfd;
    const double j0 = std::ceil(u - half);
    tt[p] = 2.0 * (j0 - (u - half)) - 1.0;  // t = 2 s - 1, s = j0 - (u - w/2) in [0, 1)
    std::int64_t jj = static_cast<std::int64_t>(j0) % nf;
    j[p] = jj < 0 ? jj + nf : jj;
  }
  for (std::int64_t p = P; p < Pv; ++p) tt[p] = 0.0;
  if (fg.poly != nullptr && w == 7) {
    horner_block<7>(fg.poly, fg.degree, tt, Pv, k, ld);
  } else if (fg.poly != nullptr && w == 8) {
    horner_block<8>(fg.poly, fg.degree, tt, Pv, k, ld);
  } else if (fg.poly != nullptr && w == 9) {
    horner_block<9>(fg.poly, fg.degree, tt, Pv, k, ld);
  } else if (fg.poly != nullptr) {
    for (std::int64_t p = 0; p < P; ++p) {
      const double* c = fg.poly;
      for (int i = 0; i < w; ++i) k[i * ld + p] = c[i];
      for (int d = 1; d <= fg.degree; ++d) {
        c += w;
        for (int i = 0; i < w; ++i) k[i * ld + p] = k[i * ld + p] * tt[p] + c[i];
      }
    }
  } else {
    for (std::int64_t p = 0; p < P; ++p) {
      const double sp = 0.5 * (tt[p] + 1.0);  // node i sits at offset s + i - w/2 from u
      for (int i = 0; i < w; ++i) {
        const double z = (sp + i - half) / half;
        const double q = 1.0 - z * z;
        k[i * ld + p] = q > 0.0 ? std::exp(fg.beta * (std::sqrt(q) - 1.0)) : 0.0;
      }
    }
  }
}

// The periodic 2-D stencil of one point for the scatter-form spreading (spread_one): calls
// visit(cell, weight) for the w^2 fine-grid cells (row-major index) around the point, with the
// tensor-product kernel weight. Inlined into the caller's (multiversioned) loop. (1-D
// spreading is in gather form and interpolation batches its weights: axis_weights.)
template <typename T, typename Visit>
__attribute__((always_inline)) inline void visit_stencil(const FineGrid& fg, const T* xp,
                                                         Visit&& visit) {
  const int w = fg.w;
  const std::int64_t nf0 = fg.nf[0];
  double k0[kMaxWidth];
  const std::int64_t j0 = es_weights(static_cast<double>(xp[0]), fg.dxi[0], nf0, fg, k0);
  const std::int64_t nf1 = fg.nf[1];
  double k1[kMaxWidth];
  const std::int64_t j1 = es_weights(static_cast<double>(xp[1]), fg.dxi[1], nf1, fg, k1);
  for (int i = 0; i < w; ++i) {
    std::int64_t r0 = j0 + i;
    if (r0 >= nf0) r0 -= nf0;
    const std::int64_t base = r0 * nf1;
    for (int l = 0; l < w; ++l) {
      std::int64_t r1 = j1 + l;
      if (r1 >= nf1) r1 -= nf1;
      visit(base + r1, static_cast<T>(k0[i] * k1[l]));
    }
  }
}

// Points are visited in grid-cell order, so their value rows are gathered from memory: prefetch
// the rows (and positions) of the point kPrefetch visits ahead (a row of C floats spans C / 16
// cache lines). Measured: the gather otherwise costs 2.5x the arithmetic at B = 64, N = 5000.
constexpr std::int64_t kPrefetch = 4;

template <typename T>
__attribute__((always_inline)) inline void prefetch_row(const T* row, std::int64_t n, int rw) {
  const char* p = reinterpret_cast<const char*>(row);
  const std::int64_t bytes = n * static_cast<std::int64_t>(sizeof(T));
  for (std::int64_t off = 0; off < bytes; off += 64) {
    if (rw) {
      __builtin_prefetch(p + off, 1, 3);
    } else {
      __builtin_prefetch(p + off, 0, 3);
    }
  }
}

// out[0, n) = sum_s wt[s] * rows[s][0, n): the register-blocked core of the gather-form
// spreading and of the interpolation. Channel blocks of four 64-byte vectors stay in
// registers across all S rows and are stored once (the scatter form loaded and stored the
// output row once per row: on Zen 4 the 64-byte stores, most of them split across cache lines
// by the C + 1 channel stride, cost more than the FMAs).
template <typename T>
__attribute__((always_inline)) inline void weighted_rows(std::int64_t n, std::int64_t S,
                                                         const T* const* rows, const T* wt,
                                                         T* out) {
  typedef T V __attribute__((vector_size(64)));
  constexpr std::int64_t L = 64 / sizeof(T);
  std::int64_t c = 0;
  for (; c + 4 * L <= n; c += 4 * L) {
    V a0 = {}, a1 = {}, a2 = {}, a3 = {};
    for (std::int64_t s = 0; s < S; ++s) {
      const T* p = rows[s] + c;
      V x0, x1, x2, x3;
      std::memcpy(&x0, p, sizeof(V));
      std::memcpy(&x1, p + L, sizeof(V));
      std::memcpy(&x2, p + 2 * L, sizeof(V));
      std::memcpy(&x3, p + 3 * L, sizeof(V));
      const T k = wt[s];
      a0 += k * x0;
      a1 += k * x1;
      a2 += k * x2;
      a3 += k * x3;
    }
    std::memcpy(out + c, &a0, sizeof(V));
    std::memcpy(out + c + L, &a1, sizeof(V));
    std::memcpy(out + c + 2 * L, &a2, sizeof(V));
    std::memcpy(out + c + 3 * L, &a3, sizeof(V));
  }
  for (; c + L <= n; c += L) {
    V a = {};
    for (std::int64_t s = 0; s < S; ++s) {
      V x;
      std::memcpy(&x, rows[s] + c, sizeof(V));
      a += wt[s] * x;
    }
    std::memcpy(out + c, &a, sizeof(V));
  }
  for (; c < n; ++c) {
    T a = T(0);
    for (std::int64_t s = 0; s < S; ++s) a += wt[s] * rows[s][c];
    out[c] = a;
  }
}

// Scratch of the 1-D gather-form spreading, reused across the batch elements of one thread.
template <typename T>
struct GatherScratch {
  std::vector<double> xa, tt, k;                // coordinates, scratch, weights [w, ld] by point
  std::vector<std::int64_t> first, start, cur;  // first stencil node; counting sort by it
  std::vector<T> ks, vs;                        // weights [w, N] and values [N, C], sorted
  std::vector<const T*> rows;                   // per cell: the value rows of its points
  std::vector<T> cw;                            // per cell: their weights
};

// 1-D spreading in gather form: grid row r = sum over the points whose stencil covers r
// (first node j0 in r - w + 1 .. r) of weight * value row, accumulated in registers and
// written once; every row is overwritten (no zeroing needed). Row r (Cg = C + ones values) is
// written at (r even ? even : odd) + (r / 2) pair_ld: the grid [nf, Cg] itself with even = g,
// odd = g + Cg, pair_ld = 2 Cg, or the split planes of a packed real FFT. The points are
// counting-sorted by j0 and their value rows copied into that order first (read in memory
// order, so the gather below streams through a contiguous, cache-resident copy). Same sums as
// the scatter form (spread_one), in another order.
template <typename T>
RML_MULTIVERSION void spread_gather_1d(const T* xb, const T* vb, std::int64_t N, std::int64_t C,
                                       bool ones, const FineGrid& fg, GatherScratch<T>& s,
                                       T* even, T* odd, std::int64_t pair_ld) {
  const int w = fg.w;
  const std::int64_t nf = fg.nf[0], ld = (N + 7) / 8 * 8;
  const auto sz = [](std::int64_t n) { return static_cast<std::size_t>(n); };
  s.xa.resize(sz(N));
  s.tt.resize(sz(ld));
  s.k.resize(sz(w * ld));
  s.first.resize(sz(N));
  s.start.assign(sz(nf + 1), 0);
  s.ks.resize(sz(w * N));
  s.vs.resize(sz(N * C));
  s.rows.resize(sz(N));
  s.cw.resize(sz(N));
  for (std::int64_t n = 0; n < N; ++n) s.xa[sz(n)] = static_cast<double>(xb[n]);
  axis_weights(s.xa.data(), N, 0, fg, s.first.data(), s.tt.data(), s.k.data(), ld);
  for (std::int64_t n = 0; n < N; ++n) ++s.start[sz(s.first[sz(n)] + 1)];
  for (std::int64_t c = 0; c < nf; ++c) s.start[sz(c + 1)] += s.start[sz(c)];
  s.cur.assign(s.start.begin(), s.start.end() - 1);
  T* vs = s.vs.data();
  T* ks = s.ks.data();
  const double* k = s.k.data();
  for (std::int64_t n = 0; n < N; ++n) {
    const std::int64_t q = s.cur[sz(s.first[sz(n)])]++;
    std::memcpy(vs + q * C, vb + n * C, sizeof(T) * static_cast<std::size_t>(C));
    for (int t = 0; t < w; ++t) ks[t * N + q] = static_cast<T>(k[t * ld + n]);
  }
  const T** rows = s.rows.data();
  T* cw = s.cw.data();
  for (std::int64_t r = 0; r < nf; ++r) {
    std::int64_t S = 0;
    T dens = T(0);
    for (int t = 0; t < w; ++t) {
      std::int64_t c = r - t;
      if (c < 0) c += nf;
      const T* kt = ks + t * N;
      for (std::int64_t q = s.start[sz(c)]; q < s.start[sz(c + 1)]; ++q) {
        rows[S] = vs + q * C;
        cw[S] = kt[q];
        dens += kt[q];
        ++S;
      }
    }
    T* row = ((r & 1) != 0 ? odd : even) + (r >> 1) * pair_ld;
    weighted_rows<T>(C, S, rows, cw, row);
    if (ones) row[C] = dens;
  }
}

// Spreads the points of one batch element onto its (zeroed) 2-D grid gb [cells, Cg] in scatter
// form: channel-contiguous axpy per stencil cell, the density channel (ones) last.
template <typename T>
RML_MULTIVERSION void spread_one(const T* xb, const T* vb, const std::int64_t* order,
                                 std::int64_t N, std::int64_t C, bool ones, const FineGrid& fg,
                                 T* gb) {
  const std::int64_t Cg = C + (ones ? 1 : 0);
  for (std::int64_t q = 0; q < N; ++q) {
    const std::int64_t n = order != nullptr ? order[q] : q;
    if (order != nullptr && q + kPrefetch < N) {
      const std::int64_t nn = order[q + kPrefetch];
      prefetch_row(vb + nn * C, C, 0);
      __builtin_prefetch(xb + nn * fg.dim, 0, 3);
    }
    const T* __restrict vn = vb + n * C;
    visit_stencil<T>(fg, xb + n * fg.dim, [&](std::int64_t cell, T k) {
      T* __restrict row = gb + cell * Cg;
      for (std::int64_t c = 0; c < C; ++c) row[c] += k * vn[c];
      if (ones) row[C] += k;
    });
  }
}

// Interpolates the grid gb [cells, O] of one batch element at the points q in [m0, m1): per
// block of kBlock points the axis weights are computed together (axis_weights), then the w^d
// stencil rows of each point are summed in registers per channel block (weighted_rows).
constexpr std::int64_t kBlock = 64;
template <typename T>
RML_MULTIVERSION void interp_some(const T* xb, const T* gb, const std::int64_t* order,
                                  std::int64_t m0, std::int64_t m1, std::int64_t O,
                                  const FineGrid& fg, T* yb) {
  const int d = fg.dim, w = fg.w;
  const std::int64_t nf0 = fg.nf[0], nf1 = d == 2 ? fg.nf[1] : 1;
  double xa[kBlock], tt[kBlock], k0[kMaxWidth * kBlock], k1[kMaxWidth * kBlock];
  std::int64_t idx[kBlock], j0[kBlock], j1[kBlock];
  const T* rows[kMaxWidth * kMaxWidth];
  T wt[kMaxWidth * kMaxWidth];
  for (std::int64_t b0 = m0; b0 < m1; b0 += kBlock) {
    const std::int64_t P = std::min(kBlock, m1 - b0);
    for (std::int64_t p = 0; p < P; ++p) idx[p] = order != nullptr ? order[b0 + p] : b0 + p;
    for (std::int64_t p = 0; p < P; ++p) xa[p] = static_cast<double>(xb[idx[p] * d]);
    axis_weights(xa, P, 0, fg, j0, tt, k0, kBlock);
    if (d == 2) {
      for (std::int64_t p = 0; p < P; ++p) xa[p] = static_cast<double>(xb[idx[p] * d + 1]);
      axis_weights(xa, P, 1, fg, j1, tt, k1, kBlock);
    }
    for (std::int64_t p = 0; p < P; ++p) {
      if (order != nullptr && p + kPrefetch < P) prefetch_row(yb + idx[p + kPrefetch] * O, O, 1);
      std::int64_t S = 0;
      for (int i = 0; i < w; ++i) {
        std::int64_t r0 = j0[p] + i;
        if (r0 >= nf0) r0 -= nf0;
        if (d == 1) {
          rows[S] = gb + r0 * O;
          wt[S++] = static_cast<T>(k0[i * kBlock + p]);
          continue;
        }
        for (int l = 0; l < w; ++l) {
          std::int64_t r1 = j1[p] + l;
          if (r1 >= nf1) r1 -= nf1;
          rows[S] = gb + (r0 * nf1 + r1) * O;
          wt[S++] = static_cast<T>(k0[i * kBlock + p] * k1[l * kBlock + p]);
        }
      }
      weighted_rows<T>(O, S, rows, wt, yb + idx[p] * O);
    }
  }
}

}  // namespace

// Visiting order of the points of one batch element, sorted by fine-grid cell so that
// consecutive points touch the same or nearby grid rows (their stencils overlap: the rows stay in
// cache instead of being fetched from memory per point). Counting sort over the cells of axis 0.
// Only worth it when the grid of one batch element does not fit in L2 (sorted points gather
// their value / output rows out of order); below kSortBytes the points keep their order.
constexpr std::int64_t kSortBytes = std::int64_t(256) << 10;
template <typename T>
void point_order(const T* x, std::int64_t P, const FineGrid& fg, std::vector<std::int64_t>& order,
                 std::vector<std::int64_t>& key) {
  const int d = fg.dim;
  const std::int64_t nb = fg.nf[0];
  order.resize(static_cast<std::size_t>(P));

  key.assign(static_cast<std::size_t>(nb + 1) + static_cast<std::size_t>(P), 0);
  std::int64_t* count = key.data();
  std::int64_t* cell = key.data() + nb + 1;
  for (std::int64_t p = 0; p < P; ++p) {
    double t = fg.dxi[0] * static_cast<double>(x[p * d]);
    t -= std::floor(t);
    const auto c = std::min<std::int64_t>(nb - 1, static_cast<std::int64_t>(t * static_cast<double>(nb)));
    cell[p] = c;
    ++count[c + 1];
  }
  for (std::int64_t c = 0; c < nb; ++c) count[c + 1] += count[c];
  for (std::int64_t p = 0; p < P; ++p) order[static_cast<std::size_t>(count[cell[p]]++)] = p;
}

template <typename T>
void spread(const T* x, const T* v, std::int64_t B, std::int64_t N, std::int64_t C, bool ones,
            const FineGrid& fg, T* g) {
  const int d = fg.dim, w = fg.w;
  const std::int64_t cells = fg.nf[0] * (d == 2 ? fg.nf[1] : 1);
  const std::int64_t Cg = C + (ones ? 1 : 0);  // grid channels (a ones channel last)
  const bool parallel = B > 1 && B * N * Cg * w * (d == 2 ? w : 1) >= kSerialWork / 4;
#pragma omp parallel num_threads(rml::max_threads()) if (parallel)
  {
    std::vector<std::int64_t> order, key;
    GatherScratch<T> scratch;
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t b = 0; b < B; ++b) {
      T* gb = g + b * cells * Cg;
      if (d == 1) {
        spread_gather_1d<T>(x + b * N, v + b * N * C, N, C, ones, fg, scratch, gb, gb + Cg, 2 * Cg);
        continue;
      }
      std::fill(gb, gb + cells * Cg, T(0));
      const T* xb = x + b * N * d;
      const bool sort = cells * Cg * static_cast<std::int64_t>(sizeof(T)) > kSortBytes;
      if (sort) point_order(xb, N, fg, order, key);
      spread_one<T>(xb, v + b * N * C, sort ? order.data() : nullptr, N, C, ones, fg, gb);
    }
  }
}

template <typename T>
void interp(const T* x, const T* g, std::int64_t B, std::int64_t M, std::int64_t O,
            const FineGrid& fg, T* y) {
  const int d = fg.dim, w = fg.w;
  const std::int64_t cells = fg.nf[0] * (d == 2 ? fg.nf[1] : 1);
  const std::int64_t chunk = 64;  // points per task
  const std::int64_t mchunks = (M + chunk - 1) / chunk;
  const bool parallel = B * mchunks > 1 && B * M * O * w * (d == 2 ? w : 1) >= kSerialWork / 4;
  // Per batch element the points in grid-cell order (computed once, shared by the tasks).
  const bool sort = cells * O * static_cast<std::int64_t>(sizeof(T)) > kSortBytes;
  std::vector<std::vector<std::int64_t>> orders(static_cast<std::size_t>(sort ? B : 0));
  if (sort) {
#pragma omp parallel num_threads(rml::max_threads()) if (parallel)
  {
    std::vector<std::int64_t> key;
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t b = 0; b < B; ++b)
      point_order(x + b * M * d, M, fg, orders[static_cast<std::size_t>(b)], key);
  }
  }
#pragma omp parallel for num_threads(rml::max_threads()) schedule(dynamic, 1) if (parallel)
  for (std::int64_t task = 0; task < B * mchunks; ++task) {
    const std::int64_t b = task / mchunks, m0 = (task % mchunks) * chunk;
    const std::int64_t m1 = std::min(M, m0 + chunk);
    const std::int64_t* order = sort ? orders[static_cast<std::size_t>(b)].data() : nullptr;
    interp_some<T>(x + b * M * d, g + b * cells * O, order, m0, m1, O, fg, y + b * M * O);
  }
}

namespace {

// 1-D interpolation from a grid whose row j sits at (j even ? even : odd) + (j / 2) pair_ld
// (see spread_gather_1d): y[m, o] = sum_i phi_i(x_m) row(j0(x_m) + i)[o].
template <typename T>
RML_MULTIVERSION void interp_pairs_1d(const T* xb, std::int64_t M, std::int64_t O,
                                      const FineGrid& fg, const T* even, const T* odd,
                                      std::int64_t pair_ld, T* yb) {
  const int w = fg.w;
  const std::int64_t nf = fg.nf[0];
  double xa[kBlock], tt[kBlock], k0[kMaxWidth * kBlock];
  std::int64_t j0[kBlock];
  const T* rows[kMaxWidth];
  T wt[kMaxWidth];
  for (std::int64_t b0 = 0; b0 < M; b0 += kBlock) {
    const std::int64_t P = std::min(kBlock, M - b0);
    for (std::int64_t p = 0; p < P; ++p) xa[p] = static_cast<double>(xb[b0 + p]);
    axis_weights(xa, P, 0, fg, j0, tt, k0, kBlock);
    for (std::int64_t p = 0; p < P; ++p) {
      for (int i = 0; i < w; ++i) {
        std::int64_t r = j0[p] + i;
        if (r >= nf) r -= nf;
        rows[i] = ((r & 1) != 0 ? odd : even) + (r >> 1) * pair_ld;
        wt[i] = static_cast<T>(k0[i * kBlock + p]);
      }
      weighted_rows<T>(O, w, rows, wt, yb + (b0 + p) * O);
    }
  }
}

// Packed real FFT, forward half: from Z = DFT_h(z), z_m = g_{2m} + i g_{2m+1} (planes zr, zi
// [h, ld]), the spectrum X_k = E_k + e^{-2 pi i k / n} O_k of the real g (n = 2h) for
// k = 0..K, with E_k = (Z_k + conj Z_{h-k}) / 2, O_k = (Z_k - conj Z_{h-k}) / (2i), written as
// re = scale_k Re X_k, im = sign_im scale_k Im X_k for channels < C and channel C (the density)
// into dre / dim when given.
template <typename T>
RML_MULTIVERSION void unpack_modes(const T* zr, const T* zi, std::int64_t h, std::int64_t ld,
                                   std::int64_t C, std::int64_t K, const double* scale,
                                   int sign_im, T* re, T* im, T* dre, T* dim) {
  const double n = 2.0 * static_cast<double>(h);
  for (std::int64_t k = 0; k <= K; ++k) {
    const std::int64_t kc = k == 0 ? 0 : h - k;
    const double th = kTwoPi * static_cast<double>(k) / n;
    const T sc = static_cast<T>(scale[k]), si = static_cast<T>(sign_im * scale[k]);
    const T cs = static_cast<T>(0.5 * std::cos(th)), sn = static_cast<T>(0.5 * std::sin(th));
    const T* __restrict ar = zr + k * ld;
    const T* __restrict ai = zi + k * ld;
    const T* __restrict br = zr + kc * ld;
    const T* __restrict bi = zi + kc * ld;
    T* __restrict ro = re + k * C;
    T* __restrict io = im + k * C;
    const auto mode = [&](std::int64_t c, T& xr, T& xi) {
      // 2E = a + conj b, 2O = -i (a - conj b); X = E + (cos - i sin) O.
      const T er = ar[c] + br[c], ei = ai[c] - bi[c];
      const T orr = ai[c] + bi[c], oi = br[c] - ar[c];
      xr = T(0.5) * er + cs * orr + sn * oi;
      xi = T(0.5) * ei + cs * oi - sn * orr;
    };
    for (std::int64_t c = 0; c < C; ++c) {
      T xr, xi;
      mode(c, xr, xi);
      ro[c] = sc * xr;
      io[c] = si * xi;
    }
    if (dre != nullptr) {
      T xr, xi;
      mode(C, xr, xi);
      dre[k] = sc * xr;
      dim[k] = si * xi;
    }
  }
}

// Packed real FFT, inverse half: the planes Z (zr, zi [h, ld]) whose inverse DFT_h gives
// z_m = g_{2m} + i g_{2m+1} for g = irfft(X, n = 2h) (numpy's normalisation, 1 / n), where
// X_k = scale_k (re_k + i sign_im im_k) for k = 1..K, X_0 = scale_0 re_0 and X_k = 0 above K:
// Z_k = (E_k + i O_k) 2 / n with E_k = (X_k + conj X_{h-k}) / 2,
// O_k = e^{2 pi i k / n} (X_k - conj X_{h-k}) / 2.
template <typename T>
RML_MULTIVERSION void pack_modes(const T* re, const T* im, std::int64_t O, std::int64_t K,
                                 const double* scale, int sign_im, std::int64_t h,
                                 std::int64_t ld, T* zr, T* zi) {
  const double n = 2.0 * static_cast<double>(h);
  for (std::int64_t k = 0; k < h; ++k) {
    const std::int64_t kb = h - k;  // X_{h-k} (X_h = 0: K < h)
    const bool has_a = k <= K, has_b = k > 0 && kb <= K;
    T* __restrict outr = zr + k * ld;
    T* __restrict outi = zi + k * ld;
    if (!has_a && !has_b) {
      for (std::int64_t o = 0; o < O; ++o) outr[o] = outi[o] = T(0);
      continue;
    }
    const double th = kTwoPi * static_cast<double>(k) / n;
    const T cs = static_cast<T>(std::cos(th) / n), sn = static_cast<T>(std::sin(th) / n);
    const T inv = static_cast<T>(1.0 / n);
    const T sa = has_a ? static_cast<T>(scale[k]) : T(0);
    const T sai = has_a && k > 0 ? static_cast<T>(sign_im * scale[k]) : T(0);
    const T sb = has_b ? static_cast<T>(scale[kb]) : T(0);
    const T sbi = has_b ? static_cast<T>(sign_im * scale[kb]) : T(0);
    const T* __restrict rar = re + (has_a ? k : 0) * O;
    const T* __restrict rai = im + (has_a ? k : 0) * O;
    const T* __restrict rbr = re + (has_b ? kb : 0) * O;
    const T* __restrict rbi = im + (has_b ? kb : 0) * O;
    for (std::int64_t o = 0; o < O; ++o) {
      const T ar = sa * rar[o], ai = sai * rai[o];
      const T br = sb * rbr[o], bi = -sbi * rbi[o];  // conj X_{h-k}
      const T er = ar + br, ei = ai + bi;             // 2 E
      const T dr = ar - br, di = ai - bi;             // 2 e^{-i th} O
      const T orr = cs * dr - sn * di, oi = cs * di + sn * dr;  // (2 / n) O
      outr[o] = inv * er - oi;                        // (2 / n) (E + i O)
      outi[o] = inv * ei + orr;
    }
  }
}

// Per-thread work space of the fused 1-D transforms: four [h, ld] planes (zero-initialised so
// that the padding lanes [channels, ld) stay finite) and the gather scratch.
template <typename T>
struct FusedScratch {
  std::vector<T> planes;
  GatherScratch<T> gather;
  T *zr, *zi, *wr, *wi;  // the transform's planes and its work planes, [h, ld] each
  FusedScratch(std::int64_t h, std::int64_t ld)
      : planes(static_cast<std::size_t>(4 * h * ld), T(0)),
        zr(planes.data()),
        zi(zr + h * ld),
        wr(zi + h * ld),
        wi(wr + h * ld) {}
};

template <typename T>
std::int64_t padded(std::int64_t n) {
  constexpr std::int64_t L = 64 / sizeof(T);
  return (n + L - 1) / L * L;
}

}  // namespace

template <typename T>
void nufft1_1d(const T* x, const T* v, std::int64_t B, std::int64_t N, std::int64_t C,
               bool density, const FineGrid& fg, std::int64_t K, const double* scale,
               int sign_im, T* re, T* im, T* dens_re, T* dens_im) {
  const std::int64_t nf = fg.nf[0], h = nf / 2, Cg = C + (density ? 1 : 0);
  const std::int64_t ld = padded<T>(Cg), F = K + 1;
  const RowFFT<T> fft(h, -1);
  const bool parallel = B > 1 && B * N * Cg * fg.w >= kSerialWork / 4;
#pragma omp parallel num_threads(rml::max_threads()) if (parallel)
  {
    FusedScratch<T> s(h, ld);
    T *zr = s.zr, *zi = s.zi, *wr = s.wr, *wi = s.wi;
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t b = 0; b < B; ++b) {
      spread_gather_1d<T>(x + b * N, v + b * N * C, N, C, density, fg, s.gather, zr, zi, ld);
      const bool in_z = fft.run(zr, zi, wr, wi, ld);
      unpack_modes<T>(in_z ? zr : wr, in_z ? zi : wi, h, ld, C, K, scale, sign_im,
                      re + b * F * C, im + b * F * C, density ? dens_re + b * F : nullptr,
                      density ? dens_im + b * F : nullptr);
    }
  }
}

template <typename T>
void nufft2_1d(const T* x, const T* re, const T* im, std::int64_t B, std::int64_t M,
               std::int64_t O, const FineGrid& fg, std::int64_t K, const double* scale,
               int sign_im, T* y) {
  const std::int64_t nf = fg.nf[0], h = nf / 2, ld = padded<T>(O), F = K + 1;
  const RowFFT<T> ifft(h, +1);
  const bool parallel = B > 1 && B * M * O * fg.w >= kSerialWork / 4;
#pragma omp parallel num_threads(rml::max_threads()) if (parallel)
  {
    FusedScratch<T> s(h, ld);
    T *zr = s.zr, *zi = s.zi, *wr = s.wr, *wi = s.wi;
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t b = 0; b < B; ++b) {
      pack_modes<T>(re + b * F * O, im + b * F * O, O, K, scale, sign_im, h, ld, zr, zi);
      const bool in_z = ifft.run(zr, zi, wr, wi, ld);
      interp_pairs_1d<T>(x + b * M, M, O, fg, in_z ? zr : wr, in_z ? zi : wi, ld, y + b * M * O);
    }
  }
}

template void nufft1_1d<float>(const float*, const float*, std::int64_t, std::int64_t,
                               std::int64_t, bool, const FineGrid&, std::int64_t, const double*,
                               int, float*, float*, float*, float*);
template void nufft1_1d<double>(const double*, const double*, std::int64_t, std::int64_t,
                                std::int64_t, bool, const FineGrid&, std::int64_t,
                                const double*, int, double*, double*, double*, double*);
template void nufft2_1d<float>(const float*, const float*, const float*, std::int64_t,
                               std::int64_t, std::int64_t, const FineGrid&, std::int64_t,
                               const double*, int, float*);
template void nufft2_1d<double>(const double*, const double*, const double*, std::int64_t,
                                std::int64_t, std::int64_t, const FineGrid&, std::int64_t,
                                const double*, int, double*);

namespace {

// Rows / columns of the spectrum array and the (row, column) cell of frequency f.
struct ModeMap {
  std::int64_t rows, cols, K0, K1;
  int dim;
  explicit ModeMap(const SpectrumShape& sh)
      : rows(sh.rows), cols(sh.dim == 1 ? 1 : sh.cols), K0(sh.K[0]), K1(sh.dim == 2 ? sh.K[1] : 0), dim(sh.dim) {}
  std::int64_t n_freq() const { return dim == 1 ? K0 + 1 : (2 * K0 + 1) * (K1 + 1); }
  std::int64_t cell(std::int64_t f) const {
    if (dim == 1) return f;
    std::int64_t k0 = f / (K1 + 1) - K0;
    const std::int64_t k1 = f % (K1 + 1);
    if (k0 < 0) k0 += rows;
    return k0 * cols + k1;
  }
};

}  // namespace

template <typename T>
void modes_out(const T* S, std::int64_t B, std::int64_t Cg, std::int64_t C,
               const SpectrumShape& sh, const double* scale, int sign_im, T* re, T* im,
               T* dens_re, T* dens_im) {
  const ModeMap mm(sh);
  const std::int64_t F = mm.n_freq(), cells = mm.rows * mm.cols;
  const bool parallel = B * F * Cg >= kSerialWork / 8 && B > 1;
#pragma omp parallel for num_threads(rml::max_threads()) schedule(static) if (parallel)
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t f = 0; f < F; ++f) {
      const T* src = S + 2 * (b * cells + mm.cell(f)) * Cg;
      const T sr = static_cast<T>(scale[f]), si = static_cast<T>(sign_im * scale[f]);
      T* __restrict r = re + (b * F + f) * C;
      T* __restrict i = im + (b * F + f) * C;
      for (std::int64_t c = 0; c < C; ++c) {
        r[c] = sr * src[2 * c];
        i[c] = si * src[2 * c + 1];
      }
      if (dens_re != nullptr) {
        dens_re[b * F + f] = sr * src[2 * C];
        dens_im[b * F + f] = si * src[2 * C + 1];
      }
    }
  }
}

template <typename T>
void modes_in(const T* re, const T* im, std::int64_t B, std::int64_t O, const SpectrumShape& sh,
              const double* scale, int sign_im, T* X) {
  const ModeMap mm(sh);
  const std::int64_t F = mm.n_freq(), cells = mm.rows * mm.cols;
  const bool parallel = B * cells * O >= kSerialWork / 8 && B > 1;
#pragma omp parallel for num_threads(rml::max_threads()) schedule(static) if (parallel)
  for (std::int64_t b = 0; b < B; ++b) {
    T* Xb = X + 2 * b * cells * O;
    std::fill(Xb, Xb + 2 * cells * O, T(0));
    for (std::int64_t f = 0; f < F; ++f) {
      T* __restrict dst = Xb + 2 * mm.cell(f) * O;
      const T sr = static_cast<T>(scale[f]), si = static_cast<T>(sign_im * scale[f]);
      const T* __restrict r = re + (b * F + f) * O;
      const T* __restrict i = im + (b * F + f) * O;
      for (std::int64_t o = 0; o < O; ++o) {
        dst[2 * o] = sr * r[o];
        dst[2 * o + 1] = si * i[o];
      }
    }
  }
}

template void modes_out<float>(const float*, std::int64_t, std::int64_t, std::int64_t,
                               const SpectrumShape&, const double*, int, float*, float*, float*,
                               float*);
template void modes_out<double>(const double*, std::int64_t, std::int64_t, std::int64_t,
                                const SpectrumShape&, const double*, int, double*, double*,
                                double*, double*);
template void modes_in<float>(const float*, const float*, std::int64_t, std::int64_t,
                              const SpectrumShape&, const double*, int, float*);
template void modes_in<double>(const double*, const double*, std::int64_t, std::int64_t,
                               const SpectrumShape&, const double*, int, double*);

template void spread<float>(const float*, const float*, std::int64_t, std::int64_t, std::int64_t,
                            bool, const FineGrid&, float*);
template void spread<double>(const double*, const double*, std::int64_t, std::int64_t,
                             std::int64_t, bool, const FineGrid&, double*);
template void interp<float>(const float*, const float*, std::int64_t, std::int64_t, std::int64_t,
                            const FineGrid&, float*);
template void interp<double>(const double*, const double*, std::int64_t, std::int64_t,
                             std::int64_t, const FineGrid&, double*);

}  // namespace rml::nudft
