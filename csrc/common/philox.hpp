// Counter-based Philox4x32-10 (Salmon et al., SC'11), laid out exactly as Triton's
// `tl.randint4x` / `tl.rand` / `tl.randn` so that a (seed, offset) pair gives the same
// numbers on the CPU as inside a Triton kernel:
//   counter = (offset_lo, offset_hi, 0, 0), key = (seed_lo, seed_hi).
#pragma once

#ifndef RML_INLINE
#define RML_INLINE inline __attribute__((always_inline))
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>

#include "common/vecmath.hpp"

namespace rml {

struct Philox4 {
  std::uint32_t v[4];
};

RML_INLINE std::uint32_t umulhi32(std::uint32_t a, std::uint32_t b) {
  return static_cast<std::uint32_t>((static_cast<std::uint64_t>(a) * b) >> 32);
}

// Every 32-bit word is held in a 64-bit lane: the 32 x 32 -> 64 products are then plain
// 64-bit lane multiplies (vpmuludq) without lane shuffles, so loops over counters vectorise
// well (the SGG sampler measured ~1.4x over 32-bit lanes; kernels.random.normal 2-3x, see
// docs/privacy_training.md). The words are those of the textbook 32-bit formulation.
RML_INLINE Philox4 philox4x32_10(std::uint32_t c0_, std::uint32_t c1_, std::uint32_t c2_,
                             std::uint32_t c3_, std::uint32_t k0_, std::uint32_t k1_) {
  constexpr std::uint64_t kLo = 0xffffffffULL;
  constexpr std::uint64_t kKeyA = 0x9E3779B9u, kKeyB = 0xBB67AE85u;
  constexpr std::uint64_t kRoundA = 0xD2511F53u, kRoundB = 0xCD9E8D57u;
  std::uint64_t c0 = c0_, c1 = c1_, c2 = c2_, c3 = c3_, k0 = k0_, k1 = k1_;
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t pb = kRoundB * c2;
    const std::uint64_t pa = kRoundA * c0;
    c0 = (pb >> 32) ^ c1 ^ k0;
    c2 = (pa >> 32) ^ c3 ^ k1;
    c1 = pb & kLo;
    c3 = pa & kLo;
    k0 = (k0 + kKeyA) & kLo;
    k1 = (k1 + kKeyB) & kLo;
  }
  return Philox4{{static_cast<std::uint32_t>(c0), static_cast<std::uint32_t>(c1),
                  static_cast<std::uint32_t>(c2), static_cast<std::uint32_t>(c3)}};
}

// The four 32-bit words for one (seed, offset): Triton's randint4x(seed, offset) with an
// int64 offset.
RML_INLINE Philox4 philox_block(std::uint64_t seed, std::uint64_t offset) {
  return philox4x32_10(static_cast<std::uint32_t>(offset), static_cast<std::uint32_t>(offset >> 32),
                       0u, 0u, static_cast<std::uint32_t>(seed),
                       static_cast<std::uint32_t>(seed >> 32));
}

// Triton's uint_to_uniform_float for 32-bit words: a float32 in [0, 1).
RML_INLINE float uint_to_uniform(std::uint32_t x) {
  std::int32_t s = static_cast<std::int32_t>(x);
  s ^= s >> 31;  // ~s for negative s (Triton: where(x < 0, ~x, x)), branch-free
  return static_cast<float>(s) * 4.6566127342e-10f;
}

// Triton's pair_uniform_to_normal (Box-Muller), first output, in float32. log and cos are
// evaluated in double by vectorisable polynomials and rounded to float (see vecmath.hpp),
// which is what a correctly rounded logf/cosf returns.
constexpr std::int32_t kMinU1Bits = 0x33d6bf95;  // bits of 1.0e-7f

RML_INLINE float uniform_pair_to_normal(float u1, float u2) {
  // max(u1, 1e-7) on the bit patterns (both are non-negative floats, whose order is that of
  // their bits): an integer max vectorises where a float select here does not.
  std::int32_t u1_bits;
  std::memcpy(&u1_bits, &u1, sizeof u1);
  u1_bits = std::max(u1_bits, kMinU1Bits);
  std::memcpy(&u1, &u1_bits, sizeof u1);
  const float th = 6.283185307179586f * u2;
  const float log_u1 = static_cast<float>(vecmath::log_pos(static_cast<double>(u1)));
  const float r = std::sqrt(-2.0f * log_u1);
  return r * static_cast<float>(vecmath::cos_nonneg(static_cast<double>(th)));
}

RML_INLINE float philox_uniform(std::uint64_t seed, std::uint64_t offset) {
  return uint_to_uniform(philox_block(seed, offset).v[0]);
}

RML_INLINE float philox_normal(std::uint64_t seed, std::uint64_t offset) {
  const Philox4 b = philox_block(seed, offset);
  return uniform_pair_to_normal(uint_to_uniform(b.v[0]), uint_to_uniform(b.v[1]));
}

}  // namespace rml
