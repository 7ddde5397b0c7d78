/* AVX2 + FMA span kernels of the group normalisation: 8 lanes, 4 accumulators, masked tails. */
#include "isa.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#include <immintrin.h>

#include "norm.h"

#define MK_AVX2 __attribute__((target("avx2,fma")))

MK_AVX2 static inline __m256i tail_mask8(size_t k)
{
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)k), idx);
}

MK_AVX2 static inline double hsum8(__m256 v)
{
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    __m256d d = _mm256_add_pd(_mm256_cvtps_pd(lo), _mm256_cvtps_pd(hi));
    __m128d e = _mm_add_pd(_mm256_castpd256_pd128(d), _mm256_extractf128_pd(d, 1));
    return _mm_cvtsd_f64(_mm_add_sd(e, _mm_unpackhi_pd(e, e)));
}

MK_AVX2 void mk_moments_f32_avx2(size_t n, const float *x, float shift, double *sum,
                                 double *sumsq)
{
    const __m256 sh = _mm256_set1_ps(shift);
    double s = 0.0, q = 0.0;
    size_t i = 0;
    while (i < n) {
        size_t end = n - i > MK_NORM_BLOCK ? i + MK_NORM_BLOCK : n;
        __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
        __m256 s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
        __m256 q0 = _mm256_setzero_ps(), q1 = _mm256_setzero_ps();
        __m256 q2 = _mm256_setzero_ps(), q3 = _mm256_setzero_ps();
        for (; i + 32 <= end; i += 32) {
            __m256 a = _mm256_sub_ps(_mm256_loadu_ps(x + i), sh);
            __m256 b = _mm256_sub_ps(_mm256_loadu_ps(x + i + 8), sh);
            __m256 c = _mm256_sub_ps(_mm256_loadu_ps(x + i + 16), sh);
            __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + i + 24), sh);
            s0 = _mm256_add_ps(s0, a);
            s1 = _mm256_add_ps(s1, b);
            s2 = _mm256_add_ps(s2, c);
            s3 = _mm256_add_ps(s3, d);
            q0 = _mm256_fmadd_ps(a, a, q0);
            q1 = _mm256_fmadd_ps(b, b, q1);
            q2 = _mm256_fmadd_ps(c, c, q2);
            q3 = _mm256_fmadd_ps(d, d, q3);
        }
        for (; i < end; i += 8) {
            __m256i m = tail_mask8(end - i);
            __m256 a = _mm256_and_ps(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), sh),
                                     _mm256_castsi256_ps(m));
            s0 = _mm256_add_ps(s0, a);
            q0 = _mm256_fmadd_ps(a, a, q0);
        }
        s += hsum8(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
        q += hsum8(_mm256_add_ps(_mm256_add_ps(q0, q1), _mm256_add_ps(q2, q3)));
        if (i > end) i = end;
    }
    *sum += s;
    *sumsq += q;
}

MK_AVX2 void mk_affine_f32_avx2(size_t n, const float *x, float mean, float scale,
                                float bias, float *y)
{
    const __m256 m = _mm256_set1_ps(mean), a = _mm256_set1_ps(scale);
    const __m256 b = _mm256_set1_ps(bias);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256 v0 = _mm256_fmadd_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), m), a, b);
        __m256 v1 = _mm256_fmadd_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), m), a, b);
        __m256 v2 = _mm256_fmadd_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i + 16), m), a, b);
        __m256 v3 = _mm256_fmadd_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i + 24), m), a, b);
        _mm256_storeu_ps(y + i, v0);
        _mm256_storeu_ps(y + i + 8, v1);
        _mm256_storeu_ps(y + i + 16, v2);
        _mm256_storeu_ps(y + i + 24, v3);
    }
    for (; i < n; i += 8) {
        __m256i k = tail_mask8(n - i);
        __m256 v = _mm256_sub_ps(_mm256_maskload_ps(x + i, k), m);
        _mm256_maskstore_ps(y + i, k, _mm256_fmadd_ps(v, a, b));
    }
}

#endif /* MK_X86 */
