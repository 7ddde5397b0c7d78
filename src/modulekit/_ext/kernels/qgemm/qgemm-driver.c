/* qd8-f32-qc8w driver (see qgemm.h): packing, then per call the rows of x quantized into a
 * per-call buffer and the output computed in tiles of (MC rows, a block of panels) handed
 * out from a shared counter. Each output element is one kernel's integer sum and epilogue,
 * whatever the tiling or the thread count, so results do not depend on either. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mk_omp.h"
#include "qgemm.h"

/* Below this many multiply-adds a call stays on the calling thread (as the float GEMM). */
#define MK_QD8_PARALLEL_MIN_MACS (1u << 19)
#define MK_QD8_MC 64 /* rows per tile: MC x KP bytes of quantized rows stay in L2 */
#define MK_QD8_PANELS 4 /* panels per tile */

size_t mk_qd8_panel_stride(const mk_qd8_config *cfg, size_t k) {
    const size_t bytes = cfg->nr * 12 + mk_qd8_kp(cfg, k) * cfg->nr;
    return (bytes + 63) & ~(size_t)63;
}

size_t mk_qd8_packed_size(const mk_qd8_config *cfg, size_t n, size_t k) {
    const size_t panels = (n + cfg->nr - 1) / cfg->nr;
    return (panels ? panels : 1) * mk_qd8_panel_stride(cfg, k);
}

void mk_qd8_pack(const mk_qd8_config *cfg, size_t n, size_t k, const int8_t *qw,
                 const float *scale, const float *bias, void *packed) {
    mk_qd8_pack_zp(cfg, n, k, qw, scale, bias, 128, packed);
}

void mk_qd8_pack_zp(const mk_qd8_config *cfg, size_t n, size_t k, const int8_t *qw,
                    const float *scale, const float *bias, int32_t zp, void *packed) {
    const size_t nr = cfg->nr, ps = mk_qd8_panel_stride(cfg, k);
    const size_t panels = (n + nr - 1) / nr;
    memset(packed, 0, mk_qd8_packed_size(cfg, n, k));
    for (size_t p = 0; p < panels; p++) {
        unsigned char *base = (unsigned char *)packed + p * ps;
        int32_t *corr = (int32_t *)base;
        float *ws = (float *)(corr + nr), *bs = ws + nr;
        int8_t *w = (int8_t *)(bs + nr);
        for (size_t j = 0; j < nr && p * nr + j < n; j++) {
            const size_t col = p * nr + j;
            const int8_t *row = qw + col * k;
            int32_t sum = 0;
            for (size_t kk = 0; kk < k; kk++) {
                sum += row[kk];
                w[(kk / 4) * 4 * nr + 4 * j + kk % 4] = row[kk];
            }
            corr[j] = zp * sum;
            ws[j] = scale[col];
            bs[j] = bias != NULL ? bias[col] : 0.0f;
        }
    }
}

void mk_qd8_unpack(const mk_qd8_config *cfg, size_t n, size_t k, const void *packed,
                   int8_t *qw, float *scale, float *bias) {
    const size_t nr = cfg->nr, ps = mk_qd8_panel_stride(cfg, k);
    for (size_t col = 0; col < n; col++) {
        const size_t p = col / nr, j = col % nr;
        const unsigned char *base = (const unsigned char *)packed + p * ps;
        const float *ws = (const float *)((const int32_t *)base + nr), *bs = ws + nr;
        const int8_t *w = (const int8_t *)(bs + nr);
        for (size_t kk = 0; kk < k; kk++) qw[col * k + kk] = w[(kk / 4) * 4 * nr + 4 * j + kk % 4];
        scale[col] = ws[j];
        if (bias != NULL) bias[col] = bs[j];
    }
}

int mk_qd8_gemm_run(const mk_qd8_config *cfg, size_t m, size_t n, size_t k, const float *x,
                    size_t ldx, const void *packed, float *y, size_t ldc, float lo, float hi,
                    int act, int nthreads) {
    if (m == 0 || n == 0) return 0;
    const size_t kp = mk_qd8_kp(cfg, k), lda = (kp + 63) & ~(size_t)63;
    const size_t nr = cfg->nr, mr = cfg->mr, ps = mk_qd8_panel_stride(cfg, k);
    const size_t panels = (n + nr - 1) / nr;
    /* rows rounded up to mr, the padding rows zero (128): a kernel may read a whole block */
    const size_t mpad = (m + mr - 1) / mr * mr;
    uint8_t *qa = (uint8_t *)aligned_alloc(64, mpad * lda);
    float *sx = (float *)malloc(m * sizeof(float));
    if (qa == NULL || sx == NULL) {
        free(qa);
        free(sx);
        return -1;
    }
    const double macs = (double)m * (double)n * (double)(k ? k : 1);
    const int nt = macs < MK_QD8_PARALLEL_MIN_MACS ? 1 : nthreads;
    const size_t rblocks = (m + MK_QD8_MC - 1) / MK_QD8_MC;
    const size_t pblocks = (panels + MK_QD8_PANELS - 1) / MK_QD8_PANELS;
    const long tiles = (long)(rblocks * pblocks);
    memset(qa + m * lda, 128, (mpad - m) * lda);
    const mk_qgemm_epilogue ep = {1, lo, hi, 0, 0.0f, 0, 0, 0.0f, 0, act};
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
#pragma omp for schedule(dynamic, 8)
        for (long r = 0; r < (long)m; r++) {
            uint8_t *row = qa + (size_t)r * lda;
            sx[r] = cfg->quantize(k, kp, x + (size_t)r * ldx, row);
            if (isnan(sx[r])) memset(row, 128, kp); /* computed, then overwritten with NaN */
        }
        if (cfg->begin != NULL) cfg->begin();
#pragma omp for schedule(dynamic, 1)
        for (long t = 0; t < tiles; t++) {
            const size_t rb = (size_t)t / pblocks, pb = (size_t)t % pblocks;
            const size_t r0 = rb * MK_QD8_MC, r1 = r0 + MK_QD8_MC < m ? r0 + MK_QD8_MC : m;
            const size_t p0 = pb * MK_QD8_PANELS;
            const size_t p1 = p0 + MK_QD8_PANELS < panels ? p0 + MK_QD8_PANELS : panels;
            for (size_t p = p0; p < p1; p++) {
                const size_t nc = n - p * nr < nr ? n - p * nr : nr;
                const void *panel = (const unsigned char *)packed + p * ps;
                for (size_t r = r0; r < r1; r += mr) {
                    const size_t rows = r1 - r < mr ? r1 - r : mr;
                    cfg->ukernel(rows, nc, kp, qa + r * lda, lda, sx + r, panel,
                                 y + r * ldc + p * nr, ldc, NULL, &ep);
                }
            }
        }
        if (cfg->end != NULL) cfg->end();
    }
    for (size_t r = 0; r < m; r++)
        if (isnan(sx[r]))
            for (size_t j = 0; j < n; j++) y[r * ldc + j] = NAN;
    free(qa);
    free(sx);
    return 0;
}
