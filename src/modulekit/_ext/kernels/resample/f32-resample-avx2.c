/* AVX2 + FMA row kernels of the 2-D resampling: resample/f32-resample.inc.h on 8 lanes. */
#include "common/vmath-avx2.h"
#include "common/vops-avx2.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#include "resample.h"

#define MK_RESAMPLE_FN(name) mk_f32_##name##__avx2
#include "resample/f32-resample.inc.h"
#include "common/vmath-undef.h"

#endif /* MK_X86 */
