#include "nudft/row_fft.hpp"

#include <cmath>
#include <stdexcept>
#include <utility>

#include "common/simd.hpp"

namespace rml::nudft {

namespace {

constexpr double kTwoPi = 6.283185307179586476925286766559;

// One Stockham pass of radix R on a sub-sequence length nn = R m with stride-s blocks of
// L = s ld values: for p < m and k < R,
//   y[block R p + k] = w^{p k} sum_j x[block p + j m] e^{sign 2 pi i j k / R},  w = e^{sign 2 pi i / nn}.
// (Decimation in frequency; the output is in natural order after the last pass.)
template <typename T, int R>
RML_SIMD_CLONES void pass(std::int64_t m, std::int64_t L, int sign, const T* xr, const T* xi,
                           T* yr, T* yi, const T* twr, const T* twi) {
  const T sg = static_cast<T>(sign);
  for (std::int64_t p = 0; p < m; ++p) {
    const T* ar[R];
    const T* ai[R];
    T* br[R];
    T* bi[R];
    T wr[R], wi[R];
    for (int j = 0; j < R; ++j) {
      ar[j] = xr + (p + j * m) * L;
      ai[j] = xi + (p + j * m) * L;
      br[j] = yr + (R * p + j) * L;
      bi[j] = yi + (R * p + j) * L;
      wr[j] = twr[p * R + j];
      wi[j] = twi[p * R + j];
    }
#pragma GCC ivdep
    for (std::int64_t e = 0; e < L; ++e) {
      T cr[R], ci[R];
      if constexpr (R == 2) {
        cr[0] = ar[0][e] + ar[1][e];
        ci[0] = ai[0][e] + ai[1][e];
        cr[1] = ar[0][e] - ar[1][e];
        ci[1] = ai[0][e] - ai[1][e];
      } else if constexpr (R == 3) {
        const T h = T(0.86602540378443864676) * sg;  // sign * sin(2 pi / 3)
        const T tr = ar[1][e] + ar[2][e], ti = ai[1][e] + ai[2][e];
        const T dr = ar[1][e] - ar[2][e], di = ai[1][e] - ai[2][e];
        const T mr = ar[0][e] - T(0.5) * tr, mi = ai[0][e] - T(0.5) * ti;
        cr[0] = ar[0][e] + tr;
        ci[0] = ai[0][e] + ti;
        cr[1] = mr - h * di;  // m + i h d
        ci[1] = mi + h * dr;
        cr[2] = mr + h * di;
        ci[2] = mi - h * dr;
      } else if constexpr (R == 4) {
        const T s0r = ar[0][e] + ar[2][e], s0i = ai[0][e] + ai[2][e];
        const T d0r = ar[0][e] - ar[2][e], d0i = ai[0][e] - ai[2][e];
        const T s1r = ar[1][e] + ar[3][e], s1i = ai[1][e] + ai[3][e];
        const T d1r = ar[1][e] - ar[3][e], d1i = ai[1][e] - ai[3][e];
        cr[0] = s0r + s1r;
        ci[0] = s0i + s1i;
        cr[2] = s0r - s1r;
        ci[2] = s0i - s1i;
        cr[1] = d0r - sg * d1i;  // d0 + i sign d1
        ci[1] = d0i + sg * d1r;
        cr[3] = d0r + sg * d1i;
        ci[3] = d0i - sg * d1r;
      } else {
        static_assert(R == 5, "radix 2, 3, 4 or 5");
        const T c1 = T(0.30901699437494742410), c2 = T(-0.80901699437494742410);
        const T s1 = T(0.95105651629515357212) * sg, s2 = T(0.58778525229247312917) * sg;
        const T pr = ar[1][e] + ar[4][e], pi = ai[1][e] + ai[4][e];
        const T qr = ar[1][e] - ar[4][e], qi = ai[1][e] - ai[4][e];
        const T ur = ar[2][e] + ar[3][e], ui = ai[2][e] + ai[3][e];
        const T vr = ar[2][e] - ar[3][e], vi = ai[2][e] - ai[3][e];
        const T m1r = ar[0][e] + c1 * pr + c2 * ur, m1i = ai[0][e] + c1 * pi + c2 * ui;
        const T m2r = ar[0][e] + c2 * pr + c1 * ur, m2i = ai[0][e] + c2 * pi + c1 * ui;
        const T n1r = s1 * qr + s2 * vr, n1i = s1 * qi + s2 * vi;  // b1 = m1 + i n1
        const T n2r = s2 * qr - s1 * vr, n2i = s2 * qi - s1 * vi;  // b2 = m2 + i n2
        cr[0] = ar[0][e] + pr + ur;
        ci[0] = ai[0][e] + pi + ui;
        cr[1] = m1r - n1i;
        ci[1] = m1i + n1r;
        cr[4] = m1r + n1i;
        ci[4] = m1i - n1r;
        cr[2] = m2r - n2i;
        ci[2] = m2i + n2r;
        cr[3] = m2r + n2i;
        ci[3] = m2i - n2r;
      }
      br[0][e] = cr[0];
      bi[0][e] = ci[0];
      for (int k = 1; k < R; ++k) {
        br[k][e] = cr[k] * wr[k] - ci[k] * wi[k];
        bi[k][e] = cr[k] * wi[k] + ci[k] * wr[k];
      }
    }
  }
}

}  // namespace

template <typename T>
RowFFT<T>::RowFFT(std::int64_t n, int sign) : n_(n), sign_(sign >= 0 ? 1 : -1) {
  if (n < 1) throw std::invalid_argument("RowFFT: length must be >= 1");
  std::int64_t r = n;
  while (r % 4 == 0) {
    radix_.push_back(4);
    r /= 4;
  }
  while (r % 2 == 0) {
    radix_.push_back(2);
    r /= 2;
  }
  while (r % 3 == 0) {
    radix_.push_back(3);
    r /= 3;
  }
  while (r % 5 == 0) {
    radix_.push_back(5);
    r /= 5;
  }
  if (r != 1) throw std::invalid_argument("RowFFT: length must factor into 2, 3 and 5");
  std::int64_t nn = n;
  for (int R : radix_) {
    const std::int64_t m = nn / R;
    tw_off_.push_back(tw_re_.size());
    for (std::int64_t p = 0; p < m; ++p) {
      for (int k = 0; k < R; ++k) {
        const double a = kTwoPi * static_cast<double>(p * k) / static_cast<double>(nn);
        tw_re_.push_back(static_cast<T>(std::cos(a)));
        tw_im_.push_back(static_cast<T>(sign_ * std::sin(a)));
      }
    }
    nn = m;
  }
}

template <typename T>
bool RowFFT<T>::run(T* re, T* im, T* wre, T* wim, std::int64_t ld) const {
  T *xr = re, *xi = im, *yr = wre, *yi = wim;
  std::int64_t nn = n_, s = 1;
  for (std::size_t q = 0; q < radix_.size(); ++q) {
    const int R = radix_[q];
    const std::int64_t m = nn / R, L = s * ld;
    const T* twr = tw_re_.data() + tw_off_[q];
    const T* twi = tw_im_.data() + tw_off_[q];
    switch (R) {
      case 2: pass<T, 2>(m, L, sign_, xr, xi, yr, yi, twr, twi); break;
      case 3: pass<T, 3>(m, L, sign_, xr, xi, yr, yi, twr, twi); break;
      case 4: pass<T, 4>(m, L, sign_, xr, xi, yr, yi, twr, twi); break;
      default: pass<T, 5>(m, L, sign_, xr, xi, yr, yi, twr, twi); break;
    }
    std::swap(xr, yr);
    std::swap(xi, yi);
    nn = m;
    s *= R;
  }
  return xr == re;
}

template class RowFFT<float>;
template class RowFFT<double>;

}  // namespace rml::nudft
