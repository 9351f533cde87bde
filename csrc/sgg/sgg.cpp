#include "common/parallel.hpp"
#include "sgg/sgg.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/philox.hpp"
#include "common/simd.hpp"
#include "common/vecmath.hpp"

namespace rml::sgg {

namespace {

constexpr double kTwoPi = 6.283185307179586476925286766559;
constexpr double kPi = 3.141592653589793238462643383279;

// (w + 0.5) / 2^32: a double in (0, 1) from one 32-bit word.
inline double u32(std::uint32_t w) { return (static_cast<double>(w) + 0.5) * 2.3283064365386963e-10; }

// A double in (0, 1) with 53 random bits from two words.
inline double u53(std::uint32_t a, std::uint32_t b) {
  return (static_cast<double>(a >> 5) * 67108864.0 + static_cast<double>(b >> 6) + 0.5) *
         1.1102230246251565e-16;
}

// log G for G ~ Gamma(a, 1): Marsaglia-Tsang on shape a (or a + 1 with the boost
// G = G_{a+1} U^{1/a} when a < 1), with a fixed set of counters: attempt t uses counter
// first + 1 + t (normal from words 0/1, acceptance uniform from words 2/3), the boost
// uniform comes from counter `first`. If all kGammaAttempts attempts are rejected
// (probability < 0.05^16 < 2e-21) the last candidate is used.
inline double log_gamma_variate(double a, std::uint64_t seed, std::uint64_t first,
                                bool with_boost = true) {
  const bool boost = a < 1.0;
  const double shape = boost ? a + 1.0 : a;
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  const double log_d = vecmath::log_pos(d);
  double log_g = log_d;
  for (std::int64_t t = 0; t < kGammaAttempts; ++t) {
    const Philox4 w = philox_block(seed, first + 1 + static_cast<std::uint64_t>(t));
    const double x = std::sqrt(-2.0 * vecmath::log_pos(u32(w.v[0]))) *
                     vecmath::cos_nonneg(kTwoPi * u32(w.v[1]));
    const double v1 = 1.0 + c * x;
    if (v1 <= 0.0) continue;
    const double v = v1 * v1 * v1;
    const double log_v = vecmath::log_pos(v);
    log_g = log_d + log_v;
    const double u = u53(w.v[2], w.v[3]);
    if (vecmath::log_pos(u) < 0.5 * x * x + d - d * v + d * log_v) break;
  }
  if (boost && with_boost) {
    const Philox4 w = philox_block(seed, first);
    log_g += vecmath::log_pos(u53(w.v[0], w.v[1])) / a;
  }
  return log_g;
}

// (w + 0.5) / 2^32 for a word held in a 64-bit lane (an exact int64 -> double conversion).
RML_INLINE double u32w(std::uint64_t w) {
  return (static_cast<double>(static_cast<std::int64_t>(w)) + 0.5) * 2.3283064365386963e-10;
}

// Normals 4q .. 4q+3 of one row for q < nq into z (Box-Muller on the word pairs (0,1) and
// (2,3) of counter base + q: cos, sin, cos, sin). Branch-free: vectorised over q.
RML_SIMD_CLONES
void row_normals(double* __restrict z, std::int64_t nq, std::uint64_t seed, std::uint64_t base) {
  for (std::int64_t q = 0; q < nq; ++q) {
    const Philox4 b = philox_block(seed, base + static_cast<std::uint64_t>(q));
    const std::uint64_t w0 = b.v[0], w1 = b.v[1], w2 = b.v[2], w3 = b.v[3];
    const double r0 = std::sqrt(-2.0 * vecmath::log_pos(u32w(w0)));
    const double r1 = std::sqrt(-2.0 * vecmath::log_pos(u32w(w2)));
    double s0, c0, s1, c1;
    vecmath::sincos_nonneg(kTwoPi * u32w(w1), &s0, &c0);
    vecmath::sincos_nonneg(kTwoPi * u32w(w3), &s1, &c1);
    z[4 * q] = r0 * c0;
    z[4 * q + 1] = r0 * s0;
    z[4 * q + 2] = r1 * c1;
    z[4 * q + 3] = r1 * s1;
  }
}

// sum z_j^2 over j < len (len a multiple of 8) in eight interleaved partial sums combined in a
// fixed order, so the result does not depend on the thread count (vectorises without
// reassociation; FMA contraction may differ between the instruction-set clones).
RML_SIMD_CLONES
double sum_squares8(const double* __restrict z, std::int64_t len) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (std::int64_t j = 0; j < len; j += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += z[j + l] * z[j + l];
  }
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

RML_SIMD_CLONES
void scale_row(double* __restrict out, const double* __restrict z, std::int64_t dim, double s) {
  for (std::int64_t j = 0; j < dim; ++j) out[j] = s * z[j];
}

RML_SIMD_CLONES
void scale_row(float* __restrict out, const double* __restrict z, std::int64_t dim, double s) {
  for (std::int64_t j = 0; j < dim; ++j) out[j] = static_cast<float>(s * z[j]);
}

// First Marsaglia-Tsang attempt for `count` rows at once (branch-free, vectorised): the
// candidate log G (log d + log v, or log d when 1 + c x <= 0) and whether it was accepted.
// Row r's attempts start at counter first0 + r * stride + 1. Rows that reject are finished
// by log_gamma_variate (which replays the same counters, so the result is identical).
RML_SIMD_CLONES
void gamma_first_attempt(double* __restrict log_g, double* __restrict accepted,
                         std::int64_t count, double d, double c, std::uint64_t seed,
                         std::uint64_t first0, std::uint64_t stride) {
  const double log_d = vecmath::log_pos(d);
  std::uint64_t ctr = first0 + 1;
  for (std::int64_t r = 0; r < count; ++r, ctr += stride) {
    const Philox4 b = philox_block(seed, ctr);
    const std::uint64_t w0 = b.v[0], w1 = b.v[1], w2 = b.v[2], w3 = b.v[3];
    const double x = std::sqrt(-2.0 * vecmath::log_pos(u32w(w0))) *
                     vecmath::cos_nonneg(kTwoPi * u32w(w1));
    const double v1 = 1.0 + c * x;
    const bool valid = v1 > 0.0;
    const double fv = valid ? 1.0 : 0.0;
    const double vv = fv * v1 + (1.0 - fv);  // 1 where invalid (exact: fv is 0 or 1)
    const double v = vv * vv * vv;
    const double log_v = vecmath::log_pos(v);
    const double u = (static_cast<double>(static_cast<std::int64_t>(w2 >> 5)) * 67108864.0 +
                      static_cast<double>(static_cast<std::int64_t>(w3 >> 6)) + 0.5) *
                     1.1102230246251565e-16;  // u53(w2, w3)
    const double pass = vecmath::log_pos(u) < 0.5 * x * x + d - d * v + d * log_v ? 1.0 : 0.0;
    log_g[r] = log_d + fv * log_v;
    accepted[r] = fv * pass;
  }
}

constexpr std::int64_t kRowChunk = 256;

template <typename T>
void sample_impl(T* out, std::int64_t n, std::int64_t dim, double sigma, double k, double p,
                 std::uint64_t seed, std::uint64_t offset) {
  // Nothing to draw: return before the per-thread row buffer (sized by dim) is allocated,
  // since an allocation failure inside the parallel region could only terminate the process.
  if (n <= 0) return;
  const std::int64_t stride = counters_per_row(dim);
  const std::int64_t nq = (dim + 3) / 4;
  const std::int64_t padded = (4 * nq + 7) / 8 * 8;
  const double a = k / p;
  const bool boost = a < 1.0;
  const double shape = boost ? a + 1.0 : a;
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  const double log_sigma = std::log(sigma);
  const double inv_p = 1.0 / p;
  const std::int64_t chunks = (n + kRowChunk - 1) / kRowChunk;
#pragma omp parallel num_threads(rml::max_threads()) if (n * dim > 32768)
  {
    std::vector<double> z(static_cast<std::size_t>(padded), 0.0);
    double log_g[kRowChunk];
    double accepted[kRowChunk];
#pragma omp for schedule(static)
    for (std::int64_t ch = 0; ch < chunks; ++ch) {
      const std::int64_t i0 = ch * kRowChunk;
      const std::int64_t count = std::min(kRowChunk, n - i0);
      const std::uint64_t base0 = offset + static_cast<std::uint64_t>(i0 * stride);
      const std::uint64_t first0 = base0 + static_cast<std::uint64_t>(nq);
      gamma_first_attempt(log_g, accepted, count, d, c, seed, first0, static_cast<std::uint64_t>(stride));
      for (std::int64_t r = 0; r < count; ++r) {
        const std::uint64_t first = first0 + static_cast<std::uint64_t>(r * stride);
        double lg = accepted[r] != 0.0 ? log_g[r] : log_gamma_variate(a, seed, first, false);
        if (boost) {
          const Philox4 w = philox_block(seed, first);
          lg += vecmath::log_pos(u53(w.v[0], w.v[1])) / a;
        }
        log_g[r] = lg;
      }
      for (std::int64_t r = 0; r < count; ++r) {
        const std::uint64_t base = base0 + static_cast<std::uint64_t>(r * stride);
        row_normals(z.data(), nq, seed, base);
        for (std::int64_t j = dim; j < padded; ++j) z[static_cast<std::size_t>(j)] = 0.0;
        const double ss = sum_squares8(z.data(), padded);
        const double radius = std::exp(log_sigma + log_g[r] * inv_p);
        scale_row(out + (i0 + r) * dim, z.data(), dim, radius / std::sqrt(ss));
      }
    }
  }
}

// Cubic Hermite interpolation of the tabulated angle CDF H at theta in [0, pi].
inline double angle_cdf(double theta, const double* h, const double* dh, std::int64_t nt) {
  const double step = kPi / static_cast<double>(nt - 1);
  double x = theta / step;
  if (x <= 0.0) return 0.0;
  std::int64_t i = static_cast<std::int64_t>(x);
  if (i >= nt - 1) return 1.0;
  const double t = x - static_cast<double>(i);
  const double t2 = t * t, t3 = t2 * t;
  const double val = (2 * t3 - 3 * t2 + 1) * h[i] + (t3 - 2 * t2 + t) * step * dh[i] +
                     (-2 * t3 + 3 * t2) * h[i + 1] + (t3 - t2) * step * dh[i + 1];
  return std::min(1.0, std::max(0.0, val));
}

struct RadiusNode {
  double r, w, phi, lo, hi, four_r_d;
  double lmin = -INFINITY, lmax = INFINITY;  // range of L given ||X|| = r
};

// P(||X - D e1|| <= x | ||X|| = r) = H(theta*(x)) with the law of cosines written without
// cancellation: sin^2(theta/2) = (x - |r-D|)(x + |r-D|) / (4 r D).
inline double cond_le(double x, const RadiusNode& nd, const double* h, const double* dh,
                      std::int64_t nt) {
  if (!(x > nd.lo)) return 0.0;
  if (x >= nd.hi) return 1.0;
  const double s2 = (x - nd.lo) * (x + nd.lo) / nd.four_r_d;
  double theta;
  if (s2 <= 0.5) {
    theta = 2.0 * std::asin(std::sqrt(s2));
  } else {
    const double c2 = std::max(0.0, (nd.hi - x) * (nd.hi + x) / nd.four_r_d);
    theta = kPi - 2.0 * std::asin(std::sqrt(c2));
  }
  return angle_cdf(theta, h, dh, nt);
}

// psi(t) = phi(e^t) = exp(p (t - ln sigma)) - c t, c = k - dim; convex in t.
struct Phi {
  double p, log_sigma, c;
  double psi(double t) const { return std::exp(p * (t - log_sigma)) - c * t; }
  double dpsi(double t) const { return p * std::exp(p * (t - log_sigma)) - c; }
  // Newton from a point where psi >= y on a monotone branch of the convex psi converges
  // monotonically to the root.
  double newton(double t, double y) const {
    for (int it = 0; it < 200; ++it) {
      const double d = dpsi(t);
      if (d == 0.0) break;
      const double step = (psi(t) - y) / d;
      t -= step;
      if (std::fabs(step) <= 1e-15 * (1.0 + std::fabs(t))) break;
    }
    return t;
  }
  // Right root of psi(t) = y, starting right of t_start.
  double right_root(double y, double t_start) const {
    double step = 1.0, t = t_start + step;
    while (psi(t) < y && step < 1e6) {
      step *= 2.0;
      t = t_start + step;
    }
    return newton(t, y);
  }
  double left_root(double y, double t_start) const {
    double step = 1.0, t = t_start - step;
    while (psi(t) < y && step < 1e6) {
      step *= 2.0;
      t = t_start - step;
    }
    return newton(t, y);
  }
};

}  // namespace

void sample(double* out, std::int64_t n, std::int64_t dim, double sigma, double k, double p,
            std::uint64_t seed, std::uint64_t offset) {
  sample_impl(out, n, dim, sigma, k, p, seed, offset);
}

void sample(float* out, std::int64_t n, std::int64_t dim, double sigma, double k, double p,
            std::uint64_t seed, std::uint64_t offset) {
  sample_impl(out, n, dim, sigma, k, p, seed, offset);
}

void log_radius(double* out, std::int64_t n, std::int64_t dim, double k, double p,
                std::uint64_t seed, std::uint64_t offset) {
  const std::int64_t stride = counters_per_row(dim);
  const std::int64_t nq = (dim + 3) / 4;
#pragma omp parallel for num_threads(rml::max_threads()) schedule(static) if (n > 4096)
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint64_t base = offset + static_cast<std::uint64_t>(i * stride);
    out[i] = log_gamma_variate(k / p, seed, base + static_cast<std::uint64_t>(nq)) / p;
  }
}

namespace {

struct CondProb {
  const LossCdfSpec& spec;
  const double* h;
  const double* dh;
  std::int64_t nt;
  Phi phi;
  double t0, psi_min;

  CondProb(const LossCdfSpec& s, const double* h_, const double* dh_, std::int64_t nt_)
      : spec(s), h(h_), dh(dh_), nt(nt_),
        phi{s.p, std::log(s.sigma), s.k - static_cast<double>(s.dim)}, t0(0.0), psi_min(0.0) {
    if (phi.c > 0.0) {
      t0 = phi.log_sigma + std::log(phi.c / s.p) / s.p;
      psi_min = phi.psi(t0);
    }
  }

  RadiusNode node(double r, double w) const {
    return RadiusNode{r, w, phi.psi(std::log(r)), std::fabs(r - spec.sensitivity),
                      r + spec.sensitivity, 4.0 * r * spec.sensitivity};
  }

  // P(L <= ell | ||X|| = r).
  double operator()(double ell, const RadiusNode& nd) const {
    const double y = ell + nd.phi;  // L <= ell  <=>  phi(r') <= y
    const double p = spec.p;
    if (phi.c == 0.0) {  // phi(s) = (s/sigma)^p: r' <= sigma y^(1/p)
      if (!(y > 0.0)) return 0.0;
      const double b = p == 2.0 ? spec.sigma * std::sqrt(y)
                                : (p == 1.0 ? spec.sigma * y : spec.sigma * std::pow(y, 1.0 / p));
      return cond_le(b, nd, h, dh, nt);
    }
    if (phi.c < 0.0) {  // increasing: one root
      const double b = std::exp(phi.right_root(y, std::log(std::max(nd.hi, 1e-300))));
      return cond_le(b, nd, h, dh, nt);
    }
    if (!(y > psi_min)) return 0.0;  // convex with a minimum: r' in [s_lo, s_hi]
    const double s_hi = std::exp(phi.right_root(y, t0));
    const double s_lo = std::exp(phi.left_root(y, t0));
    return std::max(0.0, cond_le(s_hi, nd, h, dh, nt) - cond_le(s_lo, nd, h, dh, nt));
  }

  double log_density(double r) const {
    const double x = r / spec.sigma;
    return spec.log_norm + (spec.k - 1.0) * std::log(x) - std::pow(x, spec.p);
  }
};

// A root of e(r) = ell on [a, b] when e(a) - ell and e(b) - ell differ in sign: Illinois
// (modified regula falsi), which keeps a bracket and converges superlinearly.
template <typename F>
bool bisect_root(F e, double ell, double a, double b, double* root) {
  double fa = e(a) - ell, fb = e(b) - ell;
  if (!(a < b) || !std::isfinite(fa) || !std::isfinite(fb) || fa == 0.0 || fb == 0.0 ||
      (fa < 0.0) == (fb < 0.0)) {
    // Infinite end values (phi(0)): fall back to plain bisection on the sign.
    if (!(a < b) || std::isnan(fa) || std::isnan(fb) || fa == 0.0 || fb == 0.0 ||
        (fa < 0.0) == (fb < 0.0)) {
      return false;
    }
    for (int it = 0; it < 200 && b - a > 1e-15 * b; ++it) {
      const double mid = 0.5 * (a + b);
      const double fm = e(mid) - ell;
      if ((fm < 0.0) == (fa < 0.0)) { a = mid; fa = fm; } else { b = mid; fb = fm; }
    }
    *root = 0.5 * (a + b);
    return true;
  }
  int side = 0;
  double c = a;
  for (int it = 0; it < 100; ++it) {
    c = (a * fb - b * fa) / (fb - fa);
    if (!(c > a && c < b)) c = 0.5 * (a + b);
    const double fc = e(c) - ell;
    if (fc == 0.0 || b - a <= 1e-15 * b) break;
    if ((fc < 0.0) == (fb < 0.0)) {
      b = c; fb = fc;
      if (side == -1) fa *= 0.5;
      side = -1;
    } else {
      a = c; fa = fc;
      if (side == 1) fb *= 0.5;
      side = 1;
    }
    if (b - a <= 1e-14 * b) { c = 0.5 * (a + b); break; }
  }
  *root = c;
  return true;
}

}  // namespace

void loss_cdf(double* out, const double* losses, std::int64_t m, const double* edges,
              std::int64_t panels, const double* r_nodes, const double* r_weights,
              const double* gl_t, const double* gl_w, std::int64_t ngl, const double* h_table,
              const double* dh_table, std::int64_t nt, const LossCdfSpec& spec) {
  const CondProb cond(spec, h_table, dh_table, nt);
  const std::int64_t per_panel = 16;
  std::vector<RadiusNode> nodes(static_cast<std::size_t>(panels * per_panel));
  const double d = spec.sensitivity;
  const double r_min = edges[0], r_max = edges[panels];
  // Extreme conditional losses e+(r) = phi(r + D) - phi(r), e-(r) = phi(|r - D|) - phi(r):
  // the conditional CDF has a kink wherever one of them crosses ell.
  auto phi_of = [&cond](double s) { return s > 0.0 ? cond.phi.psi(std::log(s)) : (cond.phi.c > 0.0 ? INFINITY : (cond.phi.c < 0.0 ? -INFINITY : 0.0)); };
  auto e_plus = [&](double r) { return phi_of(r + d) - phi_of(r); };
  auto e_minus = [&](double r) { return phi_of(std::fabs(r - d)) - phi_of(r); };
  // For k > dim the set {phi(r') <= y} appears (as a point s0) when y = min phi: another kink.
  auto e_zero = [&](double r) { return cond.psi_min - phi_of(r); };
  const bool has_min = cond.phi.c > 0.0;
  const double s0 = has_min ? std::exp(cond.t0) : 0.0;
  std::vector<double> ep(static_cast<std::size_t>(panels + 1)), em(ep.size()), e0(ep.size());
  for (std::int64_t q = 0; q <= panels; ++q) {
    ep[static_cast<std::size_t>(q)] = e_plus(edges[q]);
    em[static_cast<std::size_t>(q)] = e_minus(edges[q]);
    e0[static_cast<std::size_t>(q)] = has_min ? e_zero(edges[q]) : 0.0;
  }
  for (std::int64_t j = 0; j < panels * per_panel; ++j) {
    RadiusNode nd = cond.node(r_nodes[j], r_weights[j]);
    // phi is monotone (k <= dim) or convex with its minimum at s0 (k > dim), so the loss
    // given r ranges over [lmin, lmax]; outside it the conditional CDF is 0 or 1.
    const double f_lo = phi_of(nd.lo), f_hi = phi_of(nd.hi);
    nd.lmax = std::max(f_lo, f_hi) - nd.phi;
    nd.lmin = ((has_min && s0 > nd.lo && s0 < nd.hi) ? cond.psi_min : std::min(f_lo, f_hi)) - nd.phi;
    nodes[static_cast<std::size_t>(j)] = nd;
  }
  constexpr int kMaxCuts = 32;
#pragma omp parallel for num_threads(rml::max_threads()) schedule(dynamic, 16) if (m * panels > 2000)
  for (std::int64_t i = 0; i < m; ++i) {
    const double ell = losses[i];
    double cuts[kMaxCuts];
    int ncut = 0;
    if (d > r_min && d < r_max) cuts[ncut++] = d;
    if (has_min && s0 > r_min && s0 < r_max) cuts[ncut++] = s0;  // e0 touches 0 there
    for (std::int64_t q = 0; q < panels && ncut < kMaxCuts - 1; ++q) {
      const auto u = static_cast<std::size_t>(q);
      double root;
      if ((ep[u] - ell) * (ep[u + 1] - ell) < 0.0 &&
          bisect_root(e_plus, ell, edges[q], edges[q + 1], &root)) {
        cuts[ncut++] = root;
      }
      if ((em[u] - ell) * (em[u + 1] - ell) < 0.0 && ncut < kMaxCuts &&
          bisect_root(e_minus, ell, edges[q], edges[q + 1], &root)) {
        cuts[ncut++] = root;
      }
      if (has_min && (e0[u] - ell) * (e0[u + 1] - ell) < 0.0 && ncut < kMaxCuts &&
          bisect_root(e_zero, ell, edges[q], edges[q + 1], &root)) {
        cuts[ncut++] = root;
      }
    }
    std::sort(cuts, cuts + ncut);
    double acc = 0.0;
    int next_cut = 0;
    for (std::int64_t q = 0; q < panels; ++q) {
      const double a = edges[q], b = edges[q + 1];
      while (next_cut < ncut && cuts[next_cut] <= a) ++next_cut;
      if (next_cut < ncut && cuts[next_cut] < b) {
        // Split [a, b] at the kinks inside and integrate each part with the smoothing map.
        double lo = a;
        int c = next_cut;
        while (true) {
          const double hi = (c < ncut && cuts[c] < b) ? cuts[c] : b;
          const double len = hi - lo;
          if (len > 0.0) {
            for (std::int64_t t = 0; t < ngl; ++t) {
              const double tt = gl_t[t];
              const double r = lo + len * tt * tt * (3.0 - 2.0 * tt);
              if (!(r > 0.0)) continue;
              const double jac = len * 6.0 * tt * (1.0 - tt);
              const double w = gl_w[t] * jac * std::exp(cond.log_density(r));
              acc += w * cond(ell, cond.node(r, w));
            }
          }
          if (hi >= b) break;
          lo = hi;
          ++c;
        }
      } else {
        for (std::int64_t j = q * per_panel; j < (q + 1) * per_panel; ++j) {
          const RadiusNode& nd = nodes[static_cast<std::size_t>(j)];
          if (ell >= nd.lmax) {
            acc += nd.w;
          } else if (ell >= nd.lmin) {
            acc += nd.w * cond(ell, nd);
          }
        }
      }
    }
    out[i] = acc;
  }
}

}  // namespace rml::sgg
