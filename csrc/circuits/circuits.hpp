// Masked residual mixing for batched circuit evaluation (plain C++, no pybind).
#pragma once

#include <cstdint>

namespace rml::circuits {

// out[n, j, :] = base[j, :] + sum_{s < S} [mask[n, s, j] != 0] * delta[n, s, :]
// mask: (N, S, J) uint8, base: (J, K). Layout "batch first": delta (N, S_tot, K), out (N, J, K);
// "source first" (source_first = true): delta (S_tot, N, K), out (J, N, K), so that the rows of
// one destination (or one source) over all runs are contiguous.
// If ln_w is not null, every length-d row of each output block (K = P * d) is layer-normalised
// in place afterwards: y = (x - mean) / sqrt(var + eps) * ln_w + ln_b (biased variance; ln_b may
// be null). If need is not null ((N, J) uint8), blocks with need[n, j] == 0 are set to zero
// instead (their value is not used by the caller). Sparse path: only the active sources of each
// (n, j) are read; a block without active sources copies base[j] (layer-normalised once per j). OpenMP over (n, j) with
// n_threads threads (<= 0: the OpenMP default).
template <typename T>
void masked_mix(const T* delta, const std::uint8_t* mask, const T* base, T* out, std::int64_t n,
                std::int64_t s_tot, std::int64_t s, std::int64_t j, std::int64_t k,
                bool source_first, const T* ln_w, const T* ln_b, std::int64_t d, double eps,
                const std::uint8_t* need, int n_threads);

}  // namespace rml::circuits
