/* bfloat16 -> float64, AVX2: shift to float32, then vcvtps2pd (quiets NaNs, as ml_dtypes'
 * conversion through float), 8 per step. */
#include "cast.h"

#if MK_CAST_X86
#include <immintrin.h>
#include "common/half.h"

MK_TARGET_AVX2 void mk_bf16_f64_vcvt_ukernel__avx2_x8(size_t n, const void* input, void* output) {
    const uint16_t* in = (const uint16_t*)input; /* input: n bfloat16 */
    double* out = (double*)output;               /* output: n float64 */
    for (; n >= 8; n -= 8, in += 8, out += 8) {
        const __m128i b = _mm_loadu_si128((const __m128i*)in);
        const __m256 f = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
        _mm256_storeu_pd(out, _mm256_cvtps_pd(_mm256_castps256_ps128(f)));
        _mm256_storeu_pd(out + 4, _mm256_cvtps_pd(_mm256_extractf128_ps(f, 1)));
    }
    for (; n != 0; n--) *out++ = mk_bf16_to_f64(*in++);
}

#endif /* MK_CAST_X86 */
