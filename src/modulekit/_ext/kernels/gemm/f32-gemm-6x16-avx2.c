/* f32 GEMM microkernel, 6x16 register block (12 accumulators), AVX2.
 * One instantiation of gemm-ukernel.inc.h per weight storage:
 *   mk_f32_gemm_6x16__avx2: float32 weights
 *   mk_f32_f16w_gemm_6x16__avx2: float16 weights (F16C widening)
 *   mk_f32_bf16w_gemm_6x16__avx2: bfloat16 weights (widened by a 16-bit shift)
 * Compute and output float32. Chosen in gemm-config.c. */
#include "isa.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#define MK_OPS_AVX2_F32
#include "gemm-ops.h"

#define MK_FN mk_f32_gemm_6x16__avx2
#define MK_MR 6
#define MK_NV 2
#define MK_WT float
#define MK_LOADW(p) MK_LOADW_F32(p)
#include "gemm-ukernel.inc.h"

#define MK_FN mk_f32_f16w_gemm_6x16__avx2
#define MK_MR 6
#define MK_NV 2
#define MK_WT uint16_t
#define MK_LOADW(p) MK_LOADW_F16(p)
#include "gemm-ukernel.inc.h"

#define MK_FN mk_f32_bf16w_gemm_6x16__avx2
#define MK_MR 6
#define MK_NV 2
#define MK_WT uint16_t
#define MK_LOADW(p) MK_LOADW_BF16(p)
#include "gemm-ukernel.inc.h"

#endif /* MK_X86 */
