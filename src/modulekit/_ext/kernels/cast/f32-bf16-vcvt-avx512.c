/* float32 -> bfloat16, AVX-512: software round-to-nearest-even (u + 0x7fff + lsb) >> 16,
 * NaNs made the canonical quiet NaN with their sign (ml_dtypes), 32 per step (vpermt2w
 * packs two vectors), masked tail.
 * Not vcvtneps2bf16 (AVX512_BF16), which flushes subnormal inputs to zero. */
#include "cast.h"

#if MK_CAST_X86
#include <immintrin.h>

/* u rounded so that its upper 16 bits are the bfloat16 (NaN lanes: the canonical NaN). */
static inline MK_TARGET_AVX512 __m512i mk_round(__m512i u) {
    /* Keep u in a register: GCC otherwise folds the load into each of the four uses, and
     * four loads crossing a cache line (NumPy data is often only 16-byte aligned) cost
     * twice the time of the whole cast. */
    __asm__("" : "+v"(u));
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(
        _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    /* sign | 0x7fc0 in the upper half: (u & 0x80000000) | 0x7fc00000 */
    const __m512i canon = _mm512_ternarylogic_epi32(u, _mm512_set1_epi32((int)0x80000000u),
                                                    _mm512_set1_epi32(0x7fc00000), 0xEA);
    return _mm512_mask_mov_epi32(r, nan, canon);
}

/* 16 elements: the upper halves of the rounded lanes. */
static inline MK_TARGET_AVX512 __m256i mk_cvt16(__m512i u) {
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(mk_round(u), 16));
}

/* 32 elements: one vpermt2w picks the upper halves of two rounded vectors. */
static inline MK_TARGET_AVX512 __m512i mk_cvt32(__m512i u0, __m512i u1) {
    const __m512i odd_words = _mm512_set_epi16(
        63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33,
        31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    return _mm512_permutex2var_epi16(mk_round(u0), odd_words, mk_round(u1));
}

MK_TARGET_AVX512 void mk_f32_bf16_vcvt_ukernel__avx512_x32(size_t n, const void* input,
                                                           void* output) {
    const uint32_t* in = (const uint32_t*)input; /* input: n float32 */
    uint16_t* out = (uint16_t*)output;           /* output: n bfloat16 (may alias input) */
    for (; n >= 32; n -= 32, in += 32, out += 32) {
        _mm512_storeu_si512(out, mk_cvt32(_mm512_loadu_si512(in), _mm512_loadu_si512(in + 16)));
    }
    if (n >= 16) {
        _mm256_storeu_si256((__m256i*)out, mk_cvt16(_mm512_loadu_si512(in)));
        in += 16;
        out += 16;
        n -= 16;
    }
    if (n != 0) {
        const __mmask16 m = (__mmask16)((1u << n) - 1u);
        _mm256_mask_storeu_epi16(out, m, mk_cvt16(_mm512_maskz_loadu_epi32(m, in)));
    }
}

/* One 64-byte output line (32 elements), streamed (see MK_DEFINE_VCVT_NT in cast.h). */
static inline MK_TARGET_AVX512 void mk_stream_line(const uint32_t* in, uint16_t* out) {
    _mm512_stream_si512((__m512i*)out,
                        mk_cvt32(_mm512_loadu_si512(in), _mm512_loadu_si512(in + 16)));
}
MK_DEFINE_VCVT_NT(mk_f32_bf16_vcvt_ukernel__avx512_nt_x32, MK_TARGET_AVX512,
                  uint32_t, uint16_t, 32, mk_f32_bf16_vcvt_ukernel__avx512_x32, mk_stream_line)

#endif /* MK_CAST_X86 */
