// Lasso path: gap-safe screening, working sets, Gram-cached coordinate descent with Anderson
// extrapolation; OpenMP over right-hand sides (or over columns for a single right-hand side).
#include "lasso/lasso.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <utility>

#include "common/parallel.hpp"
#include "common/simd.hpp"

namespace rml::lasso {
namespace {

using i64 = std::int64_t;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr i64 kGramCap = 1024;     // largest cached Gram block (features) per problem
constexpr i64 kCheckEvery = 10;    // inner epochs between duality-gap checks
constexpr double kInnerRatio = 0.3;  // inner tolerance as a fraction of the outer gap

template <typename T>
inline double dot_xr(const T* x, const double* r, i64 n) {
  double s = 0.0;
#pragma omp simd reduction(+ : s)
  for (i64 i = 0; i < n; ++i) s += static_cast<double>(x[i]) * r[i];
  return s;
}

inline double dot_dd(const double* a, const double* b, i64 n) {
  double s = 0.0;
#pragma omp simd reduction(+ : s)
  for (i64 i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

template <typename T>
inline void axpy(double a, const T* x, double* r, i64 n) {
#pragma omp simd
  for (i64 i = 0; i < n; ++i) r[i] += a * static_cast<double>(x[i]);
}

inline double soft(double z, double t) { return z > t ? z - t : (z < -t ? z + t : 0.0); }

// c_j = x_j^T r for unscreened j in [j0, j1); returns max |c_j|. Multi-versioned (AVX2/AVX-512).
template <typename T>
inline double corr_range_impl(const T* X, i64 n, i64 j0, i64 j1, const char* screened,
                              const double* r, double* c) {
  double mx = 0.0;
  for (i64 j = j0; j < j1; ++j) {
    if (screened[j]) continue;
    const T* x = X + j * n;
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (i64 i = 0; i < n; ++i) s += static_cast<double>(x[i]) * r[i];
    c[j] = s;
    mx = std::max(mx, std::abs(s));
  }
  return mx;
}

RML_SIMD_CLONES double corr_range(const double* X, i64 n, i64 j0, i64 j1, const char* screened,
                                  const double* r, double* c) {
  return corr_range_impl(X, n, j0, j1, screened, r, c);
}

RML_SIMD_CLONES double corr_range(const float* X, i64 n, i64 j0, i64 j1, const char* screened,
                                  const double* r, double* c) {
  return corr_range_impl(X, n, j0, j1, screened, r, c);
}

// Correlations of four problems over columns [j0, j1) (the shared-design kernel): a column
// unscreened by all four is read once for four dot products; otherwise each unscreened
// problem gets its own. mx[q] is raised to max |c| of problem q.
template <typename T>
inline void corr_block4_impl(const T* X, i64 n, i64 j0, i64 j1, const char* const* scr,
                             const double* const* r, double* const* c, double* mx) {
  const double *r0 = r[0], *r1 = r[1], *r2 = r[2], *r3 = r[3];
  for (i64 j = j0; j < j1; ++j) {
    const T* x = X + j * n;
    if (!scr[0][j] && !scr[1][j] && !scr[2][j] && !scr[3][j]) {
      double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
      for (i64 i = 0; i < n; ++i) {
        const double xi = static_cast<double>(x[i]);
        s0 += xi * r0[i];
        s1 += xi * r1[i];
        s2 += xi * r2[i];
        s3 += xi * r3[i];
      }
      c[0][j] = s0;
      c[1][j] = s1;
      c[2][j] = s2;
      c[3][j] = s3;
      mx[0] = std::max(mx[0], std::abs(s0));
      mx[1] = std::max(mx[1], std::abs(s1));
      mx[2] = std::max(mx[2], std::abs(s2));
      mx[3] = std::max(mx[3], std::abs(s3));
      continue;
    }
    for (int q = 0; q < 4; ++q) {
      if (scr[q][j]) continue;
      const double* rq = r[q];
      double sq = 0.0;
#pragma omp simd reduction(+ : sq)
      for (i64 i = 0; i < n; ++i) sq += static_cast<double>(x[i]) * rq[i];
      c[q][j] = sq;
      mx[q] = std::max(mx[q], std::abs(sq));
    }
  }
}

RML_SIMD_CLONES void corr_block4(const double* X, i64 n, i64 j0, i64 j1, const char* const* scr,
                                 const double* const* r, double* const* c, double* mx) {
  corr_block4_impl(X, n, j0, j1, scr, r, c, mx);
}

RML_SIMD_CLONES void corr_block4(const float* X, i64 n, i64 j0, i64 j1, const char* const* scr,
                                 const double* const* r, double* const* c, double* mx) {
  corr_block4_impl(X, n, j0, j1, scr, r, c, mx);
}

// Gram entries a^T b for pairs of columns.
RML_SIMD_CLONES double col_dot(const double* a, const double* b, i64 n) {
  double s = 0.0;
#pragma omp simd reduction(+ : s)
  for (i64 i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

RML_SIMD_CLONES double col_dot(const float* a, const float* b, i64 n) {
  double s = 0.0;
#pragma omp simd reduction(+ : s)
  for (i64 i = 0; i < n; ++i) s += static_cast<double>(a[i]) * static_cast<double>(b[i]);
  return s;
}

// c -= d * g over k entries (the inner CD update).
RML_SIMD_CLONES void sub_scaled(double* c, const double* g, double d, i64 k) {
#pragma omp simd
  for (i64 i = 0; i < k; ++i) c[i] -= d * g[i];
}

// Dual objective at theta = r / s from rr = ||r||^2 and ry = r^T y (see lasso.hpp).
inline double dual_value(double rr, double ry, double s, double lam, double n) {
  return lam * ry / s - n * lam * lam * rr / (2.0 * s * s);
}

// Anderson weights from K + 1 iterates hist (row-major, rows of length k): z solves
// (U U^T) z = 1 with U_i = hist_{i+1} - hist_i, normalised to sum 1. False if singular.
bool anderson_weights(const std::vector<double>& hist, int K, i64 k, std::vector<double>& U,
                      std::vector<double>& A, std::vector<double>& z) {
  for (int i = 0; i < K; ++i)
    for (i64 j = 0; j < k; ++j)
      U[static_cast<size_t>(i * k + j)] =
          hist[static_cast<size_t>((i + 1) * k + j)] - hist[static_cast<size_t>(i * k + j)];
  double tr = 0.0;
  for (int i = 0; i < K; ++i) {
    for (int j = 0; j <= i; ++j) {
      const double v = dot_dd(&U[static_cast<size_t>(i * k)], &U[static_cast<size_t>(j * k)], k);
      A[static_cast<size_t>(i * K + j)] = v;
      A[static_cast<size_t>(j * K + i)] = v;
    }
    tr += A[static_cast<size_t>(i * K + i)];
  }
  if (!(tr > 0.0)) return false;
  const double reg = 1e-12 * tr;
  for (int i = 0; i < K; ++i) A[static_cast<size_t>(i * K + i)] += reg;
  // Cholesky in place (lower triangle).
  for (int j = 0; j < K; ++j) {
    double d = A[static_cast<size_t>(j * K + j)];
    for (int p = 0; p < j; ++p) d -= A[static_cast<size_t>(j * K + p)] * A[static_cast<size_t>(j * K + p)];
    if (!(d > 0.0)) return false;
    d = std::sqrt(d);
    A[static_cast<size_t>(j * K + j)] = d;
    for (int i = j + 1; i < K; ++i) {
      double v = A[static_cast<size_t>(i * K + j)];
      for (int p = 0; p < j; ++p) v -= A[static_cast<size_t>(i * K + p)] * A[static_cast<size_t>(j * K + p)];
      A[static_cast<size_t>(i * K + j)] = v / d;
    }
  }
  for (int i = 0; i < K; ++i) {  // forward: L y = 1
    double v = 1.0;
    for (int p = 0; p < i; ++p) v -= A[static_cast<size_t>(i * K + p)] * z[static_cast<size_t>(p)];
    z[static_cast<size_t>(i)] = v / A[static_cast<size_t>(i * K + i)];
  }
  for (int i = K - 1; i >= 0; --i) {  // backward: L^T z = y
    double v = z[static_cast<size_t>(i)];
    for (int p = i + 1; p < K; ++p) v -= A[static_cast<size_t>(p * K + i)] * z[static_cast<size_t>(p)];
    z[static_cast<size_t>(i)] = v / A[static_cast<size_t>(i * K + i)];
  }
  double sum = 0.0;
  for (int i = 0; i < K; ++i) sum += z[static_cast<size_t>(i)];
  if (!std::isfinite(sum) || std::abs(sum) < 1e-300) return false;
  for (int i = 0; i < K; ++i) z[static_cast<size_t>(i)] /= sum;
  return true;
}

// The Anderson-extrapolated point sum_i z_i hist_{i+1} into w_acc; false (w_acc untouched)
// when the weights cannot be computed.
bool anderson_extrapolate(const std::vector<double>& hist, int K, i64 k, std::vector<double>& U,
                          std::vector<double>& A, std::vector<double>& z,
                          std::vector<double>& w_acc) {
  if (!anderson_weights(hist, K, k, U, A, z)) return false;
  std::fill(w_acc.begin(), w_acc.end(), 0.0);
  for (int i = 0; i < K; ++i) {
    const double zi = z[static_cast<size_t>(i)];
    const double* h = &hist[static_cast<size_t>((i + 1) * k)];
    for (i64 a = 0; a < k; ++a) w_acc[static_cast<size_t>(a)] += zi * h[a];
  }
  return true;
}

template <typename T>
class Problem {
 public:
  Problem(const T* X, i64 n, i64 m, const double* nrm2, const double* nrm, const T* y,
          const Options& opt, bool par, int nt)
      : X_(X), n_(n), m_(m), nrm2_(nrm2), nrm_(nrm), opt_(opt), par_(par), nt_(nt),
        w_(static_cast<size_t>(m), 0.0), c_(static_cast<size_t>(m), 0.0),
        r_(static_cast<size_t>(n)), y_(static_cast<size_t>(n)),
        screened_(static_cast<size_t>(m), 0), slot_(static_cast<size_t>(m), -1) {
    for (i64 i = 0; i < n; ++i) y_[static_cast<size_t>(i)] = static_cast<double>(y[i]);
    yy_ = dot_dd(y_.data(), y_.data(), n);
  }

  void set_warm(const double* w0) {
    for (i64 j = 0; j < m_; ++j) w_[static_cast<size_t>(j)] = nrm2_[j] > 0.0 ? w0[j] : 0.0;
  }

  const std::vector<double>& coef() const { return w_; }

  // One penalty is solved as begin(lam), then rounds of {correlations c = X^T r on the
  // unscreened features (by this problem, or shared by several problems: see corr_shared),
  // step(max |c|)} until step returns true. Several problems sharing X run in lockstep so
  // that one pass over X serves all of their correlations.
  void begin(double lam) {
    lam_ = lam;
    tol_abs_ = opt_.tol * yy_ / (2.0 * static_cast<double>(n_));
    free_.clear();
    for (i64 j = 0; j < m_; ++j) {
      screened_[static_cast<size_t>(j)] = nrm2_[j] > 0.0 ? 0 : 1;
      if (nrm2_[j] > 0.0) free_.push_back(j);
    }
    refresh_support();
    residual();
    epochs_ = 0;
    ws_prev_ = 0;
    it_ = 0;
    gap_ = 0.0;
  }

  // Duality gap from the correlations in c_ (max |c_j| = maxc); true when converged (or out of
  // epochs), otherwise screens, builds the working set, runs the inner solver and returns false.
  bool step(double maxc) {
    const double n = static_cast<double>(n_);
    const double lam = lam_;
    const double s = std::max(n * lam, maxc);
    const double rr = dot_dd(r_.data(), r_.data(), n_);
    const double ry = dot_dd(r_.data(), y_.data(), n_);
    double l1 = 0.0;
    for (i64 j : support_) l1 += std::abs(w_[static_cast<size_t>(j)]);
    const double primal = rr / (2.0 * n) + lam * l1;
    gap_ = std::max(0.0, primal - dual_value(rr, ry, s, lam, n));
    if (gap_ <= tol_abs_ || epochs_ >= opt_.max_epochs) return true;
    if (opt_.screening) screen(gap_, s, lam);
    build_working_set(s, it_, ws_prev_);
    const i64 budget = opt_.max_epochs - epochs_;
    const double tol_in = kInnerRatio * gap_;
    if (static_cast<i64>(ws_.size()) <= kGramCap)
      epochs_ += inner_gram(lam, tol_in, budget);
    else
      epochs_ += inner_residual(lam, tol_in, budget);
    refresh_support();
    residual();
    ++it_;
    return false;
  }

  double gap() const { return gap_; }
  i64 epochs() const { return epochs_; }
  const double* residual_data() const { return r_.data(); }
  const char* screened_data() const { return screened_.data(); }
  double* corr_data() { return c_.data(); }

 private:
  const T* col(i64 j) const { return X_ + j * n_; }

  // Nonzero coefficients (only unscreened features can be nonzero).
  void refresh_support() {
    support_.clear();
    for (i64 j : free_)
      if (w_[static_cast<size_t>(j)] != 0.0) support_.push_back(j);
  }

  void residual() {
    std::copy(y_.begin(), y_.end(), r_.begin());
    for (i64 j : support_) axpy(-w_[static_cast<size_t>(j)], col(j), r_.data(), n_);
  }

  // Gap-safe sphere test: |x_j^T theta| + ||x_j|| rho < 1 => w_j = 0 at the optimum.
  void screen(double gap, double s, double lam) {
    const double rho = std::sqrt(2.0 * gap / (static_cast<double>(n_) * lam * lam));
    bool changed = false;
    const double inv_s = 1.0 / s;
    size_t keep = 0;
    for (size_t q = 0; q < free_.size(); ++q) {
      const i64 j = free_[q];
      const size_t jj = static_cast<size_t>(j);
      if (std::abs(c_[jj]) * inv_s + nrm_[j] * rho < 1.0) {
        screened_[jj] = 1;
        if (w_[jj] != 0.0) {
          axpy(w_[jj], col(j), r_.data(), n_);
          w_[jj] = 0.0;
          changed = true;
        }
      } else {
        free_[keep++] = j;
      }
    }
    free_.resize(keep);
    if (changed) refresh_support();
  }

  // Support plus the features closest to violating the dual constraint (celer's priority).
  void build_working_set(double s, int it, i64& ws_prev) {
    ws_.assign(free_.begin(), free_.end());
    const i64 n_free = static_cast<i64>(ws_.size());
    if (!opt_.working_set) {
      ws_prev = n_free;
      return;
    }
    i64 p = std::max(opt_.ws_start, 2 * static_cast<i64>(support_.size()));
    if (it > 0) p = std::max(p, 2 * ws_prev);
    p = std::min(p, n_free);
    ws_prev = p;
    if (p < n_free) {
      keyed_.resize(static_cast<size_t>(n_free));
      const double inv_s = 1.0 / s;
      for (i64 q = 0; q < n_free; ++q) {
        const i64 j = ws_[static_cast<size_t>(q)];
        const size_t jj = static_cast<size_t>(j);
        const double key = w_[jj] != 0.0 ? -1.0 : (1.0 - std::abs(c_[jj]) * inv_s) / nrm_[j];
        keyed_[static_cast<size_t>(q)] = {key, j};
      }
      std::nth_element(keyed_.begin(), keyed_.begin() + p, keyed_.end());
      for (i64 q = 0; q < p; ++q) ws_[static_cast<size_t>(q)] = keyed_[static_cast<size_t>(q)].second;
      ws_.resize(static_cast<size_t>(p));
    }
    std::sort(ws_.begin(), ws_.end());
  }

  // Make sure every working-set feature has a Gram-cache slot; fills the local Gram G (k x k).
  void gram(std::vector<double>& G, std::vector<double>& b) {
    const i64 k = static_cast<i64>(ws_.size());
    i64 n_new = 0;
    for (i64 j : ws_)
      if (slot_[static_cast<size_t>(j)] < 0) ++n_new;
    if (static_cast<i64>(cached_.size()) + n_new > kGramCap) {
      for (i64 j : cached_) slot_[static_cast<size_t>(j)] = -1;
      const size_t used = cached_.size();
      for (size_t a = 0; a < used; ++a)
        std::fill_n(gc_.begin() + static_cast<std::ptrdiff_t>(a * static_cast<size_t>(cap_)), used, kNaN);
      cached_.clear();
      bc_.clear();
    }
    grow_cache(static_cast<i64>(cached_.size()) + n_new);
    for (i64 j : ws_) {
      if (slot_[static_cast<size_t>(j)] >= 0) continue;
      slot_[static_cast<size_t>(j)] = static_cast<i64>(cached_.size());
      cached_.push_back(j);
      bc_.push_back(dot_xr(col(j), y_.data(), n_));
    }
    G.assign(static_cast<size_t>(k * k), 0.0);
    b.resize(static_cast<size_t>(k));
    const bool par = par_ && n_new * n_ * k >= (1 << 24);
#pragma omp parallel for schedule(dynamic, 8) num_threads(nt_) if (par)
    for (i64 a = 0; a < k; ++a) {
      const i64 ja = ws_[static_cast<size_t>(a)];
      const i64 sa = slot_[static_cast<size_t>(ja)];
      for (i64 q = a; q < k; ++q) {
        const i64 jq = ws_[static_cast<size_t>(q)];
        const i64 sq = slot_[static_cast<size_t>(jq)];
        double& cell = gc_[static_cast<size_t>(sa * cap_ + sq)];
        if (std::isnan(cell)) {
          cell = col_dot(col(ja), col(jq), n_);
          gc_[static_cast<size_t>(sq * cap_ + sa)] = cell;
        }
        G[static_cast<size_t>(a * k + q)] = cell;
        G[static_cast<size_t>(q * k + a)] = cell;
      }
    }
    for (i64 a = 0; a < k; ++a)
      b[static_cast<size_t>(a)] = bc_[static_cast<size_t>(slot_[static_cast<size_t>(ws_[static_cast<size_t>(a)])])];
  }

  // Grow the Gram cache (cap_ x cap_, NaN = not computed) to hold `need` features, keeping
  // the entries already computed; capacity doubles from 64 up to kGramCap.
  void grow_cache(i64 need) {
    if (need <= cap_) return;
    i64 cap = std::max<i64>(cap_, 64);
    while (cap < need) cap *= 2;
    cap = std::min(cap, kGramCap);
    std::vector<double> g(static_cast<size_t>(cap * cap), kNaN);
    const i64 used = static_cast<i64>(cached_.size());
    for (i64 a = 0; a < used; ++a)
      std::copy_n(gc_.begin() + static_cast<std::ptrdiff_t>(a * cap_), used,
                  g.begin() + static_cast<std::ptrdiff_t>(a * cap));
    gc_.swap(g);
    cap_ = cap;
  }

  // c = b - G w over the nonzeros of w.
  static void grad(const std::vector<double>& G, const std::vector<double>& b,
                   const std::vector<double>& w, i64 k, std::vector<double>& c) {
    std::copy(b.begin(), b.end(), c.begin());
    for (i64 q = 0; q < k; ++q) {
      const double wq = w[static_cast<size_t>(q)];
      if (wq == 0.0) continue;
      const double* g = &G[static_cast<size_t>(q * k)];
      for (i64 a = 0; a < k; ++a) c[static_cast<size_t>(a)] -= wq * g[a];
    }
  }

  // Inner CD on the working set with its Gram matrix; returns the epochs used.
  i64 inner_gram(double lam, double tol_in, i64 budget) {
    const i64 k = static_cast<i64>(ws_.size());
    const double n = static_cast<double>(n_);
    const double nl = n * lam;
    std::vector<double> G, b;
    gram(G, b);
    std::vector<double> w(static_cast<size_t>(k)), c(static_cast<size_t>(k)), inv(static_cast<size_t>(k)),
        thr(static_cast<size_t>(k));
    for (i64 a = 0; a < k; ++a) {
      const i64 j = ws_[static_cast<size_t>(a)];
      w[static_cast<size_t>(a)] = w_[static_cast<size_t>(j)];
      inv[static_cast<size_t>(a)] = 1.0 / nrm2_[j];
      thr[static_cast<size_t>(a)] = nl / nrm2_[j];
    }
    grad(G, b, w, k, c);
    auto primal = [&](const std::vector<double>& wv, const std::vector<double>& cv) {
      double wb = 0.0, wc = 0.0, l1 = 0.0;
      for (i64 a = 0; a < k; ++a) {
        const double wa = wv[static_cast<size_t>(a)];
        if (wa == 0.0) continue;
        wb += wa * b[static_cast<size_t>(a)];
        wc += wa * cv[static_cast<size_t>(a)];
        l1 += std::abs(wa);
      }
      const double rr = std::max(0.0, yy_ - wb - wc);
      return std::pair<double, double>(rr / (2.0 * n) + lam * l1, wb);
    };
    const int K = opt_.anderson_k;
    std::vector<double> hist, U, A, z, w_acc, c_acc;
    if (K > 0) {
      hist.resize(static_cast<size_t>((K + 1) * k));
      U.resize(static_cast<size_t>(K * k));
      A.resize(static_cast<size_t>(K * K));
      z.resize(static_cast<size_t>(K));
      w_acc.resize(static_cast<size_t>(k));
      c_acc.resize(static_cast<size_t>(k));
    }
    int n_hist = 0;
    i64 ep = 0;
    while (ep < budget) {
      for (i64 a = 0; a < k; ++a) {
        const size_t aa = static_cast<size_t>(a);
        const double old = w[aa];
        const double nw = soft(old + c[aa] * inv[aa], thr[aa]);
        if (nw != old) {
          const double d = nw - old;
          w[aa] = nw;
          sub_scaled(c.data(), &G[static_cast<size_t>(a * k)], d, k);
        }
      }
      ++ep;
      if (K > 0) {
        std::copy(w.begin(), w.end(), hist.begin() + static_cast<std::ptrdiff_t>(n_hist * k));
        if (++n_hist == K + 1) {
          n_hist = 0;
          if (anderson_extrapolate(hist, K, k, U, A, z, w_acc)) {
            grad(G, b, w_acc, k, c_acc);
            if (primal(w_acc, c_acc).first < primal(w, c).first) {
              w.swap(w_acc);
              c.swap(c_acc);
            }
          }
        }
      }
      if (ep % kCheckEvery == 0 || ep == budget) {
        double mx = 0.0;
        for (i64 a = 0; a < k; ++a) mx = std::max(mx, std::abs(c[static_cast<size_t>(a)]));
        const auto [p, wb] = primal(w, c);
        double wc = 0.0;
        for (i64 a = 0; a < k; ++a) wc += w[static_cast<size_t>(a)] * c[static_cast<size_t>(a)];
        const double rr = std::max(0.0, yy_ - wb - wc);
        const double ry = yy_ - wb;
        const double g = p - dual_value(rr, ry, std::max(nl, mx), lam, n);
        if (g <= tol_in) break;
      }
    }
    for (i64 a = 0; a < k; ++a) w_[static_cast<size_t>(ws_[static_cast<size_t>(a)])] = w[static_cast<size_t>(a)];
    return ep;
  }

  // Inner CD on a large working set without a Gram matrix (keeps r = y - X w); epochs used.
  i64 inner_residual(double lam, double tol_in, i64 budget) {
    const i64 k = static_cast<i64>(ws_.size());
    const double n = static_cast<double>(n_);
    const double nl = n * lam;
    const int K = opt_.anderson_k;
    std::vector<double> hist, U, A, z, w(static_cast<size_t>(k)), w_acc, r_acc;
    for (i64 a = 0; a < k; ++a) w[static_cast<size_t>(a)] = w_[static_cast<size_t>(ws_[static_cast<size_t>(a)])];
    if (K > 0) {
      hist.resize(static_cast<size_t>((K + 1) * k));
      U.resize(static_cast<size_t>(K * k));
      A.resize(static_cast<size_t>(K * K));
      z.resize(static_cast<size_t>(K));
      w_acc.resize(static_cast<size_t>(k));
      r_acc.resize(static_cast<size_t>(n_));
    }
    auto primal = [&](const std::vector<double>& wv, const std::vector<double>& rv) {
      double l1 = 0.0;
      for (double v : wv) l1 += std::abs(v);
      return dot_dd(rv.data(), rv.data(), n_) / (2.0 * n) + lam * l1;
    };
    int n_hist = 0;
    i64 ep = 0;
    while (ep < budget) {
      for (i64 a = 0; a < k; ++a) {
        const size_t aa = static_cast<size_t>(a);
        const i64 j = ws_[aa];
        const double old = w[aa];
        const double cj = dot_xr(col(j), r_.data(), n_);
        const double nw = soft(old + cj / nrm2_[j], nl / nrm2_[j]);
        if (nw != old) {
          axpy(old - nw, col(j), r_.data(), n_);
          w[aa] = nw;
        }
      }
      ++ep;
      if (K > 0) {
        std::copy(w.begin(), w.end(), hist.begin() + static_cast<std::ptrdiff_t>(n_hist * k));
        if (++n_hist == K + 1) {
          n_hist = 0;
          if (anderson_extrapolate(hist, K, k, U, A, z, w_acc)) {
            std::copy(y_.begin(), y_.end(), r_acc.begin());
            for (i64 a = 0; a < k; ++a)
              if (w_acc[static_cast<size_t>(a)] != 0.0)
                axpy(-w_acc[static_cast<size_t>(a)], col(ws_[static_cast<size_t>(a)]), r_acc.data(), n_);
            if (primal(w_acc, r_acc) < primal(w, r_)) {
              w.swap(w_acc);
              r_.swap(r_acc);
            }
          }
        }
      }
      if (ep % kCheckEvery == 0 || ep == budget) {
        double mx = 0.0;
        for (i64 a = 0; a < k; ++a)
          mx = std::max(mx, std::abs(dot_xr(col(ws_[static_cast<size_t>(a)]), r_.data(), n_)));
        const double rr = dot_dd(r_.data(), r_.data(), n_);
        const double ry = dot_dd(r_.data(), y_.data(), n_);
        const double g = primal(w, r_) - dual_value(rr, ry, std::max(nl, mx), lam, n);
        if (g <= tol_in) break;
      }
    }
    for (i64 a = 0; a < k; ++a) w_[static_cast<size_t>(ws_[static_cast<size_t>(a)])] = w[static_cast<size_t>(a)];
    return ep;
  }

  const T* X_;
  i64 n_, m_;
  const double* nrm2_;
  const double* nrm_;  // column norms sqrt(nrm2_)
  Options opt_;
  bool par_;
  int nt_;
  double yy_ = 0.0;
  double lam_ = 0.0, tol_abs_ = 0.0, gap_ = 0.0;
  i64 epochs_ = 0, ws_prev_ = 0;
  int it_ = 0;
  std::vector<double> w_, c_, r_, y_;
  std::vector<char> screened_;
  std::vector<i64> support_, ws_, free_;  // free_: unscreened features, ascending
  std::vector<std::pair<double, i64>> keyed_;
  // Gram cache: slot_[j] indexes gc_ (cap_ x cap_, NaN = not yet computed), bc_ = x_j^T y.
  std::vector<i64> slot_, cached_;
  std::vector<double> gc_, bc_;
  i64 cap_ = 0;
};

}  // namespace

namespace {
// Sum of squares of one column; a NaN/inf anywhere makes the sum non-finite.
RML_SIMD_CLONES double sumsq(const double* x, i64 n) {
  double s = 0.0;
#pragma omp simd reduction(+ : s)
  for (i64 i = 0; i < n; ++i) s += x[i] * x[i];
  return s;
}

RML_SIMD_CLONES double sumsq(const float* x, i64 n) {
  double s = 0.0;
#pragma omp simd reduction(+ : s)
  for (i64 i = 0; i < n; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return s;
}
}  // namespace

template <typename T>
bool col_norm2(const T* X, i64 n, i64 m, double* out, int n_threads) {
  const int nt = n_threads > 0 ? n_threads : rml::max_threads();
  int finite = 1;
#pragma omp parallel for schedule(static) num_threads(nt) reduction(min : finite) if (n * m >= (i64{1} << 25))
  for (i64 j = 0; j < m; ++j) {
    const double s = sumsq(X + j * n, n);
    out[j] = s;
    if (!std::isfinite(s)) finite = 0;
  }
  return finite != 0;
}

template bool col_norm2<float>(const float*, i64, i64, double*, int);
template bool col_norm2<double>(const double*, i64, i64, double*, int);

namespace {

// Correlations of several problems sharing X in one pass over X: column blocks (kept in L2)
// are the parallel unit, and each block serves every problem, skipping the columns that
// problem has screened. maxc[a] = max_j |c_j| of problem a over its unscreened columns.
template <typename T>
void corr_shared(const T* X, i64 n, i64 m, const std::vector<Problem<T>*>& probs,
                 std::vector<double>& maxc, int nt) {
  const i64 A = static_cast<i64>(probs.size());
  maxc.assign(static_cast<size_t>(A), 0.0);
  const i64 bytes_per_col = n * static_cast<i64>(sizeof(T));
  const i64 chunk = std::max<i64>(8, std::min<i64>(256, (i64{256} << 10) / std::max<i64>(1, bytes_per_col)));
  const i64 n_chunks = (m + chunk - 1) / chunk;
  const bool par = nt > 1 && n * m >= (i64{1} << 25) && n_chunks > 1;
  std::vector<double> part(static_cast<size_t>(std::max(nt, 1) * A), 0.0);
#pragma omp parallel num_threads(nt) if (par)
  {
#ifdef _OPENMP
    const int tid = omp_get_thread_num();
#else
    const int tid = 0;
#endif
    double* mx = &part[static_cast<size_t>(tid * A)];
#pragma omp for schedule(dynamic, 1)
    for (i64 q = 0; q < n_chunks; ++q) {
      const i64 j0 = q * chunk, j1 = std::min(m, j0 + chunk);
      i64 a = 0;
      for (; a + 4 <= A; a += 4) {
        const char* scr[4];
        const double* rr[4];
        double* cc[4];
        for (int q = 0; q < 4; ++q) {
          Problem<T>* p = probs[static_cast<size_t>(a + q)];
          scr[q] = p->screened_data();
          rr[q] = p->residual_data();
          cc[q] = p->corr_data();
        }
        corr_block4(X, n, j0, j1, scr, rr, cc, mx + a);
      }
      for (; a < A; ++a) {
        Problem<T>* p = probs[static_cast<size_t>(a)];
        mx[a] = std::max(mx[a], corr_range(X, n, j0, j1, p->screened_data(), p->residual_data(),
                                           p->corr_data()));
      }
    }
  }
  for (i64 a = 0; a < A; ++a)
    for (int t = 0; t < std::max(nt, 1); ++t)
      maxc[static_cast<size_t>(a)] = std::max(maxc[static_cast<size_t>(a)], part[static_cast<size_t>(t * A + a)]);
}

}  // namespace

template <typename T>
void path(const T* X, i64 n, i64 m, const T* Y, i64 B, const double* lambdas, i64 L,
          const double* col_norm2, const double* w0, const Options& opt, PathResult& out) {
  const size_t LB = static_cast<size_t>(L * B);
  out.gaps.assign(LB, 0.0);
  out.epochs.assign(LB, 0);
  std::vector<std::vector<i64>> idx(LB);
  std::vector<std::vector<double>> val(LB);
  const int nt = opt.n_threads > 0 ? opt.n_threads : rml::max_threads();
  // The right-hand sides are split into G = min(threads, B) interleaved groups, one per thread
  // (no barrier between threads until the end). Within a group the problems run in lockstep:
  // per round, one shared pass over X gives the correlations of every unconverged problem of
  // the group, then each of them takes its step. A single group (B = 1, or one thread) may
  // parallelise that pass over column blocks instead.
  const i64 G = std::min<i64>(nt, B);
  std::vector<double> nrm(static_cast<size_t>(m));
  for (i64 j = 0; j < m; ++j) nrm[static_cast<size_t>(j)] = std::sqrt(col_norm2[j]);
#pragma omp parallel for schedule(static, 1) num_threads(nt) if (G > 1)
  for (i64 g = 0; g < G; ++g) {
    const int nt_in = G > 1 ? 1 : nt;
    std::vector<std::unique_ptr<Problem<T>>> probs;
    std::vector<i64> ids;
    for (i64 b = g; b < B; b += G) {
      probs.emplace_back(std::make_unique<Problem<T>>(X, n, m, col_norm2, nrm.data(), Y + b * n, opt,
                                                      nt_in > 1, nt_in));
      if (w0 != nullptr) probs.back()->set_warm(w0 + b * m);
      ids.push_back(b);
    }
    std::vector<Problem<T>*> active;
    std::vector<double> maxc;
    for (i64 l = 0; l < L; ++l) {
      active.clear();
      for (auto& p : probs) {
        p->begin(lambdas[l]);
        active.push_back(p.get());
      }
      while (!active.empty()) {
        corr_shared(X, n, m, active, maxc, nt_in);
        i64 keep = 0;
        for (size_t a = 0; a < active.size(); ++a)
          if (!active[a]->step(maxc[a])) active[static_cast<size_t>(keep++)] = active[a];
        active.resize(static_cast<size_t>(keep));
      }
      for (size_t q = 0; q < probs.size(); ++q) {
        const Problem<T>& prob = *probs[q];
        const size_t row = static_cast<size_t>(l * B + ids[q]);
        out.gaps[row] = prob.gap();
        out.epochs[row] = prob.epochs();
        const auto& w = prob.coef();
        for (i64 j = 0; j < m; ++j) {
          if (w[static_cast<size_t>(j)] != 0.0) {
            idx[row].push_back(j);
            val[row].push_back(w[static_cast<size_t>(j)]);
          }
        }
      }
    }
  }
  out.indptr.assign(LB + 1, 0);
  for (size_t row = 0; row < LB; ++row)
    out.indptr[row + 1] = out.indptr[row] + static_cast<i64>(idx[row].size());
  out.indices.clear();
  out.values.clear();
  out.indices.reserve(static_cast<size_t>(out.indptr[LB]));
  out.values.reserve(static_cast<size_t>(out.indptr[LB]));
  for (size_t row = 0; row < LB; ++row) {
    out.indices.insert(out.indices.end(), idx[row].begin(), idx[row].end());
    out.values.insert(out.values.end(), val[row].begin(), val[row].end());
  }
}

template void path<float>(const float*, i64, i64, const float*, i64, const double*, i64,
                          const double*, const double*, const Options&, PathResult&);
template void path<double>(const double*, i64, i64, const double*, i64, const double*, i64,
                           const double*, const double*, const Options&, PathResult&);

}  // namespace rml::lasso
