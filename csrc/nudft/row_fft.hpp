// Complex FFTs along the rows of channel planes (split real / imaginary format).
//
// Element j of a length-n sequence is the row re[j * ld .. j * ld + ld), im[...] of ld
// channels, so every butterfly of the Stockham passes is one contiguous vector loop over the
// channels (and over the stride blocks of the later passes): the layout the spreading writes
// and the interpolation reads, with no transposes. Lengths are products of 2, 3 and 5 (the
// NUFFT's fine grids); the transform is unnormalised, out[k] = sum_j in[j] e^{sign 2 pi i jk/n}.
#pragma once

#include <cstdint>
#include <vector>

namespace rml::nudft {

template <typename T>
class RowFFT {
 public:
  // Throws std::invalid_argument unless n >= 1 factors into 2, 3 and 5.
  RowFFT(std::int64_t n, int sign);
  std::int64_t size() const { return n_; }
  // Transforms the planes (re, im) [n, ld] using (wre, wim) [n, ld] as work space; returns
  // true when the result is in (re, im), false when it is in (wre, wim).
  bool run(T* re, T* im, T* wre, T* wim, std::int64_t ld) const;

 private:
  std::int64_t n_;
  int sign_;
  std::vector<int> radix_;             // pass radices, in order
  std::vector<std::size_t> tw_off_;    // per pass: offset of its twiddles [m][radix]
  std::vector<T> tw_re_, tw_im_;
};

extern template class RowFFT<float>;
extern template class RowFFT<double>;

}  // namespace rml::nudft
