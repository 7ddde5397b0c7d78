/* f32-vact-avx2: y = act(x), 8 lanes at a time, masked tail. */
#include "common/vmath-avx2.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#include "common/vops-avx2.h"
#define MK_VACT_NAME mk_f32_vact__avx2
#include "common/f32-vact.inc.h"
#include "common/vmath-undef.h"

#endif /* MK_X86 */
