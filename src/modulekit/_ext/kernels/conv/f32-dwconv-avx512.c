/* Depthwise convolution row kernels, AVX-512: conv/f32-dwconv.inc.h on 16 lanes. */
#include "common/vmath-avx512.h"
#include "common/vops-avx512.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#include <stddef.h>

#define MK_DWCONV_FN(name) mk_f32_##name##_avx512
#include "conv/f32-dwconv.inc.h"
#include "common/vmath-undef.h"

#endif /* MK_X86 */
