#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cmath>
#include <limits>
#include <string>

#include "common/arrays.hpp"
#include "sgg/fft.hpp"
#include "sgg/sgg.hpp"

namespace py = pybind11;
using namespace pybind11::literals;

namespace {

// Largest dim the kernels accept: keeps (dim + 3) / 4, the padded row and the Philox counter
// arithmetic far from int64 overflow (a row of 2^40 float64 values is 8 TiB anyway).
constexpr std::int64_t kMaxDim = std::int64_t{1} << 40;
// good_size(n) doubles up to the first f * 2^m >= n: n <= 2^60 keeps that product in int64.
constexpr std::int64_t kMaxFftSize = std::int64_t{1} << 60;

void check_dim(std::int64_t dim) {
  if (dim < 1 || dim > kMaxDim) {
    throw py::value_error("dim must be in [1, 2**40], got " + std::to_string(dim));
  }
}

void check_params(std::int64_t dim, double sigma, double k, double p) {
  check_dim(dim);
  if (!(sigma > 0.0) || !std::isfinite(sigma)) throw py::value_error("sigma must be finite and > 0");
  if (!(k > 0.0) || !std::isfinite(k)) throw py::value_error("k must be finite and > 0");
  if (!(p > 0.0) || !std::isfinite(p)) throw py::value_error("p must be finite and > 0");
}

template <typename T>
void sample_into(py::array out, std::int64_t n, std::int64_t dim, double sigma, double k, double p,
                 std::uint64_t seed, std::uint64_t offset) {
  T* data = rml::writable_vector<T>(out, "out");
  if (n > std::numeric_limits<std::int64_t>::max() / dim) {
    throw py::value_error("n * dim overflows int64 (n=" + std::to_string(n) + ", dim=" +
                          std::to_string(dim) + ")");
  }
  if (static_cast<std::int64_t>(out.shape(0)) != n * dim) {
    throw py::value_error("out: expected n * dim = " + std::to_string(n * dim) + " elements, got " +
                          std::to_string(out.shape(0)));
  }
  py::gil_scoped_release release;
  rml::sgg::sample(data, n, dim, sigma, k, p, seed, offset);
}

const double* readonly_vector(const py::array& a, const char* name) {
  if (!rml::has_dtype<double>(a)) {
    throw py::type_error(std::string(name) + ": expected float64, got " + std::string(py::str(a.dtype())));
  }
  if (a.ndim() != 1) throw py::value_error(std::string(name) + ": expected a 1-D array");
  if (!(a.flags() & py::array::c_style)) throw py::value_error(std::string(name) + ": expected a C-contiguous array");
  return static_cast<const double*>(a.data());
}

}  // namespace

void register_sgg(py::module_ m) {
  m.doc() = "Spherical Generalized Gamma mechanisms: Philox sampling and privacy-loss CDF";
  m.attr("GAMMA_ATTEMPTS") = rml::sgg::kGammaAttempts;
  m.def("counters_per_row", [](std::int64_t dim) {
          check_dim(dim);
          return rml::sgg::counters_per_row(dim);
        }, "dim"_a,
        "Philox counters consumed by one sample of dimension dim.");
  m.def(
      "sample",
      [](py::array out, std::int64_t n, std::int64_t dim, double sigma, double k, double p,
         std::uint64_t seed, std::uint64_t offset) {
        check_params(dim, sigma, k, p);
        if (n < 0) throw py::value_error("n must be >= 0");
        if (rml::has_dtype<float>(out)) {
          sample_into<float>(std::move(out), n, dim, sigma, k, p, seed, offset);
        } else {
          sample_into<double>(std::move(out), n, dim, sigma, k, p, seed, offset);
        }
      },
      "out"_a, "n"_a, "dim"_a, "sigma"_a, "k"_a, "p"_a, "seed"_a, "offset"_a,
      "Fill the flat float32/float64 buffer out (n * dim) with SGG(sigma, k, p) samples.");
  m.def(
      "log_radius",
      [](py::array out, std::int64_t dim, double k, double p, std::uint64_t seed,
         std::uint64_t offset) {
        check_params(dim, 1.0, k, p);
        double* data = rml::writable_vector<double>(out, "out");
        const auto n = static_cast<std::int64_t>(out.shape(0));
        py::gil_scoped_release release;
        rml::sgg::log_radius(data, n, dim, k, p, seed, offset);
      },
      "out"_a, "dim"_a, "k"_a, "p"_a, "seed"_a, "offset"_a,
      "log(R / sigma) = log(G) / p per row, from the same stream layout as sample().");
  m.def(
      "loss_cdf",
      [](py::array out, const py::array& losses, const py::array& edges, const py::array& r_nodes,
         const py::array& r_weights, const py::array& gl_t, const py::array& gl_w,
         const py::array& h_table, const py::array& dh_table, std::int64_t dim, double sigma,
         double k, double p, double sensitivity, double log_norm) {
        check_params(dim, sigma, k, p);
        if (dim < 2) throw py::value_error("loss_cdf needs dim >= 2");
        if (!(sensitivity > 0.0) || !std::isfinite(sensitivity)) throw py::value_error("sensitivity must be finite and > 0");
        double* o = rml::writable_vector<double>(out, "out");
        const double* l = readonly_vector(losses, "losses");
        const double* ed = readonly_vector(edges, "edges");
        const double* rn = readonly_vector(r_nodes, "r_nodes");
        const double* rw = readonly_vector(r_weights, "r_weights");
        const double* gt = readonly_vector(gl_t, "gl_t");
        const double* gw = readonly_vector(gl_w, "gl_w");
        const double* ht = readonly_vector(h_table, "h_table");
        const double* dht = readonly_vector(dh_table, "dh_table");
        const auto panels = static_cast<std::int64_t>(edges.shape(0)) - 1;
        if (out.shape(0) != losses.shape(0)) throw py::value_error("out and losses must have the same length");
        if (panels < 1 || r_nodes.shape(0) != 16 * panels || r_weights.shape(0) != r_nodes.shape(0)) {
          throw py::value_error("r_nodes and r_weights must hold 16 nodes per panel of edges");
        }
        if (gl_t.shape(0) != gl_w.shape(0)) throw py::value_error("gl_t and gl_w must have the same length");
        if (h_table.shape(0) != dh_table.shape(0) || h_table.shape(0) < 2) throw py::value_error("h_table and dh_table must have the same length >= 2");
        for (py::ssize_t j = 0; j < r_nodes.shape(0); ++j) {
          if (!(rn[j] > 0.0) || !std::isfinite(rn[j])) throw py::value_error("r_nodes must be finite and > 0");
        }
        for (std::int64_t j = 0; j < panels; ++j) {
          if (!(ed[j] > 0.0) || !(ed[j + 1] > ed[j])) throw py::value_error("edges must be positive and increasing");
        }
        const rml::sgg::LossCdfSpec spec{dim, sigma, k, p, sensitivity, log_norm};
        const auto m_ = static_cast<std::int64_t>(losses.shape(0));
        const auto ngl = static_cast<std::int64_t>(gl_t.shape(0));
        const auto nt = static_cast<std::int64_t>(h_table.shape(0));
        py::gil_scoped_release release;
        rml::sgg::loss_cdf(o, l, m_, ed, panels, rn, rw, gt, gw, ngl, ht, dht, nt, spec);
      },
      "out"_a, "losses"_a, "edges"_a, "r_nodes"_a, "r_weights"_a, "gl_t"_a, "gl_w"_a,
      "h_table"_a, "dh_table"_a, "dim"_a, "sigma"_a, "k"_a, "p"_a, "sensitivity"_a, "log_norm"_a,
      "CDF of the SGG privacy loss at each loss (kink-aware radius quadrature x tabulated angle CDF).");
  m.def(
      "pld_delta_for_eps",
      [](py::array out, const py::array& eps, const py::array& pmf, std::int64_t lower, double h,
         double inf_mass) {
        double* o = rml::writable_vector<double>(out, "out");
        const double* e = readonly_vector(eps, "eps");
        const double* pm = readonly_vector(pmf, "pmf");
        if (out.shape(0) != eps.shape(0)) throw py::value_error("out and eps must have the same length");
        if (pmf.shape(0) < 1) throw py::value_error("pmf must not be empty");
        if (!(h > 0.0) || !std::isfinite(h)) throw py::value_error("h must be finite and > 0");
        if (!(inf_mass >= 0.0 && inf_mass <= 1.0)) throw py::value_error("inf_mass must lie in [0, 1]");
        const auto nq = static_cast<std::int64_t>(eps.shape(0));
        const auto n = static_cast<std::int64_t>(pmf.shape(0));
        py::gil_scoped_release release;
        rml::sgg::pld_delta_for_eps(o, e, nq, pm, n, lower, h, inf_mass);
      },
      "out"_a, "eps"_a, "pmf"_a, "lower"_a, "h"_a, "inf_mass"_a,
      "Vectorised delta(eps) of a discrete PLD (suffix sums + binary search).");
  m.def(
      "pld_epsilon_for_delta",
      [](py::array out, const py::array& delta, const py::array& pmf, std::int64_t lower, double h,
         double inf_mass) {
        double* o = rml::writable_vector<double>(out, "out");
        const double* d = readonly_vector(delta, "delta");
        const double* pm = readonly_vector(pmf, "pmf");
        if (out.shape(0) != delta.shape(0)) throw py::value_error("out and delta must have the same length");
        if (pmf.shape(0) < 1) throw py::value_error("pmf must not be empty");
        if (!(h > 0.0) || !std::isfinite(h)) throw py::value_error("h must be finite and > 0");
        if (!(inf_mass >= 0.0 && inf_mass <= 1.0)) throw py::value_error("inf_mass must lie in [0, 1]");
        const auto nq = static_cast<std::int64_t>(delta.shape(0));
        const auto n = static_cast<std::int64_t>(pmf.shape(0));
        py::gil_scoped_release release;
        rml::sgg::pld_epsilon_for_delta(o, d, nq, pm, n, lower, h, inf_mass);
      },
      "out"_a, "delta"_a, "pmf"_a, "lower"_a, "h"_a, "inf_mass"_a,
      "Vectorised epsilon(delta) of a discrete PLD (suffix sums, binary search, exact in-cell solve).");

  // --- FFT composition -------------------------------------------------------------
  m.def("fft_good_size", [](std::int64_t n) {
          if (n > kMaxFftSize) throw py::value_error("n must be <= 2**60, got " + std::to_string(n));
          return rml::fft::good_size(n);
        }, "n"_a,
        "Smallest even length f * 2^m >= n (f in {1, 3, 5}) accepted by the real transforms.");
  m.def(
      "fft_rfft",
      [](py::array out_re, py::array out_im, const py::array& x, std::int64_t n) {
        double* o_re = rml::writable_vector<double>(out_re, "out_re");
        double* o_im = rml::writable_vector<double>(out_im, "out_im");
        const double* xv = readonly_vector(x, "x");
        if (n < 2 || n % 2 != 0 || !rml::fft::supported_complex_size(n / 2)) {
          throw py::value_error("n must be an even f * 2^m (f in {1, 3, 5}), got " + std::to_string(n));
        }
        if (out_re.shape(0) != n / 2 + 1 || out_im.shape(0) != n / 2 + 1) {
          throw py::value_error("out_re and out_im must hold n/2 + 1 values");
        }
        const auto nx = static_cast<std::int64_t>(x.shape(0));
        py::gil_scoped_release release;
        rml::fft::real_forward(xv, nx, n, o_re, o_im);
      },
      "out_re"_a, "out_im"_a, "x"_a, "n"_a,
      "Real DFT of x zero-padded (or folded modulo n) to length n: bins 0 .. n/2.");
  m.def(
      "fft_irfft",
      [](py::array out, const py::array& in_re, const py::array& in_im) {
        double* o = rml::writable_vector<double>(out, "out");
        const double* r = readonly_vector(in_re, "in_re");
        const double* i = readonly_vector(in_im, "in_im");
        const auto n = static_cast<std::int64_t>(out.shape(0));
        if (n < 2 || n % 2 != 0 || !rml::fft::supported_complex_size(n / 2)) {
          throw py::value_error("len(out) must be an even f * 2^m (f in {1, 3, 5}), got " + std::to_string(n));
        }
        if (in_re.shape(0) != n / 2 + 1 || in_im.shape(0) != n / 2 + 1) {
          throw py::value_error("in_re and in_im must hold len(out)/2 + 1 values");
        }
        py::gil_scoped_release release;
        rml::fft::real_inverse(r, i, n, o);
      },
      "out"_a, "in_re"_a, "in_im"_a, "Inverse real DFT (normalised by 1/n), n = len(out).");
  m.def(
      "pld_convolve",
      [](py::array out, const py::array& a, const py::array& b) {
        double* o = rml::writable_vector<double>(out, "out");
        const double* av = readonly_vector(a, "a");
        const double* bv = readonly_vector(b, "b");
        const auto na = static_cast<std::int64_t>(a.shape(0));
        const auto nb = static_cast<std::int64_t>(b.shape(0));
        if (na < 1 || nb < 1) throw py::value_error("a and b must not be empty");
        if (out.shape(0) != na + nb - 1) throw py::value_error("out must hold len(a) + len(b) - 1 values");
        py::gil_scoped_release release;
        rml::fft::convolve(av, na, bv, nb, o);
      },
      "out"_a, "a"_a, "b"_a, "Linear convolution of a and b by real FFT (never circular).");
  m.def(
      "pld_self_convolve",
      [](py::array out, const py::array& pmf, std::int64_t n, std::int64_t shift) {
        double* o = rml::writable_vector<double>(out, "out");
        const double* pv = readonly_vector(pmf, "pmf");
        const auto size = static_cast<std::int64_t>(out.shape(0));
        if (size < 2 || size % 2 != 0 || !rml::fft::supported_complex_size(size / 2)) {
          throw py::value_error("len(out) must be an even f * 2^m (f in {1, 3, 5}), got " + std::to_string(size));
        }
        if (n < 1) throw py::value_error("n must be >= 1");
        if (pmf.shape(0) < 1) throw py::value_error("pmf must not be empty");
        const auto np_ = static_cast<std::int64_t>(pmf.shape(0));
        py::gil_scoped_release release;
        rml::fft::self_convolve_circular(pv, np_, n, size, shift, o);
      },
      "out"_a, "pmf"_a, "n"_a, "shift"_a,
      "out[j] = (pmf^{*n})[(shift + j) mod len(out)]: circular n-fold self-convolution.");
}
