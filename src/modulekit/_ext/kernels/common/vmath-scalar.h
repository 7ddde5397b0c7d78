/* common/vmath.inc.h for one float at a time (the portable kernels and every SIMD path's
 * reference): mk_exp_f32x1, mk_sigmoid_f32x1, ..., mk_act_f32x1(x, act, lo, hi). fmaf is the
 * fused multiply-add the SIMD paths use (a hardware FMA where the C library finds one). */
#ifndef MK_COMMON_VMATH_SCALAR_H
#define MK_COMMON_VMATH_SCALAR_H

#include <math.h>

#include "common/act.h"


/* p * 2^n, rounded once (as AVX-512's scalef and the AVX2 paths' two exact steps) */
static inline float mk_vm1_scale2(float p, float n) { return n != n ? n + p : ldexpf(p, (int)n); }
static inline double mk_vd1_scale2(double p, double n) { return n != n ? n + p : ldexp(p, (int)n); }

#define VM_ATTR static inline
#define VM_T float
#define VM_FN(name) mk_##name##_f32x1
#define VM_SET1(c) ((float)(c))
#define VM_ADD(a, b) ((a) + (b))
#define VM_SUB(a, b) ((a) - (b))
#define VM_MUL(a, b) ((a) * (b))
#define VM_DIV(a, b) ((a) / (b))
#define VM_FMA(a, b, c) fmaf((a), (b), (c))
#define VM_FNMA(a, b, c) fmaf(-(a), (b), (c))
#define VM_FMS(a, b, c) fmaf((a), (b), -(c))
#define VM_MAX(a, b) ((a) > (b) ? (a) : (b)) /* (pure operands: evaluated twice) */
#define VM_MIN(a, b) ((a) < (b) ? (a) : (b))
#define VM_ABS(v) fabsf(v)
#define VM_ROUND(v) nearbyintf(v)
#define VM_SCALE2(p, n) mk_vm1_scale2((p), (n))
#define VM_SEL_LT(a, b, x, y) ((a) < (b) ? (x) : (y))
#define VM_SEL_GE(a, b, x, y) ((a) >= (b) ? (x) : (y))
#define VM_SIGN_OF(v, s) copysignf((v), (s)) /* v >= +0: the same as v | sign(s) */
#define VD_T double
#define VD_FN(name) mk_##name##_f64x1
#define VD_SET1(c) ((double)(c))
#define VD_ADD(a, b) ((a) + (b))
#define VD_SUB(a, b) ((a) - (b))
#define VD_MUL(a, b) ((a) * (b))
#define VD_DIV(a, b) ((a) / (b))
#define VD_FMA(a, b, c) fma((a), (b), (c))
#define VD_FNMA(a, b, c) fma(-(a), (b), (c))
#define VD_MAX(a, b) ((a) > (b) ? (a) : (b))
#define VD_MIN(a, b) ((a) < (b) ? (a) : (b))
#define VD_ABS(v) fabs(v)
#define VD_ROUND(v) nearbyint(v)
#define VD_SCALE2(p, n) mk_vd1_scale2((p), (n))
#define VD_SEL_LT(a, b, x, y) ((a) < (b) ? (x) : (y))
#define VD_SIGN_OF(v, s) copysign((v), (s))
#define VM_WIDEN(x, lo, hi) const double lo = (double)(x)
#define VM_NARROW(lo, hi) ((float)(lo)) /* one lane: hi is never formed */

#include "common/vmath.inc.h"
#include "common/vmath-undef.h"

#endif /* MK_COMMON_VMATH_SCALAR_H */
