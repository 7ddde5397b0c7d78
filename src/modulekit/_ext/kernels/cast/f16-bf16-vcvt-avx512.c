/* float16 -> bfloat16, AVX-512, 16 per step, masked tail: vcvtph2ps (exact), then the
 * software round-to-nearest-even to bfloat16; NaNs become the canonical quiet NaN
 * (ml_dtypes). */
#include "cast.h"

#if MK_CAST_X86
#include <immintrin.h>

static inline MK_TARGET_AVX512 __m256i mk_cvt16(__m256i h) {
    const __m512 f = _mm512_cvtph_ps(h);
    const __m512i u = _mm512_castps_si512(f);
    const __m512i hi = _mm512_srli_epi32(u, 16);
    const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
    r = _mm512_mask_mov_epi32(
        r, nan,
        _mm512_or_si512(_mm512_and_si512(hi, _mm512_set1_epi32(0x8000)), _mm512_set1_epi32(0x7fc0)));
    return _mm512_cvtepi32_epi16(r);
}

MK_TARGET_AVX512 void mk_f16_bf16_vcvt_ukernel__avx512_x16(size_t n, const void* input,
                                                           void* output) {
    const uint16_t* in = (const uint16_t*)input; /* input: n float16 */
    uint16_t* out = (uint16_t*)output;           /* output: n bfloat16 (may alias input) */
    for (; n >= 16; n -= 16, in += 16, out += 16) {
        _mm256_storeu_si256((__m256i*)out, mk_cvt16(_mm256_loadu_si256((const __m256i*)in)));
    }
    if (n != 0) {
        const __mmask16 m = (__mmask16)((1u << n) - 1u);
        _mm256_mask_storeu_epi16(out, m, mk_cvt16(_mm256_maskz_loadu_epi16(m, in)));
    }
}

#endif /* MK_CAST_X86 */
