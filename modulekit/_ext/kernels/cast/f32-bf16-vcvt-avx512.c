/* float32 -> bfloat16, AVX-512: software round-to-nearest-even (u + 0x7fff + lsb) >> 16,
 * NaNs made the canonical quiet NaN with their sign (ml_dtypes), 16 per step, masked tail.
 * Not vcvtneps2bf16 (AVX512_BF16), which flushes subnormal inputs to zero. */
#include <immintrin.h>

#include "cast.h"

static inline MK_TARGET_AVX512 __m256i mk_cvt16(__m512i u) {
    const __m512i hi = _mm512_srli_epi32(u, 16);
    const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(
        _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_mov_epi32(
        r, nan,
        _mm512_or_si512(_mm512_and_si512(hi, _mm512_set1_epi32(0x8000)), _mm512_set1_epi32(0x7fc0)));
    return _mm512_cvtepi32_epi16(r);
}

MK_TARGET_AVX512 void mk_f32_bf16_vcvt_ukernel__avx512_x16(size_t n, const void* input,
                                                           void* output) {
    const uint32_t* in = (const uint32_t*)input; /* input: n float32 */
    uint16_t* out = (uint16_t*)output;           /* output: n bfloat16 (may alias input) */
    for (; n >= 16; n -= 16, in += 16, out += 16) {
        _mm256_storeu_si256((__m256i*)out, mk_cvt16(_mm512_loadu_si512(in)));
    }
    if (n != 0) {
        const __mmask16 m = (__mmask16)((1u << n) - 1u);
        _mm256_mask_storeu_epi16(out, m, mk_cvt16(_mm512_maskz_loadu_epi32(m, in)));
    }
}
