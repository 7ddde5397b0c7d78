/* float32 1x1-convolution remainder microkernel, AVX-512: 16 output channels (the lanes: two
 * 8-channel weight panels side by side) x up to 8 output pixels (broadcast from the input).
 *
 * The pixel-lane kernels (8 x 48, 8 x 32) waste lanes when the pixel count is not a multiple of
 * 16 (a 7x7 map is 48 + 1 pixels); the last L % 16 pixels of a 1x1 convolution are computed
 * here instead, with every lane useful: per k, one 16-channel weight vector (two panel rows)
 * and one broadcast and FMA per pixel. The results are scattered to the NCHW output (channel r
 * of pixel i at c + r*c_rs + i) with the residual gathered the same way. Each output is the
 * same sum in the same order (bias, then k = 0, 1, ...) as in the pixel-lane kernels, so a
 * pixel's value does not depend on which kernel computed it. */
#include "simd-act.h"

/*   K      : reduction length (input channels)
 *   pa, pb : packed panels (bias[8] then K x 8) of channels 0-7 and 8-15; pb NULL: 8 channels
 *   b      : input, B[k, i] = b[koff[k] + i]                                   input
 *   npx    : pixels, 1..8
 *   mrows  : output channels to store, 1..16
 *   c      : channel 0 of pixel 0; channel r of pixel i at c + r*c_rs + i      output
 *   res    : residual with c's addressing, or NULL                             input */
MK_T512 void mk_f32_conv1x1_16cx8_avx512(size_t K, const float *pa, const float *pb,
                                         const float *b, const ptrdiff_t *koff, int npx,
                                         int mrows, float *c, ptrdiff_t c_rs, const float *res,
                                         int act) {
    __m512 acc[8];
    const __m256 zero8 = _mm256_setzero_ps();
    const __m512 bias = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(pa)),
                                           pb ? _mm256_loadu_ps(pb) : zero8, 1);
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) acc[i] = bias;
    pa += 8;
    if (pb) pb += 8;
    for (size_t k = 0; k < K; k++) {
        const __m512 w = _mm512_insertf32x8(
            _mm512_castps256_ps512(_mm256_loadu_ps(pa + 8 * k)),
            pb ? _mm256_loadu_ps(pb + 8 * k) : zero8, 1);
        const float *bk = b + koff[k];
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) { /* constant bounds keep acc in registers */
            if (i >= npx) break;
            acc[i] = _mm512_fmadd_ps(w, _mm512_set1_ps(bk[i]), acc[i]);
        }
    }
    const __mmask16 m = (__mmask16)((1u << mrows) - 1u);
    const __m512i idx = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32((int)c_rs));
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        if (i >= npx) break;
        __m512 v = acc[i];
        if (res)
            v = _mm512_add_ps(
                v, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, res + i, 4));
        _mm512_mask_i32scatter_ps(c + i, m, idx, mk_act512(v, act), 4);
    }
}
