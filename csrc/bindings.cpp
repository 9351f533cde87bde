// The one extension module rml_fast._C: a submodule per kernel family.
#include <pybind11/pybind11.h>

#include "common/parallel.hpp"

namespace py = pybind11;

void register_random(py::module_ m);
void register_sgg(py::module_ m);
void register_clip(py::module_ m);

PYBIND11_MODULE(_C, m) {
  m.doc() = "rml_fast native kernels (C++17, pybind11)";
  register_random(m.def_submodule("random"));
  register_sgg(m.def_submodule("sgg"));
  register_clip(m.def_submodule("clip"));

  m.def("build_info", [] {
    py::dict info;
    info["compiler"] = RML_FAST_COMPILER;
    info["cxx_flags"] = RML_FAST_CXX_FLAGS;
    info["build_type"] = RML_FAST_BUILD_TYPE;
    info["openmp"] = rml::openmp_enabled();
    info["openmp_max_threads"] = rml::max_threads();
    return info;
  }, "Compiler, flags and OpenMP status of this build.");
}
