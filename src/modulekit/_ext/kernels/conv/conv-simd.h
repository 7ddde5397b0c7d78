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

/* The igemm tiles' epilogue (float32 and bfloat16 compute alike): acc[r][j] holds output
 * channel r, lanes 16j..16j+15 of the tile; each lane of segment s goes to
 * c + r*c_rs + segs[s].off + lane as act(acc (+ res at the same offset)), rows r < mrows. */
__attribute__((always_inline)) MK_T512 static inline void
mk_igemm_store_8xnv(const int NV, __m512 acc[8][3], int mrows, float *c, ptrdiff_t c_rs,
                    const float *res, const mk_seg *segs, int nseg, int act) {
    for (int s = 0; s < nseg; s++) {
        const int lo = segs[s].lo, hi = segs[s].hi;
        const ptrdiff_t off = segs[s].off;
#pragma GCC unroll 3
        for (int j = 0; j < NV; j++) {
            __mmask16 m = (__mmask16)mk_seg_mask(lo, hi, j, 16);
            if (!m) continue;
#pragma GCC unroll 8
            for (int r = 0; r < 8; r++) { /* constant bounds keep acc in registers */
                if (r >= mrows) break;
                __m512 v = acc[r][j];
                ptrdiff_t o = r * c_rs + off + 16 * j;
                if (res) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, res + o));
                v = mk_act_f32x16(v, act, 0.0f, 0.0f);
                _mm512_mask_storeu_ps(c + o, m, v);
            }
        }
    }
}

#endif /* MK_X86 */
#endif
