/* bfloat16 -> float32, AVX2: zero-extend and shift left by 16 (exact), 8 per step. */
#include "cast.h"

#if MK_CAST_X86
#include <immintrin.h>
#include "common/half.h"

MK_TARGET_AVX2 void mk_bf16_f32_vcvt_ukernel__avx2_x8(size_t n, const void* input, void* output) {
    const uint16_t* in = (const uint16_t*)input; /* input: n bfloat16 */
    uint32_t* out = (uint32_t*)output;           /* output: n float32 */
    for (; n >= 8; n -= 8, in += 8, out += 8) {
        const __m128i b = _mm_loadu_si128((const __m128i*)in);
        _mm256_storeu_si256((__m256i*)out, _mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
    }
    for (; n != 0; n--) *out++ = mk_bf16_to_f32_bits(*in++);
}

/* One 64-byte output line (16 elements), streamed (see MK_DEFINE_VCVT_NT in cast.h). */
static inline MK_TARGET_AVX2 void mk_stream_line(const uint16_t* in, uint32_t* out) {
    const __m128i b0 = _mm_loadu_si128((const __m128i*)in);
    const __m128i b1 = _mm_loadu_si128((const __m128i*)(in + 8));
    _mm256_stream_si256((__m256i*)out, _mm256_slli_epi32(_mm256_cvtepu16_epi32(b0), 16));
    _mm256_stream_si256((__m256i*)out + 1, _mm256_slli_epi32(_mm256_cvtepu16_epi32(b1), 16));
}
MK_DEFINE_VCVT_NT(mk_bf16_f32_vcvt_ukernel__avx2_nt_x16, MK_TARGET_AVX2,
                  uint16_t, uint32_t, 16, mk_bf16_f32_vcvt_ukernel__avx2_x8, mk_stream_line)

#endif /* MK_CAST_X86 */
