/* Pooling and per-channel scale/shift (batch-norm inference), NCHW, float32 and float64.
 * Window rules follow torch's CPU kernels exactly (max: NaN propagates, windows clipped to the
 * input, dilation; avg: pool size counted before clipping for count_include_pad; adaptive:
 * [floor(i*H/OH), ceil((i+1)*H/OH))). OpenMP over (image, channel) planes; the output-size
 * formulas (ceil_mode's last-window rule included) are computed by the caller. */
#include <math.h>
#include <stdlib.h>

#include "conv.h"
#include "mk_omp.h"

#define PLANE_THREADS(g, work) ((double)(g)->N * (g)->C * (work) < 3e4 ? 1 : nthreads)

/* Max pooling, one output row at a time in three vectorisable passes over row buffers:
 * (1) the max over the window's input rows into buf (the columns outside the input hold -inf,
 * which is what torch's clipping of the window amounts to for a max), (2) the max over each
 * window's columns at every start column into hm, (3) the strided pick out[ow] = hm[ow*sx].
 * NaN propagates as in torch (a NaN anywhere in the window gives NaN). */
#define MK_MAXNAN(v, m) (((v) > (m)) | ((v) != (v)) ? (v) : (m))
#define DEFINE_MAX_POOL(NAME, T)                                                              \
    void NAME(const mk_conv_geom *g, const T *x, T *out, int nthreads) {                      \
        const ptrdiff_t ohw = (ptrdiff_t)g->OH * g->OW;                                       \
        const int planes = g->N * g->C;                                                       \
        const int nt = PLANE_THREADS(g, (double)ohw * g->KH * g->KW);                         \
        /* padded row: [0, pl) and [pl + W, nb) are -inf; windows start at ow*sx */           \
        const int span = (g->OW - 1) * g->sx + 1, reach = (g->KW - 1) * g->dx;                \
        int nb = span + reach;                                                                \
        if (nb < g->pl + g->W) nb = g->pl + g->W;                                             \
        _Pragma("omp parallel num_threads(nt)")                                               \
        {                                                                                     \
            T *buf = (T *)malloc(sizeof(T) * ((size_t)nb + (size_t)span));                    \
            T *hm = buf ? buf + nb : NULL;                                                    \
            if (buf) {                                                                        \
                for (int i = 0; i < g->pl; i++) buf[i] = -INFINITY;                           \
                for (int i = g->pl + g->W; i < nb; i++) buf[i] = -INFINITY;                   \
            }                                                                                 \
            _Pragma("omp for schedule(dynamic, 4)")                                           \
            for (int pc = 0; pc < planes; pc++) {                                             \
                const T *xp = x + (pc / g->C) * g->sn + (pc % g->C) * g->sc;                  \
                T *o = out + (ptrdiff_t)pc * ohw;                                             \
                for (int oh = 0; oh < g->OH; oh++) {                                          \
                    int h0 = oh * g->sy - g->pt;                                              \
                    const int h1 = h0 + (g->KH - 1) * g->dy + 1 < g->H                        \
                                       ? h0 + (g->KH - 1) * g->dy + 1 : g->H;                 \
                    while (h0 < 0) h0 += g->dy;                                               \
                    if (!buf) { /* no row buffers (out of memory): the direct walk */         \
                        for (int ow = 0; ow < g->OW; ow++) {                                  \
                            int w0 = ow * g->sx - g->pl;                                      \
                            const int w1 = w0 + reach + 1 < g->W ? w0 + reach + 1 : g->W;     \
                            while (w0 < 0) w0 += g->dx;                                       \
                            T m = -INFINITY;                                                  \
                            for (int h = h0; h < h1; h += g->dy)                              \
                                for (int w = w0; w < w1; w += g->dx) {                        \
                                    const T v = xp[h * g->sh + w * g->sw];                    \
                                    m = MK_MAXNAN(v, m);                                      \
                                }                                                             \
                            o[(ptrdiff_t)oh * g->OW + ow] = m;                                \
                        }                                                                     \
                        continue;                                                             \
                    }                                                                         \
                    T *row = buf + g->pl;                                                     \
                    if (h0 >= h1) { /* every row of the window is padding (dilation) */       \
                        for (int ow = 0; ow < g->OW; ow++)                                    \
                            o[(ptrdiff_t)oh * g->OW + ow] = -INFINITY;                        \
                        continue;                                                             \
                    }                                                                         \
                    const T *r0 = xp + h0 * g->sh;                                            \
                    for (int w = 0; w < g->W; w++) row[w] = r0[w * g->sw];                    \
                    for (int h = h0 + g->dy; h < h1; h += g->dy) {                            \
                        const T *xr = xp + h * g->sh;                                         \
                        if (g->sw == 1) {                                                     \
                            for (int w = 0; w < g->W; w++) row[w] = MK_MAXNAN(xr[w], row[w]); \
                        } else {                                                              \
                            for (int w = 0; w < g->W; w++)                                    \
                                row[w] = MK_MAXNAN(xr[w * g->sw], row[w]);                    \
                        }                                                                     \
                    }                                                                         \
                    for (int w = 0; w < span; w++) hm[w] = buf[w];                            \
                    for (int j = 1; j < g->KW; j++) {                                         \
                        const T *bj = buf + j * g->dx;                                        \
                        for (int w = 0; w < span; w++) hm[w] = MK_MAXNAN(bj[w], hm[w]);       \
                    }                                                                         \
                    T *orow = o + (ptrdiff_t)oh * g->OW;                                      \
                    for (int ow = 0; ow < g->OW; ow++) orow[ow] = hm[ow * g->sx];             \
                }                                                                             \
            }                                                                                 \
            free(buf);                                                                        \
        }                                                                                     \
    }

DEFINE_MAX_POOL(mk_max_pool2d_f32, float)
DEFINE_MAX_POOL(mk_max_pool2d_f64, double)

#define DEFINE_AVG_POOL(NAME, T)                                                              \
    void NAME(const mk_conv_geom *g, const T *x, T *out, int count_include_pad, int divisor, \
              int nthreads) {                                                                 \
        const ptrdiff_t ohw = (ptrdiff_t)g->OH * g->OW;                                       \
        const int planes = g->N * g->C;                                                       \
        const int nt = PLANE_THREADS(g, (double)ohw * g->KH * g->KW);                         \
        _Pragma("omp parallel for schedule(dynamic, 4) num_threads(nt)")                          \
        for (int pc = 0; pc < planes; pc++) {                                                 \
            const T *xp = x + (pc / g->C) * g->sn + (pc % g->C) * g->sc;                      \
            T *o = out + (ptrdiff_t)pc * ohw;                                                 \
            for (int oh = 0; oh < g->OH; oh++) {                                              \
                int h0 = oh * g->sy - g->pt;                                                  \
                int h1 = h0 + g->KH < g->H + g->pb ? h0 + g->KH : g->H + g->pb;               \
                const int ph = h1 - h0;                                                       \
                h0 = h0 < 0 ? 0 : h0;                                                         \
                h1 = h1 > g->H ? g->H : h1;                                                   \
                for (int ow = 0; ow < g->OW; ow++) {                                          \
                    int w0 = ow * g->sx - g->pl;                                              \
                    int w1 = w0 + g->KW < g->W + g->pr ? w0 + g->KW : g->W + g->pr;           \
                    const int pw = w1 - w0;                                                   \
                    w0 = w0 < 0 ? 0 : w0;                                                     \
                    w1 = w1 > g->W ? g->W : w1;                                               \
                    T s = 0;                                                                  \
                    for (int h = h0; h < h1; h++) {                                           \
                        const T *xr = xp + h * g->sh;                                         \
                        for (int w = w0; w < w1; w++) s += xr[w * g->sw];                     \
                    }                                                                         \
                    T d;                                                                      \
                    if (divisor)                                                              \
                        d = (T)divisor;                                                       \
                    else if (count_include_pad)                                               \
                        d = (T)(ph * pw);                                                     \
                    else                                                                      \
                        d = (T)((h1 - h0) * (w1 - w0));                                       \
                    o[(ptrdiff_t)oh * g->OW + ow] = s / d;                                    \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
    }

DEFINE_AVG_POOL(mk_avg_pool2d_f32, float)
DEFINE_AVG_POOL(mk_avg_pool2d_f64, double)

#define DEFINE_ADAPTIVE_AVG(NAME, T)                                                          \
    void NAME(const mk_conv_geom *g, const T *x, T *out, int nthreads) {                      \
        const ptrdiff_t ohw = (ptrdiff_t)g->OH * g->OW;                                       \
        const int planes = g->N * g->C;                                                       \
        const int nt = PLANE_THREADS(g, (double)g->H * g->W);                                 \
        _Pragma("omp parallel for schedule(dynamic, 4) num_threads(nt)")                          \
        for (int pc = 0; pc < planes; pc++) {                                                 \
            const T *xp = x + (pc / g->C) * g->sn + (pc % g->C) * g->sc;                      \
            T *o = out + (ptrdiff_t)pc * ohw;                                                 \
            for (int oh = 0; oh < g->OH; oh++) {                                              \
                const int h0 = (int)(((long long)oh * g->H) / g->OH);                         \
                const int h1 = (int)(((long long)(oh + 1) * g->H + g->OH - 1) / g->OH);       \
                for (int ow = 0; ow < g->OW; ow++) {                                          \
                    const int w0 = (int)(((long long)ow * g->W) / g->OW);                     \
                    const int w1 = (int)(((long long)(ow + 1) * g->W + g->OW - 1) / g->OW);   \
                    T s = 0;                                                                  \
                    for (int h = h0; h < h1; h++) {                                           \
                        const T *xr = xp + h * g->sh;                                         \
                        for (int w = w0; w < w1; w++) s += xr[w * g->sw];                     \
                    }                                                                         \
                    o[(ptrdiff_t)oh * g->OW + ow] = s / (T)((h1 - h0) * (w1 - w0));           \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
    }

DEFINE_ADAPTIVE_AVG(mk_adaptive_avg_pool2d_f32, float)
DEFINE_ADAPTIVE_AVG(mk_adaptive_avg_pool2d_f64, double)

#define DEFINE_SCALE_SHIFT(NAME, T, ACT)                                                      \
    void NAME(const mk_conv_geom *g, const T *x, const T *scale, const T *shift, T *y,        \
              int act, int nthreads) {                                                        \
        const ptrdiff_t hw = (ptrdiff_t)g->H * g->W;                                          \
        const int planes = g->N * g->C;                                                       \
        const int nt = PLANE_THREADS(g, (double)hw);                                          \
        _Pragma("omp parallel for schedule(dynamic, 4) num_threads(nt)")                          \
        for (int pc = 0; pc < planes; pc++) {                                                 \
            const int c = pc % g->C;                                                          \
            const T *xp = x + (pc / g->C) * g->sn + c * g->sc;                                \
            T *o = y + (ptrdiff_t)pc * hw;                                                    \
            const T a = scale[c], b = shift[c];                                               \
            if (g->sw == 1 && g->sh == g->W) {                                                \
                if (act == MK_ACT_NONE) {                                                     \
                    for (ptrdiff_t i = 0; i < hw; i++) o[i] = xp[i] * a + b;                  \
                } else {                                                                      \
                    for (ptrdiff_t i = 0; i < hw; i++) o[i] = ACT(xp[i] * a + b, act);        \
                }                                                                             \
            } else {                                                                          \
                for (int h = 0; h < g->H; h++)                                                \
                    for (int w = 0; w < g->W; w++)                                            \
                        o[(ptrdiff_t)h * g->W + w] = ACT(xp[h * g->sh + w * g->sw] * a + b, act); \
            }                                                                                 \
        }                                                                                     \
    }

DEFINE_SCALE_SHIFT(mk_scale_shift_f32, float, MK_CONV_ACT)
DEFINE_SCALE_SHIFT(mk_scale_shift_f64, double, MK_CONV_ACT_F64)
