// Branch-free log, cos and sincos written so that loops calling them auto-vectorise (libm calls
// do not without -ffast-math, which we never use). Both work in double precision and are
// accurate to ~1e-15 relative, so rounding their result to float gives the correctly
// rounded float value except in rare ties.
#pragma once

#ifndef RML_INLINE
#define RML_INLINE inline __attribute__((always_inline))
#endif

#include <cstdint>
#include <cstring>

namespace rml::vecmath {

RML_INLINE double as_double(std::uint64_t bits) {
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}

RML_INLINE std::uint64_t as_bits(double d) {
  std::uint64_t b;
  std::memcpy(&b, &d, sizeof b);
  return b;
}

// Natural log for positive, finite, normal x. Adding (1 - sqrt(1/2)) to the mantissa field
// before reading the exponent rounds the split x = m 2^e so that m lies in
// [sqrt(1/2), sqrt(2)) without a branch; then log m = 2 atanh(s), s = (m - 1)/(m + 1),
// |s| < 0.1716, odd series to s^15. 32-bit integer work only, so AVX2 vectorises it.
RML_INLINE double log_pos(double x) {
  constexpr std::uint32_t kSqrtHalfHi = 0x3fe6a09eu;  // high word of sqrt(1/2)
  const std::uint64_t bits = as_bits(x);
  const std::uint32_t hi = static_cast<std::uint32_t>(bits >> 32) + (0x3ff00000u - kSqrtHalfHi);
  const auto e = static_cast<std::int32_t>(hi >> 20) - 1023;
  const std::uint32_t m_hi = (hi & 0x000fffffu) + kSqrtHalfHi;
  const double m = as_double((static_cast<std::uint64_t>(m_hi) << 32) | (bits & 0xffffffffULL));
  const double s = (m - 1.0) / (m + 1.0);
  const double z = s * s;
  const double series =
      2.0 + z * (2.0 / 3 + z * (2.0 / 5 + z * (2.0 / 7 + z * (2.0 / 9 + z * (2.0 / 11 + z * (2.0 / 13 + z * (2.0 / 15)))))));
  return s * series + static_cast<double>(e) * 0.6931471805599453;
}

// sin(x) and cos(x) for 0 <= x < 2^20: quadrant reduction with a two-part pi/2, Taylor
// polynomials on |r| <= pi/4 (truncation error below 1e-15). The quadrant picks sin or cos by
// exact arithmetic masks (w * a + (1 - w) * b with w in {0, 1}), so the loop has no branches.
RML_INLINE void sincos_nonneg(double x, double* s_out, double* c_out) {
  constexpr double kTwoOverPi = 0.6366197723675814;
  constexpr double kPio2Hi = 1.5707963267341256;      // first 33 bits of pi/2
  constexpr double kPio2Lo = 6.077100506506192e-11;   // pi/2 - kPio2Hi
  const auto q = static_cast<std::int32_t>(x * kTwoOverPi + 0.5);
  const double qd = static_cast<double>(q);
  const double r = (x - qd * kPio2Hi) - qd * kPio2Lo;
  const double z = r * r;
  const double c = 1.0 + z * (-1.0 / 2 + z * (1.0 / 24 + z * (-1.0 / 720 + z * (1.0 / 40320 + z * (-1.0 / 3628800 + z * (1.0 / 479001600 + z * (-1.0 / 87178291200.0 + z * (1.0 / 20922789888000.0))))))));
  const double s = r * (1.0 + z * (-1.0 / 6 + z * (1.0 / 120 + z * (-1.0 / 5040 + z * (1.0 / 362880 + z * (-1.0 / 39916800 + z * (1.0 / 6227020800.0 + z * (-1.0 / 1307674368000.0))))))));
  const double odd = static_cast<double>(q & 1);
  const double cos_sign = 1.0 - 2.0 * static_cast<double>(((q + 1) >> 1) & 1);  // - for q%4 in {1,2}
  const double sin_sign = 1.0 - 2.0 * static_cast<double>((q >> 1) & 1);        // - for q%4 in {2,3}
  *c_out = cos_sign * (odd * s + (1.0 - odd) * c);
  *s_out = sin_sign * (odd * c + (1.0 - odd) * s);
}

// cos(x) for 0 <= x < 2^20 (the sine is computed and dropped; inlining removes it).
RML_INLINE double cos_nonneg(double x) {
  double s, c;
  sincos_nonneg(x, &s, &c);
  return c;
}

}  // namespace rml::vecmath
