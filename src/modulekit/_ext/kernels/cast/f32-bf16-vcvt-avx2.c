/* float32 -> bfloat16, AVX2: software round-to-nearest-even (u + 0x7fff + lsb) >> 16,
 * NaNs made the canonical quiet NaN with their sign (ml_dtypes), 8 per step. Not the
 * hardware vcvtneps2bf16, which flushes subnormal inputs to zero. */
#include "cast.h"

#if MK_CAST_X86
#include <immintrin.h>
#include "cast-scalar.h"

static inline MK_TARGET_AVX2 __m128i mk_cvt8(__m256i u) {
    const __m256i hi = _mm256_srli_epi32(u, 16);
    const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    const __m256i canon =
        _mm256_or_si256(_mm256_and_si256(hi, _mm256_set1_epi32(0x8000)), _mm256_set1_epi32(0x7fc0));
    r = _mm256_blendv_epi8(r, canon, nan);
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

MK_TARGET_AVX2 void mk_f32_bf16_vcvt_ukernel__avx2_x8(size_t n, const void* input, void* output) {
    const uint32_t* in = (const uint32_t*)input; /* input: n float32 */
    uint16_t* out = (uint16_t*)output;           /* output: n bfloat16 (may alias input) */
    for (; n >= 8; n -= 8, in += 8, out += 8) {
        _mm_storeu_si128((__m128i*)out, mk_cvt8(_mm256_loadu_si256((const __m256i*)in)));
    }
    for (; n != 0; n--) *out++ = mk_f32_to_bf16_bits(*in++);
}

/* The same with non-temporal stores, for outputs far larger than the caches (chosen by the
 * driver, never in place): the output lines are written whole without being read first.
 * Unaligned head and short tail go through the kernel above. */
MK_TARGET_AVX2 void mk_f32_bf16_vcvt_ukernel__avx2_nt_x32(size_t n, const void* input, void* output) {
    const uint32_t* in = (const uint32_t*)input; /* input: n elements */
    uint16_t* out = (uint16_t*)output;         /* output: n elements, not overlapping input */
    const size_t head = ((64u - ((uintptr_t)out & 63u)) & 63u) / sizeof(uint16_t);
    if (((uintptr_t)out % sizeof(uint16_t)) != 0 || head + 32 > n) {
        mk_f32_bf16_vcvt_ukernel__avx2_x8(n, in, out);
        return;
    }
    mk_f32_bf16_vcvt_ukernel__avx2_x8(head, in, out);
    in += head;
    out += head;
    n -= head;
    for (; n >= 32; n -= 32, in += 32, out += 32) { /* one 64-byte line */
        for (int k = 0; k < 4; k++) {
            _mm_stream_si128((__m128i*)out + k,
                             mk_cvt8(_mm256_loadu_si256((const __m256i*)(in + 8 * k))));
        }
    }
    _mm_sfence(); /* order the streamed lines before whatever the caller does next */
    mk_f32_bf16_vcvt_ukernel__avx2_x8(n, in, out);
}

#endif /* MK_CAST_X86 */
