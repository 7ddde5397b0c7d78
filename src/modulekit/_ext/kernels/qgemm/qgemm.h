/* Dynamically quantized GEMM: float32 activations quantized per row to int8 at run time
 * ("qd8"), int8 weights quantized per output channel ahead of time ("qc8w"), int32
 * accumulation, float32 output (XNNPACK's qd8-f32-qc8w naming).
 *
 *   y[r, n] = sx[r] * sw[n] * sum_k qx[r, k] * qw[n, k] + bias[n], then clamped to [lo, hi]
 *
 * Activations: qx = round_half_even(x / sx) with sx = max|x[r, :]| / 127 (1 for an all-zero
 * row), |qx| <= 127, stored as the bytes qx + 128 (u8: the VNNI instruction multiplies
 * unsigned by signed bytes); the kernels subtract 128 * sum_k qw[n, k], kept per column in
 * the packed panel. Weights: symmetric, |qw| <= 127, sw[n] = max|w[n, :]| / 127.
 * The int32 sums are exact for K <= MK_QD8_MAX_K; the float epilogue is the only rounding.
 * mk_qd8_gemm_run sets a row's outliers aside first (qgemm-driver.c: values over 24x the
 * row's mean magnitude, at most 4) and adds their float32 products before the clamp.
 *
 * Packed weights, per panel of NR output columns (zero-padded past N, 64-byte aligned):
 *   int32 corr[NR]  (128 * column sum of qw)
 *   float scale[NR] (sw)
 *   float bias[NR]  (0 without a bias)
 *   int8  w[KP / 4][NR][4]  (KP: K rounded up to the configuration's kb; groups of 4
 *                            consecutive k per column, the operand layout of vpdpbusd and of
 *                            an AMX B tile; padding k's are 0)
 * Quantized activations: rows of KP bytes (padding bytes 128, i.e. zero). */
#ifndef MK_QGEMM_H
#define MK_QGEMM_H

#include <stddef.h>
#include <stdint.h>

#include "isa.h"

#define MK_QD8_MAX_K 65536

/* What a tile does with its int32 sums, per output element (row r, column n):
 *
 *   y = float(acc - corr[n]) * (ascale[r] * sw[n]) + bias[n]     (one fmaf)
 *   y = float(res[r, n] - res_zp) * res_scale + y                   (one fmaf; with res)
 *   y = min(hi, max(lo, y))
 *   stored as float32, or (out_u8) as the byte clamp(rint(t) + out_zp, 0, 255) with
 *   t = min(512, max(-512, y * out_inv_scale)) (NaN: -512) (mk_qu8_requantize below)
 *
 * The constants of one call; the row pointers (ascale, res, c) go with each tile. */
typedef struct {
    size_t ascale_step;  /* 1: a scale per row (qd8), 0: one scale for every row (static) */
    float lo, hi;        /* the activation as a clamp */
    size_t ldr;          /* residual row stride (bytes) */
    float res_scale;
    int32_t res_zp;
    int out_u8;          /* 0: float32 output, c rows of ldc floats; 1: bytes, ldc bytes */
    float out_inv_scale;
    int32_t out_zp;
    int act;             /* float32 output only: an activation of common/act.h past the clamp
                            (MK_ACT_NONE; GELU, SiLU, ... by the one activation math) */
} mk_qgemm_epilogue;

/* rows (1..MR) x NR columns of one panel; nc <= NR columns stored. a: rows of kp bytes with
 * stride lda; ascale: the first row's scale (see ascale_step); res: NULL or the first row's
 * residual bytes; c: the first row's output. */
typedef void (*mk_qd8_gemm_ukernel)(size_t rows, size_t nc, size_t kp, const uint8_t *a,
                                    size_t lda, const float *ascale, const void *panel,
                                    void *c, size_t ldc, const uint8_t *res,
                                    const mk_qgemm_epilogue *ep);

/* The byte a float32 value y quantizes to with 1/scale `inv` and zero point `zp` (the
 * epilogue's and the static quantizer's rounding: every path computes exactly this). */
static inline uint8_t mk_qu8_requantize(float y, float inv, int32_t zp) {
    float t = y * inv;
    t = t > -512.0f ? t : -512.0f; /* NaN too */
    t = t < 512.0f ? t : 512.0f;
    /* rounded to nearest even by adding and removing 1.5 * 2^23 (exact for |t| <= 2^22; no
     * rintf call where the baseline ISA has no rounding instruction) */
    const int32_t q = (int32_t)((t + 12582912.0f) - 12582912.0f) + zp;
    return (uint8_t)(q < 0 ? 0 : q > 255 ? 255 : q);
}

/* Quantize one row of n floats into kp bytes (see above); returns sx, or NaN when the row
 * holds a NaN or an infinity (the row is then left unwritten). */
typedef float (*mk_qd8_quantize_fn)(size_t n, size_t kp, const float *x, uint8_t *q);

/* The geometry of a convolution over NHWC bytes (qconv-driver.c, qdwconv.c). */
typedef struct {
    size_t n, h, w, cin, oh, ow, cout, kh, kw, sh, sw, ph, pw, dh, dw;
} mk_qconv_geom;

/* Rows r0 .. r0+rows-1 of a convolution's im2col matrix (k ordered (ky, kx, c); the image's
 * zero point where the window leaves the image) into buf, rows lda bytes apart; the bytes
 * past k of a row (its padding to lda, which meets zero weights) may be overwritten. */
typedef void (*mk_qconv_im2col_fn)(const mk_qconv_geom *g, const uint8_t *x, uint8_t zp,
                                   size_t r0, size_t rows, uint8_t *buf, size_t lda);
void mk_qconv_im2col__scalar(const mk_qconv_geom *g, const uint8_t *x, uint8_t zp, size_t r0,
                             size_t rows, uint8_t *buf, size_t lda);

typedef struct {
    const char *name;            /* XNNPACK-style name of the main kernel */
    size_t mr, nr;               /* register block: rows, panel width */
    size_t kb;                   /* KP is K rounded up to a multiple of kb (4, or 64 for AMX) */
    mk_qd8_gemm_ukernel ukernel; /* any rows 1..mr (AMX: the driver pads rows to mr) */
    mk_qd8_quantize_fn quantize;
    mk_qconv_im2col_fn im2col;   /* the convolutions' row gather (qconv-driver.c) */
    void (*begin)(void);         /* NULL, or called in each thread before its kernel calls */
    void (*end)(void);           /* NULL, or called in each thread after them */
} mk_qd8_config;

/* The configuration for an ISA level (mk_isa): on AVX-512, the AMX-INT8 tile where `amx` is
 * set (the OS granted the tile state and the bfloat16 selector is on AMX: _isa) and the CPU
 * has AMX-INT8, else the VNNI kernels where the CPU has AVX512-VNNI; else the portable ones. */
const mk_qd8_config *mk_qd8_get_config(int isa, int amx);

/* K rounded up to the configuration's kb: the bytes of a quantized row, the k of a panel */
static inline size_t mk_qd8_kp(const mk_qd8_config *cfg, size_t k) {
    return (k + cfg->kb - 1) / cfg->kb * cfg->kb;
}

size_t mk_qd8_panel_stride(const mk_qd8_config *cfg, size_t k);
size_t mk_qd8_packed_size(const mk_qd8_config *cfg, size_t n, size_t k);

/* Pack qw (n x k int8, row stride k), scales (n) and bias (n, or NULL) for cfg. */
void mk_qd8_pack(const mk_qd8_config *cfg, size_t n, size_t k, const int8_t *qw,
                 const float *scale, const float *bias, void *packed);

/* The weights back out of a pack: qw (n x k), scale (n), bias (n, or NULL). */
void mk_qd8_unpack(const mk_qd8_config *cfg, size_t n, size_t k, const void *packed,
                   int8_t *qw, float *scale, float *bias);

/* y (m x n, row stride ldc) = the quantized product of x (m x k, row stride ldx floats) with
 * the packed weights, clamped to [lo, hi]. A row of x holding NaN or infinity gives a row of
 * NaN. Returns 0, or -1 when scratch memory could not be allocated. */
int mk_qd8_gemm_run(const mk_qd8_config *cfg, size_t m, size_t n, size_t k, const float *x,
                    size_t ldx, const void *packed, float *y, size_t ldc, float lo, float hi,
                    int act, int nthreads);

/* ------------------------------------------------------------ statically quantized (qu8)
 * Activations as bytes q with one (scale, zero point) per tensor: x = (q - zp) * scale; the
 * weights packed as above with corr = zp_in * column sum (mk_qd8_pack_zp). Images are NHWC. */

void mk_qd8_pack_zp(const mk_qd8_config *cfg, size_t n, size_t k, const int8_t *qw,
                    const float *scale, const float *bias, int32_t zp, void *packed);

/* The geometry of a convolution over NHWC bytes (groups 1). The weights (cout x kh*kw*cin,
 * k ordered (kh, kw, cin)) are packed by mk_qd8_pack_zp with k = kh*kw*cin. */

/* y (n*oh*ow rows x cout, NHWC) = the convolution of x (NHWC bytes, zero point in_zp) with
 * the packed weights, in tiles of output rows whose im2col rows are gathered per thread;
 * ep says the epilogue (its ascale_step is 0: ascale is &in_scale); res: NULL or NHWC bytes
 * of y's shape. Returns 0, or -1 when scratch memory could not be allocated. */
int mk_qconv_run(const mk_qd8_config *cfg, const mk_qconv_geom *g, const uint8_t *x,
                 int32_t in_zp, float in_scale, const void *packed, const uint8_t *res,
                 const mk_qgemm_epilogue *ep, void *y, int nthreads);

/* Whether a pointwise convolution of cin input channels reads its rows in place with cfg's
 * tile (whole k groups of 4: not the AMX tile); then mk_qconv_pointwise_rows computes m
 * output rows (every panel, on the calling thread) from the m input rows at a (cin bytes
 * each, contiguous), as mk_qconv_run computes those rows. */
int mk_qconv_pointwise_direct(const mk_qd8_config *cfg, size_t cin);
void mk_qconv_pointwise_rows(const mk_qd8_config *cfg, size_t m, size_t cin, size_t cout,
                             const uint8_t *a, float in_scale, const void *packed,
                             const uint8_t *res, const mk_qgemm_epilogue *ep, void *y);

/* Depthwise (groups = channels, one output per channel) convolution over NHWC bytes:
 * qdwconv.c. Weights qw (c x taps int8, taps = kh*kw) with per-channel scales and bias,
 * packed as floats [taps + 2][c rounded up to 16]; g->cin == g->cout. isa: the mk_isa level
 * whose loops run. Returns 0, or -1 when scratch memory could not be allocated. */
#define MK_QDW_MAX_TAPS 512 /* 512 * 255 * 127 < 2^24: float32 sums stay exact */
size_t mk_qdw_packed_size(size_t c, size_t taps);
void mk_qdw_pack(size_t c, size_t taps, const int8_t *qw, const float *scale, const float *bias,
                 float *packed);
void mk_qdw_unpack(size_t c, size_t taps, const float *packed, int8_t *qw, float *scale,
                   float *bias);
int mk_qdw_run(int isa, const mk_qconv_geom *g, const uint8_t *x, int32_t in_zp,
               float in_scale, const float *packed, const uint8_t *res,
               const mk_qgemm_epilogue *ep, void *y, int nthreads);
/* Output rows [t0, t1) of g->n * g->oh, every channel, on the calling thread, as mk_qdw_run
 * computes them; scratch: mk_qdw_scratch_bytes(isa, g) bytes, 64-byte aligned. */
size_t mk_qdw_scratch_bytes(int isa, const mk_qconv_geom *g);
void mk_qdw_rows(int isa, const mk_qconv_geom *g, const uint8_t *x, int32_t in_zp,
                 float in_scale, const float *packed, const uint8_t *res,
                 const mk_qgemm_epilogue *ep, void *y, size_t t0, size_t t1, float *scratch);

/* MobileNetV2's inverted residual block over NHWC bytes, fused (qinvres-driver.c): [expand
 * 1x1 + clamp] -> depthwise 3x3 (stride 1 or 2, padding 1) + clamp -> project 1x1 [+ the
 * block's input], computed in bands of output rows so the expanded rows (bytes) stay in the
 * caches; every value as the three steps compute it (the same bits). Each step's epilogue
 * and input quantization as for mk_qconv_run / mk_qdw_run; the expand's and the depthwise's
 * epilogues store bytes. */
typedef struct mk_qinvres {
    const mk_qd8_config *cfg;
    int isa;                     /* the mk_isa level of the depthwise rows */
    size_t n, h, w, cin, chid, cout, stride;
    const void *pe;              /* the expand's panels, or NULL (no expand: chid == cin) */
    float e_scale;               /* input scales and zero points of the three steps */
    int32_t e_zp;
    mk_qgemm_epilogue ep_e;
    const float *pd;
    float d_scale;
    int32_t d_zp;
    mk_qgemm_epilogue ep_d;
    const void *pp;
    float p_scale;
    int32_t p_zp;
    mk_qgemm_epilogue ep_p;      /* res_scale/res_zp: the input's, where residual */
    int residual;                /* add the block's input (stride 1, cin == cout) */
} mk_qinvres;

/* y (n x oh x ow x cout, NHWC; bytes or floats as ep_p says) = the block of x (n x h x w x
 * cin bytes). Returns 0, -1 when scratch memory could not be allocated, -2 for a geometry it
 * does not take (the caller checked mk_qconv_pointwise_direct for both 1x1 steps). */
int mk_qinvres_run(const mk_qinvres *b, const uint8_t *x, void *y, int nthreads);

/* NCHW float32 (n, c, hw) -> NHWC bytes, q = mk_qu8_requantize(x, inv, zp); isa: the mk_isa
 * level whose row quantizer runs (the same bytes on every level). */
void mk_qu8_quantize_nchw(int isa, size_t n, size_t c, size_t hw, const float *x, float inv,
                          int32_t zp, uint8_t *q, int nthreads);
#if MK_X86
void mk_qu8_quantize_row__avx512(size_t n, const float *x, float inv, int32_t zp, uint8_t *q);
#endif

/* NHWC bytes (n, hw, c) -> NCHW float32, x = (q - zp) * scale. */
void mk_qu8_dequantize_nhwc(size_t n, size_t hw, size_t c, const uint8_t *q, float scale,
                            int32_t zp, float *x, int nthreads);

/* Max pooling of NHWC bytes (padding never wins: as -infinity); oh, ow as the caller
 * computed them (ceil_mode included; every window holds at least one input pixel). */
void mk_qu8_maxpool_nhwc(size_t n, size_t h, size_t w, size_t c, size_t oh, size_t ow,
                         size_t kh, size_t kw, size_t sh, size_t sw, size_t ph, size_t pw,
                         size_t dh, size_t dw, const uint8_t *x, uint8_t *y, int nthreads);

#endif /* MK_QGEMM_H */
