// WEFT_VECTOR_CLONES: compiles a function (loops over arrays) for AVX-512, AVX2 with FMA
// (x86-64-v3: GCC's plain "avx2" target has no FMA, so its multiply-adds would be two
// instructions) and the baseline x86-64 of Debian's packages, the version picked once at load
// time (GCC's target_clones, an ifunc). Elsewhere, with clang, and under the sanitizers
// (whose runtimes do not get along with ifunc resolvers) it is empty and the baseline version
// is built.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
#define WEFT_VECTOR_CLONES __attribute__((target_clones("avx512f", "arch=x86-64-v3", "default")))
#else
#define WEFT_VECTOR_CLONES
#endif
