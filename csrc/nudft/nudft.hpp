// Batched non-uniform discrete Fourier transforms on a half-space frequency grid.
//
// The grid has d in {1, 2} axes; axis i has spacing dxi[i] and K[i] >= 0 so that
// axis values are k * dxi[i]. Axes before the last take k in {-K..K}; the last takes
// k in {0..K} (half space). Frequencies are ordered row-major over the axes, so in 2-D
// f = (k0 + K0) * (K1 + 1) + k1. theta(x, f) = 2 pi xi_f . x.
//
// Phases are never materialised for all (point, frequency) pairs: per tile of points the
// per-axis unit phases e^{2 pi i dxi_i x_i} are range-reduced in double precision and raised
// to the needed powers by recurrence, then the tile is contracted with a register-blocked GEMM.
#pragma once

#include <cstdint>

namespace rml::nudft {

struct Grid {
  int dim;             // 1 or 2
  std::int64_t K[2];   // half-widths; last axis is one-sided
  double dxi[2];       // spacings
  std::int64_t n_freq() const {
    return dim == 1 ? K[0] + 1 : (2 * K[0] + 1) * (K[1] + 1);
  }
};

// Type 1: out[b, f, c] = sum_n v[b, n, c] * e^{sign i theta(x[b, n], f)}, written as the planes
// out_re, out_im of shape [B, F, C]; if dens_re/dens_im are non-null also the density
// dens[b, f] = sum_n e^{sign i theta(x[b, n], f)} of shape [B, F]. C may be 0 (v unused).
template <typename T>
void type1(const T* x, const T* v, std::int64_t B, std::int64_t N, std::int64_t C,
           const Grid& grid, int sign, T* out_re, T* out_im, T* dens_re, T* dens_im);

// Type 2: y[b, m, o] = sum_f w[f] * Re((re[b, f, o] + i im[b, f, o]) e^{sign i theta(x[b, m], f)})
//                   = sum_f w[f] (re cos theta - sign * im sin theta), y of shape [B, M, O].
template <typename T>
void type2(const T* x, const T* re, const T* im, const T* w, std::int64_t B, std::int64_t M,
           std::int64_t O, const Grid& grid, int sign, T* y);

// --- NUFFT building blocks (spreading / interpolation with the exponential-of-semicircle kernel) --
//
// A point x maps to the fine-grid coordinate u_i = frac(dxi_i x_i) * nf_i in [0, nf_i) per axis;
// the kernel phi(z) = exp(beta (sqrt(1 - (2z/w)^2) - 1)) for |z| < w/2 is evaluated at the w
// grid nodes j nearest u (z = j - u), indices taken modulo nf (periodic grid).

struct FineGrid {
  int dim;             // 1 or 2
  std::int64_t nf[2];  // fine-grid sizes (nf[1] unused in 1-D)
  double dxi[2];       // frequency spacings (phase per unit of x, in cycles)
  int w;               // kernel width in grid nodes (<= 32)
  double beta;         // kernel shape
  // Optional piecewise-polynomial kernel: [degree + 1][w] coefficients (highest power first) of
  // phi at node i as a polynomial in t = 2 s - 1, s = j0 - (u - w/2) in [0, 1); nullptr: exact.
  const double* poly = nullptr;
  int degree = 0;
};

// Spreading: g[b, j0(, j1), c] = sum_n v[b, n, c] * phi(j0 - u0(x_bn)) (* phi(j1 - u1(x_bn))),
// g of shape [B, nf0(, nf1), C + ones] (overwritten); with ones, channel C spreads the value 1
// (the density channel) without a copy of v.
template <typename T>
void spread(const T* x, const T* v, std::int64_t B, std::int64_t N, std::int64_t C, bool ones,
            const FineGrid& fg, T* g);

// Interpolation (the adjoint of spreading): y[b, m, o] = sum_j phi(j - u(x_bm)) g[b, j, o].
template <typename T>
void interp(const T* x, const T* g, std::int64_t B, std::int64_t M, std::int64_t O,
            const FineGrid& fg, T* y);

// Fused 1-D NUFFT type 1, one pass per batch element (no [B, nf, C] grid): gather-form
// spreading into the split planes of a packed real FFT, the FFT along the grid rows (RowFFT)
// and the pick-out of the modes k = 0..K, scaled: equals modes_out(rfft(spread(x, v))) with
// re, im [B, K + 1, C] and, with density, dens_re, dens_im [B, K + 1].
template <typename T>
void nufft1_1d(const T* x, const T* v, std::int64_t B, std::int64_t N, std::int64_t C,
               bool density, const FineGrid& fg, std::int64_t K, const double* scale,
               int sign_im, T* re, T* im, T* dens_re, T* dens_im);

// Fused 1-D NUFFT type 2: equals interp(irfft(modes_in(re, im), n = nf)) with re, im
// [B, K + 1, O] and y [B, M, O] (scale as for modes_in, including irfft's 1 / n).
template <typename T>
void nufft2_1d(const T* x, const T* re, const T* im, std::int64_t B, std::int64_t M,
               std::int64_t O, const FineGrid& fg, std::int64_t K, const double* scale,
               int sign_im, T* y);

// Spectrum arrays of the FFT stage, per batch element [rows(, cols), channels] complex: the
// half-space frequency f (half-widths K) sits at row k (1-D, k = 0..K0), or at row (k0 mod rows)
// and column k1 (2-D). rows / cols may be the full fine grid or a pruned one (2-D: only the
// K1 + 1 columns that hold modes).
struct SpectrumShape {
  int dim;
  std::int64_t rows, cols;  // cols unused in 1-D
  std::int64_t K[2];
};

// Type-1 copy-out (after the forward FFT of the spread grid, S [B, rows(, cols), Cg]):
//   re[b, f, c] = scale[f] Re S, im[b, f, c] = sign_im scale[f] Im S for c < C, and when
//   dens_re != nullptr the last channel C into dens_re/dens_im [B, F] (deconvolution and the
//   sign of the exponent applied in the same pass).
template <typename T>
void modes_out(const T* S, std::int64_t B, std::int64_t Cg, std::int64_t C,
               const SpectrumShape& sh, const double* scale, int sign_im, T* re, T* im,
               T* dens_re, T* dens_im);

// Type-2 copy-in (before the inverse FFT): X [B, rows(, cols), O] complex (interleaved) = 0
// except at the modes, X[b, cell(f), o] = scale[f] (re[b, f, o] + i sign_im im[b, f, o]).
template <typename T>
void modes_in(const T* re, const T* im, std::int64_t B, std::int64_t O, const SpectrumShape& sh,
              const double* scale, int sign_im, T* X);

}  // namespace rml::nudft
