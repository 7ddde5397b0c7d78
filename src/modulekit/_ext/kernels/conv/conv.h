/* Convolution, depthwise convolution, pooling and batch-norm kernels (NCHW, float32/float64).
 *
 * Layout: activations stay NCHW, as torch's API. A convolution is a GEMM
 *     out[co, q] = bias[co] + sum_k A[co, k] * B[k, q]
 * with k = (ci, kh, kw) and q = an output pixel on a "grid" of width Wq >= OW. B is never
 * materialised (no im2col): the input is copied once per image into a zero-padded,
 * stride-phase-split image ("phase image", see mk_conv_phase_channel_f32) in which, for every k, the
 * B row is the contiguous run  phase + koff[k] + q.  koff is the per-k indirection table, so the
 * microkernel's lanes are consecutive output pixels and the same code handles every stride,
 * dilation and padding. Grid columns ow >= OW are computed and dropped at the store (masked
 * stores, see mk_seg); where that pads more, a tile takes whole vectors of output rows, each
 * at its own offset in the phase image (row vectors, mk_conv_igemm_grid_tiling). 1x1 stride-1
 * unpadded convolutions read the input itself (a plain GEMM over the K x HW matrix of an NCHW
 * image).
 *
 * Weights A are pre-packed once into panels of MK_CONV_MR = 8 output channels:
 *     panel p = [bias[8]][K x 8]   (row r of the panel is output channel 8p + r, zero padded)
 * the same layout for every instruction set (the AVX2 kernel walks a panel in two 4-row halves),
 * stored as float32, float16 or bfloat16 (16-bit panels are widened to float32 once per call).
 */
#ifndef MK_CONV_H
#define MK_CONV_H

#include <stddef.h>
#include <stdint.h>

#include "common/act.h"
#include "wino-eng-api.h"

#define MK_CONV_MR 8

/* Fused epilogue activations (after bias and the optional residual add): the mk_act codes
 * of common/act.h, evaluated by its one math (mk_act_f32x1 / x8 / x16; MK_ACT_CLAMP, which
 * needs bounds, is not used here). */
#define MK_CONV_ACT(v, act) mk_act_f32x1((v), (act), 0.0f, 0.0f)
#define MK_CONV_ACT_F64(v, act) mk_act_f64x1((v), (act), 0.0, 0.0)

/* Storage type of packed weights. */
enum { MK_W_F32 = 0, MK_W_F16 = 1, MK_W_BF16 = 2, MK_W_F64 = 3 /* the float64 loop's */ };

/* One run of tile lanes [lo, hi) that lands on one output row: lane i goes to out + off + i. */
typedef struct {
    int lo, hi;
    ptrdiff_t off;
} mk_seg;

/* Segments of a tile: at most this many (a tile of 48 lanes over rows at least 1 wide). */
#define MK_MAX_SEGS 64

/* Microkernel: one panel (up to 8 output channels) x one tile (up to NR grid pixels).
 *   K     : reduction length (Cin_g*KH*KW)
 *   a     : packed panel, float32: bias[8] then K x 8
 *   b     : B base (phase image + tile start)           input
 *   koff  : K offsets: B[k, lane] = b[koff[k] + lane]
 *   voff  : NULL (the tile's lanes are consecutive), or row vectors: the tile's NR / V vectors
 *           of V lanes each (V: the config's row_vector) start voff[j] floats past b
 *           (voff[0] = 0), B[k, V j + i] = b[koff[k] + voff[j] + i]; every lane is read and
 *           computed (the caller keeps the reads inside the phase image)
 *   nlanes: lanes to compute (the tile's width; loads past it are masked; NR with voff)
 *   mrows : output channels of the panel to store (<= 8)
 *   c     : output, channel row 0 at c, row r at c + r*c_rs; lane i of segment s at
 *           c + r*c_rs + segs[s].off + i                     output
 *   res   : residual, same addressing as c (NULL: none)   input
 *   act   : MK_ACT_* */
typedef void mk_igemm_ukernel(size_t K, const float *a, const float *b, const ptrdiff_t *koff,
                              const ptrdiff_t *voff, int nlanes, int mrows, float *c,
                              ptrdiff_t c_rs, const float *res, const mk_seg *segs, int nseg,
                              int act);
typedef mk_igemm_ukernel *mk_igemm_fn;

mk_igemm_ukernel mk_f32_igemm_8x16_scalar, mk_f32_igemm_8x24_avx2, mk_f32_igemm_8x32_avx512,
    mk_f32_igemm_8x16_avx512, mk_f32_igemm_8x48_avx512;

/* Geometry of one 2-D convolution / pooling window walk. */
typedef struct {
    int N, C, H, W;              /* input (C: channels of the whole input) */
    ptrdiff_t sn, sc, sh, sw;    /* input strides in elements */
    int KH, KW;
    int sy, sx;                  /* stride */
    int pt, pl, pb, pr;          /* padding top/left/bottom/right */
    int dy, dx;                  /* dilation */
    int OH, OW;
    /* phase image geometry (filled by mk_conv_geometry) */
    int Hq, Wq;                  /* rows/cols of each phase sub-image */
    ptrdiff_t plane;             /* floats per channel in the phase image (sy*sx*Hq*Wq) */
} mk_conv_geom;

/* Fill Hq, Wq, plane from the rest. */
void mk_conv_geometry(mk_conv_geom *g);
/* Floats of phase image needed for `channels` channels (includes slack for tail reads). */
ptrdiff_t mk_conv_phase_size(const mk_conv_geom *g, int channels);

/* Phase image of one channel plane xc (strides sh, sw of g) into ph (g->plane floats). */
void mk_conv_phase_channel_f32(const mk_conv_geom *g, const float *xc, float *ph, float padv);
/* One input row x (W floats, unit stride) split into its even and odd padded columns
 * (r0[j] = padded 2j, r1[j] = padded 2j + 1, padded column p = input column p - pl; padv
 * outside), Wq of each, AVX-512 (f32-conv-phase-avx512.c). */
void mk_f32_phase_row_s2_avx512(const float *x, int W, int pl, float *r0, float *r1, int Wq,
                                float padv);
/* The same for column stride 1: row[j] = padded column j, Wq of them. */
void mk_f32_phase_row_s1_avx512(const float *x, int W, int pl, float *row, int Wq, float padv);
/* dst[l * step] = src[l] for l < n (a transposed convolution's phase row in place). */
void mk_f32_place_row_avx512(const float *src, int n, float *dst, int step);

/* Full float32 convolution (all images).
 *   x      : input, strides in g                                         input
 *   packed : panels (float32/float16/bfloat16 per wtype), groups*npanels_g  input
 *   wide   : float32 scratch of the packed size when wtype != F32, else NULL
 *   phase  : scratch of mk_conv_phase_size(g, C) floats, or NULL for the direct 1x1 path
 *   koff   : scratch of Cin_g*KH*KW ptrdiff_t
 *   out    : (N, Cout, OH, OW) C-contiguous                              output
 *   res    : (N, Cout, OH, OW) C-contiguous or NULL                      input
 * Returns 0. */
int mk_conv2d_f32(const mk_conv_geom *g, const float *x, int groups, int Cout,
                  const void *packed, int wtype, float *wide, float *phase, ptrdiff_t *koff,
                  float *out, const float *res, int act, int isa, int nthreads);

/* mk_conv2d_f32 with the input shifted per panel (groups 1, no residual, no activation):
 * panel p (output channels 8p..8p+7) reads the phase image shift[p] lanes past where the
 * others do, over a grid of g->OH x g->OW outputs (the caller's, at most what the padding
 * gives less the largest shift). A transposed convolution's stride phases are such blocks
 * of panels: one sub-kernel each, reading one padded input at their own offsets, so no phase
 * computes another's window (the caller keeps every read inside the phase image).
 * Without origin, out is (N, Cout, OH, OW); with it, each block's outputs go in place among
 * the others' (the phases interleaved by the stores, no second pass): channel c of block i
 * (Cout / nblocks channels a block), grid position (oh, ow) of image n, to
 *     out[n ns + c cs + origin[i] + oh sy rs + ow sx]
 * for oh < count[2 i] and ow < count[2 i + 1] (phases of fewer outputs than the grid, an odd
 * output size, drop the rest). */
typedef struct {
    int nblocks;
    const ptrdiff_t *shift;  /* per panel */
    const ptrdiff_t *origin; /* per block, or NULL */
    const int *count;        /* per block, rows and columns (with origin) */
    ptrdiff_t ns, cs, rs;    /* out's image, channel and row strides (with origin) */
    int sy, sx;              /* the row and column steps between a block's outputs */
} mk_conv_blocks;
int mk_conv2d_shifted_f32(const mk_conv_geom *g, const float *x, int Cout, const void *packed,
                          int wtype, float *wide, float *phase, ptrdiff_t *koff,
                          const mk_conv_blocks *blocks, float *out, int isa, int nthreads);

/* ---- bfloat16 compute (float32_matmul_precision "medium": AVX512-BF16 or AMX) ------------
 * The implicit GEMM with bfloat16 multiplies and float32 accumulation. B is read as pair rows:
 * 32-bit word `lane` of a pair row holds B[2p, lane] (low half) and B[2p + 1, lane] (high
 * half), rounded to nearest even (float32 denormals to zero, as vcvtne2ps2bf16). A kernel
 * takes `taps` groups of kpt pair rows each, pair row p of tap t at b + tapoff[t] + p * ldb,
 * from one of two sources (mk_conv_bf16_lanes picks):
 *   packed tiles: each tile's K x NR window values packed once (mk_bf16_conv_pack_tile_*):
 *       one tap, kpt = ceil(K / 2) padded, ldb = NR; pair p covers k = 2p, 2p + 1;
 *   the pair image: each image's phase image (or, for the direct 1x1, the input itself)
 *       converted once into pair planes of channels 2p, 2p + 1 (mk_bf16_pair_plane_*), kpt =
 *       ceil(Cin_g / 2) padded per group (zero planes), ldb = the plane; tap t of the kernel
 *       window at tapoff[t] (the phase image's koff of channel 0): no per-tile packing, and
 *       the KH x KW taps share one conversion.
 * kpt is a multiple of the family's kpa (zero pair rows past the data). The weights are pair
 * panels of MR output channels, [bias[MR] float32][taps x kpt x MR words], where output
 * channel r's pair P = t * kpt + p is the word
 *     (P / kpa) * MR * kpa + (r / 16) * 16 * kpa + (r % 16) * kpa + P % kpa
 * AVX512-BF16 (MR = 8, kpa = 1): word P * 8 + r, the broadcast operand of vdpbf16ps;
 * AMX (MR = 32, kpa = 16): per 32 k, two A tiles of 16 channel rows x 16 words.
 * Inputs, outputs, bias, residual and activation stay float32. */
/* A kernel computes one panel over a block of ntile tiles: tile j's pair rows from
 * b + j * bstep, its output segments segs[j][0 .. nseg[j]). */
typedef void mk_bf16_igemm_ukernel(size_t ntile, size_t bstep, size_t taps, size_t kpt,
                                   const ptrdiff_t *tapoff, size_t ldb, const uint32_t *a,
                                   const uint32_t *b, int mrows, float *c, ptrdiff_t c_rs,
                                   const float *res, const mk_seg (*segs)[MK_MAX_SEGS],
                                   const int *nseg, int act);
typedef void mk_bf16_pack_tile_fn(size_t K, size_t kp, const float *b, const ptrdiff_t *koff,
                                  int nlanes, int nr, uint32_t *dst);
/* n words of pair plane dst from the float32 planes lo and hi (NULL: zeros) */
typedef void mk_bf16_pair_plane_fn(const float *lo, const float *hi, size_t n, uint32_t *dst);
mk_bf16_igemm_ukernel mk_bf16_igemm_8x48__avx512bf16, mk_bf16_igemm_8x32__avx512bf16,
    mk_bf16_igemm_8x16__avx512bf16, mk_bf16_igemm_32x32__amx;
mk_bf16_pack_tile_fn mk_bf16_conv_pack_tile__avx512bf16;
mk_bf16_pair_plane_fn mk_bf16_pair_plane__avx512bf16;
void mk_bf16_conv_amx_begin(void);
void mk_bf16_conv_amx_end(void);
/* One bfloat16 tile as the driver runs it (mk_conv_bf16_lanes). */
typedef struct {
    mk_bf16_igemm_ukernel *fn;
    mk_bf16_pack_tile_fn *pack;        /* packed tiles (image == 0) */
    mk_bf16_pair_plane_fn *pairs;      /* the pair image (image == 1) */
    void (*begin)(void), (*end)(void); /* AMX: each thread's tile configuration; else NULL */
    int nr;                            /* output pixels of a tile */
    int mr;                            /* output channels of a panel */
    int kpa;                           /* pair rows padded to a multiple of this */
    int image;                         /* B from the pair image, else packed tiles */
} mk_bf16_igemm_config;
/* Pair rows of `rows` k values (or channels): their pairs, padded to a multiple of kpa. */
static inline size_t mk_bf16_pair_rows(size_t rows, int kpa) {
    return ((rows + 1) / 2 + (size_t)kpa - 1) / (size_t)kpa * (size_t)kpa;
}
/* The bfloat16 paths (isa.h's mk_bf16_detect): 1 = AVX512-BF16, 2 = AMX. */
enum { MK_CONV_BF16_AVX512BF16 = 1, MK_CONV_BF16_AMX = 2 };
/* The tile of path bf16 for `lanes` output columns and Cin_g input channels of `taps` (KH x
 * KW) over input planes of `plane` values (0: unknown; the panel layout does not depend on it)
 * (as mk_conv_igemm_lanes): its cost, and cfg. */
double mk_conv_bf16_lanes(int bf16, ptrdiff_t lanes, int cin_g, int taps, ptrdiff_t plane,
                          mk_bf16_igemm_config *cfg);
/* Words of the pair panels of path bf16 for `groups` groups of cout_g output channels over
 * cin_g x taps (KH * KW) weights, and the panels from the float32 igemm panels (groups *
 * ceil(cout_g / 8) of [bias[8]][K x 8], float32 or bfloat16 storage per wtype: MK_W_F32 or
 * MK_W_BF16); float32 values round to nearest even (denormals to zero, as vcvtne2ps2bf16). */
size_t mk_bf16_conv_panels_words(int bf16, int groups, int cout_g, int cin_g, int taps);
void mk_bf16_conv_pack_panels(int bf16, const void *packed, int wtype, int groups, int cout_g,
                              int cin_g, int taps, uint32_t *dst);
/* Words of scratch (packed tiles or the pair images of a step) mk_conv2d_bf16 needs for
 * geometry g. */
ptrdiff_t mk_conv_bf16_tiles_words(int bf16, const mk_conv_geom *g, int groups, int direct,
                                   int nthreads);
/* bfloat16-compute convolution of all images on path bf16: mk_conv2d_f32's operands, with w16
 * that path's pair panels and tiles a scratch of mk_conv_bf16_tiles_words words; phase: the
 * phase image, mk_conv_phase_size(g, max(C, 2 * nthreads)) floats (over the pair image each
 * thread's two phase planes). Returns 0. */
int mk_conv2d_bf16(int bf16, const mk_conv_geom *g, const float *x, int groups, int Cout,
                   const uint32_t *w16, uint32_t *tiles, float *phase, ptrdiff_t *koff,
                   float *out, const float *res, int act, int nthreads);
/* ---- end of bfloat16 block ---------------------------------------------------------------- */

/* ---- Winograd F(m x m, 3 x 3) and the igemm tile choice (f32-winograd-*.c) ----------------
 * Stride-1, undilated, ungrouped 3x3 float32 convolutions. With alpha = m + 2, a tile of
 * m x m outputs reads an alpha x alpha input window d; Y = A^T [(G w G^T) . (B^T d B)] A.
 * The alpha^2 elementwise products, summed over input channels, are alpha^2 GEMMs
 *     M[t] (Cout x tiles) = U[t] (Cout x Cin) . V[t] (Cin x tiles)
 * run by the igemm microkernels. V and M are stored channel-major, [ci][t][tile] and
 * [co][t][tile], so a transform reads or writes one contiguous block per channel; the GEMM
 * reaches row ci of V[t] through koff[k] = k * alpha^2 * tile stride.
 * U = G w G^T is packed once per tile size as alpha^2 groups of igemm panels; the bias sits in
 * the panel bias slot of t = (1, 1) only (column 1 of A^T is all ones). */

/* A run of consecutive tiles of one tile row, as the transforms see it. */
typedef struct {
    int n;            /* image */
    int y0, x0;       /* input row/column of the first window (padding subtracted: may be < 0) */
    int nt;           /* tiles (windows step m columns) */
    ptrdiff_t l0;     /* lane of the first tile in the block */
    ptrdiff_t ooff;   /* output offset of the first tile's top-left pixel in channel 0 */
    int rows, cols;   /* output rows (<= m) and columns (<= nt*m) inside the map */
} mk_wino_seg;

/* Input transform of one channel over a block of nl tiles given as nseg runs: x is the
 * channel's plane in image 0 (image stride sn, row stride sh, H x W, unit column stride);
 * outside the plane reads zero. Writes V[t][l] = v[t * vs + l] for t < alpha^2, l < nl.
 * buf: scratch the driver sizes (buf_size in f32-winograd-driver.c). */
typedef void (*mk_wino_in_fn)(const float *x, ptrdiff_t sn, ptrdiff_t sh, int H, int W,
                              const mk_wino_seg *segs, int nseg, int nl, float *v,
                              ptrdiff_t vs, float *buf);
/* Output transform of one output channel over the same block: M[t][l] = m[t * ms + l]; each
 * run's m x nt*m result, cut to rows x cols, goes to out + ooff (row stride os) as
 * act(Y + res) (res: NULL or the same addressing as out). */
typedef void (*mk_wino_out_fn)(const float *m, ptrdiff_t ms, const mk_wino_seg *segs,
                               int nseg, int nl, float *buf, float *out, const float *res,
                               ptrdiff_t os, int act);

#define MK_WINO_DECL(M, ISA)                                                                  \
    void mk_f32_wino_in_##M##x##M##_##ISA(const float *x, ptrdiff_t sn, ptrdiff_t sh, int H,  \
                                          int W, const mk_wino_seg *segs, int nseg, int nl,   \
                                          float *v, ptrdiff_t vs, float *buf);                \
    void mk_f32_wino_out_##M##x##M##_##ISA(const float *m, ptrdiff_t ms,                      \
                                           const mk_wino_seg *segs, int nseg, int nl,         \
                                           float *buf, float *out, const float *res,          \
                                           ptrdiff_t os, int act);
MK_WINO_DECL(2, scalar)
MK_WINO_DECL(2, avx2)
MK_WINO_DECL(4, avx2)
MK_WINO_DECL(2, avx512)
MK_WINO_DECL(4, avx512)
#undef MK_WINO_DECL

/* The GEMM stage in the engine orientation, through the GEMM engine's table
 * (wino-eng-api.h, kernels/gemm/gemm-wino-api.c), which _conv installs at import from the
 * _gemm extension: M_t^T (rows x Cout) = V_t^T (rows x Cin, row stride lda, read in place)
 * . U_t^T, U_t^T packed for the float32 engine configuration of the ISA, T groups of
 * mk_wino_eng_bytes each (bias in group tbias only); M_t^T rows of stride ldc. Before the
 * table is installed mk_wino_eng_available is 0 (the igemm orientation runs). */
void mk_wino_eng_install(const mk_wino_eng_api *api);
int mk_wino_eng_available(int isa); /* 0 where the engine has no row kernels (generic) */
int mk_wino_eng_nr(int isa);        /* the engine's panel width */
size_t mk_wino_eng_bytes(int isa, int Cout, int Cin);
void mk_wino_eng_pack(int isa, int T, int Cout, int Cin, const float *ut, int tbias,
                      const float *bias, void *dst);
/* panels [p0, p1) of one t; returns 0, or -1 when a buffer could not be allocated */
int mk_wino_eng_gemm(int isa, int rows, int Cout, int Cin, const float *a, ptrdiff_t lda,
                     const void *u, float *c, ptrdiff_t ldc, int p0, int p1);

/* Output tile size to use for this convolution: 0 (implicit GEMM), 2 or 4, from the cost
 * model of f32-winograd-driver.c (mk_conv_choose asks it). g must be 3x3, stride 1, dilation 1
 * (else 0). */
int mk_conv_winograd_choose(const mk_conv_geom *g, int Cout, int isa, int nthreads);
/* The GEMM stage's orientation the cost model takes for this call: 1 the engine's (u in the
 * mk_wino_eng_pack layout), 0 the igemm's (the igemm panels below). The caller passes it on
 * to the scratch size and the call (so a change of the test hook between them is harmless). */
int mk_conv_winograd_engine(const mk_conv_geom *g, int Cout, int m, int isa, int nthreads);
/* For tests and benchmarks: -1 lets the plan choose the orientation (the default), 0 keeps
 * the igemm one, 1 takes the engine one wherever the ISA has it; returns the previous mode. */
int mk_conv_winograd_set_engine(int mode);
/* float32 scratch (floats) of mk_conv2d_winograd_f32 for this call and orientation. */
ptrdiff_t mk_conv_winograd_scratch(const mk_conv_geom *g, int Cout, int m, int isa,
                                   int nthreads, int eng);
/* Winograd convolution of all images (groups 1).
 *   u      : eng 0: alpha^2 * npanels panels [bias[8]][Cin x 8] (float32), npanels =
 *            ceil(Cout/8); eng 1 (only where the ISA has the engine's row kernels): the
 *            mk_wino_eng_pack layout (64-byte aligned)
 *   eng    : the orientation, 0 or 1 (mk_conv_winograd_engine)
 *   scratch: mk_conv_winograd_scratch(..., eng) floats
 *   out/res: as mk_conv2d_f32. Returns 0, or -1 when an engine buffer could not be
 *   allocated (out is then undefined). */
int mk_conv2d_winograd_f32(const mk_conv_geom *g, const float *x, int Cout, int m,
                           const float *u, int eng, float *scratch, float *out,
                           const float *res, int act, int isa, int nthreads);
/* ---- end of Winograd block ---------------------------------------------------------------- */

/* ---- the convolution configuration (conv-config.c) ----------------------------------------
 * One table per ISA level holds the float32 convolution kernels and their tuning, and
 * mk_conv_choose decides each call's algorithm: the only place where either is chosen. */
typedef struct {
    mk_igemm_fn fn;
    int nr;     /* output pixels per tile */
    float cost; /* time per computed lane, relative to the wide tile's */
} mk_igemm_config;
typedef struct {
    mk_wino_in_fn in;
    mk_wino_out_fn out;
} mk_wino_config;
/* Depthwise kernels (f32-dwconv-driver.c): one output grid of a channel from its phase image
 * (T taps at toff), the grid's rows to the output (+ res, activation), and the 3x3 kernel
 * that reads the input plane in place (rows [oh0, oh1)). */
typedef void mk_dw_row_fn(int T, const float *ph, const ptrdiff_t *toff, const float *w,
                          float bias, int OW, float *out, const float *res, int act);
typedef void mk_dw_grid_fn(const float *grid, int Wq, int OH, int OW, float *out,
                           const float *res, int act);
typedef void mk_dw_3x3_fn(const float *x, ptrdiff_t sh, int H, int W, int stride, int pt,
                          int pl, int OW, int oh0, int oh1, const float *w, float bias,
                          float *out, ptrdiff_t ors, const float *res, ptrdiff_t rrs, int act);
mk_dw_row_fn mk_f32_dwconv_row_scalar, mk_f32_dwconv_row_avx2, mk_f32_dwconv_row_avx512;
mk_dw_grid_fn mk_f32_grid_rows_scalar, mk_f32_grid_rows_avx2, mk_f32_grid_rows_avx512;
mk_dw_3x3_fn mk_f32_dwconv2d_chw_3x3_avx512;

#define MK_IGEMM_ALTS 3
typedef struct {
    const char *name;                     /* the wide igemm tile's, XNNPACK style */
    mk_igemm_config igemm[MK_IGEMM_ALTS]; /* the wide tile first; a NULL fn ends the list */
    mk_wino_config wino[2];               /* F(2x2), F(4x4); NULL: not offered here */
    double wino_transform_cost[2];        /* cost model units per tile and channel */
    double wino_eng_lane_cost;            /* the engine orientation's per multiply-add */
    mk_dw_row_fn *dw_row;
    mk_dw_grid_fn *dw_grid;
    mk_dw_3x3_fn *dw_3x3;                 /* NULL: 3x3 layers take the phase image too */
    int lane_exact; /* the 1x1 band kernel and the paths over it (direct 1x1, im2col, row
                       bands, conv + max pool, the depthwise chain of f32-invres-driver.c) */
    int row_vector; /* lanes of the igemm kernels' row vectors (voff); 0: grid lanes only */
} mk_conv_config;
const mk_conv_config *mk_conv_get_config(int isa);

/* Pick the igemm kernel and tile width for a GEMM of `lanes` output columns: the wide tile,
 * or a narrower one when it computes fewer padded lanes. Returns its time: the padded lanes
 * times the tile's cost per lane (relative to the wide tile). */
double mk_conv_igemm_lanes(int isa, ptrdiff_t lanes, mk_igemm_fn *fn, int *nr);
/* The tiling of a grid of `lanes` lanes (the phase-image igemm's): whole tiles of nr lanes
 * by fn, and the last partial tile, if any, by tail_fn, the cheapest tile at least as wide
 * as its lanes. Returns its time (the units of mk_conv_igemm_lanes). */
typedef struct {
    mk_igemm_fn fn, tail_fn;
    int nr, tail_nr;
    ptrdiff_t lanes; /* the lanes tiled */
    int vector;      /* 0: consecutive lanes; V: row vectors of V lanes (grid tiling only) */
} mk_igemm_tiling;
double mk_conv_igemm_tiling(int isa, ptrdiff_t lanes, mk_igemm_tiling *t);
/* The tiling of a phase image's output grid (g->OH x g->OW outputs, rows g->Wq lanes apart):
 * the grid's (OH - 1) Wq + OW consecutive lanes, or, where their tiles cost less (the units
 * of mk_conv_igemm_tiling), row vectors: each output row cut into ceil(OW / V) vectors of V
 * lanes (the config's row_vector; the last one's lanes past OW computed and dropped), the
 * tiles over the OH ceil(OW / V) vectors in row order (t->vector = V; a 16x16 map, a DCGAN
 * transposed convolution's phases: 16 vectors of 16, 5 tiles of 48 and one of 16, where the
 * grid's 15 x 18 + 16 = 286 lanes take 6 tiles of 48; t->lanes: V times the vectors).
 * Returns its time, as mk_conv_igemm_tiling. */
double mk_conv_igemm_grid_tiling(int isa, const mk_conv_geom *g, mk_igemm_tiling *t);
/* 1 when tile size m has Winograd transforms for this isa. */
int mk_conv_winograd_supported(int m, int isa);

/* What a layer is, for mk_conv_choose. */
/* mk_conv_layer.force: one of these, or a Winograd tile (2 or 4) */
enum { MK_CONV_FORCE_AUTO = 0, MK_CONV_FORCE_IGEMM = 1, MK_CONV_FORCE_IM2COL = 3 };
typedef struct {
    int groups, Cout;
    int wtype;     /* MK_W_* of the packed weights */
    int depthwise; /* packed for the depthwise kernels */
    int force;     /* MK_CONV_FORCE_AUTO, _IGEMM, _IM2COL, or a Winograd tile (2, 4) */
    int bf16;      /* 0, or the bfloat16 path (MK_CONV_BF16_*) the layer may compute on (float32
                      or bfloat16 weights under "medium"): the caller has its pair panels */
} mk_conv_layer;
typedef enum {
    MK_CONV_ALGO_F64 = 0,   /* mk_conv2d_f64 */
    MK_CONV_ALGO_DEPTHWISE, /* mk_dwconv2d_f32 */
    MK_CONV_ALGO_WINOGRAD,  /* mk_conv2d_winograd_f32 (tile wino_m, orientation wino_eng) */
    MK_CONV_ALGO_IM2COL,    /* mk_conv2d_im2col_f32 */
    MK_CONV_ALGO_ROWS,      /* mk_conv2d_rows_f32 */
    MK_CONV_ALGO_1X1,       /* mk_conv1x1_mean_f32 over the input itself */
    MK_CONV_ALGO_IGEMM,     /* mk_conv2d_f32 (direct: no phase image) */
    MK_CONV_ALGO_BF16,      /* mk_conv2d_bf16 (direct: no phase image) */
    MK_CONV_ALGO_BF16_ROWS, /* mk_conv2d_rows_bf16 (few input channels, in row bands) */
} mk_conv_algo;
typedef struct {
    int algo;             /* mk_conv_algo */
    int wino_m, wino_eng; /* the Winograd tile and orientation (0 elsewhere) */
    int direct;           /* a 1x1 stride-1 unpadded layer over a contiguous plane */
} mk_conv_choice;
/* The algorithm of one call: layer l on input geometry g (mk_conv_geometry filled). */
void mk_conv_choose(const mk_conv_layer *l, const mk_conv_geom *g, int isa, int nthreads,
                    mk_conv_choice *c);
/* Whether the max pooling pg after layer l runs fused: 0 no, MK_CONV_ALGO_ROWS
 * (mk_conv2d_rows_f32 with pg), MK_CONV_ALGO_BF16_ROWS (mk_conv2d_rows_bf16 with pg). */
int mk_conv_maxpool_fused(const mk_conv_layer *l, const mk_conv_geom *g,
                          const mk_conv_geom *pg, int isa, int nthreads);
/* ---- end of the configuration ------------------------------------------------------------- */

/* float64 convolution: a direct loop.
 *   w: (Cout, Cin_g, KH, KW) C-contiguous, bias: (Cout) or NULL; out/res as above. */
void mk_conv2d_f64(const mk_conv_geom *g, const double *x, int groups, int Cout,
                   const double *w, const double *bias, double *out, const double *res,
                   int act, int nthreads);

/* Depthwise (groups == C == Cout) float32: w (C, KH*KW) float32, bias (C) float32.
 *   scratch: nthreads * mk_dwconv_scratch(g) floats. */
ptrdiff_t mk_dwconv_scratch(const mk_conv_geom *g);
void mk_dwconv2d_f32(const mk_conv_geom *g, const float *x, const float *w, const float *bias,
                     float *scratch, float *out, const float *res, int act, int isa,
                     int nthreads);

/* --- depthwise chain: [1x1] -> depthwise 3x3 -> 1x1 (f32-invres-driver.c), AVX-512 only --- */
/* Scratch floats per thread for bands of R output rows (chid expanded channels). */
ptrdiff_t mk_invres_scratch(const mk_conv_geom *g, int chid, int has_expand, int R);
/* Whether a block with one band (R == OH) splits channels across threads instead of rows. */
int mk_invres_channel_split(const mk_conv_geom *g, int has_expand, int nthreads);
/* act_e(expand 1x1) -> act_d(depthwise 3x3, g's stride/padding) -> act_p(project 1x1 (+ res)),
 * in bands of R output rows (MK_ACT_* codes); see the file for the operands. */
void mk_invres_f32(const mk_conv_geom *g, const float *x, int chid, const float *wexp,
                   const float *wdw, const float *bdw, int cout, const float *wproj,
                   ptrdiff_t *koff, float *out, const float *res, float *scratch, int R,
                   int act_e, int act_d, int act_p, int nthreads);
/* 1x1 stride-1 convolution without lane waste (f32-conv1x1-driver.c), AVX-512 only: panel
 * pairs [pp0, pp1) of c[m, q] = act(bias[m] + sum_k a[m, k] b[koff[k] + q] (+ res)) over L
 * contiguous pixels, and the whole convolution of N images (x: channel stride sc). */
void mk_conv1x1_band_f32(size_t K, const float *wp, int M, const float *b, const ptrdiff_t *koff,
                         ptrdiff_t L, float *c, ptrdiff_t c_rs, const float *res, int act,
                         int pp0, int pp1);
void mk_conv1x1_f32(int N, int K, ptrdiff_t HW, const float *x, ptrdiff_t sn, ptrdiff_t sc,
                    int M, const float *wp, ptrdiff_t *koff, float *out, const float *res,
                    int act, int nthreads);
/* The same, and (mean != NULL) each output channel's mean over its pixels (N x M floats,
 * mk_mean_rows_f32's order): a global average pool fused into the convolution. */
void mk_conv1x1_mean_f32(int N, int K, ptrdiff_t HW, const float *x, ptrdiff_t sn,
                         ptrdiff_t sc, int M, const float *wp, ptrdiff_t *koff, float *out,
                         const float *res, int act, float *mean, int nthreads);
/* mean[r] = mean of the L floats at x + r*L, r < rows; a fixed summation order (16 lanes, then
 * pairwise, then the leftover floats), any ISA. */
void mk_mean_rows_f32(const float *x, ptrdiff_t rows, ptrdiff_t L, float *mean);
/* --- end inverted-residual block ----------------------------------------------------------- */

/* Small output maps (f32-conv-im2col.c), AVX-512 only: the K x OH*OW window matrix (K = C*KH*KW)
 * into col (mk_conv_im2col_size(g) floats), then mk_conv1x1_band_f32 over it, image by image.
 * wp: float32 panels (groups 1); koff: K entries of scratch; out/res as mk_conv2d_f32. */
ptrdiff_t mk_conv_im2col_size(const mk_conv_geom *g);
int mk_conv2d_im2col_f32(const mk_conv_geom *g, const float *x, int Cout, const float *wp,
                         float *col, ptrdiff_t *koff, float *out, const float *res, int act,
                         int nthreads);

/* Pooling, NCHW, output C-contiguous (N, C, OH, OW). */
void mk_max_pool2d_f32(const mk_conv_geom *g, const float *x, float *out, int nthreads);
void mk_max_pool2d_f64(const mk_conv_geom *g, const double *x, double *out, int nthreads);
/* AVX-512 float32 max pooling, bit-identical to mk_max_pool2d_f32 (f32-maxpool-avx512.c): unit
 * input column stride and column stride 1 or 2 only; returns 0 (nothing written) otherwise. */
int mk_max_pool2d_f32_avx512(const mk_conv_geom *g, const float *x, float *out, int nthreads);
/* Output rows [oh0, oh1) of one plane x (unit column stride, row stride g->sh) whose row h is
 * at x + (h - ybase) * sh; buf: mk_max_pool2d_rows_buf_f32_avx512(g) floats set to -inf (the
 * pass keeps its padding). Bit-identical to mk_max_pool2d_f32 on those rows. */
int mk_max_pool2d_rows_buf_f32_avx512(const mk_conv_geom *g);
void mk_max_pool2d_rows_f32_avx512(const mk_conv_geom *g, const float *x, int ybase, float *o,
                                   float *buf, int oh0, int oh1);
/* Convolution (groups 1, float32 panels wp, g with its phase geometry) in row bands, each
 * thread with a band-sized phase buffer (f32-conv-driver.c): the path of few input channels,
 * and (pg != NULL) fused with the max pooling pg that follows it (input OH x OW of g, unit
 * column stride, column stride 1 or 2; AVX-512 only): out (N, Cout, pg->OH, pg->OW) =
 * max_pool(act(conv(x))), else out (N, Cout, OH, OW) = act(conv(x) + res). Bit-identical to
 * mk_conv2d_f32 (then mk_max_pool2d_f32). scratch: mk_conv_rows_scratch(0, ...) floats; koff:
 * C*KH*KW entries; res: NULL with pg. Returns 0. */
ptrdiff_t mk_conv_rows_scratch(int bf16, const mk_conv_geom *g, const mk_conv_geom *pg,
                               int Cout, int nthreads);
int mk_conv2d_rows_f32(const mk_conv_geom *g, const mk_conv_geom *pg, const float *x, int Cout,
                       const float *wp, float *scratch, ptrdiff_t *koff, float *out,
                       const float *res, int act, int isa, int nthreads);
/* The same bands computing in bfloat16 on path bf16 (mk_conv2d_bf16's tiles, packed a block at
 * a time from the band buffer) with w16 that path's pair panels in the packed-tile layout
 * (mk_bf16_conv_pack_panels for a layer whose panels are not pair-image panels): bit-identical
 * to mk_conv2d_bf16 (then mk_max_pool2d_f32). scratch: mk_conv_rows_scratch(bf16, ...) floats. */
int mk_conv2d_rows_bf16(int bf16, const mk_conv_geom *g, const mk_conv_geom *pg,
                        const float *x, int Cout, const uint32_t *w16, float *scratch,
                        ptrdiff_t *koff, float *out, const float *res, int act, int nthreads);
/* divisor: 0 = by window rule (count_include_pad), else the override */
void mk_avg_pool2d_f32(const mk_conv_geom *g, const float *x, float *out, int count_include_pad,
                       int divisor, int nthreads);
void mk_avg_pool2d_f64(const mk_conv_geom *g, const double *x, double *out,
                       int count_include_pad, int divisor, int nthreads);
void mk_adaptive_avg_pool2d_f32(const mk_conv_geom *g, const float *x, float *out, int nthreads);
void mk_adaptive_avg_pool2d_f64(const mk_conv_geom *g, const double *x, double *out,
                                int nthreads);

/* y[n, c, :] = act(x[n, c, :] * scale[c] + shift[c]); x strides in g, y C-contiguous. */
void mk_scale_shift_f32(const mk_conv_geom *g, const float *x, const float *scale,
                        const float *shift, float *y, int act, int nthreads);
void mk_scale_shift_f64(const mk_conv_geom *g, const double *x, const double *scale,
                        const double *shift, double *y, int act, int nthreads);

/* 16-bit -> float32 widening of n values. */
void mk_widen_f16_f32(const uint16_t *src, float *dst, size_t n, int isa);
void mk_widen_bf16_f32(const uint16_t *src, float *dst, size_t n, int isa);

#endif /* MK_CONV_H */
