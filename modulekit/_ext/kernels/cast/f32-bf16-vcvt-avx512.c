/* float32 -> bfloat16, AVX-512: software round-to-nearest-even (u + 0x7fff + lsb) >> 16,
 * NaNs made the canonical quiet NaN with their sign (ml_dtypes), 16 per step, masked tail.
 * Not vcvtneps2bf16 (AVX512_BF16), which flushes subnormal inputs to zero. */
#include <immintrin.h>

#include "cast.h"

static inline MK_TARGET_AVX512 __m256i mk_cvt16(__m512i u) {
    const __m512i hi = _mm512_srli_epi32(u, 16);
    const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(
        _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_mov_epi32(
        r, nan,
        _mm512_or_si512(_mm512_and_si512(hi, _mm512_set1_epi32(0x8000)), _mm512_set1_epi32(0x7fc0)));
    return _mm512_cvtepi32_epi16(r);
}

MK_TARGET_AVX512 void mk_f32_bf16_vcvt_ukernel__avx512_x16(size_t n, const void* input,
                                                           void* output) {
    const uint32_t* in = (const uint32_t*)input; /* input: n float32 */
    uint16_t* out = (uint16_t*)output;           /* output: n bfloat16 (may alias input) */
    for (; n >= 16; n -= 16, in += 16, out += 16) {
        _mm256_storeu_si256((__m256i*)out, mk_cvt16(_mm512_loadu_si512(in)));
    }
    if (n != 0) {
        const __mmask16 m = (__mmask16)((1u << n) - 1u);
        _mm256_mask_storeu_epi16(out, m, mk_cvt16(_mm512_maskz_loadu_epi32(m, in)));
    }
}

/* The same with non-temporal stores, for outputs far larger than the caches (chosen by the
 * driver, never in place): the output lines are written whole without being read first.
 * Unaligned head and short tail go through the kernel above. */
MK_TARGET_AVX512 void mk_f32_bf16_vcvt_ukernel__avx512_nt_x32(size_t n, const void* input, void* output) {
    const uint32_t* in = (const uint32_t*)input; /* input: n elements */
    uint16_t* out = (uint16_t*)output;         /* output: n elements, not overlapping input */
    const size_t head = ((64u - ((uintptr_t)out & 63u)) & 63u) / sizeof(uint16_t);
    if (((uintptr_t)out % sizeof(uint16_t)) != 0 || head + 32 > n) {
        mk_f32_bf16_vcvt_ukernel__avx512_x16(n, in, out);
        return;
    }
    mk_f32_bf16_vcvt_ukernel__avx512_x16(head, in, out);
    in += head;
    out += head;
    n -= head;
    for (; n >= 32; n -= 32, in += 32, out += 32) { /* one 64-byte line */
        const __m256i lo = mk_cvt16(_mm512_loadu_si512(in));
        const __m256i hi = mk_cvt16(_mm512_loadu_si512(in + 16));
        _mm512_stream_si512((__m512i*)out, _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
    }
    _mm_sfence(); /* order the streamed lines before whatever the caller does next */
    mk_f32_bf16_vcvt_ukernel__avx512_x16(n, in, out);
}
