/* Scalar epilogue activations (libm, double precision) shared by every path: the portable
 * microkernels call them per element, the float64 kernels of every ISA on the stored tile.
 * float32 results are computed in double and rounded once, so they are within one float32
 * rounding of the exact value. Also: exact software float16 -> float32 widening. */
#include <math.h>
#include <string.h>

#include "gemm.h"

float mk_f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
    uint32_t u;
    float f;
    if (e == 0x1F) {
        u = sign | 0x7F800000u | (mant << 13); /* inf / NaN (payload kept) */
    } else if (e == 0) {
        if (mant == 0) {
            u = sign;
        } else { /* subnormal: mant * 2^-24, exact in float32 */
            f = (float)mant * 5.9604644775390625e-8f;
            memcpy(&u, &f, sizeof u);
            u |= sign;
        }
    } else {
        u = sign | ((e + 112u) << 23) | (mant << 13);
    }
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline double mk_act_transcendental(double x, int act) {
    switch (act) {
        case MK_ACT_GELU_ERF:
            return 0.5 * x * erfc(-x * 0.70710678118654752440);
        case MK_ACT_GELU_TANH: {
            /* x/2 (1 + tanh(u)) == x * sigmoid(2u): no cancellation for negative x */
            const double u = 0.79788456080286535588 * (x + 0.044715 * x * x * x);
            return x / (1.0 + exp(-2.0 * u));
        }
        case MK_ACT_SILU:
            return x / (1.0 + exp(-x));
        case MK_ACT_SIGMOID:
            return 1.0 / (1.0 + exp(-x));
        case MK_ACT_TANH:
            return tanh(x);
        default:
            return x;
    }
}

float mk_act_scalar_f32(float x, const mk_epilogue *ep) {
    switch (ep->act) {
        case MK_ACT_NONE:
            return x;
        case MK_ACT_RELU:
        case MK_ACT_CLAMP: /* NaN passes through */
            return x < ep->lo32 ? ep->lo32 : (x > ep->hi32 ? ep->hi32 : x);
        default:
            return (float)mk_act_transcendental((double)x, ep->act);
    }
}

double mk_act_scalar_f64(double x, const mk_epilogue *ep) {
    switch (ep->act) {
        case MK_ACT_NONE:
            return x;
        case MK_ACT_RELU:
        case MK_ACT_CLAMP:
            return x < ep->lo ? ep->lo : (x > ep->hi ? ep->hi : x);
        default:
            return mk_act_transcendental(x, ep->act);
    }
}

void mk_act_tile_f32_scalar(size_t rows, size_t nc, void *c_, size_t ldc, const mk_epilogue *ep) {
    float *c = (float *)c_; /* in/out: rows x nc, row stride ldc */
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < nc; j++) c[i * ldc + j] = mk_act_scalar_f32(c[i * ldc + j], ep);
}

void mk_act_tile_f64_scalar(size_t rows, size_t nc, void *c_, size_t ldc, const mk_epilogue *ep) {
    double *c = (double *)c_; /* in/out: rows x nc, row stride ldc */
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < nc; j++) c[i * ldc + j] = mk_act_scalar_f64(c[i * ldc + j], ep);
}
