/* Depthwise convolution (groups == C_in == C_out), float32, NCHW: each (image, channel) plane
 * is copied into a per-thread phase image (zero padding, stride phases; it stays in L1/L2)
 * and every output row is produced by a row kernel vectorised over output columns, with the
 * bias, residual and activation fused. OpenMP over planes. */
#include "conv.h"
#include "isa.h"
#include "mk_omp.h"

void mk_f32_dwconv_row_avx512(int T, const float *ph, const ptrdiff_t *toff, const float *w,
                              float bias, int OW, float *out, const float *res, int act);
void mk_f32_dwconv_row_avx2(int T, const float *ph, const ptrdiff_t *toff, const float *w,
                            float bias, int OW, float *out, const float *res, int act);

static void dwconv_row_scalar(int T, const float *ph, const ptrdiff_t *toff, const float *w,
                              float bias, int OW, float *out, const float *res, int act) {
    for (int ow = 0; ow < OW; ow++) {
        float acc = bias;
        for (int t = 0; t < T; t++) acc += w[t] * ph[toff[t] + ow];
        if (res) acc += res[ow];
        out[ow] = mk_act_f32(acc, act);
    }
}

ptrdiff_t mk_dwconv_scratch(const mk_conv_geom *g) {
    return mk_conv_phase_size(g, 1) + 64;
}


void mk_dwconv2d_f32(const mk_conv_geom *g, const float *x, const float *w, const float *bias,
                     float *scratch, float *out, const float *res, int act, int isa,
                     int nthreads) {
    void (*row)(int, const float *, const ptrdiff_t *, const float *, float, int, float *,
                const float *, int) = dwconv_row_scalar;
    if (isa >= MK_ISA_AVX512)
        row = mk_f32_dwconv_row_avx512;
    else if (isa >= MK_ISA_AVX2)
        row = mk_f32_dwconv_row_avx2;
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
#pragma omp parallel num_threads(nthreads)
    {
        float *ph = scratch + per * omp_get_thread_num();
        ptrdiff_t roff[256];
        for (ptrdiff_t i = g->plane; i < per; i++) ph[i] = 0.0f; /* slack read by tails */
#pragma omp for schedule(dynamic, 2)
        for (int pc = 0; pc < planes; pc++) {
            const int n = pc / g->C, c = pc % g->C;
            mk_conv_phase_channel_f32(g, x + n * g->sn + c * g->sc, ph, 0.0f);
            float *o = out + (ptrdiff_t)pc * ohw;
            const float *r = res ? res + (ptrdiff_t)pc * ohw : NULL;
            for (int oh = 0; oh < g->OH; oh++) {
                for (int t = 0; t < T; t++) roff[t] = toff[t] + (ptrdiff_t)oh * g->Wq;
                row(T, ph, roff, w + (ptrdiff_t)c * T, bias ? bias[c] : 0.0f, g->OW,
                    o + (ptrdiff_t)oh * g->OW, r ? r + (ptrdiff_t)oh * g->OW : NULL, act);
            }
        }
    }
}
