/* Group normalisation drivers: the (n, g) groups on up to nthreads OpenMP threads, handed out
 * one at a time (a dynamic schedule: a thread the OS deschedules holds back one group, not a
 * fixed share); each group's moments in one read, then its channels normalised while the
 * group is still in cache. */
#include <math.h>

#include "common/team.h"
#include "mk_omp.h"
#include "norm.h"

/* A group's mean and 1 / sqrt(var + eps) from its sums of x - shift over span values (the
 * biased variance, clamped at 0) */
static void group_stats(size_t span, double shift, double sum, double sq, double eps,
                        double *mu, double *r)
{
    const double m = span ? sum / (double)span : 0.0;
    double var = span ? sq / (double)span - m * m : 0.0;
    if (var < 0.0) var = 0.0;
    *mu = shift + m;
    *r = 1.0 / sqrt(var + eps);
}

void mk_groupnorm_f32(int isa, size_t n, size_t c, size_t s, size_t groups, const float *x,
                      const float *gamma, const float *beta, double eps, float *y,
                      double *mean, double *rstd, int nthreads)
{
    const mk_norm_config *cfg = mk_norm_config_for(isa);
    const size_t cpg = c / groups, span = cpg * s;
    const size_t min_nt = mk_norm_streaming_min_bytes();
    const int stream = cfg->affine_nt && min_nt && n * c * s * sizeof(float) >= min_nt;
    const mk_affine_f32 affine = stream ? cfg->affine_nt : cfg->affine;
    ptrdiff_t i, total = (ptrdiff_t)(n * groups);
    MK_TEAM_FOR(nthreads, 1)
    for (i = 0; i < total; i++) {
        const float *xg = x + (size_t)i * span;
        float *yg = y + (size_t)i * span;
        const size_t g = (size_t)i % groups;
        double sum = 0.0, sq = 0.0;
        /* shifted by the group's first value: a large mean does not cancel the variance */
        const float shift = span ? xg[0] : 0.0f;
        cfg->moments(span, xg, shift, &sum, &sq);
        double mu, r;
        group_stats(span, (double)shift, sum, sq, eps, &mu, &r);
        if (mean) mean[i] = mu;
        if (rstd) rstd[i] = r;
        for (size_t k = 0; k < cpg; k++) {
            const size_t ch = g * cpg + k;
            const double sc = r * (gamma ? (double)gamma[ch] : 1.0);
            const double b = beta ? (double)beta[ch] : 0.0;
            affine(s, xg + k * s, (float)mu, (float)sc, (float)b, yg + k * s);
        }
        if (stream) cfg->sfence(); /* each thread orders its own streaming stores */
    }
    MK_TEAM_FOR_END
}

void mk_groupnorm_f64(size_t n, size_t c, size_t s, size_t groups, const double *x,
                      const double *gamma, const double *beta, double eps, double *y,
                      double *mean, double *rstd, int nthreads)
{
    const size_t cpg = c / groups, span = cpg * s;
    ptrdiff_t i, total = (ptrdiff_t)(n * groups);
    MK_TEAM_FOR(nthreads, 1)
    for (i = 0; i < total; i++) {
        const double *xg = x + (size_t)i * span;
        double *yg = y + (size_t)i * span;
        const size_t g = (size_t)i % groups;
        const double shift = span ? xg[0] : 0.0;
        double sum = 0.0, sq = 0.0;
        for (size_t j = 0; j < span; j++) {
            const double d = xg[j] - shift;
            sum += d;
            sq += d * d;
        }
        double mu, r;
        group_stats(span, shift, sum, sq, eps, &mu, &r);
        if (mean) mean[i] = mu;
        if (rstd) rstd[i] = r;
        for (size_t k = 0; k < cpg; k++) {
            const size_t ch = g * cpg + k;
            const double sc = r * (gamma ? gamma[ch] : 1.0);
            const double b = beta ? beta[ch] : 0.0;
            const double *xc = xg + k * s;
            double *yc = yg + k * s;
            for (size_t j = 0; j < s; j++) yc[j] = (xc[j] - mu) * sc + b;
        }
    }
    MK_TEAM_FOR_END
}
