/* Vector activations for the fused epilogues (AVX2 and AVX-512 flavours), included by the
 * ISA-specific kernel files only. exp is a Cephes-style range reduction with a degree-6
 * polynomial (about 2 ulp over the clamped range), enough for SiLU at float32 precision. */
#ifndef MK_SIMD_ACT_H
#define MK_SIMD_ACT_H

#include "conv.h"
#include "isa.h"
#if MK_X86 /* x86 SIMD only: nothing elsewhere (see isa.h) */
#include <immintrin.h>

#define MK_T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))
#define MK_T256 __attribute__((target("avx2,fma,f16c")))

MK_T512 static inline __m512 mk_exp512(__m512 x) {
    const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
    const __m512 c1 = _mm512_set1_ps(0.693359375f);
    const __m512 c2 = _mm512_set1_ps(-2.12194440e-4f);
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.3f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT);
    __m512 r = _mm512_fnmadd_ps(n, c1, x);
    r = _mm512_fnmadd_ps(n, c2, r);
    __m512 p = _mm512_set1_ps(1.9875691500E-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507E-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073E-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894E-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459E-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201E-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

MK_T512 static inline __m512 mk_act512(__m512 v, int act) {
    switch (act) {
    case MK_ACT_RELU: /* max(v, 0) keeping NaN: max_ps returns the second operand on NaN */
        return _mm512_max_ps(_mm512_setzero_ps(), v);
    case MK_ACT_RELU6:
        return _mm512_min_ps(_mm512_set1_ps(6.0f), _mm512_max_ps(_mm512_setzero_ps(), v));
    case MK_ACT_SILU: {
        __m512 e = mk_exp512(_mm512_sub_ps(_mm512_setzero_ps(), v));
        return _mm512_div_ps(v, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
    }
    case MK_ACT_HARDSWISH: {
        __m512 t = _mm512_add_ps(v, _mm512_set1_ps(3.0f));
        t = _mm512_min_ps(_mm512_set1_ps(6.0f), _mm512_max_ps(_mm512_setzero_ps(), t));
        return _mm512_div_ps(_mm512_mul_ps(v, t), _mm512_set1_ps(6.0f));
    }
    default:
        return v;
    }
}

MK_T256 static inline __m256 mk_exp256(__m256 x) {
    const __m256 log2e = _mm256_set1_ps(1.44269504088896341f);
    const __m256 c1 = _mm256_set1_ps(0.693359375f);
    const __m256 c2 = _mm256_set1_ps(-2.12194440e-4f);
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, c1, x);
    r = _mm256_fnmadd_ps(n, c2, r);
    __m256 p = _mm256_set1_ps(1.9875691500E-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894E-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459E-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201E-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

MK_T256 static inline __m256 mk_act256(__m256 v, int act) {
    switch (act) {
    case MK_ACT_RELU:
        return _mm256_max_ps(_mm256_setzero_ps(), v);
    case MK_ACT_RELU6:
        return _mm256_min_ps(_mm256_set1_ps(6.0f), _mm256_max_ps(_mm256_setzero_ps(), v));
    case MK_ACT_SILU: {
        __m256 e = mk_exp256(_mm256_sub_ps(_mm256_setzero_ps(), v));
        return _mm256_div_ps(v, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
    }
    case MK_ACT_HARDSWISH: {
        __m256 t = _mm256_add_ps(v, _mm256_set1_ps(3.0f));
        t = _mm256_min_ps(_mm256_set1_ps(6.0f), _mm256_max_ps(_mm256_setzero_ps(), t));
        return _mm256_div_ps(_mm256_mul_ps(v, t), _mm256_set1_ps(6.0f));
    }
    default:
        return v;
    }
}

/* Lane mask of the lanes [lo, hi) that fall in vector j of width w (bit i = lane j*w + i). */
static inline unsigned mk_seg_mask(int lo, int hi, int j, int w) {
    int a = lo - j * w, b = hi - j * w;
    if (a < 0) a = 0;
    if (b > w) b = w;
    if (b <= a) return 0u;
    return (unsigned)(((1ull << (b - a)) - 1ull) << a);
}

/* Bits [lo, hi) of a 16-lane mask (clipped to the lanes). */
static inline __mmask16 mk_lanes16(int lo, int hi) {
    if (lo < 0) lo = 0;
    if (hi > 16) hi = 16;
    if (hi <= lo) return 0;
    return (__mmask16)((((uint32_t)1 << (hi - lo)) - 1) << lo);
}

#endif /* MK_X86 */
#endif
