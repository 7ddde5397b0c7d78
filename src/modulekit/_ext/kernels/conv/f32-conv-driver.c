/* float32 convolution driver: phase images, the kernel config table, tiling, OpenMP; the
 * bfloat16-compute implicit GEMM (mk_conv2d_bf16) runs the same schedule over bfloat16 pair
 * rows (packed tiles or the pair image, conv.h).
 *
 * Work of one image = groups x blocks of pixel tiles x panel chunks, handed out dynamically
 * (a block's tiles across a chunk's panels, so their input rows stay in L1/L2 while the
 * packed panels stream from L2; see conv2d_igemm). */
#include <string.h>

#include "conv.h"
#include "common/caches.h"
#include "common/team.h"
#include "mk_omp.h"
#include "isa.h"

void mk_conv_geometry(mk_conv_geom *g) {
    const int Hp = g->H + g->pt + g->pb, Wp = g->W + g->pl + g->pr;
    g->Hq = (Hp + g->sy - 1) / g->sy;
    g->Wq = (Wp + g->sx - 1) / g->sx;
    if (g->Wq < g->OW) g->Wq = g->OW;
    if (g->Hq < g->OH) g->Hq = g->OH;
    g->plane = (ptrdiff_t)g->sy * g->sx * g->Hq * g->Wq;
}

ptrdiff_t mk_conv_phase_size(const mk_conv_geom *g, int channels) {
    /* grid columns past OW of the last channel read up to one row and a kernel width past
     * the plane: keep that much zeroed slack */
    return (ptrdiff_t)channels * g->plane + 2 * (ptrdiff_t)g->Wq + 64;
}

static int used_phase_cols(const mk_conv_geom *g, int b) {
    for (int kw = 0; kw < g->KW; kw++)
        if ((kw * g->dx) % g->sx == b) return 1;
    return 0;
}

/* Both column phases of row phase a for horizontal stride 2 in one pass over each input row
 * (unit column stride, any left padding): even/odd padded columns to sub-images 0 and 1, 16
 * columns at a time on AVX-512 (f32-conv-phase-avx512.c). */
static void split_rows_s2(const mk_conv_geom *g, const float *xc, float *sub0, int a,
                          float padv, int i0, int i1, int isa) {
    const int Hq = g->Hq, Wq = g->Wq, W = g->W, pl = g->pl;
    float *sub1 = sub0 + (ptrdiff_t)Hq * Wq;
    for (int i = i0; i < i1; i++) {
        float *r0 = sub0 + (ptrdiff_t)i * Wq, *r1 = sub1 + (ptrdiff_t)i * Wq;
        const int y = i * g->sy + a - g->pt;
        if (y < 0 || y >= g->H) {
            for (int j = 0; j < Wq; j++) r0[j] = r1[j] = padv;
            continue;
        }
#if MK_X86
        if (isa >= MK_ISA_AVX512) {
            mk_f32_phase_row_s2_avx512(xc + y * g->sh, W, pl, r0, r1, Wq, padv);
            continue;
        }
#endif
        /* padded column p = x + pl; r0[j] = padded 2j, r1[j] = padded 2j+1 */
        const float *xr = xc + y * g->sh - pl; /* xr[p] = input column p - pl */
        int j = 0;
        for (; j < Wq && 2 * j < pl; j++) { /* the left padding */
            r0[j] = padv;
            r1[j] = 2 * j + 1 - pl >= 0 && 2 * j + 1 - pl < W ? xr[2 * j + 1] : padv;
        }
        for (; j < Wq && 2 * j + 1 - pl < W; j++) { /* pairs fully inside the input */
            r0[j] = xr[2 * j];
            r1[j] = xr[2 * j + 1];
        }
        for (; j < Wq; j++) {
            const int p0 = 2 * j, p1 = 2 * j + 1;
            r0[j] = (p0 - pl >= 0 && p0 - pl < W) ? xr[p0] : padv;
            r1[j] = (p1 - pl >= 0 && p1 - pl < W) ? xr[p1] : padv;
        }
    }
}

/* Rows [i0, i1) of every sub-image of one channel's phase image (see below). */
static void phase_channel_rows(const mk_conv_geom *g, const float *xc, float *ph, float padv,
                               int i0, int i1, int isa) {
    const int sy = g->sy, sx = g->sx, Hq = g->Hq, Wq = g->Wq;
    for (int a = 0; a < sy; a++) {
        int used_a = 0; /* phases no kernel tap reads are left unwritten (1x1 stride 2) */
        for (int kh = 0; kh < g->KH && !used_a; kh++) used_a = (kh * g->dy) % sy == a;
        if (!used_a) continue;
        if (sx == 2 && g->sw == 1 && used_phase_cols(g, 0) && used_phase_cols(g, 1)) {
            split_rows_s2(g, xc, ph + (ptrdiff_t)(a * sx) * Hq * Wq, a, padv, i0, i1, isa);
            continue;
        }
        for (int b = 0; b < sx; b++) {
            int used_b = 0;
            for (int kw = 0; kw < g->KW && !used_b; kw++) used_b = (kw * g->dx) % sx == b;
            if (!used_b) continue;
            float *sub = ph + (ptrdiff_t)(a * sx + b) * Hq * Wq;
            for (int i = i0; i < i1; i++) {
                float *row = sub + (ptrdiff_t)i * Wq;
                const int y = i * sy + a - g->pt;
                if (y < 0 || y >= g->H) {
                    for (int j = 0; j < Wq; j++) row[j] = padv;
                    continue;
                }
                const float *xr = xc + y * g->sh;
#if MK_X86
                if (sx == 1 && g->sw == 1 && isa >= MK_ISA_AVX512) {
                    mk_f32_phase_row_s1_avx512(xr, g->W, g->pl, row, Wq, padv);
                    continue;
                }
#endif
                /* columns j with 0 <= j*sx + b - pl < W */
                int j0 = g->pl - b > 0 ? (g->pl - b + sx - 1) / sx : 0;
                int j1 = (g->W + g->pl - b + sx - 1) / sx; /* first j with x >= W */
                if (j1 > Wq) j1 = Wq;
                if (j0 > j1) j0 = j1;
                for (int j = 0; j < j0; j++) row[j] = padv;
                const int x0 = j0 * sx + b - g->pl;
                if (sx == 1 && g->sw == 1) {
                    memcpy(row + j0, xr + x0, sizeof(float) * (size_t)(j1 - j0));
                } else if (sx == 2 && g->sw == 1) { /* constant stride: vectorised */
                    const float *p = xr + x0 - 2 * j0;
                    for (int j = j0; j < j1; j++) row[j] = p[2 * j];
                } else {
                    const ptrdiff_t st = sx * g->sw;
                    const float *p = xr + x0 * g->sw;
                    for (int j = j0; j < j1; j++, p += st) row[j] = *p;
                }
                for (int j = j1; j < Wq; j++) row[j] = padv;
            }
        }
    }
}

/* Phase image of one channel: sub-image (a, b) row i col j = padded input (i*sy+a, j*sx+b). */
void mk_conv_phase_channel_f32(const mk_conv_geom *g, const float *xc, float *ph, float padv) {
    phase_channel_rows(g, xc, ph, padv, 0, g->Hq, MK_ISA_GENERIC);
}

/* per-k input offsets (the indirection table) into the phase image, or into x itself for the
 * direct 1x1 path; identical for every group and tile */
static void fill_koff(const mk_conv_geom *g, int cin_g, int direct, ptrdiff_t *koff) {
    size_t k = 0;
    for (int ci = 0; ci < cin_g; ci++)
        for (int kh = 0; kh < g->KH; kh++)
            for (int kw = 0; kw < g->KW; kw++, k++) {
                if (direct) {
                    koff[k] = ci * g->sc;
                } else {
                    const int ry = kh * g->dy, rx = kw * g->dx;
                    koff[k] = ci * g->plane +
                              (ptrdiff_t)((ry % g->sy) * g->sx + rx % g->sx) * g->Hq * g->Wq +
                              (ptrdiff_t)(ry / g->sy) * g->Wq + rx / g->sx;
                }
            }
}

/* Row bands per channel of the phase copy: few channels (a network's first layer, 3 channels
 * at 224x224) are split into bands so that every thread copies (in chunks of 4 items). */
static int phase_split(const mk_conv_geom *g, int nthreads) {
    int parts = 1;
    if (g->C < 8 * nthreads) {
        parts = (8 * nthreads + g->C - 1) / g->C;
        if (parts > g->Hq) parts = g->Hq > 0 ? g->Hq : 1;
    }
    return parts;
}

/* Tiles of a bfloat16 work item, and the bytes of packed tiles it may hold (see
 * conv2d_igemm). */
#define MK_CONV_TILE_BLOCK 8
#define MK_CONV_BLOCK_BYTES (256 << 10)
/* lanes of the widest float32 igemm tile (f32-igemm-8x48-avx512.c) */
#define MK_CONV_TILE_LANES 48
/* pair images a step converts at most (see pair_images_per_step) */
#define MK_CONV_PAIR_IMAGES 16

/* Chunks of panels for short panels (small K: a 3-channel 7x7 stem has 4.7 KiB panels, 38 KiB
 * for its 64 channels) whose set would not stay in L1 beside the tile's input rows: chunks of
 * at most 24 KiB of panels (the stem: 2 chunks of 4 panels, about 5% faster); else 1. */
static int l1_chunks(size_t panel, int npg) {
    if (panel * sizeof(float) <= 16384 && (double)npg * panel * sizeof(float) > 32768) {
        const int fit = (int)(24576 / (panel * sizeof(float)));
        return (npg + fit - 1) / fit;
    }
    return 1;
}

/* Segments of the tile starting at grid lane q0 with nl lanes (see mk_seg). */
/* Lanes [lo, hi) going to out + off + lane appended to the ns segments: the last one
 * extended where they continue it in the tile and in the output. */
static void add_segment(mk_seg *segs, int *ns, int lo, int hi, ptrdiff_t off) {
    if (*ns > 0 && segs[*ns - 1].off == off && segs[*ns - 1].hi == lo) {
        segs[*ns - 1].hi = hi;
    } else {
        segs[*ns].lo = lo;
        segs[*ns].hi = hi;
        segs[*ns].off = off;
        ++*ns;
    }
}

static int tile_segments(const mk_conv_geom *g, ptrdiff_t q0, int nl, mk_seg *segs) {
    const int Wq = g->Wq, OW = g->OW;
    int ns = 0;
    ptrdiff_t oh = q0 / Wq;
    for (;; oh++) {
        const ptrdiff_t row0 = oh * Wq; /* grid lane of (oh, 0) */
        if (row0 >= q0 + nl || oh >= g->OH) break;
        ptrdiff_t lo = row0 - q0, hi = row0 + OW - q0;
        if (lo < 0) lo = 0;
        if (hi > nl) hi = nl;
        /* rows join one segment where they are contiguous in the output too (Wq == OW) */
        if (hi > lo) add_segment(segs, &ns, (int)lo, (int)hi, oh * OW - row0 + q0);
    }
    return ns;
}

/* The tile of row vectors (V lanes each, mk_conv_igemm_grid_tiling) at tiled lanes
 * [q0, q0 + nl): the grid lane of its first vector (*base), each vector's offset from it
 * (voff; past the tile's last vector, the last one's again: a kernel wider than the tile
 * computes it twice) and the tile's segments. */
static int vector_segments(const mk_conv_geom *g, int V, ptrdiff_t q0, int nl, ptrdiff_t *base,
                           ptrdiff_t voff[3], mk_seg *segs) {
    const int vpr = (g->OW + V - 1) / V; /* vectors a row */
    int ns = 0;
    for (int j = 0; j < 3; j++) { /* a tile's vectors: at most 3 (48 / 16, 24 / 8) */
        if (j * V >= nl) {
            voff[j] = voff[j - 1];
            continue;
        }
        const ptrdiff_t v = q0 / V + j, oh = v / vpr;
        const int ow = (int)(v % vpr) * V, n = g->OW - ow < V ? g->OW - ow : V;
        const ptrdiff_t lane = oh * g->Wq + ow;
        if (j == 0) *base = lane;
        voff[j] = lane - *base;
        add_segment(segs, &ns, j * V, j * V + n, oh * g->OW + ow - (ptrdiff_t)j * V);
    }
    return ns;
}

/* A panel's tile (rows output channels from merged channel co, lane l of row r at
 * tile[r MK_CONV_TILE_LANES + l]) to its block's places in out (one image; mk_conv_blocks):
 * segment s's lanes are grid outputs segs[s].off + lane of the block's OH x OW, in runs of
 * one output row each (a segment spans rows where the grid is as wide as the output). */
static void place_tile(const mk_conv_geom *g, const mk_conv_blocks *b, int Cout, int co,
                       const float *tile, int rows, const mk_seg *segs, int nseg, float *out,
                       int isa) {
    const int per = Cout / b->nblocks, blk = co / per;
    const int nh = b->count[2 * blk], nw = b->count[2 * blk + 1];
    float *o = out + (ptrdiff_t)(co % per) * b->cs + b->origin[blk];
    for (int s = 0; s < nseg; s++) {
        for (int lo = segs[s].lo, n; lo < segs[s].hi; lo += n) {
            const ptrdiff_t q = segs[s].off + lo, oh = q / g->OW, ow = q % g->OW;
            n = segs[s].hi - lo < g->OW - ow ? segs[s].hi - lo : (int)(g->OW - ow);
            if (oh >= nh || ow >= nw) continue; /* past this block's outputs */
            const int keep = n < nw - ow ? n : (int)(nw - ow);
            float *d = o + oh * b->sy * b->rs + ow * b->sx;
            for (int r = 0; r < rows; r++) {
                const float *t = tile + r * MK_CONV_TILE_LANES + lo;
#if MK_X86
                if (isa >= MK_ISA_AVX512) {
                    mk_f32_place_row_avx512(t, keep, d + r * b->cs, b->sx);
                    continue;
                }
#endif
                for (int l = 0; l < keep; l++) d[r * b->cs + l * b->sx] = t[l];
            }
        }
    }
}

/* The values of an input channel the bfloat16 pair planes hold: the image (direct), its phase
 * plane, or the phase plane's sub-image (0, 0) alone where every tap reads there (a 1x1
 * stride-2 layer, ResNet's downsamples: a quarter of the conversion). */
static ptrdiff_t pair_plane(const mk_conv_geom *g, int direct) {
    if (direct) return (ptrdiff_t)g->H * g->W;
    for (int kh = 0; kh < g->KH; kh++)
        if ((kh * g->dy) % g->sy) return g->plane;
    for (int kw = 0; kw < g->KW; kw++)
        if ((kw * g->dx) % g->sx) return g->plane;
    return (ptrdiff_t)g->Hq * g->Wq;
}

/* A stride-1 layer's pair plane of one image's channels lo, hi (NULL: zeros) straight from its
 * input rows (unit column stride): the padded grid's rows, zeros in the padding, the same
 * words as the pairs of its phase planes without the copy into them (64 -> 64 3x3 at 56x56:
 * the phase rows' copy was 10-14% of the layer, one small memcpy a row). */
static void pair_plane_s1(const mk_conv_geom *g, mk_bf16_pair_plane_fn *pairs, const float *lo,
                          const float *hi, uint32_t *dst) {
    const int Wq = g->Wq, W = g->W, pl = g->pl;
    for (int i = 0; i < g->Hq; i++) {
        uint32_t *row = dst + (ptrdiff_t)i * Wq;
        const int y = i - g->pt;
        if (y < 0 || y >= g->H) {
            memset(row, 0, (size_t)Wq * sizeof *row);
            continue;
        }
        memset(row, 0, (size_t)pl * sizeof *row);
        pairs(lo + y * g->sh, hi ? hi + y * g->sh : NULL, (size_t)W, row + pl);
        memset(row + pl + W, 0, (size_t)(Wq - pl - W) * sizeof *row);
    }
}

/* Images whose pair images (img_words words each) a step converts before their tiles run: as
 * many as fit half of L2 (common/caches.h), at most N. Each panel then passes over the tiles
 * of all of them, where a panel-major layer on a small map read its panels from L3 again for
 * every image (ResNet-18's 512-channel 3x3 layers at 7x7: 2 tiles an image, 4.7 MB of
 * panels). */
static int pair_images_per_step(const mk_conv_geom *g, ptrdiff_t img_words) {
    const double fit = (double)mk_cpu_caches()->l2 / 2 / ((double)img_words * 4);
    int nb = fit < 1 ? 1 : fit > MK_CONV_PAIR_IMAGES ? MK_CONV_PAIR_IMAGES : (int)fit;
    return nb < g->N ? nb : g->N > 0 ? g->N : 1;
}

/* The implicit GEMM of mk_conv2d_f32 (w16 == NULL) and mk_conv2d_bf16 (w16: path bf16's pair
 * panels; tiles: the scratch of its packed tiles or pair image): one schedule for both. */
static int conv2d_igemm(const mk_conv_geom *g, const float *x, int groups, int Cout,
                        const void *packed, int wtype, float *wide, int bf16,
                        const uint32_t *w16, uint32_t *tiles, float *phase, ptrdiff_t *koff,
                        const mk_conv_blocks *blocks, float *out, const float *res, int act,
                        int isa, int nthreads) {
    const ptrdiff_t L = (ptrdiff_t)(g->OH - 1) * g->Wq + g->OW; /* grid lanes to compute */
    const int cin_g = g->C / groups, cout_g = Cout / groups, taps = g->KH * g->KW;
    const int direct = phase == NULL; /* 1x1, stride 1, no padding: read x itself */
    /* a pair plane; float32: the input's plane */
    const ptrdiff_t pplane = w16 ? pair_plane(g, direct)
                             : direct ? (ptrdiff_t)g->H * g->W : g->plane;
    mk_bf16_igemm_config c16 = {NULL, NULL, NULL, NULL, NULL, 0, MK_CONV_MR, 1, 0};
    /* the tile width; float32: the tiles' kernel and the last one's */
    mk_igemm_tiling tl = {NULL, NULL, 0, 0, L, 0};
    if (w16) {
        mk_conv_bf16_lanes(bf16, L, cin_g, taps, pplane, &c16);
        tl.nr = c16.nr;
    } else if (direct) {
        mk_conv_igemm_tiling(isa, L, &tl);
    } else { /* the grid's lanes or its rows' vectors */
        mk_conv_igemm_grid_tiling(isa, g, &tl);
    }
    const int mr = c16.mr, image = c16.image; /* output channels of a panel; B's source */
    const int npg = (cout_g + mr - 1) / mr; /* panels per group */
    const size_t K = (size_t)cin_g * taps;
    /* bfloat16: the kernel's taps of kpt pair rows (conv.h) */
    const int ntaps = image ? taps : 1;
    const size_t kpt = mk_bf16_pair_rows(image ? (size_t)cin_g : K, c16.kpa);
    static const ptrdiff_t tap0[1] = {0};
    const ptrdiff_t *tapoff = image ? koff : tap0; /* channel 0's offsets of the taps */
    /* floats (words) of one panel */
    const size_t panel = w16 ? mr + ntaps * kpt * mr : MK_CONV_MR + K * MK_CONV_MR;
    const size_t tile_words = kpt * (size_t)tl.nr; /* one packed bfloat16 tile */
    /* the pair image: each image's groups x kpt planes, nbi images a step */
    const ptrdiff_t img_words = (ptrdiff_t)groups * kpt * pplane;
    const int nbi = image ? pair_images_per_step(g, img_words) : 1;
    const ptrdiff_t ohw = (ptrdiff_t)g->OH * g->OW;
    /* from a group's input (B rows) to the next one's */
    const ptrdiff_t gstride = (ptrdiff_t)cin_g * (direct ? g->sc : g->plane);
    const int ntiles = (int)((tl.lanes + tl.nr - 1) / tl.nr);

    /* small convolutions stay on one thread */
    const double flops = 2.0 * g->N * (double)ohw * Cout * (double)K;
    if (flops < 4e5) nthreads = 1;

    /* Work items: (group, tile, chunk of panels). When a group's packed weights are larger
     * than its slice of the phase image (deep layers on small maps), the items run panel-major
     * (one panel per chunk, its tiles consecutive) so each panel is read from memory once and
     * the small input stays in L2; otherwise tile-major, so a tile's input rows stay in L1/L2
     * while the panels stream from L2. */
    const double wbytes = (double)panel * npg * sizeof(float);
    const double bbytes = image ? (double)kpt * pplane * 4
                          : w16 ? (double)tile_words * ntiles * 4
                                : (double)cin_g * pplane * 4;
    const int panel_major = wbytes > bbytes;
    /* Tiles per item: bfloat16 items are blocks of tiles (each panel's output rows written
     * MK_CONV_TILE_BLOCK tiles at a time, not one: 64 or 256 output channels of 32-pixel
     * tiles would write 64 or 256 rows of 128 bytes each per item, more store streams than
     * the caches follow: ResNet-18's stem on AMX, one thread, batch 4: 14.5 ms with one tile
     * an item, 10.4 with 4, 7.1 with 8, 7.8 with 16); packed tiles at most as many as fit
     * MK_CONV_BLOCK_BYTES of the thread's buffer (a 3x3 over 128 channels packs 110 KiB a
     * tile at NR = 48, which stays in L2 while every panel passes over it) */
    int tb = w16 ? MK_CONV_TILE_BLOCK : 1;
    if (w16 && !image && !panel_major) {
        const size_t fit = MK_CONV_BLOCK_BYTES / (tile_words * sizeof(uint32_t));
        tb = fit < 1 ? 1 : fit < (size_t)tb ? (int)fit : tb;
    }
    const int nblocks = (ntiles + tb - 1) / tb;
    int nchunks = 1;
    const int base_items = groups * nblocks * nbi;
    if (panel_major) {
        nchunks = npg;
    } else if (base_items < 4 * nthreads) {
        /* chunks of panels, so that a thread has work even with few tiles */
        nchunks = (4 * nthreads + base_items - 1) / base_items;
        if (nchunks > npg) nchunks = npg;
    }
    if (!panel_major && !direct) {
        const int want = l1_chunks(panel, npg);
        if (want > nchunks) nchunks = want;
    }
    if (!panel_major && nthreads > 1 && base_items * nchunks < 16 * nthreads) {
        /* few items (a stride-2 3x3 on a 28x28 map at batch 1: 17 tiles): more panel chunks
         * when that evens out the threads' shares (17 items on 2 threads: one does 9, 6%
         * over the mean; 34: 17 each) */
        int best = nchunks;
        double best_ex = 2.0;
        for (int c = nchunks; c <= npg && c <= 4 * nchunks; c++) {
            const int it = base_items * ((npg + (npg + c - 1) / c - 1) / ((npg + c - 1) / c));
            const double ex = (double)((it + nthreads - 1) / nthreads) * nthreads / it;
            if (ex < best_ex - 0.01) {
                best = c;
                best_ex = ex;
            }
        }
        nchunks = best;
    }
    const int ppc = (npg + nchunks - 1) / nchunks; /* panels per chunk */
    nchunks = (npg + ppc - 1) / ppc;
    const int items = base_items * nchunks;
    /* dynamic scheduling (a preempted thread's items go to the others) in grains of about
     * 1/8 of a thread's share, so small items do not pay one atomic each; single items when
     * there are few (a grain of 2 over 34 items would be 17 grains, uneven again) */
    int grain = items / (8 * (nthreads > 0 ? nthreads : 1));
    if (grain < 1 || items < 32 * nthreads) grain = 1;

    /* per-k input offsets (the indirection table), identical for every group and tile */
    fill_koff(g, cin_g, direct, koff);

    const float *wp = (const float *)packed;
    if (!w16 && wtype != MK_W_F32) {
        const size_t total = panel * (size_t)npg * groups;
        const size_t chunk = 1 << 14;
        const size_t nch = (total + chunk - 1) / chunk;
        MK_TEAM_FOR(nthreads, 1)
        for (size_t i = 0; i < nch; i++) {
            const size_t lo = i * chunk, n = total - lo < chunk ? total - lo : chunk;
            if (wtype == MK_W_F16)
                mk_widen_f16_f32((const uint16_t *)packed + lo, wide + lo, n, isa);
            else
                mk_widen_bf16_f32((const uint16_t *)packed + lo, wide + lo, n, isa);
        }
        MK_TEAM_FOR_END
        wp = wide;
    }

    /* the phase copy in items of a channel's row band (see phase_split) */
    const int phase_parts = phase_split(g, nthreads);
    const int phase_items = g->C * phase_parts;

    if (!direct) { /* slack past the last channel: read only by dropped grid columns */
        const ptrdiff_t total = mk_conv_phase_size(g, g->C);
        for (ptrdiff_t i = (ptrdiff_t)g->C * g->plane; i < total; i++) phase[i] = 0.0f;
    }
    /* the pair images: planes of padding channels and the slack past the last image, zero */
    const ptrdiff_t pair_planes = image ? (ptrdiff_t)groups * kpt : 0;
    if (image) {
        for (int i = 0; i < nbi; i++)
            for (int grp = 0; grp < groups; grp++)
                for (size_t p = (cin_g + 1) / 2; p < kpt; p++)
                    memset(tiles + i * img_words + (grp * kpt + p) * pplane, 0,
                           pplane * sizeof *tiles);
        memset(tiles + nbi * img_words, 0, (2 * (size_t)g->Wq + 96) * sizeof *tiles);
    }

    const int placed = blocks && blocks->origin; /* the blocks' outputs in place (conv.h) */

    mk_team_clock clk;
    nthreads = mk_team_begin(nthreads, &clk);
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
    {
        mk_seg segs[MK_CONV_TILE_BLOCK][MK_MAX_SEGS];
        float own_tile[MK_CONV_MR * MK_CONV_TILE_LANES]; /* a panel's tile, when placed */
        ptrdiff_t packed_key = -1; /* the tile in this thread's bfloat16 buffer */
        if (c16.begin) c16.begin();
        for (int n0 = 0; n0 < g->N; n0 += nbi) {
            const int nb = g->N - n0 < nbi ? g->N - n0 : nbi, n = n0; /* images of the step */
            const float *bimg = direct ? x + n * g->sn : phase;
            if (!direct && !image) {
#pragma omp for schedule(dynamic, 4) nowait
                for (int it = 0; it < phase_items; it++) {
                    const int c = it / phase_parts, part = it % phase_parts;
                    phase_channel_rows(g, x + n * g->sn + c * g->sc, phase + c * g->plane, 0.0f,
                                       g->Hq * part / phase_parts,
                                       g->Hq * (part + 1) / phase_parts, isa);
                }
                MK_TEAM_BARRIER(&clk); /* the phase image is complete */
            }
            if (image) { /* the pair images: channels 2p, 2p + 1 of each group */
                /* phase planes: the thread's own two (images of a step convert at once) */
                float *own_phase =
                    direct ? NULL : phase + (ptrdiff_t)omp_get_thread_num() * 2 * g->plane;
#pragma omp for schedule(dynamic, 1) nowait
                for (ptrdiff_t it = 0; it < nb * pair_planes; it++) {
                    const ptrdiff_t i = it / pair_planes, pl = it % pair_planes;
                    const int grp = (int)(pl / kpt), c0 = 2 * (int)(pl % kpt);
                    if (c0 >= cin_g) continue; /* zero */
                    const int c = grp * cin_g + c0, two = c0 + 1 < cin_g;
                    const float *xc = x + (n0 + i) * g->sn + (ptrdiff_t)c * g->sc, *lo = xc;
                    uint32_t *dst = tiles + i * img_words + pl * pplane;
                    ptrdiff_t cs = g->sc;
                    if (!direct && g->sy == 1 && g->sx == 1 && g->sw == 1) {
                        pair_plane_s1(g, c16.pairs, xc, two ? xc + g->sc : NULL, dst);
                        continue;
                    }
                    if (!direct) { /* their phase planes first, converted while in cache */
                        for (int h = 0; h <= two; h++)
                            phase_channel_rows(g, xc + h * g->sc, own_phase + h * g->plane,
                                               0.0f, 0, g->Hq, isa);
                        lo = own_phase;
                        cs = g->plane;
                    }
                    c16.pairs(lo, two ? lo + cs : NULL, (size_t)pplane, dst);
                }
                MK_TEAM_BARRIER(&clk);
            } else if (w16 && panel_major) { /* every tile's bfloat16 pairs, once per image */
#pragma omp for schedule(dynamic, 1) nowait
                for (int it = 0; it < groups * ntiles; it++) {
                    const int grp = it / ntiles, tile = it % ntiles;
                    const ptrdiff_t q0 = (ptrdiff_t)tile * tl.nr;
                    const int nl = (int)(L - q0 < tl.nr ? L - q0 : tl.nr);
                    c16.pack(K, kpt, bimg + grp * gstride + q0, koff, nl, tl.nr,
                             tiles + (size_t)it * tile_words);
                }
                MK_TEAM_BARRIER(&clk);
            }
            /* items of the step's nb images: panel-major (group, chunk, image, block), so a
             * panel's items for every image follow each other; else (group, image, block,
             * chunk) */
            const int per_grp = nchunks * nblocks * nb;
#pragma omp for schedule(dynamic, grain) nowait
            for (int it = 0; it < groups * per_grp; it++) {
                int chunk, blk, i;
                const int grp = it / per_grp, rem = it % per_grp;
                if (panel_major) {
                    chunk = rem / (nb * nblocks);
                    i = rem % (nb * nblocks) / nblocks;
                    blk = rem % nblocks;
                } else {
                    i = rem / (nblocks * nchunks);
                    blk = rem % (nblocks * nchunks) / nchunks;
                    chunk = rem % nchunks;
                }
                float *oimg = out + (ptrdiff_t)(n0 + i) * Cout * ohw;
                const float *rimg = res ? res + (ptrdiff_t)(n0 + i) * Cout * ohw : NULL;
                const int p0 = chunk * ppc, p1 = p0 + ppc < npg ? p0 + ppc : npg;
                const int t0 = blk * tb, nt = ntiles - t0 < tb ? ntiles - t0 : tb;
                int ns[MK_CONV_TILE_BLOCK], nl[MK_CONV_TILE_BLOCK];
                ptrdiff_t qb[MK_CONV_TILE_BLOCK], vo[MK_CONV_TILE_BLOCK][3];
                /* packed tiles: this thread's buffer holds the block's, packed while in L2 */
                uint32_t *own = tiles + (size_t)omp_get_thread_num() * tb * tile_words;
                const ptrdiff_t key = ((ptrdiff_t)n * groups + grp) * nblocks + blk;
                const int pack = w16 && !image && !panel_major && key != packed_key;
                for (int j = 0; j < nt; j++) {
                    const ptrdiff_t q0 = (ptrdiff_t)(t0 + j) * tl.nr;
                    nl[j] = (int)(tl.lanes - q0 < tl.nr ? tl.lanes - q0 : tl.nr);
                    qb[j] = q0;
                    ns[j] = tl.vector ? vector_segments(g, tl.vector, q0, nl[j], &qb[j], vo[j],
                                                        segs[j])
                                      : tile_segments(g, q0, nl[j], segs[j]);
                    if (pack)
                        c16.pack(K, kpt, bimg + grp * gstride + q0, koff, nl[j], tl.nr,
                                 own + (size_t)j * tile_words);
                }
                if (pack) packed_key = key;
                for (int p = p0; p < p1; p++) {
                    const int co = grp * cout_g + p * mr;
                    const int rows = cout_g - p * mr < mr ? cout_g - p * mr : mr;
                    const size_t pi = (size_t)grp * npg + p;
                    float *c = oimg + co * ohw;
                    const float *r = rimg ? rimg + co * ohw : NULL;
                    if (!w16) {
                        for (int j = 0; j < nt; j++) {
                            const mk_igemm_fn fn = nl[j] < tl.nr ? tl.tail_fn : tl.fn;
                            const float *b = bimg + grp * gstride + qb[j] +
                                             (blocks ? blocks->shift[p] : 0);
                            const ptrdiff_t *v = tl.vector ? vo[j] : NULL;
                            if (placed) { /* into the thread's tile, then in place */
                                const mk_seg all = {0, nl[j], 0};
                                fn(K, wp + pi * panel, b, koff, v, nl[j], rows, own_tile,
                                   MK_CONV_TILE_LANES, NULL, &all, 1, MK_ACT_NONE);
                                place_tile(g, blocks, Cout, co, own_tile, rows, segs[j], ns[j],
                                           out + (n0 + i) * blocks->ns, isa);
                            } else {
                                fn(K, wp + pi * panel, b, koff, v, nl[j], rows, c, ohw, r,
                                   segs[j], ns[j], act);
                            }
                        }
                        continue;
                    }
                    /* the block's bfloat16 pair rows: consecutive tiles bstep words apart */
                    const uint32_t *bt;
                    size_t ldb = (size_t)tl.nr, bstep = tile_words;
                    if (image) {
                        bt = tiles + i * img_words + (ptrdiff_t)grp * kpt * pplane +
                             (ptrdiff_t)t0 * tl.nr;
                        ldb = (size_t)pplane;
                        bstep = (size_t)tl.nr;
                    } else if (panel_major) {
                        bt = tiles + ((size_t)grp * ntiles + t0) * tile_words;
                    } else {
                        bt = own;
                    }
                    c16.fn((size_t)nt, bstep, ntaps, kpt, tapoff, ldb, w16 + pi * panel, bt, rows,
                           c, ohw, r, (const mk_seg(*)[MK_MAX_SEGS])segs, ns, act);
                }
            }
            MK_TEAM_BARRIER(&clk); /* before the next image overwrites the phase image */
        }
        if (c16.end) c16.end();
        MK_TEAM_DONE(&clk);
    }
    mk_team_end(&clk);
    return 0;
}

int mk_conv2d_f32(const mk_conv_geom *g, const float *x, int groups, int Cout,
                  const void *packed, int wtype, float *wide, float *phase, ptrdiff_t *koff,
                  float *out, const float *res, int act, int isa, int nthreads) {
    return conv2d_igemm(g, x, groups, Cout, packed, wtype, wide, 0, NULL, NULL, phase, koff,
                        NULL, out, res, act, isa, nthreads);
}

int mk_conv2d_shifted_f32(const mk_conv_geom *g, const float *x, int Cout, const void *packed,
                          int wtype, float *wide, float *phase, ptrdiff_t *koff,
                          const mk_conv_blocks *blocks, float *out, int isa, int nthreads) {
    return conv2d_igemm(g, x, 1, Cout, packed, wtype, wide, 0, NULL, NULL, phase, koff, blocks,
                        out, NULL, MK_ACT_NONE, isa, nthreads);
}

ptrdiff_t mk_conv_bf16_tiles_words(int bf16, const mk_conv_geom *g, int groups, int direct,
                                   int nthreads) {
    const ptrdiff_t L = (ptrdiff_t)(g->OH - 1) * g->Wq + g->OW;
    const int cin_g = g->C / groups, taps = g->KH * g->KW;
    const ptrdiff_t pplane = pair_plane(g, direct);
    mk_bf16_igemm_config c16;
    mk_conv_bf16_lanes(bf16, L, cin_g, taps, pplane, &c16);
    const ptrdiff_t rows = c16.image ? cin_g : (ptrdiff_t)cin_g * taps;
    const ptrdiff_t kpt = (ptrdiff_t)mk_bf16_pair_rows((size_t)rows, c16.kpa);
    if (c16.image) /* the pair images of a step and their slack (see conv2d_igemm) */
        return pair_images_per_step(g, groups * kpt * pplane) * groups * kpt * pplane +
               2 * g->Wq + 96;
    const ptrdiff_t tile = (ptrdiff_t)c16.nr * kpt;
    const ptrdiff_t image = (ptrdiff_t)groups * ((L + c16.nr - 1) / c16.nr) * tile;
    const ptrdiff_t fit = MK_CONV_BLOCK_BYTES / (tile * (ptrdiff_t)sizeof(uint32_t));
    const ptrdiff_t tb = fit < 1 ? 1 : fit < MK_CONV_TILE_BLOCK ? fit : MK_CONV_TILE_BLOCK;
    const ptrdiff_t own = (ptrdiff_t)(nthreads > 1 ? nthreads : 1) * tb * tile;
    return image > own ? image : own;
}

int mk_conv2d_bf16(int bf16, const mk_conv_geom *g, const float *x, int groups, int Cout,
                   const uint32_t *w16, uint32_t *tiles, float *phase, ptrdiff_t *koff,
                   float *out, const float *res, int act, int nthreads) {
    return conv2d_igemm(g, x, groups, Cout, NULL, MK_W_F32, NULL, bf16, w16, tiles, phase, koff,
                        NULL, out, res, act, MK_ISA_AVX512, nthreads);
}

/* ---- Row bands with a band-sized phase buffer: few input channels, and conv + max pool ------
 * Each thread takes a contiguous run of bands of output rows and, per band, copies the phase
 * rows the band reads into its own band-sized phase buffer (the sub-images of C channels, Hb
 * rows each, a few tens of KiB: it stays in L1/L2 and is rewritten band after band, where a
 * whole-image phase image is written to memory and read back), then runs the igemm over the
 * band's grid lanes. Two uses:
 *  - no pooling (pg == NULL): the band's convolution rows go straight to the output (with the
 *    residual and activation of the epilogue). The path of convolutions with few input
 *    channels (a network's first layer, 3 channels), whose whole phase image is as large as
 *    the input and would be copied, synchronised and read back from L3 or memory.
 *  - max pooling fused (ResNet's stem, conv 7x7/2 (+ folded BN + ReLU) -> max pool 3x3/2,
 *    which turns a 3.2 MB map into a 0.8 MB one): bands of B pooled rows; per band the
 *    convolution rows its windows read go into a per-thread buffer of R rows x Cout channels
 *    (about 256 KiB, in L2) and are pooled straight into the output, so the convolution output
 *    never goes to memory. A band keeps the rows it shares with the next one (row 2i+1 of a
 *    3/2 pool), so only the first band of a thread recomputes one row.
 * Every convolution lane is the same FMA chain as in mk_conv2d_f32 and the pooling is
 * f32-maxpool-avx512.c's row walk, so the result is bit-identical to mk_conv2d_f32 (then
 * max_pool2d). */

/* Rows per band, at most B, for bands of `rows` rows that give every thread as many (each
 * takes a contiguous run of them): the stem's 56 pooled rows in 7 bands of 8 gave one thread
 * 4, the other 3; 8 bands of 7 give 4 each. */
static int even_bands(int rows, int B, int nthreads) {
    if (rows < 1) return B;
    const int runs = ((rows + B - 1) / B + nthreads - 1) / nthreads;
    return (rows + runs * nthreads - 1) / (runs * nthreads);
}

/* Pooled rows per band: R conv rows of Cout x OW floats in about a quarter of L2 (256 KiB on
 * the reference machine's 1 MiB, common/caches.h), at most a thread's share of the pooled
 * rows, and as many bands for every thread. */
static int maxpool_band(const mk_conv_geom *g, const mk_conv_geom *pg, int Cout,
                        int nthreads) {
    const int reach = (pg->KH - 1) * pg->dy + 1;
    const double row = (double)Cout * g->OW * sizeof(float);
    int B = (int)(((double)mk_l2_scaled(256 << 10) / row - reach) / pg->sy) + 1;
    if (B < 1) B = 1;
    const int per = (pg->OH + nthreads - 1) / nthreads;
    if (B > per) B = per;
    return even_bands(pg->OH, B, nthreads);
}

static int maxpool_band_rows(const mk_conv_geom *pg, int B) {
    return (B - 1) * pg->sy + (pg->KH - 1) * pg->dy + 1;
}

/* Output rows per band without pooling: 8, fewer when the threads would not get two each, or
 * as many bands for every thread. */
static int rows_band(const mk_conv_geom *g, int nthreads) {
    int B = 8;
    const int per = (g->OH + 2 * nthreads - 1) / (2 * nthreads);
    if (B > per) B = per;
    return even_bands(g->OH, B < 1 ? 1 : B, nthreads);
}

/* Convolution rows a band computes at most (R) and its band geometry: g with Hq = the phase
 * rows those read (Hb), the plane of that many rows; pt is set per band. */
static void band_geometry(const mk_conv_geom *g, const mk_conv_geom *pg, int Cout, int nthreads,
                          int *B, int *R, mk_conv_geom *gb) {
    if (pg) {
        *B = maxpool_band(g, pg, Cout, nthreads);
        *R = maxpool_band_rows(pg, *B);
    } else {
        *B = *R = rows_band(g, nthreads);
    }
    *gb = *g;
    /* phase rows past a conv row that its lanes (dropped grid columns included) read */
    const int ph_reach = (g->KH - 1) * g->dy / g->sy + 2;
    gb->Hq = *R + ph_reach < g->Hq ? *R + ph_reach : g->Hq;
    gb->plane = (ptrdiff_t)g->sy * g->sx * gb->Hq * g->Wq;
}

/* bfloat16 compute in the bands (bf16 != 0): the tile of path bf16, its pair rows (kpt), and
 * tiles packed a block at a time (tb, each tile_words words): packed tiles, whatever the
 * layer's panel layout would choose for a whole image (mk_conv_maxpool_fused only fuses layers
 * whose panels are packed-tile panels). */
typedef struct {
    mk_bf16_igemm_config c16;
    size_t kpt, tile_words, panel;
    int tb;
} rows_bf16;

static void rows_bf16_setup(int bf16, const mk_conv_geom *g, rows_bf16 *r) {
    const size_t K = (size_t)g->C * g->KH * g->KW;
    mk_conv_bf16_lanes(bf16, (ptrdiff_t)(g->OH - 1) * g->Wq + g->OW, g->C, g->KH * g->KW, 0,
                       &r->c16);
    r->kpt = mk_bf16_pair_rows(K, r->c16.kpa);
    r->tile_words = r->kpt * (size_t)r->c16.nr;
    r->panel = (size_t)r->c16.mr + r->kpt * r->c16.mr;
    const size_t fit = MK_CONV_BLOCK_BYTES / (r->tile_words * sizeof(uint32_t));
    r->tb = fit < 1 ? 1 : fit < MK_CONV_TILE_BLOCK ? (int)fit : MK_CONV_TILE_BLOCK;
}

static ptrdiff_t rows_thread_floats(const mk_conv_geom *gb, const mk_conv_geom *pg, int Cout,
                                    int R, const rows_bf16 *b16) {
    ptrdiff_t n = (mk_conv_phase_size(gb, gb->C) + 15) / 16 * 16;
    if (b16) n += (ptrdiff_t)((b16->tb * b16->tile_words + 15) / 16 * 16);
    if (!pg) return n;
#if MK_X86
    const ptrdiff_t conv = (ptrdiff_t)Cout * R * gb->OW;
    return n + (conv + mk_max_pool2d_rows_buf_f32_avx512(pg) + 15) / 16 * 16;
#else /* the fused max pool (pg) is AVX-512 only: never reached */
    (void)Cout, (void)R;
    return n;
#endif
}

ptrdiff_t mk_conv_rows_scratch(int bf16, const mk_conv_geom *g, const mk_conv_geom *pg,
                               int Cout, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    int B, R;
    mk_conv_geom gb;
    rows_bf16 b16;
    if (bf16) rows_bf16_setup(bf16, g, &b16);
    band_geometry(g, pg, Cout, nthreads, &B, &R, &gb);
    return (ptrdiff_t)nthreads * rows_thread_floats(&gb, pg, Cout, R, bf16 ? &b16 : NULL);
}

/* mk_conv2d_rows_f32 (w16 == NULL: float32 panels wp) and mk_conv2d_rows_bf16 (path bf16's
 * packed-tile pair panels w16). */
static int conv2d_rows(const mk_conv_geom *g, const mk_conv_geom *pg, const float *x, int Cout,
                       const float *wp, int bf16, const uint32_t *w16, float *scratch,
                       ptrdiff_t *koff, float *out, const float *res, int act, int isa,
                       int nthreads) {
    if (nthreads < 1) nthreads = 1;
    rows_bf16 b16;
    if (w16) rows_bf16_setup(bf16, g, &b16);
    const int mr = w16 ? b16.c16.mr : MK_CONV_MR; /* output channels of a panel */
    const int npg = (Cout + mr - 1) / mr;
    const size_t K = (size_t)g->C * g->KH * g->KW;
    const size_t panel = w16 ? b16.panel : MK_CONV_MR + K * MK_CONV_MR;
    static const ptrdiff_t tap0[1] = {0};
    int B, R;
    mk_conv_geom gb;
    band_geometry(g, pg, Cout, nthreads, &B, &R, &gb);
    const int OW = g->OW, Wq = g->Wq;
    const int PH = pg ? pg->OH : g->OH; /* rows of the output */
    const int reach = pg ? (pg->KH - 1) * pg->dy + 1 : 1;
    const int nbands = (PH + B - 1) / B;
    const ptrdiff_t ohw = (ptrdiff_t)g->OH * OW;
    const ptrdiff_t pohw = pg ? (ptrdiff_t)PH * pg->OW : ohw;
    const ptrdiff_t crs = pg ? (ptrdiff_t)R * OW : ohw; /* conv channel stride */
    const ptrdiff_t psize = mk_conv_phase_size(&gb, g->C);
    const ptrdiff_t per = rows_thread_floats(&gb, pg, Cout, R, w16 ? &b16 : NULL);
#if MK_X86
    const int nb = pg ? mk_max_pool2d_rows_buf_f32_avx512(pg) : 0;
#else
    const int nb = 0; /* the fused max pool (pg) is AVX-512 only */
#endif
    const int ph_reach = (g->KH - 1) * g->dy / g->sy + 2;
    if (nthreads > nbands) nthreads = nbands;

    fill_koff(&gb, g->C, 0, koff); /* offsets into the band buffer, the same for every band */

    mk_team_clock clk;
    nthreads = mk_team_begin(nthreads, &clk);
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
    {
        const int tid = omp_get_thread_num(), nt = omp_get_num_threads();
        float *phase = scratch + (ptrdiff_t)tid * per;
        uint32_t *own = (uint32_t *)(phase + (psize + 15) / 16 * 16); /* bfloat16: packed tiles */
        float *conv = (float *)own + (w16 ? (b16.tb * b16.tile_words + 15) / 16 * 16 : 0);
        float *pbuf = conv + (ptrdiff_t)Cout * crs;
        /* rows past those a band copies are read only by dropped grid lanes: keep them finite */
        for (ptrdiff_t i = 0; i < psize; i++) phase[i] = 0.0f;
        for (int i = 0; i < nb; i++) pbuf[i] = -INFINITY;
        mk_seg segs[MK_CONV_TILE_BLOCK][MK_MAX_SEGS];
        int ns[MK_CONV_TILE_BLOCK];
        if (w16 && b16.c16.begin) b16.c16.begin();
        mk_conv_geom gt = gb; /* this thread's band geometry (pt moves with the band) */
        for (int n = 0; n < g->N; n++) {
            float *oimg = out + (ptrdiff_t)n * Cout * pohw;
            const float *rimg = res ? res + (ptrdiff_t)n * Cout * ohw : NULL;
            const int b0 = nbands * tid / nt, b1 = nbands * (tid + 1) / nt;
            int s0 = 0, s1 = 0; /* pooled bands: conv rows [s0, s1) held in conv */
            for (int band = b0; band < b1; band++) {
                const int i0 = band * B, i1 = i0 + B < PH ? i0 + B : PH;
                int lo, hi;
                if (pg) {
                    lo = i0 * pg->sy - pg->pt;
                    hi = (i1 - 1) * pg->sy - pg->pt + reach;
                    if (lo < 0) lo = 0;
                    if (hi > g->OH) hi = g->OH;
                    if (lo >= s0 && lo < s1) { /* keep the rows shared with the previous band */
                        if (lo > s0)
                            for (int c = 0; c < Cout; c++)
                                memmove(conv + c * crs, conv + c * crs + (ptrdiff_t)(lo - s0) * OW,
                                        sizeof(float) * (size_t)(s1 - lo) * OW);
                        s0 = lo;
                    } else {
                        s0 = s1 = lo;
                    }
                } else {
                    s0 = s1 = lo = i0;
                    hi = i1;
                }
                if (hi > s1) { /* conv rows [s1, hi): grid lanes [s1*Wq, (hi-1)*Wq + OW) */
                    /* phase rows [s1, pb) into the band buffer, row s1 first */
                    const int pb = hi - 1 + ph_reach < g->Hq ? hi - 1 + ph_reach : g->Hq;
                    gt.pt = g->pt - s1 * g->sy;
                    for (int c = 0; c < g->C; c++)
                        phase_channel_rows(&gt, x + n * g->sn + c * g->sc, phase + c * gt.plane,
                                           0.0f, 0, pb - s1, isa);
                    const ptrdiff_t qa = (ptrdiff_t)s1 * Wq, qb = (ptrdiff_t)(hi - 1) * Wq + OW;
                    float *cb = pg ? conv : oimg;
                    /* the band's tiles: float32 one at a time, its last one with the cheapest
                     * kernel for its lanes (the stem's bands of 8 rows are 19 tiles of 48 and 5
                     * lanes: a 16-lane tile there saves 3% of the band; each lane is the same
                     * sum); bfloat16 packed a block of tb tiles at a time, each panel's
                     * kernel call taking the block */
                    mk_igemm_tiling tl = {NULL, NULL, 0, 0, 0, 0};
                    if (w16)
                        tl.nr = b16.c16.nr;
                    else
                        mk_conv_igemm_tiling(isa, qb - qa, &tl);
                    const int tb = w16 ? b16.tb : 1;
                    for (ptrdiff_t t0 = qa; t0 < qb; t0 += (ptrdiff_t)tb * tl.nr) {
                        int nt = 0, nl = 0;
                        for (; nt < tb && t0 + (ptrdiff_t)nt * tl.nr < qb; nt++) {
                            const ptrdiff_t q0 = t0 + (ptrdiff_t)nt * tl.nr;
                            nl = (int)(qb - q0 < tl.nr ? qb - q0 : tl.nr);
                            ns[nt] = tile_segments(g, q0, nl, segs[nt]);
                            if (pg)
                                for (int s = 0; s < ns[nt]; s++)
                                    segs[nt][s].off -= (ptrdiff_t)s0 * OW;
                            if (w16)
                                b16.c16.pack(K, b16.kpt, phase + (q0 - qa), koff, nl, tl.nr,
                                             own + (size_t)nt * b16.tile_words);
                        }
                        for (int p = 0; p < npg; p++) {
                            const int rows = Cout - p * mr < mr ? Cout - p * mr : mr;
                            const ptrdiff_t co = (ptrdiff_t)p * mr * crs;
                            if (w16)
                                b16.c16.fn((size_t)nt, b16.tile_words, 1, b16.kpt, tap0,
                                           (size_t)tl.nr, w16 + (size_t)p * panel, own, rows,
                                           cb + co, crs, rimg ? rimg + co : NULL,
                                           (const mk_seg(*)[MK_MAX_SEGS])segs, ns, act);
                            else
                                (nl < tl.nr ? tl.tail_fn : tl.fn)(
                                    K, wp + (size_t)p * panel, phase + (t0 - qa), koff, NULL,
                                    nl, rows, cb + co, crs, rimg ? rimg + co : NULL, segs[0],
                                    ns[0], act);
                        }
                    }
                    s1 = hi;
                }
#if MK_X86
                if (pg)
                    for (int c = 0; c < Cout; c++)
                        mk_max_pool2d_rows_f32_avx512(pg, conv + c * crs, s0, oimg + c * pohw,
                                                      pbuf, i0, i1);
#endif
            }
        }
        if (w16 && b16.c16.end) b16.c16.end();
        MK_TEAM_DONE(&clk);
    }
    mk_team_end(&clk);
    return 0;
}

int mk_conv2d_rows_f32(const mk_conv_geom *g, const mk_conv_geom *pg, const float *x, int Cout,
                       const float *wp, float *scratch, ptrdiff_t *koff, float *out,
                       const float *res, int act, int isa, int nthreads) {
    return conv2d_rows(g, pg, x, Cout, wp, 0, NULL, scratch, koff, out, res, act, isa,
                       nthreads);
}

int mk_conv2d_rows_bf16(int bf16, const mk_conv_geom *g, const mk_conv_geom *pg,
                        const float *x, int Cout, const uint32_t *w16, float *scratch,
                        ptrdiff_t *koff, float *out, const float *res, int act, int nthreads) {
    return conv2d_rows(g, pg, x, Cout, NULL, bf16, w16, scratch, koff, out, res, act,
                       MK_ISA_AVX512, nthreads);
}
