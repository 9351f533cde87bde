#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "common/arrays.hpp"
#include "random/random.hpp"

namespace py = pybind11;
using namespace pybind11::literals;

namespace {

using FillFn = void (*)(float*, std::int64_t, std::uint64_t, std::uint64_t);

void fill(FillFn fn, py::array out, std::uint64_t seed, std::uint64_t offset) {
  float* data = rml::writable_vector<float>(out, "out");
  const auto n = static_cast<std::int64_t>(out.shape(0));
  py::gil_scoped_release release;
  fn(data, n, seed, offset);
}

}  // namespace

void register_random(py::module_ m) {
  m.doc() = "Counter-based Philox4x32-10 streams matching Triton's tl.rand / tl.randn";
  m.def(
      "fill_uniform",
      [](py::array out, std::uint64_t seed, std::uint64_t offset) {
        fill(rml::random::fill_uniform, std::move(out), seed, offset);
      },
      "out"_a, "seed"_a, "offset"_a,
      "Write tl.rand(seed, offset + i) into the float32 vector out[i].");
  m.def(
      "fill_normal",
      [](py::array out, std::uint64_t seed, std::uint64_t offset) {
        fill(rml::random::fill_normal, std::move(out), seed, offset);
      },
      "out"_a, "seed"_a, "offset"_a,
      "Write tl.randn(seed, offset + i) into the float32 vector out[i].");
}
