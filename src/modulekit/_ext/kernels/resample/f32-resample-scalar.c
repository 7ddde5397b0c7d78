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
