#include "random/random.hpp"

#include "common/philox.hpp"

namespace rml::random {

// Each element depends only on its own counter, so the result is identical for any
// thread count and schedule.
void fill_uniform(float* out, std::int64_t n, std::uint64_t seed, std::uint64_t offset) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (std::int64_t i = 0; i < n; ++i) {
    out[i] = philox_uniform(seed, offset + static_cast<std::uint64_t>(i));
  }
}

void fill_normal(float* out, std::int64_t n, std::uint64_t seed, std::uint64_t offset) {
#pragma omp parallel for schedule(static) if (n > 16384)
  for (std::int64_t i = 0; i < n; ++i) {
    out[i] = philox_normal(seed, offset + static_cast<std::uint64_t>(i));
  }
}

}  // namespace rml::random
