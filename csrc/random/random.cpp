#include "common/parallel.hpp"
#include "random/random.hpp"

#include <algorithm>

#include "common/philox.hpp"
#include "common/simd.hpp"

namespace rml::random {

namespace {

constexpr std::int64_t kChunk = 1 << 14;

RML_SIMD_CLONES
void uniform_chunk(float* out, std::int64_t n, std::uint64_t seed, std::uint64_t offset) {
  for (std::int64_t i = 0; i < n; ++i) {
    out[i] = philox_uniform(seed, offset + static_cast<std::uint64_t>(i));
  }
}

RML_SIMD_CLONES
void normal_chunk(float* out, std::int64_t n, std::uint64_t seed, std::uint64_t offset) {
  for (std::int64_t i = 0; i < n; ++i) {
    out[i] = philox_normal(seed, offset + static_cast<std::uint64_t>(i));
  }
}

// Each element depends only on its own counter, so the result is identical for any
// thread count and schedule; dynamic scheduling of 16K-element chunks keeps a busy core
// from stalling the whole loop.
template <typename Chunk>
void fill_chunked(Chunk chunk, float* out, std::int64_t n, std::uint64_t seed,
                  std::uint64_t offset) {
  const std::int64_t num_chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for num_threads(rml::max_threads()) schedule(dynamic, 1) if (num_chunks > 1)
  for (std::int64_t c = 0; c < num_chunks; ++c) {
    const std::int64_t start = c * kChunk;
    const std::int64_t len = std::min(kChunk, n - start);
    chunk(out + start, len, seed, offset + static_cast<std::uint64_t>(start));
  }
}

}  // namespace

void fill_uniform(float* out, std::int64_t n, std::uint64_t seed, std::uint64_t offset) {
  fill_chunked(uniform_chunk, out, n, seed, offset);
}

void fill_normal(float* out, std::int64_t n, std::uint64_t seed, std::uint64_t offset) {
  fill_chunked(normal_chunk, out, n, seed, offset);
}

}  // namespace rml::random
