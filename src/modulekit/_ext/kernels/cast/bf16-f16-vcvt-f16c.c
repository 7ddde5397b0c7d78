/* bfloat16 -> float16, AVX2 level, 8 per step: shift to float32 (exact), then F16C
 * vcvtps2ph (round-to-nearest-even); NaNs become the canonical 0x7e00 with their sign
 * (ml_dtypes). */
#include "cast.h"

#if MK_CAST_X86
#include <immintrin.h>
#include "common/half.h"

MK_TARGET_AVX2 void mk_bf16_f16_vcvt_ukernel__f16c_x8(size_t n, const void* input, void* output) {
    const uint16_t* in = (const uint16_t*)input; /* input: n bfloat16 */
    uint16_t* out = (uint16_t*)output;           /* output: n float16 (may alias input) */
    const __m128i abs16 = _mm_set1_epi16(0x7fff);
    const __m128i inf16 = _mm_set1_epi16(0x7f80);
    const __m128i sign16 = _mm_set1_epi16((short)0x8000);
    const __m128i qnan16 = _mm_set1_epi16(0x7e00);
    for (; n >= 8; n -= 8, in += 8, out += 8) {
        const __m128i b = _mm_loadu_si128((const __m128i*)in);
        const __m256 f = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
        __m128i h = _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT);
        const __m128i nan = _mm_cmpgt_epi16(_mm_and_si128(b, abs16), inf16);
        h = _mm_blendv_epi8(h, _mm_or_si128(_mm_and_si128(b, sign16), qnan16), nan);
        _mm_storeu_si128((__m128i*)out, h);
    }
    for (; n != 0; n--) *out++ = mk_bf16_to_f16_bits(*in++);
}

#endif /* MK_CAST_X86 */
