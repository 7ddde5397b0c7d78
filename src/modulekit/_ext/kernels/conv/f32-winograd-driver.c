/* float32 Winograd F(m x m, 3 x 3) convolution driver: the transform config table, the cost
 * model that picks m (or the implicit GEMM), tile blocking and OpenMP. See conv.h.
 *
 * Tiles (m x m output squares) are numbered across the batch, image by image, row by row.
 * They are processed in blocks of tb tiles (a multiple of the wide igemm tile; the last block
 * takes what is left, and a remainder under one wide tile joins the block before it: a block
 * of its own would cost a pass over U and, where threads share blocks, three barriers); for
 * one block
 *   1. input transform, channel by channel: V[ci][t][l] for the block's tiles l (each channel
 *      one contiguous alpha^2 x tb block: 15% faster than [t][ci][l] at 64 channels, whose
 *      alpha^2 store streams miss)
 *   2. alpha^2 GEMMs M[t] = U[t] V[t] with the igemm microkernels (bias rides in U[(1,1)]),
 *      into M[co][t][l]
 *   3. output transform, output channel by output channel, + residual and activation, stored
 * so the block's V and M (alpha^2 * (Cin + Cout) * tb floats) stay in L2 between the steps.
 * With at least two blocks per thread every thread runs whole blocks in its own scratch;
 * otherwise (batch 1, small maps) all threads share each block step by step. */
#include <string.h>

#include "conv.h"
#include "isa.h"
#include "common/caches.h"
#include "common/team.h"
#include "mk_omp.h"

/* Bytes of one block's V and M kept in L2: half of the reference machine's 1 MiB, the rest
 * for the U[t] panels streaming through; scaled to this CPU's L2 (common/caches.h). */
#define WINO_BLOCK_BYTES mk_l2_scaled(512 * 1024)
/* The GEMM stage's engine orientation in the cost model's units (see there), per element of V
 * and M for the two transposes and the engine calls' fixed costs, which grow with
 * 1/Cin + 1/Cout (per multiply-add: the table's wino_eng_lane_cost, conv-config.c). */
#define ENG_ROW_COST 16.0
/* channels per transform chunk in the engine orientation */
#define WINO_CH 16

static int wino_engine_mode = -1;

int mk_conv_winograd_set_engine(int mode) {
    return __atomic_exchange_n(&wino_engine_mode, mode < 0 ? -1 : mode != 0, __ATOMIC_RELAXED);
}

typedef struct {
    int m, A, T;          /* tile, window, alpha^2 */
    int TH, TW;           /* tiles per column / row of one image */
    ptrdiff_t ntiles;     /* N * TH * TW */
    int tb;               /* tiles per block but the last */
    int tmax;             /* tiles of the largest block (the last, when it took a remainder) */
    ptrdiff_t tbs;        /* lane stride of V and M rows */
    ptrdiff_t nblocks;
    ptrdiff_t split;      /* blocks before a remainder joined the last: the cost model's */
    int np, coutp;        /* panels, padded output channels */
    ptrdiff_t vsz, msz, bufsz, segsz, per_thread;
    double gcost;         /* the GEMM stage's cost (see the cost model) */
    int shared;
    int nthreads;
    int isa;
    int eng;              /* GEMM stage in the engine orientation (see the file comment) */
    int enp;              /* engine panels of Cout */
    int epc;              /* engine panels per GEMM item */
    size_t usz;           /* bytes of one t's packed U_t^T */
    ptrdiff_t lda, ldm;   /* row strides of V_t^T and M_t^T */
    ptrdiff_t csz, cst;   /* floats of a thread's transform chunk (WINO_CH channels), and
                             its channel stride (off powers of two) */
} wino_plan;

#define RS16(n) (((ptrdiff_t)(n) + 15) & ~(ptrdiff_t)15)

/* The lanes that tiling tl (mk_conv_igemm_tiling) of nl lanes reads: its whole tiles' and
 * its tail tile's. */
static ptrdiff_t tiled_lanes(const mk_igemm_tiling *tl, ptrdiff_t nl) {
    const ptrdiff_t rem = nl % tl->nr;
    return rem ? nl - rem + tl->tail_nr : nl;
}

/* The tiles [t0, t1) of block b. */
static void block_range(const wino_plan *p, ptrdiff_t b, ptrdiff_t *t0, ptrdiff_t *t1) {
    *t0 = b * p->tb;
    *t1 = b == p->nblocks - 1 ? p->ntiles : *t0 + p->tb;
}

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

/* eng: the GEMM orientation, -1 for the cost model's choice (or the test hook's) */
static void make_plan(const mk_conv_geom *g, int Cout, int m, int isa, int nthreads, int eng,
                      wino_plan *p) {
    const int Cin = g->C;
    p->isa = isa;
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
    if (tb >= p->ntiles) {
        tb = p->ntiles;
    } else { /* equal blocks (a last block of a few tiles would pad a whole igemm tile) */
        const ptrdiff_t nb = (p->ntiles + tb - 1) / tb;
        tb = ((p->ntiles + nb - 1) / nb + nr - 1) / nr * nr;
        if (tb >= p->ntiles) tb = p->ntiles;
    }
    p->tb = (int)tb;
    p->nblocks = p->split = (p->ntiles + tb - 1) / tb;
    const ptrdiff_t rest = p->ntiles - (p->split - 1) * tb; /* the last block's, split */
    ptrdiff_t last = rest;
    if (p->nblocks > 1 && last < nr) { /* less than a wide tile left: into the block before */
        p->nblocks--;
        last += tb;
    }
    p->tmax = (int)(last > tb ? last : tb);
    p->shared = nthreads > 1 && p->nblocks < 2 * nthreads;
    /* V and M rows hold the lanes the blocks' igemm tiles read */
    mk_igemm_tiling tl;
    mk_conv_igemm_tiling(isa, tb, &tl);
    const ptrdiff_t read_full = tiled_lanes(&tl, tb);
    mk_conv_igemm_tiling(isa, last, &tl);
    const ptrdiff_t read_last = tiled_lanes(&tl, last);
    p->tbs = RS16(read_full > read_last ? read_full : read_last);
    /* the GEMM stage's orientation: the cheaper one by the cost model (below): igemm (each
     * block's tiles rounded up to one igemm tile width, times its cost per lane) or engine.
     * The model prices the blocks split (p->split), as its margins were measured: priced
     * merged, a 14x14 map at 256 channels went to F(2x2), which ran slower (performance
     * notes). The run computes as many lanes or fewer, and one pass over U less. */
    const double icost = (double)p->T * p->coutp * Cin *
                         ((double)(p->split - 1) * mk_conv_igemm_lanes(isa, tb, &fn, &nr) +
                          mk_conv_igemm_lanes(isa, rest, &fn, &nr));
    double ecost = icost;
    if (mk_wino_eng_available(isa)) {
        const int enr = mk_wino_eng_nr(isa);
        p->enp = (Cout + enr - 1) / enr;
        ecost = (double)p->T * p->ntiles *
                ((double)p->enp * enr * Cin * mk_conv_get_config(isa)->wino_eng_lane_cost + (Cin + Cout) * ENG_ROW_COST);
    }
    const int force = eng >= 0 ? eng : __atomic_load_n(&wino_engine_mode, __ATOMIC_RELAXED);
    /* a margin for the model's error, as in the cost model: ties keep the igemm (at batch 32
     * the blocks are 48 tiles, where the engine orientation measured 0.89-1.05x) */
    p->eng = mk_wino_eng_available(isa) && (force >= 0 ? force : ecost < 0.9 * icost);
    p->gcost = p->eng ? ecost : icost;
    if (p->eng) {
        /* items of whole panel runs (the engine prefetches the next pair of a run into
         * L2), at least 4 per thread */
        const int want = (4 * nthreads + p->T - 1) / p->T;
        p->epc = (p->enp + want - 1) / want;
        p->usz = mk_wino_eng_bytes(isa, Cout, Cin);
        p->lda = RS16(Cin) + 16; /* not a power of two: the row kernels read 8 rows at once */
        p->ldm = RS16(Cout) + 16;
        p->vsz = (ptrdiff_t)p->T * p->tmax * p->lda;
        p->msz = (ptrdiff_t)p->T * p->tmax * p->ldm;
        p->csz = (ptrdiff_t)WINO_CH * (p->cst = (ptrdiff_t)p->T * p->tbs + 16);
    } else {
        p->enp = p->epc = 0;
        p->usz = 0;
        p->lda = p->ldm = 0;
        p->vsz = (ptrdiff_t)p->T * Cin * p->tbs;
        p->msz = (ptrdiff_t)p->T * p->coutp * p->tbs;
        p->csz = p->cst = 0;
    }
    p->bufsz = buf_size(m, p->tmax < p->TW ? p->tmax : p->TW, p->tmax);
    p->segsz = segs_size(p->tmax);
    p->per_thread = p->vsz + p->msz + p->csz + p->bufsz + p->segsz;
}

int mk_conv_winograd_engine(const mk_conv_geom *g, int Cout, int m, int isa, int nthreads) {
    wino_plan p;
    make_plan(g, Cout, m, isa, nthreads, -1, &p);
    return p.eng;
}

ptrdiff_t mk_conv_winograd_scratch(const mk_conv_geom *g, int Cout, int m, int isa,
                                   int nthreads, int eng) {
    wino_plan p;
    make_plan(g, Cout, m, isa, nthreads, eng, &p);
    return (p.shared ? p.vsz + p.msz + p.nthreads * (p.csz + p.bufsz + p.segsz)
                     : p.nthreads * p.per_thread) +
           2 * (ptrdiff_t)g->C; /* + koff */
}

/* ---- the GEMM engine's table (wino-eng-api.h) ------------------------------------------- */

static const mk_wino_eng_api *eng_api; /* installed once at import, before any call */

void mk_wino_eng_install(const mk_wino_eng_api *api) { eng_api = api; }

int mk_wino_eng_available(int isa) { return eng_api != NULL && eng_api->available(isa); }

int mk_wino_eng_nr(int isa) { return eng_api->nr(isa); }

size_t mk_wino_eng_bytes(int isa, int Cout, int Cin) { return eng_api->bytes(isa, Cout, Cin); }

void mk_wino_eng_pack(int isa, int T, int Cout, int Cin, const float *ut, int tbias,
                      const float *bias, void *dst) {
    eng_api->pack(isa, T, Cout, Cin, ut, tbias, bias, dst);
}

int mk_wino_eng_gemm(int isa, int rows, int Cout, int Cin, const float *a, ptrdiff_t lda,
                     const void *u, float *c, ptrdiff_t ldc, int p0, int p1) {
    return eng_api->gemm(isa, rows, Cout, Cin, a, lda, u, c, ldc, p0, p1);
}

/* ---- cost model ---------------------------------------------------------------------------
 * Estimated time in units of one igemm multiply-add (about 110 per ns on one Zen 4/5 core),
 * per candidate:
 *   implicit GEMM: Cout_pad * 9 Cin * (grid lanes rounded up to the tile width, times the
 *                  tile's cost per lane), per image
 *                  + the packed weights streamed from L3 once per image
 *   F(m):          the GEMM stage (gcost, make_plan), the cheaper orientation of
 *                    igemm:  alpha^2 Cout_pad Cin * (each block's tiles rounded up to its
 *                            igemm tile, times that tile's cost per lane: conv-config.c)
 *                    engine: alpha^2 tiles * (Cout_pad(NR) Cin wino_eng_lane_cost
 *                                             + (Cin + Cout) ENG_ROW_COST)
 *                  + tiles * (Cin + Cout) * wino_transform_cost[m]   (input + output transforms)
 *                  + U streamed once per block (once in all when it fits L2; within a block
 *                    each U[t] stays in L2 across the block's igemm tiles)
 * STREAM_COST was measured on AVX-512 against the igemm kernels, as the table's transform
 * costs were (units per byte of weights that do not stay in L2). */
#define STREAM_COST 4.0

/* weights stay in L2 across the blocks while they take at most half of it */
static double stream_bytes(double wbytes, double passes) {
    return wbytes > (double)(mk_cpu_caches()->l2 / 2) ? wbytes * passes : wbytes;
}

int mk_conv_winograd_choose(const mk_conv_geom *g, int Cout, int isa, int nthreads) {
    if (g->KH != 3 || g->KW != 3 || g->sy != 1 || g->sx != 1 || g->dy != 1 || g->dx != 1)
        return 0;
    /* an output smaller than one F(2x2) tile: Winograd computes alpha^2 = 16 products per
     * channel pair for what a direct sum does in at most 9 (im2col, AVX-512, had 155 us for
     * 512 channels at 1x1 where F(2x2) in the engine orientation had 179) */
    if (g->sw != 1 || g->OH < 2 || g->OW < 2) return 0;
    const double cin = g->C, coutp = (Cout + MK_CONV_MR - 1) / MK_CONV_MR * MK_CONV_MR;
    mk_igemm_fn fn;
    int nr;
    const ptrdiff_t L = (ptrdiff_t)(g->OH - 1) * (g->W + g->pl + g->pr) + g->OW;
    const double lanes = mk_conv_igemm_lanes(isa, L, &fn, &nr);
    const double wbytes = coutp * 9.0 * cin * sizeof(float);
    double best = coutp * 9.0 * cin * lanes * g->N + STREAM_COST * stream_bytes(wbytes, g->N);
    int choice = 0;
    for (int i = 0; i < 2; i++) {
        const int m = 2 + 2 * i;
        if (!mk_conv_winograd_supported(m, isa)) continue;
        wino_plan p;
        make_plan(g, Cout, m, isa, nthreads, -1, &p);
        const double T = p.T, tiles = (double)p.ntiles;
        const double ubytes = T * coutp * cin * sizeof(float);
        const double cost = p.gcost + tiles * (cin + Cout) * mk_conv_get_config(isa)->wino_transform_cost[i] +
                            STREAM_COST * stream_bytes(ubytes, (double)p.split);
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
        in(x + ci * g->sc, g->sn, g->sh, g->H, g->W, segs, ns, nl, V + ci * p->T * p->tbs,
           p->tbs, buf);
}

static void block_out(const wino_plan *p, const mk_conv_geom *g, mk_wino_out_fn outf,
                      const mk_wino_seg *segs, int ns, int nl, int c0, int c1, const float *M,
                      float *buf, float *out, const float *res, int act) {
    const ptrdiff_t ohw = (ptrdiff_t)g->OH * g->OW;
    for (int co = c0; co < c1; co++)
        outf(M + co * p->T * p->tbs, p->tbs, segs, ns, nl, buf, out + co * ohw,
             res ? res + co * ohw : NULL, g->OW, act);
}

/* GEMM items [i0, i1) of a block of nl tiles: item = (t, lane tile, panel). */
static void block_gemm(const wino_plan *p, int Cin, int Cout, const float *u,
                       const ptrdiff_t *koff, const float *V, float *M, int nl, ptrdiff_t i0,
                       ptrdiff_t i1) {
    const size_t panel = MK_CONV_MR + (size_t)Cin * MK_CONV_MR;
    mk_igemm_tiling tl;
    mk_conv_igemm_tiling(p->isa, nl, &tl);
    const int nq = (nl + tl.nr - 1) / tl.nr;
    for (ptrdiff_t it = i0; it < i1; it++) {
        const int t = (int)(it / ((ptrdiff_t)nq * p->np)), rem = (int)(it % ((ptrdiff_t)nq * p->np));
        const int q = rem / p->np, pn = rem % p->np;
        const int lane0 = q * tl.nr, lanes = nl - lane0 < tl.nr ? nl - lane0 : tl.nr;
        const int rows = Cout - pn * MK_CONV_MR < MK_CONV_MR ? Cout - pn * MK_CONV_MR : MK_CONV_MR;
        const mk_seg seg = {0, lanes, 0};
        const mk_igemm_fn fn = lanes < tl.nr ? tl.tail_fn : tl.fn;
        fn((size_t)Cin, u + ((size_t)t * p->np + pn) * panel, V + (ptrdiff_t)t * p->tbs + lane0,
           koff, NULL, lanes, rows, M + ((ptrdiff_t)pn * MK_CONV_MR * p->T + t) * p->tbs + lane0,
           p->T * p->tbs, NULL, &seg, 1, MK_ACT_NONE);
    }
}

/* ---- the engine orientation ----------------------------------------------------------------
 * The transforms keep their channel-major layouts; a chunk of WINO_CH channels is transformed
 * into the thread's chunk buffer [c][t][l] and transposed into (out of) the row layout of the
 * engine's GEMM, V_t^T[l][ci] at Vt + (t * tb + l) * lda (M_t^T likewise, ldm), right after
 * (before) the transform, by the same thread. */

/* 4 x 4 transposes in vectors of 4 floats (the baseline SSE2 of the portable build):
 * d[j * ds + i] = s[i * ss + j] for i < r, j < c (whole 4 x 4 blocks, the rest one by one) */
typedef float v4f __attribute__((vector_size(16), aligned(4), may_alias));
typedef int v4i __attribute__((vector_size(16)));
#if defined(__clang__)
#define SHUF4(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define SHUF4(a, b, ...) __builtin_shuffle(a, b, (v4i){__VA_ARGS__})
#endif

static void transpose(const float *s, ptrdiff_t ss, int r, int c, float *d, ptrdiff_t ds) {
    const int r4 = r & ~3, c4 = c & ~3;
    for (int i = 0; i < r4; i += 4) {
        for (int j = 0; j < c4; j += 4) {
            const float *a = s + i * ss + j;
            const v4f x0 = *(const v4f *)a, x1 = *(const v4f *)(a + ss);
            const v4f x2 = *(const v4f *)(a + 2 * ss), x3 = *(const v4f *)(a + 3 * ss);
            const v4f t0 = SHUF4(x0, x1, 0, 4, 1, 5), t1 = SHUF4(x0, x1, 2, 6, 3, 7);
            const v4f t2 = SHUF4(x2, x3, 0, 4, 1, 5), t3 = SHUF4(x2, x3, 2, 6, 3, 7);
            float *b = d + j * ds + i;
            *(v4f *)b = SHUF4(t0, t2, 0, 1, 4, 5);
            *(v4f *)(b + ds) = SHUF4(t0, t2, 2, 3, 6, 7);
            *(v4f *)(b + 2 * ds) = SHUF4(t1, t3, 0, 1, 4, 5);
            *(v4f *)(b + 3 * ds) = SHUF4(t1, t3, 2, 3, 6, 7);
        }
        for (int ii = i; ii < i + 4; ii++)
            for (int j = c4; j < c; j++) d[j * ds + ii] = s[ii * ss + j];
    }
    for (int i = r4; i < r; i++)
        for (int j = 0; j < c; j++) d[j * ds + i] = s[i * ss + j];
}

/* Vt[t][l][c0 + c] = chunk[c][t][l], c < c1 - c0 */
static void rows_in(const wino_plan *p, const float *chunk, int c0, int c1, int nl, float *Vt) {
    for (int t = 0; t < p->T; t++)
        transpose(chunk + (ptrdiff_t)t * p->tbs, p->cst, c1 - c0, nl,
                  Vt + (ptrdiff_t)t * p->tmax * p->lda + c0, p->lda);
}

/* chunk[c][t][l] = Mt[t][l][c0 + c] */
static void rows_out(const wino_plan *p, const float *Mt, int c0, int c1, int nl, float *chunk) {
    for (int t = 0; t < p->T; t++)
        transpose(Mt + (ptrdiff_t)t * p->tmax * p->ldm + c0, p->ldm, nl, c1 - c0,
                  chunk + (ptrdiff_t)t * p->tbs, p->cst);
}

/* input transform of channels [c0, c1) (the igemm layout V, or through the chunk to Vt) */
static void step_in(const wino_plan *p, const mk_conv_geom *g, const float *x, mk_wino_in_fn in,
                    const mk_wino_seg *segs, int ns, int nl, int c0, int c1, float *V,
                    float *chunk, float *buf) {
    if (!p->eng) {
        block_in(p, g, x, in, segs, ns, nl, c0, c1, V, buf);
        return;
    }
    for (int cc = c0; cc < c1; cc += WINO_CH) {
        const int ce = cc + WINO_CH < c1 ? cc + WINO_CH : c1;
        for (int ci = cc; ci < ce; ci++)
            in(x + ci * g->sc, g->sn, g->sh, g->H, g->W, segs, ns, nl,
               chunk + (ci - cc) * p->cst, p->tbs, buf);
        rows_in(p, chunk, cc, ce, nl, V);
    }
}

static void step_out(const wino_plan *p, const mk_conv_geom *g, mk_wino_out_fn outf,
                     const mk_wino_seg *segs, int ns, int nl, int c0, int c1, const float *M,
                     float *chunk, float *buf, float *out, const float *res, int act) {
    if (!p->eng) {
        block_out(p, g, outf, segs, ns, nl, c0, c1, M, buf, out, res, act);
        return;
    }
    const ptrdiff_t ohw = (ptrdiff_t)g->OH * g->OW;
    for (int cc = c0; cc < c1; cc += WINO_CH) {
        const int ce = cc + WINO_CH < c1 ? cc + WINO_CH : c1;
        rows_out(p, M, cc, ce, nl, chunk);
        for (int co = cc; co < ce; co++)
            outf(chunk + (co - cc) * p->cst, p->tbs, segs, ns, nl, buf,
                 out + co * ohw, res ? res + co * ohw : NULL, g->OW, act);
    }
}

/* GEMM items of a block of nl tiles: igemm items (see block_gemm), or engine items
 * (t, run of epc panels) */
static ptrdiff_t gemm_items(const wino_plan *p, int nl) {
    if (p->eng) return (ptrdiff_t)p->T * ((p->enp + p->epc - 1) / p->epc);
    mk_igemm_tiling tl;
    mk_conv_igemm_tiling(p->isa, nl, &tl);
    return (ptrdiff_t)p->T * ((nl + tl.nr - 1) / tl.nr) * p->np;
}

/* GEMM items [i0, i1); returns 0 or -1 (an engine buffer could not be allocated) */
static int step_gemm(const wino_plan *p, int Cin, int Cout, const float *u,
                     const ptrdiff_t *koff, const float *V, float *M, int nl, ptrdiff_t i0,
                     ptrdiff_t i1) {
    if (!p->eng) {
        block_gemm(p, Cin, Cout, u, koff, V, M, nl, i0, i1);
        return 0;
    }
    const int nq = (p->enp + p->epc - 1) / p->epc;
    int rc = 0;
    for (ptrdiff_t it = i0; it < i1; it++) {
        const int t = (int)(it / nq), p0 = (int)(it % nq) * p->epc;
        const int p1 = p0 + p->epc < p->enp ? p0 + p->epc : p->enp;
        rc |= mk_wino_eng_gemm(p->isa, nl, Cout, Cin, V + (ptrdiff_t)t * p->tmax * p->lda, p->lda,
                               (const unsigned char *)u + (size_t)t * p->usz,
                               M + (ptrdiff_t)t * p->tmax * p->ldm, p->ldm, p0, p1);
    }
    return rc;
}

int mk_conv2d_winograd_f32(const mk_conv_geom *g, const float *x, int Cout, int m,
                           const float *u, int eng, float *scratch, float *out,
                           const float *res, int act, int isa, int nthreads) {
    const mk_wino_config cfg = mk_conv_get_config(isa)->wino[m == 4];
    const int Cin = g->C;
    wino_plan p;
    make_plan(g, Cout, m, isa, nthreads, eng, &p);
    nthreads = p.nthreads;
    ptrdiff_t *koff = (ptrdiff_t *)scratch; /* 2 * Cin floats hold Cin ptrdiff_t */
    for (int k = 0; k < Cin; k++) koff[k] = (ptrdiff_t)k * p.T * p.tbs;
    float *base = scratch + 2 * (ptrdiff_t)Cin;
    int status = 0;

    if (!p.shared) {
        mk_team_clock clk;
        nthreads = mk_team_begin(nthreads, &clk);
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
        {
            float *V = base + omp_get_thread_num() * p.per_thread;
            float *M = V + p.vsz, *chunk = M + p.msz, *buf = chunk + p.csz;
            mk_wino_seg *segs = (mk_wino_seg *)(buf + p.bufsz);
#pragma omp for schedule(dynamic, 1) nowait
            for (ptrdiff_t b = 0; b < p.nblocks; b++) {
                ptrdiff_t t0, t1;
                block_range(&p, b, &t0, &t1);
                const int nl = (int)(t1 - t0);
                const int ns = block_segs(&p, g, Cout, t0, t1, segs);
                step_in(&p, g, x, cfg.in, segs, ns, nl, 0, Cin, V, chunk, buf);
                if (step_gemm(&p, Cin, Cout, u, koff, V, M, nl, 0, gemm_items(&p, nl))) {
#pragma omp atomic write
                    status = -1;
                }
                step_out(&p, g, cfg.out, segs, ns, nl, 0, Cout, M, chunk, buf, out, res, act);
            }
            MK_TEAM_DONE(&clk);
        }
        mk_team_end(&clk);
        return status;
    }

    float *V = base, *M = base + p.vsz;
    /* channels per work item: 4 (igemm layout), one chunk (engine) */
    const int cstep = p.eng ? WINO_CH : 4;
    mk_team_clock clk;
    nthreads = mk_team_begin(nthreads, &clk);
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
    {
        float *chunk = M + p.msz + omp_get_thread_num() * (p.csz + p.bufsz + p.segsz);
        float *buf = chunk + p.csz;
        mk_wino_seg *segs = (mk_wino_seg *)(buf + p.bufsz); /* each thread its own copy */
        for (ptrdiff_t b = 0; b < p.nblocks; b++) {
            ptrdiff_t t0, t1;
            block_range(&p, b, &t0, &t1);
            const int nl = (int)(t1 - t0);
            const int ns = block_segs(&p, g, Cout, t0, t1, segs);
#pragma omp for schedule(dynamic, 1) nowait
            for (int ci = 0; ci < Cin; ci += cstep)
                step_in(&p, g, x, cfg.in, segs, ns, nl, ci, ci + cstep < Cin ? ci + cstep : Cin,
                        V, chunk, buf);
            MK_TEAM_BARRIER(&clk);
            const ptrdiff_t items = gemm_items(&p, nl);
            const int istep = p.eng ? 1 : 4;
#pragma omp for schedule(dynamic, 1) nowait
            for (ptrdiff_t it = 0; it < items; it += istep)
                if (step_gemm(&p, Cin, Cout, u, koff, V, M, nl, it,
                              it + istep < items ? it + istep : items)) {
#pragma omp atomic write
                    status = -1;
                }
            MK_TEAM_BARRIER(&clk);
#pragma omp for schedule(dynamic, 1) nowait
            for (int co = 0; co < Cout; co += cstep)
                step_out(&p, g, cfg.out, segs, ns, nl, co, co + cstep < Cout ? co + cstep : Cout,
                         M, chunk, buf, out, res, act);
            MK_TEAM_BARRIER(&clk);
        }
        MK_TEAM_DONE(&clk);
    }
    mk_team_end(&clk);
    return status;
}
