// Our own FFT for PLD composition: complex transforms of length f * 2^m (f in {1, 3, 5}),
// real transforms by packing even/odd samples into one complex transform of half the
// length, linear convolution and circular N-fold self-convolution.
//
// Complex transforms are iterative radix-2 decimation in time on split real/imaginary
// arrays (so every butterfly stage vectorises), preceded for f > 1 by one radix-f pass
// that combines the f interleaved sub-transforms. Twiddles come from one table of
// exp(-2 pi i u / L), L = 2^(m+1), built from L/8 + 1 direct cos/sin values by octant
// symmetry; every other twiddle is a table entry or a product of a table entry and one of
// the f-th roots. OpenMP splits each stage over butterfly blocks (or within a block);
// every output is computed by the same arithmetic for any thread count.
#pragma once

#include <cstdint>

namespace rml::fft {

// Smallest even length f * 2^m >= n (f in {1, 3, 5}) that the real transforms accept.
std::int64_t good_size(std::int64_t n);

// Whether n is f * 2^m with f in {1, 3, 5}.
bool supported_complex_size(std::int64_t n);

// In-place complex DFT of length n (supported_complex_size): X[k] = sum_t x[t] e^{-+2 pi i t k / n}
// with sign = -1 (forward) or +1 (inverse, unnormalised).
void complex_dft(double* re, double* im, std::int64_t n, int sign);

// Real forward DFT of x (nx values, zero-padded or folded modulo n onto length n, n even
// and n/2 supported): out_re/out_im receive the n/2 + 1 bins k = 0 .. n/2.
void real_forward(const double* x, std::int64_t nx, std::int64_t n, double* out_re, double* out_im);

// Inverse of real_forward (normalised by 1/n): n real values from the n/2 + 1 bins.
void real_inverse(const double* in_re, const double* in_im, std::int64_t n, double* y);

// Linear convolution c = a * b, c of length na + nb - 1.
void convolve(const double* a, std::int64_t na, const double* b, std::int64_t nb, double* c);

// Circular n-fold self-convolution of pmf (folded modulo size) on `size` points (an even
// good size), read out rotated: out[j] = (pmf^{*n})[(shift + j) mod size], j < size.
void self_convolve_circular(const double* pmf, std::int64_t npmf, std::int64_t n,
                            std::int64_t size, std::int64_t shift, double* out);

}  // namespace rml::fft
