/* AVX-512 (F/BW/VL/DQ + FMA) row kernels, 16 lanes, masked tails. */
#include "isa.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#include <immintrin.h>
#include <math.h>

#include "ops.h"

#define MK_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))

/* exp(x), Cephes-style: n = round(x log2 e), r = x - n ln 2 (two-part), degree-6 polynomial,
 * 2^n by scalef. Relative error about 2 ulp; x below -103.5 gives exactly 0, NaN stays NaN. */
MK_AVX512 static inline __m512 exp16(__m512 x)
{
    __m512 xc = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)),
                              _mm512_set1_ps(88.72f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    __m512 y = _mm512_scalef_ps(p, n);
    y = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(-103.5f), _CMP_NLT_UQ), y);
    return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

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
        __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vmax));
        _mm512_mask_storeu_ps(x + i, m, e);
        sum = _mm512_mask_add_ps(sum, m, sum, e);
    }
    const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
    for (i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : tail16(n - i);
        _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv));
    }
}

/* gelu(x) = x/2 * erfc(-x/sqrt 2), erfc by Numerical Recipes' Chebyshev fit (fractional error
 * < 1.2e-7); the tanh form as x/2 * (1 + tanh(u)) = x / (1 + exp(-2u)) (no cancellation). */
MK_AVX512 static inline __m512 gelu16(__m512 x, int approx)
{
    const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
    if (approx) {
        __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
        __m512 u = _mm512_mul_ps(_mm512_set1_ps(0.7978845608028654f),
                                 _mm512_fmadd_ps(_mm512_set1_ps(0.044715f), x3, x));
        __m512 e = exp16(_mm512_mul_ps(u, _mm512_set1_ps(-2.0f)));
        return _mm512_div_ps(x, _mm512_add_ps(e, one));
    }
    __m512 u = _mm512_mul_ps(x, _mm512_set1_ps(-0.70710678118654752f));
    __m512 z = _mm512_abs_ps(u);
    __m512 t = _mm512_div_ps(one, _mm512_fmadd_ps(half, z, one));
    __m512 p = _mm512_set1_ps(0.17087277f);
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.82215223f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.48851587f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.13520398f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.27886807f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.18628806f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.09678418f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.37409196f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.00002368f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.26551223f));
    __m512 r = _mm512_mul_ps(t, exp16(_mm512_fnmadd_ps(z, z, p)));
    __mmask16 neg = _mm512_cmp_ps_mask(u, _mm512_setzero_ps(), _CMP_LT_OQ);
    r = _mm512_mask_sub_ps(r, neg, _mm512_set1_ps(2.0f), r);
    return _mm512_mul_ps(_mm512_mul_ps(half, x), r);
}

MK_AVX512 void mk_gelu_f32_avx512(size_t n, const float *x, float *y, int approx)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, gelu16(_mm512_loadu_ps(x + i), approx));
    if (i < n) {
        __mmask16 m = tail16(n - i);
        _mm512_mask_storeu_ps(y + i, m, gelu16(_mm512_maskz_loadu_ps(m, x + i), approx));
    }
}

#endif /* MK_X86 */
