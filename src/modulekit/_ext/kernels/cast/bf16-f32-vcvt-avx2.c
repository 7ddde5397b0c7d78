/* bfloat16 -> float32, AVX2: zero-extend and shift left by 16 (exact), 8 per step. */
#include "cast.h"

#if MK_CAST_X86
#include <immintrin.h>
#include "cast-scalar.h"

MK_TARGET_AVX2 void mk_bf16_f32_vcvt_ukernel__avx2_x8(size_t n, const void* input, void* output) {
    const uint16_t* in = (const uint16_t*)input; /* input: n bfloat16 */
    uint32_t* out = (uint32_t*)output;           /* output: n float32 */
    for (; n >= 8; n -= 8, in += 8, out += 8) {
        const __m128i b = _mm_loadu_si128((const __m128i*)in);
        _mm256_storeu_si256((__m256i*)out, _mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
    }
    for (; n != 0; n--) *out++ = mk_bf16_to_f32_bits(*in++);
}

/* The same with non-temporal stores, for outputs far larger than the caches (chosen by the
 * driver, never in place): the output lines are written whole without being read first.
 * Unaligned head and short tail go through the kernel above. */
MK_TARGET_AVX2 void mk_bf16_f32_vcvt_ukernel__avx2_nt_x16(size_t n, const void* input, void* output) {
    const uint16_t* in = (const uint16_t*)input; /* input: n elements */
    uint32_t* out = (uint32_t*)output;         /* output: n elements, not overlapping input */
    const size_t head = ((64u - ((uintptr_t)out & 63u)) & 63u) / sizeof(uint32_t);
    if (((uintptr_t)out % sizeof(uint32_t)) != 0 || head + 16 > n) {
        mk_bf16_f32_vcvt_ukernel__avx2_x8(n, in, out);
        return;
    }
    mk_bf16_f32_vcvt_ukernel__avx2_x8(head, in, out);
    in += head;
    out += head;
    n -= head;
    for (; n >= 16; n -= 16, in += 16, out += 16) { /* one 64-byte line */
        const __m128i b0 = _mm_loadu_si128((const __m128i*)in);
        const __m128i b1 = _mm_loadu_si128((const __m128i*)(in + 8));
        _mm256_stream_si256((__m256i*)out, _mm256_slli_epi32(_mm256_cvtepu16_epi32(b0), 16));
        _mm256_stream_si256((__m256i*)out + 1, _mm256_slli_epi32(_mm256_cvtepu16_epi32(b1), 16));
    }
    _mm_sfence(); /* order the streamed lines before whatever the caller does next */
    mk_bf16_f32_vcvt_ukernel__avx2_x8(n, in, out);
}

#endif /* MK_CAST_X86 */
