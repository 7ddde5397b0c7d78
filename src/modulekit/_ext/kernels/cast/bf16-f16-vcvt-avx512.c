/* bfloat16 -> float16, AVX-512, 16 per step, masked tail: shift to float32 (exact), then
 * vcvtps2ph (round-to-nearest-even); NaNs become the canonical 0x7e00 with their sign
 * (ml_dtypes). */
#include "cast.h"

#if MK_CAST_X86
#include <immintrin.h>

static inline MK_TARGET_AVX512 __m256i mk_cvt16(__m256i b) {
    const __m512 f = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
    const __m256i h = _mm512_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __mmask16 nan = _mm256_cmpgt_epu16_mask(_mm256_and_si256(b, _mm256_set1_epi16(0x7fff)),
                                                  _mm256_set1_epi16(0x7f80));
    const __m256i canon = _mm256_or_si256(_mm256_and_si256(b, _mm256_set1_epi16((short)0x8000)),
                                          _mm256_set1_epi16(0x7e00));
    return _mm256_mask_mov_epi16(h, nan, canon);
}

MK_TARGET_AVX512 void mk_bf16_f16_vcvt_ukernel__avx512_x16(size_t n, const void* input,
                                                           void* output) {
    const uint16_t* in = (const uint16_t*)input; /* input: n bfloat16 */
    uint16_t* out = (uint16_t*)output;           /* output: n float16 (may alias input) */
    for (; n >= 16; n -= 16, in += 16, out += 16) {
        _mm256_storeu_si256((__m256i*)out, mk_cvt16(_mm256_loadu_si256((const __m256i*)in)));
    }
    if (n != 0) {
        const __mmask16 m = (__mmask16)((1u << n) - 1u);
        _mm256_mask_storeu_epi16(out, m, mk_cvt16(_mm256_maskz_loadu_epi16(m, in)));
    }
}

#endif /* MK_CAST_X86 */
