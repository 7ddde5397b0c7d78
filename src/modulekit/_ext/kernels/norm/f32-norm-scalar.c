/* Portable C span kernels of the group normalisation (the generic level). */
#include "norm.h"

void mk_moments_f32_scalar(size_t n, const float *x, float shift, double *sum, double *sumsq)
{
    double s = 0.0, q = 0.0;
    size_t i = 0;
    while (i < n) {
        size_t end = n - i > MK_NORM_BLOCK ? i + MK_NORM_BLOCK : n;
        float bs[4] = {0.0f, 0.0f, 0.0f, 0.0f}, bq[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (; i + 4 <= end; i += 4)
            for (int k = 0; k < 4; k++) {
                float d = x[i + k] - shift;
                bs[k] += d;
                bq[k] += d * d;
            }
        for (; i < end; i++) {
            float d = x[i] - shift;
            bs[0] += d;
            bq[0] += d * d;
        }
        s += (double)bs[0] + bs[1] + bs[2] + bs[3];
        q += (double)bq[0] + bq[1] + bq[2] + bq[3];
    }
    *sum += s;
    *sumsq += q;
}

void mk_affine_f32_scalar(size_t n, const float *x, float mean, float scale, float bias,
                          float *y)
{
    for (size_t i = 0; i < n; i++) y[i] = (x[i] - mean) * scale + bias;
}
