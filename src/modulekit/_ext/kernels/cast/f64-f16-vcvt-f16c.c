/* float64 -> float16, AVX2 level, 4 per step: vcvtpd2ps, corrected to round-to-odd
 * (step back towards zero where rounding went up, set the last bit where inexact), then
 * F16C vcvtps2ph: one correct rounding, as NumPy's direct double -> half conversion.
 * A step holding a NaN goes through the scalar reference (NumPy's NaN rule). */
#include "cast.h"

#if MK_CAST_X86
#include <immintrin.h>
#include "cast-scalar.h"

MK_TARGET_AVX2 void mk_f64_f16_vcvt_ukernel__f16c_x4(size_t n, const void* input, void* output) {
    const double* in = (const double*)input; /* input: n float64 */
    uint16_t* out = (uint16_t*)output;       /* output: n float16 (may alias input) */
    const __m256d abs_mask = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffffll));
    const __m256i even_words = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    const __m128i one = _mm_set1_epi32(1);
    for (; n >= 4; n -= 4, in += 4, out += 4) {
        const __m256d d = _mm256_loadu_pd(in);
        if (_mm256_movemask_pd(_mm256_cmp_pd(d, d, _CMP_UNORD_Q))) {
            for (int k = 0; k < 4; k++) out[k] = mk_f64_to_f16_bits(in[k]);
            continue;
        }
        const __m128 f = _mm256_cvtpd_ps(d);
        const __m256d back = _mm256_cvtps_pd(f);
        const __m256d up = _mm256_cmp_pd(_mm256_and_pd(back, abs_mask), _mm256_and_pd(d, abs_mask),
                                         _CMP_GT_OQ);
        const __m256d inexact = _mm256_cmp_pd(back, d, _CMP_NEQ_OQ);
        const __m128i up32 = _mm256_castsi256_si128(
            _mm256_permutevar8x32_epi32(_mm256_castpd_si256(up), even_words));
        const __m128i inexact32 = _mm256_castsi256_si128(
            _mm256_permutevar8x32_epi32(_mm256_castpd_si256(inexact), even_words));
        __m128i t = _mm_add_epi32(_mm_castps_si128(f), up32); /* up32 is -1 where rounded up */
        t = _mm_or_si128(t, _mm_and_si128(inexact32, one));
        _mm_storel_epi64((__m128i*)out, _mm_cvtps_ph(_mm_castsi128_ps(t), _MM_FROUND_TO_NEAREST_INT));
    }
    for (; n != 0; n--) *out++ = mk_f64_to_f16_bits(*in++);
}

#endif /* MK_CAST_X86 */
