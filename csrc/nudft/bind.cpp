#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <complex>
#include <string>
#include <vector>

#include "common/arrays.hpp"
#include "nudft/nudft.hpp"
#include "nudft/row_fft.hpp"

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

// a.shape(i), or a ValueError naming the argument when a has too few dimensions (pybind11's
// own bounds check would raise IndexError).
py::ssize_t axis_len(const py::array& a, const char* name, py::ssize_t i) {
  if (i < 0 || i >= a.ndim()) {
    throw py::value_error(std::string(name) + ": expected at least " + std::to_string(i + 1) +
                          " dimensions, got ndim=" + std::to_string(a.ndim()));
  }
  return a.shape(i);
}

template <typename T>
const T* in_view(const py::array& a, const char* name, const std::vector<py::ssize_t>& shape) {
  if (!rml::has_dtype<T>(a)) {
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
  const py::ssize_t B = axis_len(x, "x", 0), N = axis_len(x, "x", 1), C = axis_len(v, "v", 2);
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
  const py::ssize_t B = axis_len(x, "x", 0), M = axis_len(x, "x", 1), O = axis_len(re, "re", 2);
  const auto F = static_cast<py::ssize_t>(g.n_freq());
  const T* xp = in_view<T>(x, "x", {B, M, g.dim});
  const T* rp = in_view<T>(re, "re", {B, F, O});
  const T* ip = in_view<T>(im, "im", {B, F, O});
  const T* wp = in_view<T>(w, "w", {F});
  T* yp = out_view<T>(y, "y", {B, M, O});
  py::gil_scoped_release release;
  rml::nudft::type2<T>(xp, rp, ip, wp, B, M, O, g, sign, yp);
}

rml::nudft::FineGrid make_fine_grid(const std::vector<std::int64_t>& nf,
                                    const std::vector<double>& dxi, int w, double beta) {
  if (nf.empty() || nf.size() > 2 || nf.size() != dxi.size()) {
    throw py::value_error("nf and dxi must have the same length, 1 or 2");
  }
  if (w < 2 || w > 32) throw py::value_error("w must be in [2, 32], got " + std::to_string(w));
  if (!(beta > 0.0)) throw py::value_error("beta must be > 0");
  rml::nudft::FineGrid fg{};
  fg.dim = static_cast<int>(nf.size());
  fg.nf[1] = 1;
  fg.dxi[1] = 1.0;
  for (int i = 0; i < fg.dim; ++i) {
    const auto k = static_cast<std::size_t>(i);
    if (nf[k] < 2 * w) throw py::value_error("nf must be >= 2 w on every axis");
    if (!(dxi[k] > 0.0)) throw py::value_error("dxi must be > 0");
    fg.nf[i] = nf[k];
    fg.dxi[i] = dxi[k];
  }
  fg.w = w;
  fg.beta = beta;
  return fg;
}

// The optional polynomial kernel table: a C-contiguous float64 array of shape (degree + 1, w).
void attach_poly(rml::nudft::FineGrid& fg, const py::object& poly) {
  if (poly.is_none()) return;
  const py::array a = poly.cast<py::array>();
  if (a.ndim() != 2 || a.shape(1) != fg.w || a.shape(0) < 1) {
    throw py::value_error("poly must have shape (degree + 1, w)");
  }
  fg.poly = in_view<double>(a, "poly", {a.shape(0), static_cast<py::ssize_t>(fg.w)});
  fg.degree = static_cast<int>(a.shape(0)) - 1;
}

std::vector<py::ssize_t> grid_shape(py::ssize_t B, const rml::nudft::FineGrid& fg, py::ssize_t C) {
  if (fg.dim == 1) return {B, static_cast<py::ssize_t>(fg.nf[0]), C};
  return {B, static_cast<py::ssize_t>(fg.nf[0]), static_cast<py::ssize_t>(fg.nf[1]), C};
}

template <typename T>
void spread_impl(const py::array& x, const py::array& v, const rml::nudft::FineGrid& fg,
                 bool ones, py::array& g) {
  if (x.ndim() != 3 || v.ndim() != 3) throw py::value_error("x and v must be 3-D");
  const py::ssize_t B = axis_len(x, "x", 0), N = axis_len(x, "x", 1), C = axis_len(v, "v", 2);
  const T* xp = in_view<T>(x, "x", {B, N, fg.dim});
  const T* vp = in_view<T>(v, "v", {B, N, C});
  T* gp = out_view<T>(g, "g", grid_shape(B, fg, C + (ones ? 1 : 0)));
  py::gil_scoped_release release;
  rml::nudft::spread<T>(xp, vp, B, N, C, ones, fg, gp);
}

template <typename T>
void interp_impl(const py::array& x, const py::array& g, const rml::nudft::FineGrid& fg,
                 py::array& y) {
  if (x.ndim() != 3 || g.ndim() != fg.dim + 2) throw py::value_error("x must be 3-D, g (B, *nf, O)");
  const py::ssize_t B = axis_len(x, "x", 0), M = axis_len(x, "x", 1), O = axis_len(g, "g", g.ndim() - 1);
  const T* xp = in_view<T>(x, "x", {B, M, fg.dim});
  const T* gp = in_view<T>(g, "g", grid_shape(B, fg, O));
  T* yp = out_view<T>(y, "y", {B, M, O});
  py::gil_scoped_release release;
  rml::nudft::interp<T>(xp, gp, B, M, O, fg, yp);
}

bool is_f64(const py::array& a) { return rml::has_dtype<double>(a); }

// Whether a holds std::complex<T>, by kind and size (numpy hands out equal complex dtypes as
// distinct objects, e.g. scipy's fft output, so an identity check is not enough).
template <typename T>
bool is_complex(const py::array& a) {
  return a.dtype().kind() == 'c' && a.dtype().itemsize() == static_cast<py::ssize_t>(2 * sizeof(T));
}

// The fused 1-D transforms need an even fine grid with the modes below its Nyquist row.
void check_fused_1d(const rml::nudft::FineGrid& fg, std::int64_t K) {
  if (fg.dim != 1) throw py::value_error("nf must have one entry (1-D)");
  if (fg.nf[0] % 2 != 0) throw py::value_error("nf must be even");
  if (K < 0 || K >= fg.nf[0] / 2) throw py::value_error("K must be in [0, nf / 2)");
}

template <typename T>
void nufft1_1d_impl(const py::array& x, const py::array& v, const rml::nudft::FineGrid& fg,
                    std::int64_t K, const py::array& scale, int sign_im, py::array& re,
                    py::array& im, const py::object& dens_re, const py::object& dens_im) {
  if (x.ndim() != 3 || v.ndim() != 3) throw py::value_error("x and v must be 3-D");
  const py::ssize_t B = axis_len(x, "x", 0), N = axis_len(x, "x", 1), C = axis_len(v, "v", 2), F = K + 1;
  const T* xp = in_view<T>(x, "x", {B, N, 1});
  const T* vp = in_view<T>(v, "v", {B, N, C});
  const double* scp = in_view<double>(scale, "scale", {F});
  T* rp = out_view<T>(re, "re", {B, F, C});
  T* ip = out_view<T>(im, "im", {B, F, C});
  T* drp = nullptr;
  T* dip = nullptr;
  if (!dens_re.is_none()) {
    py::array dr = dens_re.cast<py::array>(), di = dens_im.cast<py::array>();
    drp = out_view<T>(dr, "dens_re", {B, F});
    dip = out_view<T>(di, "dens_im", {B, F});
  }
  py::gil_scoped_release release;
  rml::nudft::nufft1_1d<T>(xp, vp, B, N, C, drp != nullptr, fg, K, scp, sign_im, rp, ip, drp, dip);
}

template <typename T>
void nufft2_1d_impl(const py::array& x, const py::array& re, const py::array& im,
                    const rml::nudft::FineGrid& fg, std::int64_t K, const py::array& scale,
                    int sign_im, py::array& y) {
  if (x.ndim() != 3 || re.ndim() != 3) throw py::value_error("x and re must be 3-D");
  const py::ssize_t B = axis_len(x, "x", 0), M = axis_len(x, "x", 1), O = axis_len(re, "re", 2), F = K + 1;
  const T* xp = in_view<T>(x, "x", {B, M, 1});
  const T* rp = in_view<T>(re, "re", {B, F, O});
  const T* ip = in_view<T>(im, "im", {B, F, O});
  const double* scp = in_view<double>(scale, "scale", {F});
  T* yp = out_view<T>(y, "y", {B, M, O});
  py::gil_scoped_release release;
  rml::nudft::nufft2_1d<T>(xp, rp, ip, B, M, O, fg, K, scp, sign_im, yp);
}

template <typename T>
void row_fft_impl(py::array& re, py::array& im, int sign) {
  if (re.ndim() != 2) throw py::value_error("re must be 2-D (n, C)");
  const py::ssize_t n = axis_len(re, "re", 0), C = axis_len(re, "re", 1);
  T* rp = out_view<T>(re, "re", {n, C});
  T* ip = out_view<T>(im, "im", {n, C});
  const rml::nudft::RowFFT<T> fft(n, sign);
  py::gil_scoped_release release;
  std::vector<T> wr(static_cast<std::size_t>(n * C)), wi(static_cast<std::size_t>(n * C));
  if (!fft.run(rp, ip, wr.data(), wi.data(), C)) {
    std::copy(wr.begin(), wr.end(), rp);
    std::copy(wi.begin(), wi.end(), ip);
  }
}

// Complex spectrum arrays (complex64 / complex128) viewed as interleaved real pairs.
template <typename T>
const T* complex_view(const py::array& a, const char* name, const std::vector<py::ssize_t>& shape) {
  if (!is_complex<T>(a)) {
    throw py::type_error(std::string(name) + ": expected dtype " +
                         std::string(py::str(py::dtype::of<std::complex<T>>())) + ", got " +
                         std::string(py::str(a.dtype())));
  }
  if (!(a.flags() & py::array::c_style)) {
    throw py::value_error(std::string(name) + ": expected a C-contiguous array");
  }
  if (a.ndim() != static_cast<py::ssize_t>(shape.size())) {
    throw py::value_error(std::string(name) + ": expected ndim " + std::to_string(shape.size()));
  }
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (a.shape(static_cast<py::ssize_t>(i)) != shape[i]) {
      throw py::value_error(std::string(name) + ": wrong size of axis " + std::to_string(i));
    }
  }
  return static_cast<const T*>(a.data());
}

// The spectrum shape of S / X (B, rows[, cols], channels) for half-widths K, checked.
rml::nudft::SpectrumShape spectrum_shape(const py::array& a, const std::vector<std::int64_t>& K) {
  if (K.empty() || K.size() > 2) throw py::value_error("K must have 1 or 2 entries");
  rml::nudft::SpectrumShape sh{};
  sh.dim = static_cast<int>(K.size());
  if (a.ndim() != sh.dim + 2) throw py::value_error("spectrum must have shape (B, rows[, cols], C)");
  sh.rows = a.shape(1);
  sh.cols = sh.dim == 2 ? a.shape(2) : 1;
  sh.K[0] = K[0];
  sh.K[1] = sh.dim == 2 ? K[1] : 0;
  if (sh.K[0] < 0 || sh.K[1] < 0) throw py::value_error("K must be >= 0");
  const bool fits = sh.dim == 1 ? sh.rows >= sh.K[0] + 1
                                : (sh.rows >= 2 * sh.K[0] + 1 && sh.cols >= sh.K[1] + 1);
  if (!fits) throw py::value_error("the spectrum array is too small for the modes K");
  return sh;
}

std::vector<py::ssize_t> spec_dims(py::ssize_t B, const rml::nudft::SpectrumShape& sh, py::ssize_t C) {
  if (sh.dim == 1) return {B, static_cast<py::ssize_t>(sh.rows), C};
  return {B, static_cast<py::ssize_t>(sh.rows), static_cast<py::ssize_t>(sh.cols), C};
}

py::ssize_t n_modes(const rml::nudft::SpectrumShape& sh) {
  return sh.dim == 1 ? sh.K[0] + 1 : (2 * sh.K[0] + 1) * (sh.K[1] + 1);
}

template <typename T>
void modes_out_impl(const py::array& S, const std::vector<std::int64_t>& K,
                    const py::array& scale, int sign_im, py::array& re, py::array& im,
                    const py::object& dens_re, const py::object& dens_im) {
  const auto sh = spectrum_shape(S, K);
  const py::ssize_t B = axis_len(S, "S", 0), Cg = axis_len(S, "S", S.ndim() - 1), F = n_modes(sh);
  const T* sp = complex_view<T>(S, "S", spec_dims(B, sh, Cg));
  const double* scp = in_view<double>(scale, "scale", {F});
  const bool dens = !dens_re.is_none();
  const py::ssize_t C = Cg - (dens ? 1 : 0);
  if (C < 0) throw py::value_error("S has no density channel");
  T* rp = out_view<T>(re, "re", {B, F, C});
  T* ip = out_view<T>(im, "im", {B, F, C});
  T* drp = nullptr;
  T* dip = nullptr;
  if (dens) {
    py::array dr = dens_re.cast<py::array>(), di = dens_im.cast<py::array>();
    drp = out_view<T>(dr, "dens_re", {B, F});
    dip = out_view<T>(di, "dens_im", {B, F});
  }
  py::gil_scoped_release release;
  rml::nudft::modes_out<T>(sp, B, Cg, C, sh, scp, sign_im, rp, ip, drp, dip);
}

template <typename T>
void modes_in_impl(const py::array& re, const py::array& im, const std::vector<std::int64_t>& K,
                   const py::array& scale, int sign_im, py::array& X) {
  const auto sh = spectrum_shape(X, K);
  const py::ssize_t B = axis_len(re, "re", 0), O = axis_len(re, "re", 2), F = n_modes(sh);
  const T* rp = in_view<T>(re, "re", {B, F, O});
  const T* ip = in_view<T>(im, "im", {B, F, O});
  const double* scp = in_view<double>(scale, "scale", {F});
  T* xp = const_cast<T*>(complex_view<T>(X, "X", spec_dims(B, sh, O)));
  if (!X.writeable()) throw py::value_error("X: expected a writable array");
  py::gil_scoped_release release;
  rml::nudft::modes_in<T>(rp, ip, B, O, sh, scp, sign_im, xp);
}

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
  m.def(
      "spread",
      [](const py::array& x, const py::array& v, const std::vector<std::int64_t>& nf,
         const std::vector<double>& dxi, int w, double beta, bool ones, py::array g,
         const py::object& poly) {
        auto fg = make_fine_grid(nf, dxi, w, beta);
        attach_poly(fg, poly);
        if (is_f64(x)) {
          spread_impl<double>(x, v, fg, ones, g);
        } else {
          spread_impl<float>(x, v, fg, ones, g);
        }
      },
      "x"_a, "v"_a, "nf"_a, "dxi"_a, "w"_a, "beta"_a, "ones"_a, "g"_a, "poly"_a = py::none(),
      "NUFFT spreading: g[b,j,c] = sum_n v[b,n,c] phi(j - frac(dxi x[b,n]) nf) on the periodic "
      "fine grid g [B,*nf,C(+1)] (exponential-of-semicircle kernel of width w, shape beta); "
      "ones=True adds a last channel spreading the value 1 (density); poly (degree+1, w) float64: "
      "the kernel as per-node polynomials in t = 2 s - 1 (Horner), None: exact exp/sqrt.");
  m.def(
      "interp",
      [](const py::array& x, const py::array& g, const std::vector<std::int64_t>& nf,
         const std::vector<double>& dxi, int w, double beta, py::array y,
         const py::object& poly) {
        auto fg = make_fine_grid(nf, dxi, w, beta);
        attach_poly(fg, poly);
        if (is_f64(x)) {
          interp_impl<double>(x, g, fg, y);
        } else {
          interp_impl<float>(x, g, fg, y);
        }
      },
      "x"_a, "g"_a, "nf"_a, "dxi"_a, "w"_a, "beta"_a, "y"_a, "poly"_a = py::none(),
      "NUFFT interpolation (adjoint of spread): y[b,m,o] = sum_j phi(j - u(x[b,m])) g[b,j,o]; "
      "poly as for spread.");
  m.def(
      "nufft1_1d",
      [](const py::array& x, const py::array& v, const std::vector<std::int64_t>& nf,
         const std::vector<double>& dxi, int w, double beta, const py::object& poly,
         std::int64_t K, const py::array& scale, int sign_im, py::array re, py::array im,
         const py::object& dens_re, const py::object& dens_im) {
        check_sign(sign_im);
        if (dens_re.is_none() != dens_im.is_none()) {
          throw py::value_error("dens_re and dens_im must both be arrays or both None");
        }
        auto fg = make_fine_grid(nf, dxi, w, beta);
        attach_poly(fg, poly);
        check_fused_1d(fg, K);
        if (is_f64(x)) {
          nufft1_1d_impl<double>(x, v, fg, K, scale, sign_im, re, im, dens_re, dens_im);
        } else {
          nufft1_1d_impl<float>(x, v, fg, K, scale, sign_im, re, im, dens_re, dens_im);
        }
      },
      "x"_a, "v"_a, "nf"_a, "dxi"_a, "w"_a, "beta"_a, "poly"_a, "K"_a, "scale"_a, "sign_im"_a,
      "re"_a, "im"_a, "dens_re"_a = py::none(), "dens_im"_a = py::none(),
      "Fused 1-D type 1 = modes_out(rfft(spread(x, v))) per batch element (no grid array): "
      "x [B,N,1], v [B,N,C] -> re/im [B,K+1,C] (and the density [B,K+1] with dens_re/dens_im).");
  m.def(
      "nufft2_1d",
      [](const py::array& x, const py::array& re, const py::array& im,
         const std::vector<std::int64_t>& nf, const std::vector<double>& dxi, int w,
         double beta, const py::object& poly, std::int64_t K, const py::array& scale,
         int sign_im, py::array y) {
        check_sign(sign_im);
        auto fg = make_fine_grid(nf, dxi, w, beta);
        attach_poly(fg, poly);
        check_fused_1d(fg, K);
        if (is_f64(x)) {
          nufft2_1d_impl<double>(x, re, im, fg, K, scale, sign_im, y);
        } else {
          nufft2_1d_impl<float>(x, re, im, fg, K, scale, sign_im, y);
        }
      },
      "x"_a, "re"_a, "im"_a, "nf"_a, "dxi"_a, "w"_a, "beta"_a, "poly"_a, "K"_a, "scale"_a,
      "sign_im"_a, "y"_a,
      "Fused 1-D type 2 = interp(irfft(modes_in(re, im), n=nf)): re/im [B,K+1,O] -> y [B,M,O].");
  m.def(
      "row_fft",
      [](py::array re, py::array im, int sign) {
        check_sign(sign);
        if (is_f64(re)) {
          row_fft_impl<double>(re, im, sign);
        } else {
          row_fft_impl<float>(re, im, sign);
        }
      },
      "re"_a, "im"_a, "sign"_a,
      "In-place unnormalised complex FFT along axis 0 of the planes re, im (n, C), n a product "
      "of 2, 3 and 5: out[k] = sum_j in[j] exp(sign 2 pi i j k / n).");
  m.def(
      "modes_out",
      [](const py::array& S, const std::vector<std::int64_t>& K, const py::array& scale,
         int sign_im, py::array re, py::array im, const py::object& dens_re,
         const py::object& dens_im) {
        check_sign(sign_im);
        if (dens_re.is_none() != dens_im.is_none()) {
          throw py::value_error("dens_re and dens_im must both be arrays or both None");
        }
        if (is_complex<double>(S)) {
          modes_out_impl<double>(S, K, scale, sign_im, re, im, dens_re, dens_im);
        } else {
          modes_out_impl<float>(S, K, scale, sign_im, re, im, dens_re, dens_im);
        }
      },
      "S"_a, "K"_a, "scale"_a, "sign_im"_a, "re"_a, "im"_a, "dens_re"_a = py::none(),
      "dens_im"_a = py::none(),
      "Type-1 copy-out: the half-space modes of the spectrum S [B,rows(,cols),Cg] (complex; "
      "1-D rows >= K+1; 2-D row k0 mod rows, column k1) into planes re/im [B,F,C] scaled by scale[F] (float64), Im times sign_im; "
      "with dens_re/dens_im the last channel into [B,F].");
  m.def(
      "modes_in",
      [](const py::array& re, const py::array& im, const std::vector<std::int64_t>& K,
         const py::array& scale, int sign_im, py::array X) {
        check_sign(sign_im);
        if (is_f64(re)) {
          modes_in_impl<double>(re, im, K, scale, sign_im, X);
        } else {
          modes_in_impl<float>(re, im, K, scale, sign_im, X);
        }
      },
      "re"_a, "im"_a, "K"_a, "scale"_a, "sign_im"_a, "X"_a,
      "Type-2 copy-in: X [B,rows(,cols),O] (complex, overwritten) = 0 except at the half-space "
      "modes, scale[f] (re + i sign_im im)[b,f,:].");
}
