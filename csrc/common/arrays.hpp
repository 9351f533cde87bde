// Checks at the binding boundary for NumPy buffers handed to native kernels.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>

namespace rml {

namespace py = pybind11;

// A writable, C-contiguous, one-dimensional array of T; raises ValueError/TypeError otherwise.
template <typename T>
T* writable_vector(py::array& a, const char* name) {
  if (!py::isinstance<py::array_t<T>>(a) || !a.dtype().is(py::dtype::of<T>())) {
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
