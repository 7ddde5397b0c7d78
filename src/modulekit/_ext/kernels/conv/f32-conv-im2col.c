/* float32 convolution on small output maps as im2col + the lane-exact 1x1 GEMM, AVX-512.
 *
 * The phase-image igemm (f32-conv-driver.c) computes grid lanes: rows of Wq >= OW columns,
 * rounded up to whole 16-, 32- or 48-lane tiles. On small maps that wastes a large share of
 * the work: a 7x7 output (ResNet-18's stage-4 stride-2 3x3 and downsample 1x1) computes 64
 * lanes for 49 pixels, a 14x14 one 240 for 196. Here the K x OH*OW matrix of input windows is
 * materialised (one row per (ci, kh, kw), zero where the window hangs over the padding) and
 * handed to mk_conv1x1_band_f32 (f32-conv1x1-driver.c), which covers any pixel count without
 * lane waste (48-lane tiles, then channel-lane kernels for the remainder). The copy is K x
 * OH*OW floats, 1/Cout of the multiply-adds; conv-config.c (im2col_pays) keeps this path for
 * strided 1x1 kernels and for maps on which the igemm's tiles would cost over twice the
 * pixels, at Cout >= 32 (on the maps between, the igemm measured faster in spite of its
 * padding).
 * Every output is the same sum in the same order as the igemm's (k ascending, starting from
 * the bias), so the two paths agree bit for bit. */
#include <string.h>

#include "conv.h"
#include "isa.h"
#include "common/team.h"
#include "mk_omp.h"
#include "conv-simd.h"

ptrdiff_t mk_conv_im2col_size(const mk_conv_geom *g) {
    return (ptrdiff_t)g->C * g->KH * g->KW * g->OH * g->OW;
}

#if MK_X86 /* AVX-512 only (see isa.h) */

/* Row (ci, kh, kw) of the window matrix: dst[oh*OW + ow] = x[ci, oh*sy + kh*dy - pt,
 * ow*sx + kw*dx - pl], zero outside the input. xc: channel ci's plane. Unit column stride
 * and sx 1 or 2 run 16 outputs per step with masked loads that touch only the input columns
 * read (stride 2: two loads, one permute to the even lanes); other strides run scalar. */
MK_T512 static void im2col_row(const mk_conv_geom *g, const float *xc, int kh, int kw,
                               float *dst) {
    const int OW = g->OW, sx = g->sx;
    const int xo = kw * g->dx - g->pl; /* input column of ow = 0 */
    /* valid ow: 0 <= ow*sx + xo < W */
    int j0 = xo < 0 ? (-xo + sx - 1) / sx : 0;
    int j1 = g->W - xo > 0 ? (g->W - xo + sx - 1) / sx : 0;
    if (j1 > OW) j1 = OW;
    if (j0 > j1) j0 = j1;
    const int vec = g->sw == 1 && (sx == 1 || sx == 2);
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
                                           28, 30);
    for (int oh = 0; oh < g->OH; oh++, dst += OW) {
        const int y = oh * g->sy + kh * g->dy - g->pt;
        if (y < 0 || y >= g->H) {
            memset(dst, 0, sizeof(float) * (size_t)OW);
            continue;
        }
        const float *xr = xc + y * g->sh + (ptrdiff_t)xo * g->sw; /* xr[ow*sx]: output ow */
        if (vec) {
            for (int b = 0; b < OW; b += 16) {
                const __mmask16 keep = mk_lanes16(j0 - b, j1 - b) & mk_lanes16(0, OW - b);
                __m512 v;
                if (sx == 1) {
                    v = _mm512_maskz_loadu_ps(keep, xr + b);
                } else { /* inputs 2j for j in [max(j0,b), min(j1,b+16)): lanes of two loads */
                    const int lo = 2 * (j0 > b ? j0 : b) - 2 * b;
                    const int hi = 2 * ((j1 < b + 16 ? j1 : b + 16) - 1) + 1 - 2 * b;
                    const __m512 v0 = _mm512_maskz_loadu_ps(mk_lanes16(lo, hi), xr + 2 * b);
                    const __m512 v1 = _mm512_maskz_loadu_ps(mk_lanes16(lo - 16, hi - 16),
                                                            xr + 2 * b + 16);
                    v = _mm512_maskz_permutex2var_ps(keep, v0, even, v1);
                }
                _mm512_mask_storeu_ps(dst + b, mk_lanes16(0, OW - b), v);
            }
            continue;
        }
        for (int j = 0; j < j0; j++) dst[j] = 0.0f;
        const ptrdiff_t st = (ptrdiff_t)sx * g->sw;
        for (int j = j0; j < j1; j++) dst[j] = xr[j * st];
        for (int j = j1; j < OW; j++) dst[j] = 0.0f;
    }
}

int mk_conv2d_im2col_f32(const mk_conv_geom *g, const float *x, int Cout, const float *wp,
                         float *col, ptrdiff_t *koff, float *out, const float *res, int act,
                         int nthreads) {
    const int taps = g->KH * g->KW;
    const int K = g->C * taps;
    const ptrdiff_t HW = (ptrdiff_t)g->OH * g->OW;
    int nt = nthreads;
    if ((double)K * HW < 16384) nt = 1; /* the copy alone is too small to split */
    for (int n = 0; n < g->N; n++) {
        const float *xn = x + n * g->sn;
        MK_TEAM_FOR(nt, 1)
        for (int k = 0; k < K; k++) {
            const int ci = k / taps, t = k % taps;
            im2col_row(g, xn + ci * g->sc, t / g->KW, t % g->KW, col + (ptrdiff_t)k * HW);
        }
        MK_TEAM_FOR_END
        mk_conv1x1_f32(1, K, HW, col, 0, HW, Cout, wp, koff, out + (ptrdiff_t)n * Cout * HW,
                       res ? res + (ptrdiff_t)n * Cout * HW : NULL, act, nthreads);
    }
    return 0;
}

#else /* not x86: never called (see MK_NOT_X86_UNREACHABLE) */

int mk_conv2d_im2col_f32(const mk_conv_geom *g, const float *x, int Cout, const float *wp,
                         float *col, ptrdiff_t *koff, float *out, const float *res, int act,
                         int nthreads) {
    MK_NOT_X86_UNREACHABLE();
}

#endif /* MK_X86 */
