/* bfloat16 -> float32, AVX-512: zero-extend and shift left by 16 (exact), 16 per step,
 * masked tail. */
#include "cast.h"

#if MK_CAST_X86
#include <immintrin.h>

MK_TARGET_AVX512 void mk_bf16_f32_vcvt_ukernel__avx512_x16(size_t n, const void* input,
                                                           void* output) {
    const uint16_t* in = (const uint16_t*)input; /* input: n bfloat16 */
    uint32_t* out = (uint32_t*)output;           /* output: n float32 */
    for (; n >= 16; n -= 16, in += 16, out += 16) {
        const __m256i b = _mm256_loadu_si256((const __m256i*)in);
        _mm512_storeu_si512(out, _mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
    }
    if (n != 0) {
        const __mmask16 m = (__mmask16)((1u << n) - 1u);
        const __m256i b = _mm256_maskz_loadu_epi16(m, in);
        _mm512_mask_storeu_epi32(out, m, _mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
    }
}

/* One 64-byte output line (16 elements), streamed (see MK_DEFINE_VCVT_NT in cast.h). */
static inline MK_TARGET_AVX512 void mk_stream_line(const uint16_t* in, uint32_t* out) {
    const __m256i b = _mm256_loadu_si256((const __m256i*)in);
    _mm512_stream_si512((__m512i*)out, _mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
}
MK_DEFINE_VCVT_NT(mk_bf16_f32_vcvt_ukernel__avx512_nt_x16, MK_TARGET_AVX512,
                  uint16_t, uint32_t, 16, mk_bf16_f32_vcvt_ukernel__avx512_x16, mk_stream_line)

#endif /* MK_CAST_X86 */
