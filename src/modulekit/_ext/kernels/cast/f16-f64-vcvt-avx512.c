/* float16 -> float64, AVX-512: vcvtph2ps then vcvtps2pd (both exact), 8 per step, masked
 * tail. NaN lanes are rebuilt with their payload unquieted, as NumPy gives. */
#include "cast.h"

#if MK_CAST_X86
#include <immintrin.h>

static inline MK_TARGET_AVX512 __m512d mk_cvt8(__m128i h) {
    __m512d d = _mm512_cvtps_pd(_mm256_cvtph_ps(h));
    const __mmask8 nan = _mm_cmpgt_epu16_mask(_mm_and_si128(h, _mm_set1_epi16(0x7fff)),
                                              _mm_set1_epi16(0x7c00));
    if (nan) {
        const __m512i u = _mm512_cvtepu16_epi64(h);
        const __m512i r = _mm512_or_si512(
            _mm512_slli_epi64(_mm512_and_si512(u, _mm512_set1_epi64(0x8000)), 48),
            _mm512_or_si512(_mm512_set1_epi64(0x7ff0000000000000ll),
                            _mm512_slli_epi64(_mm512_and_si512(u, _mm512_set1_epi64(0x3ff)), 42)));
        d = _mm512_mask_mov_pd(d, nan, _mm512_castsi512_pd(r));
    }
    return d;
}

MK_TARGET_AVX512 void mk_f16_f64_vcvt_ukernel__avx512_x8(size_t n, const void* input,
                                                         void* output) {
    const uint16_t* in = (const uint16_t*)input; /* input: n float16 */
    double* out = (double*)output;               /* output: n float64 */
    for (; n >= 8; n -= 8, in += 8, out += 8) {
        _mm512_storeu_pd(out, mk_cvt8(_mm_loadu_si128((const __m128i*)in)));
    }
    if (n != 0) {
        const __mmask8 m = (__mmask8)((1u << n) - 1u);
        _mm512_mask_storeu_pd(out, m, mk_cvt8(_mm_maskz_loadu_epi16(m, in)));
    }
}

#endif /* MK_CAST_X86 */
