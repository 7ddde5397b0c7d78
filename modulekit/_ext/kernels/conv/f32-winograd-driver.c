/* float32 Winograd F(m x m, 3 x 3) convolution driver: the transform config table, the cost
 * model that picks m (or the implicit GEMM), tile blocking and OpenMP. See conv.h.
 *
 * Tiles (m x m output squares) are numbered across the batch, image by image, row by row.
 * They are processed in blocks of tb tiles (a multiple of the igemm tile width): for one block
 *   1. input transform, channel by channel: V[t][ci][l] for the block's tiles l
 *   2. alpha^2 GEMMs M[t] = U[t] V[t] with the igemm microkernels (bias rides in U[(1,1)])
 *   3. output transform, output channel by output channel, + residual and activation, stored
 * so the block's V and M (alpha^2 * (Cin + Cout) * tb floats) stay in L2 between the steps.
 * With at least two blocks per thread every thread runs whole blocks in its own scratch;
 * otherwise (batch 1, small maps) all threads share each block step by step. */
#include <string.h>

#include "conv.h"
#include "isa.h"
#include "mk_omp.h"

typedef struct {
    mk_wino_in_fn in;
    mk_wino_out_fn out;
} mk_wino_config;

/* [isa][0]: F(2x2, 3x3), [isa][1]: F(4x4, 3x3) (NULL: not offered on that path; the portable
 * C path keeps the smaller tile, whose transforms are cheap without vectors) */
static const mk_wino_config WINO_CONFIG[MK_ISA_COUNT][2] = {
    [MK_ISA_GENERIC] = {{mk_f32_wino_in_2x2_scalar, mk_f32_wino_out_2x2_scalar}, {NULL, NULL}},
    [MK_ISA_AVX2] = {{mk_f32_wino_in_2x2_avx2, mk_f32_wino_out_2x2_avx2},
                     {mk_f32_wino_in_4x4_avx2, mk_f32_wino_out_4x4_avx2}},
    [MK_ISA_AVX512] = {{mk_f32_wino_in_2x2_avx512, mk_f32_wino_out_2x2_avx512},
                       {mk_f32_wino_in_4x4_avx512, mk_f32_wino_out_4x4_avx512}},
};

/* Bytes of one block's V and M kept in L2 (about half of a 1-2 MiB L2, the rest for the
 * U[t] panels streaming through). */
#define WINO_BLOCK_BYTES (512 * 1024)

int mk_conv_winograd_supported(int m, int isa) {
    if (isa < 0 || isa >= MK_ISA_COUNT) return 0;
    if (m == 2) return WINO_CONFIG[isa][0].in != NULL;
    if (m == 4) return WINO_CONFIG[isa][1].in != NULL;
    return 0;
}

typedef struct {
    int m, A, T;          /* tile, window, alpha^2 */
    int TH, TW;           /* tiles per column / row of one image */
    ptrdiff_t ntiles;     /* N * TH * TW */
    mk_igemm_fn fn;
    int nr;               /* igemm tile width */
    int tb;               /* tiles per block */
    ptrdiff_t tbs;        /* lane stride of V and M rows */
    ptrdiff_t nblocks;
    int np, coutp;        /* panels, padded output channels */
    ptrdiff_t vsz, msz, bufsz, segsz, per_thread;
    int shared;
    int nthreads;
} wino_plan;

#define RS16(n) (((ptrdiff_t)(n) + 15) & ~(ptrdiff_t)15)

/* floats of transform scratch for blocks of nl tiles in runs of at most nt (see the
 * transform template) */
static ptrdiff_t buf_size(int m, int nt, int nl) {
    const int A = m + 2;
    const ptrdiff_t in = 2 * A * (RS16(nt * m + 2) + 64) + A * A * (RS16(nl) + 16);
    const ptrdiff_t out = m * A * (RS16(nl) + 16) + m * (RS16(nt * m) + 64);
    return (in > out ? in : out) + 64;
}

/* floats holding a block's run descriptors */
static ptrdiff_t segs_size(int tb) {
    return (ptrdiff_t)((tb + 2) * sizeof(mk_wino_seg) + sizeof(float) - 1) / sizeof(float) + 16;
}

static void make_plan(const mk_conv_geom *g, int Cout, int m, int isa, int nthreads,
                      wino_plan *p) {
    const int Cin = g->C;
    /* small convolutions stay on one thread */
    const double flops = 2.0 * g->N * (double)g->OH * g->OW * Cout * Cin * 9.0;
    if (flops < 4e5 || nthreads < 1) nthreads = 1;
    p->nthreads = nthreads;
    p->m = m;
    p->A = m + 2;
    p->T = p->A * p->A;
    p->TH = (g->OH + m - 1) / m;
    p->TW = (g->OW + m - 1) / m;
    p->ntiles = (ptrdiff_t)g->N * p->TH * p->TW;
    p->np = (Cout + MK_CONV_MR - 1) / MK_CONV_MR;
    p->coutp = p->np * MK_CONV_MR;
    /* block: as many igemm tiles of the wide kernel as fit the L2 budget, at least one */
    mk_igemm_fn fn;
    int nr;
    mk_conv_igemm_lanes(isa, 1 << 20, &fn, &nr);
    const double per_tile = (double)p->T * (Cin + p->coutp) * sizeof(float);
    ptrdiff_t tb = (ptrdiff_t)(WINO_BLOCK_BYTES / (per_tile * nr)) * nr;
    if (tb < nr) tb = nr;
    if (nthreads > 1) { /* enough blocks for every thread when the batch allows it */
        ptrdiff_t per = (p->ntiles + 2 * nthreads - 1) / (2 * nthreads);
        per = (per + nr - 1) / nr * nr;
        if (per < tb) tb = per < nr ? nr : per;
    }
    if (tb >= p->ntiles) tb = p->ntiles;
    p->tb = (int)tb;
    mk_conv_igemm_lanes(isa, tb, &p->fn, &p->nr);
    p->tbs = (tb + 15) & ~(ptrdiff_t)15;
    p->nblocks = (p->ntiles + tb - 1) / tb;
    p->shared = nthreads > 1 && p->nblocks < 2 * nthreads;
    p->vsz = (ptrdiff_t)p->T * Cin * p->tbs;
    p->msz = (ptrdiff_t)p->T * p->coutp * p->tbs;
    p->bufsz = buf_size(m, p->tb < p->TW ? p->tb : p->TW, p->tb);
    p->segsz = segs_size(p->tb);
    p->per_thread = p->vsz + p->msz + p->bufsz + p->segsz;
}

ptrdiff_t mk_conv_winograd_scratch(const mk_conv_geom *g, int Cout, int m, int isa,
                                   int nthreads) {
    wino_plan p;
    make_plan(g, Cout, m, isa, nthreads, &p);
    return (p.shared ? p.vsz + p.msz + p.nthreads * (p.bufsz + p.segsz)
                     : p.nthreads * p.per_thread) +
           2 * (ptrdiff_t)g->C; /* + koff */
}

/* ---- cost model ---------------------------------------------------------------------------
 * Estimated time in units of one igemm multiply-add (about 110 per ns on one Zen 4/5 core),
 * per candidate:
 *   implicit GEMM: Cout_pad * 9 Cin * (grid lanes rounded up to the tile width), per image
 *                  + the packed weights streamed from L3 once per image
 *   F(m):          alpha^2 Cout_pad Cin * (tiles rounded up to the tile width)
 *                  + tiles * (Cin + Cout) * TRANSFORM_COST[m]   (input + output transforms)
 *                  + U streamed from L3 once per igemm lane tile (once when it fits L2)
 * TRANSFORM_COST was measured on AVX-512 against the igemm kernels (F(2x2): ~400 units per
 * tile and channel, F(4x4): ~1100), STREAM_COST likewise (units per byte of weights that do
 * not stay in L2). The same table serves the other paths: there the GEMM is slower too. */
static const double TRANSFORM_COST[2] = {400.0, 1100.0};
#define STREAM_COST 10.0
#define L2_BYTES (1 << 20)

static double stream_bytes(double wbytes, double passes) {
    return wbytes > L2_BYTES / 2 ? wbytes * passes : wbytes;
}

int mk_conv_winograd_choose(const mk_conv_geom *g, int Cout, int isa, int nthreads) {
    if (g->KH != 3 || g->KW != 3 || g->sy != 1 || g->sx != 1 || g->dy != 1 || g->dx != 1)
        return 0;
    if (g->sw != 1) return 0;
    const double cin = g->C, coutp = (Cout + MK_CONV_MR - 1) / MK_CONV_MR * MK_CONV_MR;
    mk_igemm_fn fn;
    int nr;
    const ptrdiff_t L = (ptrdiff_t)(g->OH - 1) * (g->W + g->pl + g->pr) + g->OW;
    mk_conv_igemm_lanes(isa, L, &fn, &nr);
    const double lanes = (double)((L + nr - 1) / nr * nr);
    const double wbytes = coutp * 9.0 * cin * sizeof(float);
    double best = coutp * 9.0 * cin * lanes * g->N + STREAM_COST * stream_bytes(wbytes, g->N);
    int choice = 0;
    for (int i = 0; i < 2; i++) {
        const int m = 2 + 2 * i;
        if (!mk_conv_winograd_supported(m, isa)) continue;
        wino_plan p;
        make_plan(g, Cout, m, isa, nthreads, &p);
        const double T = p.T, tiles = (double)p.ntiles;
        /* lanes computed: whole blocks, the last one rounded up to its igemm tile */
        const ptrdiff_t last = p.ntiles - (p.nblocks - 1) * p.tb;
        mk_igemm_fn lfn;
        int lnr;
        mk_conv_igemm_lanes(isa, last, &lfn, &lnr);
        const double tp = (double)(p.nblocks - 1) * ((p.tb + p.nr - 1) / p.nr * p.nr) +
                          (double)((last + lnr - 1) / lnr * lnr);
        const double ubytes = T * coutp * cin * sizeof(float);
        const double cost = T * coutp * cin * tp + tiles * (cin + Cout) * TRANSFORM_COST[i] +
                            STREAM_COST * stream_bytes(ubytes, tp / p.nr);
        if (cost < 0.9 * best) { /* a margin for the model's error: ties go to the GEMM */
            best = cost;
            choice = m;
        }
    }
    return choice;
}

/* ---- the convolution ---------------------------------------------------------------------- */

/* Runs of the block of tiles [t0, t1) (one per tile row it touches); returns their count. */
static int block_segs(const wino_plan *p, const mk_conv_geom *g, int Cout, ptrdiff_t t0,
                      ptrdiff_t t1, mk_wino_seg *segs) {
    const int m = p->m;
    const ptrdiff_t per_img = (ptrdiff_t)p->TH * p->TW, ohw = (ptrdiff_t)g->OH * g->OW;
    int ns = 0;
    for (ptrdiff_t idx = t0; idx < t1; ns++) {
        const int n = (int)(idx / per_img), rem = (int)(idx % per_img);
        const int ty = rem / p->TW, tx = rem % p->TW;
        const int nt = (int)(t1 - idx < p->TW - tx ? t1 - idx : p->TW - tx);
        mk_wino_seg *sg = segs + ns;
        sg->n = n;
        sg->y0 = ty * m - g->pt;
        sg->x0 = tx * m - g->pl;
        sg->nt = nt;
        sg->l0 = idx - t0;
        sg->ooff = (ptrdiff_t)n * Cout * ohw + (ptrdiff_t)ty * m * g->OW + (ptrdiff_t)tx * m;
        sg->rows = g->OH - ty * m < m ? g->OH - ty * m : m;
        sg->cols = g->OW - tx * m < nt * m ? g->OW - tx * m : nt * m;
        idx += nt;
    }
    return ns;
}

static void block_in(const wino_plan *p, const mk_conv_geom *g, const float *x, mk_wino_in_fn in,
                     const mk_wino_seg *segs, int ns, int nl, int c0, int c1, float *V,
                     float *buf) {
    for (int ci = c0; ci < c1; ci++)
        in(x + ci * g->sc, g->sn, g->sh, g->H, g->W, segs, ns, nl, V + ci * p->tbs,
           (ptrdiff_t)g->C * p->tbs, buf);
}

static void block_out(const wino_plan *p, const mk_conv_geom *g, mk_wino_out_fn outf,
                      const mk_wino_seg *segs, int ns, int nl, int c0, int c1, const float *M,
                      float *buf, float *out, const float *res, int act) {
    const ptrdiff_t ohw = (ptrdiff_t)g->OH * g->OW;
    for (int co = c0; co < c1; co++)
        outf(M + co * p->tbs, (ptrdiff_t)p->coutp * p->tbs, segs, ns, nl, buf, out + co * ohw,
             res ? res + co * ohw : NULL, g->OW, act);
}

/* GEMM items [i0, i1) of a block of nl tiles: item = (t, lane tile, panel). */
static void block_gemm(const wino_plan *p, int Cin, int Cout, const float *u,
                       const ptrdiff_t *koff, const float *V, float *M, int nl, ptrdiff_t i0,
                       ptrdiff_t i1) {
    const size_t panel = MK_CONV_MR + (size_t)Cin * MK_CONV_MR;
    const int nq = (nl + p->nr - 1) / p->nr;
    for (ptrdiff_t it = i0; it < i1; it++) {
        const int t = (int)(it / ((ptrdiff_t)nq * p->np)), rem = (int)(it % ((ptrdiff_t)nq * p->np));
        const int q = rem / p->np, pn = rem % p->np;
        const int lane0 = q * p->nr, lanes = nl - lane0 < p->nr ? nl - lane0 : p->nr;
        const int rows = Cout - pn * MK_CONV_MR < MK_CONV_MR ? Cout - pn * MK_CONV_MR : MK_CONV_MR;
        const mk_seg seg = {0, lanes, 0};
        p->fn((size_t)Cin, u + ((size_t)t * p->np + pn) * panel,
              V + (ptrdiff_t)t * Cin * p->tbs + lane0, koff, lanes, rows,
              M + ((ptrdiff_t)t * p->coutp + pn * MK_CONV_MR) * p->tbs + lane0, p->tbs, NULL,
              &seg, 1, MK_ACT_NONE);
    }
}

int mk_conv2d_winograd_f32(const mk_conv_geom *g, const float *x, int Cout, int m,
                           const float *u, float *scratch, float *out, const float *res,
                           int act, int isa, int nthreads) {
    const mk_wino_config cfg = WINO_CONFIG[isa][m == 4];
    const int Cin = g->C;
    wino_plan p;
    make_plan(g, Cout, m, isa, nthreads, &p);
    nthreads = p.nthreads;
    ptrdiff_t *koff = (ptrdiff_t *)scratch; /* 2 * Cin floats hold Cin ptrdiff_t */
    for (int k = 0; k < Cin; k++) koff[k] = k * p.tbs;
    float *base = scratch + 2 * (ptrdiff_t)Cin;

    if (!p.shared) {
#pragma omp parallel num_threads(nthreads)
        {
            float *V = base + omp_get_thread_num() * p.per_thread;
            float *M = V + p.vsz, *buf = M + p.msz;
            mk_wino_seg *segs = (mk_wino_seg *)(buf + p.bufsz);
#pragma omp for schedule(dynamic, 1)
            for (ptrdiff_t b = 0; b < p.nblocks; b++) {
                const ptrdiff_t t0 = b * p.tb, t1 = t0 + p.tb < p.ntiles ? t0 + p.tb : p.ntiles;
                const int nl = (int)(t1 - t0);
                const int ns = block_segs(&p, g, Cout, t0, t1, segs);
                block_in(&p, g, x, cfg.in, segs, ns, nl, 0, Cin, V, buf);
                const ptrdiff_t items = (ptrdiff_t)p.T * ((nl + p.nr - 1) / p.nr) * p.np;
                block_gemm(&p, Cin, Cout, u, koff, V, M, nl, 0, items);
                block_out(&p, g, cfg.out, segs, ns, nl, 0, Cout, M, buf, out, res, act);
            }
        }
        return 0;
    }

    float *V = base, *M = base + p.vsz;
#pragma omp parallel num_threads(nthreads)
    {
        float *buf = M + p.msz + omp_get_thread_num() * (p.bufsz + p.segsz);
        mk_wino_seg *segs = (mk_wino_seg *)(buf + p.bufsz); /* each thread its own copy */
        for (ptrdiff_t b = 0; b < p.nblocks; b++) {
            const ptrdiff_t t0 = b * p.tb, t1 = t0 + p.tb < p.ntiles ? t0 + p.tb : p.ntiles;
            const int nl = (int)(t1 - t0);
            const int ns = block_segs(&p, g, Cout, t0, t1, segs);
#pragma omp for schedule(dynamic, 1)
            for (int ci = 0; ci < Cin; ci += 4)
                block_in(&p, g, x, cfg.in, segs, ns, nl, ci, ci + 4 < Cin ? ci + 4 : Cin, V, buf);
            const ptrdiff_t items = (ptrdiff_t)p.T * ((nl + p.nr - 1) / p.nr) * p.np;
#pragma omp for schedule(dynamic, 1)
            for (ptrdiff_t it = 0; it < items; it += 4)
                block_gemm(&p, Cin, Cout, u, koff, V, M, nl, it, it + 4 < items ? it + 4 : items);
#pragma omp for schedule(dynamic, 1)
            for (int co = 0; co < Cout; co += 4)
                block_out(&p, g, cfg.out, segs, ns, nl, co, co + 4 < Cout ? co + 4 : Cout, M,
                          buf, out, res, act);
        }
    }
    return 0;
}
