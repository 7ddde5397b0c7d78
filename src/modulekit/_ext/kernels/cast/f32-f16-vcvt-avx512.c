/* float32 -> float16, AVX-512: vcvtps2ph zmm (round-to-nearest-even), 16 per step, masked
 * tail. NaN lanes are rebuilt with NumPy's rule (payload kept, not quieted). */
#include "cast.h"

#if MK_CAST_X86
#include <immintrin.h>

static inline MK_TARGET_AVX512 __m256i mk_cvt16(__m512 v) {
    __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    if (nan) {
        const __m512i u = _mm512_castps_si512(v);
        __m512i p = _mm512_and_si512(_mm512_srli_epi32(u, 13), _mm512_set1_epi32(0x3ff));
        p = _mm512_mask_mov_epi32(p, _mm512_testn_epi32_mask(p, p), _mm512_set1_epi32(1));
        const __m512i r = _mm512_or_si512(
            _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x8000)),
            _mm512_or_si512(_mm512_set1_epi32(0x7c00), p));
        h = _mm256_mask_mov_epi16(h, nan, _mm512_cvtepi32_epi16(r));
    }
    return h;
}

MK_TARGET_AVX512 void mk_f32_f16_vcvt_ukernel__avx512_x16(size_t n, const void* input,
                                                          void* output) {
    const float* in = (const float*)input; /* input: n float32 */
    uint16_t* out = (uint16_t*)output;     /* output: n float16 (may alias input) */
    for (; n >= 16; n -= 16, in += 16, out += 16) {
        _mm256_storeu_si256((__m256i*)out, mk_cvt16(_mm512_loadu_ps(in)));
    }
    if (n != 0) {
        const __mmask16 m = (__mmask16)((1u << n) - 1u);
        _mm256_mask_storeu_epi16(out, m, mk_cvt16(_mm512_maskz_loadu_ps(m, in)));
    }
}

/* One 64-byte output line (32 elements), streamed (see MK_DEFINE_VCVT_NT in cast.h). */
static inline MK_TARGET_AVX512 void mk_stream_line(const float* in, uint16_t* out) {
    const __m256i lo = mk_cvt16(_mm512_loadu_ps(in));
    const __m256i hi = mk_cvt16(_mm512_loadu_ps(in + 16));
    _mm512_stream_si512((__m512i*)out, _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
}
MK_DEFINE_VCVT_NT(mk_f32_f16_vcvt_ukernel__avx512_nt_x32, MK_TARGET_AVX512,
                  float, uint16_t, 32, mk_f32_f16_vcvt_ukernel__avx512_x16, mk_stream_line)

#endif /* MK_CAST_X86 */
