/* common/vmath.inc.h on 16 float32 lanes (AVX-512 F/BW/VL/DQ): mk_exp_f32x16, ...,
 * mk_act_f32x16(v, act, lo, hi). Include in x86 kernel files only (MK_X86); the callers carry
 * MK_TARGET_AVX512. */
#ifndef MK_COMMON_VMATH_AVX512_H
#define MK_COMMON_VMATH_AVX512_H

#include "isa.h"
#if MK_X86
#include "common/act.h"

#include "common/vops-avx512.h"
#include "common/vmath.inc.h"
#include "common/vmath-undef.h"

#endif /* MK_X86 */
#endif /* MK_COMMON_VMATH_AVX512_H */
