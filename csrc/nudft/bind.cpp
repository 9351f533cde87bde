#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "nudft/nudft.hpp"

namespace py = pybind11;
using namespace pybind11::literals;

namespace {

using rml::nudft::Grid;

Grid make_grid(const std::vector<std::int64_t>& K, const std::vector<double>& dxi) {
  if (K.empty() || K.size() > 2 || K.size() != dxi.size()) {
    throw py::value_error("K and dxi must have the same length, 1 or 2; got " +
                          std::to_string(K.size()) + " and " + std::to_string(dxi.size()));
  }
  Grid g{};
  g.dim = static_cast<int>(K.size());
  for (int i = 0; i < g.dim; ++i) {
    if (K[static_cast<std::size_t>(i)] < 0) throw py::value_error("K must be >= 0");
    if (!(dxi[static_cast<std::size_t>(i)] > 0.0)) throw py::value_error("dxi must be > 0");
    g.K[i] = K[static_cast<std::size_t>(i)];
    g.dxi[i] = dxi[static_cast<std::size_t>(i)];
  }
  return g;
}

template <typename T>
const T* in_view(const py::array& a, const char* name, const std::vector<py::ssize_t>& shape) {
  if (!a.dtype().is(py::dtype::of<T>())) {
    throw py::type_error(std::string(name) + ": expected dtype " +
                         std::string(py::str(py::dtype::of<T>())) + ", got " +
                         std::string(py::str(a.dtype())));
  }
  if (!(a.flags() & py::array::c_style)) {
    throw py::value_error(std::string(name) + ": expected a C-contiguous array");
  }
  if (a.ndim() != static_cast<py::ssize_t>(shape.size())) {
    throw py::value_error(std::string(name) + ": expected ndim " + std::to_string(shape.size()) +
                          ", got " + std::to_string(a.ndim()));
  }
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (a.shape(static_cast<py::ssize_t>(i)) != shape[i]) {
      throw py::value_error(std::string(name) + ": wrong size of axis " + std::to_string(i) +
                            ": expected " + std::to_string(shape[i]) + ", got " +
                            std::to_string(a.shape(static_cast<py::ssize_t>(i))));
    }
  }
  return static_cast<const T*>(a.data());
}

template <typename T>
T* out_view(py::array& a, const char* name, const std::vector<py::ssize_t>& shape) {
  in_view<T>(a, name, shape);
  if (!a.writeable()) throw py::value_error(std::string(name) + ": expected a writable array");
  return static_cast<T*>(a.mutable_data());
}

int check_sign(int sign) {
  if (sign != 1 && sign != -1) throw py::value_error("sign must be +1 or -1");
  return sign;
}

template <typename T>
void type1_impl(const py::array& x, const py::array& v, const std::vector<std::int64_t>& K,
                const std::vector<double>& dxi, int sign, py::array& out_re, py::array& out_im,
                const py::object& dens_re, const py::object& dens_im) {
  const Grid g = make_grid(K, dxi);
  if (x.ndim() != 3 || v.ndim() != 3) throw py::value_error("x and v must be 3-D");
  const py::ssize_t B = x.shape(0), N = x.shape(1), C = v.shape(2);
  const auto F = static_cast<py::ssize_t>(g.n_freq());
  const T* xp = in_view<T>(x, "x", {B, N, g.dim});
  const T* vp = in_view<T>(v, "v", {B, N, C});
  T* rp = out_view<T>(out_re, "out_re", {B, F, C});
  T* ip = out_view<T>(out_im, "out_im", {B, F, C});
  T* drp = nullptr;
  T* dip = nullptr;
  if (dens_re.is_none() != dens_im.is_none()) {
    throw py::value_error("dens_re and dens_im must both be arrays or both None");
  }
  if (!dens_re.is_none()) {
    py::array dr = dens_re.cast<py::array>(), di = dens_im.cast<py::array>();
    drp = out_view<T>(dr, "dens_re", {B, F});
    dip = out_view<T>(di, "dens_im", {B, F});
  }
  py::gil_scoped_release release;
  rml::nudft::type1<T>(xp, vp, B, N, C, g, sign, rp, ip, drp, dip);
}

template <typename T>
void type2_impl(const py::array& x, const py::array& re, const py::array& im, const py::array& w,
                const std::vector<std::int64_t>& K, const std::vector<double>& dxi, int sign,
                py::array& y) {
  const Grid g = make_grid(K, dxi);
  if (x.ndim() != 3 || re.ndim() != 3) throw py::value_error("x and re must be 3-D");
  const py::ssize_t B = x.shape(0), M = x.shape(1), O = re.shape(2);
  const auto F = static_cast<py::ssize_t>(g.n_freq());
  const T* xp = in_view<T>(x, "x", {B, M, g.dim});
  const T* rp = in_view<T>(re, "re", {B, F, O});
  const T* ip = in_view<T>(im, "im", {B, F, O});
  const T* wp = in_view<T>(w, "w", {F});
  T* yp = out_view<T>(y, "y", {B, M, O});
  py::gil_scoped_release release;
  rml::nudft::type2<T>(xp, rp, ip, wp, B, M, O, g, sign, yp);
}

bool is_f64(const py::array& a) { return a.dtype().is(py::dtype::of<double>()); }

}  // namespace

void register_nudft(py::module_ m) {
  m.doc() = "Batched non-uniform DFTs on a half-space frequency grid (direct sums, no [B,N,F] phases)";
  m.def(
      "type1",
      [](const py::array& x, const py::array& v, const std::vector<std::int64_t>& K,
         const std::vector<double>& dxi, int sign, py::array out_re, py::array out_im,
         const py::object& dens_re, const py::object& dens_im) {
        check_sign(sign);
        if (is_f64(x)) {
          type1_impl<double>(x, v, K, dxi, sign, out_re, out_im, dens_re, dens_im);
        } else {
          type1_impl<float>(x, v, K, dxi, sign, out_re, out_im, dens_re, dens_im);
        }
      },
      "x"_a, "v"_a, "K"_a, "dxi"_a, "sign"_a, "out_re"_a, "out_im"_a, "dens_re"_a = py::none(),
      "dens_im"_a = py::none(),
      "out[b,f,c] = sum_n v[b,n,c] exp(sign*i*2pi*xi_f.x[b,n]) into planes out_re/out_im "
      "[B,F,C]; optionally the density sum_n exp(...) into dens_re/dens_im [B,F].");
  m.def(
      "type2",
      [](const py::array& x, const py::array& re, const py::array& im, const py::array& w,
         const std::vector<std::int64_t>& K, const std::vector<double>& dxi, int sign,
         py::array y) {
        check_sign(sign);
        if (is_f64(x)) {
          type2_impl<double>(x, re, im, w, K, dxi, sign, y);
        } else {
          type2_impl<float>(x, re, im, w, K, dxi, sign, y);
        }
      },
      "x"_a, "re"_a, "im"_a, "w"_a, "K"_a, "dxi"_a, "sign"_a, "y"_a,
      "y[b,m,o] = sum_f w[f] Re((re+i*im)[b,f,o] exp(sign*i*2pi*xi_f.x[b,m])) into y [B,M,O].");
}
