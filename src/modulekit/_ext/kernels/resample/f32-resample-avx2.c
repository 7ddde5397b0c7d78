/* AVX2 + FMA row kernels of the 2-D resampling (see resample.h): 8 lanes, vpgatherdd for the
 * column taps, masked tails. */
#include "isa.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#include <immintrin.h>

#include "resample.h"

#define MK_AVX2 __attribute__((target("avx2,fma")))

static const int32_t tail_bits[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

/* lanes [0, k) set, 0 <= k <= 8 */
MK_AVX2 static inline __m256i tail8(size_t k)
{
    return _mm256_loadu_si256((const __m256i *)(tail_bits + 8 - k));
}

MK_AVX2 void mk_f32_lerp_row__avx2(size_t n, const float *row, const int32_t *x0,
                                   const int32_t *x1, const float *w0, const float *w1,
                                   float *out)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 a = _mm256_i32gather_ps(row, _mm256_loadu_si256((const __m256i *)(x0 + i)), 4);
        __m256 b = _mm256_i32gather_ps(row, _mm256_loadu_si256((const __m256i *)(x1 + i)), 4);
        __m256 t = _mm256_mul_ps(a, _mm256_loadu_ps(w0 + i));
        _mm256_storeu_ps(out + i, _mm256_fmadd_ps(b, _mm256_loadu_ps(w1 + i), t));
    }
    if (i < n) {
        __m256i m = tail8(n - i);
        __m256 mf = _mm256_castsi256_ps(m);
        __m256i i0 = _mm256_maskload_epi32(x0 + i, m), i1 = _mm256_maskload_epi32(x1 + i, m);
        __m256 a = _mm256_mask_i32gather_ps(_mm256_setzero_ps(), row, i0, mf, 4);
        __m256 b = _mm256_mask_i32gather_ps(_mm256_setzero_ps(), row, i1, mf, 4);
        __m256 t = _mm256_mul_ps(a, _mm256_maskload_ps(w0 + i, m));
        _mm256_maskstore_ps(out + i, m, _mm256_fmadd_ps(b, _mm256_maskload_ps(w1 + i, m), t));
    }
}

MK_AVX2 void mk_f32_blend_row__avx2(size_t n, const float *p, const float *q, float a, float b,
                                    float *out)
{
    const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 t0 = _mm256_mul_ps(_mm256_loadu_ps(p + i), va);
        __m256 t1 = _mm256_mul_ps(_mm256_loadu_ps(p + i + 8), va);
        _mm256_storeu_ps(out + i, _mm256_fmadd_ps(_mm256_loadu_ps(q + i), vb, t0));
        _mm256_storeu_ps(out + i + 8, _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), vb, t1));
    }
    for (; i + 8 <= n; i += 8) {
        __m256 t = _mm256_mul_ps(_mm256_loadu_ps(p + i), va);
        _mm256_storeu_ps(out + i, _mm256_fmadd_ps(_mm256_loadu_ps(q + i), vb, t));
    }
    if (i < n) {
        __m256i m = tail8(n - i);
        __m256 t = _mm256_mul_ps(_mm256_maskload_ps(p + i, m), va);
        _mm256_maskstore_ps(out + i, m, _mm256_fmadd_ps(_mm256_maskload_ps(q + i, m), vb, t));
    }
}

MK_AVX2 void mk_f32_gather_row__avx2(size_t n, const float *row, const int32_t *x, float *out)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_i32gather_ps(
                                      row, _mm256_loadu_si256((const __m256i *)(x + i)), 4));
    if (i < n) {
        __m256i m = tail8(n - i);
        __m256i ix = _mm256_maskload_epi32(x + i, m);
        __m256 v = _mm256_mask_i32gather_ps(_mm256_setzero_ps(), row, ix,
                                            _mm256_castsi256_ps(m), 4);
        _mm256_maskstore_ps(out + i, m, v);
    }
}

MK_AVX2 void mk_f32_wsum_rows__avx2(size_t n, size_t ntaps, const float *base, size_t stride,
                                    const int32_t *idx, const float *w, size_t ws, float *out)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 acc = _mm256_mul_ps(_mm256_loadu_ps(base + (size_t)idx[0] * stride + i),
                                   _mm256_set1_ps(w[0]));
        for (size_t t = 1; t < ntaps; t++)
            acc = _mm256_fmadd_ps(_mm256_loadu_ps(base + (size_t)idx[t * ws] * stride + i),
                                  _mm256_set1_ps(w[t * ws]), acc);
        _mm256_storeu_ps(out + i, acc);
    }
    if (i < n) {
        __m256i m = tail8(n - i);
        __m256 acc = _mm256_mul_ps(_mm256_maskload_ps(base + (size_t)idx[0] * stride + i, m),
                                   _mm256_set1_ps(w[0]));
        for (size_t t = 1; t < ntaps; t++)
            acc = _mm256_fmadd_ps(_mm256_maskload_ps(base + (size_t)idx[t * ws] * stride + i, m),
                                  _mm256_set1_ps(w[t * ws]), acc);
        _mm256_maskstore_ps(out + i, m, acc);
    }
}

MK_AVX2 void mk_f32_wgather_row__avx2(size_t n, size_t ntaps, const float *row,
                                      const int32_t *idx, const float *w, size_t ws, float *out)
{
    size_t o = 0;
    for (; o + 8 <= n; o += 8) {
        __m256 acc = _mm256_mul_ps(
            _mm256_i32gather_ps(row, _mm256_loadu_si256((const __m256i *)(idx + o)), 4),
            _mm256_loadu_ps(w + o));
        for (size_t t = 1; t < ntaps; t++) {
            __m256i ix = _mm256_loadu_si256((const __m256i *)(idx + t * ws + o));
            acc = _mm256_fmadd_ps(_mm256_i32gather_ps(row, ix, 4), _mm256_loadu_ps(w + t * ws + o),
                                  acc);
        }
        _mm256_storeu_ps(out + o, acc);
    }
    if (o < n) {
        __m256i m = tail8(n - o);
        __m256 mf = _mm256_castsi256_ps(m);
        __m256 acc = _mm256_setzero_ps();
        for (size_t t = 0; t < ntaps; t++) {
            __m256i ix = _mm256_maskload_epi32(idx + t * ws + o, m);
            __m256 v = _mm256_mask_i32gather_ps(_mm256_setzero_ps(), row, ix, mf, 4);
            __m256 wt = _mm256_maskload_ps(w + t * ws + o, m);
            acc = t ? _mm256_fmadd_ps(v, wt, acc) : _mm256_mul_ps(v, wt);
        }
        _mm256_maskstore_ps(out + o, m, acc);
    }
}

#endif /* MK_X86 */
