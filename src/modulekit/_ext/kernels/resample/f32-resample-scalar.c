/* Portable C row kernels of the 2-D resampling (see resample.h). */
#include "resample.h"

void mk_f32_lerp_row__scalar(size_t n, const float *row, const int32_t *x0, const int32_t *x1,
                             const float *w0, const float *w1, float *out)
{
    for (size_t i = 0; i < n; i++) {
        float t = row[x0[i]] * w0[i];
        t += row[x1[i]] * w1[i];
        out[i] = t;
    }
}

void mk_f32_blend_row__scalar(size_t n, const float *p, const float *q, float a, float b,
                              float *out)
{
    for (size_t i = 0; i < n; i++) {
        float t = p[i] * a;
        t += q[i] * b;
        out[i] = t;
    }
}

void mk_f32_gather_row__scalar(size_t n, const float *row, const int32_t *x, float *out)
{
    for (size_t i = 0; i < n; i++) out[i] = row[x[i]];
}

void mk_f32_wsum_rows__scalar(size_t n, size_t ntaps, const float *base, size_t stride,
                              const int32_t *idx, const float *w, size_t ws, float *out)
{
    const float *r0 = base + (size_t)idx[0] * stride;
    const float w0 = w[0];
    for (size_t i = 0; i < n; i++) out[i] = r0[i] * w0;
    for (size_t t = 1; t < ntaps; t++) {
        const float *r = base + (size_t)idx[t * ws] * stride;
        const float wt = w[t * ws];
        for (size_t i = 0; i < n; i++) out[i] += r[i] * wt;
    }
}

void mk_f32_wgather_row__scalar(size_t n, size_t ntaps, const float *row, const int32_t *idx,
                                const float *w, size_t ws, float *out)
{
    for (size_t o = 0; o < n; o++) {
        float acc = row[idx[o]] * w[o];
        for (size_t t = 1; t < ntaps; t++) acc += row[idx[t * ws + o]] * w[t * ws + o];
        out[o] = acc;
    }
}
