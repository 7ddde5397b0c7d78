/* float64 convolution: a direct loop (float64 models are for checking, not speed); OpenMP over
 * (image, output channel) planes. */
#include "conv.h"
#include "common/team.h"
#include "mk_omp.h"

void mk_conv2d_f64(const mk_conv_geom *g, const double *x, int groups, int Cout,
                   const double *w, const double *bias, double *out, const double *res,
                   int act, int nthreads) {
    const int cin_g = g->C / groups, cout_g = Cout / groups;
    const ptrdiff_t ohw = (ptrdiff_t)g->OH * g->OW;
    const int planes = g->N * Cout;
    if ((double)planes * ohw * cin_g * g->KH * g->KW < 1e5) nthreads = 1;
    MK_TEAM_FOR(nthreads, 1)
    for (int pc = 0; pc < planes; pc++) {
        const int n = pc / Cout, co = pc % Cout, grp = co / cout_g;
        const double *wc = w + (ptrdiff_t)co * cin_g * g->KH * g->KW;
        double *o = out + (ptrdiff_t)pc * ohw;
        const double *r = res ? res + (ptrdiff_t)pc * ohw : NULL;
        for (int oh = 0; oh < g->OH; oh++) {
            for (int ow = 0; ow < g->OW; ow++) {
                double acc = bias ? bias[co] : 0.0;
                for (int ci = 0; ci < cin_g; ci++) {
                    const double *xc = x + n * g->sn + (grp * cin_g + ci) * g->sc;
                    const double *wk = wc + (ptrdiff_t)ci * g->KH * g->KW;
                    for (int kh = 0; kh < g->KH; kh++) {
                        const int ih = oh * g->sy - g->pt + kh * g->dy;
                        if (ih < 0 || ih >= g->H) continue;
                        for (int kw = 0; kw < g->KW; kw++) {
                            const int iw = ow * g->sx - g->pl + kw * g->dx;
                            if (iw < 0 || iw >= g->W) continue;
                            acc += wk[kh * g->KW + kw] * xc[ih * g->sh + iw * g->sw];
                        }
                    }
                }
                if (r) acc += r[(ptrdiff_t)oh * g->OW + ow];
                o[(ptrdiff_t)oh * g->OW + ow] = MK_CONV_ACT_F64(acc, act);
            }
        }
    }
    MK_TEAM_FOR_END
}
