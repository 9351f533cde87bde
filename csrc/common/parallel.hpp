// OpenMP helpers that compile to serial code when OpenMP is absent.
#pragma once

#ifdef _OPENMP
#include <omp.h>
#endif

namespace rml {

inline int max_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

inline bool openmp_enabled() {
#ifdef _OPENMP
  return true;
#else
  return false;
#endif
}

}  // namespace rml
