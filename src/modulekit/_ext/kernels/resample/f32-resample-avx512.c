/* AVX-512 row kernels of the 2-D resampling (see resample.h): 16 lanes, vgatherdps for the
 * column taps, masked tails. */
#include "isa.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#include <immintrin.h>

#include "resample.h"

#define MK_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))

MK_AVX512 static inline __mmask16 tail16(size_t k) { return (__mmask16)((1u << k) - 1u); }

MK_AVX512 void mk_f32_lerp_row__avx512(size_t n, const float *row, const int32_t *x0,
                                       const int32_t *x1, const float *w0, const float *w1,
                                       float *out)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 a = _mm512_i32gather_ps(_mm512_loadu_si512(x0 + i), row, 4);
        __m512 b = _mm512_i32gather_ps(_mm512_loadu_si512(x1 + i), row, 4);
        __m512 t = _mm512_mul_ps(a, _mm512_loadu_ps(w0 + i));
        _mm512_storeu_ps(out + i, _mm512_fmadd_ps(b, _mm512_loadu_ps(w1 + i), t));
    }
    if (i < n) {
        __mmask16 m = tail16(n - i);
        __m512i i0 = _mm512_maskz_loadu_epi32(m, x0 + i), i1 = _mm512_maskz_loadu_epi32(m, x1 + i);
        __m512 a = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, i0, row, 4);
        __m512 b = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, i1, row, 4);
        __m512 t = _mm512_mul_ps(a, _mm512_maskz_loadu_ps(m, w0 + i));
        _mm512_mask_storeu_ps(out + i, m, _mm512_fmadd_ps(b, _mm512_maskz_loadu_ps(m, w1 + i), t));
    }
}

MK_AVX512 void mk_f32_blend_row__avx512(size_t n, const float *p, const float *q, float a,
                                        float b, float *out)
{
    const __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 t0 = _mm512_mul_ps(_mm512_loadu_ps(p + i), va);
        __m512 t1 = _mm512_mul_ps(_mm512_loadu_ps(p + i + 16), va);
        _mm512_storeu_ps(out + i, _mm512_fmadd_ps(_mm512_loadu_ps(q + i), vb, t0));
        _mm512_storeu_ps(out + i + 16, _mm512_fmadd_ps(_mm512_loadu_ps(q + i + 16), vb, t1));
    }
    for (; i + 16 <= n; i += 16) {
        __m512 t = _mm512_mul_ps(_mm512_loadu_ps(p + i), va);
        _mm512_storeu_ps(out + i, _mm512_fmadd_ps(_mm512_loadu_ps(q + i), vb, t));
    }
    if (i < n) {
        __mmask16 m = tail16(n - i);
        __m512 t = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, p + i), va);
        _mm512_mask_storeu_ps(out + i, m, _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + i), vb, t));
    }
}

MK_AVX512 void mk_f32_gather_row__avx512(size_t n, const float *row, const int32_t *x,
                                         float *out)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(out + i, _mm512_i32gather_ps(_mm512_loadu_si512(x + i), row, 4));
    if (i < n) {
        __mmask16 m = tail16(n - i);
        __m512i ix = _mm512_maskz_loadu_epi32(m, x + i);
        _mm512_mask_storeu_ps(out + i, m,
                              _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, ix, row, 4));
    }
}

MK_AVX512 void mk_f32_wsum_rows__avx512(size_t n, size_t ntaps, const float *base,
                                        size_t stride, const int32_t *idx, const float *w,
                                        size_t ws, float *out)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 acc = _mm512_mul_ps(_mm512_loadu_ps(base + (size_t)idx[0] * stride + i),
                                   _mm512_set1_ps(w[0]));
        for (size_t t = 1; t < ntaps; t++)
            acc = _mm512_fmadd_ps(_mm512_loadu_ps(base + (size_t)idx[t * ws] * stride + i),
                                  _mm512_set1_ps(w[t * ws]), acc);
        _mm512_storeu_ps(out + i, acc);
    }
    if (i < n) {
        __mmask16 m = tail16(n - i);
        __m512 acc = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, base + (size_t)idx[0] * stride + i),
                                   _mm512_set1_ps(w[0]));
        for (size_t t = 1; t < ntaps; t++)
            acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, base + (size_t)idx[t * ws] * stride + i),
                                  _mm512_set1_ps(w[t * ws]), acc);
        _mm512_mask_storeu_ps(out + i, m, acc);
    }
}

MK_AVX512 void mk_f32_wgather_row__avx512(size_t n, size_t ntaps, const float *row,
                                          const int32_t *idx, const float *w, size_t ws,
                                          float *out)
{
    size_t o = 0;
    for (; o + 16 <= n; o += 16) {
        __m512 acc = _mm512_mul_ps(_mm512_i32gather_ps(_mm512_loadu_si512(idx + o), row, 4),
                                   _mm512_loadu_ps(w + o));
        for (size_t t = 1; t < ntaps; t++)
            acc = _mm512_fmadd_ps(
                _mm512_i32gather_ps(_mm512_loadu_si512(idx + t * ws + o), row, 4),
                _mm512_loadu_ps(w + t * ws + o), acc);
        _mm512_storeu_ps(out + o, acc);
    }
    if (o < n) {
        __mmask16 m = tail16(n - o);
        __m512 acc = _mm512_setzero_ps();
        for (size_t t = 0; t < ntaps; t++) {
            __m512i ix = _mm512_maskz_loadu_epi32(m, idx + t * ws + o);
            __m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, ix, row, 4);
            __m512 wt = _mm512_maskz_loadu_ps(m, w + t * ws + o);
            acc = t ? _mm512_fmadd_ps(v, wt, acc) : _mm512_mul_ps(v, wt);
        }
        _mm512_mask_storeu_ps(out + o, m, acc);
    }
}

#endif /* MK_X86 */
