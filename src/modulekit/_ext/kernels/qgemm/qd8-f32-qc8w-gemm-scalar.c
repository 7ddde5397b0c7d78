/* Portable qd8-f32-qc8w kernels: the row quantizer and a 4x16 GEMM tile (see qgemm.h). Every
 * ISA path computes the same integers and the same epilogue (fmaf), so their results are
 * bit-identical. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "common/act.h"
#include "qgemm.h"

float mk_qd8_quantize__scalar(size_t n, size_t kp, const float *x, uint8_t *q) {
    float amax = 0.0f;
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        const float v = fabsf(x[i]);
        bad |= !(v <= FLT_MAX);
        amax = v > amax ? v : amax;
    }
    if (bad) return NAN;
    const float inv = 127.0f / amax;
    if (!(inv <= FLT_MAX)) { /* an all-zero row, or one too small to scale: zeros */
        memset(q, 128, kp);
        return 1.0f;
    }
    for (size_t i = 0; i < n; i++) {
        float r = nearbyintf(x[i] * inv);
        r = r > 127.0f ? 127.0f : (r < -127.0f ? -127.0f : r);
        q[i] = (uint8_t)((int)r + 128);
    }
    for (size_t i = n; i < kp; i++) q[i] = 128;
    return amax / 127.0f;
}

#define NR 16

void mk_qd8_f32_qc8w_gemm_4x16__scalar(size_t rows, size_t nc, size_t kp, const uint8_t *a,
                                        size_t lda, const float *ascale, const void *panel,
                                        void *c, size_t ldc, const uint8_t *res,
                                        const mk_qgemm_epilogue *ep) {
    const int32_t *corr = (const int32_t *)panel;
    const float *ws = (const float *)(corr + NR);
    const float *bias = ws + NR;
    const int8_t *w = (const int8_t *)(bias + NR);
    for (size_t r = 0; r < rows; r++) {
        int32_t acc[NR] = {0};
        const uint8_t *ar = a + r * lda;
        for (size_t g = 0; g < kp / 4; g++) {
            const int8_t *wg = w + g * 4 * NR;
            for (size_t j = 0; j < NR; j++)
                for (size_t t = 0; t < 4; t++)
                    acc[j] += (int32_t)ar[4 * g + t] * (int32_t)wg[4 * j + t];
        }
        const float sx = ascale[r * ep->ascale_step];
        for (size_t j = 0; j < nc; j++) {
            float y = fmaf((float)(acc[j] - corr[j]), sx * ws[j], bias[j]);
            if (res != NULL)
                y = fmaf((float)((int32_t)res[r * ep->ldr + j] - ep->res_zp), ep->res_scale, y);
            y = ep->lo > y ? ep->lo : y;
            y = ep->hi < y ? ep->hi : y;
            if (ep->out_u8)
                ((uint8_t *)c)[r * ldc + j] = mk_qu8_requantize(y, ep->out_inv_scale, ep->out_zp);
            else
                ((float *)c)[r * ldc + j] = ep->act > MK_ACT_CLAMP
                                                ? mk_act_f32x1(y, ep->act, 0.0f, 0.0f) : y;
        }
    }
}
