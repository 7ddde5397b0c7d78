/* float64 -> float16, AVX-512, 8 per step, masked tail: vcvtpd2ps with embedded
 * round-toward-zero, the last bit set where inexact (round-to-odd), then vcvtps2ph
 * (round-to-nearest-even): one correct rounding, as NumPy's direct double -> half.
 * NaN lanes are rebuilt with NumPy's rule (top 10 payload bits, a zero payload made 1). */
#include "cast.h"

#if MK_CAST_X86
#include <immintrin.h>

static inline MK_TARGET_AVX512 __m128i mk_cvt8(__m512d d) {
    const __m256 t = _mm512_cvt_roundpd_ps(d, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __mmask8 inexact = _mm512_cmp_pd_mask(_mm512_cvtps_pd(t), d, _CMP_NEQ_UQ);
    const __m256i odd = _mm256_mask_or_epi32(_mm256_castps_si256(t), inexact,
                                             _mm256_castps_si256(t), _mm256_set1_epi32(1));
    __m128i h = _mm256_cvtps_ph(_mm256_castsi256_ps(odd), _MM_FROUND_TO_NEAREST_INT);
    const __mmask8 nan = _mm512_cmp_pd_mask(d, d, _CMP_UNORD_Q);
    if (nan) {
        const __m512i u = _mm512_castpd_si512(d);
        __m512i p = _mm512_and_si512(_mm512_srli_epi64(u, 42), _mm512_set1_epi64(0x3ff));
        p = _mm512_mask_mov_epi64(p, _mm512_testn_epi64_mask(p, p), _mm512_set1_epi64(1));
        const __m512i r = _mm512_or_si512(
            _mm512_and_si512(_mm512_srli_epi64(u, 48), _mm512_set1_epi64(0x8000)),
            _mm512_or_si512(_mm512_set1_epi64(0x7c00), p));
        h = _mm_mask_mov_epi16(h, nan, _mm512_cvtepi64_epi16(r));
    }
    return h;
}

MK_TARGET_AVX512 void mk_f64_f16_vcvt_ukernel__avx512_x8(size_t n, const void* input,
                                                         void* output) {
    const double* in = (const double*)input; /* input: n float64 */
    uint16_t* out = (uint16_t*)output;       /* output: n float16 (may alias input) */
    for (; n >= 8; n -= 8, in += 8, out += 8) {
        _mm_storeu_si128((__m128i*)out, mk_cvt8(_mm512_loadu_pd(in)));
    }
    if (n != 0) {
        const __mmask8 m = (__mmask8)((1u << n) - 1u);
        _mm_mask_storeu_epi16(out, m, mk_cvt8(_mm512_maskz_loadu_pd(m, in)));
    }
}

#endif /* MK_CAST_X86 */
