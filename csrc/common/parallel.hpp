// OpenMP helpers that compile to serial code when OpenMP is absent.
#pragma once

#include <atomic>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace rml {

// Process-wide thread limit set by rml_fast.set_num_threads (0: none). OpenMP's own setting
// (omp_set_num_threads, which threadpoolctl uses) is per calling thread; this one holds for
// every thread that calls a kernel. One instance for the whole extension (inline function).
inline std::atomic<int>& thread_limit() {
  static std::atomic<int> limit{0};
  return limit;
}

// Threads a parallel region of a kernel uses: the process-wide limit if set, else the calling
// thread's OpenMP default (OMP_NUM_THREADS, omp_set_num_threads / threadpoolctl).
inline int max_threads() {
  const int limit = thread_limit().load(std::memory_order_relaxed);
  if (limit > 0) return limit;
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

// An explicit per-call thread count, capped by the process-wide limit when one is set.
inline int cap_threads(int requested) {
  const int limit = thread_limit().load(std::memory_order_relaxed);
  return limit > 0 && requested > limit ? limit : requested;
}

inline bool openmp_enabled() {
#ifdef _OPENMP
  return true;
#else
  return false;
#endif
}

}  // namespace rml
