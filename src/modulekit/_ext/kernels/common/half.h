/* The one set of scalar float16 / bfloat16 conversions of every kernel family (casts, weight
 * widening in the GEMM, convolution and embedding kernels), one element at a time, on bit
 * patterns.
 *
 * These define the results every instruction-set path must reproduce bit for bit; the SIMD
 * kernels also use them for their tails and, where a SIMD fix-up would cost more than it
 * saves, for blocks that hold a NaN.
 *
 * Rules (what NumPy 2.x and ml_dtypes give):
 * - Finite values and infinities: correctly rounded, round-to-nearest-even, directly from the
 *   source value (never double-rounded through float32), overflowing to +-inf, with gradual
 *   underflow (subnormals) and signed zeros kept.
 * - float32/float64 -> float16 NaN (NumPy): sign kept, the top 10 payload bits kept as they are
 *   (a signalling NaN stays signalling); a payload that becomes 0 turns into 1 (stays NaN).
 * - float16 -> float32/float64 NaN (NumPy): sign and payload copied, not quieted.
 * - float32 <-> float64 (NumPy, a C cast): the hardware conversion, which quiets NaNs.
 * - anything -> bfloat16 NaN (ml_dtypes): the canonical quiet NaN 0x7fc0 with the sign kept.
 * - bfloat16 -> float32: the bits shifted up (exact, NaNs unchanged); bfloat16 -> float64:
 *   through float32 with the hardware conversion (quiets NaNs), as ml_dtypes does.
 * - bfloat16 -> float16 NaN (ml_dtypes): the canonical quiet NaN 0x7e00 with the sign kept.
 *
 * float64 -> float16/bfloat16 rounds once: the double is first rounded to float32 with
 * round-to-odd (truncate, then set the last bit if anything was lost), which keeps enough
 * information for the second rounding to be the correctly rounded one (float32 has at least
 * two more significand bits than either target at every exponent the targets can represent).
 */
#ifndef MK_COMMON_HALF_H
#define MK_COMMON_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t mk_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float mk_f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint64_t mk_f64_bits(double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

static inline double mk_f64_from_bits(uint64_t u) {
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

/* float32 bits -> float16 bits, round-to-nearest-even; NaN as NumPy. */
static inline uint16_t mk_f32_to_f16_bits(uint32_t f) {
    const uint16_t sign = (uint16_t)((f >> 16) & 0x8000u);
    const uint32_t a = f & 0x7fffffffu;
    if (a >= 0x7f800000u) {              /* inf or NaN */
        if (a == 0x7f800000u) return sign | 0x7c00u;
        uint16_t payload = (uint16_t)((a >> 13) & 0x3ffu);
        return sign | 0x7c00u | (payload ? payload : 1u);
    }
    if (a >= 0x477ff000u) return sign | 0x7c00u; /* >= 65520: rounds to inf */
    if (a >= 0x38800000u) {                       /* >= 2^-14: a normal float16 */
        uint32_t r = a - 0x38000000u;             /* rebias the exponent: 127 -> 15 */
        r += 0xfffu + ((r >> 13) & 1u);           /* round to nearest, ties to even */
        return sign | (uint16_t)(r >> 13);
    }
    if (a <= 0x33000000u) return sign;            /* <= 2^-25 (a tie, to even): zero */
    /* float16 subnormal: the value in units of 2^-24 is m * 2^(e - 126). */
    const uint32_t e = a >> 23;                   /* 102 ... 112 */
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - e;              /* 14 ... 24 */
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    q += (rem > half) | ((rem == half) & (q & 1u)); /* a carry into 0x400 is the smallest normal */
    return sign | (uint16_t)q;
}

/* float16 bits -> float32 bits, exact; NaN payloads copied (NumPy). */
static inline uint32_t mk_f16_to_f32_bits(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1fu;
    const uint32_t m = h & 0x3ffu;
    if (e == 0x1fu) return sign | 0x7f800000u | (m << 13);
    if (e == 0) {
        if (m == 0) return sign;
        return sign | mk_f32_bits((float)m * 0x1p-24f); /* subnormal: exact product */
    }
    return sign | ((e + 112u) << 23) | (m << 13);
}

/* float32 bits -> bfloat16 bits, round-to-nearest-even; NaN -> canonical (ml_dtypes). */
static inline uint16_t mk_f32_to_bf16_bits(uint32_t u) {
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)(((u >> 16) & 0x8000u) | 0x7fc0u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline uint32_t mk_bf16_to_f32_bits(uint16_t b) { return (uint32_t)b << 16; }

/* float16 / bfloat16 -> float32 values (exact; the weight-widening kernels' scalar tails). */
static inline float mk_f16_to_f32(uint16_t h) { return mk_f32_from_bits(mk_f16_to_f32_bits(h)); }
static inline float mk_bf16_to_f32(uint16_t b) { return mk_f32_from_bits(mk_bf16_to_f32_bits(b)); }

/* A non-NaN double rounded to float32 with round-to-odd (see the header comment). */
static inline uint32_t mk_f64_to_f32_rto_bits(double d) {
    const float f = (float)d;                 /* round-to-nearest-even */
    const double back = (double)f;
    uint32_t u = mk_f32_bits(f);
    if (__builtin_fabs(back) > __builtin_fabs(d)) u -= 1u; /* step back towards zero */
    if (back != d) u |= 1u;                               /* inexact: make it odd */
    return u;
}

/* float64 -> float16 bits, rounded once; NaN as NumPy. */
static inline uint16_t mk_f64_to_f16_bits(double d) {
    const uint64_t u = mk_f64_bits(d);
    if ((u & 0x7fffffffffffffffull) > 0x7ff0000000000000ull) {
        const uint16_t sign = (uint16_t)((u >> 48) & 0x8000u);
        const uint16_t payload = (uint16_t)((u >> 42) & 0x3ffu);
        return sign | 0x7c00u | (payload ? payload : 1u);
    }
    return mk_f32_to_f16_bits(mk_f64_to_f32_rto_bits(d));
}

/* float16 bits -> float64, exact; NaN payloads copied (NumPy). */
static inline double mk_f16_to_f64(uint16_t h) {
    if ((h & 0x7fffu) > 0x7c00u) {
        const uint64_t sign = (uint64_t)(h & 0x8000u) << 48;
        return mk_f64_from_bits(sign | 0x7ff0000000000000ull | ((uint64_t)(h & 0x3ffu) << 42));
    }
    return (double)mk_f32_from_bits(mk_f16_to_f32_bits(h));
}

/* float64 -> bfloat16 bits, rounded once; NaN -> canonical (ml_dtypes). */
static inline uint16_t mk_f64_to_bf16_bits(double d) {
    const uint64_t u = mk_f64_bits(d);
    if ((u & 0x7fffffffffffffffull) > 0x7ff0000000000000ull)
        return (uint16_t)(((u >> 48) & 0x8000u) | 0x7fc0u);
    return mk_f32_to_bf16_bits(mk_f64_to_f32_rto_bits(d));
}

/* bfloat16 -> float64 through float32 (the float -> double conversion quiets NaNs). */
static inline double mk_bf16_to_f64(uint16_t b) {
    return (double)mk_f32_from_bits(mk_bf16_to_f32_bits(b));
}

/* float16 -> bfloat16 (through the exact float32); NaN -> canonical (ml_dtypes). */
static inline uint16_t mk_f16_to_bf16_bits(uint16_t h) {
    if ((h & 0x7fffu) > 0x7c00u) return (uint16_t)((h & 0x8000u) | 0x7fc0u);
    return mk_f32_to_bf16_bits(mk_f16_to_f32_bits(h));
}

/* bfloat16 -> float16 (through the exact float32); NaN -> canonical 0x7e00 (ml_dtypes). */
static inline uint16_t mk_bf16_to_f16_bits(uint16_t b) {
    if ((b & 0x7fffu) > 0x7f80u) return (uint16_t)((b & 0x8000u) | 0x7e00u);
    return mk_f32_to_f16_bits(mk_bf16_to_f32_bits(b));
}

#endif /* MK_COMMON_HALF_H */
