/* f64 GEMM microkernel, 8x16 register block (16 accumulators), AVX512.
 * One instantiation of gemm-ukernel.inc.h per weight storage:
 *   mk_f64_gemm_8x16__avx512: float64 weights
 * Compute and output float64. Chosen in gemm-config.c. */
#include "isa.h"
#if MK_X86 /* x86 SIMD kernels: nothing elsewhere (see isa.h) */

#define MK_OPS_AVX512_F64
#include "gemm-ops.h"

#define MK_FN mk_f64_gemm_8x16__avx512
#define MK_MR 8
#define MK_NV 2
#define MK_WT double
#define MK_LOADW(p) MK_LOADW_F64(p)
#include "gemm-ukernel.inc.h"

#endif /* MK_X86 */
