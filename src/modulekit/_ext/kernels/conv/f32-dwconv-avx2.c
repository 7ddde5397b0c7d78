/* Depthwise convolution row kernels, AVX2 + FMA: conv/f32-dwconv.inc.h on 8 lanes. */
#include "common/vmath-avx2.h"
#include "common/vops-avx2.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#include <stddef.h>

#define MK_DWCONV_FN(name) mk_f32_##name##_avx2
#include "conv/f32-dwconv.inc.h"
#include "common/vmath-undef.h"

#endif /* MK_X86 */
