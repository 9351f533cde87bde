#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "common/arrays.hpp"
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
void run(const py::array& delta, const py::array& mask, const py::array& base, py::array& out,
         bool source_first, const py::object& ln_w, const py::object& ln_b, double eps,
         const py::object& need, int n_threads) {
  const py::array& out_c = out;
  for (const py::array* a : {&delta, &base, &out_c}) {
    if (!rml::has_dtype<T>(*a)) {
      throw py::type_error("delta, base and out must share one float dtype");
    }
  }
  // batch first: delta (N, S_tot, K), out (N, J, K); source first: delta (S_tot, N, K), out (J, N, K)
  const int dn = source_first ? 1 : 0;
  const auto n = static_cast<std::int64_t>(delta.shape(dn));
  const auto s_tot = static_cast<std::int64_t>(delta.shape(1 - dn));
  const auto k = static_cast<std::int64_t>(delta.shape(2));
  const auto s = static_cast<std::int64_t>(mask.shape(1));
  const auto j = static_cast<std::int64_t>(mask.shape(2));
  if (mask.shape(0) != n || s > s_tot) {
    throw py::value_error("mask must have shape (N, S <= S_tot, J)");
  }
  if (base.shape(0) != mask.shape(2) || base.shape(1) != delta.shape(2)) {
    throw py::value_error("base must have shape (J, K)");
  }
  if (out.shape(dn) != n || out.shape(1 - dn) != j || out.shape(2) != k) {
    throw py::value_error(source_first ? "out must have shape (J, N, K)"
                                       : "out must have shape (N, J, K)");
  }
  if (!out.writeable()) throw py::value_error("out: expected a writable array");
  const T* w_ptr = nullptr;
  const T* b_ptr = nullptr;
  std::int64_t d_row = 1;
  py::array w_arr, b_arr;
  if (!ln_w.is_none()) {
    w_arr = ln_w.cast<py::array>();
    check_c(w_arr, "ln_w", 1);
    if (!rml::has_dtype<T>(w_arr)) throw py::type_error("ln_w: expected delta's dtype");
    d_row = static_cast<std::int64_t>(w_arr.shape(0));
    if (d_row < 1 || k % d_row != 0) throw py::value_error("ln_w: its length must divide K");
    w_ptr = static_cast<const T*>(w_arr.data());
    if (!ln_b.is_none()) {
      b_arr = ln_b.cast<py::array>();
      check_c(b_arr, "ln_b", 1);
      if (!rml::has_dtype<T>(b_arr)) {
        throw py::type_error("ln_b: expected delta's dtype");
      }
      if (b_arr.shape(0) != w_arr.shape(0)) throw py::value_error("ln_b: expected ln_w's length");
      b_ptr = static_cast<const T*>(b_arr.data());
    }
  } else if (!ln_b.is_none()) {
    throw py::value_error("ln_b: given without ln_w");
  }
  if (!(eps > 0.0)) throw py::value_error("eps: expected a positive number");
  const std::uint8_t* need_ptr = nullptr;
  py::array need_arr;
  if (!need.is_none()) {
    need_arr = need.cast<py::array>();
    check_c(need_arr, "need", 2);
    if (!rml::has_dtype<std::uint8_t>(need_arr)) {
      throw py::type_error("need: expected dtype uint8");
    }
    if (need_arr.shape(0) != n || need_arr.shape(1) != j) {
      throw py::value_error("need must have shape (N, J)");
    }
    need_ptr = static_cast<const std::uint8_t*>(need_arr.data());
  }
  const T* d = static_cast<const T*>(delta.data());
  const auto* m = static_cast<const std::uint8_t*>(mask.data());
  const T* b = static_cast<const T*>(base.data());
  T* o = static_cast<T*>(out.mutable_data());
  py::gil_scoped_release release;
  rml::circuits::masked_mix<T>(d, m, b, o, n, s_tot, s, j, k, source_first, w_ptr, b_ptr, d_row,
                               eps, need_ptr, n_threads);
}

}  // namespace

void register_circuits(py::module_ m) {
  m.doc() = "Batched circuit evaluation: masked residual mixing (sparse gather-add)";
  m.def(
      "masked_mix",
      [](py::array delta, py::array mask, py::array base, py::array out, bool source_first,
         py::object ln_w, py::object ln_b, double eps, py::object need, int n_threads) {
        check_c(delta, "delta", 3);
        check_c(mask, "mask", 3);
        check_c(base, "base", 2);
        check_c(out, "out", 3);
        if (!rml::has_dtype<std::uint8_t>(mask)) {
          throw py::type_error("mask: expected dtype uint8");
        }
        if (rml::has_dtype<float>(delta)) {
          run<float>(delta, mask, base, out, source_first, ln_w, ln_b, eps, need, n_threads);
        } else if (rml::has_dtype<double>(delta)) {
          run<double>(delta, mask, base, out, source_first, ln_w, ln_b, eps, need, n_threads);
        } else {
          throw py::type_error("delta: expected dtype float32 or float64");
        }
      },
      "delta"_a, "mask"_a, "base"_a, "out"_a, "source_first"_a = false, "ln_w"_a = py::none(),
      "ln_b"_a = py::none(), "eps"_a = 1e-5, "need"_a = py::none(),
      "n_threads"_a = 0,
      "out[n, j] = base[j] + sum_{s < S} (mask[n, s, j] != 0) * delta[n, s] (sparse gather-add); "
      "source_first: delta (S_tot, N, K) and out (J, N, K); ln_w/ln_b: layer norm of every "
      "length-D row of the output; need (N, J) uint8: blocks with need == 0 are zeroed "
      "instead; n_threads <= 0: the OpenMP default.");
}
