/* Group normalisation (GroupNorm, and InstanceNorm as one group per channel) over a C-contiguous
 * (N, C, S) array: each (n, g) group is the contiguous span of C/G channels of S values.
 *
 * Per-ISA span kernels (f32-norm-scalar.c; f32-norm-{avx2,avx512}.c instantiate the one SIMD
 * template f32-norm.inc.h), chosen once per call by the config table in norm-config.c, and
 * drivers (norm-driver.c) that run the groups on up to nthreads OpenMP threads: each group's
 * moments, then its normalisation while the group is still in cache (one read from memory,
 * one write). The C functions only compute: every shape, dtype and alignment check happens in
 * modulekit/_ext/_norm.pyx before any of them runs. */
#ifndef MK_NORM_H
#define MK_NORM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* moments: *sum += sum(x[i] - shift), *sumsq += sum((x[i] - shift)^2) over n values; float32
 *   lanes over blocks of at most MK_NORM_BLOCK values, each block's totals added in double (so
 *   the error does not grow with the group's size).
 * affine: y[i] = (x[i] - mean) * scale + bias over n values; y may alias x (subtracting first
 *   keeps a constant group exactly at bias, where x * scale + (bias - mean * scale) would not). */
#define MK_NORM_BLOCK 1024
typedef void (*mk_moments_f32)(size_t n, const float *x, float shift, double *sum,
                               double *sumsq);
typedef void (*mk_affine_f32)(size_t n, const float *x, float mean, float scale, float bias,
                              float *y);

void mk_moments_f32_scalar(size_t n, const float *x, float shift, double *sum, double *sumsq);
void mk_moments_f32_avx2(size_t n, const float *x, float shift, double *sum, double *sumsq);
void mk_moments_f32_avx512(size_t n, const float *x, float shift, double *sum, double *sumsq);
void mk_affine_f32_scalar(size_t n, const float *x, float mean, float scale, float bias,
                          float *y);
void mk_affine_f32_avx2(size_t n, const float *x, float mean, float scale, float bias,
                        float *y);
void mk_affine_f32_avx512(size_t n, const float *x, float mean, float scale, float bias,
                          float *y);
/* The affine pass with non-temporal (streaming) stores, for outputs much larger than the
 * caches; NULL where the level has none. mk_norm_sfence_avx512 orders them. */
void mk_affine_f32_avx512_nt(size_t n, const float *x, float mean, float scale, float bias,
                             float *y);
void mk_norm_sfence_avx512(void);

typedef struct {
    const char *name; /* the variant names, as XNNPACK's: "f32-moments-32-avx512" */
    mk_moments_f32 moments;
    mk_affine_f32 affine;
    mk_affine_f32 affine_nt; /* streaming-store variant, or NULL */
    void (*sfence)(void);    /* orders affine_nt's stores (with affine_nt) */
} mk_norm_config;

/* Outputs of at least this many bytes use affine_nt where the level has one (0: never);
 * mk_norm_set_streaming_min_bytes returns the previous value. */
size_t mk_norm_streaming_min_bytes(void);
size_t mk_norm_set_streaming_min_bytes(size_t bytes);

/* The kernels for an mk_isa level (norm-config.c). */
const mk_norm_config *mk_norm_config_for(int isa);

/* ---- drivers ----------------------------------------------------------------------------
 * y[n, c, s] = (x[n, c, s] - mean[n, g]) / sqrt(var[n, g] + eps) * gamma[c] + beta[c] for
 * g = c / (C / G), mean and (biased) variance over the group's C/G * S values. gamma, beta may
 * be NULL (1 and 0). x and y are C-contiguous (N, C, S); y may alias x. mean and rstd, when not
 * NULL, receive each group's mean and 1 / sqrt(var + eps) (N * G values). */
void mk_groupnorm_f32(int isa, size_t n, size_t c, size_t s, size_t groups, const float *x,
                      const float *gamma, const float *beta, double eps, float *y,
                      double *mean, double *rstd, int nthreads);
void mk_groupnorm_f64(size_t n, size_t c, size_t s, size_t groups, const double *x,
                      const double *gamma, const double *beta, double eps, double *y,
                      double *mean, double *rstd, int nthreads);

#ifdef __cplusplus
}
#endif

#endif /* MK_NORM_H */
