/* Row-wise transformer ops: LayerNorm (one pass, optional fused residual add), softmax with the
 * scale and an additive mask folded in, embedding gather.
 *
 * Each op has per-row kernels for the generic (ops-scalar.c), AVX2 (+FMA, F16C) and AVX-512
 * levels (f32-ops-{avx2,avx512}.c: the one SIMD template f32-ops.inc.h) and a driver
 * (ops-driver.c) that picks the row kernel once per call and runs the rows on up to nthreads
 * OpenMP threads. The C functions only compute: every shape, stride, dtype and index check
 * happens in modulekit/_ext/_ops.pyx before any of them runs. */
#ifndef MK_OPS_H
#define MK_OPS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- per-row kernels (one ISA each) ------------------------------------------------------
 * layernorm: y[i] = (s[i] - mean(s)) / sqrt(var(s) + eps) * gamma[i] + beta[i], s = x + res
 *   res, gamma, beta may be NULL (no residual, gamma = 1, beta = 0); y may alias x.
 * softmax: x[i] = softmax(x * scale + mask)[i] in place; mask may be NULL.
 *   Elements whose masked logit is -inf get exactly 0; a row that is -inf everywhere gives NaN
 *   (as torch does). exp is common/vmath.inc.h's (the same bits on every ISA path).
 * (GELU and the other element-wise activations: common/act.h.) */
typedef void (*mk_ln_row_f32)(size_t n, const float *x, const float *res, const float *gamma,
                              const float *beta, float eps, float *y);
typedef void (*mk_softmax_row_f32)(size_t n, float *x, const float *mask, float scale);

void mk_layernorm_row_f32_scalar(size_t n, const float *x, const float *res, const float *gamma,
                                 const float *beta, float eps, float *y);
void mk_layernorm_row_f32_avx2(size_t n, const float *x, const float *res, const float *gamma,
                               const float *beta, float eps, float *y);
void mk_layernorm_row_f32_avx512(size_t n, const float *x, const float *res, const float *gamma,
                                 const float *beta, float eps, float *y);
void mk_softmax_row_f32_scalar(size_t n, float *x, const float *mask, float scale);
void mk_softmax_row_f32_avx2(size_t n, float *x, const float *mask, float scale);
void mk_softmax_row_f32_avx512(size_t n, float *x, const float *mask, float scale);
/* float16 -> float32 widening of n values (F16C on AVX2 and up; exact in software). */
void mk_f16_widen_scalar(size_t n, const uint16_t *src, float *dst, int accumulate);
void mk_f16_widen_avx2(size_t n, const uint16_t *src, float *dst, int accumulate);

/* One 16 x 16 float32 block: dst[j * ld + i] = src[i * ls + j] (strides in elements). */
void mk_x32_transpose_16x16_avx512(const float *src, ptrdiff_t ls, float *dst, ptrdiff_t ld);

/* ---- drivers (rows on up to nthreads threads; isa is an mk_isa level) ---------------------
 * Row r of x starts at x + r * ldx (elements); likewise res, y. */
void mk_layernorm_f32(int isa, size_t rows, size_t n, const float *x, size_t ldx,
                      const float *res, size_t ldr, const float *gamma, const float *beta,
                      float eps, float *y, size_t ldy, int nthreads);
void mk_layernorm_f64(size_t rows, size_t n, const double *x, size_t ldx, const double *res,
                      size_t ldr, const double *gamma, const double *beta, double eps,
                      double *y, size_t ldy, int nthreads);

/* Softmax over the last axis of a 4-D array x[a][b][c][0..n) (strides sx*, elements) in place,
 * the mask row of (a, b, c) at mask + a*sm0 + b*sm1 + c*sm2 (stride 0 broadcasts), unit stride
 * along n; mask may be NULL. */
void mk_softmax_f32(int isa, size_t na, size_t nb, size_t nc, size_t n, float *x, ptrdiff_t sx0,
                    ptrdiff_t sx1, ptrdiff_t sx2, const float *mask, ptrdiff_t sm0,
                    ptrdiff_t sm1, ptrdiff_t sm2, float scale, int nthreads);
void mk_softmax_f64(size_t na, size_t nb, size_t nc, size_t n, double *x, ptrdiff_t sx0,
                    ptrdiff_t sx1, ptrdiff_t sx2, const double *mask, ptrdiff_t sm0,
                    ptrdiff_t sm1, ptrdiff_t sm2, double scale, int nthreads);

/* Embedding gather: out[i, :] (+)= table[ids[i], :] for i < n (dim columns; out row stride
 * ldo). Table element dtypes: MK_TABLE_F32, F16, BF16 into float32 out; F64 into float64 out.
 * Every ids[i] must be in [0, rows): mk_ids_first_bad checks that first. */
enum { MK_TABLE_F32 = 0, MK_TABLE_F64 = 1, MK_TABLE_F16 = 2, MK_TABLE_BF16 = 3 };
/* Batched transpose (layout changes such as (N, C, L) -> (N, L, C)):
 * dst[b * db + j * dr + i] = src[b * sb + i * sr + j] for b < batch, i < rows, j < cols;
 * float32 (esize 4) or float64 (esize 8) elements, strides in elements, unit stride along each
 * row. Work items are (b, 16 source columns): each walks every row in 16 x 16 blocks, through
 * the level's float32 block kernel (AVX-512) or a scalar block loop (other levels, float64,
 * edges). */
void mk_transpose(int isa, size_t esize, size_t batch, size_t rows, size_t cols,
                  const void *src, ptrdiff_t sb, ptrdiff_t sr, void *dst, ptrdiff_t db,
                  ptrdiff_t dr, int nthreads);

/* A transposed convolution's stride phases into their places in its output. The phases were
 * computed as one convolution with them stacked along the output channels: src is
 * (outer, nphase, cg, M[0], M[1], M[2]) and dst (outer, cg, O[0], O[1], O[2]), both
 * C-contiguous. For every b < outer, c < cg, phase i and position q < cnt[i] (three axes):
 *   dst[b, c, o0[i] + q * st] = src[b, i, c, w0[i] + q]
 * (w0, o0, cnt: nphase x 3, row-major). The caller keeps every box inside both arrays.
 * float32 (esize 4) or float64 (esize 8). Work items are (b, c) planes: each output plane is
 * written whole by one thread, every phase's elements while the plane's lines are in L1. */
void mk_scatter_phases(size_t esize, size_t outer, size_t cg, size_t nphase, const void *src,
                       const ptrdiff_t M[3], const ptrdiff_t *w0, const ptrdiff_t *cnt,
                       void *dst, const ptrdiff_t O[3], const ptrdiff_t *o0,
                       const ptrdiff_t st[3], int nthreads);

ptrdiff_t mk_ids_first_bad(const int64_t *ids, size_t n, int64_t rows);
void mk_gather(int isa, int table_dtype, size_t n, size_t dim, const int64_t *ids,
               const void *table, void *out, size_t ldo, int accumulate, int nthreads);

/* Embedding sum and LayerNorm in one pass per row (BERT's embeddings), float32 tables:
 *   out[i, :] = layernorm(t0[ids0[i], :] + t1[ids1[i], :] + t2[ids2[i], :]) * gamma + beta
 * (the sums in that order, so the result matches gathering, accumulating and normalising one
 * after the other bit for bit). Tables are dim wide and C-contiguous; out rows dim apart;
 * gamma/beta may be NULL. Every index must be in range (mk_ids_first_bad first). */
void mk_embed3_layernorm_f32(int isa, size_t n, size_t dim, const int64_t *ids0,
                             const float *t0, const int64_t *ids1, const float *t1,
                             const int64_t *ids2, const float *t2, const float *gamma,
                             const float *beta, float eps, float *out, int nthreads);

/* float64 softmax row (portable C). */
void mk_softmax_row_f64(size_t n, double *x, const double *mask, double scale);

/* The softmax row kernel the drivers use for an ISA level. */
mk_softmax_row_f32 mk_ops_softmax_row(int isa);

/* Fused multi-head attention, float32 (ops-attention.c). For batch b < nb and head h < nh:
 *   Q_h row i at q + b*qsb + i*qsr + h*d (d values), K_h row j at k + b*ksb + j*ksr + h*d,
 *   V_h row j at v + b*vsb + j*vsr + h*dv (dv values), output row i at out + b*osb + i*osr + h*dv;
 *   additive mask row (b, h, i) at mask + b*msb + h*msh + i*msr (lk values; NULL: none;
 *   stride 0 broadcasts); weights (NULL, or nb x nh x lq x lk contiguous) receives the
 *   probabilities. Tasks (b, h) run on up to nthreads threads, each holding one head's
 *   scores at a time. bf16 (isa AVX512 only; 1: AVX512-BF16, 2: AMX-BF16 with the tile state
 *   granted; the caller checks): both matmuls multiply bfloat16 roundings of Q, scale K, the
 *   float32 softmax P and V with float32 accumulation (float32_matmul_precision "medium";
 *   weights still get the float32 P).
 *   Returns 0, or -1 when a scratch buffer could not be allocated. */
void mk_attention_qk_f32_avx512(size_t lq, size_t lk, size_t d, const float *q, ptrdiff_t qsr,
                                const float *kt, size_t ldk, float *s, size_t lds);
void mk_attention_pv_f32_avx512(size_t lq, size_t lk, size_t dv, const float *p, size_t ldp,
                                const float *v, ptrdiff_t vsr, float *o, ptrdiff_t osr);
void mk_attention_pack_kt_f32_avx512(size_t lk, size_t d, const float *k, ptrdiff_t ksr,
                                     float scale, float *kt, size_t ldk);
/* bfloat16 operands and blocks (bf16-attention-8x32-avx512bf16.c): rows of x as pair words
 * (word p of row i at dst + i*ldd + p: x[i][2p], x[i][2p + 1]); row pairs of x (word p*ldd + c:
 * x[2p][c], x[2p + 1][c]); C[rows x cols] (row stride csr) = A B over np pair words. */
void mk_attention_bf16_rows(size_t rows, size_t n, const float *x, ptrdiff_t xsr, uint32_t *dst,
                            size_t ldd);
void mk_attention_bf16_pairs(size_t rows, size_t cols, const float *x, ptrdiff_t xsr,
                             uint32_t *dst, size_t ldd);
void mk_attention_dot_bf16(size_t rows, size_t cols, size_t np, const uint32_t *a, size_t lda,
                           const uint32_t *b, size_t ldb, float *c, ptrdiff_t csr);
/* The same product on AMX tiles (bf16-attention-32x32-amx.c): A zero-padded to a multiple of
 * 32 rows and np (a multiple of 16) words a row, B to np pair rows and a multiple of 32
 * columns; between mk_attention_amx_begin (loads the tile configuration) and
 * mk_attention_amx_end (releases the tiles) on the calling thread. */
void mk_attention_dot_bf16_amx(size_t rows, size_t cols, size_t np, const uint32_t *a,
                               size_t lda, const uint32_t *b, size_t ldb, float *c,
                               ptrdiff_t csr);
void mk_attention_amx_begin(void);
void mk_attention_amx_end(void);
int mk_attention_f32(int isa, int bf16, size_t nb, size_t nh, size_t lq, size_t lk, size_t d,
                     size_t dv,
                     const float *q, ptrdiff_t qsb, ptrdiff_t qsr, const float *k, ptrdiff_t ksb,
                     ptrdiff_t ksr, const float *v, ptrdiff_t vsb, ptrdiff_t vsr,
                     const float *mask, ptrdiff_t msb, ptrdiff_t msh, ptrdiff_t msr, float scale,
                     float *out, ptrdiff_t osb, ptrdiff_t osr, float *weights, int nthreads);
/* The same in float64 (portable C loops). */
int mk_attention_f64(size_t nb, size_t nh, size_t lq, size_t lk, size_t d, size_t dv,
                     const double *q, ptrdiff_t qsb, ptrdiff_t qsr, const double *k,
                     ptrdiff_t ksb, ptrdiff_t ksr, const double *v, ptrdiff_t vsb, ptrdiff_t vsr,
                     const double *mask, ptrdiff_t msb, ptrdiff_t msh, ptrdiff_t msr,
                     double scale, double *out, ptrdiff_t osb, ptrdiff_t osr, double *weights,
                     int nthreads);

#ifdef __cplusplus
}
#endif
#endif /* MK_OPS_H */
