/* common/vmath.inc.h on 8 float32 lanes (AVX2 + FMA): mk_exp_f32x8, ..., mk_act_f32x8(v, act,
 * lo, hi). Include in x86 kernel files only (MK_X86); the callers carry MK_TARGET_AVX2. */
#ifndef MK_COMMON_VMATH_AVX2_H
#define MK_COMMON_VMATH_AVX2_H

#include "isa.h"
#if MK_X86
#include "common/act.h"

#include "common/vops-avx2.h"
#include "common/vmath.inc.h"
#include "common/vmath-undef.h"

#endif /* MK_X86 */
#endif /* MK_COMMON_VMATH_AVX2_H */
