// Philox streams: element i of a stream is Triton's tl.rand / tl.randn at (seed, offset + i).
#pragma once

#include <cstdint>

namespace rml::random {

void fill_uniform(float* out, std::int64_t n, std::uint64_t seed, std::uint64_t offset);
void fill_normal(float* out, std::int64_t n, std::uint64_t seed, std::uint64_t offset);

}  // namespace rml::random
