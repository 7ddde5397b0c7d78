/* float16 -> bfloat16, AVX2 level, 8 per step: F16C vcvtph2ps (exact), then the software
 * round-to-nearest-even to bfloat16; NaNs become the canonical quiet NaN (ml_dtypes). */
#include "cast.h"

#if MK_CAST_X86
#include <immintrin.h>
#include "common/half.h"

MK_TARGET_AVX2 void mk_f16_bf16_vcvt_ukernel__f16c_x8(size_t n, const void* input, void* output) {
    const uint16_t* in = (const uint16_t*)input; /* input: n float16 */
    uint16_t* out = (uint16_t*)output;           /* output: n bfloat16 (may alias input) */
    const __m256i bias = _mm256_set1_epi32(0x7fff);
    const __m256i one = _mm256_set1_epi32(1);
    const __m256i sign16 = _mm256_set1_epi32(0x8000);
    const __m256i qnan16 = _mm256_set1_epi32(0x7fc0);
    for (; n >= 8; n -= 8, in += 8, out += 8) {
        const __m256 f = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)in));
        const __m256i u = _mm256_castps_si256(f);
        const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
        __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(bias, lsb)), 16);
        const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(f, f, _CMP_UNORD_Q));
        const __m256i canon =
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u, 16), sign16), qnan16);
        r = _mm256_blendv_epi8(r, canon, nan);
        _mm_storeu_si128((__m128i*)out,
                         _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)));
    }
    for (; n != 0; n--) *out++ = mk_f16_to_bf16_bits(*in++);
}

#endif /* MK_CAST_X86 */
