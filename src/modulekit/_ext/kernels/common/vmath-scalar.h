/* common/vmath.inc.h for one float at a time (the portable kernels and every SIMD path's
 * reference): mk_exp_f32x1, mk_sigmoid_f32x1, ..., mk_act_f32x1(x, act, lo, hi). fmaf is the
 * fused multiply-add the SIMD paths use (a hardware FMA where the C library finds one). */
#ifndef MK_COMMON_VMATH_SCALAR_H
#define MK_COMMON_VMATH_SCALAR_H

#include "common/act.h"

#include "common/vops-scalar.h"
#include "common/vmath.inc.h"
#include "common/vmath-undef.h"

#endif /* MK_COMMON_VMATH_SCALAR_H */
