// The one extension module rml_fast._C: a submodule per kernel family.
#include <pybind11/pybind11.h>

#include <string>

#include "common/parallel.hpp"

namespace py = pybind11;

void register_random(py::module_ m);
void register_sgg(py::module_ m);
void register_clip(py::module_ m);
void register_lasso(py::module_ m);
void register_gravitree(py::module_ m);
void register_nudft(py::module_ m);
void register_circuits(py::module_ m);

PYBIND11_MODULE(_C, m) {
  m.doc() = "rml_fast native kernels (C++17, pybind11)";
  register_random(m.def_submodule("random"));
  register_sgg(m.def_submodule("sgg"));
  register_clip(m.def_submodule("clip"));
  register_lasso(m.def_submodule("lasso"));
  register_gravitree(m.def_submodule("gravitree"));
  register_nudft(m.def_submodule("nudft"));
  register_circuits(m.def_submodule("circuits"));

  m.def("build_info", [] {
    py::dict info;
    info["compiler"] = RML_FAST_COMPILER;
    info["cxx_flags"] = RML_FAST_CXX_FLAGS;
    info["build_type"] = RML_FAST_BUILD_TYPE;
    info["openmp"] = rml::openmp_enabled();
    info["openmp_max_threads"] = rml::max_threads();
    return info;
  }, "Compiler, flags and OpenMP status of this build.");
  m.def("set_thread_limit", [](int n) {
    if (n < 0) throw py::value_error("n must be >= 0 (0 removes the limit), got " + std::to_string(n));
    rml::thread_limit().store(n, std::memory_order_relaxed);
  }, py::arg("n"), "Process-wide thread limit of the kernels' parallel regions (0: none).");
  m.def("thread_limit", [] { return rml::thread_limit().load(std::memory_order_relaxed); },
        "The process-wide limit (0: none).");
  m.def("max_threads", &rml::max_threads,
        "Threads a kernel's parallel region started from this thread uses.");
  m.def("parallel_width", [] {
    int width = 1;
#ifdef _OPENMP
#pragma omp parallel num_threads(rml::max_threads())
    {
#pragma omp single
      width = omp_get_num_threads();
    }
#endif
    return width;
  }, py::call_guard<py::gil_scoped_release>(),
     "Threads a parallel region opened the way the kernels open theirs actually gets.");
}
