/* The vector vocabulary of common/vmath.inc.h (listed there) on one lane, for scalar code:
 * VM_* on a float, or on a double where the including file defines VM_F64 first (a kernel
 * template that also runs in float64; vmath.inc.h's math itself is float32 only), and VD_* on
 * a double. No include guard: each inclusion defines the vocabulary again, and
 * common/vmath-undef.h ends it. */
#ifndef MK_COMMON_VOPS_SCALAR_FNS
#define MK_COMMON_VOPS_SCALAR_FNS
#include <math.h>

/* p * 2^n, rounded once (as AVX-512's scalef and the AVX2 paths' two exact steps) */
static inline float mk_vm1_scale2(float p, float n) { return n != n ? n + p : ldexpf(p, (int)n); }
static inline double mk_vd1_scale2(double p, double n) { return n != n ? n + p : ldexp(p, (int)n); }
#endif

#ifdef VM_F64
#define VM_T double
#define VM_FN(name) mk_##name##_f64x1
#define VM_LIBM(name) name /* the libm function of the lane type */
#define VM_SCALE2(p, n) mk_vd1_scale2((p), (n))
#else
#define VM_T float
#define VM_FN(name) mk_##name##_f32x1
#define VM_LIBM(name) name##f
#define VM_SCALE2(p, n) mk_vm1_scale2((p), (n))
#endif
#define VM_TARGET
#define VM_ATTR static inline
#define VM_ELEM VM_T
#define VM_W 1
#define VM_LOAD(p) (*(p))
#define VM_STORE(p, v) (*(p) = (v))
#define VM_LOADN(p, n) (*(p)) /* one lane: n is 1 */
#define VM_STOREN(p, v, n) (*(p) = (v))
#define VM_SET1(c) ((VM_T)(c))
#define VM_ADD(a, b) ((a) + (b))
#define VM_SUB(a, b) ((a) - (b))
#define VM_MUL(a, b) ((a) * (b))
#define VM_DIV(a, b) ((a) / (b))
#define VM_FMA(a, b, c) VM_LIBM(fma)((a), (b), (c))
#define VM_FNMA(a, b, c) VM_LIBM(fma)(-(a), (b), (c))
#define VM_FMS(a, b, c) VM_LIBM(fma)((a), (b), -(c))
#define VM_MAX(a, b) ((a) > (b) ? (a) : (b)) /* (pure operands: evaluated twice) */
#define VM_MIN(a, b) ((a) < (b) ? (a) : (b))
#define VM_ABS(v) VM_LIBM(fabs)(v)
#define VM_ROUND(v) VM_LIBM(nearbyint)(v)
#define VM_SEL_LT(a, b, x, y) ((a) < (b) ? (x) : (y))
#define VM_SEL_GE(a, b, x, y) ((a) >= (b) ? (x) : (y))
#define VM_SIGN_OF(v, s) VM_LIBM(copysign)((v), (s)) /* v >= +0: the same as v | sign(s) */
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
