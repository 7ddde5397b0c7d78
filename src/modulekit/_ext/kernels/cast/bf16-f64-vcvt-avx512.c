/* bfloat16 -> float64, AVX-512: shift to float32, then vcvtps2pd zmm (quiets NaNs, as
 * ml_dtypes' conversion through float), 8 per step, masked tail. */
#include "cast.h"

#if MK_CAST_X86
#include <immintrin.h>

MK_TARGET_AVX512 void mk_bf16_f64_vcvt_ukernel__avx512_x8(size_t n, const void* input,
                                                          void* output) {
    const uint16_t* in = (const uint16_t*)input; /* input: n bfloat16 */
    double* out = (double*)output;               /* output: n float64 */
    for (; n >= 8; n -= 8, in += 8, out += 8) {
        const __m128i b = _mm_loadu_si128((const __m128i*)in);
        const __m256 f = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
        _mm512_storeu_pd(out, _mm512_cvtps_pd(f));
    }
    if (n != 0) {
        const __mmask8 m = (__mmask8)((1u << n) - 1u);
        const __m128i b = _mm_maskz_loadu_epi16(m, in);
        const __m256 f = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
        _mm512_mask_storeu_pd(out, m, _mm512_cvtps_pd(f));
    }
}

#endif /* MK_CAST_X86 */
