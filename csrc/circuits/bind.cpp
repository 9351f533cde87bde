#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "circuits/circuits.hpp"

namespace py = pybind11;
using namespace pybind11::literals;

namespace {

void check_c(const py::array& a, const char* name, py::ssize_t ndim) {
  if (a.ndim() != ndim) {
    throw py::value_error(std::string(name) + ": expected ndim=" + std::to_string(ndim) +
                          ", got " + std::to_string(a.ndim()));
  }
  if (!(a.flags() & py::array::c_style)) {
    throw py::value_error(std::string(name) + ": expected a C-contiguous array");
  }
}

template <typename T>
void run(const py::array& delta, const py::array& mask, const py::array& base, py::array& out) {
  const py::array& out_c = out;
  for (const py::array* a : {&delta, &base, &out_c}) {
    if (!a->dtype().is(py::dtype::of<T>())) {
      throw py::type_error("delta, base and out must share one float dtype");
    }
  }
  const auto n = static_cast<std::int64_t>(delta.shape(0));
  const auto s_tot = static_cast<std::int64_t>(delta.shape(1));
  const auto k = static_cast<std::int64_t>(delta.shape(2));
  const auto s = static_cast<std::int64_t>(mask.shape(1));
  const auto j = static_cast<std::int64_t>(mask.shape(2));
  if (mask.shape(0) != delta.shape(0) || s > s_tot) {
    throw py::value_error("mask must have shape (N, S <= S_tot, J)");
  }
  if (base.shape(0) != mask.shape(2) || base.shape(1) != delta.shape(2)) {
    throw py::value_error("base must have shape (J, K)");
  }
  if (out.shape(0) != delta.shape(0) || out.shape(1) != mask.shape(2) ||
      out.shape(2) != delta.shape(2)) {
    throw py::value_error("out must have shape (N, J, K)");
  }
  if (!out.writeable()) throw py::value_error("out: expected a writable array");
  const T* d = static_cast<const T*>(delta.data());
  const auto* m = static_cast<const std::uint8_t*>(mask.data());
  const T* b = static_cast<const T*>(base.data());
  T* o = static_cast<T*>(out.mutable_data());
  py::gil_scoped_release release;
  rml::circuits::masked_mix<T>(d, m, b, o, n, s_tot, s, j, k);
}

}  // namespace

void register_circuits(py::module_ m) {
  m.doc() = "Batched circuit evaluation: masked residual mixing (sparse gather-add)";
  m.def(
      "masked_mix",
      [](py::array delta, py::array mask, py::array base, py::array out) {
        check_c(delta, "delta", 3);
        check_c(mask, "mask", 3);
        check_c(base, "base", 2);
        check_c(out, "out", 3);
        if (!mask.dtype().is(py::dtype::of<std::uint8_t>())) {
          throw py::type_error("mask: expected dtype uint8");
        }
        if (delta.dtype().is(py::dtype::of<float>())) {
          run<float>(delta, mask, base, out);
        } else if (delta.dtype().is(py::dtype::of<double>())) {
          run<double>(delta, mask, base, out);
        } else {
          throw py::type_error("delta: expected dtype float32 or float64");
        }
      },
      "delta"_a, "mask"_a, "base"_a, "out"_a,
      "out[n, j] = base[j] + sum_{s < S} (mask[n, s, j] != 0) * delta[n, s] (sparse gather-add).");
}
