/* AVX-512 span kernels of the group normalisation: norm/f32-norm.inc.h on 16 lanes, with the
 * streaming-store affine pass. */
#include "common/vmath-avx512.h"
#include "common/vops-avx512.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#include <stdint.h>

#include "norm.h"

#define MK_NORM_FN(name) mk_##name##_f32_avx512
#define MK_NORM_NT_FN mk_affine_f32_avx512_nt
#include "norm/f32-norm.inc.h"
#include "common/vmath-undef.h"

MK_TARGET_AVX512 void mk_norm_sfence_avx512(void) { _mm_sfence(); }

#endif /* MK_X86 */
