/* The convolution configuration table: for each ISA level the float32 convolution kernels and
 * their tuning (the igemm tiles with their cost per lane, the Winograd transforms and the cost
 * model's constants, the depthwise kernels, whether the lane-exact AVX-512 paths exist), and
 * mk_conv_choose, which decides each call's algorithm from the layer, the input geometry and
 * the thread count. This is the ONLY place where these are chosen (as gemm-config.c is for the
 * GEMM engine); the drivers run what they are given.
 *
 * The rules of mk_conv_choose, in order (the measurements behind each threshold beside it):
 *   float64 weights       -> the direct float64 loop
 *   depthwise layer       -> the depthwise kernels (3x3 stride 1/2 in place where the table
 *                            has one, else through a per-plane phase image)
 *   bfloat16 on AMX       -> the bfloat16 implicit GEMM (float32_matmul_precision "medium";
 *                            any groups, float32 or bfloat16 weights; not a forced Winograd)
 *   3x3 stride 1, groups 1 -> Winograd F(2x2) or F(4x4) where its cost model says so (or a
 *                            tile forced by the layer), with the GEMM stage's orientation
 *   bfloat16 allowed      -> the bfloat16 implicit GEMM ("medium" on the AVX512-BF16 path;
 *                            in row bands on inputs of few channels on both paths)
 *   lane-exact paths (AVX-512, float32 weights, groups 1; not with 'igemm' forced):
 *     strided 1x1 kernels and tiny output maps, or 'im2col' forced
 *                         -> im2col + the 1x1 band kernel
 *     few input channels  -> the igemm in row bands
 *     direct 1x1          -> the 1x1 band kernel over the input itself
 *   everything else       -> the implicit GEMM over the phase image (or the input itself for a
 *                            direct 1x1) */
#include "conv.h"
#include "isa.h"
#include "common/caches.h"

/* Cost model units per tile and input or output channel of the Winograd transforms, F(2x2)
 * and F(4x4): measured on AVX-512 against the igemm kernels; the other paths keep them (their
 * GEMM is slower too). */
#define WINO_TRANSFORM_COST {400.0, 1100.0}

/* The portable C path (and every level where the x86 kernels are not built). */
#define CONV_SCALAR                                                                   \
    {                                                                                 \
        .name = "f32-igemm-8x16-scalar", .igemm = {{mk_f32_igemm_8x16_scalar, 16, 1.0f}}, \
        .wino = {{mk_f32_wino_in_2x2_scalar, mk_f32_wino_out_2x2_scalar}},            \
        .wino_transform_cost = WINO_TRANSFORM_COST, .dw_row = mk_f32_dwconv_row_scalar, \
        .dw_grid = mk_f32_grid_rows_scalar,                                           \
    }

static const mk_conv_config conv_configs[MK_ISA_COUNT] = {
    [MK_ISA_GENERIC] = CONV_SCALAR,
#if MK_X86
    /* F(4x4) only with vector transforms (the portable path keeps the cheaper small tile).
     * wino_eng_lane_cost: the engine's 6x16 / 8x32 row kernels per multiply-add against the
     * igemm's 8x24 / 8x48 tiles. */
    [MK_ISA_AVX2] = {
        .name = "f32-igemm-8x24-avx2",
        .igemm = {{mk_f32_igemm_8x24_avx2, 24, 1.0f}},
        .wino = {{mk_f32_wino_in_2x2_avx2, mk_f32_wino_out_2x2_avx2},
                 {mk_f32_wino_in_4x4_avx2, mk_f32_wino_out_4x4_avx2}},
        .wino_transform_cost = WINO_TRANSFORM_COST,
        .wino_eng_lane_cost = 0.62,
        .dw_row = mk_f32_dwconv_row_avx2,
        .dw_grid = mk_f32_grid_rows_avx2,
        .row_vector = 8,
    },
    /* the narrower igemm tiles cost more per computed lane (more loads per FMA) and serve maps
     * whose lane count the wide tile would pad more */
    [MK_ISA_AVX512] = {
        .name = "f32-igemm-8x48-avx512",
        .igemm = {{mk_f32_igemm_8x48_avx512, 48, 1.0f},
                  {mk_f32_igemm_8x32_avx512, 32, 1.11f},
                  {mk_f32_igemm_8x16_avx512, 16, 1.35f}},
        .wino = {{mk_f32_wino_in_2x2_avx512, mk_f32_wino_out_2x2_avx512},
                 {mk_f32_wino_in_4x4_avx512, mk_f32_wino_out_4x4_avx512}},
        .wino_transform_cost = WINO_TRANSFORM_COST,
        .wino_eng_lane_cost = 0.85,
        .dw_row = mk_f32_dwconv_row_avx512,
        .dw_grid = mk_f32_grid_rows_avx512,
        .dw_3x3 = mk_f32_dwconv2d_chw_3x3_avx512,
        .lane_exact = 1,
        .row_vector = 16,
    },
#else /* never selected: mk_isa_detect() reports MK_ISA_GENERIC (see isa.h) */
    [MK_ISA_AVX2] = CONV_SCALAR,
    [MK_ISA_AVX512] = CONV_SCALAR,
#endif
};

const mk_conv_config *mk_conv_get_config(int isa) {
    return &conv_configs[isa < 0 || isa >= MK_ISA_COUNT ? MK_ISA_GENERIC : isa];
}

double mk_conv_igemm_lanes(int isa, ptrdiff_t lanes, mk_igemm_fn *fn, int *nr) {
    const mk_igemm_config *alts = mk_conv_get_config(isa)->igemm;
    int best = 0;
    double best_cost = 0.0;
    for (int i = 0; i < MK_IGEMM_ALTS && alts[i].fn; i++) {
        const double cost = (double)((lanes + alts[i].nr - 1) / alts[i].nr * alts[i].nr) *
                            alts[i].cost;
        if (i == 0 || cost < best_cost) {
            best = i;
            best_cost = cost;
        }
    }
    *fn = alts[best].fn;
    *nr = alts[best].nr;
    return best_cost;
}

/* Each igemm tile width for the whole tiles, with the cheapest tile at least as wide as the
 * lanes left for the last one: a 14x14 map of a stride-2 3x3 (209 grid lanes) is 4 tiles of
 * 48 and one of 32 (224 lanes, not 240), a 7x7 one (55 lanes) 48 and 16 (not 2 x 32). */
double mk_conv_igemm_tiling(int isa, ptrdiff_t lanes, mk_igemm_tiling *t) {
    const mk_igemm_config *alts = mk_conv_get_config(isa)->igemm;
    double best = -1.0;
    t->lanes = lanes;
    t->vector = 0;
    for (int i = 0; i < MK_IGEMM_ALTS && alts[i].fn; i++) {
        const ptrdiff_t rem = lanes % alts[i].nr;
        double cost = (double)(lanes - rem) * alts[i].cost, tail = -1.0;
        int tail_alt = i;
        for (int a = 0; rem && a < MK_IGEMM_ALTS && alts[a].fn; a++) {
            const double c = (double)alts[a].nr * alts[a].cost;
            if (alts[a].nr >= rem && (tail < 0.0 || c < tail)) {
                tail = c;
                tail_alt = a;
            }
        }
        if (rem) cost += tail;
        if (best < 0.0 || cost < best) {
            best = cost;
            t->fn = alts[i].fn;
            t->nr = alts[i].nr;
            t->tail_fn = alts[tail_alt].fn;
            t->tail_nr = alts[tail_alt].nr;
        }
    }
    return best;
}

/* The phase-image igemm's grid lanes for g (see conv2d_igemm): OH rows of Wq columns, the last
 * one OW. */
static ptrdiff_t grid_lanes(const mk_conv_geom *g) {
    ptrdiff_t wq = (g->W + g->pl + g->pr + g->sx - 1) / g->sx;
    if (wq < g->OW) wq = g->OW;
    return (ptrdiff_t)(g->OH - 1) * wq + g->OW;
}

double mk_conv_igemm_grid_tiling(int isa, const mk_conv_geom *g, mk_igemm_tiling *t) {
    double cost = mk_conv_igemm_tiling(isa, grid_lanes(g), t);
    const int V = mk_conv_get_config(isa)->row_vector;
    if (V) {
        mk_igemm_tiling r;
        const ptrdiff_t lanes = (ptrdiff_t)g->OH * ((g->OW + V - 1) / V) * V;
        const double rc = mk_conv_igemm_tiling(isa, lanes, &r);
        if (rc < cost) {
            *t = r;
            t->vector = V;
            cost = rc;
        }
    }
    return cost;
}

/* The bfloat16 tiles (AVX512-BF16), widest first, with their cost per computed lane as the
 * float32 ones; one tile packer serves the three widths. */
#if MK_X86
static const struct {
    mk_bf16_igemm_ukernel *fn;
    int nr;
    double cost;
} bf16_igemm[3] = {{mk_bf16_igemm_8x48__avx512bf16, 48, 1.0},
                   {mk_bf16_igemm_8x32__avx512bf16, 32, 1.11},
                   {mk_bf16_igemm_8x16__avx512bf16, 16, 1.35}};
#endif

/* row bands: inputs of at most this many channels (a network's first layer) */
#define ROWS_MAX_CIN 4

/* B from the pair image where a kernel window has several taps (KH x KW taps share one
 * conversion instead of one per tile and tap) and padding Cin_g to the tile's pair rows
 * computes at most a third more; else packed tiles. With one tap both convert each value
 * once and the panels are the same: the pair image while it takes at most half of L2
 * (common/caches.h), else packed tiles. pair_bytes: the pair image's bytes per image (0:
 * unknown, for the panel layout, which only depends on it with one tap).
 *   AMX (32 channels a tile): ResNet-18's 3x3 layers at batch 32 1.5-2.3x faster than packed
 *   tiles; a 3-channel stem's K = 147 packs densely, where its channels padded to 32 would
 *   compute 10x; 1x1 64 -> 256 on a 56x56 map at batch 4 3.8 against 4.6-11 ms, one thread,
 *   and 256 -> 64 (past half of L2) 2.8 against 3.3 ms with packed tiles (the Xeon with AMX,
 *   2 MiB L2).
 *   AVX512-BF16 (channels padded to even): every layer but the few-channel inputs of the row
 *   bands, which pack their tiles (bands of output rows in cache; see bf16_rows). On Zen 4
 *   at batch 32, 2 threads, the image against packed tiles: 3x3 8 -> 32 56x56 1.70 against
 *   3.31 ms, 16 -> 32 3.34 against 6.24, 128 -> 128 28x28 20.0 against 23.3, ResNet-18's
 *   stride-2 3x3 layers 11.6-12.4 against 13.5-14.3 in the model, 1x1 stride 2 128 -> 256
 *   28x28 1.9 against 3.3 (the tiles repack each value once per tap, and the pack pass was
 *   14% of a stride-2 layer's time). */
static int bf16_image(int kpa, int cin_g, int taps, double pair_bytes) {
    const int padded = (int)mk_bf16_pair_rows((size_t)cin_g, kpa) * 2;
    if (kpa == 1 && cin_g <= ROWS_MAX_CIN) return 0;
    if (taps == 1) return pair_bytes <= (double)(mk_cpu_caches()->l2 / 2);
    return 3 * padded <= 4 * cin_g;
}

double mk_conv_bf16_lanes(int bf16, ptrdiff_t lanes, int cin_g, int taps, ptrdiff_t plane,
                          mk_bf16_igemm_config *cfg) {
#if MK_X86
    cfg->pack = mk_bf16_conv_pack_tile__avx512bf16;
    cfg->pairs = mk_bf16_pair_plane__avx512bf16;
    double cost;
    if (bf16 == MK_CONV_BF16_AMX) { /* one tile: 32 channels x 32 pixels (common/amx.h) */
        cfg->fn = mk_bf16_igemm_32x32__amx;
        cfg->begin = mk_bf16_conv_amx_begin;
        cfg->end = mk_bf16_conv_amx_end;
        cfg->nr = 32;
        cfg->mr = 32;
        cfg->kpa = 16;
        cost = (double)((lanes + 31) / 32 * 32);
    } else {
        int best = 0;
        cost = 0.0;
        for (int i = 0; i < 3; i++) {
            const double c = (double)((lanes + bf16_igemm[i].nr - 1) / bf16_igemm[i].nr *
                                      bf16_igemm[i].nr) * bf16_igemm[i].cost;
            if (i == 0 || c < cost) {
                best = i;
                cost = c;
            }
        }
        cfg->fn = bf16_igemm[best].fn;
        cfg->begin = cfg->end = NULL;
        cfg->nr = bf16_igemm[best].nr;
        cfg->mr = MK_CONV_MR;
        cfg->kpa = 1;
    }
    cfg->image = bf16_image(cfg->kpa, cin_g, taps, 4.0 * (double)plane * ((cin_g + 1) / 2));
    return cost;
#else
    (void)bf16;
    (void)lanes;
    (void)cin_g;
    (void)taps;
    (void)plane;
    cfg->fn = NULL;
    cfg->pack = NULL;
    cfg->pairs = NULL;
    cfg->begin = cfg->end = NULL;
    cfg->nr = cfg->mr = cfg->kpa = 1;
    cfg->image = 0;
    return 0.0;
#endif
}

int mk_conv_winograd_supported(int m, int isa) {
    if (isa < 0 || isa >= MK_ISA_COUNT || (m != 2 && m != 4)) return 0;
    return conv_configs[isa].wino[m == 4].in != NULL;
}

/* ---- the rules ----------------------------------------------------------------------------- */

/* im2col: output maps of at most this many pixels (larger maps keep every thread busy on the
 * igemm's pixel tiles) ... */
#define IM2COL_MAX_PIXELS 4096
/* ... and at least this many output channels (the copy is 1/Cout of the multiply-adds) ... */
#define IM2COL_MIN_COUT 32
/* ... and, other than for a strided 1x1 kernel, an igemm lane cost above this many times the
 * pixels (see im2col_pays) */
#define IM2COL_WASTE 2.0
/* the direct 1x1 band kernel: maps of at most this many pixels (splitting the output channels
 * over the threads keeps them busy there) */
#define CONV1X1_MAX_PIXELS 4096

/* Whether the lane-exact paths can run this layer: the level has them, float32 weights,
 * groups 1. */
static int lane_exact(const mk_conv_layer *l, int isa) {
    return mk_conv_get_config(isa)->lane_exact && l->wtype == MK_W_F32 && l->groups == 1;
}

/* 1x1, stride 1, unpadded, over a contiguous plane: the input itself is the GEMM's B. */
static int direct_1x1(const mk_conv_geom *g) {
    return g->KH == 1 && g->KW == 1 && g->sy == 1 && g->sx == 1 && g->pt == 0 && g->pl == 0 &&
           g->pb == 0 && g->pr == 0 && g->sw == 1 && g->sh == g->W;
}

/* Winograd tile for the call (0: none): 3x3, stride 1, dilation 1, groups 1, float32 compute,
 * unit input column stride; the cost model's choice, or the forced tile (F(4x4) falls back to
 * F(2x2) where the path has no F(4x4)). */
static int winograd_tile(const mk_conv_layer *l, const mk_conv_geom *g, int isa, int nthreads) {
    if (l->groups != 1 || l->force == MK_CONV_FORCE_IGEMM || l->force == MK_CONV_FORCE_IM2COL ||
        g->KH != 3 || g->KW != 3 ||
        g->sy != 1 || g->sx != 1 || g->dy != 1 || g->dx != 1 || g->sw != 1)
        return 0;
    if (l->force == MK_CONV_FORCE_AUTO) return mk_conv_winograd_choose(g, l->Cout, isa, nthreads);
    return mk_conv_winograd_supported(l->force, isa) ? l->force : 2;
}

/* im2col + the lane-exact 1x1 GEMM (f32-conv-im2col.c): one image (at batch 32 ResNet-18
 * measured about 4% slower with it), not a direct 1x1, and either a strided 1x1 kernel
 * (ResNet's downsamples: 28x28 on Zen 4 53-58 -> 47-50 us, the channel split of
 * mk_conv1x1_f32 balancing its 17 tiles of 48 pixels; 14x14 and 7x7 on the Xeon 113 -> 101
 * and 114 -> 107 us) or a map on which the igemm's tiles cost more than IM2COL_WASTE times
 * its pixels (a 3x3 over a 1x1 or 2x3 map). On the maps between, the igemm wins in spite of
 * its padded lanes: ResNet-18's stride-2 3x3 at 14x14 and 7x7 (grid tiles costing 1.16 and
 * 1.42 times the pixels, mk_conv_igemm_tiling) on the Xeon at 2 threads, im2col 721-742 and
 * 824-831 us against the igemm's 605-611 and 699-703 (the window copy and a second parallel
 * region; measured before the igemm's narrower last tile and input prefetch, which made it
 * 9-18% faster there); on Zen 4 im2col was 3% faster on the first and even on the second. */
static int im2col_pays(const mk_conv_layer *l, const mk_conv_geom *g, int isa) {
    const ptrdiff_t hw = (ptrdiff_t)g->OH * g->OW;
    if (g->N != 1 || l->Cout < IM2COL_MIN_COUT || hw > IM2COL_MAX_PIXELS || direct_1x1(g))
        return 0;
    if (g->KH == 1 && g->KW == 1) return 1;
    mk_igemm_tiling t;
    return mk_conv_igemm_grid_tiling(isa, g, &t) > IM2COL_WASTE * (double)hw;
}

/* bfloat16 compute, where the layer allows it ("medium" precision on a bfloat16 path). On
 * AMX every layer but a forced Winograd tile (the tiles' rate leaves Winograd F(4x4)'s quarter
 * of the multiplies behind: ResNet-18's 3x3 stride-1 layers at batch 32 1.1-1.7x faster than
 * it, one Xeon). On AVX512-BF16 every layer that would not run Winograd: on Zen 4 the bfloat16
 * implicit GEMM runs 1.6-1.8x the float32 one's multiply-add rate (ResNet-18's strided 3x3
 * layers at batch 32: 140-150 against 80-90 GMAC/s on 2 cores), still 1.4-1.6x slower than
 * Winograd F(4x4)'s float32 on its 3x3 stride-1 layers. */
static int bf16_pays(const mk_conv_layer *l, int wino_m) {
    if (l->bf16 == MK_CONV_BF16_AMX) return wino_m == 0 || l->force == MK_CONV_FORCE_AUTO;
    return l->bf16 && wino_m == 0;
}

/* bfloat16 in row bands (mk_conv2d_rows_bf16): inputs of few channels (a network's first
 * layer), groups 1, not with 'igemm' forced, whose panels are packed-tile panels (the bands
 * pack their tiles from the band buffer; each lane the same sum as over the whole image's
 * phase image, bit for bit). The band's phase rows stay in cache where the whole-image phase
 * image is as large as the input. Zen 4's AVX512-BF16 path, 2 threads, whole image ->
 * bands: MobileNetV2's stem (3 -> 32, 3x3 stride 2, 224x224) batch 32 20.1 -> 10.6 ms (its
 * float32 bands 11.9-13.1: the whole-image bfloat16 igemm had made "medium" slower than
 * float32), batch 1 0.42 -> 0.11 ms; ResNet's 7x7 stem without its pool 42.2 -> 30.6 and
 * 0.92 -> 0.72 ms. With a max pool after it see mk_conv_maxpool_fused. */
static int bf16_rows(const mk_conv_layer *l, const mk_conv_geom *g, int isa) {
    if (l->groups != 1 || g->C > ROWS_MAX_CIN || isa < MK_ISA_AVX512 ||
        l->force == MK_CONV_FORCE_IGEMM)
        return 0;
    mk_bf16_igemm_config cfg;
    mk_conv_bf16_lanes(l->bf16, 0, g->C, g->KH * g->KW, 0, &cfg);
    return !cfg.image;
}

void mk_conv_choose(const mk_conv_layer *l, const mk_conv_geom *g, int isa, int nthreads,
                    mk_conv_choice *c) {
    mk_conv_layer auto_l;
    if (l->force == MK_CONV_FORCE_IM2COL && !(lane_exact(l, isa) && !direct_1x1(g))) {
        auto_l = *l; /* im2col forced where it cannot run: the rules as under 'auto' */
        auto_l.force = MK_CONV_FORCE_AUTO;
        l = &auto_l;
    }
    c->wino_m = c->wino_eng = 0;
    c->direct = 0;
    if (l->wtype == MK_W_F64) {
        c->algo = MK_CONV_ALGO_F64;
        return;
    }
    if (l->depthwise) {
        c->algo = MK_CONV_ALGO_DEPTHWISE;
        return;
    }
    const int m = winograd_tile(l, g, isa, nthreads);
    if (bf16_pays(l, m)) {
        c->direct = direct_1x1(g);
        c->algo = !c->direct && bf16_rows(l, g, isa) ? MK_CONV_ALGO_BF16_ROWS : MK_CONV_ALGO_BF16;
        return;
    }
    if (m) {
        c->algo = MK_CONV_ALGO_WINOGRAD;
        c->wino_m = m;
        c->wino_eng = mk_conv_winograd_engine(g, l->Cout, m, isa, nthreads);
        return;
    }
    c->direct = direct_1x1(g);
    const int exact = lane_exact(l, isa), forced = l->force == MK_CONV_FORCE_IGEMM;
    const ptrdiff_t hw = (ptrdiff_t)g->H * g->W;
    if (exact && !c->direct &&
        (l->force == MK_CONV_FORCE_IM2COL || (!forced && im2col_pays(l, g, isa))))
        c->algo = MK_CONV_ALGO_IM2COL;
    else if (exact && !forced && g->C <= ROWS_MAX_CIN && !c->direct)
        /* each thread copies the phase rows of its bands of output rows into a band-sized
         * buffer that stays in its caches, where the whole-image phase image is as large as the
         * input and is written, synchronised and read back (the same sums, bit for bit) */
        c->algo = MK_CONV_ALGO_ROWS;
    else if (exact && c->direct && hw % 16 != 0 && hw <= CONV1X1_MAX_PIXELS)
        /* maps whose pixel count leaves a remainder of 16 (7x7, 14x14): no lane waste there */
        c->algo = MK_CONV_ALGO_1X1;
    else
        c->algo = MK_CONV_ALGO_IGEMM;
}

int mk_conv_maxpool_fused(const mk_conv_layer *l, const mk_conv_geom *g, const mk_conv_geom *pg,
                          int isa, int nthreads) {
    mk_conv_choice c;
    mk_conv_choose(l, g, isa, nthreads, &c);
    if (c.direct || (pg->sx != 1 && pg->sx != 2)) return 0;
    /* the row-band kernel with pooling: where the lane-exact paths exist and the row bands or
     * the phase-image igemm would run, pooling column stride 1 or 2 */
    if (lane_exact(l, isa) && l->force != MK_CONV_FORCE_IGEMM &&
        (c.algo == MK_CONV_ALGO_ROWS || c.algo == MK_CONV_ALGO_IGEMM))
        return MK_CONV_ALGO_ROWS;
    /* in bfloat16, where the row bands run (bf16_rows). ResNet-18's stem with its 3/2 pool,
     * 2 threads, Intel Xeon with AMX: batch 32 41 -> 18 ms, batch 1 0.81 -> 0.44 ms (the 103 MB
     * map at batch 32 is no longer written and read back); on the same CPU's AVX512-BF16 path
     * 72 -> 53 and 1.76 -> 1.63 ms */
    return c.algo == MK_CONV_ALGO_BF16_ROWS ? MK_CONV_ALGO_BF16_ROWS : 0;
}
