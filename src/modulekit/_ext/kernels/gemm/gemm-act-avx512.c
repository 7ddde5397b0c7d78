/* Transcendental epilogue activations of a stored float32 tile, AVX-512: 16 floats at a time,
 * widened to two vectors of 8 doubles, evaluated by gemm-act-vec.inc.h, rounded back once.
 * Called by the AVX-512 float32 microkernels on the tile they just stored (hot in L1). */
#include "isa.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#include <immintrin.h>

#include "gemm.h"

#define D_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))
#define D_T __m512d
#define D_SET1(x) _mm512_set1_pd(x)
#define D_ADD _mm512_add_pd
#define D_SUB _mm512_sub_pd
#define D_MUL _mm512_mul_pd
#define D_DIV _mm512_div_pd
#define D_FMA(a, b, c) _mm512_fmadd_pd((a), (b), (c))
#define D_FNMA(a, b, c) _mm512_fnmadd_pd((a), (b), (c))
#define D_MAX _mm512_max_pd
#define D_MIN _mm512_min_pd
#define D_ABS(v) _mm512_abs_pd(v)
#define D_OR_SIGN(v, s)                                                            \
    _mm512_or_pd(_mm512_abs_pd(v),                                                 \
                 _mm512_and_pd((s), _mm512_castsi512_pd(_mm512_set1_epi64(         \
                                        (long long)0x8000000000000000ULL))))
#define D_ROUND(v) _mm512_roundscale_pd((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define D_SCALE2(p, n) _mm512_scalef_pd((p), (n))
#define D_SELECT_LT(a, b, x, y) \
    _mm512_mask_blend_pd(_mm512_cmp_pd_mask((a), (b), _CMP_LT_OQ), (y), (x))

#define F_TARGET D_TARGET
#define F_T __m512
#define F_SET1(x) _mm512_set1_ps(x)
#define F_ADD _mm512_add_ps
#define F_MUL _mm512_mul_ps
#define F_FMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define F_FMS(a, b, c) _mm512_fmsub_ps((a), (b), (c))
#define F_FNMA(a, b, c) _mm512_fnmadd_ps((a), (b), (c))
#define F_MIN _mm512_min_ps
#define F_ABS(v) _mm512_abs_ps(v)
#define F_ROUND(v) _mm512_roundscale_ps((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define F_SCALE2(p, n) _mm512_scalef_ps((p), (n))
#define F_SELECT_GE0(x, a, b) \
    _mm512_mask_blend_ps(_mm512_cmp_ps_mask((x), _mm512_setzero_ps(), _CMP_GE_OQ), (b), (a))

/* 1/d: 14-bit estimate and one Newton step (28 bits) */
static inline F_TARGET __m512 mk_f_recip(__m512 d) {
    const __m512 r = _mm512_rcp14_ps(d);
    return _mm512_fmadd_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(1.0f)), r);
}
#define F_RECIP(d) mk_f_recip(d)

#include "gemm-act-vec.inc.h"

#define MK_TILE_LOOP(FN)                                                                  \
    for (size_t i = 0; i < rows; i++) {                                                   \
        float *row = c + i * ldc;                                                         \
        for (size_t j = 0; j < nc; j += 16) {                                             \
            const size_t rem = nc - j;                                                    \
            const __mmask16 m = rem >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << rem) - 1u); \
            const __m512 x = _mm512_maskz_loadu_ps(m, row + j);                           \
            const __m512d lo = FN(_mm512_cvtps_pd(_mm512_castps512_ps256(x)));            \
            const __m512d hi = FN(_mm512_cvtps_pd(_mm256_castpd_ps(                      \
                _mm512_extractf64x4_pd(_mm512_castps_pd(x), 1))));                        \
            const __m512 y = _mm512_insertf32x8(                                          \
                _mm512_castps256_ps512(_mm512_cvtpd_ps(lo)), _mm512_cvtpd_ps(hi), 1);     \
            _mm512_mask_storeu_ps(row + j, m, y);                                         \
        }                                                                                 \
    }

/* float32 evaluation, 16 lanes at a time */
#define MK_TILE_LOOP_F32(FN)                                                              \
    for (size_t i = 0; i < rows; i++) {                                                   \
        float *row = c + i * ldc;                                                         \
        size_t j = 0;                                                                     \
        for (; j + 16 <= nc; j += 16) _mm512_storeu_ps(row + j, FN(_mm512_loadu_ps(row + j))); \
        if (j < nc) {                                                                     \
            const __mmask16 m = (__mmask16)((1u << (nc - j)) - 1u);                       \
            _mm512_mask_storeu_ps(row + j, m, FN(_mm512_maskz_loadu_ps(m, row + j)));     \
        }                                                                                 \
    }

D_TARGET void mk_act_tile_f32_avx512(size_t rows, size_t nc, void *c_, size_t ldc,
                                     const mk_epilogue *ep) {
    float *c = (float *)c_; /* in/out: rows x nc, row stride ldc */
    switch (ep->act) {
        case MK_ACT_GELU_ERF:
            MK_TILE_LOOP_F32(mk_f_gelu_erf)
            break;
        case MK_ACT_GELU_TANH:
            MK_TILE_LOOP(mk_d_gelu_tanh)
            break;
        case MK_ACT_SILU:
            MK_TILE_LOOP(mk_d_silu)
            break;
        case MK_ACT_SIGMOID:
            MK_TILE_LOOP(mk_d_sigmoid)
            break;
        case MK_ACT_TANH:
            MK_TILE_LOOP(mk_d_tanh)
            break;
        default:
            mk_act_tile_f32_scalar(rows, nc, c, ldc, ep);
            break;
    }
}

#endif /* MK_X86 */
