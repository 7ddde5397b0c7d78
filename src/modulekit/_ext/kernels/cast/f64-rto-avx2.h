/* float64 -> float32 with round-to-odd, 4 lanes, AVX2 (see common/half.h for why): vcvtpd2ps,
 * then a step back towards zero where rounding went up and the last bit set where inexact. The
 * float64 -> float16 and -> bfloat16 kernels round the result once more, correctly. NaN lanes
 * are the caller's (it sends a step holding a NaN through the scalar reference). */
#ifndef MK_CAST_F64_RTO_AVX2_H
#define MK_CAST_F64_RTO_AVX2_H

#include "cast.h"

#if MK_CAST_X86
#include <immintrin.h>

static inline MK_TARGET_AVX2 __m128i mk_f64x4_to_f32_rto_bits(__m256d d) {
    const __m256d abs_mask = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffffll));
    const __m256i even_words = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    const __m128 f = _mm256_cvtpd_ps(d);
    const __m256d back = _mm256_cvtps_pd(f);
    const __m256d up = _mm256_cmp_pd(_mm256_and_pd(back, abs_mask), _mm256_and_pd(d, abs_mask),
                                     _CMP_GT_OQ);
    const __m256d inexact = _mm256_cmp_pd(back, d, _CMP_NEQ_OQ);
    const __m128i up32 = _mm256_castsi256_si128(
        _mm256_permutevar8x32_epi32(_mm256_castpd_si256(up), even_words));
    const __m128i inexact32 = _mm256_castsi256_si128(
        _mm256_permutevar8x32_epi32(_mm256_castpd_si256(inexact), even_words));
    const __m128i t = _mm_add_epi32(_mm_castps_si128(f), up32); /* up32 is -1 where rounded up */
    return _mm_or_si128(t, _mm_and_si128(inexact32, _mm_set1_epi32(1)));
}

/* A float64 -> 16-bit kernel NAME, 4 per step: the round-to-odd float32 bits of each step
 * narrowed by FINISH(__m128i) -> __m128i (4 results in the low 64 bits); a step holding a NaN
 * and the tail go through the scalar reference SCALAR(double) -> uint16_t. */
#define MK_DEFINE_F64_X16_VCVT_AVX2(NAME, SCALAR, FINISH)                                   \
    MK_TARGET_AVX2 void NAME(size_t n, const void* input, void* output) {                   \
        const double* in = (const double*)input; /* input: n float64 */                     \
        uint16_t* out = (uint16_t*)output;       /* output: n 16-bit (may alias input) */   \
        for (; n >= 4; n -= 4, in += 4, out += 4) {                                         \
            const __m256d d = _mm256_loadu_pd(in);                                          \
            if (_mm256_movemask_pd(_mm256_cmp_pd(d, d, _CMP_UNORD_Q))) {                    \
                for (int k = 0; k < 4; k++) out[k] = SCALAR(in[k]);                         \
                continue;                                                                   \
            }                                                                               \
            _mm_storel_epi64((__m128i*)out, FINISH(mk_f64x4_to_f32_rto_bits(d)));           \
        }                                                                                   \
        for (; n != 0; n--) *out++ = SCALAR(*in++);                                         \
    }

#endif /* MK_CAST_X86 */
#endif /* MK_CAST_F64_RTO_AVX2_H */
