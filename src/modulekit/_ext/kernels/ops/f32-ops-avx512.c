/* AVX-512 (F/BW/VL/DQ + FMA) row kernels: ops/f32-ops.inc.h on 16 lanes. */
#include "common/vmath-avx512.h"
#include "common/vops-avx512.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#include <math.h>

#include "ops.h"

#define MK_OPS_FN(name) mk_##name##_f32_avx512
#include "ops/f32-ops.inc.h"
#include "common/vmath-undef.h"

#endif /* MK_X86 */
