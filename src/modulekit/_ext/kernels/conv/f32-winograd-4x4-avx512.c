/* Winograd F(4x4, 3x3) input/output transforms, avx512: the template of
 * f32-winograd-transform.inc.h compiled for this instruction set. */
#include "isa.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#include "conv-simd.h"

#define WINO_M 4
#define WINO_VL 16
#define WINO_TARGET MK_T512
#define WINO_IN mk_f32_wino_in_4x4_avx512
#define WINO_OUT mk_f32_wino_out_4x4_avx512
#include "f32-winograd-transform.inc.h"

#endif /* MK_X86 */
