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

#define MK_QD8_MAX_K 65536

/* rows (1..MR) x NR columns of one panel; nc <= NR columns stored. a: rows of kp bytes with
 * stride lda; ascale: the rows' sx; c: row stride ldc floats. */
typedef void (*mk_qd8_gemm_ukernel)(size_t rows, size_t nc, size_t kp, const uint8_t *a,
                                    size_t lda, const float *ascale, const void *panel,
                                    float *c, size_t ldc, float lo, float hi);

/* Quantize one row of n floats into kp bytes (see above); returns sx, or NaN when the row
 * holds a NaN or an infinity (the row is then left unwritten). */
typedef float (*mk_qd8_quantize_fn)(size_t n, size_t kp, const float *x, uint8_t *q);

typedef struct {
    const char *name;            /* XNNPACK-style name of the main kernel */
    size_t mr, nr;               /* register block: rows, panel width */
    size_t kb;                   /* KP is K rounded up to a multiple of kb (4, or 64 for AMX) */
    mk_qd8_gemm_ukernel ukernel; /* any rows 1..mr (AMX: the driver pads rows to mr) */
    mk_qd8_quantize_fn quantize;
    void (*begin)(void);         /* NULL, or called in each thread before its kernel calls */
    void (*end)(void);           /* NULL, or called in each thread after them */
} mk_qd8_config;

/* The configuration for an ISA level (mk_isa): on AVX-512, the AMX-INT8 tile where `amx` is
 * set (the OS granted the tile state and the bfloat16 selector is on AMX: _isa) and the CPU
 * has AMX-INT8, else the VNNI kernels where the CPU has AVX512-VNNI; else the portable ones. */
const mk_qd8_config *mk_qd8_get_config(int isa, int amx);

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
                    int nthreads);

#endif /* MK_QGEMM_H */
