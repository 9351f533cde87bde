// Function multi-versioning: a hot loop marked RML_SIMD_CLONES is compiled for the portable
// baseline and for AVX2 / AVX-512, and the loader picks the best one for the CPU it runs on,
// so the wheel stays portable without giving up wide vectors.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define RML_SIMD_CLONES __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
#else
#define RML_SIMD_CLONES
#endif
