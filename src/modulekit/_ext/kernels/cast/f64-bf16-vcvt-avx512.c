/* float64 -> bfloat16, AVX-512, 8 per step, masked tail: vcvtpd2ps with embedded
 * round-toward-zero made round-to-odd (see f64-f16-vcvt-avx512.c), then the software
 * round-to-nearest-even to bfloat16: one correct rounding, as ml_dtypes. NaNs become the
 * canonical quiet NaN with their sign. */
#include "cast.h"

#if MK_CAST_X86
#include <immintrin.h>

static inline MK_TARGET_AVX512 __m128i mk_cvt8(__m512d d) {
    const __m256 t = _mm512_cvt_roundpd_ps(d, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __mmask8 inexact = _mm512_cmp_pd_mask(_mm512_cvtps_pd(t), d, _CMP_NEQ_UQ);
    const __m256i odd = _mm256_mask_or_epi32(_mm256_castps_si256(t), inexact,
                                             _mm256_castps_si256(t), _mm256_set1_epi32(1));
    const __m256i hi = _mm256_srli_epi32(odd, 16);
    const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(odd, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
    const __mmask8 nan = _mm512_cmp_pd_mask(d, d, _CMP_UNORD_Q);
    r = _mm256_mask_mov_epi32(
        r, nan,
        _mm256_or_si256(_mm256_and_si256(hi, _mm256_set1_epi32(0x8000)), _mm256_set1_epi32(0x7fc0)));
    return _mm256_cvtepi32_epi16(r);
}

MK_TARGET_AVX512 void mk_f64_bf16_vcvt_ukernel__avx512_x8(size_t n, const void* input,
                                                          void* output) {
    const double* in = (const double*)input; /* input: n float64 */
    uint16_t* out = (uint16_t*)output;       /* output: n bfloat16 (may alias input) */
    for (; n >= 8; n -= 8, in += 8, out += 8) {
        _mm_storeu_si128((__m128i*)out, mk_cvt8(_mm512_loadu_pd(in)));
    }
    if (n != 0) {
        const __mmask8 m = (__mmask8)((1u << n) - 1u);
        _mm_mask_storeu_epi16(out, m, mk_cvt8(_mm512_maskz_loadu_pd(m, in)));
    }
}

#endif /* MK_CAST_X86 */
