/* AVX2 + FMA span kernels of the group normalisation: norm/f32-norm.inc.h on 8 lanes. */
#include "common/vmath-avx2.h"
#include "common/vops-avx2.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#include "norm.h"

#define MK_NORM_FN(name) mk_##name##_f32_avx2
#include "norm/f32-norm.inc.h"
#include "common/vmath-undef.h"

#endif /* MK_X86 */
