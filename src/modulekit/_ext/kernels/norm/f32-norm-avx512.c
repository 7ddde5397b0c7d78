/* AVX-512 span kernels of the group normalisation: 16 lanes, 4 accumulators, masked tails. */
#include "isa.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#include <immintrin.h>
#include <stdint.h>

#include "norm.h"

#define MK_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))

static inline __mmask16 tail16(size_t k) { return (__mmask16)((1u << k) - 1u); }

MK_AVX512 static inline double hsum16(__m512 v)
{
    __m512d d = _mm512_add_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(v)),
                              _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1)));
    return _mm512_reduce_add_pd(d);
}

MK_AVX512 void mk_moments_f32_avx512(size_t n, const float *x, float shift, double *sum,
                                     double *sumsq)
{
    const __m512 sh = _mm512_set1_ps(shift);
    double s = 0.0, q = 0.0;
    size_t i = 0;
    while (i < n) {
        size_t end = n - i > MK_NORM_BLOCK ? i + MK_NORM_BLOCK : n;
        __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
        __m512 s2 = _mm512_setzero_ps(), s3 = _mm512_setzero_ps();
        __m512 q0 = _mm512_setzero_ps(), q1 = _mm512_setzero_ps();
        __m512 q2 = _mm512_setzero_ps(), q3 = _mm512_setzero_ps();
        for (; i + 64 <= end; i += 64) {
            __m512 a = _mm512_sub_ps(_mm512_loadu_ps(x + i), sh);
            __m512 b = _mm512_sub_ps(_mm512_loadu_ps(x + i + 16), sh);
            __m512 c = _mm512_sub_ps(_mm512_loadu_ps(x + i + 32), sh);
            __m512 d = _mm512_sub_ps(_mm512_loadu_ps(x + i + 48), sh);
            s0 = _mm512_add_ps(s0, a);
            s1 = _mm512_add_ps(s1, b);
            s2 = _mm512_add_ps(s2, c);
            s3 = _mm512_add_ps(s3, d);
            q0 = _mm512_fmadd_ps(a, a, q0);
            q1 = _mm512_fmadd_ps(b, b, q1);
            q2 = _mm512_fmadd_ps(c, c, q2);
            q3 = _mm512_fmadd_ps(d, d, q3);
        }
        for (; i < end; i += 16) {
            __mmask16 m = end - i >= 16 ? (__mmask16)0xFFFF : tail16(end - i);
            __m512 a = _mm512_maskz_sub_ps(m, _mm512_maskz_loadu_ps(m, x + i), sh);
            s0 = _mm512_add_ps(s0, a);
            q0 = _mm512_fmadd_ps(a, a, q0);
        }
        s += hsum16(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
        q += hsum16(_mm512_add_ps(_mm512_add_ps(q0, q1), _mm512_add_ps(q2, q3)));
        if (i > end) i = end;
    }
    *sum += s;
    *sumsq += q;
}

MK_AVX512 void mk_affine_f32_avx512(size_t n, const float *x, float mean, float scale,
                                    float bias, float *y)
{
    const __m512 m = _mm512_set1_ps(mean), a = _mm512_set1_ps(scale);
    const __m512 b = _mm512_set1_ps(bias);
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m512 v0 = _mm512_fmadd_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), m), a, b);
        __m512 v1 = _mm512_fmadd_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16), m), a, b);
        __m512 v2 = _mm512_fmadd_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i + 32), m), a, b);
        __m512 v3 = _mm512_fmadd_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i + 48), m), a, b);
        _mm512_storeu_ps(y + i, v0);
        _mm512_storeu_ps(y + i + 16, v1);
        _mm512_storeu_ps(y + i + 32, v2);
        _mm512_storeu_ps(y + i + 48, v3);
    }
    for (; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : tail16(n - i);
        __m512 v = _mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), m);
        _mm512_mask_storeu_ps(y + i, k, _mm512_fmadd_ps(v, a, b));
    }
}

/* The affine pass with non-temporal stores: the output goes to memory without first being read
 * into the cache (a normal store reads each line it writes), for outputs far larger than the
 * caches. Masked stores up to a 64-byte boundary, streaming stores, a masked tail; the caller
 * fences (mk_norm_sfence) before the output is read. */
MK_AVX512 void mk_affine_f32_avx512_nt(size_t n, const float *x, float mean, float scale,
                                       float bias, float *y)
{
    const __m512 m = _mm512_set1_ps(mean), a = _mm512_set1_ps(scale);
    const __m512 b = _mm512_set1_ps(bias);
    size_t i = 0;
    /* y is float-aligned (the entry point guarantees it), so fewer than 16 floats lead to
     * the next 64-byte boundary */
    size_t head = ((64 - ((uintptr_t)y & 63)) & 63) / sizeof(float);
    if (head > n) head = n;
    if (head) {
        __mmask16 k = tail16(head);
        __m512 v = _mm512_sub_ps(_mm512_maskz_loadu_ps(k, x), m);
        _mm512_mask_storeu_ps(y, k, _mm512_fmadd_ps(v, a, b));
        i = head;
    }
    for (; i + 64 <= n; i += 64) {
        __m512 v0 = _mm512_fmadd_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), m), a, b);
        __m512 v1 = _mm512_fmadd_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16), m), a, b);
        __m512 v2 = _mm512_fmadd_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i + 32), m), a, b);
        __m512 v3 = _mm512_fmadd_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i + 48), m), a, b);
        _mm512_stream_ps(y + i, v0);
        _mm512_stream_ps(y + i + 16, v1);
        _mm512_stream_ps(y + i + 32, v2);
        _mm512_stream_ps(y + i + 48, v3);
    }
    for (; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : tail16(n - i);
        __m512 v = _mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), m);
        _mm512_mask_storeu_ps(y + i, k, _mm512_fmadd_ps(v, a, b));
    }
}

MK_AVX512 void mk_norm_sfence_avx512(void) { _mm_sfence(); }

#endif /* MK_X86 */
