/* qd8-f32-qc8w driver (see qgemm.h): packing, then per call the rows of x quantized into a
 * per-call buffer and the output computed in tiles of (MC rows, a block of panels) handed
 * out from a shared counter. Each output element is one kernel's integer sum and epilogue,
 * whatever the tiling or the thread count, so results do not depend on either. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/act.h"
#include "common/team.h"
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

/* Outliers (issue #20's real MiniLM: a [CLS] token's LayerNorm output holds one value near
 * 17.5 among values of median magnitude 0.06, so its per-row scale rounded most of the row to
 * zero: sentence cosine 0.975 to float32): the values of a row whose magnitude exceeds
 * MK_QD8_OUTLIER_RATIO times the row's mean magnitude, at most MK_QD8_OUTLIERS of them (the
 * largest), are set aside before the row is quantized and added back in float32 (value x the
 * column's dequantized weight, fmaf) between the bias and the clamp (LLM.int8()'s
 * decomposition, per row at run time). Ordinary rows (largest value a few times the mean)
 * pay one more pass over their floats; a row with outliers is computed a second time. */
#define MK_QD8_OUTLIERS 4
#define MK_QD8_OUTLIER_RATIO 24.0f

/* The outliers of row x (n finite values or not: a non-finite row has none, its result is
 * NaN): their count; idx / val hold them, largest magnitude first. */
static int row_outliers(size_t n, const float *x, uint32_t *idx, float *val) {
    float s8[8] = {0}, m8[8] = {0}; /* 8 lanes (vectorised), then combined in one order */
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) {
            const float a = fabsf(x[i + l]);
            s8[l] += a;
            m8[l] = a > m8[l] ? a : m8[l];
        }
    for (; i < n; i++) {
        const float a = fabsf(x[i]);
        s8[0] += a;
        m8[0] = a > m8[0] ? a : m8[0];
    }
    float sum = 0.0f, amax = 0.0f;
    for (int l = 0; l < 8; l++) {
        sum += s8[l];
        amax = m8[l] > amax ? m8[l] : amax;
    }
    const float thr = MK_QD8_OUTLIER_RATIO * (sum / (float)n);
    if (!(amax > thr) || !(sum <= FLT_MAX)) return 0; /* none, or NaN / infinity */
    int cnt = 0;
    float mag[MK_QD8_OUTLIERS];
    for (i = 0; i < n; i++) {
        const float a = fabsf(x[i]);
        if (!(a > thr) || (cnt == MK_QD8_OUTLIERS && a <= mag[cnt - 1])) continue;
        int e = cnt < MK_QD8_OUTLIERS ? cnt++ : cnt - 1; /* insertion, largest first */
        for (; e > 0 && mag[e - 1] < a; e--) {
            mag[e] = mag[e - 1];
            idx[e] = idx[e - 1];
            val[e] = val[e - 1];
        }
        mag[e] = a;
        idx[e] = (uint32_t)i;
        val[e] = x[i];
    }
    return cnt;
}

/* Tile t of the row blocks x panel blocks of an (m x n) product (see mk_qd8_gemm_run). */
static void gemm_tile(const mk_qd8_config *cfg, long t, size_t pblocks, size_t m, size_t n,
                      size_t kp, const uint8_t *qa, size_t lda, const float *sx,
                      const void *packed, size_t ps, float *y, size_t ldc,
                      const mk_qgemm_epilogue *ep) {
    const size_t nr = cfg->nr, mr = cfg->mr, panels = (n + nr - 1) / nr;
    const size_t rb = (size_t)t / pblocks, pb = (size_t)t % pblocks;
    const size_t r0 = rb * MK_QD8_MC, r1 = r0 + MK_QD8_MC < m ? r0 + MK_QD8_MC : m;
    const size_t p0 = pb * MK_QD8_PANELS;
    const size_t p1 = p0 + MK_QD8_PANELS < panels ? p0 + MK_QD8_PANELS : panels;
    for (size_t p = p0; p < p1; p++) {
        const size_t nc = n - p * nr < nr ? n - p * nr : nr;
        const void *panel = (const unsigned char *)packed + p * ps;
        for (size_t r = r0; r < r1; r += mr) {
            const size_t rows = r1 - r < mr ? r1 - r : mr;
            cfg->ukernel(rows, nc, kp, qa + r * lda, lda, sx + r, panel, y + r * ldc + p * nr,
                         ldc, NULL, ep);
        }
    }
}

/* The rows with outliers again (see MK_QD8_OUTLIERS): their quantized rest through the
 * kernels without clamp or activation, plus the outliers' float32 products, then the clamp
 * and the activation into y. Returns -1 when out of memory. */
static int outlier_rows(const mk_qd8_config *cfg, size_t m, size_t n, size_t k,
                        const uint8_t *qa, size_t lda, const float *sx, const int *ocnt,
                        const uint32_t *oidx, const float *oval, const void *packed,
                        float *y, size_t ldc, float lo, float hi, int act) {
    size_t nrows = 0;
    for (size_t r = 0; r < m; r++) nrows += ocnt[r] > 0;
    if (nrows == 0) return 0;
    const size_t nr = cfg->nr, mr = cfg->mr, ps = mk_qd8_panel_stride(cfg, k);
    const size_t kp = mk_qd8_kp(cfg, k), mpad = (nrows + mr - 1) / mr * mr;
    uint8_t *q2 = (uint8_t *)aligned_alloc(64, mpad * lda);
    float *s2 = (float *)malloc(nrows * sizeof(float));
    float *t2 = (float *)malloc(nrows * n * sizeof(float));
    size_t *which = (size_t *)malloc(nrows * sizeof(size_t));
    if (q2 == NULL || s2 == NULL || t2 == NULL || which == NULL) {
        free(q2);
        free(s2);
        free(t2);
        free(which);
        return -1;
    }
    memset(q2 + nrows * lda, 128, (mpad - nrows) * lda);
    for (size_t r = 0, i = 0; r < m; r++)
        if (ocnt[r] > 0) {
            memcpy(q2 + i * lda, qa + r * lda, kp);
            s2[i] = sx[r];
            which[i++] = r;
        }
    const mk_qgemm_epilogue ep = {1, -INFINITY, INFINITY, 0, 0.0f, 0, 0, 0.0f, 0, MK_ACT_NONE};
    const size_t pblocks = ((n + nr - 1) / nr + MK_QD8_PANELS - 1) / MK_QD8_PANELS;
    const long tiles = (long)(((nrows + MK_QD8_MC - 1) / MK_QD8_MC) * pblocks);
    if (cfg->begin != NULL) cfg->begin();
    for (long t = 0; t < tiles; t++)
        gemm_tile(cfg, t, pblocks, nrows, n, kp, q2, lda, s2, packed, ps, t2, n, &ep);
    if (cfg->end != NULL) cfg->end();
    for (size_t i = 0; i < nrows; i++) {
        const size_t r = which[i];
        float *row = t2 + i * n;
        for (int e = 0; e < ocnt[r]; e++) {
            const size_t kk = oidx[r * MK_QD8_OUTLIERS + e];
            const float v = oval[r * MK_QD8_OUTLIERS + e];
            for (size_t col = 0; col < n; col++) {
                const unsigned char *base = (const unsigned char *)packed + col / nr * ps;
                const float sw = ((const float *)((const int32_t *)base + nr))[col % nr];
                const int8_t q = ((const int8_t *)base)[12 * nr + (kk / 4) * 4 * nr +
                                                         4 * (col % nr) + kk % 4];
                row[col] = fmaf(v, sw * (float)q, row[col]);
            }
        }
        for (size_t col = 0; col < n; col++) {
            float v = lo > row[col] ? lo : row[col];
            v = hi < v ? hi : v;
            y[r * ldc + col] = act > MK_ACT_CLAMP ? mk_act_f32x1(v, act, 0.0f, 0.0f) : v;
        }
    }
    free(q2);
    free(s2);
    free(t2);
    free(which);
    return 0;
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
    const double macs = (double)m * (double)n * (double)(k ? k : 1);
    int nt = macs < MK_QD8_PARALLEL_MIN_MACS ? 1 : nthreads;
    uint8_t *qa = (uint8_t *)aligned_alloc(64, mpad * lda);
    float *sx = (float *)malloc(m * sizeof(float));
    int *ocnt = (int *)malloc(m * sizeof(int));
    uint32_t *oidx = (uint32_t *)malloc(m * MK_QD8_OUTLIERS * sizeof(uint32_t));
    float *oval = (float *)malloc(m * MK_QD8_OUTLIERS * sizeof(float));
    float *rest = (float *)malloc((size_t)(nt > 1 ? nt : 1) * (k ? k : 1) * sizeof(float));
    int rc = -1;
    if (qa == NULL || sx == NULL || ocnt == NULL || oidx == NULL || oval == NULL ||
        rest == NULL)
        goto done;
    const size_t rblocks = (m + MK_QD8_MC - 1) / MK_QD8_MC;
    const size_t pblocks = (panels + MK_QD8_PANELS - 1) / MK_QD8_PANELS;
    const long tiles = (long)(rblocks * pblocks);
    memset(qa + m * lda, 128, (mpad - m) * lda);
    const mk_qgemm_epilogue ep = {1, lo, hi, 0, 0.0f, 0, 0, 0.0f, 0, act};
    mk_team_clock clk;
    nt = mk_team_begin(nt, &clk);
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
#pragma omp for schedule(dynamic, 8) nowait
        for (long r = 0; r < (long)m; r++) {
            uint8_t *row = qa + (size_t)r * lda;
            const float *xr = x + (size_t)r * ldx;
            uint32_t *ri = oidx + (size_t)r * MK_QD8_OUTLIERS;
            float *rv = oval + (size_t)r * MK_QD8_OUTLIERS;
            ocnt[r] = row_outliers(k, xr, ri, rv);
            if (ocnt[r] > 0) { /* the row without its outliers */
                float *tmp = rest + (size_t)omp_get_thread_num() * k;
                memcpy(tmp, xr, k * sizeof(float));
                for (int e = 0; e < ocnt[r]; e++) tmp[ri[e]] = 0.0f;
                xr = tmp;
            }
            sx[r] = cfg->quantize(k, kp, xr, row);
            if (isnan(sx[r])) memset(row, 128, kp); /* computed, then overwritten with NaN */
        }
        MK_TEAM_BARRIER(&clk);
        if (cfg->begin != NULL) cfg->begin();
#pragma omp for schedule(dynamic, 1) nowait
        for (long t = 0; t < tiles; t++)
            gemm_tile(cfg, t, pblocks, m, n, kp, qa, lda, sx, packed, ps, y, ldc, &ep);
        if (cfg->end != NULL) cfg->end();
        MK_TEAM_DONE(&clk);
    }
    mk_team_end(&clk);
    rc = outlier_rows(cfg, m, n, k, qa, lda, sx, ocnt, oidx, oval, packed, y, ldc, lo, hi, act);
    for (size_t r = 0; r < m; r++)
        if (isnan(sx[r]))
            for (size_t j = 0; j < n; j++) y[r * ldc + j] = NAN;
done:
    free(qa);
    free(sx);
    free(ocnt);
    free(oidx);
    free(oval);
    free(rest);
    return rc;
}
