// Lasso path solver for wide dense designs (celer/skglm style), no intercept:
//   P(w) = 1/(2n) ||y - X w||^2 + lam ||w||_1,   X of shape (n, m), column-major.
// Dual: D(theta) = 1/(2n)||y||^2 - (n lam^2 / 2) ||theta - y/(n lam)||^2 on ||X^T theta||_inf <= 1.
// Per lambda (warm started): outer iterations compute correlations X^T r, a feasible dual point,
// the duality gap, gap-safe sphere screening and a working set; an inner coordinate descent on
// the working set (cached Gram matrix, Anderson extrapolation) solves the subproblem.
#pragma once

#include <cstdint>
#include <vector>

namespace rml::lasso {

struct Options {
  double tol = 1e-6;              // stop when gap <= tol * ||y||^2 / (2n)
  std::int64_t max_epochs = 10000;  // inner CD epochs per (lambda, rhs)
  std::int64_t ws_start = 40;     // first working-set size
  int anderson_k = 5;             // 0 disables Anderson extrapolation
  bool screening = true;          // gap-safe sphere screening
  bool working_set = true;        // false: inner solver on all unscreened features
  int n_threads = 0;              // 0: OpenMP default
  // Reuse correlations across rounds and penalties: a feature's x_j^T r is recomputed only
  // when its bound |c_j(old)| + ||x_j|| * (path length of r since) exceeds n * lam (false:
  // every round recomputes every unscreened feature, as before round 3).
  bool reuse_corr = true;
};

// Coefficients in CSR over rows (l * B + b); gaps and epochs of shape (L, B).
struct PathResult {
  std::vector<std::int64_t> indptr;
  std::vector<std::int64_t> indices;
  std::vector<double> values;
  std::vector<double> gaps;
  std::vector<std::int64_t> epochs;
  std::vector<double> passes;  // (L, B): column correlations computed / m (full passes over X)
};

// X: (n, m) column-major; Y: (n, B) column-major; lambdas: (L,) non-increasing, >= 0;
// col_norm2: (m,) squared column norms; w0: nullptr or (B, m) row-major warm start.
template <typename T>
void path(const T* X, std::int64_t n, std::int64_t m, const T* Y, std::int64_t B,
          const double* lambdas, std::int64_t L, const double* col_norm2, const double* w0,
          const Options& opt, PathResult& out);

// Squared column norms of X (n, m), column-major, in double (OpenMP over columns); returns
// false if X holds a NaN or an infinity (out is then unspecified).
template <typename T>
bool col_norm2(const T* X, std::int64_t n, std::int64_t m, double* out, int n_threads);

// Lasso paths from Gram matrices (the n >= m regime: scikit-learn's precompute=True), for P
// independent problems sharing the penalties (e.g. the folds of a cross-validation):
//   P_p(w) = 1/(2 n_p) (yy_p - 2 w^T Xy_p + w^T G_p w) + lam ||w||_1
// (= 1/(2 n_p) ||y - X w||^2 + lam ||w||_1 with G = X^T X, Xy = X^T y, yy = y^T y).
// Cyclic coordinate descent with covariance updates (c = Xy - G w kept for all m features, so
// the duality gap of every epoch costs O(m)) and Anderson extrapolation, warm started along the
// path; stops when gap <= tol * yy / (2 n) or after max_epochs epochs per penalty. OpenMP over
// the P problems. G: (P, m, m) row-major (each symmetric); Xy: (P, m); yy, n: (P,);
// w0: nullptr or (P, m); out: coefs (P, L, m), gaps (P, L), epochs (P, L).
struct GramOptions {
  double tol = 1e-6;
  std::int64_t max_epochs = 10000;
  int anderson_k = 5;
  int n_threads = 1;
  // After an epoch that left the support and signs unchanged, solve the linear system of
  // the optimality conditions on the support (Cholesky of G_SS); kept when its signs agree
  // and its objective is lower. Refused polishes back off (2, 4, ... 64 epochs).
  bool polish = true;
};

void gram_path(const double* G, const double* Xy, const double* yy, const double* n,
               std::int64_t P, std::int64_t m, const double* lambdas, std::int64_t L,
               const double* w0, const GramOptions& opt, double* coefs, double* gaps,
               std::int64_t* epochs);

// Instruction set of the per-feature bookkeeping loops in use: "avx2" or "portable"
// (RML_FAST_LASSO_PORTABLE=1 in the environment forces "portable").
const char* bookkeeping_isa();

}  // namespace rml::lasso
