/* One 16 x 16 block of 32-bit elements (float32) transposed in registers (see ops.h, mk_transpose): 16 row
 * loads, three shuffle stages (pairs of rows, quads, 128-bit lanes twice) and 16 row stores. */
#include "isa.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#include <immintrin.h>

#include "common/vops-avx512.h"
#include "ops.h"

MK_TARGET_AVX512 void mk_x32_transpose_16x16_avx512(const float *src, ptrdiff_t ls, float *dst,
                                                    ptrdiff_t ld)
{
    __m512 t[16], u[16];
    for (int k = 0; k < 8; k++) { /* lane l: rows 2k, 2k+1 at columns 4l..4l+3, interleaved */
        const __m512 a = _mm512_loadu_ps(src + (2 * k) * ls);
        const __m512 b = _mm512_loadu_ps(src + (2 * k + 1) * ls);
        t[2 * k] = _mm512_unpacklo_ps(a, b);
        t[2 * k + 1] = _mm512_unpackhi_ps(a, b);
    }
    for (int k = 0; k < 4; k++) { /* u[4k+m] lane l: column 4l+m of rows 4k..4k+3 */
        u[4 * k + 0] = _mm512_shuffle_ps(t[4 * k], t[4 * k + 2], 0x44);
        u[4 * k + 1] = _mm512_shuffle_ps(t[4 * k], t[4 * k + 2], 0xEE);
        u[4 * k + 2] = _mm512_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0x44);
        u[4 * k + 3] = _mm512_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0xEE);
    }
    for (int m = 0; m < 4; m++) {
        /* v0: columns m, 8+m of rows 0-7 (lanes: m r0-3, 8+m r0-3, m r4-7, 8+m r4-7); v1: columns
         * 4+m, 12+m; w0, w1 the same for rows 8-15 */
        const __m512 v0 = _mm512_shuffle_f32x4(u[m], u[4 + m], 0x88);
        const __m512 v1 = _mm512_shuffle_f32x4(u[m], u[4 + m], 0xDD);
        const __m512 w0 = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], 0x88);
        const __m512 w1 = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], 0xDD);
        _mm512_storeu_ps(dst + m * ld, _mm512_shuffle_f32x4(v0, w0, 0x88));
        _mm512_storeu_ps(dst + (8 + m) * ld, _mm512_shuffle_f32x4(v0, w0, 0xDD));
        _mm512_storeu_ps(dst + (4 + m) * ld, _mm512_shuffle_f32x4(v1, w1, 0x88));
        _mm512_storeu_ps(dst + (12 + m) * ld, _mm512_shuffle_f32x4(v1, w1, 0xDD));
    }
}

#endif /* MK_X86 */
