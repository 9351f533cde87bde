#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "common/arrays.hpp"
#include "clip/clip.hpp"

namespace py = pybind11;
using namespace pybind11::literals;

namespace {

template <typename T>
const T* cview(const py::array& a, const char* name, py::ssize_t ndim) {
  if (!rml::has_dtype<T>(a)) {
    throw py::type_error(std::string(name) + ": expected dtype " +
                         std::string(py::str(py::dtype::of<T>())) + ", got " +
                         std::string(py::str(a.dtype())));
  }
  if (a.ndim() != ndim) {
    throw py::value_error(std::string(name) + ": expected " + std::to_string(ndim) +
                          " dimensions, got " + std::to_string(a.ndim()));
  }
  if (!(a.flags() & py::array::c_style)) {
    throw py::value_error(std::string(name) + ": expected a C-contiguous array");
  }
  return static_cast<const T*>(a.data());
}

template <typename T>
T* wview(py::array& a, const char* name, py::ssize_t ndim) {
  cview<T>(a, name, ndim);
  if (!a.writeable()) throw py::value_error(std::string(name) + ": expected a writable array");
  return static_cast<T*>(a.mutable_data());
}

void require(bool ok, const std::string& msg) {
  if (!ok) throw py::value_error(msg);
}

template <typename T>
void ghost_impl(const py::array& A, const py::array& D, py::array& out, std::uintptr_t gemm) {
  const T* a = cview<T>(A, "A", 3);
  const T* d = cview<T>(D, "D", 3);
  double* o = wview<double>(out, "out", 1);
  require(D.shape(0) == A.shape(0) && D.shape(1) == A.shape(1), "D: expected shape (B, S, p)");
  require(out.shape(0) == A.shape(0), "out: expected shape (B,)");
  auto fn = reinterpret_cast<rml::clip::GemmFn<T>>(gemm);
  py::gil_scoped_release release;
  rml::clip::ghost_norm_sq<T>(a, d, A.shape(0), A.shape(1), A.shape(2), D.shape(2), o, fn);
}

template <typename T>
void cross_impl(const py::array& A, const py::array& D, const py::array& A2, const py::array& D2,
                py::array& out, std::uintptr_t gemm) {
  const T* a = cview<T>(A, "A", 3);
  const T* d = cview<T>(D, "D", 3);
  const T* a2 = cview<T>(A2, "A2", 3);
  const T* d2 = cview<T>(D2, "D2", 3);
  double* o = wview<double>(out, "out", 1);
  const auto B = A.shape(0);
  require(D.shape(0) == B && D.shape(1) == A.shape(1), "D: expected shape (B, S, p)");
  require(A2.shape(0) == B && A2.shape(2) == A.shape(2), "A2: expected shape (B, S2, d)");
  require(D2.shape(0) == B && D2.shape(1) == A2.shape(1) && D2.shape(2) == D.shape(2),
          "D2: expected shape (B, S2, p)");
  require(out.shape(0) == B, "out: expected shape (B,)");
  auto fn = reinterpret_cast<rml::clip::GemmFn<T>>(gemm);
  py::gil_scoped_release release;
  rml::clip::ghost_cross<T>(a, d, a2, d2, B, A.shape(1), A2.shape(1), A.shape(2), D.shape(2), o,
                            fn);
}

template <typename T>
void acc_impl(const py::array& A, const py::array& D, const py::array& w, std::int64_t S,
              py::array& out, double noise_std, std::uint64_t seed, std::uint64_t offset,
              std::uintptr_t gemm) {
  const T* a = cview<T>(A, "A", 2);
  const T* d = cview<T>(D, "D", 2);
  const T* ww = cview<T>(w, "w", 1);
  T* o = wview<T>(out, "out", 2);
  require(S >= 1, "seq_len: expected >= 1");
  require(D.shape(0) == A.shape(0), "D: expected shape (N, p)");
  require(w.shape(0) * S == A.shape(0), "w: expected N / seq_len entries");
  require(out.shape(0) == D.shape(1) && out.shape(1) == A.shape(1), "out: expected shape (p, d)");
  require(noise_std >= 0.0, "noise_std: expected >= 0");
  auto fn = reinterpret_cast<rml::clip::GemmFn<T>>(gemm);
  py::gil_scoped_release release;
  rml::clip::scaled_outer_accumulate<T>(a, d, ww, A.shape(0), A.shape(1), D.shape(1), S, o,
                                        noise_std, seed, offset, fn);
}

bool is_f32(const py::array& a) { return rml::has_dtype<float>(a); }

}  // namespace

void register_clip(py::module_ m) {
  m.doc() = "Per-sample clipping: ghost norms, cross-Grams, row-scaled accumulate (+ Philox noise)";
  m.def(
      "ghost_norm_sq",
      [](const py::array& A, const py::array& D, py::array out, std::uintptr_t gemm) {
        is_f32(A) ? ghost_impl<float>(A, D, out, gemm) : ghost_impl<double>(A, D, out, gemm);
      },
      "A"_a, "D"_a, "out"_a, "gemm"_a = 0,
      "out[i] = ||D_i^T A_i||_F^2 for A (B,S,d), D (B,S,p) float32/float64; out (B,) float64. "
      "gemm: address of a Fortran ?gemm for the Grams when S >= 16 (0: loops, float64 sums).");
  m.def(
      "ghost_cross",
      [](const py::array& A, const py::array& D, const py::array& A2, const py::array& D2,
         py::array out, std::uintptr_t gemm) {
        is_f32(A) ? cross_impl<float>(A, D, A2, D2, out, gemm)
                  : cross_impl<double>(A, D, A2, D2, out, gemm);
      },
      "A"_a, "D"_a, "A2"_a, "D2"_a, "out"_a, "gemm"_a = 0,
      "out[i] = <D_i^T A_i, D2_i^T A2_i>_F; out (B,) float64.");
  m.def(
      "scaled_outer_accumulate",
      [](const py::array& A, const py::array& D, const py::array& w, std::int64_t seq_len,
         py::array out, double noise_std, std::uint64_t seed, std::uint64_t offset,
         std::uintptr_t gemm) {
        is_f32(A) ? acc_impl<float>(A, D, w, seq_len, out, noise_std, seed, offset, gemm)
                  : acc_impl<double>(A, D, w, seq_len, out, noise_std, seed, offset, gemm);
      },
      "A"_a, "D"_a, "w"_a, "seq_len"_a, "out"_a, "noise_std"_a, "seed"_a, "offset"_a, "gemm"_a,
      "out (p,d) = sum_r w[r // seq_len] D[r]^T A[r] + noise_std * Philox normal(seed, offset + "
      "j*d + k); gemm: address of a Fortran ?gemm (0: built-in loop).");
}
