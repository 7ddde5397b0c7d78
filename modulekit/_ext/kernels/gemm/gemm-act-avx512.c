/* Transcendental epilogue activations of a stored float32 tile, AVX-512: 16 floats at a time,
 * widened to two vectors of 8 doubles, evaluated by gemm-act-vec.inc.h, rounded back once.
 * Called by the AVX-512 float32 microkernels on the tile they just stored (hot in L1). */
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

D_TARGET void mk_act_tile_f32_avx512(size_t rows, size_t nc, void *c_, size_t ldc,
                                     const mk_epilogue *ep) {
    float *c = (float *)c_; /* in/out: rows x nc, row stride ldc */
    switch (ep->act) {
        case MK_ACT_GELU_ERF:
            MK_TILE_LOOP(mk_d_gelu_erf)
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
