/* The activations of every kernel family: one enum, one float32 math (common/vmath.inc.h, the
 * same operations on every ISA path), one float64 reference (libm), and the element-wise entry
 * points.
 *
 * The GEMM epilogue, the convolution epilogue and nn.functional's activations all evaluate
 * these functions, so an activation gives the same bits for the same input whichever kernel
 * applies it. The float32 functions are bit-identical across the ISA paths too: the scalar,
 * AVX2 and AVX-512 instantiations of vmath.inc.h perform the same IEEE operations in the same
 * order (explicit FMAs: fmaf in the scalar one; the build compiles with -ffp-contract=off so
 * the compiler fuses nothing on its own), and 2^n scaling rounds once on every path.
 *
 * float32 accuracy against the exact value (tests/test_kernel_math.py; the bounds per activation
 * are in docs/api.md, "Activation numerics"): GELU-tanh within 1 ulp (evaluated in double),
 * tanh, sigmoid and SiLU within 3, GELU (erf form) within 8 (evaluated in float32). NaN in
 * gives NaN out; +-inf give the limits torch's float64 functions give (NaN where torch's
 * formula multiplies inf by 0: SiLU, GELU and Hardswish at -inf). */
#ifndef MK_COMMON_ACT_H
#define MK_COMMON_ACT_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Activation codes, one enum for every kernel family. RELU, RELU6 and CLAMP are min/max
 * (exact); the rest are evaluated by the math below. */
typedef enum {
    MK_ACT_NONE = 0,
    MK_ACT_RELU = 1,       /* max(x, 0) */
    MK_ACT_CLAMP = 2,      /* min(max(x, lo), hi) with the caller's bounds */
    MK_ACT_RELU6 = 3,      /* min(max(x, 0), 6) */
    MK_ACT_HARDSWISH = 4,  /* x * min(max(x + 3, 0), 6) / 6 */
    MK_ACT_GELU_ERF = 5,   /* x / 2 * (1 + erf(x / sqrt(2))) */
    MK_ACT_GELU_TANH = 6,  /* x / 2 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))) */
    MK_ACT_SILU = 7,       /* x * sigmoid(x) */
    MK_ACT_SIGMOID = 8,    /* 1 / (1 + exp(-x)) */
    MK_ACT_TANH = 9,
    MK_ACT_COUNT = 10
} mk_act;

/* y[i] = act(x[i]) for n float32 values (x == y allowed), on the given ISA path (mk_isa; a
 * level this build lacks falls back to the next lower one). lo, hi: the bounds of
 * MK_ACT_CLAMP, ignored otherwise. nthreads > 1 splits large arrays over OpenMP threads. */
void mk_act_f32(int isa, size_t n, const float *x, float *y, int act, float lo, float hi,
                int nthreads);
/* The same in float64 (the libm reference below; every ISA path). */
void mk_act_f64(size_t n, const double *x, double *y, int act, double lo, double hi,
                int nthreads);

/* The per-ISA float32 row functions behind mk_act_f32 (the GEMM calls them on its tiles). */
void mk_f32_vact__scalar(size_t n, const float *x, float *y, int act, float lo, float hi);
void mk_f32_vact__avx2(size_t n, const float *x, float *y, int act, float lo, float hi);
void mk_f32_vact__avx512(size_t n, const float *x, float *y, int act, float lo, float hi);

#ifdef __cplusplus
}
#endif

/* Scalar float32 instantiation of the math: mk_act_f32x1(x, act, lo, hi) and friends, the
 * per-element form the portable kernels inline. */
#include "common/vmath-scalar.h"

/* float64: libm, a few roundings from values accurate to about 1 ulp (GELU's erf form through
 * erfc, so the negative tail keeps its relative accuracy). */
#include <math.h>
static inline double mk_act_f64x1(double x, int act, double lo, double hi) {
    switch (act) {
        case MK_ACT_RELU:
            return 0.0 > x ? 0.0 : x; /* NaN and -0.0 pass through, as max(0, x) */
        case MK_ACT_CLAMP:
            x = lo > x ? lo : x;
            return hi < x ? hi : x;
        case MK_ACT_RELU6:
            x = 0.0 > x ? 0.0 : x;
            return 6.0 < x ? 6.0 : x;
        case MK_ACT_HARDSWISH: {
            double t = x + 3.0;
            t = 0.0 > t ? 0.0 : t;
            t = 6.0 < t ? 6.0 : t;
            return x * t / 6.0;
        }
        case MK_ACT_GELU_ERF: {
            /* x/2 erfc(z), z = -x/sqrt(2) carried as zh + zl (1/sqrt(2) in two parts, the
             * product's rounding error by FMA): erfc(zh + zl) = erfc(zh) - zl 2/sqrt(pi)
             * exp(-zh^2), so the argument's rounding does not cost 2 z^2 ulp in the tail */
            const double ch = 0.70710678118654757, cl = -4.8336466567264567e-17;
            if (!isfinite(x)) return 0.5 * x * erfc(-x * ch); /* -inf: NaN, as torch */
            const double zh = -x * ch;
            const double zl = fma(-x, ch, -zh) - x * cl;
            return 0.5 * x * (erfc(zh) - zl * 1.1283791670955126 * exp(-zh * zh));
        }
        case MK_ACT_GELU_TANH: /* x/2 (1 + tanh(u)) == x / (1 + exp(-2u)): no cancellation */
            return x / (1.0 + exp(-2.0 * (0.79788456080286535588 * (x + 0.044715 * x * x * x))));
        case MK_ACT_SILU: { /* x * sigmoid(x) with exp(-|x|): no overflow, both tails exact */
            const double e = exp(-fabs(x));
            return (x >= 0.0 ? x : x * e) / (1.0 + e);
        }
        case MK_ACT_SIGMOID: {
            const double e = exp(-fabs(x));
            return (x >= 0.0 ? 1.0 : e) / (1.0 + e);
        }
        case MK_ACT_TANH:
            return tanh(x);
        default:
            return x;
    }
}

#endif /* MK_COMMON_ACT_H */
