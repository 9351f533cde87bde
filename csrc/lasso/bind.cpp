#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>

#include "common/arrays.hpp"
#include "lasso/lasso.hpp"

namespace py = pybind11;
using namespace pybind11::literals;

namespace {

using i64 = std::int64_t;

void require(bool ok, const std::string& msg) {
  if (!ok) throw py::value_error(msg);
}

template <typename A>
py::array_t<A> to_numpy(const std::vector<A>& v) {
  py::array_t<A> a(static_cast<py::ssize_t>(v.size()));
  std::copy(v.begin(), v.end(), a.mutable_data());
  return a;
}

template <typename T>
py::tuple run_path(const py::array& X, const py::array& Y, const py::array_t<double>& lambdas,
                   const py::array_t<double>& col_norm2, const py::object& warm_start,
                   const rml::lasso::Options& opt) {
  const i64 n = X.shape(0), m = X.shape(1);
  const i64 B = Y.shape(1);
  const i64 L = lambdas.shape(0);
  const double* w0 = nullptr;
  py::array_t<double> warm;
  if (!warm_start.is_none()) {
    warm = py::cast<py::array_t<double>>(warm_start);
    require(warm.ndim() == 2 && warm.shape(0) == B && warm.shape(1) == m &&
                (warm.flags() & py::array::c_style),
            "warm_start: expected a C-contiguous float64 array of shape (B, m)");
    w0 = warm.data();
  }
  const T* Xp = static_cast<const T*>(X.data());
  const T* Yp = static_cast<const T*>(Y.data());
  rml::lasso::PathResult res;
  {
    py::gil_scoped_release release;
    rml::lasso::path<T>(Xp, n, m, Yp, B, lambdas.data(), L, col_norm2.data(), w0, opt, res);
  }
  auto gaps = to_numpy(res.gaps);
  auto epochs = to_numpy(res.epochs);
  auto passes = to_numpy(res.passes);
  gaps.resize({L, B});
  epochs.resize({L, B});
  passes.resize({L, B});
  return py::make_tuple(to_numpy(res.indices), to_numpy(res.values), to_numpy(res.indptr), gaps,
                        epochs, passes);
}

py::tuple path(const py::array& X, const py::array& Y, const py::array_t<double>& lambdas,
               const py::array_t<double>& col_norm2, const py::object& warm_start, double tol,
               i64 max_epochs, i64 ws_start, int anderson_k, bool screening, bool working_set,
               int n_threads, bool reuse_corr) {
  require(X.ndim() == 2, "X: expected a 2-D array (n, m)");
  require(Y.ndim() == 2, "Y: expected a 2-D array (n, B)");
  require((X.flags() & py::array::f_style) != 0, "X: expected a Fortran-contiguous array");
  require((Y.flags() & py::array::f_style) != 0, "Y: expected a Fortran-contiguous array");
  require(Y.shape(0) == X.shape(0), "Y: expected as many rows as X");
  require(lambdas.ndim() == 1 && (lambdas.flags() & py::array::c_style),
          "lambdas: expected a contiguous 1-D float64 array");
  require(col_norm2.ndim() == 1 && col_norm2.shape(0) == X.shape(1),
          "col_norm2: expected a float64 array of shape (m,)");
  require(tol >= 0.0, "tol: expected >= 0");
  require(max_epochs >= 0, "max_epochs: expected >= 0");
  require(ws_start >= 1, "ws_start: expected >= 1");
  require(anderson_k >= 0 && anderson_k <= 64, "anderson_k: expected in [0, 64]");
  const double* lam = lambdas.data();
  for (py::ssize_t l = 0; l < lambdas.shape(0); ++l) {
    require(lam[l] > 0.0, "lambdas: expected strictly positive values");
    require(l == 0 || lam[l] <= lam[l - 1], "lambdas: expected a non-increasing sequence");
  }
  rml::lasso::Options opt;
  opt.tol = tol;
  opt.max_epochs = max_epochs;
  opt.ws_start = ws_start;
  opt.anderson_k = anderson_k;
  opt.screening = screening;
  opt.working_set = working_set;
  opt.n_threads = n_threads;
  opt.reuse_corr = reuse_corr;
  if (rml::has_dtype<double>(X)) {
    require(rml::has_dtype<double>(Y), "Y: expected the dtype of X (float64)");
    return run_path<double>(X, Y, lambdas, col_norm2, warm_start, opt);
  }
  if (rml::has_dtype<float>(X)) {
    require(rml::has_dtype<float>(Y), "Y: expected the dtype of X (float32)");
    return run_path<float>(X, Y, lambdas, col_norm2, warm_start, opt);
  }
  throw py::type_error("X: expected float32 or float64, got " + std::string(py::str(X.dtype())));
}

template <typename T>
py::tuple run_col_norm2(const py::array& X, int n_threads) {
  const i64 n = X.shape(0), m = X.shape(1);
  py::array_t<double> out(static_cast<py::ssize_t>(m));
  const T* Xp = static_cast<const T*>(X.data());
  double* op = out.mutable_data();
  bool finite = true;
  {
    py::gil_scoped_release release;
    finite = rml::lasso::col_norm2<T>(Xp, n, m, op, n_threads);
  }
  return py::make_tuple(out, finite);
}

py::tuple col_norm2(const py::array& X, int n_threads) {
  require(X.ndim() == 2, "X: expected a 2-D array (n, m)");
  require((X.flags() & py::array::f_style) != 0, "X: expected a Fortran-contiguous array");
  if (rml::has_dtype<double>(X)) return run_col_norm2<double>(X, n_threads);
  if (rml::has_dtype<float>(X)) return run_col_norm2<float>(X, n_threads);
  throw py::type_error("X: expected float32 or float64, got " + std::string(py::str(X.dtype())));
}

py::tuple gram_path(const py::array_t<double, py::array::c_style>& G,
                    const py::array_t<double, py::array::c_style>& Xy,
                    const py::array_t<double, py::array::c_style>& yy,
                    const py::array_t<double, py::array::c_style>& n,
                    const py::array_t<double, py::array::c_style>& lambdas,
                    const py::object& warm_start, double tol, i64 max_epochs, int anderson_k,
                    int n_threads, bool polish) {
  require(G.ndim() == 3 && G.shape(1) == G.shape(2), "G: expected a (P, m, m) float64 array");
  const i64 P = G.shape(0), m = G.shape(1);
  require(Xy.ndim() == 2 && Xy.shape(0) == P && Xy.shape(1) == m, "Xy: expected shape (P, m)");
  require(yy.ndim() == 1 && yy.shape(0) == P, "yy: expected shape (P,)");
  require(n.ndim() == 1 && n.shape(0) == P, "n: expected shape (P,)");
  require(lambdas.ndim() == 1, "lambdas: expected a 1-D float64 array");
  require(tol >= 0.0, "tol: expected >= 0");
  require(max_epochs >= 0, "max_epochs: expected >= 0");
  require(anderson_k >= 0 && anderson_k <= 64, "anderson_k: expected in [0, 64]");
  const i64 L = lambdas.shape(0);
  const double* lam = lambdas.data();
  for (i64 l = 0; l < L; ++l) {
    require(lam[l] > 0.0, "lambdas: expected strictly positive values");
    require(l == 0 || lam[l] <= lam[l - 1], "lambdas: expected a non-increasing sequence");
  }
  for (i64 p = 0; p < P; ++p) require(n.data()[p] > 0.0, "n: expected positive values");
  const double* w0 = nullptr;
  py::array_t<double, py::array::c_style> warm;
  if (!warm_start.is_none()) {
    warm = py::cast<py::array_t<double, py::array::c_style>>(warm_start);
    require(warm.ndim() == 2 && warm.shape(0) == P && warm.shape(1) == m,
            "warm_start: expected a float64 array of shape (P, m)");
    w0 = warm.data();
  }
  rml::lasso::GramOptions opt;
  opt.tol = tol;
  opt.max_epochs = max_epochs;
  opt.anderson_k = anderson_k;
  opt.n_threads = n_threads;
  opt.polish = polish;
  py::array_t<double> coefs({P, L, m});
  py::array_t<double> gaps({P, L});
  py::array_t<i64> epochs({P, L});
  double* cp = coefs.mutable_data();
  double* gp = gaps.mutable_data();
  i64* ep = epochs.mutable_data();
  {
    py::gil_scoped_release release;
    rml::lasso::gram_path(G.data(), Xy.data(), yy.data(), n.data(), P, m, lam, L, w0, opt, cp,
                          gp, ep);
  }
  return py::make_tuple(coefs, gaps, epochs);
}

}  // namespace

void register_lasso(py::module_ m) {
  m.doc() = "Lasso path (gap-safe screening, working sets, Anderson CD), sklearn scaling";
  m.def("path", &path, "X"_a, "Y"_a, "lambdas"_a, "col_norm2"_a, "warm_start"_a = py::none(),
        "tol"_a = 1e-6, "max_epochs"_a = 10000, "ws_start"_a = 40, "anderson_k"_a = 5,
        "screening"_a = true, "working_set"_a = true, "n_threads"_a = 0, "reuse_corr"_a = true,
        "Solve min_w 1/(2n)||y_b - X w||^2 + lam_l ||w||_1 for every lambda (warm started) and\n"
        "every column y_b of Y. Returns (indices, values, indptr, gaps (L, B), epochs (L, B),\n"
        "passes (L, B)), coefficients in CSR over rows l * B + b; passes = correlations x_j^T r\n"
        "computed / m. reuse_corr=False recomputes every unscreened correlation each round.\n"
        "Releases the GIL.");
  m.def("col_norm2", &col_norm2, "X"_a, "n_threads"_a = 0,
        "Squared column norms of a Fortran-ordered X (n, m) in float64, and whether every entry\n"
        "of X is finite: (norm2 (m,), finite). One pass over X, OpenMP over columns.");
  m.def("gram_path", &gram_path, "G"_a, "Xy"_a, "yy"_a, "n"_a, "lambdas"_a,
        "warm_start"_a = py::none(), "tol"_a = 1e-6, "max_epochs"_a = 10000, "anderson_k"_a = 5,
        "n_threads"_a = 1, "polish"_a = true,
        "Lasso paths of P problems given in Gram form (G (P, m, m), Xy (P, m), yy (P,), n (P,)):\n"
        "min_w 1/(2n)(yy - 2 w^T Xy + w^T G w) + lam ||w||_1 for every lambda (warm started).\n"
        "Covariance-update CD with Anderson extrapolation and support polishing (polish=True:\n"
        "Cholesky solve of the optimality conditions on a stable support); stops at\n"
        "gap <= tol * yy / (2n).\n"
        "Returns (coefs (P, L, m), gaps (P, L), epochs (P, L)). OpenMP over problems; releases\n"
        "the GIL.");
  m.def("bookkeeping_isa", &rml::lasso::bookkeeping_isa,
        "Instruction set of the solver's per-feature bookkeeping loops: 'avx2' or 'portable'\n"
        "(RML_FAST_LASSO_PORTABLE=1 in the environment forces 'portable').");
}
