/* Transcendental epilogue activations of a stored float32 tile, AVX2+FMA: 8 floats at a time,
 * widened to two vectors of 4 doubles, evaluated by gemm-act-vec.inc.h, rounded back once.
 * Called by the AVX2 float32 microkernels on the tile they just stored (hot in L1). */
#include "isa.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#include <immintrin.h>

#include "gemm.h"

#define D_TARGET __attribute__((target("avx2,fma,f16c")))
#define D_T __m256d
#define D_SET1(x) _mm256_set1_pd(x)
#define D_ADD _mm256_add_pd
#define D_SUB _mm256_sub_pd
#define D_MUL _mm256_mul_pd
#define D_DIV _mm256_div_pd
#define D_FMA(a, b, c) _mm256_fmadd_pd((a), (b), (c))
#define D_FNMA(a, b, c) _mm256_fnmadd_pd((a), (b), (c))
#define D_MAX _mm256_max_pd
#define D_MIN _mm256_min_pd
#define D_SIGNBIT _mm256_castsi256_pd(_mm256_set1_epi64x((long long)0x8000000000000000ULL))
#define D_ABS(v) _mm256_andnot_pd(D_SIGNBIT, (v))
#define D_OR_SIGN(v, s) _mm256_or_pd(D_ABS(v), _mm256_and_pd((s), D_SIGNBIT))
#define D_ROUND(v) _mm256_round_pd((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define D_SELECT_LT(a, b, x, y) _mm256_blendv_pd((y), (x), _mm256_cmp_pd((a), (b), _CMP_LT_OQ))

/* p * 2^n for integral n in [-1022, 1023] (exp clamps its argument to +-708) */
static inline D_TARGET __m256d mk_d_scale2(__m256d p, __m256d n) {
    const __m256i e = _mm256_slli_epi64(
        _mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(n)), _mm256_set1_epi64x(1023)),
        52);
    return _mm256_mul_pd(p, _mm256_castsi256_pd(e));
}
#define D_SCALE2(p, n) mk_d_scale2((p), (n))

#define F_TARGET D_TARGET
#define F_T __m256
#define F_SET1(x) _mm256_set1_ps(x)
#define F_ADD _mm256_add_ps
#define F_MUL _mm256_mul_ps
#define F_FMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define F_FMS(a, b, c) _mm256_fmsub_ps((a), (b), (c))
#define F_FNMA(a, b, c) _mm256_fnmadd_ps((a), (b), (c))
#define F_MIN _mm256_min_ps
#define F_ABS(v) _mm256_andnot_ps(_mm256_set1_ps(-0.0f), (v))
#define F_ROUND(v) _mm256_round_ps((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define F_RECIP(d) _mm256_div_ps(_mm256_set1_ps(1.0f), (d))
#define F_SELECT_GE0(x, a, b) \
    _mm256_blendv_ps((b), (a), _mm256_cmp_ps((x), _mm256_setzero_ps(), _CMP_GE_OQ))

/* p * 2^n for integral n in [-252, 254], in two exact power-of-two steps (subnormal results
 * rounded once, by the second) */
static inline F_TARGET __m256 mk_f_scale2(__m256 p, __m256 n) {
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    const __m256 s1 = _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23));
    const __m256 s2 = _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_add_epi32(n2, _mm256_set1_epi32(127)), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}
#define F_SCALE2(p, n) mk_f_scale2((p), (n))

#include "gemm-act-vec.inc.h"

#define MK_TILE_LOOP(FN)                                                                   \
    for (size_t i = 0; i < rows; i++) {                                                    \
        float *row = c + i * ldc;                                                          \
        for (size_t j = 0; j < nc; j += 8) {                                               \
            const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(nc - j)),         \
                                                 _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)); \
            const __m256 x = _mm256_maskload_ps(row + j, m);                               \
            const __m256d lo = FN(_mm256_cvtps_pd(_mm256_castps256_ps128(x)));             \
            const __m256d hi = FN(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)));           \
            const __m256 y = _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo));    \
            _mm256_maskstore_ps(row + j, m, y);                                            \
        }                                                                                  \
    }

/* float32 evaluation, 8 lanes at a time */
#define MK_TILE_LOOP_F32(FN)                                                               \
    for (size_t i = 0; i < rows; i++) {                                                    \
        float *row = c + i * ldc;                                                          \
        size_t j = 0;                                                                      \
        for (; j + 8 <= nc; j += 8) _mm256_storeu_ps(row + j, FN(_mm256_loadu_ps(row + j))); \
        if (j < nc) {                                                                      \
            const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(nc - j)),         \
                                                 _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)); \
            _mm256_maskstore_ps(row + j, m, FN(_mm256_maskload_ps(row + j, m)));           \
        }                                                                                  \
    }

D_TARGET void mk_act_tile_f32_avx2(size_t rows, size_t nc, void *c_, size_t ldc,
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
