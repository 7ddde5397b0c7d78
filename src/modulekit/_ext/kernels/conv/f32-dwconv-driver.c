/* Depthwise convolution (groups == C_in == C_out), float32, NCHW: each (image, channel) plane
 * is copied into a per-thread phase image (zero padding, stride phases; it stays in L1/L2),
 * whose output grid (OH rows of Wq >= OW columns) is contiguous: one vectorised pass over all
 * its lanes computes it (bias included), then a row pass drops the extra columns, adding the
 * residual and the activation. OpenMP over planes. 3x3 stride-1/2 convolutions on AVX-512 skip
 * the copy: f32-dwconv2d-chw-3x3-avx512.c reads the input in place. */
#include "conv.h"
#include "isa.h"
#include "common/team.h"
#include "mk_omp.h"

void mk_f32_grid_rows_scalar(const float *grid, int Wq, int OH, int OW, float *out,
                             const float *res, int act) {
    for (int oh = 0; oh < OH; oh++)
        for (int ow = 0; ow < OW; ow++) {
            float v = grid[(ptrdiff_t)oh * Wq + ow];
            if (res) v += res[(ptrdiff_t)oh * OW + ow];
            out[(ptrdiff_t)oh * OW + ow] = MK_CONV_ACT(v, act);
        }
}

void mk_f32_dwconv_row_scalar(int T, const float *ph, const ptrdiff_t *toff, const float *w,
                              float bias, int OW, float *out, const float *res, int act) {
    for (int ow = 0; ow < OW; ow++) {
        float acc = bias;
        for (int t = 0; t < T; t++) acc += w[t] * ph[toff[t] + ow];
        if (res) acc += res[ow];
        out[ow] = MK_CONV_ACT(acc, act);
    }
}

/* 3x3, stride 1 or 2 (both axes), dilation 1, unit column stride, any padding: a kernel that
 * reads the input in place (the table's dw_3x3, f32-dwconv2d-chw-3x3-avx512.c), no scratch. */
static int dwconv_direct3x3(const mk_conv_geom *g) {
    return g->KH == 3 && g->KW == 3 && g->dy == 1 && g->dx == 1 && g->sy == g->sx &&
           (g->sy == 1 || g->sy == 2) && g->sw == 1;
}

ptrdiff_t mk_dwconv_scratch(const mk_conv_geom *g) {
    /* the channel's phase image, then the output grid (OH x Wq) */
    return mk_conv_phase_size(g, 1) + (ptrdiff_t)g->OH * g->Wq + 64;
}


void mk_dwconv2d_f32(const mk_conv_geom *g, const float *x, const float *w, const float *bias,
                     float *scratch, float *out, const float *res, int act, int isa,
                     int nthreads) {
    const mk_conv_config *cfg = mk_conv_get_config(isa);
    mk_dw_row_fn *row = cfg->dw_row;
    mk_dw_grid_fn *rows = cfg->dw_grid;
    if (cfg->dw_3x3 && dwconv_direct3x3(g)) {
        const ptrdiff_t ohw = (ptrdiff_t)g->OH * g->OW;
        const int planes = g->N * g->C;
        if ((double)planes * ohw * 9 < 2e4) nthreads = 1;
        MK_TEAM_FOR(nthreads, 4)
        for (int pc = 0; pc < planes; pc++) {
            const int n = pc / g->C, c = pc % g->C;
            cfg->dw_3x3(x + n * g->sn + c * g->sc, g->sh, g->H, g->W, g->sy, g->pt, g->pl, g->OW,
                        0, g->OH, w + (ptrdiff_t)c * 9, bias ? bias[c] : 0.0f,
                        out + (ptrdiff_t)pc * ohw, g->OW, res ? res + (ptrdiff_t)pc * ohw : NULL,
                        g->OW, act);
        }
        MK_TEAM_FOR_END
        return;
    }
    /* the output grid is contiguous in the phase image: one pass over all its lanes */
    const int lanes = (g->OH - 1) * g->Wq + g->OW;
    const int T = g->KH * g->KW;
    const ptrdiff_t ohw = (ptrdiff_t)g->OH * g->OW;
    const ptrdiff_t per = mk_dwconv_scratch(g);
    const int planes = g->N * g->C;
    if ((double)planes * ohw * T < 2e4) nthreads = 1;
    ptrdiff_t toff[256]; /* the Python side limits KH*KW to 256 */
    for (int kh = 0, t = 0; kh < g->KH; kh++)
        for (int kw = 0; kw < g->KW; kw++, t++) {
            const int ry = kh * g->dy, rx = kw * g->dx;
            toff[t] = (ptrdiff_t)((ry % g->sy) * g->sx + rx % g->sx) * g->Hq * g->Wq +
                      (ptrdiff_t)(ry / g->sy) * g->Wq + rx / g->sx;
        }
    mk_team_clock clk;
    nthreads = mk_team_begin(nthreads, &clk);
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
    {
        float *ph = scratch + per * omp_get_thread_num();
        const ptrdiff_t phsize = mk_conv_phase_size(g, 1);
        float *grid = ph + phsize;
        for (ptrdiff_t i = g->plane; i < phsize; i++) ph[i] = 0.0f; /* slack read by tails */
#pragma omp for schedule(dynamic, 2) nowait
        for (int pc = 0; pc < planes; pc++) {
            const int n = pc / g->C, c = pc % g->C;
            mk_conv_phase_channel_f32(g, x + n * g->sn + c * g->sc, ph, 0.0f);
            float *o = out + (ptrdiff_t)pc * ohw;
            const float *r = res ? res + (ptrdiff_t)pc * ohw : NULL;
            if (g->Wq == g->OW) { /* no dropped grid columns: straight into the output */
                row(T, ph, toff, w + (ptrdiff_t)c * T, bias ? bias[c] : 0.0f, lanes, o, r, act);
            } else {
                row(T, ph, toff, w + (ptrdiff_t)c * T, bias ? bias[c] : 0.0f, lanes, grid, NULL,
                    MK_ACT_NONE);
                rows(grid, g->Wq, g->OH, g->OW, o, r, act);
            }
        }
        MK_TEAM_DONE(&clk);
    }
    mk_team_end(&clk);
}
