/* float32 1x1-convolution remainder microkernels, AVX-512: 16 output channels (the lanes: two
 * 8-channel weight panels side by side) x up to 8 output pixels (broadcast from the input), and
 * 64 channels x up to 4 pixels for the shortest remainders.
 *
 * The pixel-lane kernels (8 x 48, 8 x 32) waste lanes when the pixel count is not a multiple of
 * 16 (a 7x7 map is 48 + 1 pixels); the last L % 16 pixels of a 1x1 convolution are computed
 * here instead, with every lane useful: per k, one 16-channel weight vector (two panel rows)
 * and one broadcast and FMA per pixel. The results are scattered to the NCHW output (channel r
 * of pixel i at c + r*c_rs + i) with the residual gathered the same way. Each output is the
 * same sum in the same order (bias, then k = 0, 1, ...) as in the pixel-lane kernels, so a
 * pixel's value does not depend on which kernel computed it. */
#include "isa.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#include "conv-simd.h"

/* NV vectors of 16 output channels (panels 2j, 2j+1 of the run starting at p0; panels at or
 * past npan read as zero) x up to MAXPX pixels. */
MK_T512 static inline void c1x1_tail(const int NV, const int MAXPX, size_t K, const float *p0,
                                     int npan, size_t panel, const float *b,
                                     const ptrdiff_t *koff, int npx, int mrows, float *c,
                                     ptrdiff_t c_rs, const float *res, int act) {
    __m512 acc[8][4];
    const float *pp[8];
#pragma GCC unroll 8
    for (int h = 0; h < 2 * NV; h++) pp[h] = h < npan ? p0 + (size_t)h * panel : NULL;
#pragma GCC unroll 4
    for (int j = 0; j < NV; j++) {
        const __m256 lo = pp[2 * j] ? _mm256_loadu_ps(pp[2 * j]) : _mm256_setzero_ps();
        const __m256 hi = pp[2 * j + 1] ? _mm256_loadu_ps(pp[2 * j + 1]) : _mm256_setzero_ps();
        const __m512 bias = _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
#pragma GCC unroll 8
        for (int i = 0; i < MAXPX; i++) acc[i][j] = bias;
    }
    for (size_t k = 0; k < K; k++) {
        const float *bk = b + koff[k];
        __m512 w[4];
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++) {
            const size_t o = 8 + 8 * k;
            const __m256 lo =
                pp[2 * j] ? _mm256_loadu_ps(pp[2 * j] + o) : _mm256_setzero_ps();
            const __m256 hi =
                pp[2 * j + 1] ? _mm256_loadu_ps(pp[2 * j + 1] + o) : _mm256_setzero_ps();
            w[j] = _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
        }
#pragma GCC unroll 8
        for (int i = 0; i < MAXPX; i++) { /* constant bounds keep acc in registers */
            if (i >= npx) break;
            const __m512 x = _mm512_set1_ps(bk[i]);
#pragma GCC unroll 4
            for (int j = 0; j < NV; j++) acc[i][j] = _mm512_fmadd_ps(w[j], x, acc[i][j]);
        }
    }
    const __m512i idx = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32((int)c_rs));
#pragma GCC unroll 4
    for (int j = 0; j < NV; j++) {
        const int rows = mrows - 16 * j;
        if (rows <= 0) break;
        const __mmask16 m = (__mmask16)(rows >= 16 ? 0xffffu : (1u << rows) - 1u);
        float *cj = c + (ptrdiff_t)16 * j * c_rs;
        const float *rj = res ? res + (ptrdiff_t)16 * j * c_rs : NULL;
#pragma GCC unroll 8
        for (int i = 0; i < MAXPX; i++) {
            if (i >= npx) break;
            __m512 v = acc[i][j];
            if (rj)
                v = _mm512_add_ps(
                    v, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, rj + i, 4));
            _mm512_mask_i32scatter_ps(cj + i, m, idx, mk_act_f32x16(v, act, 0.0f, 0.0f), 4);
        }
    }
}

/*   K      : reduction length (input channels)
 *   p0     : the first of npan (<= 2 or 8) consecutive packed panels (bias[8] then K x 8, panel
 *            floats apart)
 *   b      : input, B[k, i] = b[koff[k] + i]                                   input
 *   npx    : pixels, 1..8 (16cx8) or 1..4 (64cx4)
 *   mrows  : output channels to store, 1..16 (16cx8) or 1..64 (64cx4)
 *   c      : channel 0 of pixel 0; channel r of pixel i at c + r*c_rs + i      output
 *   res    : residual with c's addressing, or NULL                             input */
MK_T512 void mk_f32_conv1x1_16cx8_avx512(size_t K, const float *p0, int npan, size_t panel,
                                         const float *b, const ptrdiff_t *koff, int npx,
                                         int mrows, float *c, ptrdiff_t c_rs, const float *res,
                                         int act) {
    c1x1_tail(1, 8, K, p0, npan, panel, b, koff, npx, mrows, c, c_rs, res, act);
}

/* 64 channels x up to 4 pixels: at least 4 independent accumulators per k even for a single
 * remaining pixel (a 7x7 map's 49th), where the 16-channel kernel would wait on one FMA
 * chain. */
MK_T512 void mk_f32_conv1x1_64cx4_avx512(size_t K, const float *p0, int npan, size_t panel,
                                         const float *b, const ptrdiff_t *koff, int npx,
                                         int mrows, float *c, ptrdiff_t c_rs, const float *res,
                                         int act) {
    c1x1_tail(4, 4, K, p0, npan, panel, b, koff, npx, mrows, c, c_rs, res, act);
}

#endif /* MK_X86 */
