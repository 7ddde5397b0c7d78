/* Winograd F(2x2, 3x3) input/output transforms, avx2: the template of
 * f32-winograd-transform.inc.h compiled for this instruction set. */
#include "isa.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#include "conv-simd.h"

#define WINO_M 2
#define WINO_VL 8
#define WINO_TARGET MK_T256
#define WINO_IN mk_f32_wino_in_2x2_avx2
#define WINO_OUT mk_f32_wino_out_2x2_avx2
#include "f32-winograd-transform.inc.h"

#endif /* MK_X86 */
