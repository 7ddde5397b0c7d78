/* What the convolution's x86 SIMD kernels share: the target attributes, the epilogue math
 * (common/vmath-avx2.h and -avx512.h: mk_act_f32x8 / mk_act_f32x16, the same functions as the
 * GEMM epilogue and nn.functional) and the lane masks of the tile segments. Included by the
 * ISA-specific kernel files only. */
#ifndef MK_CONV_SIMD_H
#define MK_CONV_SIMD_H

#include "conv.h"
#include "isa.h"
#if MK_X86 /* x86 SIMD only: nothing elsewhere (see isa.h) */
#include <immintrin.h>

#include "common/vmath-avx2.h"
#include "common/vmath-avx512.h"

#define MK_T512 MK_TARGET_AVX512
#define MK_T256 MK_TARGET_AVX2

/* Lane mask of the lanes [lo, hi) that fall in vector j of width w (bit i = lane j*w + i). */
static inline unsigned mk_seg_mask(int lo, int hi, int j, int w) {
    int a = lo - j * w, b = hi - j * w;
    if (a < 0) a = 0;
    if (b > w) b = w;
    if (b <= a) return 0u;
    return (unsigned)(((1ull << (b - a)) - 1ull) << a);
}

/* Bits [lo, hi) of a 16-lane mask (clipped to the lanes). */
static inline __mmask16 mk_lanes16(int lo, int hi) {
    if (lo < 0) lo = 0;
    if (hi > 16) hi = 16;
    if (hi <= lo) return 0;
    return (__mmask16)((((uint32_t)1 << (hi - lo)) - 1) << lo);
}

#endif /* MK_X86 */
#endif
