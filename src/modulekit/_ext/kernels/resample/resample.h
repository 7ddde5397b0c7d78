/* 2-D resampling of float32 NCHW planes: bilinear (separable, two taps per axis) and nearest.
 *
 * The tap tables (source indices and weights of every output column and row) are computed
 * by the caller (modulekit/nn/_interp.py computes them exactly as torch does); the kernels only
 * gather and blend. Bilinear: each thread interpolates an input row horizontally once into a
 * row cache (two slots) and blends the two cached rows of each output row vertically, so a
 * row shared by consecutive output rows (upsampling) is resampled once.
 *
 * Any other separable mode (bicubic, linear / trilinear, nearest in 1-D / 3-D, antialiased
 * filters) runs one axis at a time through mk_f32_taps_axis with T taps per output sample.
 *
 * Rows are handed out in chunks from a shared counter; every region takes part in the
 * contention back-off (common/team.h).
 *
 * Per-ISA row kernels (f32-resample-scalar.c; f32-resample-{avx2,avx512}.c instantiate the one
 * SIMD template f32-resample.inc.h), one config table (resample-config.c) and the drivers
 * (resample-driver.c). Every index is checked in modulekit/_ext/_resample.pyx before any of
 * this runs. */
#ifndef MK_RESAMPLE_H
#define MK_RESAMPLE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* out[i] = row[x0[i]] * w0[i] + row[x1[i]] * w1[i], i < n */
typedef void (*mk_f32_lerp_row)(size_t n, const float *row, const int32_t *x0,
                                const int32_t *x1, const float *w0, const float *w1,
                                float *out);
/* out[i] = p[i] * a + q[i] * b, i < n */
typedef void (*mk_f32_blend_row)(size_t n, const float *p, const float *q, float a, float b,
                                 float *out);
/* out[i] = row[x[i]], i < n */
typedef void (*mk_f32_gather_row)(size_t n, const float *row, const int32_t *x, float *out);

/* Weighted sum of whole rows: out[i] = sum_t w[t * ws] * base[idx[t * ws] * stride + i], i < n
 * (ntaps taps; ws is the tap stride of idx and w). */
typedef void (*mk_f32_wsum_rows)(size_t n, size_t ntaps, const float *base, size_t stride,
                                 const int32_t *idx, const float *w, size_t ws, float *out);
/* Weighted gather: out[o] = sum_t w[t * ws + o] * row[idx[t * ws + o]], o < n (tap-major
 * tables, ws >= n). */
typedef void (*mk_f32_wgather_row)(size_t n, size_t ntaps, const float *row, const int32_t *idx,
                                   const float *w, size_t ws, float *out);

typedef struct {
    mk_f32_lerp_row lerp;
    mk_f32_blend_row blend;
    mk_f32_gather_row gather;
    mk_f32_wsum_rows wsum;
    mk_f32_wgather_row wgather;
} mk_resample_config;

/* The row kernels of an ISA level (an mk_isa value; out of range: generic). */
const mk_resample_config *mk_resample_config_for(int isa);

void mk_f32_lerp_row__scalar(size_t, const float *, const int32_t *, const int32_t *,
                             const float *, const float *, float *);
void mk_f32_blend_row__scalar(size_t, const float *, const float *, float, float, float *);
void mk_f32_gather_row__scalar(size_t, const float *, const int32_t *, float *);
void mk_f32_wsum_rows__scalar(size_t, size_t, const float *, size_t, const int32_t *, const float *,
                         size_t, float *);
void mk_f32_wgather_row__scalar(size_t, size_t, const float *, const int32_t *, const float *,
                           size_t, float *);
void mk_f32_lerp_row__avx2(size_t, const float *, const int32_t *, const int32_t *,
                           const float *, const float *, float *);
void mk_f32_blend_row__avx2(size_t, const float *, const float *, float, float, float *);
void mk_f32_gather_row__avx2(size_t, const float *, const int32_t *, float *);
void mk_f32_wsum_rows__avx2(size_t, size_t, const float *, size_t, const int32_t *, const float *,
                         size_t, float *);
void mk_f32_wgather_row__avx2(size_t, size_t, const float *, const int32_t *, const float *,
                           size_t, float *);
void mk_f32_lerp_row__avx512(size_t, const float *, const int32_t *, const int32_t *,
                             const float *, const float *, float *);
void mk_f32_blend_row__avx512(size_t, const float *, const float *, float, float, float *);
void mk_f32_gather_row__avx512(size_t, const float *, const int32_t *, float *);
void mk_f32_wsum_rows__avx512(size_t, size_t, const float *, size_t, const int32_t *, const float *,
                         size_t, float *);
void mk_f32_wgather_row__avx512(size_t, size_t, const float *, const int32_t *, const float *,
                           size_t, float *);

/* Bilinear: planes planes of ih x iw (C-contiguous, x) to oh x ow (y). Output row oy blends
 * input rows ys0[oy], ys1[oy] with weights wy0[oy], wy1[oy]; output column ox blends columns
 * xs0[ox], xs1[ox] with wx0[ox], wx1[ox]. Rows (plane, oy) run on up to nthreads threads.
 * Returns 0, or -1 when the threads' row caches could not be allocated (nothing written). */
int mk_f32_bilinear2d(int isa, size_t planes, size_t ih, size_t iw, size_t oh, size_t ow,
                      const float *x, float *y, const int32_t *ys0, const int32_t *ys1,
                      const float *wy0, const float *wy1, const int32_t *xs0,
                      const int32_t *xs1, const float *wx0, const float *wx1, int nthreads);

/* Nearest: y[p, oy, ox] = x[p, ys[oy], xs[ox]]; an output row equal to the previous one is
 * copied. */
void mk_f32_nearest2d(int isa, size_t planes, size_t ih, size_t iw, size_t oh, size_t ow,
                      const float *x, float *y, const int32_t *ys, const int32_t *xs,
                      int nthreads);

/* One axis of a separable resampling: x viewed as (outer, len, inner), C-contiguous, to y
 * (outer, out_len, inner): y[a, o, i] = sum_t w[t, o] * x[a, idx[t, o], i] for t < ntaps
 * (tap-major tables of ntaps x out_len). inner > 1 runs whole rows (vectorised over inner),
 * inner == 1 weighted gathers; (a, o) rows / a rows on up to nthreads threads. */
void mk_f32_taps_axis(int isa, size_t outer, size_t len, size_t inner, size_t out_len,
                      size_t ntaps, const float *x, float *y, const int32_t *idx, const float *w,
                      int nthreads);

#ifdef __cplusplus
}
#endif
#endif /* MK_RESAMPLE_H */
