/* Generic (portable C) row kernels and the float64 paths: accumulations in double. */
#include <math.h>
#include <string.h>

#include "common/act.h"
#include "common/half.h"
#include "ops.h"

void mk_layernorm_row_f32_scalar(size_t n, const float *x, const float *res, const float *gamma,
                                 const float *beta, float eps, float *y)
{
    /* one read of x (+res): sums of the values shifted by the first one (no cancellation for
     * rows with a large mean); the second pass reads y, which is still in L1 */
    double shift, sum = 0.0, sq = 0.0;
    size_t i;
    shift = (double)x[0] + (res ? (double)res[0] : 0.0);
    for (i = 0; i < n; i++) {
        float s = res ? x[i] + res[i] : x[i];
        double d = (double)s - shift;
        y[i] = s;
        sum += d;
        sq += d * d;
    }
    double m = sum / (double)n;
    double var = sq / (double)n - m * m;
    if (var < 0.0) var = 0.0;
    float mean = (float)(shift + m);
    float rstd = (float)(1.0 / sqrt(var + (double)eps));
    for (i = 0; i < n; i++) {
        float v = (y[i] - mean) * rstd;
        if (gamma) v *= gamma[i];
        if (beta) v += beta[i];
        y[i] = v;
    }
}

void mk_softmax_row_f32_scalar(size_t n, float *x, const float *mask, float scale)
{
    size_t i;
    float mx = -INFINITY;
    for (i = 0; i < n; i++) {
        float v = x[i] * scale + (mask ? mask[i] : 0.0f);
        x[i] = v;
        if (v > mx) mx = v;
    }
    double sum = 0.0;
    for (i = 0; i < n; i++) {
        float e = mk_exp_f32x1(x[i] - mx); /* the SIMD paths' exp, bit for bit */
        x[i] = e;
        sum += e;
    }
    float inv = (float)(1.0 / sum);
    for (i = 0; i < n; i++) x[i] *= inv;
}

void mk_f16_widen_scalar(size_t n, const uint16_t *src, float *dst, int accumulate)
{
    if (accumulate)
        for (size_t i = 0; i < n; i++) dst[i] += mk_f16_to_f32(src[i]);
    else
        for (size_t i = 0; i < n; i++) dst[i] = mk_f16_to_f32(src[i]);
}

/* ---- float64 ---------------------------------------------------------------------------- */
static void layernorm_row_f64(size_t n, const double *x, const double *res, const double *gamma,
                              const double *beta, double eps, double *y)
{
    double shift = x[0] + (res ? res[0] : 0.0), sum = 0.0, sq = 0.0;
    size_t i;
    for (i = 0; i < n; i++) {
        double s = res ? x[i] + res[i] : x[i];
        double d = s - shift;
        y[i] = s;
        sum += d;
        sq += d * d;
    }
    double m = sum / (double)n;
    double var = sq / (double)n - m * m;
    if (var < 0.0) var = 0.0;
    double mean = shift + m, rstd = 1.0 / sqrt(var + eps);
    for (i = 0; i < n; i++) {
        double v = (y[i] - mean) * rstd;
        if (gamma) v *= gamma[i];
        if (beta) v += beta[i];
        y[i] = v;
    }
}

#include "common/team.h"
#include "mk_omp.h"

void mk_layernorm_f64(size_t rows, size_t n, const double *x, size_t ldx, const double *res,
                      size_t ldr, const double *gamma, const double *beta, double eps,
                      double *y, size_t ldy, int nthreads)
{
    ptrdiff_t r, nr = (ptrdiff_t)rows;
    MK_TEAM_FOR(nthreads, 4)
    for (r = 0; r < nr; r++)
        layernorm_row_f64(n, x + (size_t)r * ldx, res ? res + (size_t)r * ldr : NULL, gamma,
                          beta, eps, y + (size_t)r * ldy);
    MK_TEAM_FOR_END
}

void mk_softmax_row_f64(size_t n, double *x, const double *mask, double scale)
{
    size_t i;
    double mx = -INFINITY, sum = 0.0;
    for (i = 0; i < n; i++) {
        double v = x[i] * scale + (mask ? mask[i] : 0.0);
        x[i] = v;
        if (v > mx) mx = v;
    }
    for (i = 0; i < n; i++) {
        x[i] = exp(x[i] - mx);
        sum += x[i];
    }
    double inv = 1.0 / sum;
    for (i = 0; i < n; i++) x[i] *= inv;
}

void mk_softmax_f64(size_t na, size_t nb, size_t nc, size_t n, double *x, ptrdiff_t sx0,
                    ptrdiff_t sx1, ptrdiff_t sx2, const double *mask, ptrdiff_t sm0,
                    ptrdiff_t sm1, ptrdiff_t sm2, double scale, int nthreads)
{
    ptrdiff_t r, total = (ptrdiff_t)(na * nb * nc);
    MK_TEAM_FOR(nthreads, 4)
    for (r = 0; r < total; r++) {
        ptrdiff_t a = r / (ptrdiff_t)(nb * nc), b = (r / (ptrdiff_t)nc) % (ptrdiff_t)nb,
                  c = r % (ptrdiff_t)nc;
        mk_softmax_row_f64(n, x + a * sx0 + b * sx1 + c * sx2,
                        mask ? mask + a * sm0 + b * sm1 + c * sm2 : NULL, scale);
    }
    MK_TEAM_FOR_END
}
