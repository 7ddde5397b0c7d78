/* Vector-operation macros for the microkernel templates (gemm-ukernel.inc.h,
 * gemm-direct.inc.h). A kernel source defines exactly one of MK_OPS_AVX512_F32,
 * MK_OPS_AVX512_F64, MK_OPS_AVX2_F32, MK_OPS_AVX2_F64 before including this header.
 *
 *   MK_CT           compute element type        V_T      vector type, V_N lanes
 *   V_SET1(x)       broadcast                    V_LOADU  unaligned load
 *   V_FMA(a, b, c)  a * b + c                    V_MAX/V_MIN(a, b): b when either is NaN
 *   V_MASK_T, V_MASK(rem): lane mask of the first max(0, min(rem, V_N)) lanes
 *   V_MASKLOAD(p, m) (fault-free, zero lanes), V_MASKSTORE(p, m, v), V_STOREU(p, v)
 *   V_LO/V_HI(ep)   clamp bounds of the epilogue in the compute dtype
 *   MK_ACT_TILE     transcendental activation of a stored tile                              */
#ifndef MK_GEMM_OPS_H
#define MK_GEMM_OPS_H

#include "gemm.h"
#include "isa.h"
#if MK_X86 /* x86 SIMD only: nothing elsewhere (see isa.h) */
#include <immintrin.h>

#define MK_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define MK_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))

#if defined(MK_OPS_AVX512_F32)
#define MK_TARGET MK_TARGET_AVX512
#define MK_CT float
#define V_T __m512
#define V_N 16
#define V_SET1(x) _mm512_set1_ps(x)
#define V_LOADU(p) _mm512_loadu_ps(p)
#define V_STOREU(p, v) _mm512_storeu_ps((p), (v))
#define V_FMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define V_MAX(a, b) _mm512_max_ps((a), (b))
#define V_MIN(a, b) _mm512_min_ps((a), (b))
#define V_MASK_T __mmask16
#define V_MASK(rem) \
    ((__mmask16)((rem) >= 16 ? 0xFFFFu : ((rem) <= 0 ? 0u : ((1u << (rem)) - 1u))))
#define V_MASKLOAD(p, m) _mm512_maskz_loadu_ps((m), (p))
#define V_MASKSTORE(p, m, v) _mm512_mask_storeu_ps((p), (m), (v))
#define V_LO(ep) ((ep)->lo32)
#define V_HI(ep) ((ep)->hi32)
#define MK_ACT_TILE mk_act_tile_f32_avx512
/* weight loaders: storage element pointer -> V_N float32 lanes */
#define MK_LOADW_F32(p) _mm512_loadu_ps(p)
#define MK_LOADW_F16(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define MK_LOADW_BF16(p) \
    _mm512_castsi512_ps(   \
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p))), 16))

#elif defined(MK_OPS_AVX512_F64)
#define MK_TARGET MK_TARGET_AVX512
#define MK_CT double
#define V_T __m512d
#define V_N 8
#define V_SET1(x) _mm512_set1_pd(x)
#define V_LOADU(p) _mm512_loadu_pd(p)
#define V_STOREU(p, v) _mm512_storeu_pd((p), (v))
#define V_FMA(a, b, c) _mm512_fmadd_pd((a), (b), (c))
#define V_MAX(a, b) _mm512_max_pd((a), (b))
#define V_MIN(a, b) _mm512_min_pd((a), (b))
#define V_MASK_T __mmask8
#define V_MASK(rem) \
    ((__mmask8)((rem) >= 8 ? 0xFFu : ((rem) <= 0 ? 0u : ((1u << (rem)) - 1u))))
#define V_MASKLOAD(p, m) _mm512_maskz_loadu_pd((m), (p))
#define V_MASKSTORE(p, m, v) _mm512_mask_storeu_pd((p), (m), (v))
#define V_LO(ep) ((ep)->lo)
#define V_HI(ep) ((ep)->hi)
#define MK_ACT_TILE mk_act_tile_f64_scalar
#define MK_LOADW_F64(p) _mm512_loadu_pd(p)

#elif defined(MK_OPS_AVX2_F32)
#define MK_TARGET MK_TARGET_AVX2
#define MK_CT float
#define V_T __m256
#define V_N 8
#define V_SET1(x) _mm256_set1_ps(x)
#define V_LOADU(p) _mm256_loadu_ps(p)
#define V_STOREU(p, v) _mm256_storeu_ps((p), (v))
#define V_FMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define V_MAX(a, b) _mm256_max_ps((a), (b))
#define V_MIN(a, b) _mm256_min_ps((a), (b))
#define V_MASK_T __m256i
#define V_MASK(rem) \
    _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(rem)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
#define V_MASKLOAD(p, m) _mm256_maskload_ps((p), (m))
#define V_MASKSTORE(p, m, v) _mm256_maskstore_ps((p), (m), (v))
#define V_LO(ep) ((ep)->lo32)
#define V_HI(ep) ((ep)->hi32)
#define MK_ACT_TILE mk_act_tile_f32_avx2
#define MK_LOADW_F32(p) _mm256_loadu_ps(p)
#define MK_LOADW_F16(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define MK_LOADW_BF16(p) \
    _mm256_castsi256_ps( \
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p))), 16))

#elif defined(MK_OPS_AVX2_F64)
#define MK_TARGET MK_TARGET_AVX2
#define MK_CT double
#define V_T __m256d
#define V_N 4
#define V_SET1(x) _mm256_set1_pd(x)
#define V_LOADU(p) _mm256_loadu_pd(p)
#define V_STOREU(p, v) _mm256_storeu_pd((p), (v))
#define V_FMA(a, b, c) _mm256_fmadd_pd((a), (b), (c))
#define V_MAX(a, b) _mm256_max_pd((a), (b))
#define V_MIN(a, b) _mm256_min_pd((a), (b))
#define V_MASK_T __m256i
#define V_MASK(rem) \
    _mm256_cmpgt_epi64(_mm256_set1_epi64x((long long)(rem)), _mm256_setr_epi64x(0, 1, 2, 3))
#define V_MASKLOAD(p, m) _mm256_maskload_pd((p), (m))
#define V_MASKSTORE(p, m, v) _mm256_maskstore_pd((p), (m), (v))
#define V_LO(ep) ((ep)->lo)
#define V_HI(ep) ((ep)->hi)
#define MK_ACT_TILE mk_act_tile_f64_scalar
#define MK_LOADW_F64(p) _mm256_loadu_pd(p)

#else
#error "define one of MK_OPS_AVX512_F32, MK_OPS_AVX512_F64, MK_OPS_AVX2_F32, MK_OPS_AVX2_F64"
#endif

#endif /* MK_X86 */
#endif /* MK_GEMM_OPS_H */
