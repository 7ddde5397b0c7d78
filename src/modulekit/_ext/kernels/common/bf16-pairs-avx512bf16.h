/* bfloat16 pairs for the vdpbf16ps kernels (conv/bf16-igemm-*.c, ops/bf16-attention-*.c):
 * float32 rounded to nearest even by vcvtne2ps2bf16 (as the GEMM engine rounds its
 * activations: NaN quieted, float32 denormals flushed to zero). Header-only, inlined into
 * each kernel file compiled with MK_TARGET_AVX512BF16. */
#ifndef MK_BF16_PAIRS_AVX512BF16_H
#define MK_BF16_PAIRS_AVX512BF16_H

#include "isa.h"
#if MK_X86
#include <immintrin.h>
#include <stdint.h>

#define MK_TARGET_AVX512BF16 \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c,avx512bf16")))

/* 16 pairs (lo[i], hi[i]): word i = bf16(lo[i]) | bf16(hi[i]) << 16, the layout one vdpbf16ps
 * operand takes (two k of one column). */
MK_TARGET_AVX512BF16 static inline __m512i mk_bf16_pairs16(__m512 lo, __m512 hi) {
    /* vcvtne2ps2bf16(hi, lo) = words [lo 0..15, hi 0..15] -> (lo i, hi i) */
    const __m512i inter = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25,
                                           9, 24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2,
                                           17, 1, 16, 0);
    return _mm512_permutexvar_epi16(inter, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
}

/* 32 consecutive floats (the first n valid, the rest zero) as 32 bfloat16 in order: 16 pairs
 * of consecutive elements. */
MK_TARGET_AVX512BF16 static inline __m512i mk_bf16_row32(const float *x, size_t n) {
    const __mmask16 m0 = n >= 16 ? 0xFFFF : (__mmask16)((1u << n) - 1u);
    const __mmask16 m1 = n >= 32 ? 0xFFFF : (n <= 16 ? 0 : (__mmask16)((1u << (n - 16)) - 1u));
    return (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(m1, x + 16),
                                        _mm512_maskz_loadu_ps(m0, x));
}

#endif /* MK_X86 */
#endif
