/* Fused depthwise chain (MobileNetV2's inverted residual block), float32, NCHW:
 *     E = act_e(expand_1x1(x))          (skipped when the block has no expansion: E = x)
 *     D = act_d(depthwise_3x3(E))       (stride 1 or 2)
 *     y = act_p(project_1x1(D) (+ x))   (each act an MK_ACT_* epilogue)
 * computed in bands of output rows, so the expanded tensor E and the depthwise output D of a
 * band stay in L2 instead of going to memory and back (the expanded tensor is 6x the block's
 * input). The expanded rows a band shares with the next (one row at stride 2, two at stride 1)
 * are moved to the front of the band buffer instead of being recomputed. Threads take
 * (image, row range) items; each has its own band buffers.
 *
 * The 1x1 convolutions run f32-conv1x1-driver.c's band GEMM (pixel-lane 8x48/8x32 tiles and the
 * channel-lane remainder kernel; koff[k] = k * channel stride); the depthwise step runs
 * the in-place 3x3 kernel, so the fused block needs AVX-512 (the Python side runs the unfused
 * layers elsewhere). Results equal the unfused layers' bit for bit: every output is the same
 * sum in the same order. */
#include <string.h>

#include "conv.h"
#include "isa.h"
#include "common/team.h"
#include "mk_omp.h"

void mk_f32_dwconv2d_chw_3x3_avx512(const float *x, ptrdiff_t sh, int H, int W, int stride,
                                    int pt, int pl, int OW, int oh0, int oh1, const float *w,
                                    float bias, float *out, ptrdiff_t ors, const float *res,
                                    ptrdiff_t rrs, int act);
void mk_f32_dwconv2d_flat_3x3_avx512(const float *x, ptrdiff_t xs, int H, int W, int C,
                                     const float *w, const float *bias, float *out,
                                     ptrdiff_t os, int act);

static ptrdiff_t round16(ptrdiff_t n) { return (n + 15) / 16 * 16; }

/* Input rows a band of R output rows reads, at most. */
static int band_in_rows(const mk_conv_geom *g, int R) { return (R - 1) * g->sy + g->KH; }

ptrdiff_t mk_invres_scratch(const mk_conv_geom *g, int chid, int has_expand, int R) {
    const ptrdiff_t e = has_expand ? (ptrdiff_t)chid * round16((ptrdiff_t)band_in_rows(g, R) * g->W)
                                   : 0;
    return e + (ptrdiff_t)chid * round16((ptrdiff_t)R * g->OW) + 64;
}

/* One image on a map of at most 14 rows, held in one band: the threads split the hidden and
 * then the output channels (below) rather than the rows. */
int mk_invres_channel_split(const mk_conv_geom *g, int has_expand, int nthreads) {
    return nthreads > 1 && g->N == 1 && has_expand && g->OH <= 14;
}

/* The whole block.
 *   g       : the depthwise convolution's geometry on the block input's spatial size
 *             (N, H, W, strides of x; KH = KW = 3, sy = sx, pads, OH, OW); g->C = Cin
 *   x       : block input, rows contiguous (sw == 1, sh == W)                       input
 *   wexp    : expand panels (Cin -> chid, bias in the panels), or NULL (chid == Cin)
 *   wdw,bdw : depthwise taps (chid x 9) and bias (chid)
 *   wproj   : project panels (chid -> cout)
 *   koff    : Cin + chid entries of scratch
 *   out     : (N, cout, OH, OW) C-contiguous; res: the residual (x's addressing) or NULL
 *   scratch : nthreads * mk_invres_scratch(g, chid, wexp != NULL, R) floats
 *   R       : output rows per band */
void mk_invres_f32(const mk_conv_geom *g, const float *x, int chid, const float *wexp,
                   const float *wdw, const float *bdw, int cout, const float *wproj,
                   ptrdiff_t *koff, float *out, const float *res, float *scratch, int R,
                   int act_e, int act_d, int act_p, int nthreads) {
#if !MK_X86 /* AVX-512 only: never called elsewhere (see MK_NOT_X86_UNREACHABLE) */
    MK_NOT_X86_UNREACHABLE();
#else
    const int N = g->N, Cin = g->C, H = g->H, W = g->W, S = g->sy, OH = g->OH, OW = g->OW;
    const ptrdiff_t ohw = (ptrdiff_t)OH * OW;
    const int has_e = wexp != NULL;
    const ptrdiff_t Es = round16((ptrdiff_t)band_in_rows(g, R) * W); /* E channel stride */
    const ptrdiff_t Ds = round16((ptrdiff_t)R * OW);                  /* D channel stride */
    const ptrdiff_t per = mk_invres_scratch(g, chid, has_e, R);
    /* whole planes of at most 256 pixels and 8 columns at stride 1, padding 1 (the 7x7 maps):
     * the flat depthwise kernel, when a band holds the whole plane (rows of 7 columns fill 7 of
     * the row kernel's 16 lanes; at 14x14, 14 of 16, the row kernel is 4% faster) */
    const int flat = S == 1 && g->pt == 1 && g->pl == 1 && OH == H && OW == W && W <= 8 &&
                     H * W <= 256;
    ptrdiff_t *koff_e = koff, *koff_p = koff + Cin;
    for (int k = 0; k < Cin; k++) koff_e[k] = k * g->sc;
    for (int k = 0; k < chid; k++) koff_p[k] = k * Ds;

    /* items: (image, range of output rows); with fewer images than threads the rows are split */
    int nsplit = N >= nthreads ? 1 : (nthreads + N - 1) / N;
    if (nsplit > OH) nsplit = OH; /* ranges of at least one row, each run in bands of R */
    if (nsplit < 1) nsplit = 1;
    const int items = N * nsplit;
    if (items < nthreads) nthreads = items;
    /* small blocks stay on one thread */
    if ((double)N * ohw * chid * (Cin + cout + 9) < 2e5) nthreads = 1;

    /* One image on small maps (the whole block in one band): split channels instead of rows.
     * Row ranges of a 7x7 or 14x14 map are uneven and each thread would expand its halo rows
     * and stream every weight; here each thread expands and filters a share of the hidden
     * channels for the whole map into thread 0's scratch, one barrier, then computes a share
     * of the output channels. Every value is the same sum as on one thread. */
    if (R >= OH && mk_invres_channel_split(g, has_e, nthreads)) {
        const int hp = (chid + 15) / 16, op = (cout + 15) / 16;
        if (nthreads > op) nthreads = op;
        float *E = scratch, *D = scratch + (ptrdiff_t)chid * Es;
        const int y1 = (OH - 1) * S - g->pt + g->KH < H ? (OH - 1) * S - g->pt + g->KH : H;
        mk_team_clock clk;
        nthreads = mk_team_begin(nthreads, &clk);
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
        {
            const int t = omp_get_thread_num(), nt = omp_get_num_threads();
            const int h0 = hp * t / nt, h1 = hp * (t + 1) / nt;
            if (h1 > h0) {
                mk_conv1x1_band_f32((size_t)Cin, wexp, chid, x, koff_e, (ptrdiff_t)y1 * W, E,
                                    Es, NULL, act_e, h0, h1);
                const int c0 = 16 * h0, c1 = 16 * h1 < chid ? 16 * h1 : chid;
                if (flat)
                    mk_f32_dwconv2d_flat_3x3_avx512(E + c0 * Es, Es, H, W, c1 - c0,
                                                    wdw + (ptrdiff_t)c0 * 9, bdw + c0,
                                                    D + c0 * Ds, Ds, act_d);
                else
                    for (int c = c0; c < c1; c++)
                        mk_f32_dwconv2d_chw_3x3_avx512(E + c * Es, W, H, W, S, g->pt, g->pl, OW,
                                                       0, OH, wdw + (ptrdiff_t)c * 9, bdw[c],
                                                       D + c * Ds, OW, NULL, 0, act_d);
            }
            MK_TEAM_BARRIER(&clk);
            const int q0 = op * t / nt, q1 = op * (t + 1) / nt;
            if (q1 > q0)
                mk_conv1x1_band_f32((size_t)chid, wproj, cout, D, koff_p, ohw, out, ohw, res,
                                    act_p, q0, q1);
            MK_TEAM_DONE(&clk);
        }
        mk_team_end(&clk);
        return;
    }

    MK_TEAM_FOR(nthreads, 1)
    for (int it = 0; it < items; it++) {
        const int n = it / nsplit, part = it % nsplit;
        const int r0 = (int)((ptrdiff_t)OH * part / nsplit);
        const int r1 = (int)((ptrdiff_t)OH * (part + 1) / nsplit);
        float *E = scratch + per * omp_get_thread_num();
        float *D = E + (has_e ? (ptrdiff_t)chid * Es : 0);
        const float *xn = x + n * g->sn;
        float *on = out + (ptrdiff_t)n * cout * ohw;
        const float *rn = res ? res + n * g->sn : NULL;
        int a = 0, b = 0; /* expanded input rows [a, b) held in E (row y at E + (y - a)*W) */
        for (int o0 = r0; o0 < r1; o0 += R) {
            const int o1 = o0 + R < r1 ? o0 + R : r1;
            int y0 = o0 * S - g->pt, y1 = (o1 - 1) * S - g->pt + g->KH;
            if (y0 < 0) y0 = 0;
            if (y1 > H) y1 = H;
            const float *din; /* depthwise input, row y at din + y*dsh, channel c at + c*dsc */
            ptrdiff_t dsh, dsc;
            if (has_e) {
                int from = y0;
                if (b > y0 && a <= y0) { /* rows [y0, b) are already expanded: move them up */
                    if (y0 > a)
                        for (int c = 0; c < chid; c++)
                            memmove(E + c * Es, E + c * Es + (ptrdiff_t)(y0 - a) * W,
                                    sizeof(float) * (size_t)(b - y0) * W);
                    from = b;
                }
                if (y1 > from)
                    mk_conv1x1_band_f32((size_t)Cin, wexp, chid, xn + (ptrdiff_t)from * W,
                                        koff_e, (ptrdiff_t)(y1 - from) * W,
                                        E + (ptrdiff_t)(from - y0) * W, Es, NULL, act_e,
                                        0, (chid + 15) / 16);
                a = y0;
                b = y1;
                din = E - (ptrdiff_t)y0 * W;
                dsh = W;
                dsc = Es;
            } else {
                din = xn;
                dsh = g->sh;
                dsc = g->sc;
            }
            if (flat && o0 == 0 && o1 == OH && dsh == W)
                mk_f32_dwconv2d_flat_3x3_avx512(din, dsc, H, W, chid, wdw, bdw, D, Ds,
                                                act_d);
            else
                for (int c = 0; c < chid; c++)
                    mk_f32_dwconv2d_chw_3x3_avx512(din + c * dsc, dsh, H, W, S, g->pt, g->pl,
                                                   OW, o0, o1, wdw + (ptrdiff_t)c * 9, bdw[c],
                                                   D + c * Ds, OW, NULL, 0, act_d);
            mk_conv1x1_band_f32((size_t)chid, wproj, cout, D, koff_p, (ptrdiff_t)(o1 - o0) * OW,
                                on + (ptrdiff_t)o0 * OW, ohw, rn ? rn + (ptrdiff_t)o0 * OW : NULL,
                                act_p, 0, (cout + 15) / 16);
        }
    }
    MK_TEAM_FOR_END
#endif
}
