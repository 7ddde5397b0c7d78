/* AVX-512 (F/BW/VL/DQ + FMA) row kernels, 16 lanes, masked tails. */
#include "isa.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#include <immintrin.h>
#include <math.h>

#include "common/vmath-avx512.h"
#include "ops.h"

#define MK_AVX512 MK_TARGET_AVX512

static inline __mmask16 tail16(size_t k) { return (__mmask16)((1u << k) - 1u); }

MK_AVX512 void mk_layernorm_row_f32_avx512(size_t n, const float *x, const float *res,
                                           const float *gamma, const float *beta, float eps,
                                           float *y)
{
    const __m512 shift = _mm512_set1_ps(res ? x[0] + res[0] : x[0]);
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    __m512 q0 = _mm512_setzero_ps(), q1 = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 a = _mm512_loadu_ps(x + i), b = _mm512_loadu_ps(x + i + 16);
        if (res) {
            a = _mm512_add_ps(a, _mm512_loadu_ps(res + i));
            b = _mm512_add_ps(b, _mm512_loadu_ps(res + i + 16));
        }
        _mm512_storeu_ps(y + i, a);
        _mm512_storeu_ps(y + i + 16, b);
        a = _mm512_sub_ps(a, shift);
        b = _mm512_sub_ps(b, shift);
        s0 = _mm512_add_ps(s0, a);
        s1 = _mm512_add_ps(s1, b);
        q0 = _mm512_fmadd_ps(a, a, q0);
        q1 = _mm512_fmadd_ps(b, b, q1);
    }
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : tail16(n - i);
        __m512 a = _mm512_maskz_loadu_ps(m, x + i);
        if (res) a = _mm512_add_ps(a, _mm512_maskz_loadu_ps(m, res + i));
        _mm512_mask_storeu_ps(y + i, m, a);
        a = _mm512_maskz_sub_ps(m, a, shift);
        s0 = _mm512_add_ps(s0, a);
        q0 = _mm512_fmadd_ps(a, a, q0);
    }
    float sum = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
    float sq = _mm512_reduce_add_ps(_mm512_add_ps(q0, q1));
    float m = sum / (float)n;
    float var = sq / (float)n - m * m;
    if (var < 0.0f) var = 0.0f;
    const __m512 mean = _mm512_add_ps(shift, _mm512_set1_ps(m));
    const __m512 rstd = _mm512_set1_ps((float)(1.0 / sqrt((double)var + (double)eps)));
    for (i = 0; i < n; i += 16) {
        __mmask16 mk = n - i >= 16 ? (__mmask16)0xFFFF : tail16(n - i);
        __m512 v = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, y + i), mean), rstd);
        if (gamma) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(mk, gamma + i));
        if (beta) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mk, beta + i));
        _mm512_mask_storeu_ps(y + i, mk, v);
    }
}

MK_AVX512 void mk_softmax_row_f32_avx512(size_t n, float *x, const float *mask, float scale)
{
    const __m512 vs = _mm512_set1_ps(scale);
    __m512 mx = _mm512_set1_ps(-INFINITY);
    size_t i;
    for (i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : tail16(n - i);
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), vs);
        if (mask) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, mask + i));
        _mm512_mask_storeu_ps(x + i, m, v);
        mx = _mm512_mask_max_ps(mx, m, mx, v);
    }
    const __m512 vmax = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
    __m512 sum = _mm512_setzero_ps();
    for (i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : tail16(n - i);
        __m512 e = mk_exp_f32x16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vmax));
        _mm512_mask_storeu_ps(x + i, m, e);
        sum = _mm512_mask_add_ps(sum, m, sum, e);
    }
    const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
    for (i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : tail16(n - i);
        _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv));
    }
}

#endif /* MK_X86 */
