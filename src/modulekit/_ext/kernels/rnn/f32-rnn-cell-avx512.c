/* Fused float32 recurrent cells (rnn.h), AVX-512: 16 lanes, masked tails. */
#include "isa.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#include <immintrin.h>

#include "rnn.h"

#define V_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))
#define V_T __m512
#define V_W 16
#define V_SET1(x) _mm512_set1_ps(x)
#define V_ADD _mm512_add_ps
#define V_SUB _mm512_sub_ps
#define V_MUL _mm512_mul_ps
/* 1/d for d in [1, 2] (1 + exp(-|x|), 2 + expm1(-2|x|)): 14-bit estimate, one Newton step */
static inline V_TARGET __m512 mk_v_recip(__m512 d) {
    const __m512 r = _mm512_rcp14_ps(d);
    return _mm512_fmadd_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(1.0f)), r);
}
#define V_RECIP(d) mk_v_recip(d)
#define V_FMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define V_FNMA(a, b, c) _mm512_fnmadd_ps((a), (b), (c))
#define V_MAX _mm512_max_ps
#define V_ABS(v) _mm512_abs_ps(v)
#define V_BITS_SHL23(v) _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_castps_si512(v), 23))
#define V_SELECT_GE0(x, a, b) \
    _mm512_mask_blend_ps(_mm512_cmp_ps_mask((x), _mm512_setzero_ps(), _CMP_GE_OQ), (b), (a))
#define V_SIGNBIT _mm512_castsi512_ps(_mm512_set1_epi32((int)0x80000000u))
#define V_COPYSIGN(t, x) _mm512_or_ps(_mm512_abs_ps(t), _mm512_and_ps((x), V_SIGNBIT))
#define V_LOAD(p) _mm512_loadu_ps(p)
#define V_STORE(p, v) _mm512_storeu_ps((p), (v))
#define V_LOADN(p, n) _mm512_maskz_loadu_ps((__mmask16)((1u << (n)) - 1u), (p))
#define V_STOREN(p, v, n) _mm512_mask_storeu_ps((p), (__mmask16)((1u << (n)) - 1u), (v))
#define SFX avx512

#include "rnn-cell-vec.inc.h"

#endif /* MK_X86 */
