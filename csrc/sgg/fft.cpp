#include "common/parallel.hpp"
#include "sgg/fft.hpp"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "common/simd.hpp"

namespace rml::fft {

namespace {

using i64 = std::int64_t;
constexpr double kPi = 3.141592653589793238462643383279502884;
// The transforms themselves run serially: at the sizes PLDs need, a fork/join per stage
// costs more than it saves on a shared 2-core machine (measured). OpenMP splits the
// independent per-bin work (the N-th powers) of very large transforms only.
// Bins from which the per-bin powers are split over OpenMP threads. Below it one thread is
// faster on a shared machine: measured here, a parallel region of a few ms leaves GOMP
// workers spinning and slowed this and the following transforms by ~1.5x.
constexpr i64 kParallelBins = i64{1} << 20;

// n = f * 2^m: returns f (odd part) and stores 2^m.
i64 split_odd(i64 n, i64* pow2) {
  i64 f = n;
  while (f > 0 && f % 2 == 0) f /= 2;
  *pow2 = n / f;
  return f;
}

// exp(-2 pi i u / L) for 0 <= u <= L/2 (L a power of two; half a circle is all any
// transform here reads): c = cos, s = -sin. The first quarter comes from direct cos/sin
// on the first octant and its mirror; the second by rotation by -pi/2 (exact: a swap and
// a sign change).
struct Table {
  i64 L = 1;
  std::vector<double> c, s;
};

Table make_table(i64 L) {
  Table t;
  t.L = L;
  const auto size = static_cast<std::size_t>(L / 2 + 1);
  t.c.assign(size, 0.0);
  t.s.assign(size, 0.0);
  if (L < 64) {
    for (std::size_t u = 0; u < size; ++u) {
      const double a = 2.0 * kPi * static_cast<double>(u) / static_cast<double>(L);
      t.c[u] = std::cos(a);
      t.s[u] = -std::sin(a);
    }
    return t;
  }
  const i64 quarter = L / 4, octant = L / 8;
  for (i64 u = 0; u <= octant; ++u) {
    const double a = 2.0 * kPi * static_cast<double>(u) / static_cast<double>(L);
    const double cu = std::cos(a), su = std::sin(a);
    t.c[static_cast<std::size_t>(u)] = cu;
    t.s[static_cast<std::size_t>(u)] = -su;
    const auto v = static_cast<std::size_t>(quarter - u);  // angle pi/2 - a
    t.c[v] = su;
    t.s[v] = -cu;
  }
  for (i64 u = quarter + 1; u <= L / 2; ++u) {  // angle + pi/2: (cos, sin) -> (-sin, cos)
    const auto w = static_cast<std::size_t>(u - quarter);
    t.c[static_cast<std::size_t>(u)] = t.s[w];
    t.s[static_cast<std::size_t>(u)] = -t.c[w];
  }
  return t;
}

// One Stockham radix-2 stage (sub-transform length n = 2m, stride s = M / n): for p < m,
// q < s: a = x[q + s p], b = x[q + s (p + m)], y[q + 2 s p] = a + b,
// y[q + s (2p + 1)] = (a - b) w_p with w_p = e^{-+2 pi i p / n}. Autosorting: no bit
// reversal; the output of the last stage is in natural order.
RML_SIMD_CLONES
void stage_wide(const double* __restrict xr, const double* __restrict xi, double* __restrict yr,
                double* __restrict yi, i64 m, i64 s, const double* __restrict wr,
                const double* __restrict wi) {
  for (i64 p = 0; p < m; ++p) {
    const double cr = wr[p], ci = wi[p];
    const double* __restrict ar = xr + s * p;
    const double* __restrict ai = xi + s * p;
    const double* __restrict br = xr + s * (p + m);
    const double* __restrict bi = xi + s * (p + m);
    double* __restrict y0r = yr + 2 * s * p;
    double* __restrict y0i = yi + 2 * s * p;
    double* __restrict y1r = y0r + s;
    double* __restrict y1i = y0i + s;
    for (i64 q = 0; q < s; ++q) {
      const double dr = ar[q] - br[q], di = ai[q] - bi[q];
      y0r[q] = ar[q] + br[q];
      y0i[q] = ai[q] + bi[q];
      y1r[q] = dr * cr - di * ci;
      y1i[q] = dr * ci + di * cr;
    }
  }
}

// The same stage for s = 1 (vectorised over p, interleaved stores).
RML_SIMD_CLONES
void stage_s1(const double* __restrict xr, const double* __restrict xi, double* __restrict yr,
              double* __restrict yi, i64 m, const double* __restrict wr,
              const double* __restrict wi) {
  for (i64 p = 0; p < m; ++p) {
    const double dr = xr[p] - xr[p + m], di = xi[p] - xi[p + m];
    yr[2 * p] = xr[p] + xr[p + m];
    yi[2 * p] = xi[p] + xi[p + m];
    yr[2 * p + 1] = dr * wr[p] - di * wi[p];
    yi[2 * p + 1] = dr * wi[p] + di * wr[p];
  }
}

// The same stage for small s (2 or 4): loop over p, q unrolled by the compiler.
template <int S>
void stage_small(const double* __restrict xr, const double* __restrict xi, double* __restrict yr,
                 double* __restrict yi, i64 m, const double* __restrict wr,
                 const double* __restrict wi) {
  for (i64 p = 0; p < m; ++p) {
    const double cr = wr[p], ci = wi[p];
    for (int q = 0; q < S; ++q) {
      const double a_r = xr[S * p + q], a_i = xi[S * p + q];
      const double b_r = xr[S * (p + m) + q], b_i = xi[S * (p + m) + q];
      const double dr = a_r - b_r, di = a_i - b_i;
      yr[2 * S * p + q] = a_r + b_r;
      yi[2 * S * p + q] = a_i + b_i;
      yr[2 * S * p + S + q] = dr * cr - di * ci;
      yi[2 * S * p + S + q] = dr * ci + di * cr;
    }
  }
}

// One Stockham radix-4 stage (sub-transform length n = 4m, stride s >= 4): for p < m, q < s,
// with a_j = x[q + s (p + j m)] and X = DFT_4(a) (X_1 = a0 - a2 + sign i (a1 - a3), ...),
// y[q + s (4p + j)] = X_j w_j(p), w_j(p) = e^{-+2 pi i j p / n}.
RML_SIMD_CLONES
void stage4_wide(const double* __restrict xr, const double* __restrict xi, double* __restrict yr,
                 double* __restrict yi, i64 m, i64 s, double sg, const double* __restrict w1r,
                 const double* __restrict w1i, const double* __restrict w2r,
                 const double* __restrict w2i, const double* __restrict w3r,
                 const double* __restrict w3i) {
  for (i64 p = 0; p < m; ++p) {
    const double c1r = w1r[p], c1i = w1i[p], c2r = w2r[p], c2i = w2i[p];
    const double c3r = w3r[p], c3i = w3i[p];
    const double* __restrict a0r = xr + s * p;
    const double* __restrict a0i = xi + s * p;
    const double* __restrict a1r = xr + s * (p + m);
    const double* __restrict a1i = xi + s * (p + m);
    const double* __restrict a2r = xr + s * (p + 2 * m);
    const double* __restrict a2i = xi + s * (p + 2 * m);
    const double* __restrict a3r = xr + s * (p + 3 * m);
    const double* __restrict a3i = xi + s * (p + 3 * m);
    double* __restrict y0r = yr + 4 * s * p;
    double* __restrict y0i = yi + 4 * s * p;
    for (i64 q = 0; q < s; ++q) {
      const double apcr = a0r[q] + a2r[q], apci = a0i[q] + a2i[q];
      const double amcr = a0r[q] - a2r[q], amci = a0i[q] - a2i[q];
      const double bpdr = a1r[q] + a3r[q], bpdi = a1i[q] + a3i[q];
      const double bmdr = a1r[q] - a3r[q], bmdi = a1i[q] - a3i[q];
      // j = sign * i * (b - d) = (-sign * bmdi, sign * bmdr)
      const double jr = -sg * bmdi, ji = sg * bmdr;
      y0r[q] = apcr + bpdr;
      y0i[q] = apci + bpdi;
      const double x1r = amcr + jr, x1i = amci + ji;
      const double x2r = apcr - bpdr, x2i = apci - bpdi;
      const double x3r = amcr - jr, x3i = amci - ji;
      y0r[s + q] = x1r * c1r - x1i * c1i;
      y0i[s + q] = x1r * c1i + x1i * c1r;
      y0r[2 * s + q] = x2r * c2r - x2i * c2i;
      y0i[2 * s + q] = x2r * c2i + x2i * c2r;
      y0r[3 * s + q] = x3r * c3r - x3i * c3i;
      y0i[3 * s + q] = x3r * c3i + x3i * c3r;
    }
  }
}

// Table lookup of e^{-2 pi i u / L} for 0 <= u < L from the half-circle table.
inline void table_at(const Table& T, i64 u, int sign, double* c, double* s) {
  const i64 half = T.L / 2;
  double cr, ci;
  if (u <= half) {
    cr = T.c[static_cast<std::size_t>(u)];
    ci = T.s[static_cast<std::size_t>(u)];
  } else {
    cr = -T.c[static_cast<std::size_t>(u - half)];
    ci = -T.s[static_cast<std::size_t>(u - half)];
  }
  *c = cr;
  *s = sign < 0 ? ci : -ci;
}

// In-place complex DFT of power-of-two length M (Stockham, ping-pong with a work buffer)
// with the table T (T.L a multiple of M).
// Pruned Stockham stage for input that is zero at indices >= V with V <= s m: only a_0 is
// non-zero, so y[q + s (R p + j)] = a_0 w_j(p) for p < ceil(V / s) (inputs past V read as 0).
// Returns the new bound R s ceil(V / s).
i64 stage_pruned(const double* xr, const double* xi, double* yr, double* yi, i64 R, i64 m,
                 i64 s, i64 V, int sign, const Table& T, i64 scale) {
  const i64 P = (V + s - 1) / s;
  for (i64 p = 0; p < P; ++p) {
    double cr[4], ci[4];
    for (i64 j = 0; j < R; ++j) table_at(T, j * p * s * scale, sign, &cr[j], &ci[j]);
    for (i64 q = 0; q < s; ++q) {
      const i64 idx = q + s * p;
      const double ar = idx < V ? xr[idx] : 0.0, ai = idx < V ? xi[idx] : 0.0;
      for (i64 j = 0; j < R; ++j) {
        yr[q + s * (R * p + j)] = ar * cr[j] - ai * ci[j];
        yi[q + s * (R * p + j)] = ar * ci[j] + ai * cr[j];
      }
    }
  }
  (void)m;
  return R * s * P;
}

// valid: re/im are zero (or unset) at indices >= valid; the first stages, while the data
// occupy only the leading part of each butterfly, skip the zeros (zero-padded PLD input).
void pow2_dft(double* re, double* im, i64 M, int sign, const Table& T,
              std::vector<double>& work, i64 valid = -1) {
  if (M <= 1) return;
  i64 V = valid < 0 ? M : std::min(valid, M);
  work.resize(static_cast<std::size_t>(4 * M + 2));
  double* wr = work.data();  // stage twiddles: 3 x 2 arrays of M/4 (radix 4) or 2 of M/2
  double* br = wr + (3 * M / 2 + 2);  // ping-pong buffers
  double* bi = br + M;
  double* xr = re;
  double* xi = im;
  double* yr = br;
  double* yi = bi;
  const i64 scale = T.L / M;
  for (i64 n = M, s = 1; n > 1;) {
    const i64 R = (n % 4 == 0 && s >= 4) ? 4 : 2;
    if (V <= s * (n / R)) {
      V = stage_pruned(xr, xi, yr, yi, R, n / R, s, V, sign, T, scale);
      n /= R;
      s *= R;
      std::swap(xr, yr);
      std::swap(xi, yi);
      continue;
    }
    if (V < M) {  // from here on every input is read: clear what the pruned stages skipped
      std::fill(xr + V, xr + M, 0.0);
      std::fill(xi + V, xi + M, 0.0);
      V = M;
    }
    if (R == 4) {
      const i64 m = n / 4;
      double* w1r = wr;
      double* w1i = w1r + m;
      double* w2r = w1i + m;
      double* w2i = w2r + m;
      double* w3r = w2i + m;
      double* w3i = w3r + m;
      for (i64 p = 0; p < m; ++p) {  // W_n^{jp} = W_L^{j p s L / M}
        table_at(T, p * s * scale, sign, &w1r[p], &w1i[p]);
        table_at(T, 2 * p * s * scale, sign, &w2r[p], &w2i[p]);
        table_at(T, 3 * p * s * scale, sign, &w3r[p], &w3i[p]);
      }
      stage4_wide(xr, xi, yr, yi, m, s, static_cast<double>(sign), w1r, w1i, w2r, w2i, w3r, w3i);
      n /= 4;
      s *= 4;
    } else {
      const i64 m = n / 2;
      double* w_r = wr;
      double* w_i = wr + m;
      for (i64 p = 0; p < m; ++p) table_at(T, p * s * scale, sign, &w_r[p], &w_i[p]);
      if (s == 1) {
        stage_s1(xr, xi, yr, yi, m, w_r, w_i);
      } else if (s == 2) {
        stage_small<2>(xr, xi, yr, yi, m, w_r, w_i);
      } else {
        stage_wide(xr, xi, yr, yi, m, s, w_r, w_i);
      }
      n /= 2;
      s *= 2;
    }
    std::swap(xr, yr);
    std::swap(xi, yi);
  }
  if (xr != re) {
    std::copy(xr, xr + M, re);
    std::copy(xi, xi + M, im);
  }
}

// a <- a * b elementwise (complex, split arrays).
RML_SIMD_CLONES
void cmul_inplace(double* __restrict ar, double* __restrict ai, const double* __restrict br,
                  const double* __restrict bi, i64 n) {
  for (i64 k = 0; k < n; ++k) {
    const double t = ar[k] * br[k] - ai[k] * bi[k];
    ai[k] = ar[k] * bi[k] + ai[k] * br[k];
    ar[k] = t;
  }
}

// y <- y + c x (complex scalar c, split arrays).
RML_SIMD_CLONES
void caxpy(double* __restrict yr, double* __restrict yi, const double* __restrict xr,
           const double* __restrict xi, double cr, double ci, i64 n) {
  for (i64 k = 0; k < n; ++k) {
    yr[k] += cr * xr[k] - ci * xi[k];
    yi[k] += cr * xi[k] + ci * xr[k];
  }
}

// Complex DFT of length n = f * M with the table T (T.L a multiple of M).
void dft_with_table(double* re, double* im, i64 n, int sign, const Table& T, i64 valid,
                    std::vector<double>& scratch, std::vector<double>& work) {
  i64 M = 1;
  const i64 f = split_odd(n, &M);
  if (f == 1) {
    pow2_dft(re, im, M, sign, T, work, valid);
    return;
  }
  // Decimation in time by f: sub-transforms of x[f t + r], then X[k] = sum_r W_n^{rk} X_r[k mod M].
  scratch.resize(static_cast<std::size_t>(2 * n));
  double* sr = scratch.data();
  double* si = sr + n;
  for (i64 r = 0; r < f; ++r) {
    for (i64 t = 0; t < M; ++t) {
      sr[static_cast<std::size_t>(r * M + t)] = re[f * t + r];
      si[static_cast<std::size_t>(r * M + t)] = im[f * t + r];
    }
  }
  const i64 sub_valid = valid < 0 ? M : (valid + f - 1) / f;  // x[f t + r] = 0 for t >= this
  for (i64 r = 0; r < f; ++r) {
    pow2_dft(sr + r * M, si + r * M, M, sign, T, work, sub_valid);
  }
  // X[km + j M] = sum_r W_f^{r j} (W_n^{km})^r X_r[km]: twiddle each sub-transform, then a
  // size-f DFT per km. W_n^{km} for km = f u + v is W_M^u W_n^v (u, v tracked incrementally).
  std::vector<double> vr(static_cast<std::size_t>(f)), vi(static_cast<std::size_t>(f));
  for (i64 v = 0; v < f; ++v) {
    const double a = 2.0 * kPi * static_cast<double>(v) / static_cast<double>(n);
    vr[static_cast<std::size_t>(v)] = std::cos(a);
    vi[static_cast<std::size_t>(v)] = static_cast<double>(sign) * std::sin(a);
  }
  double fr[25], fi[25];  // W_f^{r j} at [j f + r]
  for (i64 j = 0; j < f; ++j) {
    for (i64 r = 0; r < f; ++r) {
      const double a = 2.0 * kPi * static_cast<double>((r * j) % f) / static_cast<double>(f);
      fr[j * f + r] = std::cos(a);
      fi[j * f + r] = static_cast<double>(sign) * std::sin(a);
    }
  }
  // w[km] = W_n^{km} (scalar pass), then per r: tw <- tw * w and X_r <- X_r * tw
  // (vectorised passes), then the size-f DFT as f^2 scaled accumulations into re/im.
  const i64 step = T.L / M;
  work.resize(static_cast<std::size_t>(4 * M));
  double* w1r = work.data();
  double* w1i = w1r + M;
  double* twr = w1i + M;
  double* twi = twr + M;
  i64 u = 0, v = 0;
  for (i64 km = 0; km < M; ++km) {
    const auto tu = static_cast<std::size_t>(u * step);
    const double ar = T.c[tu], ai = sign < 0 ? T.s[tu] : -T.s[tu];
    const double br = vr[static_cast<std::size_t>(v)], bi = vi[static_cast<std::size_t>(v)];
    w1r[km] = ar * br - ai * bi;
    w1i[km] = ar * bi + ai * br;
    twr[km] = w1r[km];
    twi[km] = w1i[km];
    if (++v == f) {
      v = 0;
      ++u;
    }
  }
  for (i64 r = 1; r < f; ++r) {
    if (r > 1) cmul_inplace(twr, twi, w1r, w1i, M);
    cmul_inplace(sr + r * M, si + r * M, twr, twi, M);
  }
  for (i64 j = 0; j < f; ++j) {
    double* outr = re + j * M;
    double* outi = im + j * M;
    std::copy(sr, sr + M, outr);  // r = 0 term: W_f^0 = 1
    std::copy(si, si + M, outi);
    for (i64 r = 1; r < f; ++r) {
      caxpy(outr, outi, sr + r * M, si + r * M, fr[j * f + r], fi[j * f + r], M);
    }
  }
}

// A real transform of length n = 2 h, h = f M: the twiddle table (L = 2 M) and the packed
// complex buffers, shared by the forward and inverse transforms of one call.
struct RealPlan {
  i64 n, h, f, M;
  Table T;
  std::vector<double> zr, zi, scratch, work;
  double vr[5], vi[5];  // W_n^v, v < f

  explicit RealPlan(i64 n_) : n(n_), h(n_ / 2), f(1), M(1) {
    f = split_odd(h, &M);
    T = make_table(2 * M);
    zr.assign(static_cast<std::size_t>(h), 0.0);
    zi.assign(static_cast<std::size_t>(h), 0.0);
    for (i64 v = 0; v < f; ++v) {
      const double a = 2.0 * kPi * static_cast<double>(v) / static_cast<double>(n);
      vr[v] = std::cos(a);
      vi[v] = -std::sin(a);
    }
  }

  // Forward: bins 0 .. h of x (nx values zero-padded or folded modulo n).
  void forward(const double* x, i64 nx, double* out_re, double* out_im) {
    i64 valid = h;
    if (nx <= n) {
      valid = (nx + 1) / 2;
      if (f > 1) {  // the radix-f split reads every packed value
        std::fill(zr.begin() + valid, zr.end(), 0.0);
        std::fill(zi.begin() + valid, zi.end(), 0.0);
      }
      if (nx % 2 == 1) zi[static_cast<std::size_t>(nx / 2)] = 0.0;
      for (i64 i = 0; i + 1 < nx; i += 2) {
        zr[static_cast<std::size_t>(i / 2)] = x[i];
        zi[static_cast<std::size_t>(i / 2)] = x[i + 1];
      }
      if (nx % 2 == 1) zr[static_cast<std::size_t>(nx / 2)] = x[nx - 1];
    } else {  // fold modulo n (circular semantics), in index order
      std::fill(zr.begin(), zr.end(), 0.0);
      std::fill(zi.begin(), zi.end(), 0.0);
      for (i64 i = 0; i < nx; ++i) {
        const i64 j = i % n;
        (j % 2 == 0 ? zr : zi)[static_cast<std::size_t>(j / 2)] += x[i];
      }
    }
    dft_with_table(zr.data(), zi.data(), h, -1, T, valid, scratch, work);
    // X[k] = Fe + W_n^k Fo, Fe = (Z_k + conj Z_{h-k}) / 2, Fo = -i (Z_k - conj Z_{h-k}) / 2;
    // W_n^k = W_{2M}^u W_n^v for k = f u + v.
    i64 u = 0, v = 0;
    for (i64 k = 0; k <= h; ++k) {
      const auto a = static_cast<std::size_t>(k == h ? 0 : k);
      const auto b = static_cast<std::size_t>(k == 0 ? 0 : h - k);
      const double zkr = zr[a], zki = zi[a], zcr = zr[b], zci = -zi[b];
      const double fer = 0.5 * (zkr + zcr), fei = 0.5 * (zki + zci);
      const double for_ = 0.5 * (zki - zci), foi = -0.5 * (zkr - zcr);
      const auto tu = static_cast<std::size_t>(u);
      const double wr = T.c[tu] * vr[v] - T.s[tu] * vi[v];
      const double wi = T.c[tu] * vi[v] + T.s[tu] * vr[v];
      out_re[k] = fer + (wr * for_ - wi * foi);
      out_im[k] = fei + (wr * foi + wi * for_);
      if (++v == f) {
        v = 0;
        ++u;
      }
    }
  }

  // Inverse: from bins 0 .. h to zr/zi holding y[2t] = zr[t], y[2t+1] = zi[t] (normalised).
  void inverse(const double* in_re, const double* in_im) {
    i64 u = 0, v = 0;
    for (i64 k = 0; k < h; ++k) {
      const double xkr = in_re[k], xki = in_im[k];
      const double xcr = in_re[h - k], xci = -in_im[h - k];
      const double fer = 0.5 * (xkr + xcr), fei = 0.5 * (xki + xci);
      const double dr = 0.5 * (xkr - xcr), di = 0.5 * (xki - xci);
      const auto tu = static_cast<std::size_t>(u);
      const double wr = T.c[tu] * vr[v] - T.s[tu] * vi[v];
      const double wi = T.c[tu] * vi[v] + T.s[tu] * vr[v];
      const double for_ = dr * wr + di * wi, foi = di * wr - dr * wi;  // times conj(W^k)
      zr[static_cast<std::size_t>(k)] = fer - foi;  // Z = Fe + i Fo
      zi[static_cast<std::size_t>(k)] = fei + for_;
      if (++v == f) {
        v = 0;
        ++u;
      }
    }
    dft_with_table(zr.data(), zi.data(), h, +1, T, -1, scratch, work);
    const double scale = 1.0 / static_cast<double>(h);
    for (i64 t = 0; t < h; ++t) {
      zr[static_cast<std::size_t>(t)] *= scale;
      zi[static_cast<std::size_t>(t)] *= scale;
    }
  }
};

// x <- x^n elementwise for len complex values (binary powers; the loops over the values
// carry no dependency, so they vectorise).
RML_SIMD_CLONES
void power_chunk(double* __restrict xr, double* __restrict xi, i64 len, i64 n) {
  double rr[512], ri[512];
  for (i64 k = 0; k < len; ++k) {
    rr[k] = 1.0;
    ri[k] = 0.0;
  }
  for (i64 e = n; e > 0; e >>= 1) {
    if (e & 1) {
      for (i64 k = 0; k < len; ++k) {
        const double t = rr[k] * xr[k] - ri[k] * xi[k];
        ri[k] = rr[k] * xi[k] + ri[k] * xr[k];
        rr[k] = t;
      }
    }
    if (e > 1) {
      for (i64 k = 0; k < len; ++k) {
        const double t = xr[k] * xr[k] - xi[k] * xi[k];
        xi[k] = 2.0 * xr[k] * xi[k];
        xr[k] = t;
      }
    }
  }
  for (i64 k = 0; k < len; ++k) {
    xr[k] = rr[k];
    xi[k] = ri[k];
  }
}

}  // namespace

bool supported_complex_size(std::int64_t n) {
  if (n < 1) return false;
  i64 M = 1;
  const i64 f = split_odd(n, &M);
  return f == 1 || f == 3 || f == 5;
}

std::int64_t good_size(std::int64_t n) {
  const i64 target = std::max<i64>(n, 2);
  i64 best = -1;
  for (i64 f : {1, 3, 5}) {
    i64 s = 2 * f;
    while (s < target) s *= 2;
    if (best < 0 || s < best) best = s;
  }
  return best;
}

void complex_dft(double* re, double* im, std::int64_t n, int sign) {
  i64 M = 1;
  split_odd(n, &M);
  const Table T = make_table(M);
  std::vector<double> scratch, work;
  dft_with_table(re, im, n, sign, T, -1, scratch, work);
}

void real_forward(const double* x, std::int64_t nx, std::int64_t n, double* out_re,
                  double* out_im) {
  RealPlan plan(n);
  plan.forward(x, nx, out_re, out_im);
}

void real_inverse(const double* in_re, const double* in_im, std::int64_t n, double* y) {
  RealPlan plan(n);
  plan.inverse(in_re, in_im);
  for (i64 t = 0; t < n / 2; ++t) {
    y[2 * t] = plan.zr[static_cast<std::size_t>(t)];
    y[2 * t + 1] = plan.zi[static_cast<std::size_t>(t)];
  }
}

void convolve(const double* a, std::int64_t na, const double* b, std::int64_t nb, double* c) {
  const i64 nc = na + nb - 1;
  const i64 n = good_size(nc);
  const i64 bins = n / 2 + 1;
  RealPlan plan(n);
  std::vector<double> ar(static_cast<std::size_t>(bins)), ai(ar.size()), br(ar.size()), bi(ar.size());
  plan.forward(a, na, ar.data(), ai.data());
  plan.forward(b, nb, br.data(), bi.data());
  for (i64 k = 0; k < bins; ++k) {
    const auto u = static_cast<std::size_t>(k);
    const double r = ar[u] * br[u] - ai[u] * bi[u];
    const double i = ar[u] * bi[u] + ai[u] * br[u];
    ar[u] = r;
    ai[u] = i;
  }
  plan.inverse(ar.data(), ai.data());
  for (i64 t = 0; 2 * t < nc; ++t) {
    c[2 * t] = plan.zr[static_cast<std::size_t>(t)];
    if (2 * t + 1 < nc) c[2 * t + 1] = plan.zi[static_cast<std::size_t>(t)];
  }
}

void self_convolve_circular(const double* pmf, std::int64_t npmf, std::int64_t n,
                            std::int64_t size, std::int64_t shift, double* out) {
  const i64 bins = size / 2 + 1;
  RealPlan plan(size);
  std::vector<double> xr(static_cast<std::size_t>(bins)), xi(xr.size());
  plan.forward(pmf, npmf, xr.data(), xi.data());
  constexpr i64 kChunk = 512;  // bins per chunk: the chunk stays in L1 across the squarings
  const i64 chunks = (bins + kChunk - 1) / kChunk;
#pragma omp parallel for num_threads(rml::max_threads()) schedule(static) if (bins >= kParallelBins)
  for (i64 c = 0; c < chunks; ++c) {
    const i64 k0 = c * kChunk;
    power_chunk(xr.data() + k0, xi.data() + k0, std::min(kChunk, bins - k0), n);
  }
  plan.inverse(xr.data(), xi.data());
  const i64 s = ((shift % size) + size) % size;
  // out[j] = y[(s + j) mod size] with y[2t] = zr[t], y[2t + 1] = zi[t].
  for (i64 j = 0; j < size; ++j) {
    const i64 t = s + j < size ? s + j : s + j - size;
    out[j] = (t & 1) ? plan.zi[static_cast<std::size_t>(t >> 1)] : plan.zr[static_cast<std::size_t>(t >> 1)];
  }
}

}  // namespace rml::fft
