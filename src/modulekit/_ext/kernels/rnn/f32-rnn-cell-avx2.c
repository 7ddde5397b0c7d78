/* Fused float32 recurrent cells (rnn.h), AVX2 + FMA: 8 lanes, masked tails. */
#include "isa.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#include <immintrin.h>

#include "rnn.h"

#define V_TARGET __attribute__((target("avx2,fma")))
#define V_T __m256
#define V_W 8
#define V_SET1(x) _mm256_set1_ps(x)
#define V_ADD _mm256_add_ps
#define V_SUB _mm256_sub_ps
#define V_MUL _mm256_mul_ps
/* 1/d for d in [1, 2] (1 + exp(-|x|), 2 + expm1(-2|x|)): the 12-bit estimate and two Newton
 * steps (one leaves ~2^-23 relative; the second makes it the correctly rounded value or a
 * neighbour) */
static inline V_TARGET __m256 mk_v_recip(__m256 d) {
    __m256 r = _mm256_rcp_ps(d);
    r = _mm256_fmadd_ps(r, _mm256_fnmadd_ps(d, r, _mm256_set1_ps(1.0f)), r);
    return _mm256_fmadd_ps(r, _mm256_fnmadd_ps(d, r, _mm256_set1_ps(1.0f)), r);
}
#define V_RECIP(d) mk_v_recip(d)
#define V_FMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define V_FNMA(a, b, c) _mm256_fnmadd_ps((a), (b), (c))
#define V_MAX _mm256_max_ps
#define V_SIGNBIT _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u))
#define V_ABS(v) _mm256_andnot_ps(V_SIGNBIT, (v))
#define V_BITS_SHL23(v) _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(v), 23))
#define V_SELECT_GE0(x, a, b) \
    _mm256_blendv_ps((b), (a), _mm256_cmp_ps((x), _mm256_setzero_ps(), _CMP_GE_OQ))
#define V_COPYSIGN(t, x) _mm256_or_ps(V_ABS(t), _mm256_and_ps((x), V_SIGNBIT))
#define V_LOAD(p) _mm256_loadu_ps(p)
#define V_STORE(p, v) _mm256_storeu_ps((p), (v))
#define V_MASK(n) \
    _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
#define V_LOADN(p, n) _mm256_maskload_ps((p), V_MASK(n))
#define V_STOREN(p, v, n) _mm256_maskstore_ps((p), V_MASK(n), (v))
#define SFX avx2

#include "rnn-cell-vec.inc.h"

#endif /* MK_X86 */
