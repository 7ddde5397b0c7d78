/* Statically quantized (qu8) convolution over NHWC bytes, and the conversions around it (see
 * qgemm.h): the im2col rows of a tile of output pixels gathered into a per-thread buffer
 * (the image's zero point where the window leaves the image), then the int8 GEMM tiles of
 * the qd8 configuration over them with the call's epilogue (a per-tensor activation scale,
 * a residual, bytes or floats out). Tiles of (row block, panel block) go out from a shared
 * counter; each output element is one kernel's sum and epilogue, so the result does not
 * depend on the tiling or the thread count. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/team.h"
#include "mk_omp.h"
#include "qgemm.h"

#define MK_QCONV_A_BYTES (96 * 1024) /* a tile's gathered rows: MC x KP bytes stay in L2 */
#define MK_QCONV_MC_MAX 512
/* Weights past this many bytes no longer stay in L2 between row blocks (each row block's
 * tiles read every panel): then one row block holds every row, up to MK_QCONV_A_BYTES_ALL of
 * them, and each panel comes from L3 once a call. ResNet-18's 512-channel 3x3 on 7x7 (2.3 MB
 * of weights, 49 rows of 4608 bytes) ran as 4 row blocks of 16 rows, reading the weights 4
 * times: 0.46 -> 0.40 ms on one thread as one block. */
#define MK_QCONV_W_BYTES (1 << 20)
#define MK_QCONV_A_BYTES_ALL (512 * 1024)
#define MK_QCONV_PANELS 4 /* panels per tile, fewer when the threads would get under 4 each */
#define MK_QCONV_PARALLEL_MIN_MACS (1u << 19)
#define MK_QCONV_PARALLEL_MIN_BYTES (1u << 16) /* conversions and pooling */

/* n bytes in fixed-size copies the compiler inlines (a libc call per run of a few pixels of
 * a few channels costs more than the copy): 8 at a time, the last 8 overlapping */
static inline void copy_bytes(uint8_t *d, const uint8_t *s, size_t n) {
    if (n < 8) {
        for (size_t i = 0; i < n; i++) d[i] = s[i];
        return;
    }
    for (size_t i = 0; i + 8 < n; i += 8) memcpy(d + i, s + i, 8);
    memcpy(d + n - 8, s + n - 8, 8);
}

/* mk_qconv_im2col_fn (qgemm.h), portable C; the AVX-512 one is in qconv-avx512.c */
void mk_qconv_im2col__scalar(const mk_qconv_geom *g, const uint8_t *x, uint8_t zp, size_t r0,
                             size_t rows, uint8_t *buf, size_t lda) {
    const size_t c = g->cin;
    for (size_t i = 0; i < rows; i++) {
        const size_t r = r0 + i, ox = r % g->ow, oy = r / g->ow % g->oh, b = r / g->ow / g->oh;
        uint8_t *dst = buf + i * lda;
        const ptrdiff_t x0 = (ptrdiff_t)(ox * g->sw) - (ptrdiff_t)g->pw;
        const int row_inside = x0 >= 0 && (size_t)x0 + (g->kw - 1) * g->dw < g->w;
        for (size_t ky = 0; ky < g->kh; ky++) {
            const ptrdiff_t iy = (ptrdiff_t)(oy * g->sh + ky * g->dh) - (ptrdiff_t)g->ph;
            uint8_t *d = dst + ky * g->kw * c;
            if (iy < 0 || (size_t)iy >= g->h) {
                memset(d, zp, g->kw * c);
                continue;
            }
            const uint8_t *src = x + ((b * g->h + (size_t)iy) * g->w) * c;
            if (row_inside && g->dw == 1) { /* the kw pixels are contiguous */
                copy_bytes(d, src + (size_t)x0 * c, g->kw * c);
                continue;
            }
            for (size_t kx = 0; kx < g->kw; kx++) {
                const ptrdiff_t ix = x0 + (ptrdiff_t)(kx * g->dw);
                if (ix < 0 || (size_t)ix >= g->w)
                    memset(d + kx * c, zp, c);
                else
                    copy_bytes(d + kx * c, src + (size_t)ix * c, c);
            }
        }
    }
}

/* Output rows [0, m) of panels [p0, p1) from the rows at a (lda bytes apart, kp each): the
 * tiles, row blocks of mr within each panel; res and y at row 0, rows n wide. */
static void qconv_tiles(const mk_qd8_config *cfg, size_t m, size_t p0, size_t p1, size_t n,
                        size_t kp, const uint8_t *a, size_t lda, float in_scale,
                        const void *packed, const uint8_t *res, const mk_qgemm_epilogue *ep,
                        char *y) {
    const size_t nr = cfg->nr, mr = cfg->mr, ps = mk_qd8_panel_stride(cfg, kp);
    const size_t width = ep->out_u8 ? 1 : sizeof(float);
    for (size_t p = p0; p < p1; p++) {
        const size_t nc = n - p * nr < nr ? n - p * nr : nr;
        const void *panel = (const unsigned char *)packed + p * ps;
        for (size_t r = 0; r < m; r += mr)
            cfg->ukernel(m - r < mr ? m - r : mr, nc, kp, a + r * lda, lda, &in_scale, panel,
                         y + (r * n + p * nr) * width, n,
                         res != NULL ? res + r * n + p * nr : NULL, ep);
    }
}

int mk_qconv_run(const mk_qd8_config *cfg, const mk_qconv_geom *g, const uint8_t *x,
                 int32_t in_zp, float in_scale, const void *packed, const uint8_t *res,
                 const mk_qgemm_epilogue *ep_in, void *y, int nthreads) {
    const size_t m = g->n * g->oh * g->ow, n = g->cout, k = g->kh * g->kw * g->cin;
    if (m == 0 || n == 0) return 0;
    const size_t kp = mk_qd8_kp(cfg, k), nr = cfg->nr, mr = cfg->mr;
    const size_t ps = mk_qd8_panel_stride(cfg, k), panels = (n + nr - 1) / nr;
    /* a pointwise convolution reads the image's rows in place where they are whole k groups
     * and the kernel reads only the rows it is asked for (kb 4: not the AMX tile, which
     * reads 32 rows of a multiple of 64 bytes) */
    const int direct = g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->ph == 0 &&
                       g->pw == 0 && kp == g->cin && cfg->kb == 4;
    const size_t lda = direct ? g->cin : (kp + 63) & ~(size_t)63;
    const size_t all = (m + mr - 1) / mr * mr; /* every row, whole kernel calls */
    size_t mc = (panels * ps > MK_QCONV_W_BYTES && all * lda <= MK_QCONV_A_BYTES_ALL
                     ? all
                     : MK_QCONV_A_BYTES / lda) / mr * mr;
    mc = mc < mr ? mr : mc > MK_QCONV_MC_MAX ? MK_QCONV_MC_MAX : mc > all ? all : mc;
    const size_t rblocks = (m + mc - 1) / mc;
    const double macs = (double)m * (double)n * (double)(k ? k : 1);
    int nt = macs < MK_QCONV_PARALLEL_MIN_MACS ? 1 : nthreads;
    size_t pp = MK_QCONV_PANELS;
    while (pp > 1 && rblocks * ((panels + pp - 1) / pp) < 4 * (size_t)nt) pp /= 2;
    const size_t pblocks = (panels + pp - 1) / pp;
    const long tiles = (long)(rblocks * pblocks);
    mk_qgemm_epilogue ep = *ep_in;
    ep.ascale_step = 0;
    ep.ldr = n;
    const size_t width = ep.out_u8 ? 1 : sizeof(float);
    int failed = 0;
    mk_team_clock clk;
    nt = mk_team_begin(nt, &clk);
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        uint8_t *buf = NULL;
        if (!direct) {
            buf = (uint8_t *)aligned_alloc(64, mc * lda);
            if (buf == NULL) {
#pragma omp atomic write
                failed = 1;
            } else {
                /* once: the k padding of every row (it meets zero weights, so whatever a
                 * gather leaves there is harmless), and the rows past m of a last block
                 * (computed, never stored) */
                memset(buf, in_zp, mc * lda);
            }
        }
        long gathered = -1;
        if (cfg->begin != NULL) cfg->begin();
#pragma omp for schedule(dynamic, 1) nowait
        for (long t = 0; t < tiles; t++) {
            if (!direct && buf == NULL) continue;
            const size_t rb = (size_t)t / pblocks, pb = (size_t)t % pblocks;
            const size_t r0 = rb * mc, r1 = r0 + mc < m ? r0 + mc : m;
            const uint8_t *a = x + r0 * g->cin;
            if (!direct) {
                if ((long)rb != gathered) {
                    cfg->im2col(g, x, (uint8_t)in_zp, r0, r1 - r0, buf, lda);
                    gathered = (long)rb;
                }
                a = buf;
            }
            const size_t p0 = pb * pp, p1 = p0 + pp < panels ? p0 + pp : panels;
            qconv_tiles(cfg, r1 - r0, p0, p1, n, kp, a, lda, in_scale, packed,
                        res != NULL ? res + r0 * n : NULL, &ep, (char *)y + r0 * n * width);
        }
        if (cfg->end != NULL) cfg->end();
        free(buf);
        MK_TEAM_DONE(&clk);
    }
    mk_team_end(&clk);
    return failed ? -1 : 0;
}

int mk_qconv_pointwise_direct(const mk_qd8_config *cfg, size_t cin) {
    return cfg->kb == 4 && mk_qd8_kp(cfg, cin) == cin;
}

void mk_qconv_pointwise_rows(const mk_qd8_config *cfg, size_t m, size_t cin, size_t cout,
                             const uint8_t *a, float in_scale, const void *packed,
                             const uint8_t *res, const mk_qgemm_epilogue *ep_in, void *y) {
    mk_qgemm_epilogue ep = *ep_in;
    ep.ascale_step = 0;
    ep.ldr = cout;
    qconv_tiles(cfg, m, 0, (cout + cfg->nr - 1) / cfg->nr, cout, cin, a, cin, in_scale, packed,
                res, &ep, (char *)y);
}

#define BLOCK 64 /* pixels per step of the layout conversions */

/* Block t of the BLOCK-pixel blocks of images of hw pixels: image b, pixels [p0, p1). */
typedef struct {
    size_t b, p0, p1;
} pixel_block;

static pixel_block block_of(long t, size_t hw) {
    const size_t per = (hw + BLOCK - 1) / BLOCK, p0 = (size_t)t % per * BLOCK;
    const pixel_block blk = {(size_t)t / per, p0, p0 + BLOCK < hw ? p0 + BLOCK : hw};
    return blk;
}

static void quantize_row_scalar(size_t n, const float *x, float inv, int32_t zp, uint8_t *q) {
    for (size_t i = 0; i < n; i++) q[i] = mk_qu8_requantize(x[i], inv, zp);
}

void mk_qu8_quantize_nchw(int isa, size_t n, size_t c, size_t hw, const float *x, float inv,
                          int32_t zp, uint8_t *q, int nthreads) {
    void (*row)(size_t, const float *, float, int32_t, uint8_t *) = quantize_row_scalar;
#if MK_X86
    if (isa >= MK_ISA_AVX512) row = mk_qu8_quantize_row__avx512;
#else
    (void)isa;
#endif
    const long blocks = (long)(n * ((hw + BLOCK - 1) / BLOCK));
    const int nt = n * c * hw < MK_QCONV_PARALLEL_MIN_BYTES ? 1 : nthreads;
    MK_TEAM_FOR(nt, 1)
    for (long t = 0; t < blocks; t++) {
        const pixel_block k = block_of(t, hw);
        uint8_t plane[BLOCK]; /* one channel's bytes, then spread into the NHWC rows */
        for (size_t ch = 0; ch < c; ch++) {
            row(k.p1 - k.p0, x + (k.b * c + ch) * hw + k.p0, inv, zp, plane);
            uint8_t *dst = q + (k.b * hw + k.p0) * c + ch;
            for (size_t p = 0; p < k.p1 - k.p0; p++) dst[p * c] = plane[p];
        }
    }
    MK_TEAM_FOR_END
}

void mk_qu8_dequantize_nhwc(size_t n, size_t hw, size_t c, const uint8_t *q, float scale,
                            int32_t zp, float *x, int nthreads) {
    const long blocks = (long)(n * ((hw + BLOCK - 1) / BLOCK));
    const int nt = n * c * hw < MK_QCONV_PARALLEL_MIN_BYTES ? 1 : nthreads;
    MK_TEAM_FOR(nt, 1)
    for (long t = 0; t < blocks; t++) {
        const pixel_block k = block_of(t, hw);
        for (size_t ch = 0; ch < c; ch++) {
            const uint8_t *src = q + k.b * hw * c + ch;
            float *dst = x + (k.b * c + ch) * hw;
            for (size_t p = k.p0; p < k.p1; p++)
                dst[p] = (float)((int32_t)src[p * c] - zp) * scale;
        }
    }
    MK_TEAM_FOR_END
}

void mk_qu8_maxpool_nhwc(size_t n, size_t h, size_t w, size_t c, size_t oh, size_t ow,
                         size_t kh, size_t kw, size_t sh, size_t sw, size_t ph, size_t pw,
                         size_t dh, size_t dw, const uint8_t *x, uint8_t *y, int nthreads) {
    const long rows = (long)(n * oh);
    const int nt = n * oh * ow * c * kh * kw < MK_QCONV_PARALLEL_MIN_BYTES ? 1 : nthreads;
    MK_TEAM_FOR(nt, 1)
    for (long t = 0; t < rows; t++) {
        const size_t b = (size_t)t / oh, oy = (size_t)t % oh;
        for (size_t ox = 0; ox < ow; ox++) {
            uint8_t *dst = y + (((size_t)t * ow) + ox) * c;
            memset(dst, 0, c); /* the smallest byte: every window holds an input pixel */
            for (size_t ky = 0; ky < kh; ky++) {
                const ptrdiff_t iy = (ptrdiff_t)(oy * sh + ky * dh) - (ptrdiff_t)ph;
                if (iy < 0 || (size_t)iy >= h) continue;
                for (size_t kx = 0; kx < kw; kx++) {
                    const ptrdiff_t ix = (ptrdiff_t)(ox * sw + kx * dw) - (ptrdiff_t)pw;
                    if (ix < 0 || (size_t)ix >= w) continue;
                    const uint8_t *src = x + ((b * h + (size_t)iy) * w + (size_t)ix) * c;
                    for (size_t ch = 0; ch < c; ch++) dst[ch] = src[ch] > dst[ch] ? src[ch] : dst[ch];
                }
            }
        }
    }
    MK_TEAM_FOR_END
}
