// Masked residual mixing for batched circuit evaluation (plain C++, no pybind).
#pragma once

#include <cstdint>

namespace rml::circuits {

// out[n, j, :] = base[j, :] + sum_{s < S} [mask[n, s, j] != 0] * delta[n, s, :]
// delta: (N, S_tot, K) C-contiguous, mask: (N, S, J) uint8, base: (J, K), out: (N, J, K).
// Sparse path: only the active sources of each (n, j) are read. OpenMP over (n, j).
template <typename T>
void masked_mix(const T* delta, const std::uint8_t* mask, const T* base, T* out, std::int64_t n,
                std::int64_t s_tot, std::int64_t s, std::int64_t j, std::int64_t k);

}  // namespace rml::circuits
