/* Portable C recurrent cells (rnn.h), float32 and float64. The float32 cells evaluate the
 * nonlinearities in double precision with libm and round once. */
#include <math.h>
#include <stddef.h>

#include "rnn.h"

static inline double sig_d(double x) { return 1.0 / (1.0 + exp(-x)); }

#define MK_DEFINE_SCALAR_CELLS(T, SFX)                                                          \
    void mk_##SFX##_rnn_lstm__scalar(size_t m, size_t h, const void *xv, size_t ldx,            \
                                     const void *gv, size_t ldg, void *cv, size_t ldc,          \
                                     void *hv, size_t ldh, void *ov, size_t ldo) {              \
        for (size_t b = 0; b < m; b++) {                                                        \
            const T *x = (const T *)xv + b * ldx;                                               \
            const T *g = (const T *)gv + b * ldg;                                               \
            T *c = (T *)cv + b * ldc;                                                           \
            T *hs = (T *)hv + b * ldh;                                                          \
            T *o = ov ? (T *)ov + b * ldo : NULL;                                               \
            for (size_t j = 0; j < h; j++) {                                                    \
                const double ig = sig_d((double)x[j] + (double)g[j]);                           \
                const double fg = sig_d((double)x[h + j] + (double)g[h + j]);                   \
                const double gg = tanh((double)x[2 * h + j] + (double)g[2 * h + j]);            \
                const double og = sig_d((double)x[3 * h + j] + (double)g[3 * h + j]);           \
                const T cn = (T)(fg * (double)c[j] + ig * gg);                                  \
                const T hn = (T)(og * tanh((double)cn));                                        \
                c[j] = cn;                                                                      \
                hs[j] = hn;                                                                     \
                if (o)                                                                          \
                    o[j] = hn;                                                                  \
            }                                                                                   \
        }                                                                                       \
    }                                                                                           \
    void mk_##SFX##_rnn_gru__scalar(size_t m, size_t h, const void *xv, size_t ldx,             \
                                    const void *gv, size_t ldg, void *cv, size_t ldc,           \
                                    void *hv, size_t ldh, void *ov, size_t ldo) {               \
        (void)cv;                                                                               \
        (void)ldc;                                                                              \
        for (size_t b = 0; b < m; b++) {                                                        \
            const T *x = (const T *)xv + b * ldx;                                               \
            const T *g = (const T *)gv + b * ldg;                                               \
            T *hs = (T *)hv + b * ldh;                                                          \
            T *o = ov ? (T *)ov + b * ldo : NULL;                                               \
            for (size_t j = 0; j < h; j++) {                                                    \
                const double r = sig_d((double)x[j] + (double)g[j]);                           \
                const double z = sig_d((double)x[h + j] + (double)g[h + j]);                    \
                const double n = tanh((double)x[2 * h + j] + r * (double)g[2 * h + j]);         \
                const T hn = (T)(n + z * ((double)hs[j] - n));                                  \
                hs[j] = hn;                                                                     \
                if (o)                                                                          \
                    o[j] = hn;                                                                  \
            }                                                                                   \
        }                                                                                       \
    }                                                                                           \
    void mk_##SFX##_rnn_tanh__scalar(size_t m, size_t h, const void *xv, size_t ldx,            \
                                     const void *gv, size_t ldg, void *cv, size_t ldc,          \
                                     void *hv, size_t ldh, void *ov, size_t ldo) {              \
        (void)cv;                                                                               \
        (void)ldc;                                                                              \
        for (size_t b = 0; b < m; b++) {                                                        \
            const T *x = (const T *)xv + b * ldx;                                               \
            const T *g = (const T *)gv + b * ldg;                                               \
            T *hs = (T *)hv + b * ldh;                                                          \
            T *o = ov ? (T *)ov + b * ldo : NULL;                                               \
            for (size_t j = 0; j < h; j++) {                                                    \
                const T hn = (T)tanh((double)x[j] + (double)g[j]);                              \
                hs[j] = hn;                                                                     \
                if (o)                                                                          \
                    o[j] = hn;                                                                  \
            }                                                                                   \
        }                                                                                       \
    }                                                                                           \
    void mk_##SFX##_rnn_relu__scalar(size_t m, size_t h, const void *xv, size_t ldx,            \
                                     const void *gv, size_t ldg, void *cv, size_t ldc,          \
                                     void *hv, size_t ldh, void *ov, size_t ldo) {              \
        (void)cv;                                                                               \
        (void)ldc;                                                                              \
        for (size_t b = 0; b < m; b++) {                                                        \
            const T *x = (const T *)xv + b * ldx;                                               \
            const T *g = (const T *)gv + b * ldg;                                               \
            T *hs = (T *)hv + b * ldh;                                                          \
            T *o = ov ? (T *)ov + b * ldo : NULL;                                               \
            for (size_t j = 0; j < h; j++) {                                                    \
                const T s = x[j] + g[j];                                                        \
                const T hn = s > (T)0 ? s : (s == s ? (T)0 : s); /* NaN propagates */           \
                hs[j] = hn;                                                                     \
                if (o)                                                                          \
                    o[j] = hn;                                                                  \
            }                                                                                   \
        }                                                                                       \
    }

MK_DEFINE_SCALAR_CELLS(float, f32)
MK_DEFINE_SCALAR_CELLS(double, f64)
