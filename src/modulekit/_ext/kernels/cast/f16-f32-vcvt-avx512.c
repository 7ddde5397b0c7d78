/* float16 -> float32, AVX-512: vcvtph2ps zmm, 16 per step, masked tail. NaN lanes are
 * rebuilt with their payload unquieted, as NumPy gives. */
#include "cast.h"

#if MK_CAST_X86
#include <immintrin.h>

static inline MK_TARGET_AVX512 __m512 mk_cvt16(__m256i h) {
    __m512 v = _mm512_cvtph_ps(h);
    const __mmask16 nan = _mm256_cmpgt_epu16_mask(_mm256_and_si256(h, _mm256_set1_epi16(0x7fff)),
                                                  _mm256_set1_epi16(0x7c00));
    if (nan) {
        const __m512i u = _mm512_cvtepu16_epi32(h);
        const __m512i r = _mm512_or_si512(
            _mm512_slli_epi32(_mm512_and_si512(u, _mm512_set1_epi32(0x8000)), 16),
            _mm512_or_si512(_mm512_set1_epi32(0x7f800000),
                            _mm512_slli_epi32(_mm512_and_si512(u, _mm512_set1_epi32(0x3ff)), 13)));
        v = _mm512_mask_mov_ps(v, nan, _mm512_castsi512_ps(r));
    }
    return v;
}

MK_TARGET_AVX512 void mk_f16_f32_vcvt_ukernel__avx512_x16(size_t n, const void* input,
                                                          void* output) {
    const uint16_t* in = (const uint16_t*)input; /* input: n float16 */
    float* out = (float*)output;                 /* output: n float32 */
    for (; n >= 16; n -= 16, in += 16, out += 16) {
        _mm512_storeu_ps(out, mk_cvt16(_mm256_loadu_si256((const __m256i*)in)));
    }
    if (n != 0) {
        const __mmask16 m = (__mmask16)((1u << n) - 1u);
        _mm512_mask_storeu_ps(out, m, mk_cvt16(_mm256_maskz_loadu_epi16(m, in)));
    }
}

/* One 64-byte output line (16 elements), streamed (see MK_DEFINE_VCVT_NT in cast.h). */
static inline MK_TARGET_AVX512 void mk_stream_line(const uint16_t* in, float* out) {
    _mm512_stream_ps(out, mk_cvt16(_mm256_loadu_si256((const __m256i*)in)));
}
MK_DEFINE_VCVT_NT(mk_f16_f32_vcvt_ukernel__avx512_nt_x16, MK_TARGET_AVX512,
                  uint16_t, float, 16, mk_f16_f32_vcvt_ukernel__avx512_x16, mk_stream_line)

#endif /* MK_CAST_X86 */
