// Checks at the binding boundary for NumPy buffers handed to native kernels.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>

namespace rml {

namespace py = pybind11;

// Whether a's dtype is T's: by equivalence, not object identity (an unpickled or memory-mapped
// float64 array carries an equal dtype that is a different object).
template <typename T>
bool has_dtype(const py::array& a) {
  return a.dtype().equal(py::dtype::of<T>());
}

// A writable, C-contiguous, one-dimensional array of T; raises ValueError/TypeError otherwise.
template <typename T>
T* writable_vector(py::array& a, const char* name) {
  if (!py::isinstance<py::array_t<T>>(a) || !rml::has_dtype<T>(a)) {
    throw py::type_error(std::string(name) + ": expected dtype " +
                         std::string(py::str(py::dtype::of<T>())) + ", got " +
                         std::string(py::str(a.dtype())));
  }
  if (a.ndim() != 1) {
    throw py::value_error(std::string(name) + ": expected a 1-D array, got ndim=" +
                          std::to_string(a.ndim()));
  }
  if (!(a.flags() & py::array::c_style)) {
    throw py::value_error(std::string(name) + ": expected a C-contiguous array");
  }
  if (!a.writeable()) {
    throw py::value_error(std::string(name) + ": expected a writable array");
  }
  return static_cast<T*>(a.mutable_data());
}

}  // namespace rml
