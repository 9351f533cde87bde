// Spherical Generalized Gamma (SGG) mechanisms: counter-based sampling and the
// privacy-loss CDF used to build their privacy-loss distributions.
#pragma once

#include <cstdint>

namespace rml::sgg {

// Philox counters used by one row: ceil(dim/4) for the normals (four per counter),
// one auxiliary counter (the shape-boost uniform) and kGammaAttempts for the
// Marsaglia-Tsang attempts.
constexpr std::int64_t kGammaAttempts = 16;
inline std::int64_t counters_per_row(std::int64_t dim) { return (dim + 3) / 4 + 1 + kGammaAttempts; }

// Row i of out (n x dim, row-major) is R * Z / ||Z|| with R = sigma * G^(1/p),
// G ~ Gamma(k/p, 1), Z ~ N(0, I_dim), all from the Philox stream (seed, offset + i * S),
// S = counters_per_row(dim). Independent of the number of threads.
void sample(double* out, std::int64_t n, std::int64_t dim, double sigma, double k, double p,
            std::uint64_t seed, std::uint64_t offset);
void sample(float* out, std::int64_t n, std::int64_t dim, double sigma, double k, double p,
            std::uint64_t seed, std::uint64_t offset);

// Log-radius only (log R per row), same stream layout: used by the Triton path tests.
void log_radius(double* out, std::int64_t n, std::int64_t dim, double k, double p,
                std::uint64_t seed, std::uint64_t offset);

// CDF of the privacy loss L = phi(||X - D e1||) - phi(||X||), X ~ SGG(sigma, k, p) in R^dim
// (dim >= 2), phi(s) = (s/sigma)^p - (k - dim) ln s, at each of the m losses:
//   F(l) = int f_R(r) P(L <= l | ||X|| = r) dr,
// where P(. | r) = H(theta*) for the polar angle Theta of X (density ~ sin^(dim-2)), H
// tabulated on theta_i = i * pi / (nt - 1) with derivative table dH (cubic Hermite).
// The radius integral uses `panels` Gauss-Legendre panels with edges `edges` (panels + 1)
// and precomputed nodes/weights (16 per panel, r_nodes / r_weights). For k == dim the
// integrand has kinks (H reaches 0 or 1) at the radii where the extreme losses
// phi(r + D) - phi(r) or phi(|r - D|) - phi(r) equal l, and at r = D; a panel holding such
// a kink is split there and each part integrated with the smoothing map
// r = a + (b - a) t^2 (3 - 2t), which removes the (r - r_k)^((dim-1)/2) endpoint singularity.
// log_norm = log p - log sigma - lgamma(k/p) gives f_R(r) = exp(log_norm + (k-1) log(r/sigma)
// - (r/sigma)^p). Each output sums in a fixed order (deterministic for any thread count).
struct LossCdfSpec {
  std::int64_t dim;
  double sigma, k, p, sensitivity, log_norm;
};
void loss_cdf(double* out, const double* losses, std::int64_t m, const double* edges,
              std::int64_t panels, const double* r_nodes, const double* r_weights,
              const double* gl_t, const double* gl_w, std::int64_t ngl, const double* h_table,
              const double* dh_table, std::int64_t nt, const LossCdfSpec& spec);

}  // namespace rml::sgg

namespace rml::sgg {

// delta(eps_q) = sum_{l_i > eps_q} p_i (1 - e^{eps_q - l_i}) + inf_mass for a pmf on
// l_i = (lower + i) h, via suffix sums S1_j = sum_{i>=j} p_i, S2_j = sum_{i>=j} p_i e^{l_0 - l_i}
// and a binary search per query: O(n + q log n). Deterministic (serial suffix sums).
void pld_delta_for_eps(double* out, const double* eps, std::int64_t nq, const double* pmf,
                       std::int64_t n, std::int64_t lower, double h, double inf_mass);

// Smallest eps >= 0 with delta(eps) <= delta_q (+inf when inf_mass > delta_q): delta at the
// lattice points by suffix sums, a binary search for the first point meeting the target, and
// the exact solution of s1_k - e^{eps - l_0} s2_k + inf_mass = delta_q inside that cell.
void pld_epsilon_for_delta(double* out, const double* delta, std::int64_t nq, const double* pmf,
                           std::int64_t n, std::int64_t lower, double h, double inf_mass);

}  // namespace rml::sgg
