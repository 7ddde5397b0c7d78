/* AVX2 + FMA + F16C row kernels, 8 lanes, masked tails (maskload/maskstore). */
#include "isa.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#include <immintrin.h>
#include <math.h>

#include "common/vmath-avx2.h"
#include "ops.h"

#define MK_AVX2 MK_TARGET_AVX2

static const int32_t tail_bits[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

/* lanes [0, k) set, 0 <= k <= 8 */
MK_AVX2 static inline __m256i tail8(size_t k)
{
    return _mm256_loadu_si256((const __m256i *)(tail_bits + 8 - k));
}

MK_AVX2 static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

MK_AVX2 static inline float hmax8(__m256 v)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

MK_AVX2 void mk_layernorm_row_f32_avx2(size_t n, const float *x, const float *res,
                                       const float *gamma, const float *beta, float eps, float *y)
{
    const __m256 shift = _mm256_set1_ps(res ? x[0] + res[0] : x[0]);
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    __m256 q0 = _mm256_setzero_ps(), q1 = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
        if (res) {
            a = _mm256_add_ps(a, _mm256_loadu_ps(res + i));
            b = _mm256_add_ps(b, _mm256_loadu_ps(res + i + 8));
        }
        _mm256_storeu_ps(y + i, a);
        _mm256_storeu_ps(y + i + 8, b);
        a = _mm256_sub_ps(a, shift);
        b = _mm256_sub_ps(b, shift);
        s0 = _mm256_add_ps(s0, a);
        s1 = _mm256_add_ps(s1, b);
        q0 = _mm256_fmadd_ps(a, a, q0);
        q1 = _mm256_fmadd_ps(b, b, q1);
    }
    for (; i < n; i += 8) {
        __m256i m = tail8(n - i >= 8 ? 8 : n - i);
        __m256 a = _mm256_maskload_ps(x + i, m);
        if (res) a = _mm256_add_ps(a, _mm256_maskload_ps(res + i, m));
        _mm256_maskstore_ps(y + i, m, a);
        a = _mm256_and_ps(_mm256_sub_ps(a, shift), _mm256_castsi256_ps(m));
        s0 = _mm256_add_ps(s0, a);
        q0 = _mm256_fmadd_ps(a, a, q0);
    }
    float sum = hsum8(_mm256_add_ps(s0, s1)), sq = hsum8(_mm256_add_ps(q0, q1));
    float m = sum / (float)n;
    float var = sq / (float)n - m * m;
    if (var < 0.0f) var = 0.0f;
    const __m256 mean = _mm256_add_ps(shift, _mm256_set1_ps(m));
    const __m256 rstd = _mm256_set1_ps((float)(1.0 / sqrt((double)var + (double)eps)));
    for (i = 0; i < n; i += 8) {
        __m256i mk = tail8(n - i >= 8 ? 8 : n - i);
        __m256 v = _mm256_mul_ps(_mm256_sub_ps(_mm256_maskload_ps(y + i, mk), mean), rstd);
        if (gamma) v = _mm256_mul_ps(v, _mm256_maskload_ps(gamma + i, mk));
        if (beta) v = _mm256_add_ps(v, _mm256_maskload_ps(beta + i, mk));
        _mm256_maskstore_ps(y + i, mk, v);
    }
}

MK_AVX2 void mk_softmax_row_f32_avx2(size_t n, float *x, const float *mask, float scale)
{
    const __m256 vs = _mm256_set1_ps(scale), ninf = _mm256_set1_ps(-INFINITY);
    __m256 mx = ninf;
    size_t i;
    for (i = 0; i < n; i += 8) {
        __m256i m = tail8(n - i >= 8 ? 8 : n - i);
        __m256 v = _mm256_mul_ps(_mm256_maskload_ps(x + i, m), vs);
        if (mask) v = _mm256_add_ps(v, _mm256_maskload_ps(mask + i, m));
        _mm256_maskstore_ps(x + i, m, v);
        mx = _mm256_max_ps(mx, _mm256_blendv_ps(ninf, v, _mm256_castsi256_ps(m)));
    }
    const __m256 vmax = _mm256_set1_ps(hmax8(mx));
    __m256 sum = _mm256_setzero_ps();
    for (i = 0; i < n; i += 8) {
        __m256i m = tail8(n - i >= 8 ? 8 : n - i);
        __m256 e = mk_exp_f32x8(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), vmax));
        e = _mm256_and_ps(e, _mm256_castsi256_ps(m));
        _mm256_maskstore_ps(x + i, m, e);
        sum = _mm256_add_ps(sum, e);
    }
    const __m256 inv = _mm256_set1_ps(1.0f / hsum8(sum));
    for (i = 0; i < n; i += 8) {
        __m256i m = tail8(n - i >= 8 ? 8 : n - i);
        _mm256_maskstore_ps(x + i, m, _mm256_mul_ps(_mm256_maskload_ps(x + i, m), inv));
    }
}

MK_AVX2 void mk_f16_widen_avx2(size_t n, const uint16_t *src, float *dst, int accumulate)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i)));
        if (accumulate) v = _mm256_add_ps(v, _mm256_loadu_ps(dst + i));
        _mm256_storeu_ps(dst + i, v);
    }
    if (i < n) mk_f16_widen_scalar(n - i, src + i, dst + i, accumulate);
}

#endif /* MK_X86 */
