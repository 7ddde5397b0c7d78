/* common/vmath.inc.h on 8 float32 lanes (AVX2 + FMA): mk_exp_f32x8, ..., mk_act_f32x8(v, act,
 * lo, hi). Include in x86 kernel files only (MK_X86); the callers carry MK_TARGET_AVX2. The
 * vocabulary itself is common/vmath-ops-avx2.h (a kernel template's instantiation includes
 * that one). */
#ifndef MK_COMMON_VMATH_AVX2_H
#define MK_COMMON_VMATH_AVX2_H

#include "isa.h"
#if MK_X86
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#include "common/act.h"

#define MK_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))

/* p * 2^n in two exact power-of-two steps (a subnormal result rounded once, by the second) */
MK_TARGET_AVX2 static inline __m256 mk_vm8_scale2(__m256 p, __m256 n) {
    const __m256i k = _mm256_cvtps_epi32(n);
    const __m256i k1 = _mm256_srai_epi32(k, 1), k2 = _mm256_sub_epi32(k, k1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, bias), 23));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

/* the same for doubles: n in [-2044, 2046] (+inf past 1024) */
MK_TARGET_AVX2 static inline __m256d mk_vd4_scale2(__m256d p, __m256d n) {
    const __m128i k = _mm256_cvtpd_epi32(n);
    const __m128i k1 = _mm_srai_epi32(k, 1), k2 = _mm_sub_epi32(k, k1);
    const __m256i bias = _mm256_set1_epi64x(1023);
    const __m256d s1 = _mm256_castsi256_pd(
        _mm256_slli_epi64(_mm256_add_epi64(_mm256_cvtepi32_epi64(k1), bias), 52));
    const __m256d s2 = _mm256_castsi256_pd(
        _mm256_slli_epi64(_mm256_add_epi64(_mm256_cvtepi32_epi64(k2), bias), 52));
    return _mm256_mul_pd(_mm256_mul_pd(p, s1), s2);
}

/* lanes [0, k) of 8 set (k >= 8: all): one load from a window of the table (cheaper than a
 * broadcast and compare in the loops that mask every vector, softmax's) */
MK_TARGET_AVX2 static inline __m256i mk_vm8_tail(size_t k) {
    static const int32_t bits[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    return _mm256_loadu_si256((const __m256i *)(bits + 8 - (k < 8 ? k : 8)));
}

/* the lanes' sum, halves folded: ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)) */
MK_TARGET_AVX2 static inline float mk_vm8_hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* the lanes' maximum, halves folded as mk_vm8_hsum */
MK_TARGET_AVX2 static inline float mk_vm8_hmax(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* the lanes' sum in double (each lane widened exactly), halves folded as mk_vm8_hsum */
MK_TARGET_AVX2 static inline double mk_vm8_hsum_f64(__m256 v) {
    const __m256d d = _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)),
                                    _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
    const __m128d e = _mm_add_pd(_mm256_castpd256_pd128(d), _mm256_extractf128_pd(d, 1));
    return _mm_cvtsd_f64(_mm_add_sd(e, _mm_unpackhi_pd(e, e)));
}

#include "common/vmath-ops-avx2.h"
#include "common/vmath.inc.h"
#include "common/vmath-undef.h"

#endif /* MK_X86 */
#endif /* MK_COMMON_VMATH_AVX2_H */
