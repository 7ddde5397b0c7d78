/* AVX-512 row kernels of the 2-D resampling: resample/f32-resample.inc.h on 16 lanes. */
#include "common/vmath-avx512.h"
#include "common/vops-avx512.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#include "resample.h"

#define MK_RESAMPLE_FN(name) mk_f32_##name##__avx512
#include "resample/f32-resample.inc.h"
#include "common/vmath-undef.h"

#endif /* MK_X86 */
